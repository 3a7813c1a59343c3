//! `kubectl tusk plan <db> (-f new.yaml | --patch JSON)`: what Tusk will do
//! if a spec is applied, computed by the operator's own planner from the
//! Database's current state. Changes nothing.
//!
//! Three steps, each pure but the listing: the new spec is validated as the
//! webhook and the reconciler validate it ([`validate`]: a refusal is one
//! line naming the field, exit 2); the objects the API server holds are
//! reduced to the planner's input ([`super::plan_observe`]); the planner
//! runs pass after pass with each pass's actions taken as done
//! ([`super::simulate`]), and the passes are printed ([`render_text`],
//! [`render_json`]).
//!
//! Exit codes: 0 when a plan was made, also one that ends refused or
//! waiting (what is refused is printed first, naming the field: the plan
//! itself succeeded); 2 when the spec fails validation; 3 when the Database
//! does not exist.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, Pod as KubePod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role as RbacRole, RoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::Serialize;

use super::plan_observe::{self, Objects};
use super::simulate::{self, End, Pass, Simulation};
use super::{Error, Output, Session};
use crate::api::model::{Defaults, ValidatedDatabase};
use crate::api::v1::{Backup, Database};
use crate::api::validate;
use crate::lifecycle::{Action, Verdict};
use crate::resources::{SecretKind, labels, names};

/// Runs `plan` for `database` against the spec in `file`, or the current
/// one with `patch` merged in.
pub async fn run(
    session: &Session,
    database: &str,
    file: Option<&Path>,
    patch: Option<&str>,
    output: Output,
) -> Result<(), Error> {
    let current = session.database(database).await?;
    let new = match (file, patch) {
        (Some(path), _) => from_file(&current, path)?,
        (None, Some(patch)) => patched(&current, patch)?,
        (None, None) => return Err(Error::Usage("give -f FILE or --patch JSON".into())),
    };
    let objects = list(session, &current).await?;
    let build = plan_observe::build_of(&current, &objects.pods);
    let defaults = build.defaults();
    let (current_model, model) = validate(&current, &new, &defaults)?;
    let observed = plan_observe::observed(&current, &current_model, &new, &model, &objects, &build);
    let simulation = simulate::simulate(&new.spec, current.status.as_ref(), &observed);
    let text = match output {
        Output::Text => render_text(database, &simulation),
        Output::Json => render_json(database, &simulation)?,
        Output::Yaml => {
            serde_yaml::to_string(&report(database, &simulation)).map_err(|e| Error::Render {
                what: "the plan",
                message: e.to_string(),
            })?
        }
    };
    print!("{text}");
    Ok(())
}

/// The Database in `path`: it must be the same Database.
fn from_file(current: &Database, path: &Path) -> Result<Database, Error> {
    let text =
        std::fs::read_to_string(path).map_err(Error::io(format!("reading {}", path.display())))?;
    parse_manifest(current, &text).map_err(|e| Error::Usage(format!("{}: {e}", path.display())))
}

/// `text` (YAML or JSON) as the new version of `current`: its spec, with
/// `current`'s metadata and status.
pub fn parse_manifest(current: &Database, text: &str) -> Result<Database, String> {
    let value: serde_json::Value =
        serde_yaml::from_str(text).map_err(|e| format!("not a Database manifest: {e}"))?;
    let name = value
        .pointer("/metadata/name")
        .and_then(serde_json::Value::as_str);
    if let Some(name) = name
        && name != current.name_any()
    {
        return Err(format!(
            "metadata.name is {name}, not {}",
            current.name_any()
        ));
    }
    let spec = value
        .get("spec")
        .cloned()
        .ok_or_else(|| "has no spec".to_owned())?;
    with_spec(current, spec)
}

/// `current` with the JSON merge patch `patch` (RFC 7386) applied to it.
fn patched(current: &Database, patch: &str) -> Result<Database, Error> {
    let patch: serde_json::Value = serde_json::from_str(patch)
        .map_err(|e| Error::Usage(format!("--patch is not JSON: {e}")))?;
    let mut object = serde_json::json!({ "spec": current.spec });
    merge_patch(&mut object, &patch);
    let spec = object.get("spec").cloned().unwrap_or_default();
    with_spec(current, spec).map_err(|e| Error::Usage(format!("--patch: {e}")))
}

