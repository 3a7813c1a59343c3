//! The simulator: each action kind a spec change causes, carried out on the
//! observed state as the operator's shell and the instance managers would;
//! and whole simulations from a settled Database.

use super::*;
use crate::api::status::InstanceRole;
use crate::api::v1::StorageSpec;
use crate::contract::Bootstrap;
use crate::lifecycle::{DeleteReason, Routing};

const DB: &str = "pg";
const OLD: &str = "localhost/postgres:17.11";
const NEW: &str = "localhost/postgres:17.12";

fn spec(version: &str, instances: i32) -> DatabaseSpec {
    let mut db = crate::api::arbitrary::sample_database();
    db.spec.version = version.into();
    db.spec.instances = instances;
    db.spec.storage = StorageSpec {
        size: "1Gi".into(),
        storage_class_name: None,
        auto_grow: None,
    };
    db.spec
}

fn manager(role: InstanceRole) -> ManagerStatus {
    ManagerStatus {
        role,
        ready: true,
        timeline: 1,
        received_lsn: 100,
        replayed_lsn: 100,
        streaming: role == InstanceRole::Replica,
        pending_restart: false,
        server_version: Some((17, 11)),
    }
}

fn instance(role: InstanceRole, outdated: bool) -> Instance {
    Instance {
        pvc: Some(PvcState::Bound),
        pod: Some(Pod {
            phase: PodPhase::Running,
            role_label: Some(role),
            manager: Some(manager(role)),
            ready: true,
            image: OLD.into(),
            outdated,
            ..Pod::default()
        }),
        volumes: Vec::new(),
    }
}

/// A settled Database of `count` instances, pg-1 the primary, all on 17.11;
/// `outdated` when the spec changed since their pods were built.
fn settled(count: u32, outdated: bool, desired: &str) -> Observed {
    let mut observed = Observed {
        database: DB.into(),
        secrets: true,
        services: true,
        pod_disruption_budgets: true,
        lease_access: true,
        lease: LeaseState::Held {
            holder: "pg-1".into(),
            remaining: std::time::Duration::from_secs(10),
        },
        desired_image: desired.into(),
        ..Observed::default()
    };
    for serial in 1..=count {
        let role = if serial == 1 {
            InstanceRole::Primary
        } else {
            InstanceRole::Replica
        };
        observed.instances.insert(serial, instance(role, outdated));
    }
    observed.routing = Routing {
        rw: vec!["pg-1".into()],
        ro: (2..=count).map(|s| format!("pg-{s}")).collect(),
    };
    observed
}

fn status(count: u32) -> DatabaseStatus {
    DatabaseStatus {
        phase: Some(DatabasePhase::Ready),
        current_primary: Some("pg-1".into()),
        target_primary: Some("pg-1".into()),
        instances: (1..=count)
            .map(|s| InstanceStatus {
                name: format!("pg-{s}"),
                role: Some(if s == 1 {
                    InstanceRole::Primary
                } else {
                    InstanceRole::Replica
                }),
                ready: true,
                ..InstanceStatus::default()
            })
            .collect(),
        ..DatabaseStatus::default()
    }
}

fn world<'a>(spec: &'a DatabaseSpec, observed: &Observed) -> World<'a> {
    World::new(spec, Some(&status(3)), observed)
}

fn pod<'a>(world: &'a World, serial: u32) -> Option<&'a Pod> {
    world.observed.instances.get(&serial)?.pod.as_ref()
}

