//! What `kubectl get database` says, checked against what the cluster does:
//! Ready only once the Services route, a request Tusk cannot carry out named
//! in a condition with nothing touched, parameters that would escape Tusk
//! refused at admission, and what a user edits or deletes put back.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tusk::api::status::UpgradeStep;
use tusk::api::v1::{Database, DatabasePhase};
use tusk_e2e::{
    Result, apply_value, database, in_namespace, install_operator, sql_as, wait_for, wait_ready,
};

/// The Database's condition `type_`, if any.
fn condition<'a>(db: &'a Database, type_: &str) -> Option<&'a Condition> {
    db.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether `db` is refused at its current generation for `reason`: Ready and
/// Progressing both False, naming it.
fn blocked_for(db: &Database, reason: &str) -> bool {
    let generation = db.metadata.generation;
    ["Ready", "Progressing"].iter().all(|type_| {
        condition(db, type_).is_some_and(|c| {
            c.status == "False" && c.reason == reason && c.observed_generation == generation
        })
    }) && db.status.as_ref().and_then(|s| s.phase) == Some(DatabasePhase::Blocked)
}

/// Waits until the Database is refused at its current generation for `reason`
/// and returns it (its messages are then the answer to check).
async fn wait_blocked(client: &Client, ns: &str, name: &str, reason: &str) -> Result<Database> {
    let databases: Api<Database> = Api::namespaced(client.clone(), ns);
    wait_for(&databases, name, Duration::from_secs(120), |db| {
        blocked_for(db, reason)
    })
    .await
}

/// The Pods of `db` by name, with their UIDs, role labels and whether they are
/// being deleted: what must not change while Tusk refuses a request.
async fn pods_as_they_are(client: &Client, ns: &str, db: &str) -> Result<BTreeMap<String, String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // The instance pods, not the pods of the Jobs Tusk runs for the Database.
    let selector = format!("tusk.dev/database={db},app.kubernetes.io/component=database");
    Ok(pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .map(|p| {
            let role = p.labels().get("tusk.dev/role").cloned().unwrap_or_default();
            let deleting = if p.metadata.deletion_timestamp.is_some() {
                " deleting"
            } else {
                ""
            };
            (
                p.name_any(),
                format!("{} {role}{deleting}", p.uid().unwrap_or_default()),
            )
        })
        .collect())
}

/// The pods a Service's EndpointSlices list as ready.
async fn routed(client: &Client, ns: &str, service: &str) -> Result<BTreeSet<String>> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let selector = format!("kubernetes.io/service-name={service}");
    Ok(slices
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        .collect())
}

/// A Secret's value under `key`.
async fn secret_value(client: &Client, ns: &str, name: &str, key: &str) -> Result<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let data = secrets
        .get(name)
        .await?
        .data
        .ok_or("a Secret without data")?;
    let bytes = data
        .get(key)
        .ok_or_else(|| format!("{name} has no {key}"))?;
    Ok(String::from_utf8(bytes.0.clone())?)
}

/// Polls `check` every two seconds until it holds, for up to two minutes.
async fn until<F, Fut>(what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let mut last = String::new();
    for _ in 0..60 {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => last = "not yet".to_owned(),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Err(format!("{what} never happened; last: {last}").into())
}

/// Each parameter that would let the configuration escape Tusk is refused by
/// the API server before anything exists, with the field in the message.
#[tokio::test]
async fn parameters_that_escape_tusk_are_refused_at_admission_by_name() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-params",
        Duration::from_secs(120),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let escapes = [
                ("config_file", "/tmp/x.conf"),
                ("include", "/tmp/x.conf"),
                ("include_dir", "conf.d"),
                ("include_if_exists", "/tmp/x.conf"),
                ("work_mem", "8MB\nlisten_addresses = '*'"),
                ("work_mem", "8 parsecs"),
            ];
            for (name, value) in escapes {
                let spec = json!({
                    "version": "17", "instances": 1, "storage": {"size": "1Gi"},
                    "postgresql": {"parameters": {name: value}}
                });
                let refused = apply_value(&client, Some(&ns), database("escape", spec), &apply)
                    .await
                    .err()
                    .ok_or_else(|| format!("{name} = {value:?} was admitted"))?
                    .to_string();
                let field = format!("spec.postgresql.parameters.{name}");
                assert!(refused.contains(&field), "{name} = {value:?}: {refused}");
            }
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            assert!(databases.get_opt("escape").await?.is_none());
            Ok(())
        },
    )
    .await;
}

