//! Golden files of `plan` (`testdata/plan_*.yaml` in, `plan_*.txt` out;
//! `TUSK_BLESS_FIXTURES=1` writes the outputs anew): the Database as stored
//! and the new spec (`new:` a manifest, or `patch:` a merge patch), its
//! objects made by the operator's own builders as a settled Database has
//! them, then validation, the reduction, the simulation and the rendering.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ObjectReference, PodCondition, PodStatus};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use super::*;
use crate::contract::Bootstrap;
use crate::controller::database::observe::PASSWORD_SYNCED_ANNOTATION;
use crate::lifecycle::Action;
use crate::resources::{self, BuildConfig, PlannedInstance};

/// The operator's settings in the fixtures' cluster: `build_of` must read
/// them back off the pods.
fn operator_build() -> BuildConfig {
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

pub(super) fn now() -> Timestamp {
    "2026-11-26T12:00:00Z".parse().expect("a time")
}

/// Everything a settled `db` has, as the operator built it.
pub(super) fn cluster(db: &Database) -> Objects {
    let build = operator_build();
    let model = validate::validated(db, &build.defaults()).expect("a valid current Database");
    let status = db.status.clone().unwrap_or_default();
    let name = db.name_any();
    let mut objects = Objects {
        now: now(),
        lease_access: true,
        ..Objects::default()
    };
    for reported in &status.instances {
        let Some(serial) = names::serial_of(&name, &reported.name) else {
            continue;
        };
        let role = reported
            .role
            .unwrap_or(crate::api::status::InstanceRole::Replica);
        let image = reported
            .image
            .clone()
            .unwrap_or_else(|| model.image.clone());
        let mut pod = resources::instance_pod(
            &model,
            &PlannedInstance {
                serial,
                role,
                bootstrap: Bootstrap::Initdb,
                image: &image,
            },
            &build,
        );
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name = Some(format!("node-{serial}"));
        }
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some(format!("10.0.0.{serial}")),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if reported.ready { "True" } else { "False" }.into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        objects.pods.push(pod);
        for mut pvc in resources::instance_pvcs(&model, &reported.name) {
            let size = model.storage.size.clone();
            pvc.status = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
                phase: Some("Bound".into()),
                capacity: Some(BTreeMap::from([(
                    "storage".into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(size),
                )])),
                ..Default::default()
            });
            objects.pvcs.push(pvc);
        }
    }
    for kind in SecretKind::ALL {
        let mut meta = resources::secret(&model, kind, "").metadata;
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(PASSWORD_SYNCED_ANNOTATION.into(), "true".into());
        objects.secrets.push(meta);
    }
    if let Some(secret) = db
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.object_store.as_ref()?.credentials_secret.clone())
    {
        objects.secrets.push(ObjectMeta {
            name: Some(secret),
            ..ObjectMeta::default()
        });
    }
    objects.services = resources::services(&model);
    objects.pdbs = resources::pod_disruption_budgets(&model);
    let behind = |service: String, role: crate::api::status::InstanceRole| EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{service}-x")),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/service-name".into(),
                service,
            )])),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        endpoints: status
            .instances
            .iter()
            .filter(|i| i.role == Some(role) && i.ready)
            .map(|i| Endpoint {
                addresses: vec!["10.0.0.1".into()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    ..EndpointConditions::default()
                }),
                target_ref: Some(ObjectReference {
                    name: Some(i.name.clone()),
                    ..ObjectReference::default()
                }),
                ..Endpoint::default()
            })
            .collect(),
        ports: None,
    };
    objects.endpoints = vec![
        behind(
            names::rw_service(&name),
            crate::api::status::InstanceRole::Primary,
        ),
        behind(
            names::ro_service(&name),
            crate::api::status::InstanceRole::Replica,
        ),
    ];
    objects.lease = Some(Lease {
        metadata: ObjectMeta {
            name: Some(names::primary_lease(&name)),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: status.current_primary.clone(),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(now())),
            ..LeaseSpec::default()
        }),
    });
    objects
}

/// A fixture: the Database as stored, and the spec `plan` is given.
pub(super) struct Fixture {
    pub current: Database,
    pub new: Result<Database, Error>,
}

