//! The Pod of one PostgreSQL instance.
//!
//! The pod runs a stock PostgreSQL image; an init container from the operator image
//! copies the static `tusk` binary into an emptyDir, and the main container runs
//! `tusk instance` as PID 1, which initialises or clones the data directory,
//! supervises `postgres` and serves the instance API on port 8000. What it
//! shares with the Jobs (layout, init container, security) is in
//! [`super::container`]; its TLS Secret volume and TLS environment are
//! [`super::tls`]'s.

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, Container, ContainerPort, DownwardAPIProjection, DownwardAPIVolumeFile,
    EmptyDirVolumeSource, EnvVar, HTTPGetAction, KeyToPath, ObjectFieldSelector,
    PersistentVolumeClaimVolumeSource, Pod, PodSpec, Probe, ProjectedVolumeSource,
    ServiceAccountTokenProjection, Volume, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::container::{
    DATA_MOUNT, DATA_VOLUME, HEALTH_PORT, PGDATA, POSTGRES_CONTAINER, POSTGRES_PORT, RUN_VOLUME,
    STORE_CREDENTIALS_MOUNT, STORE_CREDENTIALS_VOLUME, TMP_VOLUME, TUSK_BIN, TUSK_BIN_VOLUME,
    bootstrap_container, container_security_context, field_env, instance_objectstore_env, mount,
    pod_security_context, store_credentials_volume, value_env,
};
use super::secret::{SecretKind, secret_env};
use super::{
    BuildConfig, compute, hash, inherited, labels, names, object_meta, placement, tls, wal_volume,
};
use crate::api::model::RESTARTED_AT_ANNOTATION;
use crate::api::model::ValidatedDatabase;
use crate::api::status::InstanceRole;
use crate::api::v1::ReplicationMode;
use crate::contract::{Bootstrap, env};

/// Annotation holding [`spec_hash`] of the pod's spec as built. The controller
/// compares it with [`instance_spec_hash`] to decide whether a pod must be
/// recreated (pod specs are mostly immutable, so "apply again" is not an option).
pub const SPEC_HASH_ANNOTATION: &str = "tusk.dev/spec-hash";
/// How an empty volume is filled (`initdb` or `clone`), read by the instance
/// manager as `TUSK_BOOTSTRAP`.
pub use crate::contract::env::BOOTSTRAP_ANNOTATION;
const API_ACCESS_VOLUME: &str = "kube-api-access";
const API_ACCESS_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// initdb, or `pg_basebackup` of a large primary, runs before `/healthz` answers
/// on a slow start; 3600 × 1 s gives the first start an hour before the kubelet
/// restarts it. Once started, liveness takes over with normal thresholds.
const STARTUP_FAILURE_THRESHOLD: i32 = 3600;
/// Probed every second: readiness probes (and with them the Services'
/// endpoints) wait for the startup probe, so after a restart in place its
/// period is part of the write pause (10 s made a killed primary's container
/// pause writes 9 s; the probe is an HTTP call to the manager).
const STARTUP_PERIOD_SECONDS: i32 = 1;
/// Time for a clean ("fast") shutdown: checkpoint, WAL flushed to replicas.
const TERMINATION_GRACE_SECONDS: i64 = 60;

/// What the plan resolved for one instance's pod, besides the Database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedInstance<'a> {
    /// The serial in the instance's name (`<db>-<serial>`).
    pub serial: u32,
    /// The initial `tusk.dev/role` label.
    pub role: InstanceRole,
    /// How an empty volume is filled.
    pub bootstrap: Bootstrap,
    /// The PostgreSQL image: the spec's ([`ValidatedDatabase::image`]), or the
    /// one the other instances run while a new one cannot be rolled out.
    pub image: &'a str,
}

/// The Pod of `instance` of `db`.
///
/// The role label is only the initial one: the operator moves it on switchover
/// and failover, so an existing pod's role label must not be re-applied from a
/// fresh build. Nothing role-dependent is in the pod spec, so the
/// [`SPEC_HASH_ANNOTATION`] is the same for either role and a role change never
/// asks for a recreation. The bootstrap is an annotation the container reads
/// through the downward API, not an env value, so that (like the role) it
/// stays out of the spec hash.
///
/// A Database's [`RESTARTED_AT_ANNOTATION`] is copied onto the pod and
/// folded into its spec hash, so a new value makes every pod outdated and
/// the rolling update replaces them; without it the hash is the spec's alone.
///
/// The pod reads the passwords from the three Secrets (see [`super::secret`]),
/// which must exist before it starts or the kubelet holds it in
/// `CreateContainerConfigError`. The object store's credentials Secret is
/// optional: the pod starts without it and archives once it is there (see
/// [`super::container::instance_objectstore_env`]).
pub fn instance_pod(
    db: &ValidatedDatabase,
    instance: &PlannedInstance<'_>,
    config: &BuildConfig,
) -> Pod {
    let name = names::instance_name(&db.name, instance.serial);
    let spec = pod_spec(db, &name, instance.image, config);
    let mut metadata = object_meta(
        db,
        name.clone(),
        labels::pod(&db.name, &name, instance.role),
    );
    let hash = restarted_hash(spec_hash(&spec), db.restarted_at.as_deref());
    inherited::annotate(
        &mut metadata.annotations,
        [
            (SPEC_HASH_ANNOTATION.to_owned(), hash),
            (
                BOOTSTRAP_ANNOTATION.to_owned(),
                instance.bootstrap.as_str().to_owned(),
            ),
        ]
        .into_iter()
        .chain(
            db.restarted_at
                .clone()
                .map(|at| (RESTARTED_AT_ANNOTATION.to_owned(), at)),
        ),
    );
    Pod {
        metadata,
        spec: Some(spec),
        status: None,
    }
}

