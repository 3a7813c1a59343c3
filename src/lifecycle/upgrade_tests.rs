//! The major upgrade as a state machine: rows for each step, and walks
//! through every way it can go (a failed check, a failed link, the spec set
//! back at any pass) with the properties that must hold on each pass.

use std::time::Duration;

use super::tests::{async_spec, condition, manager, routed, status};
use super::upgrade::job_name_of;
use super::*;
use crate::api::status::{
    DatabasePhase as P, DatabaseStatus, InstanceRole, UpgradeStatus, UpgradeStep,
};
use crate::lifecycle::action::UpgradeJob;
use crate::lifecycle::verdict::READY;

const OLD: &str = "localhost/postgres:15";
const NEW: &str = "localhost/postgres:17";

fn job(step: UpgradeJob) -> String {
    job_name_of("orders", step, 15, 17)
}

fn on(major: u32, role: InstanceRole, ready: bool) -> Instance {
    let mut status = manager(
        role,
        ready,
        if role == InstanceRole::Primary {
            100
        } else {
            90
        },
    );
    status.server_version = Some((major, 1));
    Instance {
        pvc: Some(PvcState::Bound),
        pod: Some(Pod {
            phase: PodPhase::Running,
            role_label: Some(role),
            ready,
            manager: Some(status),
            image: if major == 15 { OLD } else { NEW }.into(),
            outdated: major == 15,
            node: Some("node-a".into()),
            ..Pod::default()
        }),
        ..Instance::default()
    }
}

fn volume() -> Instance {
    Instance {
        pvc: Some(PvcState::Bound),
        pod: None,
        ..Instance::default()
    }
}

/// Three instances on 15 asking for 17.
fn on_fifteen() -> Observed {
    let mut observed = routed(super::tests::observed(vec![
        (1, on(15, InstanceRole::Primary, true)),
        (2, on(15, InstanceRole::Replica, true)),
        (3, on(15, InstanceRole::Replica, true)),
    ]));
    observed.desired_image = NEW.into();
    observed.lease = LeaseState::Held {
        holder: "orders-1".into(),
        remaining: Duration::from_secs(10),
    };
    observed
}

fn stopped() -> Observed {
    let mut observed = on_fifteen();
    for instance in observed.instances.values_mut() {
        instance.pod = None;
    }
    observed.routing = Routing::default();
    // A clean stop releases the lease.
    observed.lease = LeaseState::Released;
    observed
}

fn at(step: UpgradeStep) -> Option<DatabaseStatus> {
    let mut previous = status(P::Upgrading, Some(1))?;
    previous.upgrade = Some(UpgradeStatus {
        from: 15,
        to: 17,
        from_image: OLD.into(),
        to_image: NEW.into(),
        instance: "orders-1".into(),
        node: Some("node-a".into()),
        step,
        message: None,
    });
    Some(previous)
}

fn spec17() -> crate::api::v1::DatabaseSpec {
    let mut spec = async_spec(3);
    spec.version = "17".into();
    spec
}

fn spec15() -> crate::api::v1::DatabaseSpec {
    let mut spec = async_spec(3);
    spec.version = "15".into();
    spec
}

fn step_of(decided: &Plan) -> Option<UpgradeStep> {
    decided.upgrade.as_ref().map(|u| u.step)
}

fn upgrade_job(decided: &Plan) -> Option<UpgradeJob> {
    decided.actions.iter().find_map(|a| match a {
        Action::RunUpgradeJob { job, .. } => Some(*job),
        _ => None,
    })
}

