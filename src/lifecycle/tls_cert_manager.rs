//! `spec.tls.certManager` as the TLS planner sees it: whether cert-manager
//! is installed, whether the `Certificate` Tusk writes is as it should be,
//! what cert-manager says of it and of the issuer, and what the
//! `Certificates` condition says while its Secret cannot be served. Pure.
//! The Secret itself is seen as a `spec.tls.server` one is
//! (`super::tls::UserServer`).

use crate::api::tls::condition;

/// The field every message names.
pub const FIELD: &str = "spec.tls.certManager";

/// cert-manager's side of `spec.tls.certManager`, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertManagerObserved {
    /// The `Certificate` Tusk writes (`<db>-server`).
    pub certificate: String,
    /// The Secret cert-manager fills (`<db>-server-tls`).
    pub secret: String,
    /// The issuer as messages name it (`Issuer "ca"`).
    pub issuer: String,
    /// The cluster serves cert-manager's `Certificate` resource.
    pub installed: bool,
    /// The Certificate exists and carries what Tusk writes.
    pub up_to_date: bool,
    /// Its `Ready` condition: `Ok` when true, `Err` with cert-manager's
    /// reason and message otherwise; `None` when it has none (absent, or
    /// not looked at by cert-manager yet).
    pub ready: Option<Result<(), String>>,
    /// The issuer's `Ready` condition when Tusk can read it (cert-manager's
    /// own kinds): `Err` says it does not exist or why it is not ready.
    pub issuer_ready: Option<Result<(), String>>,
}

/// A verdict on cert-manager's side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// Nothing to say.
    Fine,
    /// The Secret cannot be served: the `Certificates` condition is false
    /// with this reason and message.
    Blocked(&'static str, String),
    /// What serves stays in effect, but something is off.
    Warning(String),
}

impl CertManagerObserved {
    /// Tusk should (re)write the Certificate: cert-manager is installed and
    /// it is missing or differs from what Tusk writes.
    pub fn wants_apply(&self) -> bool {
        self.installed && !self.up_to_date
    }

    /// Something is on its way (the Certificate written, issued or
    /// renewed): look again soon rather than at the steady interval.
    pub fn pending(&self, served: bool) -> bool {
        self.installed && (!served || !self.up_to_date || self.ready != Some(Ok(())))
    }

    /// What to say when the Secret cannot be served: `missing` when it
    /// does not exist, else `problem` (a check of its content, naming the
    /// field and the Secret).
    pub fn unusable(&self, missing: bool, problem: &str) -> Finding {
        if !self.installed {
            return Finding::Blocked(
                condition::CERT_MANAGER_MISSING,
                format!(
                    "{FIELD}: cert-manager is not installed: the cluster serves no certificates.cert-manager.io; install it or remove {FIELD}"
                ),
            );
        }
        if let Some(Err(why)) = &self.issuer_ready {
            return Finding::Blocked(
                condition::ISSUER_NOT_READY,
                format!("{FIELD}.issuerRef: {} {why}", self.issuer),
            );
        }
        if missing {
            return match &self.ready {
                Some(Err(why)) => Finding::Blocked(
                    condition::CERTIFICATE_NOT_READY,
                    format!(
                        "{FIELD}: Certificate {} is not ready ({why}); Secret {} does not exist yet",
                        self.certificate, self.secret
                    ),
                ),
                _ => Finding::Blocked(
                    condition::SECRET_MISSING,
                    format!(
                        "{FIELD}: waiting for cert-manager to issue Certificate {} ({}) into Secret {}",
                        self.certificate, self.issuer, self.secret
                    ),
                ),
            };
        }
        Finding::Blocked(condition::SECRET_INVALID, problem.to_owned())
    }

