//! PostgreSQL's serving certificate from cert-manager (issue #27,
//! `spec.tls.certManager`), with cert-manager's controller running on the
//! cluster (`e2e/cluster certmanager-up`; `up` starts it).
//!
//! - `served_from_cert_manager_and_renewed_by_reload`: in its own namespace
//!   the test makes a CA with cert-manager alone (a self-signed `Issuer`, a
//!   CA `Certificate`, a CA `Issuer` over its Secret: nothing cluster-wide);
//!   a 2-instance Database names the CA Issuer. An application pod with the
//!   `-app` Secret connects with `sslmode=verify-full` through `-rw`; every
//!   instance presents the certificate in cert-manager's Secret (its serial,
//!   verified against the Secret's `ca.crt` for the name `<db>-rw`). A
//!   renewal triggered as `cmctl renew` does (the Certificate's `Issuing`
//!   condition set, reason `ManuallyTriggered`) gives a new serial that
//!   every instance presents in a handshake, with no restart (postmaster PID
//!   and restart count unchanged). A second Database naming an Issuer that
//!   does not exist gets the `Certificates` condition naming
//!   `spec.tls.certManager.issuerRef` and the Issuer, and no pod.
//!
//!   cargo test --manifest-path e2e/Cargo.toml --test cert_manager -- --nocapture

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tusk::api::v1::Database;
use tusk::resources::cert_manager::{api_resource, issuer_resource};
use tusk::tls::CertInfo;
use tusk_e2e::faults::{main_container, postmaster_pid};
use tusk_e2e::tls::{app_ca, presented, secret_text};
use tusk_e2e::writer::instance_pods;
use tusk_e2e::{
    MANAGER, Result, apply_value, database, in_namespace, install_operator, run_pod, wait_for,
    wait_ready,
};

const DB: &str = "pg";
/// A Database whose issuer does not exist.
const ORPHAN: &str = "nope";
/// How long cert-manager and a reload may take.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(300);

/// Fails, saying how to fix it, when the cluster does not serve
/// cert-manager's Certificates.
async fn cert_manager_installed(client: &Client) -> Result<()> {
    let certificates: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
    match certificates.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "cert-manager is not installed on this cluster ({e}): run `sudo e2e/cluster certmanager-up` \
             (e2e/cluster up starts it)"
        )
        .into()),
    }
}

/// A self-signed Issuer, a CA Certificate it issues, and a CA Issuer over
/// that CA's Secret, all in `ns`; waits for the CA Issuer to be Ready.
async fn ca_issuer(client: &Client, ns: &str) -> Result<()> {
    let params = PatchParams::apply(MANAGER).force();
    for object in [
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
               "metadata": {"name": "selfsigned"}, "spec": {"selfSigned": {}}}),
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
               "metadata": {"name": "e2e-ca"},
               "spec": {"isCA": true, "commonName": "tusk e2e CA", "secretName": "e2e-ca",
                        "duration": "720h",
                        "privateKey": {"algorithm": "ECDSA", "size": 256},
                        "issuerRef": {"name": "selfsigned", "kind": "Issuer", "group": "cert-manager.io"}}}),
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
               "metadata": {"name": "ca"}, "spec": {"ca": {"secretName": "e2e-ca"}}}),
    ] {
        apply_value(client, Some(ns), object, &params).await?;
    }
    let issuers: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &issuer_resource("Issuer"));
    wait_for(&issuers, "ca", CHANGE_TIMEOUT, |i| ready(i) == Some(true)).await?;
    Ok(())
}

/// The `Ready` condition of a cert-manager object.
fn ready(object: &DynamicObject) -> Option<bool> {
    object
        .data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| c["status"] == "True")
}

/// The serial of the certificate in cert-manager's Secret for `DB`.
async fn secret_serial(client: &Client, ns: &str) -> Result<String> {
    let pem = secret_text(client, ns, &format!("{DB}-server-tls"), "tls.crt").await?;
    Ok(CertInfo::parse(&pem)?.serial)
}

/// Each instance's postmaster PID and restart count.
async fn processes(client: &Client, ns: &str) -> Result<BTreeMap<String, (Option<u32>, i32)>> {
    let mut out = BTreeMap::new();
    for pod in instance_pods(client, ns, DB).await? {
        let name = pod.name_any();
        let pid = postmaster_pid(client, ns, &name).await?;
        let (_, restarts) = main_container(client, ns, &name).await?;
        out.insert(name, (pid, restarts));
    }
    Ok(out)
}

/// What `cmctl renew` does: the Certificate's `Issuing` condition set true
/// (reason `ManuallyTriggered`) on its status; cert-manager issues anew.
async fn trigger_renewal(client: &Client, ns: &str, name: &str) -> Result<()> {
    let certificates: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &api_resource());
    let current = certificates.get(name).await?;
    let mut conditions: Vec<Value> = current
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "Issuing");
    conditions.push(json!({
        "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
        "message": "Certificate re-issuance manually triggered",
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "observedGeneration": current.metadata.generation,
    }));
    certificates
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": conditions}})),
        )
        .await?;
    Ok(())
}

