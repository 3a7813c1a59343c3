//! The lease traffic of leader selection, made as the real managers make it
//! (`--leases`): every period each primary renews its Database's primary
//! Lease over the one it wrote last (reading it only first, or after a lost
//! race), and each replica keeps a watch of it open (read once, then watched
//! 30 s at a time, each watch going on from the last version seen). That is
//! the API-server load (and the operator's lease watch events) that decide
//! how short a lease one cluster can afford for thousands of Databases. Only the calls are real: a simulated primary
//! never loses, takes over or hands on the lease, and a replica's watch never
//! goes quiet, so it never falls back to reading every period.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use tusk::failover::Timing;

use super::pods::Pods;
use super::sim::Sim;

/// Calls in flight at once: a bound, so that a slow API server delays the
/// renewals (as it would the managers') rather than piling them up.
const CONCURRENCY: usize = 64;

/// Every period, for every simulated instance whose pod still exists: for
/// a primary the renewal, for a replica a watch when it has none.
pub async fn run(client: Client, pods: Arc<Pods>, sim: Arc<Mutex<Sim>>) {
    let timing = Timing::DEFAULT;
    let written = Written::default();
    let watching: Arc<Mutex<HashSet<(String, String)>>> = Arc::default();
    let mut interval = tokio::time::interval(timing.period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let members = sim.lock().unwrap_or_else(PoisonError::into_inner).members();
        let (primaries, replicas): (Vec<_>, Vec<_>) = members
            .into_iter()
            .filter(|m| pods.exists(&m.namespace, &m.name))
            .partition(|m| m.primary);
        for replica in replicas {
            let key = (replica.namespace.clone(), replica.name.clone());
            if watching
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key.clone())
            {
                let (client, pods, watching) = (client.clone(), pods.clone(), watching.clone());
                tokio::spawn(async move {
                    watch(client, &replica, &pods).await;
                    watching
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&key);
                });
            }
        }
        futures::stream::iter(primaries)
            .for_each_concurrent(CONCURRENCY, |member| {
                let client = client.clone();
                let written = &written;
                async move {
                    if let Err(error) = call(client, &member, timing.lease, written).await {
                        tracing::debug!(namespace = %member.namespace, instance = %member.name, %error, "lease call failed");
                    }
                }
            })
            .await;
    }
}

/// Each simulated primary's lease as it last wrote it, by namespace and
/// instance.
type Written = Mutex<HashMap<(String, String), Lease>>;

async fn call(
    client: Client,
    member: &super::sim::Member,
    duration: Duration,
    written: &Written,
) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(client, &member.namespace);
    let name = tusk::resources::names::primary_lease(&member.database);
    let key = (member.namespace.clone(), member.name.clone());
    let last = written
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&key);
    let blind = match last.and_then(|l| renewal(l, &member.name, duration)) {
        Some(next) => match api.replace(&name, &PostParams::default(), &next).await {
            Err(kube::Error::Api(status)) if status.code == 409 => None,
            other => Some(other?),
        },
        None => None,
    };
    let renewed = match blind {
        Some(lease) => Some(lease),
        None => {
            let Some(lease) = api.get_opt(&name).await? else {
                return Ok(());
            };
            match renewal(lease, &member.name, duration) {
                Some(next) => Some(api.replace(&name, &PostParams::default(), &next).await?),
                None => None,
            }
        }
    };
    if let Some(lease) = renewed {
        written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, lease);
    }
    Ok(())
}

/// A replica's watch of its primary Lease, as the manager keeps it: a read,
/// then watches that the API server ends after 30 s, each going on from the
/// version the last one ended at, until the replica's pod is gone.
async fn watch(client: Client, replica: &super::sim::Member, pods: &Pods) {
    let api: Api<Lease> = Api::namespaced(client, &replica.namespace);
    let name = tusk::resources::names::primary_lease(&replica.database);
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(30);
    // The version the last watch ended at: the next goes on from it.
    let mut resume: Option<String> = None;
    while pods.exists(&replica.namespace, &replica.name) {
        let from = resume.take();
        let watched = async {
            let mut version = match from {
                Some(version) => version,
                None => match api.get_opt(&name).await? {
                    Some(lease) => lease.metadata.resource_version.unwrap_or_default(),
                    None => return Ok(None),
                },
            };
            let mut events = std::pin::pin!(api.watch(&params, &version).await?);
            while let Some(event) = events.try_next().await? {
                match event {
                    WatchEvent::Added(lease) | WatchEvent::Modified(lease) => {
                        if let Some(seen) = lease.metadata.resource_version {
                            version = seen;
                        }
                    }
                    WatchEvent::Bookmark(_) => {}
                    WatchEvent::Deleted(_) | WatchEvent::Error(_) => return Ok(None),
                }
            }
            Ok::<_, kube::Error>(Some(version))
        };
        match watched.await {
            Ok(next) => resume = next,
            Err(error) => {
                tracing::debug!(namespace = %replica.namespace, instance = %replica.name, %error, "lease watch failed");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }
}

/// `lease` renewed by `me` now, when `me` holds it or nobody does; `None`
/// when another instance holds it (a simulated primary does not fight).
fn renewal(mut lease: Lease, me: &str, duration: Duration) -> Option<Lease> {
    let spec = lease.spec.get_or_insert_with(Default::default);
    match spec.holder_identity.as_deref() {
        Some(holder) if !holder.is_empty() && holder != me => return None,
        _ => {}
    }
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    if spec.holder_identity.as_deref() != Some(me) {
        spec.holder_identity = Some(me.to_owned());
        spec.acquire_time = Some(now.clone());
    }
    spec.renew_time = Some(now);
    spec.lease_duration_seconds = Some(i32::try_from(duration.as_secs()).unwrap_or(i32::MAX));
    Some(lease)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    fn held_by(holder: Option<&str>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_primary_renews_its_own_or_a_free_lease_and_leaves_another_holders() {
        let five = Duration::from_secs(5);
        let renewed = renewal(held_by(Some("pg-1")), "pg-1", five).expect("renewed");
        let spec = renewed.spec.expect("spec");
        assert!(spec.renew_time.is_some());
        assert_eq!(spec.acquire_time, None, "a renewal is not an acquisition");
        assert_eq!(spec.lease_duration_seconds, Some(5));
        let taken = renewal(held_by(None), "pg-1", five).expect("taken");
        let spec = taken.spec.expect("spec");
        assert_eq!(spec.holder_identity.as_deref(), Some("pg-1"));
        assert!(spec.acquire_time.is_some());
        assert!(renewal(held_by(Some("pg-2")), "pg-1", five).is_none());
    }
}