fn created_images(decided: &Plan) -> Vec<String> {
    decided
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod { image, .. } => Some(image.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_new_major_starts_with_a_check_while_the_old_major_serves() {
    let decided = plan(&spec17(), status(P::Ready, Some(1)).as_ref(), &on_fifteen());
    assert_eq!(step_of(&decided), Some(UpgradeStep::Checking));
    assert_eq!(
        decided.actions,
        [Action::RunUpgradeJob {
            job: UpgradeJob::Check,
            from: 15,
            to: 17,
            instance: "orders-1".into(),
            node: Some("node-a".into()),
            from_image: OLD.into(),
            to_image: NEW.into(),
        }]
    );
    assert_eq!(decided.phase, P::Upgrading);
    assert!(!condition(&decided, READY).status);
}

#[test]
fn a_failed_check_changes_nothing_and_quotes_pg_upgrade() {
    let mut observed = on_fifteen();
    observed.jobs.insert(
        job(UpgradeJob::Check),
        JobState::Failed(
            "Your installation contains one of the reg* data types in user tables".into(),
        ),
    );
    let decided = plan(&spec17(), at(UpgradeStep::Checking).as_ref(), &observed);
    assert_eq!(step_of(&decided), Some(UpgradeStep::CheckFailed));
    assert_eq!(decided.actions, []);
    let ready = condition(&decided, READY);
    assert_eq!(ready.reason, "UpgradeCheckFailed");
    assert!(
        ready.message.starts_with("spec.version: "),
        "{}",
        ready.message
    );
    assert!(
        ready.message.contains("reg* data types"),
        "{}",
        ready.message
    );
    assert!(
        ready.message.contains(&job(UpgradeJob::Check)),
        "{}",
        ready.message
    );

    // It stays so (no second check), and a lost replica comes back on 15.
    observed.instances.insert(3, volume());
    let previous = decided_status(&decided);
    let again = plan(&spec17(), previous.as_ref(), &routed(observed.clone()));
    assert_eq!(step_of(&again), Some(UpgradeStep::CheckFailed));
    assert_eq!(upgrade_job(&again), None);
    assert_eq!(created_images(&again), [OLD]);

    // Deleting the Job checks again.
    observed.jobs.clear();
    let retry = plan(&spec17(), previous.as_ref(), &routed(on_fifteen()));
    assert_eq!(upgrade_job(&retry), Some(UpgradeJob::Check));
}

fn decided_status(decided: &Plan) -> Option<DatabaseStatus> {
    let mut previous = status(decided.phase, Some(1))?;
    previous.upgrade = decided.upgrade.clone();
    Some(previous)
}

#[test]
fn a_passed_check_takes_a_backup_first_when_a_store_exists() {
    let mut observed = on_fifteen();
    observed.backups_possible = true;
    observed
        .jobs
        .insert(job(UpgradeJob::Check), JobState::Succeeded("ok".into()));
    let decided = plan(&spec17(), at(UpgradeStep::Checking).as_ref(), &observed);
    assert_eq!(step_of(&decided), Some(UpgradeStep::BackingUp));
    assert_eq!(
        decided.actions,
        [Action::TakeBackup {
            name: crate::resources::names::upgrade_backup("orders", 15, 17),
            purpose: crate::lifecycle::BackupPurpose::Upgrade,
        }]
    );
}

#[test]
fn stopping_deletes_every_pod_and_nothing_restarts_them() {
    let mut observed = on_fifteen();
    observed
        .jobs
        .insert(job(UpgradeJob::Check), JobState::Succeeded("ok".into()));
    let decided = plan(&spec17(), at(UpgradeStep::Checking).as_ref(), &observed);
    assert_eq!(step_of(&decided), Some(UpgradeStep::Stopping));
    let deleted: Vec<&str> = decided
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePod { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, ["orders-1", "orders-2", "orders-3"]);
    assert_eq!(decided.phase, P::Upgrading);

    // While the link runs, volumes without pods stay so: no failover, no restart.
    let mut observed = stopped();
    observed
        .jobs
        .insert(job(UpgradeJob::Upgrade), JobState::Running);
    let decided = plan(&spec17(), at(UpgradeStep::Upgrading).as_ref(), &observed);
    assert_eq!(decided.actions, []);
    assert_eq!(decided.phase, P::Upgrading);
}

#[test]
fn the_upgraded_primary_starts_on_the_new_major_alone_then_done() {
    let mut observed = stopped();
    observed
        .jobs
        .insert(job(UpgradeJob::Upgrade), JobState::Succeeded("ok".into()));
    let decided = plan(&spec17(), at(UpgradeStep::Upgrading).as_ref(), &observed);
    assert_eq!(step_of(&decided), Some(UpgradeStep::Starting));
    let primary: Vec<(u32, &str)> = decided
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod {
                serial,
                image,
                role: InstanceRole::Primary,
                ..
            } => Some((*serial, image.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(primary, [(1, NEW)]);

    let mut observed = on_fifteen();
    observed
        .instances
        .insert(1, on(17, InstanceRole::Primary, true));
    observed.instances.insert(2, volume());
    observed.instances.insert(3, volume());
    let mut observed = routed(observed);
    let decided = plan(&spec17(), at(UpgradeStep::Starting).as_ref(), &observed);
    assert_eq!(step_of(&decided), Some(UpgradeStep::Done));
    assert_eq!(created_images(&decided), [NEW, NEW]);
    assert!(
        !decided
            .actions
            .iter()
            .any(|a| matches!(a, Action::TakeBackup { .. }))
    );
    // With a store, the upgraded system's first base backup is taken at once.
    observed.backups_possible = true;
    let decided = plan(&spec17(), at(UpgradeStep::Starting).as_ref(), &observed);
    assert!(
        decided.actions.contains(&Action::TakeBackup {
            name: "orders-upgrade-15-17-after".into(),
            purpose: crate::lifecycle::BackupPurpose::Upgrade,
        }),
        "{:?}",
        decided.actions
    );
}

#[test]
fn a_failed_link_puts_the_old_data_back_and_says_so() {
    let mut observed = stopped();
    observed.jobs.insert(
        job(UpgradeJob::Upgrade),
        JobState::Failed("initdb: boom".into()),
    );
    let decided = plan(&spec17(), at(UpgradeStep::Upgrading).as_ref(), &observed);
    assert_eq!(step_of(&decided), Some(UpgradeStep::RollingBack));
    assert_eq!(upgrade_job(&decided), Some(UpgradeJob::Rollback));
    assert_eq!(created_images(&decided), Vec::<String>::new());

    observed
        .jobs
        .insert(job(UpgradeJob::Rollback), JobState::Succeeded("ok".into()));
    let decided = plan(&spec17(), decided_status(&decided).as_ref(), &observed);
    assert_eq!(step_of(&decided), Some(UpgradeStep::RolledBack));
    let ready = condition(&decided, READY);
    assert_eq!(ready.reason, "UpgradeRolledBack");
    assert!(ready.message.contains("initdb: boom"), "{}", ready.message);
    // The old major comes back on its own data.
    assert!(
        created_images(&decided).contains(&OLD.to_owned()),
        "{:?}",
        decided.actions
    );
}

#[test]
fn setting_the_version_back_before_the_new_server_answered_undoes_it() {
    // Starting: the new primary's pod runs but has not answered.
    let mut observed = stopped();
    observed.instances.insert(
        1,
        Instance {
            pvc: Some(PvcState::Bound),
            pod: Some(Pod {
                phase: PodPhase::Running,
                image: NEW.into(),
                ..Pod::default()
            }),
            ..Instance::default()
        },
    );
    observed
        .jobs
        .insert(job(UpgradeJob::Upgrade), JobState::Succeeded("ok".into()));
    let decided = plan(&spec15(), at(UpgradeStep::Starting).as_ref(), &observed);
    assert!(
        decided.actions.contains(&Action::DeletePod {
            name: "orders-1".into(),
            reason: DeleteReason::MajorUpgrade
        }),
        "{:?}",
        decided.actions
    );
    let decided = plan(&spec15(), at(UpgradeStep::Starting).as_ref(), &stopped());
    assert_eq!(step_of(&decided), Some(UpgradeStep::RollingBack));
    assert_eq!(upgrade_job(&decided), Some(UpgradeJob::Rollback));

    // Before anything stopped, going back is simply the end of it.
    let decided = plan(&spec15(), at(UpgradeStep::Checking).as_ref(), &on_fifteen());
    assert_eq!(step_of(&decided), Some(UpgradeStep::RolledBack));
    assert_eq!(upgrade_job(&decided), None);
}

/// How a walk ends the upgrade's Jobs.
#[derive(Clone, Copy, Debug)]
enum Fail {
    Nothing,
    Check,
    Link,
}

/// The cluster's side of a walk: Jobs finish (as `fail` says) on the pass
/// after they were created, deleted pods go, created pods come up on the
/// major of their image, and the Link Job changes the primary's data.
struct World {
    observed: Observed,
    data_major: u32,
    fail: Fail,
}

impl World {
    fn apply(&mut self, actions: &[Action]) {
        for action in actions {
            match action {
                Action::RunUpgradeJob { job: step, .. } => {
                    let ok = !matches!(
                        (self.fail, step),
                        (Fail::Check, UpgradeJob::Check) | (Fail::Link, UpgradeJob::Upgrade)
                    );
                    if ok && *step == UpgradeJob::Upgrade {
                        self.data_major = 17;
                    }
                    if ok && *step == UpgradeJob::Rollback {
                        self.data_major = 15;
                    }
                    let state = if ok {
                        JobState::Succeeded("ok".into())
                    } else {
                        JobState::Failed("it failed".into())
                    };
                    self.observed.jobs.insert(job(*step), state);
                }
                Action::DeleteJob { name } => {
                    self.observed.jobs.remove(name);
                }
                Action::DeletePod { name, .. } | Action::RollPod { name, .. } => {
                    let serial = self.observed.serial_of(name).expect("serial");
                    if self.observed.instances[&serial].reports_primary() {
                        self.observed.lease = LeaseState::Released;
                    }
                    self.observed.instances.insert(serial, volume());
                }
                Action::CreatePod {
                    serial,
                    image,
                    role,
                    ..
                } => {
                    let major = if image == NEW { 17 } else { 15 };
                    let runs = if *role == InstanceRole::Primary {
                        // A server only starts on data of its own major.
                        if major != self.data_major {
                            continue;
                        }
                        major
                    } else {
                        major
                    };
                    self.observed
                        .instances
                        .insert(*serial, on(runs, *role, true));
                    if *role == InstanceRole::Primary {
                        self.observed.lease = LeaseState::Held {
                            holder: self.observed.name(*serial),
                            remaining: Duration::from_secs(10),
                        };
                    }
                }
                _ => {}
            }
        }
        self.observed = routed(self.observed.clone());
    }

    fn primaries(&self) -> usize {
        self.observed
            .instances
            .values()
            .filter(|i| i.reports_primary())
            .count()
    }
}

#[test]
fn every_walk_keeps_one_primary_at_most_and_never_undoes_after_the_new_server_answered() {
    for fail in [Fail::Nothing, Fail::Check, Fail::Link] {
        for back_at in [None, Some(0), Some(1), Some(2), Some(3), Some(4), Some(5)] {
            let mut world = World {
                observed: on_fifteen(),
                data_major: 15,
                fail,
            };
            let mut previous = status(P::Ready, Some(1));
            let mut answered = false;
            let mut steps = Vec::new();
            for pass in 0..30 {
                let spec = if back_at.is_some_and(|b| pass >= b) {
                    spec15()
                } else {
                    spec17()
                };
                // What a fresh build would give: the spec's image.
                world.observed.desired_image = if spec.version == "17" { NEW } else { OLD }.into();
                let desired = world.observed.desired_image.clone();
                for pod in world
                    .observed
                    .instances
                    .values_mut()
                    .filter_map(|i| i.pod.as_mut())
                {
                    pod.outdated = pod.image != desired;
                }
                let decided = plan(&spec, previous.as_ref(), &world.observed);
                let label = format!(
                    "{fail:?}, back at {back_at:?}, pass {pass}: {:?}",
                    decided.actions
                );
                assert!(
                    !decided
                        .actions
                        .iter()
                        .any(|a| matches!(a, Action::DeletePvc { .. })),
                    "no data is ever deleted: {label}"
                );
                if answered {
                    assert_ne!(upgrade_job(&decided), Some(UpgradeJob::Rollback), "{label}");
                }
                if steps.last() == Some(&UpgradeStep::CheckFailed) {
                    assert!(
                        !decided.actions.iter().any(|a| matches!(
                            a,
                            Action::DeletePod { .. }
                                | Action::RollPod { .. }
                                | Action::RunUpgradeJob { .. }
                        )),
                        "a failed check changes nothing: {label}"
                    );
                }
                world.apply(&decided.actions);
                assert!(world.primaries() <= 1, "{label}");
                answered |= world.observed.instances.values().any(|i| {
                    i.reports_primary()
                        && i.status()
                            .and_then(|s| s.server_version)
                            .is_some_and(|(m, _)| m == 17)
                });
                if let Some(step) = step_of(&decided)
                    && steps.last() != Some(&step)
                {
                    steps.push(step);
                }
                let mut next = status(decided.phase, Some(1)).expect("status");
                next.upgrade = decided.upgrade.clone();
                previous = Some(next);
            }
            let last = steps.last().copied();
            let running: Vec<u32> = world
                .observed
                .instances
                .values()
                .filter_map(|i| i.status()?.server_version.map(|(m, _)| m))
                .collect();
            match (fail, back_at) {
                (Fail::Nothing, None) => {
                    assert_eq!(last, Some(UpgradeStep::Done), "{steps:?}");
                    assert_eq!(running, [17, 17, 17], "{steps:?}");
                }
                (Fail::Check, None) => {
                    assert_eq!(last, Some(UpgradeStep::CheckFailed), "{steps:?}");
                    assert_eq!(running, [15, 15, 15], "{steps:?}");
                }
                (Fail::Link, None) => {
                    assert_eq!(last, Some(UpgradeStep::RolledBack), "{steps:?}");
                    assert_eq!(running, [15, 15, 15], "{steps:?}");
                }
                (_, Some(_)) => {
                    // Set back: 15 again everywhere, unless 17 had answered
                    // first (then the downgrade is refused and 17 stays).
                    assert!(
                        running == [15, 15, 15]
                            || last == Some(UpgradeStep::Done) && running == [17, 17, 17],
                        "{fail:?} back at {back_at:?}: {steps:?} running {running:?}"
                    );
                }
            }
        }
    }
}
