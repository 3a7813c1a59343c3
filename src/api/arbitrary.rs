//! proptest strategies for API objects (test only).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::core::ObjectMeta;
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;

use super::conversion::V1_FIELDS_ANNOTATION;
use super::status::*;
use super::tls::{InstanceTlsStatus, TlsSourceStatus, TlsStage, TlsStatus};
use super::{v1, v1alpha1};

fn small_string() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9.-]{0,12}"
}

fn metadata() -> impl Strategy<Value = ObjectMeta> {
    (
        "[a-z][a-z0-9-]{0,20}",
        option::of("[a-z]{1,10}"),
        option::of(btree_map("[a-z./]{1,12}", small_string(), 0..3)),
        option::of(btree_map("[a-z./]{1,12}", ".{0,16}", 0..3)),
        option::of(1i64..100),
    )
        .prop_map(
            |(name, namespace, labels, annotations, generation)| ObjectMeta {
                name: Some(name),
                namespace,
                // Kubernetes does not tell an empty map from none (Go's omitempty), so neither do we.
                annotations: annotations
                    .map(|mut a: BTreeMap<String, String>| {
                        a.remove(V1_FIELDS_ANNOTATION);
                        a
                    })
                    .filter(|a| !a.is_empty()),
                labels: labels.filter(|l: &BTreeMap<String, String>| !l.is_empty()),
                generation,
                ..ObjectMeta::default()
            },
        )
}

fn time() -> impl Strategy<Value = Time> {
    (0i64..4_000_000_000)
        .prop_map(|s| Time(Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)))
}

fn condition() -> impl Strategy<Value = Condition> {
    (
        "[A-Z][a-z]{1,10}",
        prop_oneof!["True", "False", "Unknown"],
        "[A-Z][a-zA-Z]{0,10}",
        ".{0,20}",
        time(),
        option::of(0i64..9),
    )
        .prop_map(
            |(type_, status, reason, message, last_transition_time, observed_generation)| {
                Condition {
                    type_,
                    status: status.to_owned(),
                    reason,
                    message,
                    last_transition_time,
                    observed_generation,
                }
            },
        )
}

fn migrations_status() -> impl Strategy<Value = MigrationsStatus> {
    (
        option::of(small_string()),
        option::of(small_string()),
        option::of(small_string()),
        option::of(".{0,40}"),
    )
        .prop_map(|(applied, running, failed, message)| MigrationsStatus {
            applied,
            running,
            failed,
            message,
        })
}

fn database_status() -> impl Strategy<Value = DatabaseStatus> {
    (
        option::of(migrations_status()),
        option::of(tls_status()),
        database_status_base(),
    )
        .prop_map(|(migrations, tls, status)| DatabaseStatus {
            migrations,
            tls,
            ..status
        })
}

/// `status.tls`.
fn tls_status() -> BoxedStrategy<TlsStatus> {
    (
        proptest::sample::select(vec![
            TlsStage::Stable,
            TlsStage::TrustingBoth,
            TlsStage::Reissuing,
            TlsStage::DroppingOld,
        ]),
        option::of(proptest::sample::select(vec![
            TlsSourceStatus::Operator,
            TlsSourceStatus::CaSecret,
            TlsSourceStatus::ServerSecret,
            TlsSourceStatus::CertManager,
        ])),
        option::of(Just("2036-11-26T04:00:00Z".to_owned())),
        vec(
            (small_string(), option::of("[0-9a-f]{1,16}"), any::<bool>()).prop_map(
                |(name, serial, presented)| InstanceTlsStatus {
                    secret: format!("{name}-tls"),
                    name,
                    not_after: serial.as_ref().map(|_| "2026-12-03T04:00:00Z".to_owned()),
                    serial,
                    presented,
                },
            ),
            0..3,
        ),
    )
        .prop_map(|(stage, source, ca_not_after, instances)| TlsStatus {
            stage,
            source,
            earliest_not_after: instances.first().and_then(|i| i.not_after.clone()),
            ca_not_after,
            instances,
        })
        .boxed()
}

