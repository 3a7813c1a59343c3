//! Schema migrations on a real cluster: `spec.migrations` runs a Job with
//! the application's credentials as libpq variables, `status.migrations`
//! follows, a failing migration is reported (and not retried), and a new
//! version runs.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tusk::api::status::{DatabasePhase, MigrationsStatus};
use tusk::api::v1::Database;
use tusk_e2e::store::superuser_password;
use tusk_e2e::{Result, apply_value, database, in_namespace, install_operator, sql, wait_for};

/// How long a migration may take to be recorded: a failing one runs three
/// pods (backoff limit 2) with the Job controller's 10 s and 20 s backoffs.
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(300);

fn spec(version: &str, args: Value) -> Value {
    json!({
        "version": "17", "instances": 1, "storage": {"size": "1Gi"},
        "bootstrap": {"initdb": {"database": "app", "owner": "app"}},
        "migrations": {
            "version": version,
            "image": "localhost/postgres:17",
            "command": ["psql"],
            "args": args
        }
    })
}

fn migrations(db: &Database) -> MigrationsStatus {
    db.status
        .as_ref()
        .and_then(|s| s.migrations.clone())
        .unwrap_or_default()
}

/// The migration Jobs of Database `db` that are not being deleted.
async fn migration_jobs(client: &Client, ns: &str, db: &str) -> Result<Vec<Job>> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let selector = format!("tusk.dev/database={db},app.kubernetes.io/component=migration");
    Ok(jobs
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .collect())
}

fn version_of(job: &Job) -> Option<&str> {
    job.annotations()
        .get("tusk.dev/migration-version")
        .map(String::as_str)
}

