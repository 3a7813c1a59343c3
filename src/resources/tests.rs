//! Tests across builders: owner references, image derivation, the whole-Pod
//! fixture, and properties over random Databases; and the helpers the
//! builders' tests share to turn a Database into the model they take.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;

use super::*;
use crate::api::arbitrary::{database_v1, sample_database};
use crate::api::status::InstanceRole;
use crate::api::validate;
use crate::contract::Bootstrap;

/// The model of `db`, which the test made valid, as the reconciler would
/// resolve it with `config`.
pub(super) fn model_of(db: &Database, config: &BuildConfig) -> ValidatedDatabase {
    match validate::validated(db, &config.defaults()) {
        Ok(model) => model,
        Err(errors) => panic!(
            "the test's Database is invalid: {}",
            validate::summary(&errors)
        ),
    }
}

/// The model of `db` with the repository `postgres`.
pub(crate) fn model(db: &Database) -> ValidatedDatabase {
    model_of(db, &config())
}

/// The pod of instance `serial` of `db`, created as `role` from an empty
/// volume (a primary initialises, a replica clones) with the spec's image.
pub(super) fn pod_of(db: &Database, serial: u32, role: InstanceRole, config: &BuildConfig) -> Pod {
    let model = model_of(db, config);
    let bootstrap = match role {
        InstanceRole::Primary => Bootstrap::Initdb,
        InstanceRole::Replica => Bootstrap::Clone,
    };
    let planned = PlannedInstance {
        serial,
        role,
        bootstrap,
        image: &model.image,
    };
    instance_pod(&model, &planned, config)
}

/// The model's image of `db` with `config`.
fn image(db: &Database, config: &BuildConfig) -> String {
    model_of(db, config).image
}

pub(super) fn config() -> BuildConfig {
    BuildConfig {
        postgres_repository: "postgres".into(),
        tusk_image: "localhost/tusk:dev".into(),
        image_pull_policy: Some("IfNotPresent".into()),
        instance_env: Vec::new(),
        default_store: None,
        node_ports: Default::default(),
        instance_self_label: false,
    }
}

#[test]
fn owner_reference_points_at_the_database() {
    let db = sample_database();
    let owner = owner_reference(&db).unwrap_or_default();
    assert_eq!(owner.api_version, "tusk.dev/v1");
    assert_eq!(owner.kind, "Database");
    assert_eq!(owner.name, "orders");
    assert_eq!(owner.uid, "0b6c0f1e-5a47-4d38-9b3c-1f2a3b4c5d6e");
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
}

#[test]
fn no_owner_reference_without_uid() {
    let mut db = sample_database();
    db.metadata.uid = None;
    assert_eq!(owner_reference(&db), None);
    let pod = pod_of(&db, 1, InstanceRole::Primary, &config());
    assert_eq!(pod.metadata.owner_references, None);
}

#[test]
fn image_from_version_or_spec() {
    let mut db = sample_database();
    assert_eq!(image(&db, &config()), "postgres:17");
    db.spec.version = "17.2".into();
    assert_eq!(image(&db, &config()), "postgres:17.2");
    db.spec.version = "13".into();
    let local = BuildConfig {
        postgres_repository: "localhost/postgres".into(),
        ..config()
    };
    assert_eq!(image(&db, &local), "localhost/postgres:13");
    db.spec.image = Some("registry.example/pg:16.4-custom".into());
    assert_eq!(image(&db, &local), "registry.example/pg:16.4-custom");
    db.spec.image = Some(String::new());
    assert_eq!(image(&db, &local), "localhost/postgres:13");
}

/// An unsupported version never reaches a builder: it has no model, so no
/// image needs guessing from its text.
#[test]
fn an_unsupported_version_has_no_model_to_build_from() {
    let mut db = sample_database();
    db.spec.version = "12.1".into();
    let errors = validate::validated(&db, &config().defaults()).expect_err("unsupported");
    assert_eq!(errors[0].path, "spec.version");
}

#[test]
fn every_object_is_in_the_database_namespace() {
    let db = sample_database();
    for meta in all_metadata(&db, 1, "pw") {
        assert_eq!(meta.namespace.as_deref(), Some("shop"), "{:?}", meta.name);
    }
}

fn fixture_database() -> crate::api::v1::Database {
    let mut db = sample_database();
    db.spec
        .postgresql
        .parameters
        .insert("max_connections".into(), "200".into());
    db
}

const POD_PRIMARY_FIXTURE: &str = include_str!("fixtures/pod-primary.yaml");