/// `spec.tls`: any field set or not (the rules between them are
/// [`crate::api::tls::errors`]'s, not the conversion's). Boxed like the
/// other groups of [`spec_v1`].
fn tls() -> BoxedStrategy<v1::TlsSpec> {
    let secret =
        || option::of("[a-z]{1,12}".prop_map(|secret_name| v1::TlsSecretReference { secret_name }));
    (
        (
            any::<bool>(),
            prop_oneof![Just(v1::TlsVersion::Tls12), Just(v1::TlsVersion::Tls13)],
            any::<bool>(),
        ),
        (
            option::of("[1-9][0-9]{0,2}[hdw]"),
            option::of("[1-9][0-9]{0,2}[hdw]"),
            option::of("[1-9][0-9]{0,3}d"),
            option::of("[1-9][0-9]{0,2}d"),
        ),
        (
            secret(),
            secret(),
            option::of(small_string()),
            cert_manager(),
        ),
    )
        .prop_map(
            |(
                (allow_plaintext, min_protocol_version, client_certificates),
                (certificate_lifetime, renew_before, ca_lifetime, ca_renew_before),
                (ca, server, rotate_ca, cert_manager),
            )| v1::TlsSpec {
                allow_plaintext,
                min_protocol_version,
                client_certificates,
                certificate_lifetime,
                renew_before,
                ca_lifetime,
                ca_renew_before,
                ca,
                server,
                rotate_ca,
                cert_manager,
            },
        )
        .boxed()
}

/// `spec.tls.certManager`: absent, or an issuer with or without its kind
/// and group.
fn cert_manager() -> BoxedStrategy<Option<crate::api::tls_cert_manager::CertManagerTls>> {
    use crate::api::tls_cert_manager::{CertManagerTls, IssuerReference};
    option::of(
        (
            "[a-z]{1,12}",
            option::of(prop_oneof![Just("Issuer"), Just("ClusterIssuer")]),
            option::of(Just("cert-manager.io")),
        )
            .prop_map(|(name, kind, group)| CertManagerTls {
                issuer_ref: IssuerReference {
                    name,
                    kind: kind.map(str::to_owned),
                    group: group.map(str::to_owned),
                },
            }),
    )
    .boxed()
}

