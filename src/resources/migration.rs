//! The Job that runs a Database's schema migrations (`spec.migrations`): the
//! user's image and command, connected to the primary through `<db>-rw` with
//! the application role, every connection setting read from the `<db>-app`
//! Secret (nothing secret is copied into the Job). PostgreSQL requires TLS,
//! so the Job verifies the server (`PGSSLMODE=verify-full`) against the
//! Secret's `ca.crt`, mounted read-only with the role's client certificate
//! when `spec.tls.clientCertificates` is on.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, KeyToPath, PodSecurityContext, PodSpec,
    PodTemplateSpec, SeccompProfile, SecretKeySelector, SecretVolumeSource, SecurityContext,
    Volume, VolumeMount,
};

use super::compute::{self, JobKind};
use super::hash::fnv1a64_hex;
use super::secret::{PASSWORD_KEY, USERNAME_KEY};
use super::{BuildConfig, inherited, labels, names, object_meta, template_meta, tls};
use crate::api::model::ValidatedDatabase;
use crate::api::v1::MigrationsSpec;

/// `app.kubernetes.io/component` of migration Jobs and their pods: not
/// `database`, so no Service, budget or instance listing takes them for an
/// instance.
pub const MIGRATION_COMPONENT: &str = "migration";
/// Annotation on a migration Job: the `spec.migrations.version` it runs
/// (versions are free text, so not a label value).
pub const MIGRATION_VERSION_ANNOTATION: &str = "tusk.dev/migration-version";
/// The container that runs the migrations.
pub const MIGRATION_CONTAINER: &str = "migrate";
/// Retries of a failed pod: a few ride out a transient failure (a switchover
/// under way, DNS not yet answering) without turning a broken migration into
/// a retry storm.
pub const MIGRATION_BACKOFF_LIMIT: i32 = 2;
/// A migration running longer than this fails (a lock wait that never ends
/// must not hold the next version back forever).
pub const MIGRATION_DEADLINE_SECONDS: i64 = 3600;
/// The user the migration runs as. User images often default to root, which
/// Pod Security "restricted" refuses; a fixed non-root uid (the conventional
/// `nonroot` of distroless images) lets any image start. The tools only need
/// the environment and a writable `HOME`, not an `/etc/passwd` entry.
pub const MIGRATION_UID: i64 = 65532;

/// The volume of the `<db>-app` Secret's TLS keys and where it is mounted.
const TLS_VOLUME: &str = "app-tls";
const TLS_MOUNT: &str = "/tusk/app-tls";

/// The `<db>-app` Secret's CA, and the role's certificate and key with
/// `spec.tls.clientCertificates`, readable by the Job's group only: libpq
/// accepts a key owned by root that its group may read.
fn tls_volume(db: &ValidatedDatabase) -> Volume {
    let mut keys = vec![tls::CLIENT_CA_KEY];
    if db.tls.client_certificates {
        keys.extend([tls::CLIENT_CERT_KEY, tls::CLIENT_KEY_KEY]);
    }
    Volume {
        name: TLS_VOLUME.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(names::app_secret(&db.name)),
            items: Some(
                keys.into_iter()
                    .map(|key| KeyToPath {
                        key: key.to_owned(),
                        path: key.to_owned(),
                        mode: None,
                    })
                    .collect(),
            ),
            default_mode: Some(tls::FILE_MODE),
            optional: None,
        }),
        ..Volume::default()
    }
}

/// Characters of the version's hash in a Job name at most.
const HASH_LEN: usize = 10;

/// The migration Job's name for `version` of database `db`:
/// `<db>-migrate-<hash of version>`, the same for the same version (creating it
/// twice is idempotent) and within 63 characters (it becomes the pods'
/// `job-name` label): Database names have at most 50, which leaves at least
/// four hex digits of hash. The Job's annotation, not its name, says which
/// version it runs.
pub fn migration_job_name(db: &str, version: &str) -> String {
    let prefix = format!("{db}-migrate-");
    let room = 63usize.saturating_sub(prefix.len()).clamp(1, HASH_LEN);
    let hash = fnv1a64_hex(version.as_bytes());
    // FNV-1a mixes the input into the low bits first: short versions that
    // differ in one character share the leading digits.
    format!("{prefix}{}", &hash[hash.len() - room..])
}

/// Labels of the migration Jobs of `db` and their pods.
pub fn migration_labels(db: &str) -> BTreeMap<String, String> {
    let mut labels = labels::common(db);
    labels.insert(labels::COMPONENT.to_owned(), MIGRATION_COMPONENT.to_owned());
    labels
}

/// The label selector of every migration Job of `db`.
pub fn migration_selector(db: &str) -> String {
    format!(
        "{}={db},{}={MIGRATION_COMPONENT}",
        labels::DATABASE,
        labels::COMPONENT
    )
}

