//! The Jobs of a major upgrade, on the primary's volume: `check` (while the
//! old primary runs; the volume read-only), `upgrade` (`tusk upgrade run`,
//! the primary stopped) and `rollback`.
//!
//! Each pod runs `tusk copy-binary` from the operator image, then (check and
//! upgrade) `tusk upgrade stage-old` in the OLD image into an emptyDir, then
//! `tusk upgrade <step>` in the NEW image (the rollback: in the old one,
//! which is known to run, and needs no staged programs). The pod is pinned
//! to the primary's node (a ReadWriteOnce volume is shared only there) and
//! reports its outcome as its termination message, which [`outcome`] reads.
//!
//! The check reaches a primary in another pod over TCP. A primary that
//! serves TLS accepts no plaintext TCP, so then the check relays over TLS,
//! verifying that the primary's certificate names `<db>-rw` (a name every
//! server certificate carries, Tusk's and a user's `spec.tls.server`) against
//! the CA bundle of `<db>-superuser` (`ca.crt`, the operator keeps it
//! current), mounted read-only at [`PRIMARY_CA_MOUNT`].

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Container, EmptyDirVolumeSource, KeyToPath, NodeAffinity, NodeSelector,
    NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaimVolumeSource, Pod, PodSpec,
    PodTemplateSpec, SecretVolumeSource, Volume,
};
use kube::ResourceExt;

use super::compute::{self, JobKind};
use super::container::{
    DATA_MOUNT, DATA_VOLUME, PGDATA, POSTGRES_PORT, RUN_VOLUME, TMP_VOLUME, TUSK_BIN,
    TUSK_BIN_VOLUME, WAL_MOUNT, WAL_VOLUME, bootstrap_container, container_security_context, mount,
    pod_security_context,
};
use super::secret::{SecretKind, secret_env};
use super::{BuildConfig, hash, labels, object_meta, placement, template_meta};
use crate::api::model::ValidatedDatabase;
use crate::contract::{UpgradeJob, UpgradeOutcome, env};

/// How long each kind of Job may run.
fn deadline_seconds(job: UpgradeJob) -> i64 {
    match job {
        UpgradeJob::Check => CHECK_DEADLINE_SECONDS,
        UpgradeJob::Upgrade => UPGRADE_DEADLINE_SECONDS,
        UpgradeJob::Rollback => ROLLBACK_DEADLINE_SECONDS,
    }
}

/// The Job's label naming its step.
pub const STEP_LABEL: &str = "tusk.dev/upgrade-step";
/// `app.kubernetes.io/component` of the Jobs and their pods: not
/// `database`, so no instance selector (Services, PDBs) ever picks them.
pub const COMPONENT: &str = "upgrade";
/// The main container; its termination message is the outcome.
pub const UPGRADE_CONTAINER: &str = "upgrade";
/// The init container that stages the old major.
pub const STAGE_CONTAINER: &str = "stage-old";
/// Where the old major is staged (an emptyDir), and its programs.
pub const OLD_STAGE: &str = "/upgrade/old";
const OLD_STAGE_VOLUME: &str = "old-postgres";
/// Where the check finds the CAs that verify the old primary (the
/// `ca.crt` of `<db>-superuser`, alone).
pub const PRIMARY_CA_MOUNT: &str = "/upgrade/primary-ca";
const PRIMARY_CA_VOLUME: &str = "primary-ca";
/// The file under [`PRIMARY_CA_MOUNT`], named as the Secret's key.
const PRIMARY_CA_FILE: &str = super::tls::CLIENT_CA_KEY;

/// A check runs pg_upgrade's checks and an initdb; an upgrade also dumps
/// and restores the schema (minutes with many objects; the data is linked,
/// not copied); a rollback only renames.
const CHECK_DEADLINE_SECONDS: i64 = 1800;
const UPGRADE_DEADLINE_SECONDS: i64 = 7200;
const ROLLBACK_DEADLINE_SECONDS: i64 = 600;