    /// While the Secret serves: the issuer or the Certificate not ready
    /// means the next renewal may not come.
    pub fn serving(&self) -> Finding {
        if let Some(Err(why)) = &self.issuer_ready {
            return Finding::Warning(format!(
                "{FIELD}.issuerRef: {} {why}; the certificate in Secret {} stays in effect until it is renewed",
                self.issuer, self.secret
            ));
        }
        match &self.ready {
            Some(Err(why)) if self.up_to_date => Finding::Warning(format!(
                "{FIELD}: Certificate {} is not ready ({why}); the certificate in Secret {} stays in effect",
                self.certificate, self.secret
            )),
            _ => Finding::Fine,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> CertManagerObserved {
        CertManagerObserved {
            certificate: "orders-server".into(),
            secret: "orders-server-tls".into(),
            issuer: "Issuer \"ca\"".into(),
            installed: true,
            up_to_date: true,
            ready: Some(Ok(())),
            issuer_ready: Some(Ok(())),
        }
    }

    fn blocked(finding: Finding) -> (&'static str, String) {
        match finding {
            Finding::Blocked(reason, message) => (reason, message),
            other => panic!("not blocked: {other:?}"),
        }
    }

    #[test]
    fn the_certificate_is_written_when_missing_or_changed_and_cert_manager_is_there() {
        let mut world = seen();
        assert!(!world.wants_apply());
        world.up_to_date = false;
        assert!(world.wants_apply());
        world.installed = false;
        assert!(!world.wants_apply(), "nothing to write it to");
    }

    #[test]
    fn a_missing_secret_is_explained_by_what_holds_it_up_first() {
        let mut world = seen();
        world.ready = None;
        assert_eq!(
            blocked(world.unusable(true, "")),
            (
                "SecretMissing",
                "spec.tls.certManager: waiting for cert-manager to issue Certificate orders-server (Issuer \"ca\") into Secret orders-server-tls".to_owned()
            )
        );
        world.ready = Some(Err("Issuing: the issuer is failing".into()));
        assert_eq!(blocked(world.unusable(true, "")).0, "CertificateNotReady");
        world.issuer_ready = Some(Err("does not exist".into()));
        assert_eq!(
            blocked(world.unusable(true, "")),
            (
                "IssuerNotReady",
                "spec.tls.certManager.issuerRef: Issuer \"ca\" does not exist".to_owned()
            )
        );
        world.installed = false;
        let (reason, message) = blocked(world.unusable(true, ""));
        assert_eq!(reason, "CertManagerNotInstalled");
        assert!(
            message.starts_with("spec.tls.certManager: cert-manager is not installed"),
            "{message}"
        );
    }

    #[test]
    fn a_bad_secret_is_reported_as_its_check_says() {
        let (reason, message) = blocked(seen().unusable(
            false,
            "spec.tls.certManager: Secret \"shop/orders-server-tls\" lacks ca.crt",
        ));
        assert_eq!(reason, "SecretInvalid");
        assert_eq!(
            message,
            "spec.tls.certManager: Secret \"shop/orders-server-tls\" lacks ca.crt"
        );
    }

    #[test]
    fn while_serving_a_failing_issuer_or_certificate_is_a_warning() {
        assert_eq!(seen().serving(), Finding::Fine);
        let mut world = seen();
        world.ready = Some(Err("Failed: x".into()));
        assert!(
            matches!(world.serving(), Finding::Warning(m) if m.contains("Certificate orders-server is not ready (Failed: x)"))
        );
        // Being rewritten: cert-manager's verdict is on the old spec.
        world.up_to_date = false;
        assert_eq!(world.serving(), Finding::Fine);
        world.issuer_ready = Some(Err("is not ready: x".into()));
        assert!(
            matches!(world.serving(), Finding::Warning(m) if m.starts_with("spec.tls.certManager.issuerRef: Issuer \"ca\" is not ready"))
        );
    }

    #[test]
    fn it_looks_again_soon_while_cert_manager_works() {
        assert!(!seen().pending(true));
        assert!(seen().pending(false));
        let mut world = seen();
        world.ready = None;
        assert!(world.pending(true));
        world.installed = false;
        assert!(!world.pending(false), "the steady interval is enough");
    }
}
