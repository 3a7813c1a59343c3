//! Leader election through a coordination.k8s.io Lease, so that of several operator
//! replicas exactly one reconciles. The decision is a pure function; the loop around
//! it uses optimistic concurrency (resourceVersion), so two replicas racing for an
//! expired lease cannot both win.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tracing::{info, warn};

use super::Error;
use crate::telemetry::metrics::Metrics;

#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub lease_name: String,
    pub identity: String,
    /// How long a lease stays valid without renewal.
    pub lease_duration: Duration,
    /// A leader that could not renew for this long steps down (before the lease
    /// expires and another replica may take it).
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderConfig {
    pub fn new(lease_name: String, identity: String) -> Self {
        Self {
            lease_name,
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The lease is free or expired: take it.
    Acquire,
    /// We hold it: renew it.
    Renew,
    /// Someone else holds a live lease.
    Follow { holder: String },
}

/// Decides what to do with the lease as last read.
pub fn decide(spec: Option<&LeaseSpec>, me: &str, now: Timestamp) -> Decision {
    let Some(spec) = spec else {
        return Decision::Acquire;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => Decision::Acquire,
        Some(holder) if holder == me => Decision::Renew,
        Some(holder) => {
            let last = spec
                .renew_time
                .as_ref()
                .or(spec.acquire_time.as_ref())
                .map(|t| t.0);
            let duration =
                SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
            match last {
                Some(last) if last + duration > now => Decision::Follow {
                    holder: holder.to_owned(),
                },
                _ => Decision::Acquire,
            }
        }
    }
}

/// The lease spec to write for `decision` (`None` for [`Decision::Follow`]).
pub fn next_spec(
    previous: Option<&LeaseSpec>,
    decision: &Decision,
    me: &str,
    now: Timestamp,
    duration: Duration,
) -> Option<LeaseSpec> {
    let seconds = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX);
    match decision {
        Decision::Follow { .. } => None,
        Decision::Renew => Some(LeaseSpec {
            renew_time: Some(MicroTime(now)),
            lease_duration_seconds: Some(seconds),
            ..previous.cloned().unwrap_or_default()
        }),
        Decision::Acquire => Some(LeaseSpec {
            holder_identity: Some(me.to_owned()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_duration_seconds: Some(seconds),
            lease_transitions: Some(previous.and_then(|p| p.lease_transitions).unwrap_or(0) + 1),
            ..LeaseSpec::default()
        }),
    }
}

/// One attempt: returns whether we hold the lease afterwards.
async fn try_once(api: &Api<Lease>, config: &LeaderConfig) -> Result<bool, kube::Error> {
    let current = api.get_opt(&config.lease_name).await?;
    let now = Timestamp::now();
    let decision = decide(
        current.as_ref().and_then(|l| l.spec.as_ref()),
        &config.identity,
        now,
    );
    let previous = current.as_ref().and_then(|l| l.spec.as_ref());
    let Some(spec) = next_spec(
        previous,
        &decision,
        &config.identity,
        now,
        config.lease_duration,
    ) else {
        return Ok(false);
    };
    let result = match current {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(config.lease_name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            api.create(&PostParams::default(), &lease).await
        }
        Some(mut lease) => {
            // replace carries the resourceVersion we read: a concurrent writer makes it fail with 409.
            lease.spec = Some(spec);
            api.replace(&config.lease_name, &PostParams::default(), &lease)
                .await
        }
    };
    match result {
        Ok(_) => {
            if decision == Decision::Acquire {
                info!(lease = %config.lease_name, identity = %config.identity, "acquired the leader lease");
            }
            Ok(true)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives the lease up on shutdown so that another replica takes over at once.
async fn release(api: &Api<Lease>, config: &LeaderConfig) {
    let result = async {
        if let Some(mut lease) = api.get_opt(&config.lease_name).await?
            && let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(config.identity.as_str())
        {
            spec.holder_identity = None;
            api.replace(&config.lease_name, &PostParams::default(), &lease)
                .await?;
            info!(lease = %config.lease_name, "released the leader lease");
        }
        Ok::<(), kube::Error>(())
    };
    if let Err(error) = result.await {
        warn!(%error, "could not release the leader lease");
    }
}

/// Keeps trying to lead until `shutdown`; publishes leadership on `leading`.
/// Returns an error when leadership, once held, is lost: the caller must stop
/// reconciling at once.
pub async fn run(
    api: Api<Lease>,
    config: LeaderConfig,
    leading: watch::Sender<bool>,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    let mut last_renewal: Option<tokio::time::Instant> = None;
    loop {
        let held = match try_once(&api, &config).await {
            Ok(true) => {
                last_renewal = Some(tokio::time::Instant::now());
                true
            }
            Ok(false) => false,
            Err(error) => {
                warn!(%error, "leader election request failed");
                // Keep leading through short API outages, never past the deadline.
                last_renewal.is_some_and(|t| t.elapsed() < config.renew_deadline)
            }
        };
        let was_leading = *leading.borrow();
        if !held && was_leading {
            metrics.set_leader(false);
            let _ = leading.send(false);
            return Err(Error::LostLeadership {
                lease: config.lease_name.clone(),
            });
        }
        if held != was_leading {
            metrics.set_leader(held);
            let _ = leading.send(held);
        }
        let stopping = tokio::select! {
            _ = tokio::time::sleep(config.retry_period) => false,
            result = shutdown.wait_for(|stop| *stop) => { drop(result); true }
        };
        if stopping {
            if held {
                release(&api, &config).await;
            }
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    fn held_by(holder: &str, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(at(renewed))),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_missing_or_free_lease_is_acquired() {
        assert_eq!(decide(None, "a", at(0)), Decision::Acquire);
        assert_eq!(
            decide(Some(&LeaseSpec::default()), "a", at(0)),
            Decision::Acquire
        );
    }

    #[test]
    fn a_live_lease_of_another_is_followed_until_it_expires() {
        let lease = held_by("b", 0);
        assert_eq!(
            decide(Some(&lease), "a", at(14)),
            Decision::Follow { holder: "b".into() }
        );
        assert_eq!(decide(Some(&lease), "a", at(15)), Decision::Acquire);
    }

    #[test]
    fn our_own_lease_is_renewed_even_when_late() {
        assert_eq!(
            decide(Some(&held_by("a", 0)), "a", at(100)),
            Decision::Renew
        );
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_keeps_acquire_time() {
        let lease = held_by("b", 0);
        let taken = next_spec(
            Some(&lease),
            &Decision::Acquire,
            "a",
            at(20),
            Duration::from_secs(15),
        )
        .unwrap();
        assert_eq!(taken.holder_identity.as_deref(), Some("a"));
        assert_eq!(taken.lease_transitions, Some(4));
        assert_eq!(taken.acquire_time, Some(MicroTime(at(20))));
        let renewed = next_spec(
            Some(&taken),
            &Decision::Renew,
            "a",
            at(22),
            Duration::from_secs(15),
        )
        .unwrap();
        assert_eq!(renewed.acquire_time, Some(MicroTime(at(20))));
        assert_eq!(renewed.renew_time, Some(MicroTime(at(22))));
        assert_eq!(renewed.lease_transitions, Some(4));
        assert!(
            next_spec(
                Some(&lease),
                &Decision::Follow { holder: "b".into() },
                "a",
                at(1),
                Duration::from_secs(15)
            )
            .is_none()
        );
    }
}
