//! What the operator would do, pass after pass, if every action it takes
//! succeeded at once: the planner ([`lifecycle::plan`], the operator's own)
//! decides a pass, each of its actions is carried out on the [`Observed`]
//! state as if Kubernetes and the instance managers had done it, the status
//! the operator would write is taken as the previous one, and the planner
//! decides again, until a pass has nothing left to do.
//!
//! Pure: no client, no clock. The fidelity is where a spec change leads
//! (pods created and deleted, rolling updates, switchovers, upgrade Jobs and
//! backups, parameters, CPU, volumes, Services, budgets); an action no spec
//! change causes (a TLS step, retention) ends the simulation with it named
//! ([`End::NotSimulated`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::status::{DatabasePhase, DatabaseStatus, InstanceRole, InstanceStatus};
use crate::api::v1::DatabaseSpec;
use crate::api::validate::PgVersion;
use crate::contract::UpgradeJob;
use crate::controller::conditions;
use crate::lifecycle::{
    self, Action, BackupState, BackupView, Instance, JobState, LeaseState, ManagerStatus,
    MigrationJob, Observed, Plan, Pod, PodPhase, PvcState, Verdict,
};
use crate::postgres::params::Change;
use crate::resources::{migration_job_name, upgrade_job_name};

/// How many passes a simulation runs at most.
pub const PASS_LIMIT: usize = 50;

/// One pass of the operator: what it decided and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Pass {
    pub phase: DatabasePhase,
    pub actions: Vec<Action>,
    pub verdicts: Vec<Verdict>,
}

/// Why the simulation stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// A pass with nothing to do and the Database Ready: the spec is in effect.
    Ready,
    /// A pass with nothing to do and not Ready: what it waits for (or what
    /// is refused) is in that pass's verdicts.
    Waiting(DatabasePhase),
    /// An action this simulator does not carry out: what comes after it is
    /// not known.
    NotSimulated(String),
    /// The same actions again and nothing changed: they would be retried
    /// for ever.
    Stalled,
    /// [`PASS_LIMIT`] passes and still not done.
    Limit,
}

/// Every pass, in order, and how it ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulation {
    pub passes: Vec<Pass>,
    pub end: End,
}

/// Runs the planner from `status` and `observed` under `spec` until nothing
/// is left to do (or [`PASS_LIMIT`]).
pub fn simulate(
    spec: &DatabaseSpec,
    status: Option<&DatabaseStatus>,
    observed: &Observed,
) -> Simulation {
    let mut world = World::new(spec, status, observed);
    let mut passes: Vec<Pass> = Vec::new();
    for _ in 0..PASS_LIMIT {
        let decided = lifecycle::plan(spec, world.status.as_ref(), &world.observed);
        let pass = Pass {
            phase: decided.phase,
            actions: decided.actions.clone(),
            verdicts: decided.verdicts.clone(),
        };
        if decided.actions.is_empty() {
            let end = if decided.phase == DatabasePhase::Ready {
                End::Ready
            } else {
                End::Waiting(decided.phase)
            };
            passes.push(pass);
            return Simulation { passes, end };
        }
        let before = (world.observed.clone(), world.status.clone());
        for action in &decided.actions {
            if let Err(kind) = world.carry_out(action) {
                passes.push(pass);
                return Simulation {
                    passes,
                    end: End::NotSimulated(kind),
                };
            }
        }
        world.record(&decided);
        let unchanged = before == (world.observed.clone(), world.status.clone());
        let repeated = passes.last().is_some_and(|p| p.actions == pass.actions);
        passes.push(pass);
        if unchanged && repeated {
            return Simulation {
                passes,
                end: End::Stalled,
            };
        }
    }
    Simulation {
        passes,
        end: End::Limit,
    }
}

/// The state the simulated passes change.
struct World<'a> {
    spec: &'a DatabaseSpec,
    status: Option<DatabaseStatus>,
    observed: Observed,
    /// The parameter change found at the start, until every instance has
    /// the spec's parameters.
    parameters: Change,
    /// Instances that run the spec's parameters (reloaded, or created in
    /// the simulation).
    configured: BTreeSet<u32>,
    /// What each image runs, `(major, minor)`.
    versions: BTreeMap<String, (u32, u32)>,
}

