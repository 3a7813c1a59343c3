//! Placement and inherited metadata through the builders: a placement
//! change changes the pod spec hash (so it rolls), an inherited-metadata
//! change does not (pod metadata is patched in place), and every object
//! Tusk creates carries the inherited labels and annotations under its own.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::tests::{model, pod_of};
use super::*;
use crate::api::arbitrary::sample_database;
use crate::api::status::InstanceRole;
use crate::api::v1::{MigrationsSpec, PodAntiAffinityType};

fn config() -> BuildConfig {
    BuildConfig {
        postgres_repository: "postgres".into(),
        tusk_image: "localhost/tusk:dev".into(),
        image_pull_policy: None,
        instance_env: Vec::new(),
        default_store: None,
        instance_self_label: false,
        node_ports: Default::default(),
    }
}

fn hash_of(db: &Database) -> String {
    let model = model(db);
    instance_spec_hash(&model, 1, &model.image, &config())
}

fn inherited_db() -> Database {
    let mut db = sample_database();
    let inherited = &mut db.spec.inherited_metadata;
    inherited.labels.insert("team".into(), "payments".into());
    inherited
        .labels
        .insert(labels::NAME.into(), "not-postgresql".into());
    inherited
        .annotations
        .insert("example.com/cost-center".into(), "42".into());
    db
}

/// One edit of a Database's spec.
type Change = fn(&mut Database);

#[test]
fn a_placement_change_rolls_the_instances() {
    let plain = sample_database();
    let changes: [(&str, Change); 6] = [
        ("required anti-affinity", |db| {
            db.spec.affinity.pod_anti_affinity = PodAntiAffinityType::Required;
        }),
        ("topology key", |db| {
            db.spec.affinity.topology_key = Some("topology.kubernetes.io/zone".into());
        }),
        ("node selector", |db| {
            db.spec
                .affinity
                .node_selector
                .insert("disk".into(), "ssd".into());
        }),
        ("toleration", |db| {
            db.spec.affinity.tolerations.push(Toleration {
                key: Some("dedicated".into()),
                operator: Some("Exists".into()),
                ..Toleration::default()
            });
        }),
        ("spread", |db| {
            db.spec.topology_spread_constraints.push(
                k8s_openapi::api::core::v1::TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: "kubernetes.io/hostname".into(),
                    when_unsatisfiable: "ScheduleAnyway".into(),
                    ..Default::default()
                },
            );
        }),
        ("priority", |db| {
            db.spec.priority_class_name = Some("database-critical".into());
        }),
    ];
    for (what, change) in changes {
        let mut changed = plain.clone();
        change(&mut changed);
        assert_ne!(hash_of(&plain), hash_of(&changed), "{what}");
    }
    // Rendered where the kubelet and scheduler read them.
    let mut placed = plain.clone();
    placed
        .spec
        .affinity
        .node_selector
        .insert("disk".into(), "ssd".into());
    placed.spec.priority_class_name = Some("database-critical".into());
    let spec = pod_of(&placed, 1, InstanceRole::Primary, &config())
        .spec
        .unwrap_or_default();
    assert_eq!(
        spec.node_selector,
        Some(BTreeMap::from([("disk".into(), "ssd".into())]))
    );
    assert_eq!(
        spec.priority_class_name.as_deref(),
        Some("database-critical")
    );
}

#[test]
fn an_inherited_metadata_change_does_not_roll() {
    assert_eq!(hash_of(&sample_database()), hash_of(&inherited_db()));
}

/// Every inherited entry is on `meta`, except a label Tusk sets itself,
/// whose value is Tusk's.
fn assert_inherited(what: &str, meta: &ObjectMeta) {
    let labels = meta.labels.clone().unwrap_or_default();
    let annotations = meta.annotations.clone().unwrap_or_default();
    assert_eq!(
        labels.get("team").map(String::as_str),
        Some("payments"),
        "{what}"
    );
    assert_ne!(
        labels.get(labels::NAME).map(String::as_str),
        Some("not-postgresql"),
        "{what}: Tusk's own label wins"
    );
    assert_eq!(
        annotations
            .get("example.com/cost-center")
            .map(String::as_str),
        Some("42"),
        "{what}"
    );
}

#[test]
fn every_object_carries_the_inherited_metadata_under_tusk_s_own() {
    let db = inherited_db();
    let model = model(&db);
    let config = config();
    let pod = pod_of(&db, 2, InstanceRole::Replica, &config);
    assert_inherited("pod", &pod.metadata);
    let pod_labels = pod.labels();
    assert_eq!(pod_labels[labels::NAME], labels::NAME_VALUE);
    assert_eq!(pod_labels[labels::ROLE], "replica");
    assert!(
        pod.annotations().contains_key(SPEC_HASH_ANNOTATION)
            && pod.annotations().contains_key(BOOTSTRAP_ANNOTATION),
        "Tusk's annotations stay beside the inherited ones"
    );
    assert_inherited("pvc", &pvc(&model, "orders-2").metadata);
    for service in services(&model) {
        assert_inherited(&service.name_any(), &service.metadata);
    }
    for budget in pod_disruption_budgets(&model) {
        assert_inherited(&budget.name_any(), &budget.metadata);
    }
    for kind in SecretKind::ALL {
        assert_inherited("secret", &secret(&model, kind, "pw").metadata);
    }
    assert_inherited("account", &instance_account(&model).metadata);
    let migrations = MigrationsSpec {
        version: "1".into(),
        image: "migrate:1".into(),
        ..MigrationsSpec::default()
    };
    let job = migration_job(&model, &migrations, &config);
    assert_inherited("migration job", &job.metadata);
    assert!(job.annotations().contains_key(MIGRATION_VERSION_ANNOTATION));
    let template = job
        .spec
        .and_then(|s| s.template.metadata)
        .unwrap_or_default();
    assert_inherited("migration pod", &template);
    let input = UpgradeJobInput {
        db: &model,
        config: &config,
        old_image: "postgres:15".into(),
        new_image: "postgres:17".into(),
        old_major: 15,
        new_major: 17,
        claim: "orders-1".into(),
        node: Some("node-a".into()),
        primary_host: None,
        primary_tls: false,
    };
    let job = upgrade_job(&input);
    assert_inherited("upgrade job", &job.metadata);
    let template = job
        .spec
        .and_then(|s| s.template.metadata)
        .unwrap_or_default();
    assert_inherited("upgrade pod", &template);
}

#[test]
fn an_upgrade_job_tolerates_what_the_instances_tolerate() {
    let mut db = sample_database();
    let toleration = Toleration {
        key: Some("dedicated".into()),
        operator: Some("Equal".into()),
        value: Some("db".into()),
        effect: Some("NoSchedule".into()),
        ..Toleration::default()
    };
    db.spec.affinity.tolerations.push(toleration.clone());
    let model = model(&db);
    let config = config();
    let input = UpgradeJobInput {
        db: &model,
        config: &config,
        old_image: "postgres:15".into(),
        new_image: "postgres:17".into(),
        old_major: 15,
        new_major: 17,
        claim: "orders-1".into(),
        node: Some("node-a".into()),
        primary_host: None,
        primary_tls: false,
    };
    let spec = upgrade_job(&input)
        .spec
        .and_then(|s| s.template.spec)
        .unwrap_or_default();
    assert_eq!(spec.tolerations, Some(vec![toleration]));
    assert!(
        spec.affinity.and_then(|a| a.node_affinity).is_some(),
        "still pinned to the volume's node"
    );
}
