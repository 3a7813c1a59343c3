//! What the status shows of the instances and of the spec in effect, read
//! off the snapshot (pure).

use k8s_openapi::api::core::v1::Pod as KubePod;
use kube::ResourceExt;

use super::Snapshot;
use super::reduce::pod_ready;
use super::volumes::volume_statuses;
use crate::api::quantity;
use crate::api::status::{AppliedSpec, InstanceStatus};
use crate::api::v1::Database;
use crate::contract::{API_VERSION, Role};
use crate::resources::{names, postgres_image};

/// `status.instances`: each instance with a pod, in serial order, with what its
/// manager reported and the image, node and QoS class of its pod. A
/// replica's lag in bytes is the primary's WAL position minus what the
/// replica has received; its lag in time is the primary's `replay_lag` for
/// it (unknown when the primary did not report it). Each lists its volumes:
/// requested, capacity and the filesystem it sees.
pub fn instance_statuses(db: &Database, snapshot: &Snapshot) -> Vec<InstanceStatus> {
    let name = db.name_any();
    let primary = snapshot
        .understood()
        .map(|(_, s)| s)
        .find(|s| s.postgres.role == Role::Primary);
    let primary_lsn = primary.and_then(|s| s.postgres.current_lsn);
    let replay_lags = primary.map(|s| &s.postgres.replay_lag_milliseconds);
    let mut pods: Vec<(u32, &KubePod)> = snapshot
        .pods
        .iter()
        .filter_map(|p| Some((names::serial_of(&name, &p.name_any())?, p)))
        .collect();
    pods.sort_by_key(|(serial, _)| *serial);
    pods.into_iter()
        .map(|(_, pod)| {
            let pod_name = pod.name_any();
            let image = Some(postgres_image(pod)).filter(|i| !i.is_empty());
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            let qos_class = pod.status.as_ref().and_then(|s| s.qos_class.clone());
            let reported = snapshot
                .managers
                .get(&pod_name)
                .filter(|s| s.api_version == API_VERSION);
            match reported {
                None => InstanceStatus {
                    volumes: volume_statuses(&name, &pod_name, snapshot),
                    name: pod_name,
                    image,
                    node,
                    qos_class,
                    ..InstanceStatus::default()
                },
                Some(status) => {
                    let pg = &status.postgres;
                    let (lsn, lag_bytes, lag_milliseconds) = match pg.role {
                        Role::Primary => (pg.current_lsn, Some(0), Some(0)),
                        Role::Replica => {
                            let lag = primary_lsn
                                .zip(pg.received_lsn)
                                .map(|(p, r)| i64::try_from(p.bytes_after(r)).unwrap_or(i64::MAX));
                            let time = replay_lags.and_then(|l| l.get(&pod_name)).copied();
                            (pg.replayed_lsn, lag, time)
                        }
                    };
                    InstanceStatus {
                        volumes: volume_statuses(&name, &pod_name, snapshot),
                        name: pod_name,
                        role: Some(pg.role),
                        // Ready as the Services see it: the manager and the kubelet agree.
                        ready: status.ready && pod_ready(pod),
                        lsn: lsn.map(|l| l.to_string()),
                        lag_bytes,
                        image,
                        version: pg
                            .major_minor()
                            .map(|(major, minor)| format!("{major}.{minor}")),
                        system_identifier: Some(pg.system_identifier.clone()),
                        timeline: pg.timeline,
                        node,
                        qos_class,
                        lag_milliseconds,
                    }
                }
            }
        })
        .collect()
}

