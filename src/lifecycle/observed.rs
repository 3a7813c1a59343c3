//! What the controller saw in one pass, reduced to the facts the state machine
//! decides on. The controller fills this from its caches (PVCs, Pods, Secrets,
//! Services, PDBs) and from each instance manager's `/status`; nothing here does
//! I/O.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::api::status::InstanceRole;
use crate::contract::{Archiver, Credential, RestoreProgress};
use crate::postgres::params::Change;
use crate::resources::names;

/// Everything observed about one Database in one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The Database's name; instance names derive from it.
    pub database: String,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Every Secret exists with the labels and owner the builder gives it.
    pub secrets: bool,
    /// Credentials whose Secret Tusk has not yet pushed to the instances (it
    /// was recreated, or predates the push): the Secret is the source of truth.
    pub credentials_to_sync: Vec<Credential>,
    /// All three Services (rw, ro, r) exist and are as built (selector, ports,
    /// labels, owner).
    pub services: bool,
    /// Exactly the PodDisruptionBudgets the builder makes exist, as built.
    pub pod_disruption_budgets: bool,
    /// PodDisruptionBudgets of this Database the builder no longer makes.
    pub surplus_budgets: Vec<String>,
    /// The Services of `spec.expose` that exist (those of earlier specs too).
    pub exposure: Vec<ExposedService>,
    /// Who the Services send traffic to: pods with a ready endpoint.
    pub routing: Routing,
    /// The PostgreSQL image the spec asks for (`spec.image`, or derived from
    /// `spec.version`).
    pub desired_image: String,
    /// Every instance that has a PVC, a Pod or both, by serial. A map keyed by
    /// serial makes one entry per instance impossible to violate and keeps the
    /// iteration order (and so the plan) deterministic. An entry with a PVC and
    /// no Pod is a survivor whose pod is to be re-attached.
    pub instances: BTreeMap<u32, Instance>,
    /// `synchronous_standby_names` as the primary currently runs it; the default
    /// (empty list, 0) means asynchronous.
    pub sync: SyncStandbys,
    /// How the spec's `postgresql.parameters` differ from those the instances
    /// were last given: `params::classify(applied, &spec.postgresql.parameters)`.
    pub parameter_change: Change,
    /// Physical replication slots on the primary that no walsender uses.
    pub inactive_slots: Vec<String>,
    /// The answering primary's WAL archiving, when `archive_mode` is on.
    pub archiving: Option<Archiver>,
    /// `spec.backup.objectStore.credentialsSecret` when no such Secret exists.
    pub missing_store_credentials: Option<String>,
    /// A restore bootstrap, while the first primary is being made.
    pub restore: RestoreView,
    /// The primary Lease as the operator observes it.
    pub lease: LeaseState,
    /// The Lease, and the account, Role and binding the managers hold it
    /// with, all exist.
    pub lease_access: bool,
    /// The Jobs Tusk runs for this Database, by name.
    pub jobs: BTreeMap<String, JobState>,
    /// The Database's schema migration Jobs (a subset of `jobs`, with the
    /// version each runs).
    pub migration_jobs: Vec<MigrationJob>,
    /// The Backups of this Database, by name.
    pub backups: BTreeMap<String, BackupView>,
    /// Backups can be taken: an object store is configured.
    pub backups_possible: bool,
    /// When this pass runs: schedules and retention are decided against it.
    pub now: Timestamp,
    /// `metadata.creationTimestamp`: a schedule counts its first run from it.
    pub created: Option<Timestamp>,
    /// What a deletion decides on.
    pub deletion: Deletion,
    /// The last retention pass this operator ran for the Database, if any.
    pub last_retention: Option<RetentionPass>,
    /// Instance Pods and PVCs, by name, that lack a label or annotation of
    /// `spec.inheritedMetadata` (removed or changed since they were made).
    pub inherited_drift: InheritedDrift,
    /// The certificates, the CAs and what each instance loaded and presents
    /// (`lifecycle::tls`); `None` where TLS is not observed (tests of other
    /// concerns): nothing about TLS is planned then.
    pub tls: Option<super::tls::TlsObserved>,
    /// The published endpoints (`spec.expose`) and the probes through them
    /// (`lifecycle::endpoints`); `None` where they are not observed (tests
    /// of other concerns): nothing about them is planned then.
    pub published: Option<super::published::ExposureObserved>,
}

