//! The operator's default object store in any namespace, and a store whose
//! credentials come late: the seed-style flat v1alpha1 spec in a fresh
//! namespace where nobody copied a Secret becomes Ready and its scheduled
//! backup completes (Tusk copies the default store's credentials from the
//! operator's namespace); a Database whose own credentials Secret does not
//! exist yet serves, says so in `BackupHealthy`, and archives the WAL it
//! wrote meanwhile once the Secret is created.
//!
//! The default store is the shared one of e2e/values-local.yaml (namespace
//! `tusk-objectstore`); its credentials Secret `s3-creds` is put in the
//! operator's namespace, where the chart says it lives.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tusk::api::status::BackupPhase;
use tusk::api::v1::{Backup, Database};
use tusk_e2e::store::{in_store, objectstore_async, sql_on, store_up};
use tusk_e2e::{
    OPERATOR_NAMESPACE, Result, apply_value, database, in_namespace, install_operator, wait_for,
    wait_ready,
};

/// The shared store e2e/values-local.yaml names as the operator's default.
const DEFAULT_STORE_NS: &str = "tusk-objectstore";
/// Its Secret, and `defaultObjectStore.credentialsSecret`.
const CREDENTIALS: &str = "s3-creds";
const ENDPOINT: &str = "http://s3.tusk-objectstore.svc.cluster.local:7070";

/// The shared store up, and its credentials in the operator's namespace
/// (both idempotent; kept for the other users of the store).
async fn default_store_up(client: &Client) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let wanted =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DEFAULT_STORE_NS}});
    namespaces
        .patch(
            DEFAULT_STORE_NS,
            &PatchParams::apply(tusk_e2e::MANAGER),
            &Patch::Apply(&wanted),
        )
        .await?;
    store_up(DEFAULT_STORE_NS).await?;
    objectstore_async(&["creds", DEFAULT_STORE_NS, OPERATOR_NAMESPACE]).await
}