impl<'a> World<'a> {
    fn new(spec: &'a DatabaseSpec, status: Option<&DatabaseStatus>, observed: &Observed) -> Self {
        let mut versions: BTreeMap<String, (u32, u32)> = observed
            .instances
            .values()
            .filter_map(|i| {
                let pod = i.pod.as_ref()?;
                Some((pod.image.clone(), pod.manager?.server_version?))
            })
            .collect();
        if let Ok(wanted) = spec.version.parse::<PgVersion>() {
            // A version without a minor runs the minor the image has; the
            // instances' when they run that major.
            let minor = wanted.minor.unwrap_or_else(|| {
                versions
                    .values()
                    .find(|(major, _)| *major == wanted.major)
                    .map_or(0, |(_, minor)| *minor)
            });
            versions.insert(observed.desired_image.clone(), (wanted.major, minor));
        }
        Self {
            spec,
            status: status.cloned(),
            parameters: observed.parameter_change,
            configured: BTreeSet::new(),
            observed: observed.clone(),
            versions,
        }
    }

    /// Carries `action` out as if it succeeded at once; the kind of action
    /// when this simulator does not.
    fn carry_out(&mut self, action: &Action) -> Result<(), String> {
        let observed = &mut self.observed;
        match action {
            Action::EnsureSecrets => observed.secrets = true,
            Action::SyncPassword { credential, .. } => {
                observed.credentials_to_sync.retain(|c| c != credential);
            }
            Action::EnsureServices => observed.services = true,
            Action::EnsureLeaseAccess => {
                observed.lease_access = true;
            }
            Action::EnsurePodDisruptionBudgets => observed.pod_disruption_budgets = true,
            Action::DeletePodDisruptionBudget { name } => {
                observed.surplus_budgets.retain(|b| b != name);
            }
            Action::ApplyExposure { services } => {
                for name in services {
                    observed.exposure.retain(|s| &s.name != name);
                    observed.exposure.push(lifecycle::ExposedService {
                        name: name.clone(),
                        load_balancer_class: None,
                        as_built: true,
                        terminating: false,
                    });
                }
            }
            Action::DeleteExposure { name, .. } => observed.exposure.retain(|s| &s.name != name),
            Action::SetMembers { name, members } => {
                if let Some(pod) = self.pod_mut(name) {
                    pod.ha.get_or_insert_with(Default::default).members = members.clone();
                }
            }
            Action::Promote {
                name,
                standbys,
                min,
                ..
            } => self.promote(name, None, standbys, *min),
            Action::Switchover {
                from,
                to,
                standbys,
                min,
            } => self.promote(to, Some(from), standbys, *min),
            Action::CreatePvc { serial } => {
                let instance = self.observed.instances.entry(*serial).or_default();
                instance.pvc = Some(PvcState::Bound);
            }
            Action::CreatePod {
                serial,
                role,
                image,
                ..
            } => self.create_pod(*serial, *role, image),
            Action::DeletePod { name, .. } | Action::RollPod { name, .. } => {
                if let Some(serial) = self.observed.serial_of(name)
                    && let Some(instance) = self.observed.instances.get_mut(&serial)
                {
                    instance.pod = None;
                    self.configured.remove(&serial);
                }
                // A manager stopped cleanly gives its lease up.
                if self.observed.lease.holder() == Some(name.as_str()) {
                    self.observed.lease = LeaseState::Released;
                }
            }
            Action::DeletePvc { name } => {
                if let Some(serial) = self.observed.serial_of(name) {
                    self.observed.instances.remove(&serial);
                }
            }
            Action::GrowVolume { pvc, to, .. } => {
                for volume in self
                    .observed
                    .instances
                    .values_mut()
                    .flat_map(|i| i.volumes.iter_mut())
                    .filter(|v| &v.pvc == pvc)
                {
                    volume.requested = *to;
                    volume.capacity = Some(*to);
                    if let Some(usage) = volume.usage.as_mut() {
                        usage.total_bytes = *to;
                    }
                }
            }
            Action::LabelRole { name, role } => {
                if let Some(pod) = self.pod_mut(name) {
                    pod.role_label = Some(*role);
                }
                self.route();
            }
            Action::ConfigureSync { standbys, min, .. } => {
                observed.sync = lifecycle::SyncStandbys {
                    standbys: standbys.clone(),
                    min: *min,
                };
            }
            Action::Reload { name } => {
                let restart = self.parameters == Change::Restart;
                if let Some(serial) = self.observed.serial_of(name) {
                    self.configured.insert(serial);
                }
                if let Some(manager) = self.manager_mut(name) {
                    manager.pending_restart = restart;
                }
                self.parameters_settle();
            }
            Action::RestartInstance { name } => {
                if let Some(manager) = self.manager_mut(name) {
                    manager.pending_restart = false;
                }
            }
            Action::ResizeCpu { name, .. } => {
                let want = lifecycle::cpu::wanted(self.spec).map(|(cpu, _, _)| cpu);
                if let (Some(pod), Some(want)) = (self.pod_mut(name), want) {
                    pod.cpu.spec = want;
                    pod.cpu.running = Some(want);
                }
            }
            Action::RunUpgradeJob { job, from, to, .. } => {
                let name = upgrade_job_name(&self.observed.database, *job, *from, *to);
                let report = match job {
                    UpgradeJob::Check => format!("pg_upgrade --check from {from} to {to} passed"),
                    UpgradeJob::Upgrade => format!("pg_upgrade --link from {from} to {to} done"),
                    UpgradeJob::Rollback => format!("the data directory of {from} is back"),
                };
                self.observed.jobs.insert(name, JobState::Succeeded(report));
            }
            Action::DeleteJob { name } => {
                observed.jobs.remove(name);
                observed.migration_jobs.retain(|j| &j.name != name);
            }
            Action::TakeBackup { name, .. } => {
                observed.backups.insert(
                    name.clone(),
                    BackupView {
                        completed_at: Some(observed.now),
                        ..BackupView::from(BackupState::Completed)
                    },
                );
            }
            Action::RunMigration { version } => {
                let name = migration_job_name(&observed.database, version);
                let state = JobState::Succeeded(String::new());
                observed.jobs.insert(name.clone(), state.clone());
                observed.migration_jobs.push(MigrationJob {
                    name,
                    version: version.clone(),
                    state,
                    deleting: false,
                });
            }
            Action::RecordTargetPrimary { name } => {
                self.status
                    .get_or_insert_with(Default::default)
                    .target_primary = Some(name.clone());
            }
            Action::DropSlot { slot, .. } => observed.inactive_slots.retain(|s| s != slot),
            Action::RestoreInheritedMetadata { .. } => {
                observed.inherited_drift = Default::default();
            }
            Action::Tls(_) => return Err("a TLS step".to_owned()),
            Action::RunRetention { .. } => return Err("a retention pass".to_owned()),
            // Only planned when the published endpoints are observed, which
            // the plan does not do.
            Action::ApplyExternalSecret | Action::DeleteExternalSecret => {}
        }
        Ok(())
    }

