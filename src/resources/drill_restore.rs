//! The objects of a `restore` drill: the throwaway Database restored from
//! the drilled one to the run's recovery point, and the checker pod that
//! reads the probe's ids back from it (`tusk probe check`). Both are owned
//! by the Drill, so deleting the Drill removes them; the copy's volumes are
//! owned by the copy and go with it.
//!
//! The copy is the source's PostgreSQL (version, image, parameters,
//! resources, storage) with one instance, and nothing that reaches outside
//! it: no `backup` (it archives nothing, so its deletion takes no final
//! backup, and the annotation says so again), no exposure, no migrations,
//! no pinned primary, the default TLS.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, SecretVolumeSource};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::api::v1::{Database, Drill};

use super::probe::probe_pod;
use super::{BuildConfig, names};

/// The annotation that lets a Database go without a final backup
/// (`lifecycle::SKIP_FINAL_BACKUP`, which this layer does not see; the
/// drill controller's tests hold the two equal).
pub const SKIP_FINAL_BACKUP: &str = "tusk.dev/skip-final-backup";

/// The checker pod's name for Drill `drill`: `<drill>-check`.
pub fn check_pod_name(drill: &str) -> String {
    let name = format!("{drill}-check");
    if name.len() <= 63 {
        return name;
    }
    format!("{}-check", drill[..57].trim_end_matches('-'))
}

/// Six hex digits of `text`'s hash: names that must differ, short.
pub fn short_hash(text: &str) -> String {
    let mut hash = super::hash::fnv1a64_hex(text.as_bytes());
    hash.truncate(6);
    hash
}

/// The throwaway Database `name` restoring `source` to `target_time`,
/// owned by `drill`. `None` when the Drill was never stored (no uid to own
/// it by) or the source's spec does not carry over.
pub fn restore_copy(
    drill: &Drill,
    source: &Database,
    name: &str,
    target_time: Timestamp,
) -> Option<Database> {
    let owner = drill.controller_owner_ref(&())?;
    let spec = &source.spec;
    let mut copy = json!({
        "version": spec.version,
        "instances": 1,
        "storage": spec.storage,
        "postgresql": spec.postgresql,
        "bootstrap": {"recovery": {
            "source": source.name_any(),
            // Whole seconds: what the drill keeps on record.
            "targetTime": target_time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }},
    });
    if let Some(image) = &spec.image {
        copy["image"] = json!(image);
    }
    if let Some(wal) = &spec.wal_storage {
        copy["walStorage"] = json!(wal);
    }
    if let Some(resources) = &spec.resources {
        copy["resources"] = json!(resources);
    }
    let database = json!({
        "apiVersion": "tusk.dev/v1",
        "kind": "Database",
        "metadata": {
            "name": name,
            "namespace": drill.namespace(),
            "labels": {super::probe::DRILL_LABEL: drill.name_any()},
            "annotations": {SKIP_FINAL_BACKUP: "true"},
            "ownerReferences": [owner],
        },
        "spec": copy,
    });
    serde_json::from_value(database).ok()
}