#[tokio::test]
async fn migrations_run_as_jobs_report_failures_and_follow_new_versions() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-migr",
        Duration::from_secs(1200),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);

            // 1. A plain psql, with nothing but the variables Tusk sets.
            let create = spec(
                "1",
                json!([
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-c",
                    "CREATE TABLE widgets (id int PRIMARY KEY, name text); \
                 INSERT INTO widgets VALUES (1, current_user)"
                ]),
            );
            apply_value(&client, Some(&ns), database("mg", create), &apply).await?;
            let db = wait_for(
                &databases,
                "mg",
                tusk_e2e::READY_TIMEOUT + MIGRATION_TIMEOUT,
                |db| migrations(db).applied.as_deref() == Some("1"),
            )
            .await?;
            assert_eq!(migrations(&db).failed, None);
            // Applied and settled: Ready again, at this generation.
            let db = wait_for(&databases, "mg", MIGRATION_TIMEOUT, |db| {
                tusk_e2e::ready_condition(db).is_some_and(|(status, _, _)| status == "True")
                    && db.status.as_ref().and_then(|s| s.observed_generation)
                        == db.metadata.generation
            })
            .await?;
            assert_eq!(
                db.status.as_ref().and_then(|s| s.phase),
                Some(DatabasePhase::Ready)
            );
            let password = superuser_password(&client, &ns, "mg").await?;
            let rw = format!("mg-rw.{ns}.svc");
            // The table exists, owned by the application role the Job connected as.
            let owner = sql(
                &client,
                &ns,
                &rw,
                &password,
                "app",
                "SELECT tableowner || ':' || (SELECT name FROM widgets WHERE id = 1) \
             FROM pg_tables WHERE tablename = 'widgets'",
            )
            .await?;
            assert_eq!(owner, "app:app");
            // The Job is Tusk's: owned by the Database, named by version, kept.
            let jobs = migration_jobs(&client, &ns, "mg").await?;
            assert_eq!(jobs.len(), 1, "{jobs:?}");
            let job = &jobs[0];
            assert_eq!(version_of(job), Some("1"));
            assert!(
                job.name_any().starts_with("mg-migrate-"),
                "{}",
                job.name_any()
            );
            assert_eq!(
                job.owner_references()
                    .first()
                    .map(|o| (o.kind.as_str(), o.name.as_str())),
                Some(("Database", "mg"))
            );

            // 2. Bad SQL: reported with psql's own words, applied stays, no retries.
            let broken = spec(
                "2",
                json!([
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-c",
                    "CREATE TABLE gadgets (id int; oops"
                ]),
            );
            apply_value(&client, Some(&ns), database("mg", broken.clone()), &apply).await?;
            let db = wait_for(&databases, "mg", MIGRATION_TIMEOUT, |db| {
                migrations(db).failed.as_deref() == Some("2")
                    && tusk_e2e::ready_condition(db)
                        .is_some_and(|(_, reason, _)| reason == "MigrationFailed")
            })
            .await?;
            let status = migrations(&db);
            assert_eq!(status.applied.as_deref(), Some("1"));
            assert_eq!(status.running, None);
            let message = status.message.unwrap_or_default();
            assert!(message.contains("syntax error"), "{message}");
            let (ready_status, _, ready_message) =
                tusk_e2e::ready_condition(&db).ok_or("no Ready condition")?;
            assert_eq!(ready_status, "False");
            assert!(
                ready_message.starts_with("spec.migrations: version 2 failed")
                    && ready_message.contains("syntax error"),
                "{ready_message}"
            );
            assert_eq!(
                db.status.as_ref().and_then(|s| s.phase),
                Some(DatabasePhase::Blocked)
            );
            // No retry storm: the failed Job stays the only one, its pods do not
            // multiply, and version 1's Job went once its outcome was recorded.
            // Proof that Tusk has looked again since it recorded the failure:
            // a pass at a newer generation (an unrelated parameter), after
            // which the same Job, with the same pods, is still the only one.
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let failed_job = migration_jobs(&client, &ns, "mg")
                .await?
                .into_iter()
                .find(|j| version_of(j) == Some("2"))
                .ok_or("no Job for version 2")?;
            let pod_selector = format!("job-name={}", failed_job.name_any());
            let before = pods
                .list(&ListParams::default().labels(&pod_selector))
                .await?
                .items
                .len();
            let mut nudged = broken.clone();
            nudged["postgresql"] = json!({"parameters": {"work_mem": "8MB"}});
            apply_value(&client, Some(&ns), database("mg", nudged), &apply).await?;
            let generation = databases.get("mg").await?.metadata.generation;
            let db = wait_for(&databases, "mg", Duration::from_secs(120), |db| {
                db.status.as_ref().and_then(|s| s.observed_generation) == generation
            })
            .await?;
            let status = migrations(&db);
            assert_eq!(
                (status.applied.as_deref(), status.failed.as_deref()),
                (Some("1"), Some("2")),
                "{status:?}"
            );
            let jobs = migration_jobs(&client, &ns, "mg").await?;
            let versions: Vec<_> = jobs
                .iter()
                .map(|j| (version_of(j).unwrap_or_default(), j.uid()))
                .collect();
            assert_eq!(
                versions,
                [("2", failed_job.uid())],
                "the failed migration was run again"
            );
            let after = pods
                .list(&ListParams::default().labels(&pod_selector))
                .await?
                .items
                .len();
            assert_eq!(before, after, "the failed migration was retried");
            assert!(after <= 3, "{after} pods for one migration");
            let gadgets = sql(
                &client,
                &ns,
                &rw,
                &password,
                "app",
                "SELECT count(*) FROM pg_tables WHERE tablename = 'gadgets'",
            )
            .await?;
            assert_eq!(gadgets, "0");

            // 3. A fixed version runs, through DATABASE_URL this time.
            let fixed = spec(
                "3",
                json!([
                    "$(DATABASE_URL)",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-c",
                    "CREATE TABLE gadgets (id int PRIMARY KEY)"
                ]),
            );
            apply_value(&client, Some(&ns), database("mg", fixed), &apply).await?;
            let db = wait_for(&databases, "mg", MIGRATION_TIMEOUT, |db| {
                migrations(db).applied.as_deref() == Some("3")
                    && tusk_e2e::ready_condition(db).is_some_and(|(status, _, _)| status == "True")
                    && db.status.as_ref().and_then(|s| s.observed_generation)
                        == db.metadata.generation
            })
            .await?;
            let status = migrations(&db);
            assert_eq!((status.failed, status.message), (None, None));
            let gadgets = sql(
                &client,
                &ns,
                &rw,
                &password,
                "app",
                "SELECT tableowner FROM pg_tables WHERE tablename = 'gadgets'",
            )
            .await?;
            assert_eq!(gadgets, "app");
            // Version 2's Job goes once its failure is recorded; 3's stays.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                let versions: Vec<_> = migration_jobs(&client, &ns, "mg")
                    .await?
                    .iter()
                    .filter_map(|j| version_of(j).map(str::to_owned))
                    .collect();
                if versions == ["3"] {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(format!("migration Jobs left: {versions:?}").into());
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Ok(())
        },
    )
    .await;
}