/// The [`SPEC_HASH_ANNOTATION`] of instance `serial` of `db` built with
/// `image`: what [`instance_pod`] would write, without building the rest of
/// the Pod (role and bootstrap are not in it). A running pod whose
/// annotation differs must be recreated.
pub fn instance_spec_hash(
    db: &ValidatedDatabase,
    serial: u32,
    image: &str,
    config: &BuildConfig,
) -> String {
    let name = names::instance_name(&db.name, serial);
    restarted_hash(
        spec_hash(&pod_spec(db, &name, image, config)),
        db.restarted_at.as_deref(),
    )
}

/// The spec hash of a pod of a Database restarted at `restarted_at` (its
/// [`RESTARTED_AT_ANNOTATION`]): a new value is a new hash, so the rollout
/// replaces every pod. Without the annotation the hash is the spec's alone,
/// as before the annotation existed, so no pod is replaced for it.
fn restarted_hash(hash: String, restarted_at: Option<&str>) -> String {
    match restarted_at {
        Some(at) => hash::fnv1a64_hex(format!("{hash}\n{RESTARTED_AT_ANNOTATION}={at}").as_bytes()),
        None => hash,
    }
}

/// The image of an instance pod's PostgreSQL container; empty when it has none.
pub fn postgres_image(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == POSTGRES_CONTAINER))
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// A stable hash (FNV-1a over the JSON form) of what a pod must be recreated
/// for: the pod spec without the environment that only seeds the manager at
/// start ([`env::START_ONLY`]: parameters and synchronous replication, which
/// the operator changes through the instance API), and without CPU, which
/// is resized in place (see [`super::compute`]; the planner rolls a pod
/// whose CPU cannot be). The same for the same spec
/// in every process and every operator version that serialises it alike.
pub fn spec_hash(spec: &PodSpec) -> String {
    let mut spec = spec.clone();
    compute::without_cpu(&mut spec);
    for container in &mut spec.containers {
        if let Some(vars) = &mut container.env {
            vars.retain(|var| !env::START_ONLY.contains(&var.name.as_str()));
        }
    }
    // Serialising a PodSpec cannot fail: it has only string map keys and no
    // fallible Serialize impls; an empty input would still hash deterministically.
    let json = serde_json::to_vec(&spec).unwrap_or_default();
    hash::fnv1a64_hex(&json)
}

fn pod_spec(db: &ValidatedDatabase, instance: &str, image: &str, config: &BuildConfig) -> PodSpec {
    PodSpec {
        hostname: Some(instance.to_owned()),
        init_containers: Some(vec![Container {
            resources: Some(compute::instance(&db.resources)),
            ..bootstrap_container(config)
        }]),
        containers: vec![super::probe_scheme::https_when_tls(postgres_container(
            db, instance, image, config,
        ))],
        volumes: Some(volumes(db, instance)),
        security_context: Some(pod_security_context()),
        termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
        affinity: Some(placement::affinity(&db.name, &db.placement)),
        node_selector: placement::node_selector(&db.placement),
        tolerations: placement::tolerations(&db.placement),
        topology_spread_constraints: placement::topology_spread(&db.name, &db.placement),
        priority_class_name: db.placement.priority_class_name.clone(),
        // Service links would inject host/port variables for every Service in the
        // namespace; a Service named `tusk` would even add `TUSK_*` variables next
        // to the ones the instance manager reads.
        enable_service_links: Some(false),
        // The manager holds the primary Lease with this account; its token is
        // projected into the manager's container only (see `volumes`), never
        // into the init container.
        service_account_name: Some(names::instance_account(&db.name)),
        automount_service_account_token: Some(false),
        ..PodSpec::default()
    }
}

fn postgres_container(
    db: &ValidatedDatabase,
    instance: &str,
    image: &str,
    config: &BuildConfig,
) -> Container {
    Container {
        name: POSTGRES_CONTAINER.to_owned(),
        image: Some(image.to_owned()),
        image_pull_policy: config.image_pull_policy.clone(),
        command: Some(vec![format!("{TUSK_BIN}/tusk"), "instance".to_owned()]),
        env: Some(
            env(db, instance)
                .into_iter()
                .chain(config.instance_env.iter().map(|(k, v)| value_env(k, v)))
                .collect(),
        ),
        ports: Some(vec![
            container_port("postgresql", POSTGRES_PORT),
            container_port("tusk", HEALTH_PORT),
        ]),
        readiness_probe: Some(Probe {
            period_seconds: Some(2),
            failure_threshold: Some(3),
            ..http_probe("/readyz")
        }),
        liveness_probe: Some(Probe {
            period_seconds: Some(10),
            failure_threshold: Some(3),
            ..http_probe("/healthz")
        }),
        startup_probe: Some(Probe {
            period_seconds: Some(STARTUP_PERIOD_SECONDS),
            failure_threshold: Some(STARTUP_FAILURE_THRESHOLD),
            ..http_probe("/healthz")
        }),
        volume_mounts: Some(
            [
                mount(DATA_VOLUME, DATA_MOUNT, false),
                mount(TUSK_BIN_VOLUME, TUSK_BIN, true),
                mount(RUN_VOLUME, "/var/run/postgresql", false),
                mount(TMP_VOLUME, "/tmp", false),
                mount(API_ACCESS_VOLUME, API_ACCESS_MOUNT, true),
            ]
            .into_iter()
            .chain(
                db.object_store
                    .as_ref()
                    .and_then(store_credentials_volume)
                    .map(|_| mount(STORE_CREDENTIALS_VOLUME, STORE_CREDENTIALS_MOUNT, true)),
            )
            .chain(wal_volume::mount(db))
            .chain([tls::instance_mount()])
            .collect(),
        ),
        resources: Some(compute::instance(&db.resources)),
        security_context: Some(container_security_context()),
        ..Container::default()
    }
}

