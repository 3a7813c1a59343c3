//! A Drill at admission, against the real API server and the operator's
//! webhook: each bad input refused naming the field (the schema's enum,
//! bounds and CEL rules; the webhook's Database, schedule, instance and
//! store checks), nothing stored; and a valid Drill written as v1alpha1,
//! admitted, read back as v1 with the same spec (conversion through the
//! operator's webhook), its Database fixed and its schedule not.

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tusk::api::v1::Drill;
use tusk_e2e::{apply_value, database, in_namespace, install_operator};

fn drill(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "tusk.dev/v1", "kind": "Drill", "metadata": {"name": name}, "spec": spec})
}

/// Bad Drills refused naming the field, nothing stored.
#[tokio::test]
async fn bad_drills_are_refused_naming_the_field() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-drill-adm",
        Duration::from_secs(180),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            // One instance: enough to exist, too few for a primary fault.
            apply_value(
                &client,
                Some(&ns),
                database(
                    "single",
                    json!({"version": "17", "instances": 1, "storage": {"size": "1Gi"}}),
                ),
                &apply,
            )
            .await?;
            let bad = [
                (
                    "an unknown scenario",
                    json!({"database": "single", "scenario": "explode"}),
                    "spec.scenario: Unsupported value: \"explode\"",
                ),
                (
                    "a Database that does not exist",
                    json!({"database": "nowhere", "scenario": "store-outage"}),
                    "spec.database: no Database \"nowhere\" in this namespace",
                ),
                (
                    "a duration above its bound",
                    json!({"database": "single", "scenario": "store-outage", "durationSeconds": 601}),
                    "spec.durationSeconds",
                ),
                (
                    "a window of 0 minutes",
                    json!({"database": "single", "scenario": "store-outage", "schedule": "@daily", "windowMinutes": 0}),
                    "spec.windowMinutes",
                ),
                (
                    "a schedule that does not parse",
                    json!({"database": "single", "scenario": "store-outage", "schedule": "every monday"}),
                    "spec.schedule: ",
                ),
                (
                    "a lost-writes bound below 0",
                    json!({"database": "single", "scenario": "store-outage", "expect": {"maxLostWrites": -1}}),
                    "spec.expect.maxLostWrites",
                ),
                (
                    "an outage bound of 0",
                    json!({"database": "single", "scenario": "store-outage", "expect": {"maxWriteOutageSeconds": 0}}),
                    "spec.expect.maxWriteOutageSeconds must be above 0",
                ),
                (
                    "an abort deadline inside the fault",
                    json!({"database": "single", "scenario": "store-outage", "durationSeconds": 120, "abortAfterSeconds": 60}),
                    "spec.abortAfterSeconds must be longer than spec.durationSeconds",
                ),
                (
                    "store-outage without an object store",
                    json!({"database": "single", "scenario": "store-outage"}),
                    "spec.scenario: store-outage needs a Database with an object store, and single has none",
                ),
                (
                    "partition-primary on a single instance",
                    json!({"database": "single", "scenario": "partition-primary"}),
                    "spec.scenario: partition-primary needs a Database with at least 2 instances, and single has 1",
                ),
            ];
            let mut wrong = Vec::new();
            for (what, spec, field) in bad {
                match apply_value(&client, Some(&ns), drill("bad", spec), &apply).await {
                    Ok(_) => wrong.push(format!("{what} was admitted")),
                    Err(e) if !e.to_string().contains(field) => {
                        wrong.push(format!("{what}: {e} does not name {field:?}"))
                    }
                    Err(_) => {}
                }
            }
            assert!(wrong.is_empty(), "{wrong:#?}");
            let drills: Api<Drill> = Api::namespaced(client.clone(), &ns);
            assert!(drills.get_opt("bad").await?.is_none(), "a refused Drill was stored");
            Ok(())
        },
    )
    .await;
}

/// A valid Drill created as v1alpha1 is admitted and reads back as v1 with
/// the same spec, and as v1alpha1 as written: the API server converted it
/// both ways through the operator's webhook. Then its Database cannot
/// change, its schedule can.
#[tokio::test]
async fn a_v1alpha1_drill_reads_back_as_v1_unchanged() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-drill-conv",
        Duration::from_secs(180),
        |client, ns| async move {
            apply_value(
                &client,
                Some(&ns),
                database(
                    "pair",
                    json!({"version": "17", "instances": 2, "storage": {"size": "1Gi"}}),
                ),
                &PatchParams::apply(tusk_e2e::MANAGER),
            )
            .await?;
            let spec = json!({
                "database": "pair", "scenario": "freeze-primary", "durationSeconds": 15,
                "schedule": "0 4 * * *", "windowMinutes": 30, "dryRun": true,
                "abortAfterSeconds": 240,
                "guards": {"maxLagBytes": 1048576},
                "expect": {"maxWriteOutageSeconds": 12.5, "maxLostWrites": 0, "maxSecondsToReady": 90}
            });
            let alpha_resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("tusk.dev", "v1alpha1", "Drill"),
                "drills",
            );
            let alpha: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &alpha_resource);
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "tusk.dev/v1alpha1", "kind": "Drill",
                "metadata": {"name": "frozen"}, "spec": spec
            }))?;
            alpha.create(&PostParams::default(), &object).await?;

            let drills: Api<Drill> = Api::namespaced(client.clone(), &ns);
            let v1 = drills.get("frozen").await?;
            assert_eq!(serde_json::to_value(&v1.spec)?, spec);
            let annotations = v1.metadata.annotations.unwrap_or_default();
            assert!(
                !annotations.contains_key("conversion.tusk.dev/v1-fields"),
                "{annotations:?}"
            );
            let back = alpha.get("frozen").await?;
            assert_eq!(back.data["spec"], spec);

            let patch = |spec: Value| Patch::Merge(json!({"spec": spec}));
            let refused = drills
                .patch("frozen", &PatchParams::default(), &patch(json!({"database": "other"})))
                .await
                .err()
                .ok_or("a change of spec.database was admitted")?
                .to_string();
            assert!(refused.contains("spec.database is immutable"), "{refused}");
            drills
                .patch("frozen", &PatchParams::default(), &patch(json!({"schedule": "0 3 * * 1"})))
                .await?;
            assert_eq!(
                drills.get("frozen").await?.spec.schedule.as_deref(),
                Some("0 3 * * 1")
            );
            Ok(())
        },
    )
    .await;
}
