//! TLS on the cluster (issue #27): clients, replication and rotation.
//!
//! - `clients_verify_full_and_plaintext_is_refused`: a 2-instance Database;
//!   an application pod with the `-app` Secret mounted connects with
//!   `sslmode=verify-full` through `-rw` and `-ro` (and PostgreSQL 17's direct
//!   TLS negotiation), its `uri` works as given, a plaintext connection is
//!   refused by `pg_hba`; every replication connection is encrypted and
//!   authenticated by the replication role's certificate (`pg_stat_ssl`);
//!   the certificate each instance presents in a handshake (made from this
//!   host to the pod) is the one `status.tls` names.
//! - `renewal_and_ca_rotation_under_a_writer`: a 3-instance sync Database
//!   under the writer: a leaf renewal (renewBefore widened) gives every
//!   instance a new serial without a restart; a CA rotation (`rotateCA`) runs
//!   its stages to Stable with every instance presenting a leaf of the new CA
//!   and the `-app` Secret's CA verifying it; no acknowledged write lost, the
//!   longest pause printed (`tls: …`, never asserted; `bench/tls`).
//! - `a_user_provided_server_certificate`: a Secret the test issues itself is
//!   served as is; one that does not cover the Services' names is reported
//!   on the `Certificates` condition naming the Secret, and nothing restarts.
//! - `the_app_role_logs_in_with_its_certificate_only`: a 2-instance Database
//!   gets `clientCertificates: true`; every instance is replaced (pg_hba
//!   comes from the pod's environment), the `-app` Secret gains the role's
//!   certificate (common name = the role, from the CA in its `ca.crt`, its
//!   key also as PKCS#8 DER in `tls.pk8`), and an application pod mounting
//!   that Secret connects through `-rw` and `-ro` with `sslmode=verify-full`
//!   and the certificate (its `uri` too), while its password alone is
//!   refused.
//!
//!   cargo test --manifest-path e2e/Cargo.toml --test tls -- --nocapture

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tusk::api::status::DatabasePhase;
use tusk::api::v1::Database;
use tusk::tls::{Authority, CertInfo, names};
use tusk_e2e::faults::{main_container, postmaster_pid};
use tusk_e2e::store::sql_on;
use tusk_e2e::tls::{app_ca, presented};
use tusk_e2e::writer::{instance_pods, longest_pause, nothing_lost, start_writing, unix_now};
use tusk_e2e::{
    MANAGER, Result, apply_value, database, in_namespace, install_operator, run_pod, wait_ready,
};

const DB: &str = "pg";
/// How long a change of certificates may take to be in effect everywhere:
/// each stage waits for the kubelet to bring the Secrets into the pods.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(600);

/// The first line of `text` that starts with `label `, without the label.
fn line<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(label).and_then(|l| l.strip_prefix(' ')))
        .unwrap_or("")
}