/// The whole primary Pod, as YAML. Any change to the builder shows up here for
/// review; after checking the diff, regenerate with
/// `TUSK_BLESS_FIXTURES=1 cargo test resources::tests::pod_primary_fixture`.
#[test]
fn pod_primary_fixture() {
    let pod = pod_of(&fixture_database(), 1, InstanceRole::Primary, &config());
    let actual = serde_yaml::to_string(&pod).unwrap_or_default();
    if std::env::var_os("TUSK_BLESS_FIXTURES").is_some() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/resources/fixtures/pod-primary.yaml"
        );
        if let Err(e) = std::fs::write(path, &actual) {
            panic!("cannot write {path}: {e}");
        }
        return;
    }
    let expected: Pod = match serde_yaml::from_str(POD_PRIMARY_FIXTURE) {
        Ok(pod) => pod,
        Err(e) => panic!("fixtures/pod-primary.yaml is not a Pod: {e}"),
    };
    assert!(
        pod == expected,
        "the built Pod differs from fixtures/pod-primary.yaml; built:\n{actual}"
    );
    // Byte for byte too, so the committed file stays exactly what the builder makes.
    assert_eq!(actual, POD_PRIMARY_FIXTURE);
}

/// Metadata of every object the builders make for `db`.
fn all_metadata(db: &crate::api::v1::Database, serial: u32, password: &str) -> Vec<ObjectMeta> {
    let config = config();
    let model = model_of(db, &config);
    let instance = names::instance_name(&model.name, serial);
    let mut metas = vec![
        pod_of(db, serial, InstanceRole::Primary, &config).metadata,
        pod_of(db, serial, InstanceRole::Replica, &config).metadata,
        pvc(&model, &instance).metadata,
    ];
    metas.extend(services(&model).into_iter().map(|s| s.metadata));
    metas.extend(
        SecretKind::ALL
            .into_iter()
            .map(|kind| secret(&model, kind, password).metadata),
    );
    metas.extend(
        pod_disruption_budgets(&model)
            .into_iter()
            .map(|p| p.metadata),
    );
    metas
}

fn hash_of(pod: &Pod) -> Option<String> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SPEC_HASH_ANNOTATION).cloned())
}

/// Random valid Databases (the API's own strategy) with names up to the
/// 50-character limit and a uid, as the API server would hand them over:
/// only a valid one has a model to build from.
fn stored_database() -> impl Strategy<Value = crate::api::v1::Database> {
    (
        database_v1(),
        "[a-z]([a-z0-9-]{0,48}[a-z0-9])?",
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    )
        .prop_map(|(mut db, name, uid)| {
            db.metadata.name = Some(name);
            db.metadata.uid = Some(uid);
            db
        })
        .prop_filter("an invalid Database has no model", |db| {
            validate::validated(db, &config().defaults()).is_ok()
        })
}

proptest! {
    #[test]
    fn every_object_is_owned_labelled_and_named_within_limits(
        db in stored_database(),
        serial in 1u32..,
        password in ".{0,40}",
    ) {
        let db_name = db.metadata.name.clone().unwrap_or_default();
        let owner = owner_reference(&db);
        prop_assert!(owner.is_some());
        for meta in all_metadata(&db, serial, &password) {
            let name = meta.name.clone().unwrap_or_default();
            prop_assert!(!name.is_empty());
            prop_assert!(name.len() <= 63, "{} has {} characters", name, name.len());
            prop_assert_eq!(&meta.namespace, &db.metadata.namespace);
            prop_assert_eq!(&meta.owner_references, &owner.clone().map(|o| vec![o]));
            let labels = meta.labels.clone().unwrap_or_default();
            prop_assert_eq!(labels.get(labels::DATABASE), Some(&db_name));
            for value in labels.values() {
                prop_assert!(value.len() <= 63, "label value {} too long", value);
            }
        }
    }

    #[test]
    fn spec_hash_is_stable_and_follows_the_image(
        db in stored_database(),
        serial in 1u32..1000,
    ) {
        let config = config();
        let first = pod_of(&db, serial, InstanceRole::Primary, &config);
        let again = pod_of(&db, serial, InstanceRole::Primary, &config);
        prop_assert!(hash_of(&first).is_some());
        prop_assert_eq!(hash_of(&first), hash_of(&again));
        prop_assert_eq!(&first, &again);

        let mut other = db.clone();
        other.spec.image = Some(format!("{}-other", image(&db, &config)));
        let changed = pod_of(&other, serial, InstanceRole::Primary, &config);
        prop_assert_ne!(hash_of(&first), hash_of(&changed));
    }
}