/// The Job running `migrations` against `db`. Owned by the Database.
pub fn migration_job(
    db: &ValidatedDatabase,
    migrations: &MigrationsSpec,
    config: &BuildConfig,
) -> Job {
    let db_name = db.name.clone();
    let name = migration_job_name(&db_name, &migrations.version);
    let labels = migration_labels(&db_name);
    let mut metadata = object_meta(db, name, labels.clone());
    inherited::annotate(
        &mut metadata.annotations,
        [(
            MIGRATION_VERSION_ANNOTATION.to_owned(),
            migrations.version.clone(),
        )],
    );
    let container = Container {
        name: MIGRATION_CONTAINER.to_owned(),
        image: Some(migrations.image.clone()),
        image_pull_policy: config.image_pull_policy.clone(),
        command: (!migrations.command.is_empty()).then(|| migrations.command.clone()),
        args: (!migrations.args.is_empty()).then(|| migrations.args.clone()),
        env: Some(environment(db, &migrations.env)),
        volume_mounts: Some(vec![VolumeMount {
            name: TLS_VOLUME.to_owned(),
            mount_path: TLS_MOUNT.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        // The last lines the container logged become its termination
        // message when it fails, which the operator reads from the pod's
        // status: no pods/log permission, and the message survives the
        // node's log rotation.
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        resources: Some(compute::job(
            JobKind::Migration,
            db.resources.memory_bytes(),
        )),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: None,
            }),
            run_as_non_root: Some(true),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    Job {
        metadata,
        spec: Some(JobSpec {
            backoff_limit: Some(MIGRATION_BACKOFF_LIMIT),
            active_deadline_seconds: Some(MIGRATION_DEADLINE_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(template_meta(db, labels)),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(vec![tls_volume(db)]),
                    restart_policy: Some("Never".to_owned()),
                    // A migration talks to PostgreSQL, never to the API server.
                    automount_service_account_token: Some(false),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(MIGRATION_UID),
                        run_as_group: Some(MIGRATION_UID),
                        // The TLS files are readable by this group only.
                        fs_group: Some(MIGRATION_UID),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_owned(),
                            localhost_profile: None,
                        }),
                        ..PodSecurityContext::default()
                    }),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// The connection variables libpq and most ORMs read, each from the `<db>-app`
/// Secret (whose `uri` has the password percent-encoded, so any password makes
/// a valid `DATABASE_URL`), then the user's `extra`, which replace a
/// connection variable of the same name.
fn environment(db: &ValidatedDatabase, extra: &[EnvVar]) -> Vec<EnvVar> {
    let secret = names::app_secret(&db.name);
    let from_secret = |name: &str, key: &str| EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.clone(),
                key: key.to_owned(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
    };
    let value = |name: &str, value: &str| EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    };
    let ours = [
        // `<db>-rw.<namespace>.svc`: the primary.
        from_secret("PGHOST", "host"),
        from_secret("PGPORT", "port"),
        from_secret("PGDATABASE", "dbname"),
        from_secret("PGUSER", USERNAME_KEY),
        from_secret("PGPASSWORD", PASSWORD_KEY),
        from_secret("DATABASE_URL", "uri"),
        value("PGAPPNAME", "tusk-migrations"),
        // libpq's: a `uri` written before TLS has no `sslmode` of its own.
        value("PGSSLMODE", tls::SSLMODE),
        value(
            "PGSSLROOTCERT",
            &format!("{TLS_MOUNT}/{}", tls::CLIENT_CA_KEY),
        ),
        // The uid has no home directory in most images; tools that keep
        // history or caches there get a writable one.
        value("HOME", "/tmp"),
    ];
    let client_cert = db.tls.client_certificates.then(|| {
        [
            value(
                "PGSSLCERT",
                &format!("{TLS_MOUNT}/{}", tls::CLIENT_CERT_KEY),
            ),
            value("PGSSLKEY", &format!("{TLS_MOUNT}/{}", tls::CLIENT_KEY_KEY)),
        ]
    });
    ours.into_iter()
        .chain(client_cert.into_iter().flatten())
        .filter(|v| !extra.iter().any(|e| e.name == v.name))
        .chain(extra.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::resources::tests::model;
    use kube::ResourceExt;

    fn config() -> BuildConfig {
        BuildConfig {
            postgres_repository: "postgres".into(),
            tusk_image: "localhost/tusk:dev".into(),
            image_pull_policy: Some("IfNotPresent".into()),
            instance_env: Vec::new(),
            default_store: None,
            instance_self_label: false,
            node_ports: Default::default(),
        }
    }

    fn spec() -> MigrationsSpec {
        MigrationsSpec {
            version: "2026.11.3".into(),
            image: "registry.example/shop:2026.11.3".into(),
            command: vec!["psql".into()],
            args: vec!["-c".into(), "select 1".into()],
            env: vec![EnvVar {
                name: "RAILS_ENV".into(),
                value: Some("production".into()),
                value_from: None,
            }],
        }
    }

    fn pod_spec(job: &Job) -> PodSpec {
        job.spec
            .clone()
            .and_then(|s| s.template.spec)
            .expect("pod spec")
    }

    #[test]
    fn names_are_per_version_stable_and_fit_in_a_label() {
        let a = migration_job_name("orders", "1");
        assert_eq!(a, migration_job_name("orders", "1"));
        assert_ne!(a, migration_job_name("orders", "2"));
        assert!(a.starts_with("orders-migrate-"), "{a}");
        assert_eq!(a.len(), "orders-migrate-".len() + HASH_LEN);
        let longest = "d".repeat(crate::api::validate::MAX_NAME_LEN);
        let name = migration_job_name(&longest, "1");
        assert_eq!(name.len(), 63, "{name}");
        for other in ["2", "10", "1.0", "v1"] {
            assert_ne!(name, migration_job_name(&longest, other), "{other}");
        }
    }

    #[test]
    fn the_job_is_owned_labelled_and_bounded() {
        let db = sample_database();
        let job = migration_job(&model(&db), &spec(), &config());
        assert_eq!(job.name_any(), migration_job_name("orders", "2026.11.3"));
        assert_eq!(job.namespace().as_deref(), Some("shop"));
        let owner = &job.metadata.owner_references.clone().unwrap_or_default()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Database", "orders")
        );
        assert_eq!(
            job.annotations()
                .get(MIGRATION_VERSION_ANNOTATION)
                .map(String::as_str),
            Some("2026.11.3")
        );
        let labels = job.labels();
        assert_eq!(labels[labels::DATABASE], "orders");
        assert_eq!(labels[labels::COMPONENT], MIGRATION_COMPONENT);
        let spec = job.spec.clone().expect("job spec");
        assert_eq!(spec.backoff_limit, Some(MIGRATION_BACKOFF_LIMIT));
        const { assert!(MIGRATION_BACKOFF_LIMIT <= 3, "no retry storm") };
        assert_eq!(
            spec.active_deadline_seconds,
            Some(MIGRATION_DEADLINE_SECONDS)
        );
        let pod_labels = spec
            .template
            .metadata
            .and_then(|m| m.labels)
            .unwrap_or_default();
        // Not an instance: the Services and budgets select component=database.
        for selector in [labels::r_selector("orders"), labels::rw_selector("orders")] {
            assert!(
                !selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
                "{selector:?} selects the migration pod"
            );
        }
        let selector = migration_selector("orders");
        assert!(
            selector
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .all(|(k, v)| pod_labels.get(k).map(String::as_str) == Some(v)),
            "{selector}"
        );
    }

    #[test]
    fn the_pod_runs_the_users_image_as_non_root_and_reports_its_last_lines() {
        let job = migration_job(&model(&sample_database()), &spec(), &config());
        let pod = pod_spec(&job);
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod.automount_service_account_token, Some(false));
        let security = pod.security_context.clone().unwrap_or_default();
        assert_eq!(security.run_as_non_root, Some(true));
        assert_eq!(security.run_as_user, Some(MIGRATION_UID));
        assert_ne!(security.run_as_user, Some(0));
        assert_eq!(
            security.seccomp_profile.map(|p| p.type_).as_deref(),
            Some("RuntimeDefault")
        );
        let [container] = pod.containers.as_slice() else {
            panic!("one container: {:?}", pod.containers);
        };
        assert_eq!(
            container.image.as_deref(),
            Some("registry.example/shop:2026.11.3")
        );
        assert_eq!(container.command.clone().unwrap_or_default(), ["psql"]);
        assert_eq!(
            container.args.clone().unwrap_or_default(),
            ["-c", "select 1"]
        );
        assert_eq!(
            container.termination_message_policy.as_deref(),
            Some("FallbackToLogsOnError")
        );
        let ctx = container.security_context.clone().unwrap_or_default();
        assert_eq!(ctx.allow_privilege_escalation, Some(false));
        assert_eq!(
            ctx.capabilities.and_then(|c| c.drop).unwrap_or_default(),
            ["ALL"]
        );
        // No command or args: the image's own.
        let mut bare = spec();
        bare.command.clear();
        bare.args.clear();
        let pod = pod_spec(&migration_job(&model(&sample_database()), &bare, &config()));
        assert_eq!(pod.containers[0].command, None);
        assert_eq!(pod.containers[0].args, None);
    }

    #[test]
    fn credentials_come_from_the_app_secret_and_user_variables_win() {
        let mut migrations = spec();
        migrations.env.push(EnvVar {
            name: "PGHOST".into(),
            value: Some("pgbouncer".into()),
            value_from: None,
        });
        let pod = pod_spec(&migration_job(
            &model(&sample_database()),
            &migrations,
            &config(),
        ));
        let env = pod.containers[0].env.clone().unwrap_or_default();
        let key_of = |name: &str| {
            env.iter()
                .find(|v| v.name == name)
                .and_then(|v| v.value_from.clone())
                .and_then(|f| f.secret_key_ref)
                .map(|r| (r.name, r.key))
        };
        for (name, key) in [
            ("PGPORT", "port"),
            ("PGDATABASE", "dbname"),
            ("PGUSER", "username"),
            ("PGPASSWORD", "password"),
            ("DATABASE_URL", "uri"),
        ] {
            assert_eq!(
                key_of(name),
                Some(("orders-app".to_owned(), key.to_owned())),
                "{name}"
            );
        }
        // No secret value is copied into the Job.
        assert!(
            env.iter()
                .all(|v| v.value.is_none() || !v.name.contains("PASSWORD"))
        );
        let hosts: Vec<_> = env.iter().filter(|v| v.name == "PGHOST").collect();
        assert_eq!(hosts.len(), 1, "{env:?}");
        assert_eq!(hosts[0].value.as_deref(), Some("pgbouncer"));
        assert!(env.iter().any(|v| v.name == "RAILS_ENV"));
    }

    #[test]
    fn the_app_secret_holds_every_key_the_job_reads() {
        let db = sample_database();
        let secret = super::super::secret(&model(&db), super::super::SecretKind::App, "p@ss:w/rd");
        let data = secret.data.unwrap_or_default();
        let pod = pod_spec(&migration_job(&model(&db), &spec(), &config()));
        for var in pod.containers[0].env.clone().unwrap_or_default() {
            if let Some(key) = var.value_from.and_then(|f| f.secret_key_ref) {
                assert_eq!(key.name, secret.metadata.name.clone().unwrap_or_default());
                assert!(
                    data.contains_key(&key.key),
                    "{} reads missing key {}",
                    var.name,
                    key.key
                );
            }
        }
        let uri = String::from_utf8(data["uri"].0.clone()).unwrap_or_default();
        assert!(
            uri.contains("p%40ss%3Aw%2Frd@orders-rw.shop.svc:5432/app"),
            "{uri}"
        );
        let host = String::from_utf8(data["host"].0.clone()).unwrap_or_default();
        assert!(host.starts_with("orders-rw."), "{host}");
    }

    #[test]
    fn the_job_verifies_the_server_and_with_client_certificates_presents_one() {
        let env_of = |pod: &PodSpec| -> BTreeMap<String, String> {
            pod.containers[0]
                .env
                .iter()
                .flatten()
                .filter_map(|v| Some((v.name.clone(), v.value.clone()?)))
                .collect()
        };
        let items_of = |pod: &PodSpec| -> Vec<String> {
            let volume = pod.volumes.iter().flatten().find(|v| v.name == "app-tls");
            let secret = volume.and_then(|v| v.secret.clone()).unwrap_or_default();
            assert_eq!(secret.secret_name.as_deref(), Some("orders-app"));
            assert_eq!(secret.default_mode, Some(0o440));
            secret
                .items
                .iter()
                .flatten()
                .map(|i| i.key.clone())
                .collect()
        };
        let db = sample_database();
        let pod = pod_spec(&migration_job(&model(&db), &spec(), &config()));
        let env = env_of(&pod);
        assert_eq!(env["PGSSLMODE"], "verify-full");
        assert_eq!(env["PGSSLROOTCERT"], "/tusk/app-tls/ca.crt");
        assert!(!env.contains_key("PGSSLCERT"), "{env:?}");
        assert_eq!(items_of(&pod), ["ca.crt"]);
        assert_eq!(
            pod.security_context.as_ref().and_then(|c| c.fs_group),
            Some(MIGRATION_UID),
            "the files are readable by the Job's group"
        );
        let mount = &pod.containers[0].volume_mounts.clone().unwrap_or_default()[0];
        assert_eq!(
            (
                mount.name.as_str(),
                mount.mount_path.as_str(),
                mount.read_only
            ),
            ("app-tls", "/tusk/app-tls", Some(true))
        );

        // Refused at admission for now (see api::tls); the Job handles it.
        let mut with_client = model(&db);
        with_client.tls.client_certificates = true;
        let pod = pod_spec(&migration_job(&with_client, &spec(), &config()));
        let env = env_of(&pod);
        assert_eq!(env["PGSSLCERT"], "/tusk/app-tls/tls.crt");
        assert_eq!(env["PGSSLKEY"], "/tusk/app-tls/tls.key");
        assert_eq!(items_of(&pod), ["ca.crt", "tls.crt", "tls.key"]);
    }
}