/// A Database's condition `type_` as (status, reason, message).
fn condition(db: &Database, type_: &str) -> Option<(String, String, String)> {
    db.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Whether bucket `tusk` of the default store holds a file named `name`
/// under `prefix`.
async fn in_bucket(client: &Client, prefix: &str, name: &str) -> Result<bool> {
    let answer = in_store(
        client,
        DEFAULT_STORE_NS,
        &format!("find '/data/buckets/tusk/{prefix}' -name '{name}' 2>/dev/null | head -n 1"),
    )
    .await?;
    Ok(!answer.trim().is_empty())
}

#[tokio::test]
async fn the_seed_style_spec_is_ready_and_backed_up_in_a_fresh_namespace() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("e2e-seed", Duration::from_secs(900), |client, ns| async move {
        default_store_up(&client).await?;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        assert!(
            secrets.get_opt(CREDENTIALS).await?.is_none(),
            "the fresh namespace already has {CREDENTIALS}"
        );
        let seed = json!({
            "apiVersion": "tusk.dev/v1alpha1", "kind": "Database", "metadata": {"name": "pg"},
            "spec": {"version": "17", "replicas": 3, "storageSize": "1Gi", "backupSchedule": "* * * * *"}
        });
        apply_value(&client, Some(&ns), seed, &PatchParams::apply(tusk_e2e::MANAGER)).await?;
        let ready = wait_ready(&client, &ns, "pg", 3).await?;

        // Tusk's copy, owned by the Database, marked as Tusk's.
        let copy = secrets.get(CREDENTIALS).await?;
        assert_eq!(
            copy.labels().get("tusk.dev/store-credentials").map(String::as_str),
            Some("default-store"),
            "the copy is not marked as Tusk's: {:?}",
            copy.labels()
        );
        assert!(
            copy.owner_references().iter().any(|o| o.kind == "Database"
                && o.name == "pg"
                && Some(&o.uid) == ready.metadata.uid.as_ref()),
            "the copy is not owned by the Database: {:?}",
            copy.owner_references()
        );

        let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        let done = loop {
            let all = backups.list(&ListParams::default()).await?.items;
            if let Some(done) = all.into_iter().find(|b| {
                b.status.as_ref().and_then(|s| s.phase) == Some(BackupPhase::Completed)
            }) {
                break done;
            }
            if tokio::time::Instant::now() > deadline {
                return Err("no scheduled backup completed to the default store in 5 minutes".into());
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        let location = done
            .status
            .as_ref()
            .and_then(|s| s.location.clone())
            .ok_or("a completed backup without a location")?;
        let key = location
            .strip_prefix(&format!("s3://tusk/{ns}/pg/"))
            .ok_or_else(|| format!("not under the namespace's prefix of the default store: {location}"))?;
        assert!(
            in_bucket(&client, &format!("{ns}/pg/{key}"), "manifest.json").await?,
            "{location}manifest.json is not in the store"
        );
        let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
        wait_for(&databases, "pg", Duration::from_secs(180), |db| {
            condition(db, "BackupHealthy").is_some_and(|(status, _, _)| status == "True")
        })
        .await?;
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn a_database_serves_before_its_credentials_exist_and_archives_afterwards() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-late-creds",
        Duration::from_secs(900),
        |client, ns| async move {
            default_store_up(&client).await?;
            // Its own store (the shared server, under a prefix of this namespace)
            // and a credentials Secret that does not exist yet.
            let spec = json!({
                "version": "17", "instances": 1, "storage": {"size": "1Gi"},
                "backup": {"objectStore": {
                    "bucket": "tusk", "endpoint": ENDPOINT, "path": ns,
                    "credentialsSecret": "late-creds"
                }}
            });
            apply_value(
                &client,
                Some(&ns),
                database("pg", spec),
                &PatchParams::apply(tusk_e2e::MANAGER),
            )
            .await?;
            wait_ready(&client, &ns, "pg", 1).await?;
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            let missing = wait_for(&databases, "pg", Duration::from_secs(60), |db| {
                condition(db, "BackupHealthy")
                    .is_some_and(|(_, reason, _)| reason == "CredentialsSecretMissing")
            })
            .await?;
            let (status, _, message) =
                condition(&missing, "BackupHealthy").ok_or("no BackupHealthy")?;
            assert_eq!(status, "False", "{message}");
            assert!(
                message.contains("Secret late-creds does not exist"),
                "{message}"
            );
            let (status, reason, message) = condition(&missing, "Degraded").ok_or("no Degraded")?;
            assert_eq!(status, "False", "Degraded {reason}: {message}");

            // Writes are accepted; their WAL is closed into a segment that cannot
            // be archived yet.
            sql_on(
                &client,
                &ns,
                "pg",
                "rw",
                "CREATE TABLE early (id int); INSERT INTO early VALUES (1)",
            )
            .await?;
            let segment = sql_on(
                &client,
                &ns,
                "pg",
                "rw",
                "SELECT pg_walfile_name(pg_current_wal_lsn())",
            )
            .await?
            .trim()
            .to_owned();
            sql_on(&client, &ns, "pg", "rw", "SELECT pg_switch_wal()").await?;
            assert!(!segment.is_empty(), "no WAL file name");
            assert!(
                !in_bucket(&client, &ns, &format!("{segment}.zst")).await?,
                "{segment} reached the store without credentials"
            );

            // The Secret appears: the running instance reads it at its next try.
            let source: Api<Secret> = Api::namespaced(client.clone(), DEFAULT_STORE_NS);
            let data = source
                .get(CREDENTIALS)
                .await?
                .data
                .ok_or("s3-creds has no data")?;
            let keys = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"];
            let late = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some("late-creds".into()),
                    ..Default::default()
                },
                data: Some(
                    data.into_iter()
                        .filter(|(k, _)| keys.contains(&k.as_str()))
                        .collect(),
                ),
                ..Default::default()
            };
            Api::<Secret>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &late)
                .await?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(420);
            while !in_bucket(&client, &ns, &format!("{segment}.zst")).await? {
                if tokio::time::Instant::now() > deadline {
                    let db = databases.get("pg").await?;
                    return Err(format!(
                        "{segment}, written before the Secret existed, was not archived 7 minutes \
                     after it was created; BackupHealthy: {:?}",
                        condition(&db, "BackupHealthy")
                    )
                    .into());
                }
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            wait_for(&databases, "pg", Duration::from_secs(180), |db| {
                condition(db, "BackupHealthy").is_some_and(|(status, _, _)| status == "True")
            })
            .await?;
            let rows = sql_on(&client, &ns, "pg", "rw", "SELECT count(*) FROM early").await?;
            assert_eq!(rows.trim(), "1");
            Ok(())
        },
    )
    .await;
}