#[test]
fn a_created_pod_runs_ready_on_its_image_with_the_version_it_carries() {
    let spec = spec("17.12", 3);
    let mut world = world(&spec, &settled(3, true, NEW));
    world.observed.instances.get_mut(&2).expect("pg-2").pod = None;
    world
        .carry_out(&Action::CreatePod {
            serial: 2,
            bootstrap: Bootstrap::Clone,
            role: InstanceRole::Replica,
            image: NEW.into(),
        })
        .expect("simulated");
    let created = pod(&world, 2).expect("a pod");
    assert!(created.ready && !created.outdated && created.phase == PodPhase::Running);
    assert_eq!(created.image, NEW);
    let manager = created.manager.expect("its manager answers");
    assert_eq!(manager.role, InstanceRole::Replica);
    assert!(manager.streaming && manager.ready);
    assert_eq!(manager.server_version, Some((17, 12)));
    assert_eq!(manager.received_lsn, 100, "caught up with the primary");
    assert_eq!(world.observed.routing.ro, ["pg-2", "pg-3"]);
}

#[test]
fn a_deleted_or_rolled_pod_is_gone_and_a_stopped_primary_gives_up_its_lease() {
    let spec = spec("17.12", 3);
    let mut world = world(&spec, &settled(3, true, NEW));
    world
        .carry_out(&Action::RollPod {
            name: "pg-2".into(),
            evict: true,
            updated: 0,
            total: 3,
        })
        .expect("simulated");
    assert!(pod(&world, 2).is_none());
    assert!(
        world.observed.instances[&2].pvc.is_some(),
        "the volume stays"
    );
    assert!(matches!(world.observed.lease, LeaseState::Held { .. }));
    world
        .carry_out(&Action::DeletePod {
            name: "pg-1".into(),
            reason: DeleteReason::MajorUpgrade,
        })
        .expect("simulated");
    assert!(pod(&world, 1).is_none());
    assert_eq!(world.observed.lease, LeaseState::Released);
}

#[test]
fn a_switchover_swaps_the_roles_on_a_new_timeline() {
    let spec = spec("17.11", 3);
    let mut world = world(&spec, &settled(3, false, OLD));
    world
        .carry_out(&Action::Switchover {
            from: "pg-1".into(),
            to: "pg-2".into(),
            standbys: vec!["pg-1".into(), "pg-3".into()],
            min: 1,
        })
        .expect("simulated");
    let new = pod(&world, 2).and_then(|p| p.manager).expect("pg-2");
    let old = pod(&world, 1).and_then(|p| p.manager).expect("pg-1");
    assert_eq!((new.role, new.timeline), (InstanceRole::Primary, 2));
    assert_eq!((old.role, old.timeline), (InstanceRole::Replica, 2));
    assert!(old.streaming);
    assert_eq!(world.observed.lease.holder(), Some("pg-2"));
    assert_eq!(world.observed.sync.standbys, ["pg-1", "pg-3"]);
    // The labels have not moved yet: the -rw Service still routes to pg-1
    // until the planner relabels.
    world
        .carry_out(&Action::LabelRole {
            name: "pg-2".into(),
            role: InstanceRole::Primary,
        })
        .expect("simulated");
    world
        .carry_out(&Action::LabelRole {
            name: "pg-1".into(),
            role: InstanceRole::Replica,
        })
        .expect("simulated");
    assert_eq!(world.observed.routing.rw, ["pg-2"]);
}

#[test]
fn upgrade_jobs_succeed_under_the_names_the_planner_looks_for() {
    let spec = spec("17", 2);
    let mut world = world(&spec, &settled(2, false, "localhost/postgres:17"));
    for job in [UpgradeJob::Check, UpgradeJob::Upgrade] {
        world
            .carry_out(&Action::RunUpgradeJob {
                job,
                from: 15,
                to: 17,
                instance: "pg-1".into(),
                node: None,
                from_image: "localhost/postgres:15".into(),
                to_image: "localhost/postgres:17".into(),
            })
            .expect("simulated");
    }
    assert!(matches!(
        world.observed.jobs.get("pg-upgrade-check-15-17"),
        Some(JobState::Succeeded(_))
    ));
    assert!(matches!(
        world.observed.jobs.get("pg-upgrade-15-17"),
        Some(JobState::Succeeded(_))
    ));
    world
        .carry_out(&Action::DeleteJob {
            name: "pg-upgrade-15-17".into(),
        })
        .expect("simulated");
    assert!(!world.observed.jobs.contains_key("pg-upgrade-15-17"));
    world
        .carry_out(&Action::TakeBackup {
            name: "pg-upgrade-15-17-before".into(),
            purpose: lifecycle::BackupPurpose::Upgrade,
        })
        .expect("simulated");
    assert_eq!(
        world.observed.backups["pg-upgrade-15-17-before"].state,
        BackupState::Completed
    );
}

