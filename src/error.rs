//! Tusk's errors. Every error has a [`Category`], which feeds metrics and Events and
//! tells the controllers whether to retry with backoff or wait for the user.

use std::net::SocketAddr;

/// What kind of failure an error is; the label on `tusk_reconcile_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// The Kubernetes API failed in a way that may pass (timeouts, 5xx, 429, conflicts).
    Api,
    /// The Kubernetes API refused a request and repeating it will not help (4xx).
    Rejected,
    /// The spec cannot be honoured as written; waits for the user to change it.
    InvalidSpec,
    /// A bug or an impossible state inside Tusk.
    Internal,
    /// The operator's own configuration or environment.
    Config,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Rejected => "rejected",
            Self::InvalidSpec => "invalid_spec",
            Self::Internal => "internal",
            Self::Config => "config",
        }
    }

    /// Transient failures are retried with backoff; the rest wait for a change.
    pub fn is_transient(self) -> bool {
        matches!(self, Self::Api | Self::Internal)
    }
}

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

    #[error("cannot merge the CRD versions: {0}")]
    Crd(#[source] kube::core::crd::MergeError),

    #[error("cannot render YAML: {0}")]
    Yaml(#[source] serde_yaml::Error),

    #[error("cannot write to stdout: {0}")]
    Stdout(#[source] std::io::Error),

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

    #[error("cannot set up logging: {0}")]
    Logging(String),

    #[error("webhook certificate: {0}")]
    Certificate(#[from] crate::webhook::certs::CertError),

    #[error("cannot load the webhook TLS certificate: {0}")]
    Tls(#[source] std::io::Error),

    #[error("cannot read the webhook certificate file {}: {source}", path.display())]
    CertFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("instance manager: {0}")]
    Instance(#[from] crate::instance::Error),

    #[error("instance {instance}: {source}")]
    InstanceApi {
        instance: String,
        #[source]
        source: crate::controller::database::instances::InstanceApiError,
    },

    #[error("instance {instance}: {reason}")]
    InstanceUnreachable { instance: String, reason: String },

    #[error("lost the leader lease {lease}; stopping so that another replica takes over")]
    LostLeadership { lease: String },
}

impl Error {
    pub fn kube(context: &'static str) -> impl FnOnce(kube::Error) -> Error {
        move |source| Error::Kube { context, source }
    }

    pub fn category(&self) -> Category {
        match self {
            Error::Kube { source, .. } => kube_category(source),
            Error::Finalizer { source, .. } => match source.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.category(),
                kube::runtime::finalizer::Error::AddFinalizer(e)
                | kube::runtime::finalizer::Error::RemoveFinalizer(e) => kube_category(e),
                _ => Category::Internal,
            },
            Error::MissingField(_) | Error::Serialize { .. } => Category::Internal,
            Error::Crd(_) | Error::Yaml(_) | Error::Stdout(_) => Category::Internal,
            Error::KubeConfig(_) | Error::Listen { .. } | Error::Serve(_) | Error::Logging(_) => {
                Category::Config
            }
            Error::Certificate(_) | Error::Tls(_) | Error::CertFile { .. } => Category::Internal,
            Error::Instance(_) => Category::Config,
            // An instance manager that fails now may answer on the next pass.
            Error::InstanceApi { .. } | Error::InstanceUnreachable { .. } => Category::Api,
            Error::LostLeadership { .. } => Category::Api,
        }
    }
}

fn kube_category(error: &kube::Error) -> Category {
    match error {
        kube::Error::Api(status) => match status.code {
            409 | 429 => Category::Api,
            code if (400..500).contains(&code) => Category::Rejected,
            _ => Category::Api,
        },
        _ => Category::Api,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> Error {
        let status = kube::core::Status::failure("boom", "Reason").with_code(code);
        Error::Kube {
            context: "testing",
            source: kube::Error::Api(Box::new(status)),
        }
    }

    #[test]
    fn api_errors_are_classified_by_status_code() {
        assert_eq!(api_error(500).category(), Category::Api);
        assert_eq!(api_error(429).category(), Category::Api);
        assert_eq!(api_error(409).category(), Category::Api);
        assert_eq!(api_error(422).category(), Category::Rejected);
        assert!(api_error(503).category().is_transient());
        assert!(!api_error(403).category().is_transient());
    }
}