fn database_status_base() -> impl Strategy<Value = DatabaseStatus> {
    (
        option::of(proptest::sample::select(DatabasePhase::ALL.to_vec())),
        option::of(0i64..50),
        vec(condition(), 0..3),
        option::of(small_string()),
        option::of(0i32..5),
        vec(
            (small_string(), any::<bool>(), option::of(0i64..1 << 40)).prop_map(
                |(name, ready, lag_bytes)| InstanceStatus {
                    name,
                    role: Some(InstanceRole::Replica),
                    ready,
                    lsn: Some("0/3000148".into()),
                    lag_bytes,
                    image: ready.then(|| "postgres:17".to_owned()),
                    version: Some("17.6".into()),
                    system_identifier: Some("7441234567890123456".into()),
                    timeline: lag_bytes.map(|_| 1),
                    node: ready.then(|| "node-a".to_owned()),
                    qos_class: ready.then(|| "Burstable".to_owned()),
                    lag_milliseconds: lag_bytes.map(|b| b % 10_000),
                    volumes: Vec::new(),
                },
            ),
            0..3,
        ),
        option::of(
            (small_string(), option::of(time()))
                .prop_map(|(name, completed_at)| LastBackup { name, completed_at }),
        ),
    )
        .prop_map(
            |(
                phase,
                observed_generation,
                conditions,
                primary,
                ready_instances,
                instances,
                last_backup,
            )| DatabaseStatus {
                // Derived from other drawn values: the tuple is at its size limit.
                last_failover: last_backup
                    .as_ref()
                    .and_then(|b| b.completed_at.clone())
                    .map(|time| LastFailover {
                        from: "pg-0".into(),
                        to: primary.clone().unwrap_or_default(),
                        time,
                        duration_milliseconds: ready_instances.map(i64::from),
                        wal_gap_bytes: instances.first().and_then(|i| i.lag_bytes),
                    }),
                phase,
                observed_generation,
                conditions,
                current_primary: primary.clone(),
                target_primary: primary.clone(),
                ready_instances,
                instances,
                // Derived from other drawn values: the tuple is at its size limit.
                applied: ready_instances.map(|n| AppliedSpec {
                    version: format!("1{}", 3 + n % 5),
                    storage_size: format!("{}Gi", n + 1),
                    image: (n % 2 == 0).then(|| "postgres:17".to_owned()),
                }),
                // Derived from other drawn values: the tuple is at its size limit.
                upgrade: observed_generation.map(|g| crate::api::status::UpgradeStatus {
                    from: 15,
                    to: 17,
                    from_image: "postgres:15".into(),
                    to_image: "postgres:17".into(),
                    instance: "pg-1".into(),
                    node: (g % 2 == 0).then(|| "node-a".to_owned()),
                    step: if g % 3 == 0 {
                        crate::api::status::UpgradeStep::Done
                    } else {
                        crate::api::status::UpgradeStep::Checking
                    },
                    message: primary.clone(),
                }),
                migrations: None,
                tls: None,
                endpoints: Vec::new(),
                // Derived from other drawn values: the tuple is at its size limit.
                history: last_backup
                    .iter()
                    .filter_map(|b| {
                        Some(crate::api::status::HistoryEntry {
                            kind: crate::api::status::HistoryKind::Backup,
                            time: b.completed_at.clone()?,
                            from: None,
                            to: None,
                            name: Some(b.name.clone()),
                            duration_milliseconds: ready_instances.map(i64::from),
                            wal_gap_bytes: None,
                            bytes: observed_generation,
                            succeeded: ready_instances.is_some(),
                            message: primary.clone(),
                        })
                    })
                    .collect(),
                last_backup,
                // Derived from other drawn values: the tuple is at its size limit.
                resources: ready_instances.map(|n| crate::api::resources::ResourcesStatus {
                    qos_class: (n % 2 == 0).then(|| "Guaranteed".to_owned()),
                    memory: Some(format!("{}Mi", 128 + n)),
                    derived: std::collections::BTreeMap::from([(
                        "shared_buffers".to_owned(),
                        format!("{}MB", 16 + n),
                    )]),
                }),
            },
        )
}

fn version() -> impl Strategy<Value = String> {
    "1[3-9](\\.[0-9]{1,2})?"
}

fn quantity() -> impl Strategy<Value = String> {
    "[1-9][0-9]{0,3}(Mi|Gi|Ti)?"
}

fn object_store() -> impl Strategy<Value = v1::ObjectStore> {
    (
        "[a-z0-9]{3,10}",
        option::of(small_string()),
        option::of("https?://[a-z]{1,8}"),
        option::of(small_string()),
        option::of(small_string()),
    )
        .prop_map(
            |(bucket, path, endpoint, region, credentials_secret)| v1::ObjectStore {
                bucket,
                path,
                endpoint,
                region,
                credentials_secret,
            },
        )
}

fn migrations() -> impl Strategy<Value = v1::MigrationsSpec> {
    (
        "[a-z0-9.-]{1,20}",
        small_string(),
        vec(".{0,12}", 0..3),
        vec(".{0,12}", 0..3),
        vec(
            ("[A-Z_]{1,10}", option::of(".{0,12}")).prop_map(|(name, value)| EnvVar {
                name,
                value,
                value_from: None,
            }),
            0..3,
        ),
    )
        .prop_map(|(version, image, command, args, env)| v1::MigrationsSpec {
            version,
            image,
            command,
            args,
            env,
        })
}

