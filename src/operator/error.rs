//! Why `tusk operator` stops.

use std::net::SocketAddr;

use crate::error::Category;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot load a Kubernetes client configuration: {0}")]
    KubeConfig(#[source] kube::Error),

    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

    #[error("HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),

    #[error(transparent)]
    Logging(#[from] crate::telemetry::Error),

    #[error(transparent)]
    Webhook(#[from] crate::webhook::Error),

    #[error("lost the leader lease {lease}; stopping so that another replica takes over")]
    LostLeadership { lease: String },
}

impl Error {
    pub fn category(&self) -> Category {
        match self {
            Error::KubeConfig(_) | Error::Listen { .. } | Error::Serve(_) | Error::Logging(_) => {
                Category::Config
            }
            Error::Webhook(error) => error.category(),
            Error::LostLeadership { .. } => Category::Api,
        }
    }
}
