//! What kind of failure an error is. Every module that fails has its own
//! error type (`controller::Error`, `operator::Error`, `webhook::Error`,
//! `instance::Error`, `upgrade::Error`, `wal::Error`, `objectstore` and the
//! `backup` steps' …). The operator's (controller, operator, webhook, and the
//! instance manager's HTTP API) carry a `category()`: it labels
//! `tusk_reconcile_errors_total`, picks the Event type and the HTTP status,
//! and tells the controllers whether to retry with backoff or wait for the
//! user. The one crate-wide error lives at the binary's edge, in
//! [`crate::cli`].

/// What kind of failure an error is; the label on `tusk_reconcile_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// The Kubernetes API failed in a way that may pass (timeouts, 5xx, 429, conflicts).
    Api,
    /// The Kubernetes API or an instance manager refused a request and
    /// repeating it will not help (4xx).
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

    /// The category of a failed Kubernetes API call: conflicts, throttling and
    /// server errors pass; other 4xx answers will not.
    pub fn of_kube(error: &kube::Error) -> Category {
        match error {
            kube::Error::Api(status) => match status.code {
                409 | 429 => Category::Api,
                code if (400..500).contains(&code) => Category::Rejected,
                _ => Category::Api,
            },
            _ => Category::Api,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        let status = kube::core::Status::failure("boom", "Reason").with_code(code);
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn api_errors_are_classified_by_status_code() {
        assert_eq!(Category::of_kube(&api_error(500)), Category::Api);
        assert_eq!(Category::of_kube(&api_error(429)), Category::Api);
        assert_eq!(Category::of_kube(&api_error(409)), Category::Api);
        assert_eq!(Category::of_kube(&api_error(422)), Category::Rejected);
        assert!(Category::of_kube(&api_error(503)).is_transient());
        assert!(!Category::of_kube(&api_error(403)).is_transient());
    }
}