pub(super) fn fixture(name: &str) -> Fixture {
    let path = testdata(&format!("plan_{name}.yaml"));
    let text = std::fs::read_to_string(&path).expect("the fixture");
    let value: serde_json::Value = serde_yaml::from_str(&text).expect("YAML");
    let current: Database =
        serde_json::from_value(value["current"].clone()).expect("a current Database");
    let new = if let Some(patch) = value.get("patch") {
        patched(&current, &patch.to_string())
    } else {
        let manifest = serde_yaml::to_string(&value["new"]).expect("YAML");
        parse_manifest(&current, &manifest).map_err(Error::Usage)
    };
    Fixture { current, new }
}

fn testdata(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/plugin/testdata")
        .join(file)
}

/// What `plan` prints for the fixture, exit code included when not 0.
pub(super) fn planned(name: &str) -> (String, Option<Simulation>) {
    let Fixture { current, new } = fixture(name);
    let objects = cluster(&current);
    let build = plan_observe::build_of(&current, &objects.pods);
    let new = match new {
        Ok(new) => new,
        Err(error) => {
            return (
                format!("error: {error}\nexit {}\n", error.exit_code()),
                None,
            );
        }
    };
    let (current_model, model) = match validate(&current, &new, &build.defaults()) {
        Ok(models) => models,
        Err(error) => {
            return (
                format!("error: {error}\nexit {}\n", error.exit_code()),
                None,
            );
        }
    };
    let observed = plan_observe::observed(&current, &current_model, &new, &model, &objects, &build);
    let simulation = simulate::simulate(&new.spec, current.status.as_ref(), &observed);
    (
        render_text(&current.name_any(), &simulation),
        Some(simulation),
    )
}

fn golden(name: &str) -> Option<Simulation> {
    let (text, simulation) = planned(name);
    let path = testdata(&format!("plan_{name}.txt"));
    if std::env::var_os("TUSK_BLESS_FIXTURES").is_some() {
        std::fs::write(&path, &text).expect("writes the golden file");
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        text == want,
        "plan_{name}: the output differs from {} (TUSK_BLESS_FIXTURES=1 writes it):\n{text}",
        path.display()
    );
    simulation
}

/// The instances acted on by actions of `kind`, in order.
fn targets(simulation: &Simulation, kind_of: &str) -> Vec<String> {
    let report = report("pg", simulation);
    report
        .steps
        .iter()
        .filter(|s| s.action == kind_of)
        .filter_map(|s| s.target.clone())
        .collect()
}

#[test]
fn the_build_settings_are_read_off_the_pods() {
    let Fixture { current, .. } = fixture("minor_update");
    let objects = cluster(&current);
    let build = plan_observe::build_of(&current, &objects.pods);
    assert_eq!(build.postgres_repository, "localhost/postgres");
    assert_eq!(build.tusk_image, "localhost/tusk:dev");
    assert_eq!(build.image_pull_policy.as_deref(), Some("IfNotPresent"));
}

#[test]
fn a_minor_update_replaces_the_replicas_then_switches_over_then_the_old_primary() {
    let simulation = golden("minor_update").expect("a plan");
    assert_eq!(simulation.end, End::Ready);
    assert_eq!(targets(&simulation, "RollPod"), ["pg-2", "pg-3", "pg-1"]);
    let steps = report("pg", &simulation).steps;
    let position = |kind_of: &str, target: &str| {
        steps
            .iter()
            .position(|s| s.action == kind_of && s.target.as_deref() == Some(target))
            .unwrap_or_else(|| panic!("no {kind_of} of {target}"))
    };
    assert!(position("RollPod", "pg-3") < position("Switchover", "pg-1"));
    assert!(position("Switchover", "pg-1") < position("RollPod", "pg-1"));
    let created: Vec<&Action> = simulation
        .passes
        .iter()
        .flat_map(|p| p.actions.iter())
        .filter(|a| matches!(a, Action::CreatePod { .. }))
        .collect();
    assert_eq!(created.len(), 3);
    assert!(
        created.iter().all(
            |a| matches!(a, Action::CreatePod { image, .. } if image == "localhost/postgres:17.12")
        ),
        "{created:?}"
    );
}

