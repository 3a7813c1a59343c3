//! The harness itself, on the cluster: a test that fails by panicking (a
//! failed `assert!`, an `expect`) still gets its namespace dumped and deleted,
//! and still fails.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use serde_json::json;
use tusk_e2e::{client, failure_reports_dir, in_namespace, panic_message};

#[tokio::test]
async fn a_panicking_test_is_dumped_and_its_namespace_deleted() {
    let seen = Arc::new(Mutex::new(None::<String>));
    let inside = Arc::clone(&seen);
    let run = in_namespace(
        "e2e-harness",
        Duration::from_secs(60),
        |client, ns| async move {
            *inside.lock().expect("namespace slot") = Some(ns.clone());
            let maps: Api<ConfigMap> = Api::namespaced(client, &ns);
            let map: ConfigMap = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "answer"}, "data": {"answer": "42"}
            }))?;
            let stored = maps.create(&PostParams::default(), &map).await?;
            let answer = stored.data.unwrap_or_default().remove("answer");
            // Fails on purpose, the way a test's own assertion fails.
            assert_eq!(answer.as_deref(), Some("43"), "deliberate failure in {ns}");
            Ok(())
        },
    );
    let payload = AssertUnwindSafe(run)
        .catch_unwind()
        .await
        .expect_err("in_namespace swallowed the test's panic");
    let message = panic_message(payload.as_ref());
    assert!(
        message.contains("deliberate failure"),
        "in_namespace failed with another message: {message:?}"
    );
    let ns = seen
        .lock()
        .expect("namespace slot")
        .clone()
        .expect("the test ran");

    // Dumped: the report names the namespace and the failure.
    let report = failure_reports_dir().join(format!("{ns}.log"));
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no failure report at {}: {e}", report.display()));
    assert!(
        text.starts_with(&format!("=== e2e failure in namespace {ns}: panicked:"))
            && text.contains("deliberate failure")
            && text.contains(&format!("--- events in {ns}")),
        "the report does not describe the failure:\n{text}"
    );
    let _ = std::fs::remove_file(&report);

    // Deleted: asked for before in_namespace failed, and then gone (an
    // empty namespace goes within seconds).
    let namespaces: Api<Namespace> = Api::all(client().await);
    if let Some(namespace) = namespaces.get_opt(&ns).await.expect("get the namespace") {
        assert!(
            namespace.metadata.deletion_timestamp.is_some(),
            "namespace {ns} was left behind"
        );
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while namespaces
        .get_opt(&ns)
        .await
        .expect("get the namespace")
        .is_some()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "namespace {ns} is still terminating after 120s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