/// The `Certificates` condition of Database `name` once it is `False`.
async fn certificates_false(client: &Client, ns: &str, name: &str) -> Result<(String, String)> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let db = wait_for(&dbs, name, CHANGE_TIMEOUT, |db| {
        db.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Certificates" && c.status == "False")
        })
    })
    .await?;
    let condition = db
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == "Certificates")
        .ok_or("no Certificates condition")?;
    Ok((condition.reason.clone(), condition.message.clone()))
}

#[tokio::test]
async fn served_from_cert_manager_and_renewed_by_reload() {
    let client = tusk_e2e::client().await;
    if let Err(e) = cert_manager_installed(&client).await {
        panic!("{e}");
    }
    install_operator(&client).await;
    in_namespace("tls-cm", Duration::from_secs(900), |client, ns| async move {
        ca_issuer(&client, &ns).await?;
        let params = PatchParams::apply(MANAGER);
        let spec = |issuer: &str| {
            json!({"version": "17", "instances": 2, "storage": {"size": "1Gi"},
                   "tls": {"certManager": {"issuerRef": {"name": issuer}}}})
        };
        apply_value(&client, Some(&ns), database(DB, spec("ca")), &params).await?;
        apply_value(&client, Some(&ns), database(ORPHAN, spec("absent")), &params).await?;
        let db = wait_ready(&client, &ns, DB, 2).await?;
        let tls = db.status.as_ref().and_then(|s| s.tls.clone()).ok_or("no status.tls")?;
        assert_eq!(
            serde_json::to_value(tls.source)?,
            json!("cert-manager"),
            "status.tls.source"
        );

        // The Certificate Tusk wrote, owned by the Database, and its Secret.
        let certificates: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &api_resource());
        let certificate = certificates.get(&format!("{DB}-server")).await?;
        assert_eq!(ready(&certificate), Some(true), "{:?}", certificate.data["status"]);
        assert_eq!(certificate.data["spec"]["secretName"], format!("{DB}-server-tls"));
        assert!(
            certificate.owner_references().iter().any(|o| o.kind == "Database" && o.name == DB),
            "{:?}",
            certificate.metadata.owner_references
        );
        let ca = secret_text(&client, &ns, "e2e-ca", "tls.crt").await?;
        assert_eq!(
            CertInfo::parse(&app_ca(&client, &ns, DB).await?)?.fingerprint,
            CertInfo::parse(&ca)?.fingerprint,
            "the -app Secret's ca.crt is the issuer's CA"
        );

        // An application connects with verify-full through -rw.
        let script = format!(
            r#"export PGSSLROOTCERT=/app/ca.crt PGPASSWORD="$(cat /app/password)" PGCONNECT_TIMEOUT=5
echo "rw $(psql "host={DB}-rw.{ns}.svc user=$(cat /app/username) dbname=$(cat /app/dbname) sslmode=verify-full" \
  -Atc "select ssl, version from pg_stat_ssl where pid = pg_backend_pid()" 2>&1 | tr '\n' ' ')"
"#
        );
        let (phase, out) = run_pod(
            &client,
            &ns,
            "app",
            "localhost/postgres:17",
            &["bash", "-c", &script],
            json!([{"name": "app", "secret": {"secretName": format!("{DB}-app")}}]),
            json!([{"name": "app", "mountPath": "/app", "readOnly": true}]),
        )
        .await?;
        println!("application pod ({phase}):\n{out}");
        assert!(out.contains("rw t|TLSv1.3"), "{out}");

        // Every instance presents cert-manager's certificate.
        let rw = format!("{DB}-rw");
        let first = secret_serial(&client, &ns).await?;
        let seen = presented(&client, &ns, DB, &ca, Some(&rw)).await?;
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen.values().all(|c| c.serial == first), "served {seen:?}, Secret has {first}");
        let running = processes(&client, &ns).await?;

        // A renewal by cert-manager, picked up by a reload.
        let start = Instant::now();
        trigger_renewal(&client, &ns, &format!("{DB}-server")).await?;
        let renewed = loop {
            let serial = secret_serial(&client, &ns).await?;
            if serial != first {
                break serial;
            }
            if start.elapsed() > CHANGE_TIMEOUT {
                return Err("cert-manager did not reissue the certificate".into());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let issued = start.elapsed();
        loop {
            let seen = presented(&client, &ns, DB, &ca, Some(&rw)).await?;
            if seen.len() == 2 && seen.values().all(|c| c.serial == renewed) {
                break;
            }
            if start.elapsed() > CHANGE_TIMEOUT {
                return Err(format!("the renewed certificate {renewed} is not served: {seen:?}").into());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        println!(
            "cert-manager: reissued after {:.1}s, served by every instance after {:.1}s",
            issued.as_secs_f64(),
            start.elapsed().as_secs_f64()
        );
        assert_eq!(processes(&client, &ns).await?, running, "a renewal must not restart anything");

        // An Issuer that does not exist: named on the condition, no pod.
        let (reason, message) = certificates_false(&client, &ns, ORPHAN).await?;
        println!("{ORPHAN}: Certificates {reason}: {message}");
        assert_eq!(reason, "IssuerNotReady");
        assert!(message.starts_with("spec.tls.certManager.issuerRef: Issuer \"absent\" does not exist"), "{message}");
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let orphan_pods = pods
            .list(&ListParams::default().labels(&format!("tusk.dev/database={ORPHAN}")))
            .await?;
        assert!(orphan_pods.items.is_empty(), "a pod without its certificate started");
        Ok(())
    })
    .await;
}