/// What the upgrade Jobs are built from.
#[derive(Clone, Debug)]
pub struct UpgradeJobInput<'a> {
    pub db: &'a ValidatedDatabase,
    pub config: &'a BuildConfig,
    /// The image the primary ran before (the old major).
    pub old_image: String,
    /// The image of the new major.
    pub new_image: String,
    pub old_major: u32,
    pub new_major: u32,
    /// The primary's PVC.
    pub claim: String,
    /// The node the primary's volume is attached to (its pod's node), when
    /// known: the Jobs are pinned to it.
    pub node: Option<String>,
    /// The running primary's address (its pod IP): the check reaches it
    /// there over TCP.
    pub primary_host: Option<String>,
    /// The running primary serves TLS (its pod was built with a TLS Secret):
    /// the check's TCP relay then starts TLS. `false` for a primary from
    /// before TLS, which the relay reaches in plaintext as it always did.
    pub primary_tls: bool,
}

/// The Job name of `step` for `db` from `from` to `to`:
/// `<db>-upgrade-check-15-17`, `<db>-upgrade-15-17`,
/// `<db>-upgrade-rollback-15-17`. The same every time, so a second create
/// is a conflict, not a second run. Within 63 characters: a long Database
/// name is cut and a hash of it keeps the names apart.
pub fn upgrade_job_name(db: &str, step: UpgradeJob, from: u32, to: u32) -> String {
    let suffix = match step {
        UpgradeJob::Upgrade => format!("-upgrade-{from}-{to}"),
        other => format!("-upgrade-{}-{from}-{to}", other.as_str()),
    };
    let name = format!("{db}{suffix}");
    if name.len() <= 63 {
        return name;
    }
    let digest = hash::fnv1a64_hex(db.as_bytes());
    let keep = 63usize.saturating_sub(suffix.len() + 7);
    let prefix = db[..keep.min(db.len())].trim_end_matches('-');
    format!("{prefix}-{}{suffix}", &digest[..6])
}

pub fn check_job(input: &UpgradeJobInput<'_>) -> Job {
    job(input, UpgradeJob::Check)
}

pub fn upgrade_job(input: &UpgradeJobInput<'_>) -> Job {
    job(input, UpgradeJob::Upgrade)
}

pub fn rollback_job(input: &UpgradeJobInput<'_>) -> Job {
    job(input, UpgradeJob::Rollback)
}

