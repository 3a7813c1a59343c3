//! The webhook server's errors: its certificate, its listener, the API calls
//! that keep the certificate published.

use std::net::SocketAddr;

use crate::error::Category;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API request failed while {context}: {source}")]
    Kube {
        context: &'static str,
        #[source]
        source: kube::Error,
    },

    #[error("webhook certificate: {0}")]
    Certificate(#[from] super::certs::CertError),

    #[error("cannot load the webhook TLS certificate: {0}")]
    Tls(#[source] std::io::Error),

    #[error("cannot read the webhook certificate file {}: {source}", path.display())]
    CertFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

    #[error("webhook server failed: {0}")]
    Serve(#[source] std::io::Error),
}

impl Error {
    pub fn kube(context: &'static str) -> impl FnOnce(kube::Error) -> Error {
        move |source| Error::Kube { context, source }
    }

    pub fn category(&self) -> Category {
        match self {
            Error::Kube { source, .. } => Category::of_kube(source),
            Error::Certificate(_) | Error::Tls(_) | Error::CertFile { .. } => Category::Internal,
            Error::Listen { .. } | Error::Serve(_) => Category::Config,
        }
    }
}