/// `spec.affinity` and `spec.priorityClassName`. Boxed: its value tree
/// inline in `spec_v1`'s made the debug build's stack overflow.
fn placement() -> BoxedStrategy<(v1::AffinitySpec, Option<String>)> {
    (
        prop_oneof![
            Just(v1::PodAntiAffinityType::Preferred),
            Just(v1::PodAntiAffinityType::Required)
        ],
        option::of("[a-z]{1,8}(\\.io/[a-z]{1,8})?"),
        btree_map("[a-z]{1,8}", "[a-z]{1,8}", 0..2),
        option::of("[a-z]{1,12}"),
    )
        .prop_map(
            |(pod_anti_affinity, topology_key, node_selector, priority)| {
                (
                    v1::AffinitySpec {
                        pod_anti_affinity,
                        topology_key,
                        node_selector,
                        node_affinity: None,
                        tolerations: Vec::new(),
                    },
                    priority,
                )
            },
        )
        .boxed()
}

fn resources() -> impl Strategy<Value = v1::ResourcesSpec> {
    let compute = (
        option::of("[1-9][0-9]{0,2}m"),
        option::of("[1-9][0-9]{0,2}Mi"),
    )
        .prop_map(|(cpu, memory)| v1::ComputeResources { cpu, memory });
    (option::of(compute.clone()), option::of(compute))
        .prop_map(|(requests, limits)| v1::ResourcesSpec { requests, limits })
}

fn spec_v1() -> impl Strategy<Value = v1::DatabaseSpec> {
    let backup = (
        option::of("[0-9] [0-9] \\* \\* \\*"),
        option::of("[1-9][dhw]"),
        option::of(object_store()),
        option::of(any::<bool>()),
    )
        .prop_map(
            |(schedule, retention, object_store, verify)| v1::BackupConfig {
                schedule,
                retention,
                object_store,
                verify,
            },
        );
    let bootstrap = prop_oneof![
        ("[a-z]{1,8}", "[a-z]{1,8}").prop_map(|(database, owner)| v1::BootstrapSpec {
            initdb: Some(v1::InitdbSpec { database, owner }),
            recovery: None,
        }),
        (
            0usize..3,
            small_string(),
            option::of(object_store()),
            option::of(Just("2026-11-22T10:00:00Z".to_owned()))
        )
            .prop_map(|(which, name, store, target_time)| {
                let named = |n: usize| (which == n).then(|| name.clone());
                v1::BootstrapSpec {
                    initdb: None,
                    recovery: Some(v1::RecoverySpec {
                        backup: named(0),
                        source: named(1),
                        source_name: named(2),
                        object_store: store.filter(|_| which != 1),
                        target_time,
                        target_lsn: None,
                    }),
                }
            }),
    ];
    let base = (
        (
            version(),
            option::of(small_string()),
            1i32..8,
            quantity(),
            option::of(small_string()),
        )
            .boxed(),
        (
            prop_oneof![
                Just(v1::ReplicationMode::Async),
                Just(v1::ReplicationMode::Sync)
            ],
            1i32..4,
            btree_map("[a-z_]{1,12}", small_string(), 0..3),
            option::of(bootstrap),
            option::of(backup),
            0i32..30,
            option::of(small_string()),
        )
            .boxed(),
        // Boxed groups: the value trees of one flat tuple this wide overflow a
        // test thread's stack in debug builds.
        (
            option::of(migrations()),
            any::<bool>(),
            option::of(auto_grow()),
            option::of(wal_storage()),
        )
            .boxed(),
        (
            placement(),
            btree_map("[a-z]{1,8}", "[a-z0-9]{0,8}", 0..2),
            btree_map("[a-z]{1,8}(\\.io/[a-z]{1,8})?", small_string(), 0..2),
        )
            .boxed(),
    )
        .prop_map(
            |(
                (version, image, instances, size, storage_class_name),
                (mode, min_sync_replicas, parameters, bootstrap, backup, delay_seconds, primary),
                (migrations, backup_first, auto_grow, wal_storage),
                ((affinity, priority_class_name), labels, annotations),
            )| {
                v1::DatabaseSpec {
                    version,
                    image,
                    instances,
                    storage: v1::StorageSpec {
                        size,
                        storage_class_name,
                        auto_grow,
                    },
                    wal_storage,
                    replication: v1::ReplicationSpec {
                        mode,
                        min_sync_replicas,
                    },
                    postgresql: v1::PostgresqlSpec { parameters },
                    bootstrap,
                    backup,
                    failover: v1::FailoverSpec { delay_seconds },
                    primary,
                    migrations,
                    upgrade: v1::UpgradeSpec { backup_first },
                    affinity,
                    topology_spread_constraints: Vec::new(),
                    priority_class_name,
                    inherited_metadata: v1::InheritedMetadata {
                        labels,
                        annotations,
                    },
                    resources: None,
                    tls: v1::TlsSpec::default(),
                    expose: Vec::new(),
                }
            },
        );
    // Boxed: one more level in the tuple above overflows a test thread's
    // stack when proptest builds the value tree in a debug build.
    (
        base.boxed(),
        option::of(resources()),
        tls(),
        vec(expose(), 0..3),
    )
        .prop_map(|(spec, resources, tls, expose)| v1::DatabaseSpec {
            resources,
            tls,
            expose,
            ..spec
        })
}