/// The Job of `step`.
pub fn job(input: &UpgradeJobInput<'_>, step: UpgradeJob) -> Job {
    let db_name = input.db.name.clone();
    let name = upgrade_job_name(&db_name, step, input.old_major, input.new_major);
    let mut job_labels = labels::common(&db_name);
    job_labels.insert(labels::COMPONENT.to_owned(), COMPONENT.to_owned());
    job_labels.insert(STEP_LABEL.to_owned(), step.as_str().to_owned());
    Job {
        metadata: object_meta(input.db, name, job_labels.clone()),
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(deadline_seconds(step)),
            template: PodTemplateSpec {
                metadata: Some(template_meta(input.db, job_labels)),
                spec: Some(pod_spec(input, step)),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

fn pod_spec(input: &UpgradeJobInput<'_>, step: UpgradeJob) -> PodSpec {
    let mut init = vec![bootstrap_container(input.config)];
    if step != UpgradeJob::Rollback {
        init.push(stage_container(input));
    }
    let empty = |name: &str| Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    let mut spec = PodSpec {
        init_containers: Some(init),
        containers: vec![main_container(input, step)],
        volumes: Some(
            [
                Volume {
                    name: DATA_VOLUME.to_owned(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: input.claim.clone(),
                        read_only: (step == UpgradeJob::Check).then_some(true),
                    }),
                    ..Volume::default()
                },
                empty(TUSK_BIN_VOLUME),
                empty(OLD_STAGE_VOLUME),
                empty(RUN_VOLUME),
                empty(TMP_VOLUME),
            ]
            .into_iter()
            .chain(wal_volume(input, step))
            .chain(primary_ca_volume(input, step))
            .collect(),
        ),
        restart_policy: Some("Never".to_owned()),
        security_context: Some(pod_security_context()),
        affinity: input.node.as_deref().map(on_node),
        enable_service_links: Some(false),
        automount_service_account_token: Some(false),
        ..PodSpec::default()
    };
    // On the instance's node, which may be tainted for databases.
    placement::place_volume_job(&mut spec, &input.db.placement);
    spec
}

/// The instance's WAL PVC when the Database has a WAL volume: PGDATA's
/// `pg_wal` is a symlink into it, so every step that opens the cluster
/// needs it; the check does not (it reads a shadow of the data directory,
/// see `crate::upgrade::check`). The data PVC is named
/// like its instance ([`super::names::pvc`]), so `claim` names the instance.
fn wal_volume(input: &UpgradeJobInput<'_>, step: UpgradeJob) -> Option<Volume> {
    input
        .db
        .wal_storage
        .as_ref()
        .filter(|_| step != UpgradeJob::Check)
        .map(|_| super::wal_volume::claim_volume(&input.claim, false))
}

/// Whether the check relays to the primary over TLS.
fn relays_tls(input: &UpgradeJobInput<'_>, step: UpgradeJob) -> bool {
    step == UpgradeJob::Check && input.primary_host.is_some() && input.primary_tls
}

/// `ca.crt` of `<db>-superuser` alone, for a check that relays over TLS.
/// Optional: a Secret still without it (the operator writes it with the
/// instances' TLS Secrets) leaves the file missing, which the check reports
/// by name, rather than a pod stuck in ContainerCreating until the deadline.
fn primary_ca_volume(input: &UpgradeJobInput<'_>, step: UpgradeJob) -> Option<Volume> {
    relays_tls(input, step).then(|| Volume {
        name: PRIMARY_CA_VOLUME.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(SecretKind::Superuser.secret_name(&input.db.name)),
            items: Some(vec![KeyToPath {
                key: super::tls::CLIENT_CA_KEY.to_owned(),
                path: PRIMARY_CA_FILE.to_owned(),
                mode: None,
            }]),
            default_mode: Some(super::tls::FILE_MODE),
            optional: Some(true),
        }),
        ..Volume::default()
    })
}

/// The check's arguments that make its relay start TLS and verify the
/// primary by `<db>-rw`.
fn primary_tls_args(input: &UpgradeJobInput<'_>) -> [String; 4] {
    [
        "--primary-name".to_owned(),
        super::names::rw_service(&input.db.name),
        "--primary-ca".to_owned(),
        format!("{PRIMARY_CA_MOUNT}/{PRIMARY_CA_FILE}"),
    ]
}

/// Required to run on `node` (by name, as DaemonSets pin theirs), still
/// through the scheduler, so resources and taints are respected.
fn on_node(node: &str) -> Affinity {
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".to_owned(),
                        operator: "In".to_owned(),
                        values: Some(vec![node.to_owned()]),
                    }]),
                    ..NodeSelectorTerm::default()
                }],
            }),
            ..NodeAffinity::default()
        }),
        ..Affinity::default()
    }
}

fn tusk() -> String {
    format!("{TUSK_BIN}/tusk")
}

fn stage_container(input: &UpgradeJobInput<'_>) -> Container {
    Container {
        name: STAGE_CONTAINER.to_owned(),
        image: Some(input.old_image.clone()),
        image_pull_policy: input.config.image_pull_policy.clone(),
        command: Some(vec![
            tusk(),
            "upgrade".to_owned(),
            "stage-old".to_owned(),
            "--dest".to_owned(),
            OLD_STAGE.to_owned(),
        ]),
        volume_mounts: Some(vec![
            mount(TUSK_BIN_VOLUME, TUSK_BIN, true),
            mount(OLD_STAGE_VOLUME, OLD_STAGE, false),
            mount(TMP_VOLUME, "/tmp", false),
        ]),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        resources: Some(compute::job(
            JobKind::Upgrade,
            input.db.resources.memory_bytes(),
        )),
        security_context: Some(container_security_context()),
        ..Container::default()
    }
}

