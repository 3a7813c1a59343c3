//! What can go wrong, each as one line a person reads and a code a script
//! tests: 1 the work failed or was refused, 2 bad input (usage, a spec that
//! fails validation), 3 something named does not exist, 4 `--wait` gave up.

/// Every way a `kubectl tusk` command fails.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input, refused before anything changed.
    #[error("{0}")]
    Usage(String),

    /// A Database, instance or Backup named on the command line is not there.
    #[error("{0}")]
    NotFound(String),

    /// The work was refused or failed; the message says by whom and why.
    #[error("{0}")]
    Failed(String),

    /// `--wait` ran out of time; the work may still complete.
    #[error("gave up waiting after {seconds} s: {what}")]
    TimedOut { seconds: u64, what: String },

    #[error("cannot read the kubeconfig: {0}")]
    Kubeconfig(String),

    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },

    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot render {what}: {message}")]
    Render { what: &'static str, message: String },
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            Error::NotFound(_) => 3,
            Error::TimedOut { .. } => 4,
            Error::Kube { source, .. } if is_not_found(source) => 3,
            _ => 1,
        }
    }

    /// A kube error, with what was being done.
    pub fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |source| Error::Kube { what, source }
    }

    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
}

/// The API server answered 404.
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_can_tell_failures_apart() {
        assert_eq!(Error::Usage("x".into()).exit_code(), 2);
        assert_eq!(Error::NotFound("x".into()).exit_code(), 3);
        assert_eq!(Error::Failed("x".into()).exit_code(), 1);
        let timed_out = Error::TimedOut {
            seconds: 5,
            what: "the backup".into(),
        };
        assert_eq!(timed_out.exit_code(), 4);
        assert_eq!(
            timed_out.to_string(),
            "gave up waiting after 5 s: the backup"
        );
    }
}