fn with_spec(current: &Database, spec: serde_json::Value) -> Result<Database, String> {
    let spec = serde_json::from_value(spec).map_err(|e| format!("spec: {e}"))?;
    let mut new = current.clone();
    new.spec = spec;
    Ok(new)
}

/// RFC 7386: objects merge, `null` removes, anything else replaces.
pub fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    let serde_json::Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = serde_json::Value::Object(serde_json::Map::new());
    }
    if let serde_json::Value::Object(object) = target {
        for (key, value) in fields {
            if value.is_null() {
                object.remove(key);
            } else {
                merge_patch(
                    object.entry(key.clone()).or_insert(serde_json::Value::Null),
                    value,
                );
            }
        }
    }
}

/// The checks the webhook makes of an update from `current` to `new`
/// (downgrades, shrinking, immutable fields) and those the reconciler makes
/// (against `status.applied`): the models of both specs, or one line
/// naming every field refused.
pub fn validate(
    current: &Database,
    new: &Database,
    defaults: &Defaults<'_>,
) -> Result<(ValidatedDatabase, ValidatedDatabase), Error> {
    let mut errors = validate::database_update(current, new);
    errors.extend(crate::api::expose::node_port_errors(
        &new.spec.expose,
        defaults.node_ports,
    ));
    if errors.is_empty() {
        match crate::controller::database::plan::validate(new, defaults) {
            Ok(model) => {
                let current_model =
                    validate::validated(current, defaults).unwrap_or_else(|_| model.clone());
                return Ok((current_model, model));
            }
            Err(refused) => errors = refused,
        }
    }
    errors.dedup();
    Err(Error::Usage(format!(
        "the spec is refused: {}",
        validate::summary(&errors)
    )))
}

/// Everything `plan` reads of `db`: by its label, its names, or its owner.
async fn list(session: &Session, db: &Database) -> Result<Objects, Error> {
    let client = &session.client;
    let namespace = &session.namespace;
    let name = db.name_any();
    let by_label = ListParams::default().labels(&format!("{}={name}", labels::DATABASE));
    let (pods, job_pods): (Vec<KubePod>, Vec<KubePod>) =
        Api::<KubePod>::namespaced(client.clone(), namespace)
            .list(&by_label)
            .await
            .map_err(Error::kube("listing the Database's Pods"))?
            .items
            .into_iter()
            .partition(|p| names::serial_of(&name, &p.name_any()).is_some());
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
        .list(&by_label)
        .await
        .map_err(Error::kube("listing the Database's PVCs"))?
        .items;
    let jobs = Api::<Job>::namespaced(client.clone(), namespace)
        .list(&by_label)
        .await
        .map_err(Error::kube("listing the Database's Jobs"))?
        .items;
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), namespace)
        .list(&by_label)
        .await
        .map_err(Error::kube("listing the Database's PodDisruptionBudgets"))?
        .items;
    let mut secret_names: Vec<String> = SecretKind::ALL
        .iter()
        .map(|k| k.secret_name(&name))
        .collect();
    secret_names.extend(
        db.spec
            .backup
            .as_ref()
            .and_then(|b| b.object_store.as_ref()?.credentials_secret.clone()),
    );
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace)
        .list_metadata(&ListParams::default())
        .await
        .map_err(Error::kube("listing the Secrets' names"))?
        .items
        .into_iter()
        .map(|s| s.metadata)
        .filter(|m| m.name.as_ref().is_some_and(|n| secret_names.contains(n)))
        .collect();
    let service_names = [
        names::rw_service(&name),
        names::ro_service(&name),
        names::r_service(&name),
    ];
    let services: Vec<Service> = Api::<Service>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing the Services"))?
        .items
        .into_iter()
        .filter(|s| {
            service_names.contains(&s.name_any())
                || (s.labels().contains_key(labels::EXPOSED)
                    && s.labels().get(labels::DATABASE) == Some(&name))
        })
        .collect();
    let routed = format!(
        "kubernetes.io/service-name in ({},{})",
        names::rw_service(&name),
        names::ro_service(&name)
    );
    let endpoints = Api::<EndpointSlice>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&routed))
        .await
        .map_err(Error::kube("listing the Services' EndpointSlices"))?
        .items;
    let lease = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(&names::primary_lease(&name))
        .await
        .map_err(Error::kube("reading the primary Lease"))?;
    let account = names::instance_account(&name);
    // A reader who may not see RBAC objects takes them as there: the
    // operator keeps them, and a plan about a spec change is not about them.
    let sa = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .get_metadata_opt(&account)
        .await
        .map_or(true, |o| o.is_some());
    let role = Api::<RbacRole>::namespaced(client.clone(), namespace)
        .get_metadata_opt(&account)
        .await
        .map_or(true, |o| o.is_some());
    let binding = Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .get_metadata_opt(&account)
        .await
        .map_or(true, |o| o.is_some());
    let backups = if crate::api::store::effective(db, None).is_some() {
        Api::<Backup>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .map_err(Error::kube("listing the Backups"))?
            .items
    } else {
        Vec::new()
    };
    let storage_classes = storage_classes(client, &pvcs).await;
    Ok(Objects {
        pods,
        pvcs,
        jobs,
        job_pods,
        secrets,
        services,
        pdbs,
        endpoints,
        lease_access: lease.is_some() && sa && role && binding,
        lease,
        backups,
        storage_classes,
        now: Timestamp::now(),
    })
}