fn main_container(input: &UpgradeJobInput<'_>, step: UpgradeJob) -> Container {
    let mut command = vec![tusk(), "upgrade".to_owned(), step.subcommand().to_owned()];
    let new_bindir = format!("/usr/lib/postgresql/{}/bin", input.new_major);
    let dirs = [
        "--old-bindir".to_owned(),
        format!("{OLD_STAGE}/bin"),
        "--new-bindir".to_owned(),
        new_bindir,
        "--pgdata".to_owned(),
        PGDATA.to_owned(),
    ];
    let mut vars = Vec::new();
    match step {
        UpgradeJob::Check => {
            command.extend(dirs);
            if let Some(host) = &input.primary_host {
                command.extend([
                    "--primary-host".to_owned(),
                    host.clone(),
                    "--port".to_owned(),
                    POSTGRES_PORT.to_string(),
                ]);
                if relays_tls(input, step) {
                    command.extend(primary_tls_args(input));
                }
            }
            vars.push(secret_env(
                env::SUPERUSER_PASSWORD,
                &input.db.name,
                SecretKind::Superuser,
            ));
        }
        UpgradeJob::Upgrade => command.extend(dirs),
        UpgradeJob::Rollback => command.extend([
            "--pgdata".to_owned(),
            PGDATA.to_owned(),
            "--old-major".to_owned(),
            input.old_major.to_string(),
        ]),
    }
    let image = match step {
        UpgradeJob::Rollback => input.old_image.clone(),
        _ => input.new_image.clone(),
    };
    let mut mounts = vec![
        mount(DATA_VOLUME, DATA_MOUNT, step == UpgradeJob::Check),
        mount(TUSK_BIN_VOLUME, TUSK_BIN, true),
        mount(RUN_VOLUME, "/var/run/postgresql", false),
        mount(TMP_VOLUME, "/tmp", false),
    ];
    if step != UpgradeJob::Rollback {
        mounts.push(mount(OLD_STAGE_VOLUME, OLD_STAGE, true));
    }
    if relays_tls(input, step) {
        mounts.push(mount(PRIMARY_CA_VOLUME, PRIMARY_CA_MOUNT, true));
    }
    if input.db.wal_storage.is_some() && step != UpgradeJob::Check {
        mounts.push(mount(WAL_VOLUME, WAL_MOUNT, false));
        if step == UpgradeJob::Upgrade {
            // Where the new cluster's initdb puts its WAL (beside the old's).
            vars.extend(super::wal_volume::env(input.db));
        }
    }
    Container {
        name: UPGRADE_CONTAINER.to_owned(),
        image: Some(image),
        image_pull_policy: input.config.image_pull_policy.clone(),
        command: Some(command),
        env: (!vars.is_empty()).then_some(vars),
        working_dir: Some("/tmp".to_owned()),
        volume_mounts: Some(mounts),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        resources: Some(compute::job(
            JobKind::Upgrade,
            input.db.resources.memory_bytes(),
        )),
        security_context: Some(container_security_context()),
        ..Container::default()
    }
}

/// Where an upgrade Job is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpgradeJobOutcome {
    Running,
    /// The step's own report.
    Succeeded(String),
    /// The step's report (quoting pg_upgrade), or why there is none.
    Failed(String),
}