fn env(db: &ValidatedDatabase, instance: &str) -> Vec<EnvVar> {
    let db_name = db.name.as_str();
    let sync_mode = match db.replication.mode {
        ReplicationMode::Async => "async",
        ReplicationMode::Sync => "sync",
    };
    // Built through `Value` because its Display cannot fail, unlike `to_string`;
    // a BTreeMap keeps the keys sorted so the spec hash is stable.
    let parameters = serde_json::Value::Object(
        db.effective_parameters()
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect(),
    )
    .to_string();
    let mut vars = vec![
        field_env(env::POD_NAME, "metadata.name"),
        field_env(env::POD_NAMESPACE, "metadata.namespace"),
        field_env(
            env::BOOTSTRAP,
            &format!("metadata.annotations['{BOOTSTRAP_ANNOTATION}']"),
        ),
        value_env(env::DATABASE, db_name),
        value_env(env::INSTANCE, instance),
        value_env(env::PGDATA, PGDATA),
        value_env(env::PRIMARY_SERVICE, &names::rw_service(db_name)),
        value_env(env::LEASE, &names::primary_lease(db_name)),
        secret_env(env::SUPERUSER_PASSWORD, db_name, SecretKind::Superuser),
        secret_env(env::REPLICATION_PASSWORD, db_name, SecretKind::Replication),
        secret_env(env::APP_PASSWORD, db_name, SecretKind::App),
        secret_env(env::INSTANCE_TOKEN, db_name, SecretKind::InstanceToken),
        value_env(env::APP_DATABASE, &db.initdb.database),
        value_env(env::APP_OWNER, &db.initdb.owner),
        value_env(env::SYNC_MODE, sync_mode),
        value_env(env::MIN_SYNC, &db.replication.min_sync_replicas.to_string()),
        value_env(env::PARAMETERS, &parameters),
    ];
    if let Some(store) = &db.object_store {
        vars.extend(instance_objectstore_env(store));
    }
    vars.extend(wal_volume::env(db));
    vars.extend(tls::instance_env(db));
    vars
}

fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    }
}

fn http_probe(path: &str) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::Int(HEALTH_PORT),
            ..HTTPGetAction::default()
        }),
        timeout_seconds: Some(5),
        ..Probe::default()
    }
}

fn volumes(db: &ValidatedDatabase, instance: &str) -> Vec<Volume> {
    let empty_dir = |name: &str| Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    vec![
        Volume {
            name: DATA_VOLUME.to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: names::pvc(instance),
                read_only: None,
            }),
            ..Volume::default()
        },
        empty_dir(TUSK_BIN_VOLUME),
        empty_dir(RUN_VOLUME),
        empty_dir(TMP_VOLUME),
        api_access_volume(),
    ]
    .into_iter()
    .chain(db.object_store.as_ref().and_then(store_credentials_volume))
    .chain(wal_volume::volume(db, instance))
    .chain([tls::instance_volume(instance)])
    .collect()
}

/// The service account's token, the cluster CA and the namespace, where
/// Kubernetes clients look for them, as the kubelet's automount would put
/// them (a bound token the kubelet rotates).
fn api_access_volume() -> Volume {
    Volume {
        name: API_ACCESS_VOLUME.to_owned(),
        projected: Some(ProjectedVolumeSource {
            default_mode: None,
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        expiration_seconds: Some(3607),
                        path: "token".to_owned(),
                        audience: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".to_owned(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_owned(),
                            path: "ca.crt".to_owned(),
                            mode: None,
                        }]),
                        optional: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".to_owned(),
                            field_ref: Some(ObjectFieldSelector {
                                api_version: Some("v1".to_owned()),
                                field_path: "metadata.namespace".to_owned(),
                            }),
                            ..DownwardAPIVolumeFile::default()
                        }]),
                    }),
                    ..VolumeProjection::default()
                },
            ]),
        }),
        ..Volume::default()
    }
}

