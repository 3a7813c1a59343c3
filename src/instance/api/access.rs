//! Who may call which path when the API serves TLS: the probes and the
//! metrics are open (the kubelet and a scraper present no certificate);
//! everything else needs a client certificate, verified against
//! `client-ca.crt` by the handshake, naming the operator or an instance of
//! this instance's Database. A CA may be shared by several Databases (a
//! user-provided CA), so the chain alone does not say enough. Mutations still
//! need the bearer token as well ([`super::extract::Authorized`]).
//!
//! Without TLS none of this applies: the API answers as it always did.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::contract::{path, tls::OPERATOR_COMMON_NAME};

use super::super::Shared;
use super::error::{ApiError, Category};
use super::tls::Caller;

/// What a path asks of its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone: the kubelet's probes and metrics scrapers.
    Open,
    /// The operator or an instance of the same Database.
    Member,
}

/// The table: a path not named here (every other read, every `POST`, an
/// unknown path) needs a member's certificate.
pub fn access(path: &str) -> Access {
    match path {
        path::HEALTHZ | path::READYZ | path::METRICS => Access::Open,
        _ => Access::Member,
    }
}

/// Whether `caller` may use a path needing `access`, on an instance of
/// `database`.
pub fn authorise(access: Access, caller: &Caller, database: &str) -> Result<(), ApiError> {
    let common_name = match (access, caller) {
        (Access::Open, _) => return Ok(()),
        (Access::Member, Caller::Anonymous) => {
            return Err(ApiError::new(
                Category::Uncertified,
                "a client certificate is required: the operator's or an instance's of this Database",
            ));
        }
        (Access::Member, Caller::Verified(common_name)) => common_name,
    };
    if common_name == OPERATOR_COMMON_NAME
        || crate::contract::serial_of(database, common_name).is_some()
    {
        return Ok(());
    }
    Err(ApiError::new(
        Category::Forbidden,
        format!(
            "client certificate {common_name:?} is neither {OPERATOR_COMMON_NAME:?} nor an instance of Database {database:?}"
        ),
    ))
}

/// The Database an instance belongs to: as configured, else its name
/// without the serial (`<db>-<serial>`).
pub fn database_of(instance: &str, configured: Option<&str>) -> String {
    configured
        .map(str::to_owned)
        .or_else(|| instance.rsplit_once('-').map(|(db, _)| db.to_owned()))
        .unwrap_or_else(|| instance.to_owned())
}

/// The middleware applying [`authorise`] to every request of the TLS router.
pub(super) async fn require(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    // The accept loop always sets the caller; a request without one was not
    // handshaken, which only a bug could produce: treated as anonymous.
    let caller = request
        .extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or(Caller::Anonymous);
    let database = database_of(&shared.config.instance, shared.config.database.as_deref());
    match authorise(access(request.uri().path()), &caller, &database) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::debug!(path = request.uri().path(), ?caller, %refusal, "instance API: refused");
            refusal.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_and_metrics_are_open_and_the_rest_needs_a_member() {
        for open in [path::HEALTHZ, path::READYZ, path::METRICS] {
            assert_eq!(access(open), Access::Open, "{open}");
        }
        for member in [
            path::STATUS,
            path::PEER,
            path::BACKUPS,
            path::VOLUMES,
            path::RESTORE,
            path::RELOAD,
            path::PROMOTE,
            path::SYNC,
            path::RESTART,
            path::DROP_SLOT,
            path::PASSWORD,
            path::WAL_SWITCH,
            path::RETENTION,
            path::MEMBERS,
            path::SWITCHOVER,
            crate::contract::drill::path::FREEZE,
            crate::contract::drill::path::KILL_POSTGRES,
            crate::contract::drill::path::STORE_OUTAGE,
            crate::contract::drill::path::PARTITION,
            "/nothing-here",
            "/healthz/",
            "/status?x=/healthz",
        ] {
            assert_eq!(access(member), Access::Member, "{member}");
        }
    }

    fn verdict(access: Access, caller: Caller) -> Result<(), (Category, String)> {
        authorise(access, &caller, "pg").map_err(|e| (e.category, e.message))
    }

    #[test]
    fn members_are_the_operator_and_instances_of_the_same_database() {
        let verified = |cn: &str| Caller::Verified(cn.to_owned());
        assert_eq!(verdict(Access::Open, Caller::Anonymous), Ok(()));
        assert_eq!(verdict(Access::Open, verified("someone")), Ok(()));
        assert_eq!(verdict(Access::Member, verified("tusk-operator")), Ok(()));
        assert_eq!(verdict(Access::Member, verified("pg-1")), Ok(()));
        assert_eq!(verdict(Access::Member, verified("pg-1234567890")), Ok(()));
        let anonymous = verdict(Access::Member, Caller::Anonymous);
        assert!(
            matches!(&anonymous, Err((Category::Uncertified, m)) if m.contains("client certificate is required")),
            "{anonymous:?}"
        );
        // Another Database's instances, names that only look alike, and
        // certificates without a common name.
        for cn in [
            "pg2-1",
            "pg-1-1",
            "other-1",
            "pg-",
            "pg",
            "pg-x",
            "",
            "tusk-operator2",
        ] {
            let refused = verdict(Access::Member, verified(cn));
            assert!(
                matches!(&refused, Err((Category::Forbidden, m)) if m.contains(&format!("{cn:?}")) && m.contains("\"pg\"")),
                "{cn}: {refused:?}"
            );
        }
    }

    #[test]
    fn the_database_is_configured_or_the_instance_name_without_its_serial() {
        assert_eq!(database_of("pg-1", Some("pg")), "pg");
        assert_eq!(database_of("my-db-12", None), "my-db");
    }
}
