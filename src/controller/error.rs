//! The controllers' errors, each with a [`Category`].

use crate::error::Category;

use super::database::instances::CallError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API request failed while {context}: {source}")]
    Kube {
        context: &'static str,
        #[source]
        source: kube::Error,
    },

    #[error("finalizer of {name}: {source}")]
    Finalizer {
        name: String,
        #[source]
        source: Box<kube::runtime::finalizer::Error<Error>>,
    },

    #[error("object has no {0}")]
    MissingField(&'static str),

    #[error("cannot serialize {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },

    #[error("instance {instance}: {source}")]
    Instance {
        instance: String,
        #[source]
        source: CallError,
    },

    #[error("instance {instance}: {reason}")]
    InstanceUnreachable { instance: String, reason: String },

    #[error("{0}")]
    Restore(String),

    /// Generating or reading certificates (`lifecycle::tls`'s steps).
    #[error("TLS: {context}: {message}")]
    Tls {
        context: &'static str,
        message: String,
    },

    /// The caches a pass reads are not filled yet ([`super::caches`]).
    #[error("the operator's caches are not ready: {0}")]
    CachesNotReady(&'static str),
}

impl Error {
    pub fn kube(context: &'static str) -> impl FnOnce(kube::Error) -> Error {
        move |source| Error::Kube { context, source }
    }

    pub fn category(&self) -> Category {
        match self {
            Error::Kube { source, .. } => Category::of_kube(source),
            Error::Finalizer { source, .. } => match source.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.category(),
                kube::runtime::finalizer::Error::AddFinalizer(e)
                | kube::runtime::finalizer::Error::RemoveFinalizer(e) => Category::of_kube(e),
                _ => Category::Internal,
            },
            Error::MissingField(_)
            | Error::Serialize { .. }
            | Error::Restore(_)
            | Error::Tls { .. } => Category::Internal,
            Error::Instance { source, .. } => source.category(),
            // An instance manager that cannot be reached now may be on the next pass.
            Error::InstanceUnreachable { .. } => Category::Api,
            // A watch still listing, or retrying after the API server failed it.
            Error::CachesNotReady(_) => Category::Api,
        }
    }
}