/// The checker pod of `drill`: `tusk probe check` against the copy's `-rw`
/// (dialling `address`, its cluster IP, when given) as the copy's
/// superuser, reading `ids` (as [`crate::probe::check::encode_ids`] wrote
/// them) from `dbname`, the source's application database: the probe's
/// table is there, owned by the source's application owner, which the
/// copy's `-app` Secret does not name when the source's `initdb` chose
/// another.
pub fn check_pod(
    drill: &Drill,
    copy: &str,
    address: Option<std::net::IpAddr>,
    dbname: &str,
    ids: &str,
    config: &BuildConfig,
) -> Option<Pod> {
    let mut pod = probe_pod(drill, address, config)?;
    pod.metadata.name = Some(check_pod_name(&drill.name_any()));
    if let Some(labels) = pod.metadata.labels.as_mut() {
        labels.insert(
            "app.kubernetes.io/name".to_owned(),
            "tusk-drill-check".to_owned(),
        );
    }
    let spec = pod.spec.as_mut()?;
    for container in &mut spec.containers {
        container.name = "check".to_owned();
        container.ports = None;
        container.readiness_probe = None;
        container.args.get_or_insert_with(Vec::new).extend([
            "check".to_owned(),
            "--ids".to_owned(),
            ids.to_owned(),
            "--dbname".to_owned(),
            dbname.to_owned(),
        ]);
    }
    for volume in spec.volumes.iter_mut().flatten() {
        if let Some(secret) = volume.secret.as_mut() {
            *secret = SecretVolumeSource {
                secret_name: Some(names::superuser_secret(copy)),
                ..secret.clone()
            };
        }
    }
    Some(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::v1::{BackupConfig, ExposeSpec, ObjectStore, Scenario};
    use crate::resources::tests::config;

    fn drill() -> Drill {
        crate::api::arbitrary::stored_drill("weekly", Scenario::Restore)
    }

    #[test]
    fn the_copy_restores_the_source_to_the_point_alone_and_owned_by_the_drill() {
        let mut source = sample_database();
        source.metadata.name = Some("orders".into());
        source.spec.instances = 3;
        source.spec.image = Some("registry/pg:17.2".into());
        source.spec.backup = Some(BackupConfig {
            schedule: Some("@daily".into()),
            retention: None,
            object_store: Some(ObjectStore {
                bucket: "b".into(),
                ..Default::default()
            }),
            verify: None,
        });
        source.spec.primary = Some("orders-2".into());
        source.spec.expose = serde_json::from_value::<Vec<ExposeSpec>>(json!([
            {"target": "rw", "type": "NodePort"}
        ]))
        .unwrap();
        let at = Timestamp::from_second(1_800_000_000).unwrap();
        let copy = restore_copy(&drill(), &source, "weekly-restore-abc123", at).unwrap();
        assert_eq!(copy.metadata.name.as_deref(), Some("weekly-restore-abc123"));
        assert_eq!(copy.metadata.namespace.as_deref(), Some("shop"));
        let owner = &copy.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Drill", "u-1"));
        assert_eq!(copy.annotations()[SKIP_FINAL_BACKUP], "true");
        assert_eq!(copy.spec.instances, 1);
        assert_eq!(copy.spec.version, source.spec.version);
        assert_eq!(copy.spec.image, source.spec.image);
        assert_eq!(copy.spec.storage, source.spec.storage);
        assert!(copy.spec.backup.is_none(), "the copy archives nothing");
        assert!(copy.spec.expose.is_empty() && copy.spec.primary.is_none());
        assert!(copy.spec.migrations.is_none());
        let recovery = copy.spec.bootstrap.unwrap().recovery.unwrap();
        assert_eq!(recovery.source.as_deref(), Some("orders"));
        assert_eq!(
            recovery.target_time.as_deref(),
            Some("2027-01-15T08:00:00Z")
        );
        let mut unstored = drill();
        unstored.metadata.uid = None;
        assert!(restore_copy(&unstored, &source, "x", at).is_none());
    }

    #[test]
    fn the_checker_reads_the_copy_as_its_superuser_and_reports_through_its_termination_message() {
        let pod = check_pod(
            &drill(),
            "weekly-restore-abc123",
            Some("10.96.0.40".parse().unwrap()),
            "shop",
            "1-40,42",
            &config(),
        )
        .unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("weekly-check"));
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.kind, "Drill");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let container = &spec.containers[0];
        assert_eq!(
            container.args.as_deref().unwrap(),
            [
                "probe",
                "--address",
                "10.96.0.40",
                "check",
                "--ids",
                "1-40,42",
                "--dbname",
                "shop"
            ]
        );
        assert!(container.ports.is_none() && container.readiness_probe.is_none());
        assert_eq!(
            container.termination_message_policy.as_deref(),
            Some("FallbackToLogsOnError")
        );
        let secret = spec.volumes.unwrap()[0].secret.clone().unwrap();
        assert_eq!(
            secret.secret_name.as_deref(),
            Some("weekly-restore-abc123-superuser")
        );
        assert_eq!(secret.default_mode, Some(0o400));
        assert!(check_pod_name(&"d".repeat(57)).len() <= 63);
    }
}