#[test]
fn parameters_needing_a_restart_are_pending_until_each_instance_restarts() {
    let spec = spec("17.11", 2);
    let mut observed = settled(2, false, OLD);
    observed.parameter_change = Change::Restart;
    let mut world = world(&spec, &observed);
    world
        .carry_out(&Action::Reload {
            name: "pg-1".into(),
        })
        .expect("simulated");
    assert_eq!(
        world.observed.parameter_change,
        Change::Restart,
        "pg-2 has not reloaded"
    );
    world
        .carry_out(&Action::Reload {
            name: "pg-2".into(),
        })
        .expect("simulated");
    assert_eq!(world.observed.parameter_change, Change::Nothing);
    assert!(
        pod(&world, 2)
            .and_then(|p| p.manager)
            .expect("pg-2")
            .pending_restart
    );
    world
        .carry_out(&Action::RestartInstance {
            name: "pg-2".into(),
        })
        .expect("simulated");
    assert!(
        !pod(&world, 2)
            .and_then(|p| p.manager)
            .expect("pg-2")
            .pending_restart
    );
}

#[test]
fn an_action_no_spec_change_causes_ends_the_simulation_named() {
    let spec = spec("17.11", 2);
    let mut world = world(&spec, &settled(2, false, OLD));
    let refused = world.carry_out(&Action::RunRetention {
        primary: "pg-1".into(),
        window_seconds: 60,
        last_backup: None,
    });
    assert_eq!(refused, Err("a retention pass".to_owned()));
}

#[test]
fn a_settled_database_under_its_own_spec_plans_nothing() {
    let spec = spec("17.11", 3);
    let simulation = simulate(&spec, Some(&status(3)), &settled(3, false, OLD));
    assert_eq!(simulation.end, End::Ready, "{simulation:?}");
    assert_eq!(simulation.passes.len(), 1);
    assert!(simulation.passes[0].actions.is_empty());
}

#[test]
fn a_rolling_update_replaces_each_instance_once_and_ends_ready() {
    let spec = spec("17.12", 3);
    let simulation = simulate(&spec, Some(&status(3)), &settled(3, true, NEW));
    assert_eq!(simulation.end, End::Ready, "{simulation:?}");
    let rolled: Vec<&str> = simulation
        .passes
        .iter()
        .flat_map(|p| p.actions.iter())
        .filter_map(|a| match a {
            Action::RollPod { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(rolled, ["pg-2", "pg-3", "pg-1"]);
    let switchovers = simulation
        .passes
        .iter()
        .flat_map(|p| p.actions.iter())
        .filter(|a| matches!(a, Action::Switchover { .. }))
        .count();
    assert_eq!(switchovers, 1);
}

#[test]
fn a_scale_down_deletes_the_last_instance() {
    let spec = spec("17.11", 2);
    let simulation = simulate(&spec, Some(&status(3)), &settled(3, false, OLD));
    assert_eq!(simulation.end, End::Ready, "{simulation:?}");
    let actions: Vec<&Action> = simulation
        .passes
        .iter()
        .flat_map(|p| p.actions.iter())
        .collect();
    assert!(
        actions.iter().any(|a| matches!(a, Action::DeletePod { name, reason: DeleteReason::ScaleDown } if name == "pg-3")),
        "{actions:?}"
    );
}