#[tokio::test]
async fn clients_verify_full_and_plaintext_is_refused() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("tls-clients", Duration::from_secs(900), |client, ns| async move {
        let spec = json!({"version": "17", "instances": 2, "storage": {"size": "1Gi"}});
        apply_value(&client, Some(&ns), database(DB, spec), &PatchParams::apply(MANAGER)).await?;
        let db = wait_ready(&client, &ns, DB, 2).await?;

        // An application pod in the namespace with the -app Secret mounted,
        // as the README tells applications to connect.
        let script = format!(
            r#"export PGSSLROOTCERT=/app/ca.crt PGPASSWORD="$(cat /app/password)" PGCONNECT_TIMEOUT=5
q="select ssl, version from pg_stat_ssl where pid = pg_backend_pid()"
base="user=$(cat /app/username) dbname=$(cat /app/dbname)"
one() {{ echo "$1 $(psql "$2" -Atc "$q" 2>&1 | tr '\n' ' ')"; }}
one rw "host={DB}-rw.{ns}.svc $base sslmode=verify-full"
one ro "host={DB}-ro.{ns}.svc $base sslmode=verify-full"
one direct "host={DB}-rw.{ns}.svc $base sslmode=verify-full sslnegotiation=direct"
one uri "$(cat /app/uri)"
one plaintext "host={DB}-rw.{ns}.svc $base sslmode=disable"
one address "host=$(getent hosts {DB}-rw.{ns}.svc | cut -d' ' -f1) $base sslmode=verify-full"
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
        for label in ["rw", "ro", "direct", "uri"] {
            assert_eq!(line(&out, label).trim(), "t|TLSv1.3", "{label}: {out}");
        }
        let plaintext = line(&out, "plaintext");
        assert!(
            plaintext.contains("pg_hba.conf rejects connection") && plaintext.contains("no encryption"),
            "a plaintext connection must be refused by pg_hba: {plaintext}"
        );
        let address = line(&out, "address");
        assert!(
            address.contains("does not match host name"),
            "verify-full by an address the certificate does not name must fail: {address}"
        );

        // Replication: encrypted, and authenticated by the replication
        // role's certificate (pg_hba allows it nothing else).
        let replication = sql_on(
            &client,
            &ns,
            DB,
            "rw",
            "SELECT count(*), bool_and(s.ssl), string_agg(DISTINCT s.client_dn, ',') \
             FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)",
        )
        .await?;
        assert_eq!(replication, "1|t|/CN=tusk_replication", "pg_stat_ssl of the walsenders");

        // What each instance presents, seen from this host, is what status says.
        let ca = app_ca(&client, &ns, DB).await?;
        let seen = presented(&client, &ns, DB, &ca, None).await?;
        let tls = db.status.and_then(|s| s.tls).ok_or("no status.tls")?;
        assert_eq!(seen.len(), 2, "{seen:?}");
        for instance in &tls.instances {
            let cert = seen.get(&instance.name).ok_or("an instance not presenting")?;
            assert_eq!(instance.serial.as_deref(), Some(cert.serial.as_str()), "{instance:?}");
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn the_app_role_logs_in_with_its_certificate_only() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("tls-client-cert", Duration::from_secs(1200), |client, ns| async move {
        let spec = json!({"version": "17", "instances": 2, "storage": {"size": "1Gi"}});
        apply_value(&client, Some(&ns), database(DB, spec), &PatchParams::apply(MANAGER)).await?;
        wait_ready(&client, &ns, DB, 2).await?;
        let before = pod_uids(&client, &ns).await?;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let app_secret = secrets.get(&format!("{DB}-app")).await?;
        assert!(
            !app_secret.data.unwrap_or_default().contains_key("tls.crt"),
            "no certificate before it is asked for"
        );

        // Turned on: pg_hba is written from the pod's environment, so every
        // instance is replaced, one at a time.
        let start = unix_now();
        let generation = patch_tls(&client, &ns, json!({"clientCertificates": true})).await?;
        let dbs: Api<Database> = Api::namespaced(client.clone(), &ns);
        let deadline = Instant::now() + CHANGE_TIMEOUT;
        loop {
            let db = dbs.get(DB).await?;
            let status = db.status.unwrap_or_default();
            let certificates = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Certificates")
                .map(|c| (c.status.clone(), c.reason.clone()));
            // A pod being replaced is missing for a moment: not yet.
            let now = pod_uids(&client, &ns).await.unwrap_or_default();
            let replaced = now.len() == 2 && now.iter().all(|(name, uid)| before.get(name) != Some(uid));
            if status.phase == Some(DatabasePhase::Ready)
                && status.observed_generation == Some(generation)
                && status.ready_instances == Some(2)
                && replaced
                && certificates == Some(("True".to_owned(), "InEffect".to_owned()))
            {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "clientCertificates not in effect within {CHANGE_TIMEOUT:?}: phase {:?}, \
                     Certificates {certificates:?}, pods {now:?} (before {before:?})",
                    status.phase
                )
                .into());
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        println!(
            "clientCertificates in effect (every instance replaced) after {:.1}s",
            unix_now() - start
        );

        // The certificate: the role's, from the CA applications verify the
        // server with, its key also as PKCS#8 DER.
        let app_secret = secrets.get(&format!("{DB}-app")).await?;
        let data = app_secret.data.unwrap_or_default();
        let text = |key: &str| -> Result<String> {
            data.get(key)
                .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                .ok_or_else(|| format!("{DB}-app has no {key}").into())
        };
        let cert = CertInfo::parse(&text("tls.crt")?)?;
        let ca = CertInfo::parse(&text("ca.crt")?)?;
        assert_eq!(cert.common_name.as_deref(), Some(text("username")?.as_str()));
        assert!(cert.issued_by(&ca), "{cert:?} not issued by {ca:?}");
        assert!(cert.not_after <= Timestamp::now() + SignedDuration::from_hours(7 * 24));
        assert!(tusk::tls::key_matches(&text("tls.crt")?, &text("tls.key")?));
        {
            use rustls::pki_types::PrivatePkcs8KeyDer;
            use rustls::pki_types::pem::PemObject;
            let key = PrivatePkcs8KeyDer::from_pem_slice(text("tls.key")?.as_bytes())
                .map_err(|e| format!("tls.key: {e}"))?;
            let pk8 = data.get("tls.pk8").ok_or("no tls.pk8")?;
            assert_eq!(key.secret_pkcs8_der(), pk8.0.as_slice(), "tls.pk8 is tls.key in DER");
        }

        // An application pod with the -app Secret mounted (libpq takes a
        // root-owned key its group reads: mode 0440 and the pod's fsGroup).
        let script = format!(
            r#"export PGSSLROOTCERT=/app/ca.crt PGSSLCERT=/app/tls.crt PGSSLKEY=/app/tls.key PGCONNECT_TIMEOUT=5
q="select current_user, ssl, client_dn from pg_stat_ssl where pid = pg_backend_pid()"
base="user=$(cat /app/username) dbname=$(cat /app/dbname) sslmode=verify-full"
one() {{ echo "$1 $(psql "$2" -Atc "$q" 2>&1 | tr '
' ' ')"; }}
one rw "host={DB}-rw.{ns}.svc $base"
one ro "host={DB}-ro.{ns}.svc $base"
one uri "$(cat /app/uri)"
export PGPASSWORD="$(cat /app/password)"
one password "host={DB}-rw.{ns}.svc $base sslcertmode=disable"
"#
        );
        let (phase, out) = run_pod(
            &client,
            &ns,
            "app",
            "localhost/postgres:17",
            &["bash", "-c", &script],
            json!([{"name": "app", "secret": {"secretName": format!("{DB}-app"), "defaultMode": 0o440}}]),
            json!([{"name": "app", "mountPath": "/app", "readOnly": true}]),
        )
        .await?;
        println!("application pod ({phase}):\n{out}");
        for label in ["rw", "ro", "uri"] {
            assert_eq!(line(&out, label).trim(), "app|t|/CN=app", "{label}: {out}");
        }
        let password = line(&out, "password");
        assert!(
            password.contains("connection requires a valid client certificate"),
            "a password without the certificate must be refused: {password}"
        );
        Ok(())
    })
    .await;
}

/// Each instance pod's uid, by name: a replaced pod has a new one.
async fn pod_uids(client: &Client, ns: &str) -> Result<BTreeMap<String, String>> {
    Ok(instance_pods(client, ns, DB)
        .await?
        .into_iter()
        .map(|pod| (pod.name_any(), pod.uid().unwrap_or_default()))
        .collect())
}

/// Merge-patches `spec.tls` and returns the new generation.
async fn patch_tls(client: &Client, ns: &str, tls: Value) -> Result<i64> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let patched = dbs
        .patch(
            DB,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"tls": tls}})),
        )
        .await?;
    patched
        .metadata
        .generation
        .ok_or_else(|| "no generation".into())
}