/// Objects whose inherited metadata drifted, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InheritedDrift {
    pub pods: Vec<String>,
    pub pvcs: Vec<String>,
}

/// Where a Job is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    Running,
    /// It succeeded; what its container reported.
    Succeeded(String),
    /// It failed for good; what its container reported.
    Failed(String),
}

/// Where a Backup is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackupState {
    Running,
    Completed,
    Failed(String),
}

/// One Backup of the Database, as the backup sub-planners see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupView {
    pub state: BackupState,
    /// The scheduled run it was created for (`tusk.dev/scheduled-at`).
    pub scheduled_at: Option<Timestamp>,
    /// The Database uid it is the final backup of (`tusk.dev/final-backup-for`).
    pub final_for: Option<String>,
    /// `status.completedAt`.
    pub completed_at: Option<Timestamp>,
    /// The backup id in the store (the last part of `status.location`).
    pub backup_id: Option<String>,
    /// Its Ready condition's message: where it stands, in its own words.
    pub ready_message: String,
}

impl From<BackupState> for BackupView {
    fn from(state: BackupState) -> Self {
        Self {
            state,
            scheduled_at: None,
            final_for: None,
            completed_at: None,
            backup_id: None,
            ready_message: String::new(),
        }
    }
}

/// A schema migration Job of the Database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationJob {
    pub name: String,
    /// The `spec.migrations.version` it runs.
    pub version: String,
    /// `Failed` carries why (the container's last lines, or the Job's reason).
    pub state: JobState,
    /// Being deleted: its outcome was recorded, it no longer counts.
    pub deleting: bool,
}

/// What a deletion decides on (all default while the Database lives).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deletion {
    /// The Database's uid: its final Backup is marked with it.
    pub uid: Option<String>,
    /// `metadata.deletionTimestamp`: the final Backup is named after it.
    pub requested_at: Option<Timestamp>,
    /// `tusk.dev/skip-final-backup: "true"` is set.
    pub skip_final_backup: bool,
    /// The namespace is being deleted: nothing can be created in it any more.
    pub namespace_terminating: bool,
}

/// A retention pass as the operator ran it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionPass {
    pub at: Timestamp,
    /// `status.lastBackup` then: a newer completed backup makes the next pass due.
    pub last_backup: Option<String>,
}

pub use crate::failover::lease::State as LeaseState;

/// What an instance manager reports of leader selection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HaView {
    /// The members as last pushed to it.
    pub members: Vec<crate::contract::Member>,
    /// What it says of each peer, by instance name.
    pub peers: BTreeMap<String, crate::failover::quorum::Report>,
    /// It fenced itself.
    pub fenced: bool,
    /// A replica: the furthest WAL end it heard its primary report, and
    /// which instance that was.
    pub primary_end: Option<(String, u64)>,
}

/// What is known of a restore bootstrap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreView {
    /// Why `spec.bootstrap.recovery` cannot be carried out (names the field).
    pub unresolved: Option<String>,
    /// The restoring instance's progress (`GET /restore`).
    pub progress: Option<RestoreProgress>,
}

/// One Service of this Database's `spec.expose` (label `tusk.dev/exposed`,
/// owned by the Database), as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExposedService {
    pub name: String,
    /// `spec.loadBalancerClass` as the Service has it.
    pub load_balancer_class: Option<String>,
    /// It has every field the builder gives it now, and no annotation Tusk
    /// applied earlier that the builder no longer gives it. `false` for a
    /// Service the spec no longer lists.
    pub as_built: bool,
    /// Being deleted: neither applied nor deleted again until it is gone.
    pub terminating: bool,
}