    fn serial(&self, name: &str) -> Option<u32> {
        self.observed.serial_of(name)
    }

    fn pod_mut(&mut self, name: &str) -> Option<&mut Pod> {
        let serial = self.serial(name)?;
        self.observed.instances.get_mut(&serial)?.pod.as_mut()
    }

    fn manager_mut(&mut self, name: &str) -> Option<&mut ManagerStatus> {
        self.pod_mut(name)?.manager.as_mut()
    }

    /// The WAL position and timeline of the primary, or the furthest
    /// instance when none serves.
    fn wal(&self) -> (u32, u64) {
        self.observed
            .instances
            .values()
            .filter_map(Instance::status)
            .map(|s| (s.timeline, s.received_lsn))
            .max()
            .unwrap_or((1, 0))
    }

    /// `name` becomes the primary (from `from`, which steps down to a
    /// streaming replica in a switchover), on a new timeline, holding the
    /// lease, with the synchronous standbys it was promoted with.
    fn promote(&mut self, name: &str, from: Option<&String>, standbys: &[String], min: i32) {
        let (timeline, lsn) = self.wal();
        if let Some(manager) = self.manager_mut(name) {
            manager.role = InstanceRole::Primary;
            manager.streaming = false;
            manager.timeline = timeline + 1;
        }
        if let Some(old) = from
            && let Some(manager) = self.manager_mut(old)
        {
            manager.role = InstanceRole::Replica;
            manager.streaming = true;
            manager.timeline = timeline + 1;
            manager.received_lsn = lsn;
            manager.replayed_lsn = lsn;
        }
        self.observed.sync = lifecycle::SyncStandbys {
            standbys: standbys.to_vec(),
            min,
        };
        self.hold_lease(name);
    }

    fn hold_lease(&mut self, name: &str) {
        if self.observed.lease != LeaseState::Unobserved {
            self.observed.lease = LeaseState::Held {
                holder: name.to_owned(),
                remaining: std::time::Duration::from_secs(15),
            };
        }
    }