/// One `spec.expose` entry: any field set or not (the rules between them
/// are [`crate::api::validate`]'s, not the conversion's).
fn expose() -> BoxedStrategy<v1::ExposeSpec> {
    use v1::{ExposeTarget, ExposeType, TrafficPolicy};
    (
        prop_oneof![
            Just(ExposeTarget::Rw),
            Just(ExposeTarget::Ro),
            Just(ExposeTarget::R)
        ],
        prop_oneof![Just(ExposeType::LoadBalancer), Just(ExposeType::NodePort)],
        vec(small_string(), 0..3),
        btree_map(small_string(), small_string(), 0..2),
        option::of(small_string()),
        option::of(small_string()),
        option::of(prop_oneof![
            Just(TrafficPolicy::Cluster),
            Just(TrafficPolicy::Local)
        ]),
        option::of(30_000..32_768_i32),
    )
        .prop_map(
            |(
                target,
                type_,
                allowed_source_ranges,
                annotations,
                hostname,
                load_balancer_class,
                external_traffic_policy,
                node_port,
            )| v1::ExposeSpec {
                target,
                type_,
                allowed_source_ranges,
                annotations,
                hostname,
                load_balancer_class,
                external_traffic_policy,
                node_port,
            },
        )
        .boxed()
}

fn wal_storage() -> impl Strategy<Value = v1::WalStorageSpec> {
    (quantity(), option::of(small_string())).prop_map(|(size, storage_class_name)| {
        v1::WalStorageSpec {
            size,
            storage_class_name,
        }
    })
}

pub fn database_v1() -> impl Strategy<Value = v1::Database> {
    (metadata(), spec_v1(), option::of(database_status())).prop_map(|(metadata, spec, status)| {
        v1::Database {
            metadata,
            spec,
            status,
        }
    })
}

pub fn database_v1alpha1() -> impl Strategy<Value = v1alpha1::Database> {
    (
        metadata(),
        version(),
        1i32..8,
        quantity(),
        option::of("[0-9] [0-9] \\* \\* \\*"),
        option::of(database_status()),
    )
        .prop_map(
            |(metadata, version, replicas, storage_size, backup_schedule, status)| {
                v1alpha1::Database {
                    metadata,
                    spec: v1alpha1::DatabaseSpec {
                        version,
                        replicas,
                        storage_size,
                        backup_schedule,
                    },
                    status,
                }
            },
        )
}