/// Whether `pod` was built with a TLS Secret (its `postgres` container has
/// `TUSK_TLS_DIR`): its manager serves HTTPS and its PostgreSQL TLS. What a
/// pod serves follows from the pod as built, whatever the spec says now.
pub fn serves_tls(pod: &Pod) -> bool {
    pod.spec.iter().flat_map(|s| &s.containers).any(|c| {
        c.env
            .iter()
            .flatten()
            .any(|e| e.name == crate::contract::env::TLS_DIR)
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube::ResourceExt;

    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::v1::{BootstrapSpec, InitdbSpec, ObjectStore, ReplicationSpec};
    use crate::resources::tests::{model_of, pod_of};
    use crate::resources::{APP_PASSWORD_ENV, REPLICATION_PASSWORD_ENV, SUPERUSER_PASSWORD_ENV};

    fn config() -> BuildConfig {
        BuildConfig {
            postgres_repository: "localhost/postgres".into(),
            tusk_image: "localhost/tusk:dev".into(),
            image_pull_policy: Some("IfNotPresent".into()),
            instance_env: Vec::new(),
            default_store: None,
            node_ports: Default::default(),
            instance_self_label: false,
        }
    }

    fn spec_of(pod: &Pod) -> PodSpec {
        pod.spec.clone().unwrap_or_default()
    }

    fn postgres(pod: &Pod) -> Container {
        spec_of(pod)
            .containers
            .into_iter()
            .find(|c| c.name == "postgres")
            .unwrap_or_default()
    }

    fn env_map(container: &Container) -> BTreeMap<String, EnvVar> {
        container
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name.clone(), e))
            .collect()
    }

    fn value(env: &BTreeMap<String, EnvVar>, name: &str) -> String {
        env.get(name)
            .and_then(|e| e.value.clone())
            .unwrap_or_else(|| panic!("{name} has no value"))
    }

    #[test]
    fn metadata_names_labels_owner() {
        let db = sample_database();
        let pod = pod_of(&db, 2, InstanceRole::Replica, &config());
        assert_eq!(pod.metadata.name.as_deref(), Some("orders-2"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("shop"));
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels,
            labels::pod("orders", "orders-2", InstanceRole::Replica)
        );
        assert_eq!(labels[labels::ROLE], "replica");
        let owners = pod.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "Database");
        assert_eq!(owners[0].controller, Some(true));
        let spec = spec_of(&pod);
        assert_eq!(spec.hostname.as_deref(), Some("orders-2"));
        assert_eq!(spec.subdomain, None);
        assert_eq!(spec.termination_grace_period_seconds, Some(60));
    }

    #[test]
    fn volumes_and_mounts() {
        let pod = pod_of(&sample_database(), 3, InstanceRole::Primary, &config());
        let spec = spec_of(&pod);
        let volumes = spec.volumes.clone().unwrap_or_default();
        let names: Vec<&str> = volumes.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            ["data", "tusk-bin", "run", "tmp", "kube-api-access", "tls"]
        );
        assert_eq!(
            volumes[5]
                .secret
                .as_ref()
                .and_then(|s| s.secret_name.as_deref()),
            Some("orders-3-tls"),
            "the instance's own TLS Secret"
        );
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some("orders-3")
        );
        assert!(volumes[1..4].iter().all(|v| v.empty_dir.is_some()));
        // The account's token reaches the manager's container alone: the init
        // container mounts none of it and nothing is automounted.
        assert!(volumes[4].projected.is_some());
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(
            spec.service_account_name.as_deref(),
            Some("orders-instance")
        );
        let init = spec.init_containers.clone().unwrap_or_default();
        assert!(init.iter().all(|c| {
            c.volume_mounts
                .iter()
                .flatten()
                .all(|m| m.name != "kube-api-access")
        }));

        let mounts: Vec<(String, String)> = postgres(&pod)
            .volume_mounts
            .unwrap_or_default()
            .into_iter()
            .map(|m| (m.name, m.mount_path))
            .collect();
        assert_eq!(
            mounts,
            [
                ("data".into(), "/var/lib/postgresql/data".into()),
                ("tusk-bin".into(), "/tusk/bin".into()),
                ("run".into(), "/var/run/postgresql".into()),
                ("tmp".into(), "/tmp".into()),
                (
                    "kube-api-access".into(),
                    "/var/run/secrets/kubernetes.io/serviceaccount".into()
                ),
                ("tls".into(), "/tusk/tls".into()),
            ]
        );
        // The init container runs the operator image's binary copy only: it
        // gets none of the instance's keys.
        assert!(
            init.iter()
                .all(|c| { c.volume_mounts.iter().flatten().all(|m| m.name != "tls") })
        );
    }

    /// The TLS settings are read by the manager at start only, so each one
    /// rolls the pods; the certificates live in the Secret, not in the pod
    /// spec, so a renewal changes no hash.
    #[test]
    fn every_tls_setting_rolls_the_pods() {
        let hash_of = |db: &crate::api::v1::Database| {
            let pod = pod_of(db, 1, InstanceRole::Primary, &config());
            pod.annotations().get(SPEC_HASH_ANNOTATION).cloned()
        };
        let plain = sample_database();
        type Edit = fn(&mut crate::api::v1::TlsSpec);
        // clientCertificates reaches pg_hba through TUSK_TLS_CERT_USERS.
        let edits: [(&str, Edit); 3] = [
            ("allowPlaintext", |t| t.allow_plaintext = true),
            ("clientCertificates", |t| t.client_certificates = true),
            ("minProtocolVersion", |t| {
                t.min_protocol_version = crate::api::v1::TlsVersion::Tls12;
            }),
        ];
        for (field, edit) in edits {
            let mut changed = plain.clone();
            edit(&mut changed.spec.tls);
            assert_ne!(hash_of(&plain), hash_of(&changed), "{field}");
        }
        let mut renewed = plain.clone();
        renewed.spec.tls.certificate_lifetime = Some("30d".into());
        renewed.spec.tls.rotate_ca = Some("2026-11-26".into());
        assert_eq!(
            hash_of(&plain),
            hash_of(&renewed),
            "lifetimes and CA rotation change Secrets, not pods"
        );
    }

    #[test]
    fn init_container_copies_tusk() {
        let pod = pod_of(&sample_database(), 1, InstanceRole::Primary, &config());
        let init = spec_of(&pod).init_containers.unwrap_or_default();
        assert_eq!(init.len(), 1);
        assert_eq!(init[0].name, "bootstrap-tusk");
        assert_eq!(init[0].image.as_deref(), Some("localhost/tusk:dev"));
        assert_eq!(init[0].command, None);
        assert_eq!(
            init[0].args,
            Some(vec!["copy-binary".into(), "/tusk/bin/tusk".into()])
        );
        assert_eq!(init[0].image_pull_policy.as_deref(), Some("IfNotPresent"));
        let mounts = init[0].volume_mounts.clone().unwrap_or_default();
        assert_eq!(mounts.len(), 1);
        assert_eq!(
            (mounts[0].name.as_str(), mounts[0].mount_path.as_str()),
            ("tusk-bin", "/tusk/bin")
        );
    }

    #[test]
    fn main_container_runs_the_instance_manager() {
        let pod = pod_of(&sample_database(), 1, InstanceRole::Primary, &config());
        let pg = postgres(&pod);
        assert_eq!(pg.image.as_deref(), Some("localhost/postgres:17"));
        assert_eq!(
            pg.command,
            Some(vec!["/tusk/bin/tusk".into(), "instance".into()])
        );
        let ports: Vec<(Option<String>, i32)> = pg
            .ports
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p.name, p.container_port))
            .collect();
        assert_eq!(
            ports,
            [
                (Some("postgresql".into()), 5432),
                (Some("tusk".into()), 8000)
            ]
        );
    }

    #[test]
    fn probes() {
        let pg = postgres(&pod_of(
            &sample_database(),
            1,
            InstanceRole::Primary,
            &config(),
        ));
        let target = |probe: Option<Probe>| {
            let get = probe.and_then(|p| p.http_get).unwrap_or_default();
            (get.path.unwrap_or_default(), get.port)
        };
        assert_eq!(
            target(pg.readiness_probe.clone()),
            ("/readyz".into(), IntOrString::Int(8000))
        );
        assert_eq!(
            target(pg.liveness_probe.clone()),
            ("/healthz".into(), IntOrString::Int(8000))
        );
        assert_eq!(
            target(pg.startup_probe.clone()),
            ("/healthz".into(), IntOrString::Int(8000))
        );
        let startup = pg.startup_probe.unwrap_or_default();
        let patience =
            startup.period_seconds.unwrap_or(10) * startup.failure_threshold.unwrap_or(3);
        assert!(patience >= 30 * 60, "startup allows only {patience}s");
    }

    #[test]
    fn tracing_settings_reach_the_instance_manager_and_only_when_set() {
        let db = sample_database();
        let plain = pod_of(&db, 1, InstanceRole::Primary, &config());
        let traced_config = BuildConfig {
            instance_env: vec![(
                "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
                "http://collector:4318".into(),
            )],
            ..config()
        };
        let traced = pod_of(&db, 1, InstanceRole::Primary, &traced_config);
        let endpoint = |pod: &Pod| {
            spec_of(pod).containers[0]
                .env
                .clone()
                .unwrap_or_default()
                .into_iter()
                .find(|e| e.name == "OTEL_EXPORTER_OTLP_ENDPOINT")
                .and_then(|e| e.value)
        };
        assert_eq!(endpoint(&plain), None);
        assert_eq!(endpoint(&traced).as_deref(), Some("http://collector:4318"));
        // A changed setting is a changed pod: rolled like any other change.
        let hash = |pod: &Pod| pod.annotations().get(SPEC_HASH_ANNOTATION).cloned();
        assert_ne!(hash(&plain), hash(&traced));
    }

    #[test]
    fn environment() {
        let mut db = sample_database();
        db.spec
            .postgresql
            .parameters
            .insert("work_mem".into(), "8MB".into());
        db.spec
            .postgresql
            .parameters
            .insert("max_connections".into(), "200".into());
        db.spec.replication = ReplicationSpec {
            mode: ReplicationMode::Sync,
            min_sync_replicas: 2,
        };
        db.spec.bootstrap = Some(BootstrapSpec {
            initdb: Some(InitdbSpec {
                database: "shop".into(),
                owner: "clerk".into(),
            }),
            recovery: None,
        });
        let env = env_map(&postgres(&pod_of(&db, 4, InstanceRole::Replica, &config())));
        assert_eq!(value(&env, "TUSK_DATABASE"), "orders");
        assert_eq!(value(&env, "TUSK_INSTANCE"), "orders-4");
        assert_eq!(value(&env, "PGDATA"), "/var/lib/postgresql/data/pgdata");
        assert_eq!(value(&env, "TUSK_PRIMARY_SERVICE"), "orders-rw");
        assert_eq!(value(&env, "TUSK_APP_DATABASE"), "shop");
        assert_eq!(value(&env, "TUSK_APP_OWNER"), "clerk");
        assert_eq!(value(&env, "TUSK_SYNC_MODE"), "sync");
        assert_eq!(value(&env, "TUSK_MIN_SYNC"), "2");
        assert_eq!(
            value(&env, "TUSK_PARAMETERS"),
            r#"{"effective_cache_size":"144MB","maintenance_work_mem":"16MB","max_connections":"200","max_wal_size":"256MB","shared_buffers":"48MB","work_mem":"8MB"}"#,
            "the derived settings, overridden by spec.postgresql.parameters"
        );
        for (var, path) in [
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
        ] {
            let field = env[var]
                .value_from
                .as_ref()
                .and_then(|s| s.field_ref.as_ref())
                .map(|f| f.field_path.as_str());
            assert_eq!(field, Some(path), "{var}");
        }
        for (var, secret) in [
            (SUPERUSER_PASSWORD_ENV, "orders-superuser"),
            (REPLICATION_PASSWORD_ENV, "orders-replication"),
            (APP_PASSWORD_ENV, "orders-app"),
        ] {
            let key = env[var]
                .value_from
                .as_ref()
                .and_then(|s| s.secret_key_ref.as_ref())
                .map(|k| (k.name.as_str(), k.key.as_str()));
            assert_eq!(key, Some((secret, "password")), "{var}");
            assert_eq!(
                env[var].value, None,
                "{var} must not carry the password itself"
            );
        }
    }

    #[test]
    fn environment_defaults() {
        let env = env_map(&postgres(&pod_of(
            &sample_database(),
            1,
            InstanceRole::Primary,
            &config(),
        )));
        assert_eq!(value(&env, "TUSK_APP_DATABASE"), "app");
        assert_eq!(value(&env, "TUSK_APP_OWNER"), "app");
        assert_eq!(value(&env, "TUSK_SYNC_MODE"), "async");
        assert_eq!(value(&env, "TUSK_MIN_SYNC"), "1");
        assert_eq!(
            value(&env, "TUSK_PARAMETERS"),
            r#"{"effective_cache_size":"144MB","maintenance_work_mem":"16MB","max_wal_size":"256MB","shared_buffers":"48MB","work_mem":"1MB"}"#,
            "the settings derived from the default 256Mi and the 1Gi volume"
        );
        assert!(
            !env.keys()
                .any(|k| k.starts_with("TUSK_OBJECTSTORE") || k.starts_with("AWS_")),
            "no store, no store settings: {:?}",
            env.keys()
        );
    }

    #[test]
    fn an_object_store_reaches_the_manager_with_credentials_from_their_secret() {
        let mut db = sample_database();
        db.spec.backup = Some(crate::api::v1::BackupConfig {
            object_store: Some(ObjectStore {
                bucket: "backups".into(),
                path: Some("team".into()),
                endpoint: Some("http://s3.store.svc:7070".into()),
                region: None,
                credentials_secret: Some("s3-creds".into()),
            }),
            ..Default::default()
        });
        let env = env_map(&postgres(&pod_of(&db, 1, InstanceRole::Primary, &config())));
        assert_eq!(value(&env, "TUSK_OBJECTSTORE_BUCKET"), "backups");
        assert_eq!(value(&env, "TUSK_OBJECTSTORE_PATH"), "team");
        assert_eq!(
            value(&env, "TUSK_OBJECTSTORE_ENDPOINT"),
            "http://s3.store.svc:7070"
        );
        assert!(!env.contains_key("TUSK_OBJECTSTORE_REGION"));
        // The credentials are files of an optional Secret volume, never
        // variables: the pod starts without the Secret and sees it once it
        // is created or fixed.
        for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
            assert!(!env.contains_key(key), "{key} is a variable");
        }
        assert_eq!(
            value(&env, "TUSK_OBJECTSTORE_CREDENTIALS_DIR"),
            "/var/run/tusk/store-credentials"
        );
        assert_eq!(
            value(&env, "TUSK_OBJECTSTORE_CREDENTIALS_SECRET"),
            "s3-creds"
        );
        let pod = pod_of(&db, 1, InstanceRole::Primary, &config());
        let spec = pod.spec.as_ref().expect("a spec");
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "store-credentials")
            .and_then(|v| v.secret.as_ref())
            .expect("the credentials volume");
        assert_eq!(volume.secret_name.as_deref(), Some("s3-creds"));
        assert_eq!(volume.optional, Some(true), "the pod must start without it");
        let keys: Vec<&str> = volume
            .items
            .iter()
            .flatten()
            .map(|i| i.key.as_str())
            .collect();
        assert_eq!(keys, ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]);
        let container = postgres(&pod);
        let mounted = container
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == "store-credentials")
            .expect("mounted in the postgres container");
        assert_eq!(mounted.mount_path, "/var/run/tusk/store-credentials");
        assert_eq!(mounted.read_only, Some(true));
    }

    /// The checks of Pod Security "restricted" (v1.34) that a pod spec can fail.
    #[test]
    fn meets_pod_security_restricted() {
        let spec = spec_of(&pod_of(
            &sample_database(),
            1,
            InstanceRole::Primary,
            &config(),
        ));
        let pod_ctx = spec.security_context.clone().unwrap_or_default();
        assert_eq!(pod_ctx.run_as_non_root, Some(true));
        assert_eq!(pod_ctx.run_as_user, Some(999));
        assert_eq!(pod_ctx.run_as_group, Some(999));
        assert_eq!(pod_ctx.fs_group, Some(999));
        assert_eq!(
            pod_ctx.seccomp_profile.map(|p| p.type_).as_deref(),
            Some("RuntimeDefault")
        );
        assert_eq!(spec.host_network, None);
        assert_eq!(spec.host_pid, None);
        assert_eq!(spec.host_ipc, None);
        let volumes = spec.volumes.clone().unwrap_or_default();
        assert!(volumes.iter().all(|v| v.host_path.is_none()));

        let containers = spec
            .init_containers
            .clone()
            .unwrap_or_default()
            .into_iter()
            .chain(spec.containers.clone());
        for c in containers {
            let ctx = c.security_context.clone().unwrap_or_default();
            assert_eq!(ctx.allow_privilege_escalation, Some(false), "{}", c.name);
            assert_eq!(ctx.privileged, None, "{}", c.name);
            assert_ne!(ctx.run_as_non_root, Some(false), "{}", c.name);
            assert_ne!(ctx.run_as_user, Some(0), "{}", c.name);
            let caps = ctx.capabilities.unwrap_or_default();
            assert_eq!(caps.drop, Some(vec!["ALL".to_owned()]), "{}", c.name);
            assert_eq!(caps.add, None, "{}", c.name);
            assert!(
                c.ports
                    .unwrap_or_default()
                    .iter()
                    .all(|p| p.host_port.is_none()),
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn spec_hash_tracks_the_spec_not_the_role() {
        let db = sample_database();
        let hash_of = |pod: &Pod| {
            pod.metadata
                .annotations
                .clone()
                .unwrap_or_default()
                .get(SPEC_HASH_ANNOTATION)
                .cloned()
                .unwrap_or_default()
        };
        let primary = pod_of(&db, 1, InstanceRole::Primary, &config());
        let replica = pod_of(&db, 1, InstanceRole::Replica, &config());
        assert_eq!(hash_of(&primary).len(), 16);
        assert_eq!(hash_of(&primary), hash_of(&replica));
        assert_eq!(hash_of(&primary), spec_hash(&spec_of(&primary)));

        let mut upgraded = db.clone();
        upgraded.spec.version = "18".into();
        assert_ne!(
            hash_of(&primary),
            hash_of(&pod_of(&upgraded, 1, InstanceRole::Primary, &config()))
        );
        // Parameters and synchronous replication only seed the manager at
        // start; the operator changes them through the instance API, so a
        // pod built with older values is not outdated.
        let mut tuned = db.clone();
        tuned
            .spec
            .postgresql
            .parameters
            .insert("work_mem".into(), "8MB".into());
        tuned.spec.replication.min_sync_replicas = 2;
        assert_eq!(
            hash_of(&primary),
            hash_of(&pod_of(&tuned, 1, InstanceRole::Primary, &config()))
        );
        let mut moved = db.clone();
        moved.spec.image = Some("registry.example/postgres:17.6".into());
        assert_ne!(
            hash_of(&primary),
            hash_of(&pod_of(&moved, 1, InstanceRole::Primary, &config()))
        );
    }

    #[test]
    fn a_restart_annotation_is_a_new_hash_and_is_carried_by_the_pod() {
        let db = sample_database();
        let annotations = |pod: &Pod| pod.metadata.annotations.clone().unwrap_or_default();
        let plain = pod_of(&db, 1, InstanceRole::Replica, &config());
        assert_eq!(annotations(&plain).get(RESTARTED_AT_ANNOTATION), None);
        // Without the annotation the hash is the spec's alone (the pinned
        // hashes below prove it did not move for existing pods).
        assert_eq!(
            annotations(&plain).get(SPEC_HASH_ANNOTATION),
            Some(&spec_hash(&spec_of(&plain)))
        );
        let restarted_at = |at: &str| {
            let mut db = db.clone();
            db.metadata
                .annotations
                .get_or_insert_default()
                .insert(RESTARTED_AT_ANNOTATION.into(), at.into());
            db
        };
        let first = restarted_at("2026-11-26T10:00:00Z");
        let again = restarted_at("2026-11-26T11:00:00Z");
        let pod = pod_of(&first, 1, InstanceRole::Replica, &config());
        assert_eq!(
            annotations(&pod)
                .get(RESTARTED_AT_ANNOTATION)
                .map(String::as_str),
            Some("2026-11-26T10:00:00Z")
        );
        let hash = |db: &crate::api::v1::Database| {
            let model = model_of(db, &config());
            instance_spec_hash(&model, 1, &model.image, &config())
        };
        assert_eq!(
            annotations(&pod).get(SPEC_HASH_ANNOTATION),
            Some(&hash(&first))
        );
        assert_ne!(hash(&first), hash(&db));
        assert_ne!(hash(&first), hash(&again));
        assert_eq!(
            spec_of(&pod),
            spec_of(&plain),
            "the pod spec itself is unchanged"
        );
    }

    /// The hashes the operator wrote before `instance_spec_hash` existed (a
    /// whole Pod built per instance, role replica, bootstrap clone), for a
    /// few Databases, configurations and serials: a changed value would roll
    /// every running pod when the operator is upgraded. The ones with an
    /// object store changed once, on purpose, when the credentials became an
    /// optional Secret volume (those pods are recreated once by that
    /// upgrade, replicas first). All changed once, on purpose, with TLS
    /// everywhere (#27: the TLS Secret volume and environment): the operator
    /// upgrade that brings TLS rolls every instance once, which is how TLS
    /// reaches the pods built before it (peers reach a not-yet-rolled pod
    /// the old way meanwhile: `contract::Member.tls`).
    #[test]
    fn instance_spec_hash_is_the_hash_a_whole_pod_build_wrote() {
        let config = config();
        let traced = BuildConfig {
            instance_env: vec![(
                "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
                "http://collector:4318".into(),
            )],
            image_pull_policy: None,
            postgres_repository: "postgres".into(),
            ..config.clone()
        };
        let plain = sample_database();
        let mut tuned = sample_database();
        tuned.spec.version = "16.4".into();
        tuned
            .spec
            .postgresql
            .parameters
            .insert("work_mem".into(), "8MB".into());
        tuned.spec.replication = ReplicationSpec {
            mode: ReplicationMode::Sync,
            min_sync_replicas: 2,
        };
        tuned.spec.bootstrap = Some(BootstrapSpec {
            initdb: Some(InitdbSpec {
                database: "shop".into(),
                owner: "clerk".into(),
            }),
            recovery: None,
        });
        let mut stored = sample_database();
        stored.metadata.name = Some("billing".into());
        stored.spec.image = Some("registry.example/postgres:17.6".into());
        stored.spec.backup = Some(crate::api::v1::BackupConfig {
            object_store: Some(ObjectStore {
                bucket: "backups".into(),
                path: Some("team".into()),
                endpoint: Some("http://s3.store.svc:7070".into()),
                region: Some("eu".into()),
                credentials_secret: Some("s3-creds".into()),
            }),
            ..Default::default()
        });
        let cases = [
            (&plain, &config, 1, "db06054e50245138"),
            (&plain, &config, 7, "9ae3b87ea3a7ecd0"),
            (&plain, &traced, 1, "505cdd70f2f6e87d"),
            (&plain, &traced, 7, "b4da6d3ae8c51cb5"),
            (&tuned, &config, 1, "3206a5fc1d31197c"),
            (&tuned, &config, 7, "433a285acbb434e0"),
            (&tuned, &traced, 1, "95070f8a673f2b73"),
            (&tuned, &traced, 7, "5cd595a1f93ecb8b"),
            (&stored, &config, 1, "5740be39b71f71c1"),
            (&stored, &config, 7, "141ce5f3d6224c59"),
            (&stored, &traced, 1, "1c482818d459cbf0"),
            (&stored, &traced, 7, "a2519a986032ada8"),
        ];
        for (db, config, serial, before) in cases {
            let model = model_of(db, config);
            let hash = instance_spec_hash(&model, serial, &model.image, config);
            assert_eq!(hash, before, "{} {serial}", model.name);
            for role in [InstanceRole::Primary, InstanceRole::Replica] {
                let pod = pod_of(db, serial, role, config);
                assert_eq!(
                    pod.annotations().get(SPEC_HASH_ANNOTATION),
                    Some(&hash),
                    "{} {serial} {role:?}",
                    model.name
                );
            }
        }
    }

    fn with_resources(requests: (&str, &str), limits: (&str, &str)) -> crate::api::v1::Database {
        let mut db = sample_database();
        let compute = |(cpu, memory): (&str, &str)| crate::api::v1::ComputeResources {
            cpu: Some(cpu.into()),
            memory: Some(memory.into()),
        };
        db.spec.resources = Some(crate::api::v1::ResourcesSpec {
            requests: Some(compute(requests)),
            limits: Some(compute(limits)),
        });
        db
    }

    #[test]
    fn every_container_gets_the_instance_s_resources() {
        let db = with_resources(("500m", "512Mi"), ("500m", "512Mi"));
        let pod = pod_of(&db, 1, InstanceRole::Primary, &config());
        let spec = pod.spec.expect("a spec");
        let main = &spec.containers[0];
        let init = &spec.init_containers.expect("an init container")[0];
        for container in [main, init] {
            let resources = container.resources.clone().expect("resources");
            assert_eq!(resources.requests, resources.limits, "{}", container.name);
            let requests = resources.requests.expect("requests");
            assert_eq!(requests["cpu"].0, "500m");
            assert_eq!(requests["memory"].0, "512Mi");
        }
    }

    #[test]
    fn the_spec_hash_leaves_cpu_out_and_keeps_memory_in() {
        let hash = |db: &crate::api::v1::Database| {
            let model = model_of(db, &config());
            instance_spec_hash(&model, 1, &model.image, &config())
        };
        let base = hash(&with_resources(("500m", "512Mi"), ("500m", "512Mi")));
        assert_eq!(
            hash(&with_resources(("1", "512Mi"), ("2", "512Mi"))),
            base,
            "a CPU change is resized in place, not rolled"
        );
        assert_ne!(
            hash(&with_resources(("500m", "1Gi"), ("500m", "1Gi"))),
            base,
            "a memory change rolls"
        );
    }
}