// By hand because `Change` has no `Default`: nothing observed means nothing
// to change.
impl Default for Observed {
    fn default() -> Self {
        Self {
            database: String::new(),
            deleting: false,
            secrets: false,
            credentials_to_sync: Vec::new(),
            services: false,
            pod_disruption_budgets: false,
            surplus_budgets: Vec::new(),
            exposure: Vec::new(),
            routing: Routing::default(),
            desired_image: String::new(),
            instances: BTreeMap::new(),
            sync: SyncStandbys::default(),
            parameter_change: Change::Nothing,
            inactive_slots: Vec::new(),
            archiving: None,
            missing_store_credentials: None,
            restore: RestoreView::default(),
            lease: LeaseState::Unobserved,
            lease_access: false,
            jobs: BTreeMap::new(),
            migration_jobs: Vec::new(),
            backups: BTreeMap::new(),
            backups_possible: false,
            now: Timestamp::UNIX_EPOCH,
            created: None,
            deletion: Deletion::default(),
            last_retention: None,
            inherited_drift: InheritedDrift::default(),
            tls: None,
            published: None,
        }
    }
}

impl Observed {
    /// The instance name of `serial` in this Database.
    pub fn name(&self, serial: u32) -> String {
        names::instance_name(&self.database, serial)
    }

    /// Serials whose PVC survived without a pod: their pods are to be re-attached.
    pub fn survivors(&self) -> impl Iterator<Item = u32> + '_ {
        self.instances
            .iter()
            .filter(|(_, i)| i.pvc.is_some() && i.pod.is_none())
            .map(|(serial, _)| *serial)
    }

    /// The serial of instance `name`, when it is one of this Database's.
    pub fn serial_of(&self, name: &str) -> Option<u32> {
        names::serial_of(&self.database, name)
    }
}

/// The pods behind the `-rw` and `-ro` Services' ready endpoints, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routing {
    pub rw: Vec<String>,
    pub ro: Vec<String>,
}

/// `synchronous_standby_names = 'ANY <min> (<standbys>)'`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncStandbys {
    /// Instance names, in serial order.
    pub standbys: Vec<String>,
    /// How many of them must confirm each commit.
    pub min: i32,
}

/// One instance: its volume, its pod, and what its instance manager said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Instance {
    /// The PVC, when it exists.
    pub pvc: Option<PvcState>,
    /// The Pod, when it exists.
    pub pod: Option<Pod>,
    /// Its volumes (the data volume, and any other), with their PVCs' sizes
    /// and what its manager measured on them.
    pub volumes: Vec<super::volume::Volume>,
}

/// Binding state of a PVC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PvcState {
    /// Not bound yet: normal with `WaitForFirstConsumer` storage classes until a
    /// pod uses it.
    Pending,
    /// Bound to a volume.
    Bound,
}

/// A Pod as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pod {
    pub phase: PodPhase,
    /// The `tusk.dev/role` label, if set to a known role.
    pub role_label: Option<InstanceRole>,
    /// The instance manager's `/status`, or `None` when it did not answer (or
    /// speaks another instance API version: see `api_mismatch`).
    pub manager: Option<ManagerStatus>,
    /// The kubelet's Ready condition: what the Services go by.
    pub ready: bool,
    /// The image the `postgres` container runs.
    pub image: String,
    /// Built from another spec than the current one (its spec hash differs
    /// from a fresh build's): recreating it would change it.
    pub outdated: bool,
    /// The instance API version its manager reported, when it is not this
    /// build's; Tusk does not act on what it cannot read.
    pub api_mismatch: Option<u32>,
    /// The pod IP.
    pub address: Option<String>,
    /// It was built with a TLS Secret (`TUSK_TLS_DIR` set): its manager
    /// serves HTTPS and its PostgreSQL TLS.
    pub tls: bool,
    /// The node it was scheduled to.
    pub node: Option<String>,
    /// `status.hostIP`: the node's address, which a `NodePort` endpoint
    /// publishes.
    pub host_ip: Option<String>,
    /// Leader selection as its manager reports it (when it answered and takes part).
    pub ha: Option<HaView>,
    /// `metadata.creationTimestamp`: how long it has had to start (see
    /// `alarm`). `None` only where no API server made it (tests): treated
    /// as just created.
    pub created: Option<Timestamp>,
    /// How often the kubelet restarted its `postgres` container: a pod that
    /// crashed is no longer merely starting.
    pub restarts: u32,
    /// The scheduler's message while it cannot place the pod
    /// (`PodScheduled=False`, reason `Unschedulable`).
    pub unschedulable: Option<String>,
    /// The CPU of its `postgres` container: asked, running, being resized.
    pub cpu: super::cpu::PodCpu,
}