/// Whether each StorageClass the PVCs name allows expansion, or why that
/// could not be read (as the operator reads them).
async fn storage_classes(
    client: &kube::Client,
    pvcs: &[PersistentVolumeClaim],
) -> BTreeMap<String, Result<bool, String>> {
    let api: Api<StorageClass> = Api::all(client.clone());
    let mut classes = BTreeMap::new();
    for class in pvcs
        .iter()
        .filter_map(|p| p.spec.as_ref()?.storage_class_name.clone())
    {
        if classes.contains_key(&class) {
            continue;
        }
        let expandable = match api.get_opt(&class).await {
            Ok(Some(found)) => Ok(found.allow_volume_expansion == Some(true)),
            Ok(None) => Err("it does not exist".to_owned()),
            Err(error) => Err(format!("it could not be read: {error}")),
        };
        classes.insert(class, expandable);
    }
    classes
}

/// One step of the plan, for `-o json|yaml`.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// The operator's pass it is taken in (1-based).
    pub pass: usize,
    /// Its place among all steps (1-based).
    pub step: usize,
    /// The action's kind (`RollPod`, `Switchover`, `RunUpgradeJob`…).
    pub action: String,
    /// The instance it acts on, when it acts on one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The reason of the Event the operator emits when it takes the step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<&'static str>,
    /// The Job it creates or deletes, when it is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The step in words.
    pub description: String,
}

/// The whole plan, for `-o json|yaml`.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub database: String,
    pub steps: Vec<Step>,
    /// What the spec asks for that Tusk refuses, naming the field.
    pub refused: Vec<String>,
    /// `Ready`, `Waiting`, `NotSimulated`, `Stalled` or `Limit`.
    pub end: String,
    /// The end in words.
    pub outcome: String,
}

/// The plan as data.
pub fn report(database: &str, simulation: &Simulation) -> Report {
    let mut steps = Vec::new();
    for (index, pass) in simulation.passes.iter().enumerate() {
        for action in &pass.actions {
            steps.push(Step {
                pass: index + 1,
                step: steps.len() + 1,
                action: kind(action).to_owned(),
                target: action.target(|serial| names::instance_name(database, serial)),
                event: event(action),
                job: job(database, action),
                description: describe(database, action),
            });
        }
    }
    let end = match &simulation.end {
        End::Ready => "Ready",
        End::Waiting(_) => "Waiting",
        End::NotSimulated(_) => "NotSimulated",
        End::Stalled => "Stalled",
        End::Limit => "Limit",
    };
    Report {
        database: database.to_owned(),
        steps,
        refused: refused(simulation),
        end: end.to_owned(),
        outcome: outcome(simulation),
    }
}