/// Each instance's postmaster PID and postgres container restart count:
/// what a reload leaves alone and a restart does not.
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

/// Waits until the Database is Ready at `generation` with `stage` Stable and
/// `done` holds for what its instances present (verified against the -app
/// Secret's CA); returns that and every stage seen on the way.
async fn settled(
    client: &Client,
    ns: &str,
    generation: i64,
    instances: usize,
    done: impl Fn(&BTreeMap<String, tusk::tls::probe::Presented>, &str) -> bool,
) -> Result<(
    BTreeMap<String, tusk::tls::probe::Presented>,
    BTreeSet<String>,
)> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + CHANGE_TIMEOUT;
    let mut stages = BTreeSet::new();
    loop {
        let db = dbs.get(DB).await?;
        let status = db.status.as_ref();
        let stage = status
            .and_then(|s| s.tls.as_ref())
            .map(|t| format!("{:?}", t.stage))
            .unwrap_or_default();
        stages.insert(stage.clone());
        let ready = status.is_some_and(|s| {
            s.phase == Some(DatabasePhase::Ready) && s.observed_generation == Some(generation)
        });
        if ready && stage == "Stable" {
            let ca = app_ca(client, ns, DB).await?;
            if let Ok(seen) = presented(client, ns, DB, &ca, None).await
                && seen.len() == instances
                && done(&seen, &ca)
            {
                return Ok((seen, stages));
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "generation {generation} not settled within {CHANGE_TIMEOUT:?} (stages seen {stages:?}): {:?}",
                status.and_then(|s| s.tls.as_ref())
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[tokio::test]
async fn renewal_and_ca_rotation_under_a_writer() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("tls-rotation", Duration::from_secs(1500), |client, ns| async move {
        let spec = json!({
            "version": "17", "instances": 3, "storage": {"size": "1Gi"},
            "replication": {"mode": "sync", "minSyncReplicas": 1}
        });
        apply_value(&client, Some(&ns), database(DB, spec), &PatchParams::apply(MANAGER)).await?;
        wait_ready(&client, &ns, DB, 3).await?;
        start_writing(&client, &ns, DB).await?;
        let ca = app_ca(&client, &ns, DB).await?;
        let before = presented(&client, &ns, DB, &ca, None).await?;
        let running = processes(&client, &ns).await?;

        // A shorter lifetime than the certificates carry: every leaf is
        // reissued, and every PostgreSQL presents its new one after a reload.
        let start = unix_now();
        let generation = patch_tls(&client, &ns, json!({"certificateLifetime": "2d"})).await?;
        let (renewed, _) = settled(&client, &ns, generation, 3, |seen, _| {
            seen.iter()
                .all(|(name, cert)| before.get(name).is_some_and(|b| b.serial != cert.serial))
        })
        .await?;
        let renewal = unix_now() - start;
        for cert in renewed.values() {
            let lifetime = cert.not_after.duration_since(Timestamp::now());
            assert!(lifetime <= SignedDuration::from_hours(48), "{cert:?}");
        }
        assert_eq!(processes(&client, &ns).await?, running, "a renewal must not restart anything");

        // A CA rotation, stage by stage.
        let old_ca = CertInfo::parse(&ca)?;
        let start = unix_now();
        let generation = patch_tls(&client, &ns, json!({"rotateCA": "e2e-1"})).await?;
        let (rotated, stages) = settled(&client, &ns, generation, 3, |seen, ca| {
            CertInfo::parse_bundle(ca).is_ok_and(|bundle| {
                bundle.len() == 1
                    && bundle[0].fingerprint != old_ca.fingerprint
                    && seen
                        .values()
                        .all(|c| c.issuer_fingerprint.as_deref() == Some(bundle[0].fingerprint.as_str()))
            })
        })
        .await?;
        let rotation = unix_now() - start;
        println!("stages seen during the CA rotation: {stages:?}");
        for stage in ["TrustingBoth", "Reissuing", "DroppingOld"] {
            assert!(stages.contains(stage), "stage {stage} never seen: {stages:?}");
        }
        // The old CA verifies nobody any more.
        assert!(presented(&client, &ns, DB, &ca, None).await.is_err(), "{rotated:?}");
        assert_eq!(processes(&client, &ns).await?, running, "a CA rotation must not restart anything");
        let end = unix_now();
        let renewal_pause = longest_pause(&client, &ns, start - renewal - 1.0, start).await?;
        let rotation_pause = longest_pause(&client, &ns, start, end).await?;
        let rows = nothing_lost(&client, &ns, DB).await?;
        println!(
            "tls: leaf renewal in effect after {renewal:.1}s, longest write pause {renewal_pause:.2}s; \
             CA rotation in effect after {rotation:.1}s, longest write pause {rotation_pause:.2}s; \
             {rows} acknowledged writes, none lost"
        );
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn a_user_provided_server_certificate() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "tls-user",
        Duration::from_secs(900),
        |client, ns| async move {
            let now = Timestamp::now();
            let authority =
                Authority::generate("e2e user CA", SignedDuration::from_hours(24 * 30), now)?;
            let names = names::service_names(DB, &ns, "cluster.local", &[]);
            let secret = |leaf: &tusk::tls::Leaf| -> Result<Secret> {
                Ok(serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "user-server"},
                    "type": "kubernetes.io/tls",
                    "stringData": {
                        "tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem,
                        "ca.crt": authority.cert_pem()
                    }
                }))?)
            };
            let leaf = authority.issue_server(&names, SignedDuration::from_hours(24 * 7), now)?;
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
            secrets
                .create(&PostParams::default(), &secret(&leaf)?)
                .await?;
            let spec = json!({
                "version": "17", "instances": 2, "storage": {"size": "1Gi"},
                "tls": {"server": {"secretName": "user-server"}}
            });
            apply_value(
                &client,
                Some(&ns),
                database(DB, spec),
                &PatchParams::apply(MANAGER),
            )
            .await?;
            wait_ready(&client, &ns, DB, 2).await?;
            let served = CertInfo::parse(&leaf.cert_pem)?;
            assert_eq!(
                app_ca(&client, &ns, DB).await?.trim(),
                authority.cert_pem().trim()
            );
            let rw = format!("{DB}-rw");
            let seen = presented(&client, &ns, DB, authority.cert_pem(), Some(&rw)).await?;
            assert!(seen.values().all(|c| c.serial == served.serial), "{seen:?}");
            let replication = sql_on(
                &client,
                &ns,
                DB,
                "rw",
                "SELECT count(*) FROM pg_stat_replication",
            )
            .await?;
            assert_eq!(
                replication, "1",
                "the standby streams with a user server certificate"
            );
            let running = processes(&client, &ns).await?;

            // A certificate that does not name the Services: reported, not served.
            let narrow = authority.issue_server(
                std::slice::from_ref(&rw),
                SignedDuration::from_hours(24 * 7),
                now,
            )?;
            secrets
                .replace("user-server", &PostParams::default(), &{
                    let mut s = secret(&narrow)?;
                    s.metadata.resource_version =
                        secrets.get("user-server").await?.metadata.resource_version;
                    s
                })
                .await?;
            let dbs: Api<Database> = Api::namespaced(client.clone(), &ns);
            let deadline = Instant::now() + CHANGE_TIMEOUT;
            let condition = loop {
                let db = dbs.get(DB).await?;
                let found = db.status.as_ref().and_then(|s| {
                    s.conditions
                        .iter()
                        .find(|c| c.type_ == "Certificates" && c.status == "False")
                        .cloned()
                });
                if let Some(c) = found {
                    break c;
                }
                if Instant::now() > deadline {
                    return Err("the Certificates condition never turned False".into());
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            };
            println!("Certificates: {} {}", condition.reason, condition.message);
            assert!(condition.message.contains("user-server"), "{condition:?}");
            assert!(
                condition.message.contains(&format!("{DB}-ro")),
                "{condition:?}"
            );
            let seen = presented(&client, &ns, DB, authority.cert_pem(), Some(&rw)).await?;
            assert!(
                seen.values().all(|c| c.serial == served.serial),
                "the narrow certificate was served: {seen:?}"
            );
            assert_eq!(
                processes(&client, &ns).await?,
                running,
                "a bad Secret must not restart anything"
            );
            Ok(())
        },
    )
    .await;
}