/// Pod phase, with deletion folded in (a pod with a deletionTimestamp is
/// `Terminating` whatever its phase).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodPhase {
    #[default]
    Pending,
    Running,
    /// Every container has terminated and will not restart: no PostgreSQL runs in
    /// it, which the kubelet (not a timeout) says.
    Failed,
    Terminating,
}

/// What an instance manager's `/status` reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ManagerStatus {
    pub role: InstanceRole,
    /// `/readyz` would answer OK: accepts connections (and, on a primary, its
    /// roles and database are set up).
    pub ready: bool,
    pub timeline: u32,
    /// A replica's last WAL received and flushed; a primary's current WAL position.
    pub received_lsn: u64,
    /// A replica's last WAL replayed; a primary's current WAL position.
    pub replayed_lsn: u64,
    /// A replica's WAL receiver is streaming from the primary.
    pub streaming: bool,
    /// A changed parameter waits for a restart (`pg_settings.pending_restart`).
    pub pending_restart: bool,
    /// `(major, minor)` of the running server.
    pub server_version: Option<(u32, u32)>,
}

/// What the state machine may assume about an instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceState {
    /// No pod: only a PVC (a survivor). No PostgreSQL runs for it.
    NoPod,
    /// The pod is being deleted: wait for it to go.
    Terminating,
    /// The pod failed: the kubelet says no PostgreSQL runs in it.
    Failed,
    /// The pod exists but its manager did not answer: PostgreSQL may or may not
    /// run, in either role. Tusk never deletes, restarts or relabels such an
    /// instance, since a network partition looks exactly like this.
    Unknown,
    /// The manager answered.
    Known(ManagerStatus),
}

impl Instance {
    /// What may be assumed about this instance.
    pub fn state(&self) -> InstanceState {
        match &self.pod {
            None => InstanceState::NoPod,
            Some(pod) => match (pod.phase, pod.manager) {
                // A terminating pod may still run a primary; report what its
                // manager says so that it still counts as one.
                (_, Some(status)) => InstanceState::Known(status),
                (PodPhase::Terminating, None) => InstanceState::Terminating,
                (PodPhase::Failed, None) => InstanceState::Failed,
                (PodPhase::Pending | PodPhase::Running, None) => InstanceState::Unknown,
            },
        }
    }

    /// The manager's status, when it answered.
    pub fn status(&self) -> Option<ManagerStatus> {
        match self.state() {
            InstanceState::Known(status) => Some(status),
            _ => None,
        }
    }

    /// The pod is being deleted already.
    pub fn terminating(&self) -> bool {
        self.pod
            .as_ref()
            .is_some_and(|p| p.phase == PodPhase::Terminating)
    }

    /// The manager says this instance is a primary.
    pub fn reports_primary(&self) -> bool {
        self.status()
            .is_some_and(|s| s.role == InstanceRole::Primary)
    }

    /// This instance might be a primary that Tusk cannot see: the pod carries the
    /// primary label, its manager did not answer, and the kubelet has not said that
    /// it stopped (a terminating pod may still run during its grace period).
    pub fn may_be_primary(&self) -> bool {
        self.pod.as_ref().is_some_and(|p| {
            p.manager.is_none()
                && p.phase != PodPhase::Failed
                && p.role_label == Some(InstanceRole::Primary)
        })
    }

    /// A replica that is ready and streaming.
    pub fn healthy_replica(&self) -> bool {
        self.status()
            .is_some_and(|s| s.role == InstanceRole::Replica && s.ready && s.streaming)
    }
}