/// The plan as JSON.
pub fn render_json(database: &str, simulation: &Simulation) -> Result<String, Error> {
    serde_json::to_string_pretty(&report(database, simulation))
        .map(|s| s + "\n")
        .map_err(|e| Error::Render {
            what: "the plan",
            message: e.to_string(),
        })
}

/// The plan for people: what is refused first, then the steps numbered in
/// order, grouped by the operator's pass, each pass with what the planner
/// said of it; a pass deciding the same as the one before is folded into it.
pub fn render_text(database: &str, simulation: &Simulation) -> String {
    let mut out = String::new();
    let refused = refused(simulation);
    if !refused.is_empty() {
        let _ = writeln!(out, "REFUSED");
        for line in &refused {
            let _ = writeln!(out, "  {line}");
        }
        out.push('\n');
    }
    let mut number = 0;
    let mut previous: Option<&Pass> = None;
    let mut repeats = 0;
    let mut shown = 0;
    for pass in &simulation.passes {
        if pass.actions.is_empty() {
            continue;
        }
        if previous.is_some_and(|p| p.actions == pass.actions) {
            repeats += 1;
            continue;
        }
        flush_repeats(&mut out, repeats);
        repeats = 0;
        shown += 1;
        let _ = writeln!(out, "Pass {shown} ({:?}):", pass.phase);
        for reason in reasons(pass, previous) {
            let _ = writeln!(out, "    ({reason})");
        }
        for action in &pass.actions {
            number += 1;
            let _ = writeln!(out, "  {number:>2}. {}", describe(database, action));
        }
        previous = Some(pass);
    }
    flush_repeats(&mut out, repeats);
    if number == 0 {
        let _ = writeln!(out, "No step: nothing changes.");
    }
    let _ = writeln!(out, "\n{}", outcome(simulation));
    out
}

fn flush_repeats(out: &mut String, repeats: usize) {
    if repeats > 0 {
        let _ = writeln!(out, "    (the same again in {repeats} more pass(es))");
    }
}

/// What the planner says a pass is for: its progress verdicts, those the
/// pass before did not say already.
fn reasons<'a>(pass: &'a Pass, previous: Option<&'a Pass>) -> Vec<&'a str> {
    let said = |message: &str| {
        previous.is_some_and(|p| {
            p.verdicts
                .iter()
                .any(|v| matches!(v, Verdict::Progress { message: m, .. } if m == message))
        })
    };
    let mut reasons: Vec<&str> = pass
        .verdicts
        .iter()
        .filter_map(|v| match v {
            Verdict::Progress { message, .. } if !said(message) => Some(message.as_str()),
            _ => None,
        })
        .collect();
    reasons.dedup();
    reasons.truncate(3);
    reasons
}

/// The Blocked verdicts of the last pass: what Tusk will not do.
fn refused(simulation: &Simulation) -> Vec<String> {
    let mut lines: Vec<String> = simulation
        .passes
        .iter()
        .flat_map(|p| p.verdicts.iter())
        .filter_map(|v| match v {
            Verdict::Blocked { reason, message } => Some(format!("{reason}: {message}")),
            _ => None,
        })
        .collect();
    lines.sort();
    lines.dedup();
    lines
}