/// The outcome of upgrade Job `job` from its status and its `pods` (listed
/// by `job-name=<name>`): its report from the termination message once it
/// ended; a failure without report (a staging failure, the deadline, an
/// image that cannot be pulled) says what Kubernetes said.
pub fn outcome(job: &Job, pods: &[Pod]) -> UpgradeJobOutcome {
    let name = job.name_any();
    let status = job.status.clone().unwrap_or_default();
    let condition = |kind: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == kind && c.status == "True")
            .cloned()
    };
    let complete = status.succeeded.unwrap_or(0) > 0 || condition("Complete").is_some();
    let failed = condition("Failed");
    if !complete && failed.is_none() && status.failed.unwrap_or(0) == 0 {
        return UpgradeJobOutcome::Running;
    }
    let report = super::terminated(pods, UPGRADE_CONTAINER).and_then(|t| {
        serde_json::from_str::<UpgradeOutcome>(t.message.as_deref().unwrap_or_default().trim()).ok()
    });
    match (complete, report) {
        (true, Some(r)) if r.ok => UpgradeJobOutcome::Succeeded(r.message),
        (true, None) => UpgradeJobOutcome::Succeeded(format!("Job {name} completed")),
        (_, Some(r)) => UpgradeJobOutcome::Failed(r.message),
        (false, None) => UpgradeJobOutcome::Failed(unreported_failure(&name, pods, failed)),
    }
}