#[test]
fn a_major_upgrade_checks_backs_up_stops_links_and_starts() {
    let simulation = golden("major_upgrade").expect("a plan");
    assert_eq!(simulation.end, End::Ready);
    let kinds: Vec<String> = report("pg", &simulation)
        .steps
        .iter()
        .filter(|s| {
            matches!(
                s.action.as_str(),
                "RunUpgradeJob" | "TakeBackup" | "DeletePod" | "CreatePod"
            )
        })
        .map(|s| format!("{} {}", s.action, s.target.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        kinds,
        [
            "RunUpgradeJob pg-1",
            "TakeBackup ",
            "DeletePod pg-1",
            "DeletePod pg-2",
            "RunUpgradeJob pg-1",
            "CreatePod pg-1",
            "CreatePod pg-2",
            "TakeBackup ",
        ]
    );
}

#[test]
fn a_scale_up_adds_one_instance() {
    let simulation = golden("scale_up").expect("a plan");
    assert_eq!(simulation.end, End::Ready);
    assert_eq!(targets(&simulation, "CreatePod"), ["pg-3"]);
    assert!(targets(&simulation, "RollPod").is_empty());
}

#[test]
fn a_memory_change_rolls_every_instance() {
    let simulation = golden("memory").expect("a plan");
    assert_eq!(simulation.end, End::Ready);
    assert_eq!(targets(&simulation, "RollPod"), ["pg-2", "pg-3", "pg-1"]);
}

#[test]
fn a_downgrade_is_refused_naming_the_field() {
    let (text, simulation) = planned("downgrade");
    golden("downgrade");
    assert!(simulation.is_none());
    assert!(text.contains("spec.version"), "{text}");
    assert!(text.ends_with("exit 2\n"), "{text}");
}

#[test]
fn a_shrink_is_refused_naming_the_field() {
    let (text, simulation) = planned("shrink");
    golden("shrink");
    assert!(simulation.is_none());
    assert!(text.contains("spec.storage.size"), "{text}");
    assert!(text.ends_with("exit 2\n"), "{text}");
}

#[test]
fn the_same_spec_plans_nothing() {
    let Fixture { current, .. } = fixture("minor_update");
    let objects = cluster(&current);
    let build = plan_observe::build_of(&current, &objects.pods);
    let (current_model, model) = validate(&current, &current, &build.defaults()).expect("valid");
    let observed =
        plan_observe::observed(&current, &current_model, &current, &model, &objects, &build);
    let simulation = simulate::simulate(&current.spec, current.status.as_ref(), &observed);
    assert_eq!(simulation.end, End::Ready, "{simulation:?}");
    assert!(
        simulation.passes.iter().all(|p| p.actions.is_empty()),
        "{:?}",
        simulation.passes
    );
    assert!(render_text("pg", &simulation).starts_with("No step: nothing changes."));
}

#[test]
fn a_manifest_of_another_database_is_refused() {
    let Fixture { current, .. } = fixture("minor_update");
    let error = parse_manifest(&current, "metadata: {name: other}\nspec: {}\n")
        .expect_err("another Database");
    assert_eq!(error, "metadata.name is other, not pg");
}

#[test]
fn a_merge_patch_merges_objects_and_removes_nulls() {
    let mut target = serde_json::json!({"spec": {"version": "17", "primary": "pg-1", "storage": {"size": "1Gi"}}});
    merge_patch(
        &mut target,
        &serde_json::json!({"spec": {"version": "17.12", "primary": null, "storage": {"size": "2Gi"}}}),
    );
    assert_eq!(
        target,
        serde_json::json!({"spec": {"version": "17.12", "storage": {"size": "2Gi"}}})
    );
}

#[test]
fn json_lists_each_step_with_its_kind_target_and_event() {
    let simulation = golden("minor_update").expect("a plan");
    let json: serde_json::Value =
        serde_json::from_str(&render_json("pg", &simulation).expect("JSON")).expect("parses");
    assert_eq!(json["end"], "Ready");
    let switchover = json["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["action"] == "Switchover")
        .expect("a switchover");
    assert_eq!(switchover["target"], "pg-1");
    assert_eq!(switchover["event"], "SwitchedOver");
}