/// One replicated Database through the lies a status can tell: Ready before
/// the replicas route, Ready for a switchover or a new image it does not
/// carry out, and Services, budgets and Secrets that stay broken once edited.
#[tokio::test]
async fn the_status_tells_the_truth_and_drift_is_put_back() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-status",
        Duration::from_secs(900),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let spec = json!({
                "version": "17", "instances": 2, "storage": {"size": "1Gi"},
                "bootstrap": {"initdb": {"database": "app", "owner": "app"}}
            });
            apply_value(&client, Some(&ns), database("pg", spec.clone()), &apply).await?;

            // Ready comes only once both Services route: whatever the replica's
            // pace, the first Ready seen already has it behind -ro.
            let db = wait_ready(&client, &ns, "pg", 2).await?;
            assert_eq!(
                routed(&client, &ns, "pg-rw").await?,
                BTreeSet::from(["pg-1".to_owned()])
            );
            assert!(
                routed(&client, &ns, "pg-ro").await?.contains("pg-2"),
                "Ready before -ro routed to pg-2"
            );
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            for name in ["pg-1", "pg-2"] {
                assert!(
                    tusk_e2e::pod_ready(&pods.get(name).await?),
                    "Ready while {name} was not"
                );
            }
            let status = db.status.clone().ok_or("no status")?;
            let applied = status
                .applied
                .clone()
                .ok_or("Ready without status.applied")?;
            assert_eq!(applied.image.as_deref(), Some("localhost/postgres:17"));
            for instance in &status.instances {
                assert_eq!(
                    instance.image.as_deref(),
                    Some("localhost/postgres:17"),
                    "{instance:?}"
                );
                assert!(
                    instance
                        .version
                        .as_deref()
                        .is_some_and(|v| v.starts_with("17.")),
                    "{instance:?}"
                );
                assert_eq!(instance.timeline, Some(1), "{instance:?}");
            }
            // Ready and at rest: nothing is re-applied pass after pass.
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            until("Progressing=False at rest", || async {
                let db = databases.get("pg").await?;
                Ok(condition(&db, "Progressing").is_some_and(|c| {
                    c.status == "False"
                        && c.reason == "Idle"
                        && c.observed_generation == db.metadata.generation
                }) && condition(&db, "Ready").is_some_and(|c| c.status == "True"))
            })
            .await?;
            let before = pods_as_they_are(&client, &ns, "pg").await?;

            // A switchover to an instance that does not exist: refused by
            // name, nothing moves. The refusal is one pass's word; a second
            // refusal, of another instance at a later generation, is a later
            // pass that went on refusing without acting on the first.
            let mut switch = spec.clone();
            switch["primary"] = json!("pg-9");
            apply_value(&client, Some(&ns), database("pg", switch.clone()), &apply).await?;
            let db = wait_blocked(&client, &ns, "pg", "SwitchoverRefused").await?;
            let message = &condition(&db, "Ready").ok_or("no Ready")?.message;
            assert!(message.starts_with("spec.primary: pg-9 "), "{message}");
            switch["primary"] = json!("pg-8");
            apply_value(&client, Some(&ns), database("pg", switch), &apply).await?;
            let db = wait_blocked(&client, &ns, "pg", "SwitchoverRefused").await?;
            let message = &condition(&db, "Ready").ok_or("no Ready")?.message;
            assert!(message.starts_with("spec.primary: pg-8 "), "{message}");
            let status = db.status.clone().ok_or("no status")?;
            assert_eq!(status.current_primary.as_deref(), Some("pg-1"));
            assert_eq!(
                pods_as_they_are(&client, &ns, "pg").await?,
                before,
                "pods changed for a refused switchover"
            );
            apply_value(&client, Some(&ns), database("pg", spec.clone()), &apply).await?;
            wait_ready(&client, &ns, "pg", 2).await?;

            // Another image, one that cannot be pulled: the rolling update
            // replaces the replica first; it never comes back, so the rollout
            // stops there naming it, the primary untouched, and the status
            // keeps saying what runs. Setting the image back replaces the
            // stuck pod (it never started) and all is Ready again.
            let mut image = spec.clone();
            image["image"] = json!("localhost/postgres:17-e2e-never-pulled");
            apply_value(&client, Some(&ns), database("pg", image), &apply).await?;
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            let db = wait_for(&databases, "pg", Duration::from_secs(180), |db| {
                condition(db, "Ready").is_some_and(|c| {
                    c.status == "False"
                        && c.reason == "RollingUpdate"
                        && c.message.contains(
                            "1 of 2 instances updated; waiting for pg-2 to be ready and streaming",
                        )
                })
            })
            .await?;
            let status = db.status.clone().ok_or("no status")?;
            assert_eq!(
                status.phase,
                Some(tusk::api::status::DatabasePhase::Upgrading)
            );
            let applied = status.applied.ok_or("no status.applied")?;
            assert_eq!(applied.image.as_deref(), Some("localhost/postgres:17"));
            let now = pods_as_they_are(&client, &ns, "pg").await?;
            assert_eq!(
                now.get("pg-1"),
                before.get("pg-1"),
                "the primary was touched"
            );
            assert_ne!(
                now.get("pg-2"),
                before.get("pg-2"),
                "the replica was not replaced"
            );
            apply_value(&client, Some(&ns), database("pg", spec.clone()), &apply).await?;
            wait_ready(&client, &ns, "pg", 2).await?;

            // An edited -rw selector is put back, and -rw reaches the primary again.
            let intruder = PatchParams::apply("e2e-intruder").force();
            let services: Api<Service> = Api::namespaced(client.clone(), &ns);
            let misroute = json!({"apiVersion": "v1", "kind": "Service",
            "spec": {"selector": {"tusk.dev/database": "pg", "tusk.dev/role": "replica"}}});
            services
                .patch("pg-rw", &intruder, &Patch::Apply(&misroute))
                .await?;
            until("the -rw selector put back", || async {
                let selector = services
                    .get("pg-rw")
                    .await?
                    .spec
                    .and_then(|s| s.selector)
                    .unwrap_or_default();
                Ok(selector.get("tusk.dev/role").map(String::as_str) == Some("primary"))
            })
            .await?;
            until("-rw routing to pg-1 alone", || async {
                Ok(routed(&client, &ns, "pg-rw").await? == BTreeSet::from(["pg-1".to_owned()]))
            })
            .await?;

            // A loosened budget is tightened again; a deleted one comes back.
            let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
            let loosen = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "spec": {"minAvailable": 0}});
            budgets
                .patch("pg-primary", &intruder, &Patch::Apply(&loosen))
                .await?;
            until("the primary's budget put back", || async {
                let spec = budgets.get("pg-primary").await?.spec.unwrap_or_default();
                Ok(spec.min_available == Some(IntOrString::Int(1)))
            })
            .await?;
            let budget = budgets.get("pg-primary").await?.uid();
            budgets
                .delete("pg-primary", &DeleteParams::default())
                .await?;
            until("the primary's budget recreated", || async {
                Ok(budgets
                    .get_opt("pg-primary")
                    .await?
                    .is_some_and(|b| b.uid() != budget))
            })
            .await?;

            // A deleted -app Secret is recreated with a new password, the role's
            // password is set to match it, and the application logs in with it.
            let old_password = secret_value(&client, &ns, "pg-app", "password").await?;
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
            secrets.delete("pg-app", &DeleteParams::default()).await?;
            until("the -app Secret recreated", || async {
                Ok(secrets.get_opt("pg-app").await?.is_some())
            })
            .await?;
            let user = secret_value(&client, &ns, "pg-app", "username").await?;
            let password = secret_value(&client, &ns, "pg-app", "password").await?;
            assert_ne!(
                password, old_password,
                "the recreated Secret reused the old password"
            );
            let rw = format!("pg-rw.{ns}.svc");
            until(
                "the application logging in with the recreated Secret",
                || async {
                    let who = sql_as(
                        &client,
                        &ns,
                        &rw,
                        (&user, &password),
                        "app",
                        "SELECT current_user",
                    )
                    .await?;
                    Ok(who == user)
                },
            )
            .await?;
            let db = wait_ready(&client, &ns, "pg", 2).await?;

            // A new major: named, checked first, nothing replaced (the last
            // step: a major cannot go back).
            let generation = db.metadata.generation;
            let before = pods_as_they_are(&client, &ns, "pg").await?;
            let mut major = spec.clone();
            major["version"] = json!("18");
            apply_value(&client, Some(&ns), database("pg", major), &apply).await?;
            // Its check Job runs first (here it cannot even pull 18): no
            // instance is touched meanwhile, and Ready says why it is False.
            // Ready naming the running Job is a pass that saw the check under
            // way, the one that would move on to the instances.
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            let db = wait_for(&databases, "pg", Duration::from_secs(120), |db| {
                condition(db, "Ready").is_some_and(|c| {
                    c.status == "False"
                        && c.reason == "MajorUpgrade"
                        && c.observed_generation == db.metadata.generation
                        && c.message
                            .contains("pg_upgrade --check from 17 to 18 runs in Job")
                })
            })
            .await?;
            assert!(db.metadata.generation > generation);
            let message = &condition(&db, "Ready").ok_or("no Ready")?.message;
            assert!(message.starts_with("spec.version:"), "{message}");
            assert_eq!(
                db.status.and_then(|s| s.upgrade).map(|u| u.step),
                Some(UpgradeStep::Checking)
            );
            let after = pods_as_they_are(&client, &ns, "pg").await?;
            assert_eq!(after, before, "pods changed for a refused upgrade");
            Ok(())
        },
    )
    .await;
}