fn unreported_failure(
    name: &str,
    pods: &[Pod],
    condition: Option<k8s_openapi::api::batch::v1::JobCondition>,
) -> String {
    let containers = [STAGE_CONTAINER, "bootstrap-tusk", UPGRADE_CONTAINER];
    for container in containers {
        if let Some(t) = super::terminated(pods, container).filter(|t| t.exit_code != 0) {
            let message = t.message.unwrap_or_default();
            let message = serde_json::from_str::<UpgradeOutcome>(message.trim())
                .map(|r| r.message)
                .unwrap_or(message);
            return format!(
                "Job {name}: container {container} failed ({}, exit code {}): {}",
                t.reason.unwrap_or_default(),
                t.exit_code,
                message.trim()
            );
        }
    }
    match condition {
        Some(c) => format!(
            "Job {name} failed ({}): {}",
            c.reason.unwrap_or_default(),
            c.message.unwrap_or_default()
        ),
        None => format!("Job {name} failed without a report (its pod is gone, or never started)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::resources::tests::model;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };

    fn config() -> BuildConfig {
        BuildConfig {
            postgres_repository: "localhost/postgres".into(),
            tusk_image: "localhost/tusk:dev".into(),
            image_pull_policy: Some("IfNotPresent".into()),
            instance_env: Vec::new(),
            default_store: None,
            instance_self_label: false,
            node_ports: Default::default(),
        }
    }

    fn input<'a>(db: &'a ValidatedDatabase, config: &'a BuildConfig) -> UpgradeJobInput<'a> {
        UpgradeJobInput {
            db,
            config,
            old_image: "localhost/postgres:15".into(),
            new_image: "localhost/postgres:17".into(),
            old_major: 15,
            new_major: 17,
            claim: "orders-1".into(),
            node: Some("node-a".into()),
            primary_host: Some("198.18.0.7".into()),
            primary_tls: false,
        }
    }

    fn spec(job: &Job) -> PodSpec {
        job.spec
            .clone()
            .and_then(|s| s.template.spec)
            .expect("pod spec")
    }

    fn command(job: &Job) -> Vec<String> {
        spec(job).containers[0].command.clone().unwrap_or_default()
    }

    #[test]
    fn names_are_per_step_and_per_versions_and_fit() {
        assert_eq!(
            upgrade_job_name("orders", UpgradeJob::Check, 15, 17),
            "orders-upgrade-check-15-17"
        );
        assert_eq!(
            upgrade_job_name("orders", UpgradeJob::Upgrade, 15, 17),
            "orders-upgrade-15-17"
        );
        assert_eq!(
            upgrade_job_name("orders", UpgradeJob::Rollback, 15, 17),
            "orders-upgrade-rollback-15-17"
        );
        let long_a = format!("{}a", "x".repeat(49));
        let long_b = format!("{}b", "x".repeat(49));
        for step in [UpgradeJob::Check, UpgradeJob::Upgrade, UpgradeJob::Rollback] {
            let a = upgrade_job_name(&long_a, step, 15, 17);
            let b = upgrade_job_name(&long_b, step, 15, 17);
            assert!(a.len() <= 63 && b.len() <= 63, "{a}");
            assert_ne!(a, b);
            assert_eq!(a, upgrade_job_name(&long_a, step, 15, 17));
            assert!(a.ends_with("-15-17") && !a.contains("--"), "{a}");
        }
    }

    #[test]
    fn the_check_job_stages_the_old_major_and_reads_the_volume_only() {
        let mut db = sample_database();
        db.metadata.namespace = Some("shop".into());
        db.metadata.uid = Some("db-uid".into());
        let config = config();
        let job = check_job(&input(&model(&db), &config));
        assert_eq!(
            job.metadata.name.as_deref(),
            Some("orders-upgrade-check-15-17")
        );
        assert_eq!(job.metadata.namespace.as_deref(), Some("shop"));
        let owner = &job.metadata.owner_references.clone().unwrap_or_default()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Database", "db-uid")
        );
        let labels = job.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels
                .get("app.kubernetes.io/component")
                .map(String::as_str),
            Some("upgrade")
        );
        assert_eq!(
            labels.get("tusk.dev/database").map(String::as_str),
            Some("orders")
        );
        assert_eq!(labels.get(STEP_LABEL).map(String::as_str), Some("check"));
        let job_spec = job.spec.clone().expect("spec");
        assert_eq!(job_spec.backoff_limit, Some(0));
        assert!(job_spec.active_deadline_seconds.is_some());
        assert_eq!(job_spec.ttl_seconds_after_finished, None);

        let pod = spec(&job);
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let init = pod.init_containers.clone().unwrap_or_default();
        let names: Vec<&str> = init.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["bootstrap-tusk", "stage-old"]);
        assert_eq!(init[1].image.as_deref(), Some("localhost/postgres:15"));
        assert_eq!(
            init[1].command.clone().unwrap_or_default(),
            [
                "/tusk/bin/tusk",
                "upgrade",
                "stage-old",
                "--dest",
                "/upgrade/old"
            ]
        );
        let main = &pod.containers[0];
        assert_eq!(main.image.as_deref(), Some("localhost/postgres:17"));
        assert_eq!(
            command(&job),
            [
                "/tusk/bin/tusk",
                "upgrade",
                "check",
                "--old-bindir",
                "/upgrade/old/bin",
                "--new-bindir",
                "/usr/lib/postgresql/17/bin",
                "--pgdata",
                "/var/lib/postgresql/data/pgdata",
                "--primary-host",
                "198.18.0.7",
                "--port",
                "5432"
            ]
        );
        let password = main.env.clone().unwrap_or_default();
        let secret = password[0]
            .value_from
            .as_ref()
            .and_then(|s| s.secret_key_ref.as_ref())
            .map(|r| (r.name.as_str(), r.key.as_str()));
        assert_eq!(password[0].name, "POSTGRES_SUPERUSER_PASSWORD");
        assert_eq!(secret, Some(("orders-superuser", "password")));
        let data = main
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == DATA_VOLUME)
            .expect("data mount");
        assert_eq!(
            (data.mount_path.as_str(), data.read_only),
            ("/var/lib/postgresql/data", Some(true))
        );
        let claim = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == DATA_VOLUME)
            .expect("volume");
        assert_eq!(
            claim
                .persistent_volume_claim
                .as_ref()
                .map(|c| (c.claim_name.as_str(), c.read_only)),
            Some(("orders-1", Some(true)))
        );
        let fields = pod
            .affinity
            .and_then(|a| a.node_affinity)
            .and_then(|n| n.required_during_scheduling_ignored_during_execution)
            .map(|s| {
                s.node_selector_terms[0]
                    .match_fields
                    .clone()
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        assert_eq!(fields[0].key, "metadata.name");
        assert_eq!(fields[0].values, Some(vec!["node-a".to_owned()]));
    }

    #[test]
    fn the_upgrade_writes_and_the_rollback_runs_in_the_old_image_without_staging() {
        let db = sample_database();
        let config = config();
        let job = upgrade_job(&input(&model(&db), &config));
        assert_eq!(job.metadata.name.as_deref(), Some("orders-upgrade-15-17"));
        assert_eq!(&command(&job)[..3], ["/tusk/bin/tusk", "upgrade", "run"]);
        assert!(!command(&job).iter().any(|a| a == "--primary-host"));
        let pod = spec(&job);
        let data = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == DATA_VOLUME)
            .expect("data");
        assert_eq!(data.read_only, None);
        assert_eq!(pod.containers[0].env, None, "no password needed");

        let job = rollback_job(&input(&model(&db), &config));
        assert_eq!(
            job.metadata.name.as_deref(),
            Some("orders-upgrade-rollback-15-17")
        );
        assert_eq!(
            command(&job),
            [
                "/tusk/bin/tusk",
                "upgrade",
                "rollback",
                "--pgdata",
                "/var/lib/postgresql/data/pgdata",
                "--old-major",
                "15"
            ]
        );
        let pod = spec(&job);
        assert_eq!(
            pod.containers[0].image.as_deref(),
            Some("localhost/postgres:15")
        );
        assert_eq!(pod.init_containers.clone().unwrap_or_default().len(), 1);
    }

    #[test]
    fn a_check_of_a_tls_primary_relays_over_tls_with_the_superuser_ca() {
        let db = sample_database();
        let config = config();
        let model = model(&db);
        let tls = UpgradeJobInput {
            primary_tls: true,
            ..input(&model, &config)
        };
        let job = check_job(&tls);
        assert_eq!(
            command(&job)[9..],
            [
                "--primary-host",
                "198.18.0.7",
                "--port",
                "5432",
                "--primary-name",
                "orders-rw",
                "--primary-ca",
                "/upgrade/primary-ca/ca.crt"
            ]
        );
        let pod = spec(&job);
        let volume = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "primary-ca")
            .and_then(|v| v.secret.clone())
            .expect("the CA volume");
        assert_eq!(volume.secret_name.as_deref(), Some("orders-superuser"));
        let items: Vec<(String, String)> = volume
            .items
            .iter()
            .flatten()
            .map(|i| (i.key.clone(), i.path.clone()))
            .collect();
        assert_eq!(
            items,
            [("ca.crt".to_owned(), "ca.crt".to_owned())],
            "the CA alone"
        );
        assert_eq!(volume.optional, Some(true));
        let mount = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == "primary-ca")
            .expect("the CA mount");
        assert_eq!(
            (mount.mount_path.as_str(), mount.read_only),
            (PRIMARY_CA_MOUNT, Some(true))
        );
        assert!(
            pod.init_containers.iter().flatten().all(|c| c
                .volume_mounts
                .iter()
                .flatten()
                .all(|m| m.name != "primary-ca")),
            "only the check itself reads it"
        );
    }

    #[test]
    fn tls_arguments_only_for_a_tls_primary_reached_over_tcp_by_the_check() {
        let db = sample_database();
        let config = config();
        let model = model(&db);
        let has_ca = |job: &Job| {
            spec(job)
                .volumes
                .iter()
                .flatten()
                .any(|v| v.name == "primary-ca")
        };
        let plaintext = check_job(&input(&model, &config));
        assert!(
            !command(&plaintext)
                .iter()
                .any(|a| a.starts_with("--primary-name"))
        );
        assert!(!has_ca(&plaintext), "a primary from before TLS");
        let local = UpgradeJobInput {
            primary_host: None,
            primary_tls: true,
            ..input(&model, &config)
        };
        let local = check_job(&local);
        assert!(!command(&local).iter().any(|a| a.starts_with("--primary")));
        assert!(!has_ca(&local), "no relay without a host");
        let tls = UpgradeJobInput {
            primary_tls: true,
            ..input(&model, &config)
        };
        for job in [upgrade_job(&tls), rollback_job(&tls)] {
            assert!(!command(&job).iter().any(|a| a.starts_with("--primary")));
            assert!(!has_ca(&job), "{:?}", job.metadata.name);
        }
    }

    /// The checks of Pod Security "restricted" a pod spec can fail.
    #[test]
    fn every_job_meets_pod_security_restricted() {
        let db = sample_database();
        let config = config();
        let model = model(&db);
        let input = input(&model, &config);
        for job in [check_job(&input), upgrade_job(&input), rollback_job(&input)] {
            let pod = spec(&job);
            let ctx = pod.security_context.clone().unwrap_or_default();
            assert_eq!(ctx.run_as_non_root, Some(true));
            assert_eq!(ctx.run_as_user, Some(999));
            assert!(pod.volumes.iter().flatten().all(|v| v.host_path.is_none()));
            for c in pod
                .init_containers
                .clone()
                .unwrap_or_default()
                .into_iter()
                .chain(pod.containers.clone())
            {
                let ctx = c.security_context.clone().unwrap_or_default();
                assert_eq!(ctx.allow_privilege_escalation, Some(false), "{}", c.name);
                assert_eq!(
                    ctx.capabilities.and_then(|c| c.drop),
                    Some(vec!["ALL".to_owned()]),
                    "{}",
                    c.name
                );
                // The copy of tusk is the instance pods' container, unbounded there too.
                assert!(
                    c.name == "bootstrap-tusk" || c.resources.and_then(|r| r.limits).is_some(),
                    "{}",
                    c.name
                );
            }
        }
    }

    fn finished(condition: &str, reason: &str) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(vec![JobCondition {
                    type_: condition.into(),
                    status: "True".into(),
                    reason: Some(reason.into()),
                    message: Some("Job was active longer than specified deadline".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Job::default()
        }
    }

    fn pod(container: &str, exit_code: i32, message: &str, init: bool) -> Pod {
        let statuses = vec![ContainerStatus {
            name: container.into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code,
                    message: Some(message.into()),
                    reason: Some(if exit_code == 0 { "Completed" } else { "Error" }.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }];
        Pod {
            status: Some(PodStatus {
                container_statuses: (!init).then(|| statuses.clone()),
                init_container_statuses: init.then_some(statuses),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_outcome_comes_from_the_report_or_from_what_kubernetes_says() {
        assert_eq!(outcome(&Job::default(), &[]), UpgradeJobOutcome::Running);
        let done = finished("Complete", "Completed");
        let report = r#"{"ok":true,"message":"pg_upgrade --check from 15 to 17 passed"}"#;
        assert_eq!(
            outcome(&done, &[pod(UPGRADE_CONTAINER, 0, report, false)]),
            UpgradeJobOutcome::Succeeded("pg_upgrade --check from 15 to 17 passed".into())
        );
        let failed = finished("Failed", "BackoffLimitExceeded");
        let report = r#"{"ok":false,"message":"pg_upgrade --check from 15 to 17 failed:\nChecking data type usage failed"}"#;
        assert_eq!(
            outcome(&failed, &[pod(UPGRADE_CONTAINER, 1, report, false)]),
            UpgradeJobOutcome::Failed(
                "pg_upgrade --check from 15 to 17 failed:\nChecking data type usage failed".into()
            )
        );
        let staging =
            r#"{"ok":false,"message":"/usr/lib/postgresql/15/bin is not laid out as expected"}"#;
        let UpgradeJobOutcome::Failed(why) =
            outcome(&failed, &[pod(STAGE_CONTAINER, 1, staging, true)])
        else {
            panic!("failed");
        };
        assert!(
            why.contains("stage-old") && why.contains("not laid out"),
            "{why}"
        );
        let UpgradeJobOutcome::Failed(why) = outcome(&finished("Failed", "DeadlineExceeded"), &[])
        else {
            panic!("failed");
        };
        assert!(why.contains("DeadlineExceeded"), "{why}");
    }
}
