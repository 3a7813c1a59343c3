//! The primary Lease through the Kubernetes API: a read, and a write that
//! carries the resourceVersion it read (a compare-and-swap), each bounded by
//! a timeout; their errors keep their kind, so a write lost to a concurrent
//! update (409) is told apart from an API server out of reach. Also the
//! specs the manager writes and what it reads out of a Lease.

use std::fmt;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};

use crate::failover::Timing;
use crate::failover::claim::LeaseView;
use crate::failover::lease::Record;

/// How long one call to the API server may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// The annotation a release leaves on the lease, naming who released it.
pub const RELEASED_BY: &str = "tusk.dev/released-by";

/// How long the API server keeps one watch of the lease open: a watch
/// whose connection died unnoticed is replaced at the latest this long after
/// it began.
pub const WATCH_SECONDS: u32 = 30;

/// Which call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Read,
    Write,
    Watch,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Call::Read => "reading",
            Call::Write => "writing",
            Call::Watch => "watching",
        })
    }
}

/// Why a lease operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// This manager runs without leader selection.
    #[error("no lease")]
    Disabled,
    /// The operator has not created the lease (yet).
    #[error("the primary lease does not exist")]
    NotFound,
    /// Another write changed the lease since it was read: a lost race, not
    /// a failure.
    #[error("{call} the lease: {source}")]
    Conflict {
        call: Call,
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer in time.
    #[error("{call} the lease timed out")]
    TimedOut { call: Call },
    /// No client could be built (no service account, no API server address).
    #[error("no Kubernetes client: {0}")]
    NoClient(#[source] kube::Error),
    /// Any other answer of (or failure to reach) the API server.
    #[error("{call} the lease: {source}")]
    Api {
        call: Call,
        #[source]
        source: kube::Error,
    },
    /// Only the holder may hand the lease over.
    #[error("the lease is {holder:?}'s, not this instance's")]
    NotHeld { holder: Option<String> },
}

impl LeaseError {
    pub(super) fn of(call: Call, source: kube::Error) -> LeaseError {
        match &source {
            kube::Error::Api(status) if status.code == 409 => LeaseError::Conflict { call, source },
            _ => LeaseError::Api { call, source },
        }
    }
}

/// The Database's primary Lease, in the pod's namespace.
pub struct LeaseClient {
    /// `None` runs without leader selection.
    name: Option<String>,
    namespace: String,
    /// The client, with the connection epoch it was built in: a partition
    /// drill's cut ([`crate::instance::partition`]) rebuilds it, so that no
    /// connection made before the cut is used again.
    client: tokio::sync::Mutex<Option<(u64, kube::Client)>>,
}

impl LeaseClient {
    pub fn new(name: Option<String>, namespace: Option<String>) -> Self {
        LeaseClient {
            name: name.filter(|name| !name.is_empty()),
            namespace: namespace.unwrap_or_else(|| "default".to_owned()),
            client: tokio::sync::Mutex::new(None),
        }
    }

    pub fn enabled(&self) -> bool {
        self.name.is_some()
    }

    /// The manager's Kubernetes client (the lease's and the pod label's).
    pub(super) async fn client(&self) -> Result<kube::Client, LeaseError> {
        let epoch = crate::instance::partition::epoch();
        let mut client = self.client.lock().await;
        if let Some((built_in, client)) = client.as_ref()
            && *built_in == epoch
        {
            return Ok(client.clone());
        }
        let fresh = kube::Client::try_default()
            .await
            .map_err(LeaseError::NoClient)?;
        *client = Some((epoch, fresh.clone()));
        Ok(fresh)
    }

    async fn api(&self) -> Result<Api<Lease>, LeaseError> {
        Ok(Api::namespaced(self.client().await?, &self.namespace))
    }

    /// The pod's namespace, the lease's too.
    pub(super) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The lease as it is now; `None` when it does not exist (or no lease is
    /// configured).
    pub async fn read(&self) -> Result<Option<Lease>, LeaseError> {
        let Some(name) = &self.name else {
            return Ok(None);
        };
        let api = self.api().await?;
        tokio::time::timeout(CALL_TIMEOUT, api.get_opt(name))
            .await
            .map_err(|_| LeaseError::TimedOut { call: Call::Read })?
            .map_err(|e| LeaseError::of(Call::Read, e))
    }

    /// The lease's changes after `version`, as the API server sends them,
    /// for [`WATCH_SECONDS`] at most. `None` without a lease.
    pub async fn watch(
        &self,
        version: &str,
    ) -> Result<
        Option<impl futures::Stream<Item = Result<WatchEvent<Lease>, kube::Error>> + use<>>,
        LeaseError,
    > {
        let Some(name) = &self.name else {
            return Ok(None);
        };
        let api = self.api().await?;
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(WATCH_SECONDS);
        tokio::time::timeout(CALL_TIMEOUT, api.watch(&params, version))
            .await
            .map_err(|_| LeaseError::TimedOut { call: Call::Watch })?
            .map(Some)
            .map_err(|e| LeaseError::of(Call::Watch, e))
    }

    /// Replace `lease`, which carries the resourceVersion it was read at.
    pub async fn write(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        let Some(name) = &self.name else {
            return Err(LeaseError::Disabled);
        };
        let api = self.api().await?;
        tokio::time::timeout(
            CALL_TIMEOUT,
            api.replace(name, &PostParams::default(), lease),
        )
        .await
        .map_err(|_| LeaseError::TimedOut { call: Call::Write })?
        .map_err(|e| LeaseError::of(Call::Write, e))
    }
}

/// What the lease says of who holds it, as the failover rules read it.
pub fn record_of(lease: &Lease) -> Record {
    let spec = lease.spec.as_ref();
    Record {
        version: lease.metadata.resource_version.clone().unwrap_or_default(),
        holder: spec.and_then(|s| s.holder_identity.clone()),
        duration: Duration::from_secs(
            spec.and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .unwrap_or(Timing::DEFAULT.lease.as_secs()),
        ),
    }
}

/// The holder and the last releaser, for [`crate::failover::claim`].
pub fn view_of(lease: &Lease) -> LeaseView<'_> {
    LeaseView {
        holder: lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref()),
        released_by: lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RELEASED_BY))
            .map(String::as_str),
    }
}