/// `status.applied`: what is observed to be in effect. Each figure falls back
/// to what was recorded before (an instance that does not answer now did
/// not change); `None` until a primary has answered once, since until then
/// nothing is in effect.
pub fn applied(db: &Database, snapshot: &Snapshot) -> Option<AppliedSpec> {
    let before = db.status.as_ref().and_then(|s| s.applied.as_ref());
    let primary = snapshot
        .understood()
        .find(|(_, s)| s.postgres.role == Role::Primary);
    if primary.is_none() && before.is_none() {
        return None;
    }
    let version = primary
        .and_then(|(_, s)| s.postgres.major_minor())
        .map(|(major, minor)| format!("{major}.{minor}"))
        .or_else(|| before.map(|a| a.version.clone()))
        .unwrap_or_else(|| db.spec.version.clone());
    let smallest = snapshot
        .pvcs
        .iter()
        .filter_map(|pvc| {
            let text = pvc
                .spec
                .as_ref()?
                .resources
                .as_ref()?
                .requests
                .as_ref()?
                .get("storage")?
                .0
                .clone();
            Some((quantity::parse_bytes(&text).ok()?, text))
        })
        .min_by_key(|(bytes, _)| *bytes);
    // Auto-grow makes volumes larger than spec.storage.size: what is in
    // effect is the spec's size once every volume has it, and never less
    // than what was in effect before (a shrink that slipped past the
    // webhook must still be refused).
    let spec_size = quantity::parse_bytes(&db.spec.storage.size)
        .ok()
        .map(|b| (b, db.spec.storage.size.clone()));
    let in_effect = match (smallest, spec_size) {
        (Some(pvcs), Some(spec)) => Some(if spec.0 < pvcs.0 { spec } else { pvcs }),
        (pvcs, _) => pvcs,
    };
    let earlier = before.and_then(|a| {
        quantity::parse_bytes(&a.storage_size)
            .ok()
            .map(|b| (b, a.storage_size.clone()))
    });
    let storage_size = match (in_effect, earlier) {
        (Some(now), Some(then)) => Some(if then.0 > now.0 { then } else { now }),
        (now, then) => now.or(then),
    }
    .map(|(_, text)| text)
    .unwrap_or_else(|| db.spec.storage.size.clone());
    let image = primary
        .and_then(|(name, _)| snapshot.pods.iter().find(|p| p.name_any() == *name))
        .map(postgres_image)
        .filter(|i| !i.is_empty())
        .or_else(|| before.and_then(|a| a.image.clone()));
    Some(AppliedSpec {
        version,
        storage_size,
        image,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::contract::{Lsn, PgStatus, Status};

    fn pod(name: &str, node: Option<&str>, qos: &str) -> KubePod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "postgres", "image": "pg:17"}]},
            "status": {"qosClass": qos},
        }))
        .expect("a pod")
    }

    fn manager(name: &str, pg: PgStatus) -> Status {
        Status {
            api_version: API_VERSION,
            instance: name.into(),
            pod: Some(name.into()),
            namespace: None,
            postgres: pg,
            ready: true,
            parameters: BTreeMap::new(),
            sync: None,
            ha: None,
            tls: None,
            faults: None,
        }
    }

    fn pg(role: Role) -> PgStatus {
        PgStatus {
            role,
            timeline: Some(1),
            current_lsn: None,
            received_lsn: None,
            replayed_lsn: None,
            streaming: None,
            system_identifier: "7441234567890123456".into(),
            version: "17.6".into(),
            version_num: 170_006,
            pending_restart: false,
            inactive_slots: Vec::new(),
            archiver: None,
            replay_lag_milliseconds: BTreeMap::new(),
        }
    }

    #[test]
    fn instances_show_their_node_qos_and_replay_lag_in_time() {
        let db = crate::api::arbitrary::sample_database();
        let name = db.name_any();
        let (one, two, three) = (
            format!("{name}-1"),
            format!("{name}-2"),
            format!("{name}-3"),
        );
        let mut primary = pg(Role::Primary);
        primary.current_lsn = Some(Lsn(0x3000200));
        primary.replay_lag_milliseconds = BTreeMap::from([(two.clone(), 1500)]);
        let mut replica = pg(Role::Replica);
        replica.received_lsn = Some(Lsn(0x3000100));
        replica.replayed_lsn = Some(Lsn(0x3000100));
        let snapshot = Snapshot {
            pods: vec![
                pod(&three, None, "BestEffort"),
                pod(&two, Some("node-b"), "Burstable"),
                pod(&one, Some("node-a"), "Guaranteed"),
            ],
            managers: BTreeMap::from([
                (one.clone(), manager(&one, primary)),
                (two.clone(), manager(&two, replica.clone())),
                (three.clone(), manager(&three, replica)),
            ]),
            ..Snapshot::default()
        };
        let statuses = instance_statuses(&db, &snapshot);
        let seen: Vec<_> = statuses
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.node.as_deref(),
                    s.qos_class.as_deref(),
                    s.lag_bytes,
                    s.lag_milliseconds,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (
                    one.as_str(),
                    Some("node-a"),
                    Some("Guaranteed"),
                    Some(0),
                    Some(0)
                ),
                (
                    two.as_str(),
                    Some("node-b"),
                    Some("Burstable"),
                    Some(0x100),
                    Some(1500)
                ),
                // The primary did not report this one's replay: unknown, not 0.
                (three.as_str(), None, Some("BestEffort"), Some(0x100), None),
            ]
        );
    }

    #[test]
    fn an_instance_whose_manager_is_silent_still_shows_its_pod() {
        let db = crate::api::arbitrary::sample_database();
        let one = format!("{}-1", db.name_any());
        let snapshot = Snapshot {
            pods: vec![pod(&one, Some("node-a"), "Burstable")],
            ..Snapshot::default()
        };
        let statuses = instance_statuses(&db, &snapshot);
        assert_eq!(statuses[0].node.as_deref(), Some("node-a"));
        assert_eq!(statuses[0].qos_class.as_deref(), Some("Burstable"));
        assert_eq!(statuses[0].lag_milliseconds, None);
    }
}