    /// A pod that started and whose manager answers: ready, a primary on
    /// the timeline and WAL the others are at, or a replica streaming them.
    fn create_pod(&mut self, serial: u32, role: InstanceRole, image: &str) {
        let (timeline, lsn) = self.wal();
        let server_version = self.versions.get(image).copied();
        let cpu = lifecycle::cpu::wanted(self.spec).map(|(cpu, _, _)| cpu);
        let now = self.observed.now;
        let instance = self.observed.instances.entry(serial).or_default();
        instance.pvc.get_or_insert(PvcState::Bound);
        let node = instance.pod.as_ref().and_then(|p| p.node.clone());
        let mut pod = Pod {
            phase: PodPhase::Running,
            role_label: Some(role),
            manager: Some(ManagerStatus {
                role,
                ready: true,
                timeline,
                received_lsn: lsn,
                replayed_lsn: lsn,
                streaming: role == InstanceRole::Replica,
                pending_restart: false,
                server_version,
            }),
            ready: true,
            image: image.to_owned(),
            node,
            created: Some(now),
            ..Pod::default()
        };
        if let Some(cpu) = cpu {
            pod.cpu.spec = cpu;
            pod.cpu.running = Some(cpu);
        }
        instance.pod = Some(pod);
        self.configured.insert(serial);
        self.parameters_settle();
        if role == InstanceRole::Primary {
            let name = self.observed.name(serial);
            self.hold_lease(&name);
        }
        self.route();
    }

    /// The parameter change is over once every instance with a pod runs
    /// the spec's parameters.
    fn parameters_settle(&mut self) {
        let all = self
            .observed
            .instances
            .iter()
            .filter(|(_, i)| i.pod.is_some())
            .all(|(serial, _)| self.configured.contains(serial));
        self.observed.parameter_change = if all {
            Change::Nothing
        } else {
            self.parameters
        };
    }

    /// The Services send traffic where the role labels say, to ready pods.
    fn route(&mut self) {
        let behind = |role: InstanceRole| -> Vec<String> {
            self.observed
                .instances
                .iter()
                .filter(|(_, i)| {
                    i.pod
                        .as_ref()
                        .is_some_and(|p| p.ready && p.role_label == Some(role))
                })
                .map(|(serial, _)| self.observed.name(*serial))
                .collect()
        };
        let rw = behind(InstanceRole::Primary);
        let ro = behind(InstanceRole::Replica);
        self.observed.routing = lifecycle::Routing { rw, ro };
    }

    /// The status the operator writes after the pass, as the next pass
    /// reads it.
    fn record(&mut self, decided: &Plan) {
        self.route();
        let previous = self.status.take().unwrap_or_default();
        let at = Time(self.observed.now);
        let instances = self.instance_statuses(&previous);
        self.status = Some(DatabaseStatus {
            phase: Some(decided.phase),
            conditions: conditions::merge(
                &previous.conditions,
                &decided.conditions,
                previous.observed_generation,
                &at,
            ),
            current_primary: decided
                .current_primary
                .clone()
                .or(previous.current_primary.clone()),
            target_primary: decided
                .target_primary
                .clone()
                .or(previous.target_primary.clone()),
            upgrade: decided.upgrade.clone(),
            last_backup: decided.last_backup.clone().or(previous.last_backup.clone()),
            migrations: decided.migrations.clone().or(previous.migrations.clone()),
            instances,
            ..previous
        });
    }

    fn instance_statuses(&self, previous: &DatabaseStatus) -> Vec<InstanceStatus> {
        self.observed
            .instances
            .iter()
            .filter(|(_, i)| i.pod.is_some())
            .map(|(serial, i)| {
                let name = self.observed.name(*serial);
                let before = previous.instances.iter().find(|s| s.name == name);
                let manager = i.status();
                InstanceStatus {
                    role: manager.map(|m| m.role),
                    ready: manager.is_some_and(|m| m.ready),
                    system_identifier: before.and_then(|s| s.system_identifier.clone()),
                    image: i.pod.as_ref().map(|p| p.image.clone()),
                    version: manager
                        .and_then(|m| m.server_version)
                        .map(|(major, minor)| format!("{major}.{minor}")),
                    timeline: manager.map(|m| m.timeline),
                    name,
                    ..InstanceStatus::default()
                }
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "simulate_tests.rs"]
mod tests;