pub fn backup_v1() -> impl Strategy<Value = v1::Backup> {
    let status = (
        option::of(time()),
        option::of(0i64..1 << 40),
        option::of(".{0,12}"),
    )
        .prop_map(|(completed_at, bytes, location)| BackupStatus {
            phase: Some(BackupPhase::Completed),
            completed_at,
            bytes,
            location,
            ..BackupStatus::default()
        });
    (
        metadata(),
        "[a-z]{1,20}",
        prop_oneof![
            Just(v1::BackupTarget::PreferStandby),
            Just(v1::BackupTarget::Primary)
        ],
        option::of(status),
    )
        .prop_map(|(metadata, database, target, status)| v1::Backup {
            metadata,
            spec: v1::BackupSpec { database, target },
            status,
        })
}

/// `spec.storage.autoGrow`, with a step of either kind.
fn auto_grow() -> impl Strategy<Value = v1::AutoGrowSpec> {
    (
        1i32..100,
        prop_oneof![quantity(), (1u32..100).prop_map(|p| format!("{p}%"))],
        quantity(),
    )
        .prop_map(|(threshold, step, limit)| v1::AutoGrowSpec {
            threshold,
            step,
            limit,
        })
}

/// A small, valid v1 Database for example-based tests.
pub fn sample_database() -> v1::Database {
    let mut db = v1::Database::new(
        "orders",
        v1::DatabaseSpec {
            version: "17".into(),
            image: None,
            instances: 3,
            storage: v1::StorageSpec {
                size: "1Gi".into(),
                storage_class_name: None,
                auto_grow: None,
            },
            wal_storage: None,
            replication: v1::ReplicationSpec::default(),
            postgresql: v1::PostgresqlSpec::default(),
            bootstrap: None,
            backup: None,
            failover: v1::FailoverSpec::default(),
            primary: None,
            migrations: None,
            upgrade: v1::UpgradeSpec::default(),
            affinity: v1::AffinitySpec::default(),
            topology_spread_constraints: Vec::new(),
            priority_class_name: None,
            inherited_metadata: v1::InheritedMetadata::default(),
            resources: None,
            tls: v1::TlsSpec::default(),
            expose: Vec::new(),
        },
    );
    db.metadata.namespace = Some("shop".into());
    db.metadata.generation = Some(1);
    db.metadata.uid = Some("0b6c0f1e-5a47-4d38-9b3c-1f2a3b4c5d6e".into());
    db
}

/// A Drill's spec, every optional field sometimes set.
fn drill_spec() -> impl Strategy<Value = v1::DrillSpec> {
    let guards = (option::of(0i64..1 << 30), option::of(1u32..8760)).prop_map(
        |(max_lag_bytes, max_backup_age_hours)| v1::DrillGuards {
            max_lag_bytes,
            max_backup_age_hours,
        },
    );
    let expect = (
        option::of((1u32..36_000).prop_map(|t| f64::from(t) / 10.0)),
        option::of(0i64..1000),
        option::of(1u32..3600),
    )
        .prop_map(
            |(max_write_outage_seconds, max_lost_writes, max_seconds_to_ready)| {
                v1::DrillExpectations {
                    max_write_outage_seconds,
                    max_lost_writes,
                    max_seconds_to_ready,
                }
            },
        );
    (
        "[a-z]{1,20}",
        proptest::sample::select(v1::Scenario::ALL.to_vec()),
        option::of(1u32..600),
        option::of(prop_oneof![
            Just("@daily".to_owned()),
            "[0-9] [0-9] \\* \\* \\*"
        ]),
        option::of(1u32..1440),
        any::<bool>(),
        option::of(30u32..3600),
        guards,
        expect,
    )
        .prop_map(
            |(
                database,
                scenario,
                duration_seconds,
                schedule,
                window_minutes,
                dry_run,
                abort_after_seconds,
                guards,
                expect,
            )| v1::DrillSpec {
                database,
                scenario,
                duration_seconds,
                schedule,
                window_minutes,
                dry_run,
                abort_after_seconds,
                guards,
                expect,
            },
        )
}