fn outcome(simulation: &Simulation) -> String {
    let last = simulation.passes.last();
    let waiting = || {
        last.into_iter()
            .flat_map(|p| p.verdicts.iter())
            .filter_map(|v| match v {
                Verdict::Progress { message, .. } => Some(message.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    match &simulation.end {
        End::Ready => "Then: Ready, the spec in effect.".to_owned(),
        End::Waiting(phase) => {
            let why = waiting();
            if why.is_empty() {
                format!("Then: {phase:?}, not Ready; nothing more is done until something changes.")
            } else {
                format!("Then: {phase:?}, not Ready, waiting: {why}")
            }
        }
        End::NotSimulated(what) => {
            format!("Then: {what} (not simulated further).")
        }
        End::Stalled => {
            "Then: the same steps again without effect (they would be retried).".to_owned()
        }
        End::Limit => format!(
            "Then: still not done after {} passes (not simulated further).",
            simulate::PASS_LIMIT
        ),
    }
}

/// The action's kind, as in `-o json`.
pub fn kind(action: &Action) -> &'static str {
    match action {
        Action::EnsureSecrets => "EnsureSecrets",
        Action::SyncPassword { .. } => "SyncPassword",
        Action::EnsureServices => "EnsureServices",
        Action::ApplyExposure { .. } => "ApplyExposure",
        Action::DeleteExposure { .. } => "DeleteExposure",
        Action::EnsureLeaseAccess => "EnsureLeaseAccess",
        Action::SetMembers { .. } => "SetMembers",
        Action::Promote { .. } => "Promote",
        Action::Switchover { .. } => "Switchover",
        Action::EnsurePodDisruptionBudgets => "EnsurePodDisruptionBudgets",
        Action::DeletePodDisruptionBudget { .. } => "DeletePodDisruptionBudget",
        Action::CreatePvc { .. } => "CreatePvc",
        Action::CreatePod { .. } => "CreatePod",
        Action::DeletePod { .. } => "DeletePod",
        Action::RollPod { .. } => "RollPod",
        Action::GrowVolume { .. } => "GrowVolume",
        Action::DeletePvc { .. } => "DeletePvc",
        Action::LabelRole { .. } => "LabelRole",
        Action::ConfigureSync { .. } => "ConfigureSync",
        Action::Reload { .. } => "Reload",
        Action::RestartInstance { .. } => "RestartInstance",
        Action::ResizeCpu { .. } => "ResizeCpu",
        Action::RunUpgradeJob { .. } => "RunUpgradeJob",
        Action::DeleteJob { .. } => "DeleteJob",
        Action::TakeBackup { .. } => "TakeBackup",
        Action::RunRetention { .. } => "RunRetention",
        Action::RunMigration { .. } => "RunMigration",
        Action::RecordTargetPrimary { .. } => "RecordTargetPrimary",
        Action::DropSlot { .. } => "DropSlot",
        Action::RestoreInheritedMetadata { .. } => "RestoreInheritedMetadata",
        Action::Tls(_) => "Tls",
        Action::ApplyExternalSecret => "ApplyExternalSecret",
        Action::DeleteExternalSecret => "DeleteExternalSecret",
    }
}

/// The reason of the Event the operator emits for the action, where it
/// emits one (src/controller/database/apply).
pub fn event(action: &Action) -> Option<&'static str> {
    Some(match action {
        Action::CreatePod { .. } => "CreatedInstance",
        Action::DeletePod { .. } => "DeletedInstance",
        Action::RollPod { .. } => "RollingUpdate",
        Action::LabelRole { .. } => "RoleLabelled",
        Action::Promote { .. } => "FailedOver",
        Action::Switchover { .. } => "SwitchedOver",
        Action::ConfigureSync { .. } => "SynchronousReplication",
        Action::Reload { .. } => "Reloaded",
        Action::RestartInstance { .. } => "Restarting",
        Action::DropSlot { .. } => "DroppedSlot",
        Action::RunUpgradeJob { .. } => "UpgradeJob",
        Action::DeleteJob { .. } => "DeletedJob",
        _ => return None,
    })
}

/// The Job an action creates or deletes.
fn job(database: &str, action: &Action) -> Option<String> {
    match action {
        Action::RunUpgradeJob { job, from, to, .. } => Some(crate::resources::upgrade_job_name(
            database, *job, *from, *to,
        )),
        Action::RunMigration { version } => {
            Some(crate::resources::migration_job_name(database, version))
        }
        Action::DeleteJob { name } => Some(name.clone()),
        _ => None,
    }
}

/// The action in words.
pub fn describe(database: &str, action: &Action) -> String {
    let instance = |serial: &u32| names::instance_name(database, *serial);
    match action {
        Action::EnsureSecrets => "create or repair the Database's Secrets".to_owned(),
        Action::SyncPassword { credential, .. } => {
            format!("push the {credential:?} password to the instances")
        }
        Action::EnsureServices => "apply the rw, ro and r Services".to_owned(),
        Action::ApplyExposure { services } => format!("apply Service(s) {}", services.join(", ")),
        Action::DeleteExposure { name, .. } => format!("delete Service {name}"),
        Action::EnsureLeaseAccess => "apply the primary Lease and its access".to_owned(),
        Action::SetMembers { name, .. } => format!("tell {name} the members"),
        Action::Promote { name, from, .. } => {
            format!("promote {name} in place of {from} (failover)")
        }
        Action::Switchover { from, to, .. } => {
            format!("switch over: {from} hands the primary role to {to}")
        }
        Action::EnsurePodDisruptionBudgets => "apply the PodDisruptionBudgets".to_owned(),
        Action::DeletePodDisruptionBudget { name } => format!("delete PodDisruptionBudget {name}"),
        Action::CreatePvc { serial } => format!("create the volume of {}", instance(serial)),
        Action::CreatePod {
            serial,
            role,
            image,
            bootstrap,
        } => format!(
            "create pod {} ({}, {image}, {})",
            instance(serial),
            role.as_str(),
            bootstrap.as_str()
        ),
        Action::DeletePod { name, reason } => format!("delete pod {name} ({})", reason.as_str()),
        Action::RollPod {
            name,
            evict,
            updated,
            total,
        } => format!(
            "replace pod {name} ({} it; {updated} of {total} updated before it)",
            if *evict { "evict" } else { "delete" }
        ),
        Action::GrowVolume { pvc, from, to, .. } => {
            format!("grow volume {pvc} from {from} to {to} bytes")
        }
        Action::DeletePvc { name } => format!("delete volume {name} and its data"),
        Action::LabelRole { name, role } => format!("label {name} {}", role.as_str()),
        Action::ConfigureSync {
            primary,
            standbys,
            min,
        } => {
            if standbys.is_empty() || *min == 0 {
                format!("turn synchronous replication off on {primary}")
            } else {
                format!(
                    "synchronous replication on {primary}: ANY {min} ({})",
                    standbys.join(", ")
                )
            }
        }
        Action::Reload { name } => format!("reload the parameters on {name}"),
        Action::RestartInstance { name } => format!("restart PostgreSQL on {name}"),
        Action::ResizeCpu {
            name,
            request,
            limit,
        } => match limit {
            Some(limit) => {
                format!("resize the CPU of {name} in place to {request} (limit {limit})")
            }
            None => format!("resize the CPU of {name} in place to {request}"),
        },
        Action::RunUpgradeJob {
            job,
            from,
            to,
            instance,
            ..
        } => {
            let what = match job {
                crate::contract::UpgradeJob::Check => "pg_upgrade --check",
                crate::contract::UpgradeJob::Upgrade => "pg_upgrade --link",
                crate::contract::UpgradeJob::Rollback => "put the old data directory back",
            };
            format!(
                "Job {}: {what} from {from} to {to} on the data of {instance}",
                crate::resources::upgrade_job_name(database, *job, *from, *to)
            )
        }
        Action::DeleteJob { name } => format!("delete Job {name}"),
        Action::TakeBackup { name, .. } => format!("take Backup {name}"),
        Action::RunRetention { .. } => "run a retention pass".to_owned(),
        Action::RunMigration { version } => format!("run the schema migrations at {version}"),
        Action::RecordTargetPrimary { name } => format!("record {name} as status.targetPrimary"),
        Action::DropSlot { slot, .. } => format!("drop replication slot {slot}"),
        Action::RestoreInheritedMetadata { .. } => {
            "put spec.inheritedMetadata back on the pods and volumes".to_owned()
        }
        Action::Tls(tls) => format!("TLS: {tls:?}"),
        Action::ApplyExternalSecret => "apply the external endpoints' Secret".to_owned(),
        Action::DeleteExternalSecret => "delete the external endpoints' Secret".to_owned(),
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