/// The spec `me` writes to renew `previous` (`taking`: to write itself in).
pub fn claim_spec(previous: &LeaseSpec, me: &str, duration: Duration, taking: bool) -> LeaseSpec {
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let seconds = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX);
    if taking {
        LeaseSpec {
            holder_identity: Some(me.to_owned()),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_duration_seconds: Some(seconds),
            lease_transitions: Some(previous.lease_transitions.unwrap_or(0) + 1),
            ..LeaseSpec::default()
        }
    } else {
        LeaseSpec {
            renew_time: Some(now),
            lease_duration_seconds: Some(seconds),
            ..previous.clone()
        }
    }
}

/// The spec that hands `previous` to `target` (a switchover).
pub fn transfer_spec(previous: LeaseSpec, target: &str) -> LeaseSpec {
    let now = k8s_openapi::jiff::Timestamp::now();
    LeaseSpec {
        holder_identity: Some(target.to_owned()),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(previous.lease_transitions.unwrap_or(0) + 1),
        ..previous
    }
}

/// `lease` released by `me`: no holder, and the annotation naming `me`.
pub fn released(mut lease: Lease, me: &str) -> Lease {
    let spec = lease.spec.take().unwrap_or_default();
    lease.spec = Some(LeaseSpec {
        holder_identity: None,
        ..spec
    });
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(RELEASED_BY.to_owned(), me.to_owned());
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_release_names_the_releaser_for_the_claim_rule() {
        let released = released(lease(Some("pg-1")), "pg-1");
        assert_eq!(
            view_of(&released),
            LeaseView {
                holder: None,
                released_by: Some("pg-1"),
            }
        );
        assert_eq!(
            released.spec.and_then(|s| s.lease_transitions),
            Some(3),
            "a release is not a transition"
        );
    }

    #[test]
    fn a_take_counts_a_transition_and_a_renewal_keeps_the_holder() {
        let previous = lease(Some("pg-1")).spec.unwrap_or_default();
        let taken = claim_spec(&previous, "pg-2", Duration::from_secs(5), true);
        assert_eq!(taken.holder_identity.as_deref(), Some("pg-2"));
        assert_eq!(taken.lease_transitions, Some(4));
        let renewed = claim_spec(&previous, "pg-1", Duration::from_secs(5), false);
        assert_eq!(renewed.holder_identity.as_deref(), Some("pg-1"));
        assert_eq!(renewed.lease_transitions, Some(3));
        assert_eq!(renewed.lease_duration_seconds, Some(5));
    }
}