/// A Drill's status mid-run or after it, figures and history included.
fn drill_status() -> impl Strategy<Value = v1::DrillStatus> {
    let phase = proptest::sample::select(vec![
        v1::DrillPhase::Pending,
        v1::DrillPhase::Observing,
        v1::DrillPhase::Succeeded,
        v1::DrillPhase::Failed,
        v1::DrillPhase::Refused,
    ]);
    let figures = (
        option::of((0u32..10_000).prop_map(|t| f64::from(t) / 100.0)),
        option::of(0i64..100_000),
        option::of(0i64..10),
        option::of(0i64..1 << 30),
    )
        .prop_map(
            |(write_outage_seconds, acknowledged_writes, lost_writes, wal_gap_bytes)| {
                v1::DrillFigures {
                    write_outage_seconds,
                    acknowledged_writes,
                    lost_writes,
                    seconds_to_ready: write_outage_seconds.map(|s| s + 1.5),
                    wal_gap_bytes,
                    ..v1::DrillFigures::default()
                }
            },
        );
    let fault = (
        small_string(),
        time(),
        option::of(time()),
        option::of(time()),
    )
        .prop_map(
            |(target, injected_at, undo_by, undone_at)| v1::InjectedFault {
                target,
                injected_at,
                undo_by,
                object: None,
                undone_at,
            },
        );
    let policy_check = (
        small_string(),
        time(),
        option::of(time()),
        option::of(time()),
    )
        .prop_map(
            |(policy, applied_at, enforced_at, removed_at)| v1::PolicyCheck {
                policy,
                applied_at,
                enforced_at,
                removed_at,
            },
        );
    let event = (phase.clone(), time(), option::of(".{0,16}"))
        .prop_map(|(phase, at, message)| v1::DrillEvent { phase, at, message });
    let run = (
        phase.clone(),
        time(),
        option::of(figures.clone()),
        option::of(".{0,16}"),
    )
        .prop_map(|(phase, started_at, figures, verdict)| v1::DrillRun {
            started_at,
            phase,
            figures,
            verdict,
        });
    (
        (
            option::of(phase),
            option::of(1i64..9),
            vec(condition(), 0..2),
        ),
        (option::of(time()), option::of(time()), option::of(time())),
        (
            option::of(fault),
            option::of(small_string()),
            option::of(policy_check),
            vec(event, 0..4),
        ),
        (option::of(figures), option::of(".{0,16}"), vec(run, 0..3)),
    )
        .prop_map(
            |(
                (phase, observed_generation, conditions),
                (started_at, finished_at, next_run_at),
                (fault, probe, policy_check, timeline),
                (figures, verdict, runs),
            )| v1::DrillStatus {
                phase,
                observed_generation,
                conditions,
                started_at,
                finished_at,
                next_run_at,
                fault,
                probe,
                policy_check,
                timeline,
                figures,
                verdict,
                runs,
            },
        )
}

pub fn drill_v1() -> impl Strategy<Value = v1::Drill> {
    (metadata(), drill_spec(), option::of(drill_status())).prop_map(|(metadata, spec, status)| {
        v1::Drill {
            metadata,
            spec,
            status,
        }
    })
}

/// A valid Drill of the sample Database, for example-based tests.
/// A stored Drill `name` of `scenario` on Database `orders` in namespace
/// `shop`, with uid `u-1` (so that what it owns can point at it).
pub fn stored_drill(name: &str, scenario: v1::Scenario) -> v1::Drill {
    let mut drill = sample_drill();
    drill.metadata.name = Some(name.to_owned());
    drill.metadata.uid = Some("u-1".into());
    drill.spec.scenario = scenario;
    drill
}

pub fn sample_drill() -> v1::Drill {
    let mut drill = v1::Drill::new(
        "orders-switchover",
        v1::DrillSpec {
            database: "orders".into(),
            scenario: v1::Scenario::Switchover,
            duration_seconds: None,
            schedule: None,
            window_minutes: None,
            dry_run: false,
            abort_after_seconds: None,
            guards: v1::DrillGuards::default(),
            expect: v1::DrillExpectations::default(),
        },
    );
    drill.metadata.namespace = Some("shop".into());
    drill.metadata.generation = Some(1);
    drill
}
