//! Faults that leave PostgreSQL's processes in place but useless (issue #30,
//! drills):
//!
//! - a primary whose PostgreSQL is frozen (every postgres process stopped
//!   with SIGSTOP from inside its container, for 40 s) while its instance
//!   manager runs on and renews the lease: the manager notices that
//!   PostgreSQL no longer answers, kills it and releases the lease, a replica
//!   takes over well before the freeze ends, no acknowledged write is lost,
//!   exactly one instance is writable, and once the freeze ends the old
//!   primary is a replica of the new one;
//! - a store outage injected through the manager's drill endpoint
//!   (`POST /drill/store-outage`): archiving fails while it lasts (the
//!   manager's `/status` says so), resumes by itself at its deadline, and
//!   every segment closed meanwhile reaches the archive.
//!
//! The measured outage and times are printed, never asserted.
//!   cargo test --manifest-path e2e/Cargo.toml --test frozen -- --nocapture

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, LogParams, PatchParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tusk::api::status::DatabasePhase;
use tusk::api::v1::Database;
use tusk::contract::drill::{FaultResponse, path as drill_path};
use tusk::contract::{Status, path};
use tusk::resources::{PGDATA, POSTGRES_CONTAINER};
use tusk_e2e::faults;
use tusk_e2e::store::{archive_all, spec_with_store, sql_on, store_up};
use tusk_e2e::tls::secret_text;
use tusk_e2e::writer::{
    acknowledged, current_primary, nothing_lost, outage, start_writing, unix_now,
};
use tusk_e2e::{
    Result, apply_value, database, in_namespace, install_operator, pod_ready, wait_ready,
};

const DB: &str = "pg";
const INSTANCES: u32 = 3;
/// How long the primary's PostgreSQL stays frozen.
const FREEZE: Duration = Duration::from_secs(40);

fn instance(serial: u32) -> String {
    format!("{DB}-{serial}")
}

/// SIGSTOP (`STOP`) or SIGCONT (`CONT`) to every postgres process of the
/// instance's container, the postmaster first (stopped, it forks nothing
/// new); a second pass catches what it forked meanwhile. Prints the pids.
async fn signal_all(client: &Client, ns: &str, pod: &str, signal: &str) -> Result<String> {
    let script = format!(
        "{{ pm=$(head -n 1 {PGDATA}/postmaster.pid 2>/dev/null); \
         [ -n \"$pm\" ] && kill -{signal} \"$pm\" 2>/dev/null && echo \"$pm\"; \
         for pass in 1 2; do for d in /proc/[0-9]*; do \
           [ \"$(cat \"$d/comm\" 2>/dev/null)\" = postgres ] && kill -{signal} \"${{d#/proc/}}\" 2>/dev/null && echo \"${{d#/proc/}}\"; \
         done; done; }} | sort -un | tr '\\n' ' '"
    );
    let out = faults::exec(client, ns, pod, POSTGRES_CONTAINER, &["sh", "-c", &script]).await?;
    if !out.success {
        return Err(format!("{pod}: kill -{signal} failed: {}", out.stderr.trim()).into());
    }
    Ok(out.stdout.trim().to_owned())
}

/// Waits until the Database is Ready at its generation with every instance
/// ready and its primary satisfying `wanted`; returns the primary.
async fn settled(client: &Client, ns: &str, wanted: impl Fn(&str) -> bool) -> Result<String> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let db = dbs.get(DB).await?;
        let status = db.status.clone().unwrap_or_default();
        let mut pods_ready = true;
        for serial in 1..=INSTANCES {
            pods_ready &= pods
                .get_opt(&instance(serial))
                .await?
                .is_some_and(|p| pod_ready(&p));
        }
        let ready = status.phase == Some(DatabasePhase::Ready)
            && status.ready_instances == Some(3)
            && status.observed_generation == db.metadata.generation
            && pods_ready;
        if let Some(primary) = status.current_primary.as_deref()
            && ready
            && wanted(primary)
        {
            return Ok(primary.to_owned());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("{DB} did not settle within 300 s: {status:?}").into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn a_frozen_primary_is_replaced_well_before_the_freeze_ends_and_rejoins() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-frozen",
        Duration::from_secs(900),
        |client, ns| async move {
            let spec = json!({
                "version": "17", "instances": INSTANCES, "storage": {"size": "1Gi"},
                "replication": {"mode": "sync", "minSyncReplicas": 1}
            });
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            apply_value(&client, Some(&ns), database(DB, spec), &apply).await?;
            wait_ready(&client, &ns, DB, 3).await?;
            start_writing(&client, &ns, DB).await?;

            let old = current_primary(&client, &ns, DB).await?;
            let stopped = signal_all(&client, &ns, &old, "STOP").await?;
            let fault = unix_now();
            let what = format!("primary {old} frozen (pids {stopped})");
            println!("{what}: for {} s", FREEZE.as_secs());

            // While the freeze lasts: do writes resume through -rw, on
            // another primary?
            let mut resumed: Option<f64> = None;
            let mut promoted: Option<(f64, String)> = None;
            while unix_now() - fault < FREEZE.as_secs_f64() {
                if resumed.is_none()
                    && let Some((_, at)) = acknowledged(&client, &ns)
                        .await?
                        .into_iter()
                        .find(|(_, at)| *at > fault)
                {
                    resumed = Some(at - fault);
                }
                if promoted.is_none()
                    && let Ok(p) = current_primary(&client, &ns, DB).await
                    && p != old
                {
                    promoted = Some((unix_now() - fault, p));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let continued = signal_all(&client, &ns, &old, "CONT").await?;
            let thawed = unix_now();
            println!(
                "{what}: continued after {:.1} s (pids {continued})",
                thawed - fault
            );
            let during = acknowledged(&client, &ns)
                .await?
                .into_iter()
                .filter(|(_, at)| (fault..thawed).contains(at))
                .count();
            let Some(resumed) = resumed else {
                return Err(format!(
                    "{what}: no write was acknowledged through {DB}-rw during the {} s freeze \
                     (recorded primary after it: {:?})",
                    FREEZE.as_secs(),
                    promoted
                )
                .into());
            };
            let Some((promoted_at, new)) = promoted else {
                return Err(format!(
                    "{what}: writes resumed {resumed:.1} s after the freeze began, yet no other \
                     instance was recorded primary while it lasted"
                )
                .into());
            };
            println!(
                "{what}: {new} recorded primary {promoted_at:.1} s after the freeze began; \
                 writes resumed {resumed:.1} s after it, {during} acknowledged during the freeze"
            );

            let primary = settled(&client, &ns, |p| p != old).await?;
            let (stopped_at, resumed_at) = outage(&client, &ns, fault).await?;
            println!(
                "{what}: writes stopped {stopped_at:+.2} s and resumed {resumed_at:+.2} s after \
                 the freeze began (an outage of {:.2} s); all ready {:.1} s after it, primary {primary}",
                resumed_at - stopped_at,
                unix_now() - fault
            );
            let rows = nothing_lost(&client, &ns, DB).await?;
            println!("{what}: {rows} acknowledged rows, none lost; {primary} alone is writable");

            // The old primary is a replica of the new one.
            let recovery = faults::psql_local(&client, &ns, &old, &["SELECT pg_is_in_recovery()"])
                .await?;
            if recovery.stdout.trim() != "t" {
                return Err(format!(
                    "{what}: after the freeze {old} is not a replica: pg_is_in_recovery() = {:?} {}",
                    recovery.stdout.trim(),
                    recovery.stderr.trim()
                )
                .into());
            }
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let logs = pods
                .logs(
                    &old,
                    &LogParams {
                        container: Some(POSTGRES_CONTAINER.to_owned()),
                        ..LogParams::default()
                    },
                )
                .await?;
            let how = if logs.contains("rewound onto the new primary") {
                "by pg_rewind"
            } else if logs.contains("cloned the primary") {
                "by a new clone"
            } else {
                "without a rewind (nothing diverged)"
            };
            let yielded = logs.contains("PostgreSQL has not answered for a lease duration");
            println!(
                "{what}: {old} rejoined as a replica {how}; its manager {} the hang",
                if yielded { "reported" } else { "did not report" }
            );
            Ok(())
        },
    )
    .await;
}

/// One call to an instance manager's API from this host: over TLS with the
/// instance's own API certificate (a member of its Database may call every
/// path) and the instance token. The status code and the body.
async fn manager(
    client: &Client,
    ns: &str,
    pod: &str,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String)> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let ip = pods
        .get(pod)
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .ok_or_else(|| format!("{pod} has no IP"))?;
    let secret = format!("{pod}-tls");
    let ca = secret_text(client, ns, &secret, "client-ca.crt").await?;
    let cert = secret_text(client, ns, &secret, "api.crt").await?;
    let key = secret_text(client, ns, &secret, "api.key").await?;
    let token = secret_text(client, ns, &format!("{DB}-token"), "password").await?;
    let config = tusk::tls::rustls_config::client_config(&ca, Some((&cert, &key)), pod)
        .map_err(|e| format!("TLS client for {pod}: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(config);
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect((ip.as_str(), tusk::contract::PORT)).await?;
        let name = rustls::pki_types::ServerName::try_from(pod.to_owned())?;
        let mut tls = connector.connect(name, tcp).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {pod}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            token.trim(),
            body.len()
        );
        tls.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        // A server closing without close_notify ends the body just as well.
        let _ = tls.read_to_end(&mut answer).await;
        Ok::<_, tusk_e2e::Error>(answer)
    };
    let answer = tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .map_err(|_| format!("{method} {path} on {pod}: no answer within 30 s"))??;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{method} {path} on {pod}: not an HTTP answer: {text}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("{method} {path} on {pod}: no status in {head}"))?;
    Ok((code, body.to_owned()))
}

/// The manager's `/status`.
async fn status(client: &Client, ns: &str, pod: &str) -> Result<Status> {
    let (code, body) = manager(client, ns, pod, "GET", path::STATUS, "").await?;
    if code != 200 {
        return Err(format!("GET /status on {pod}: {code} {body}").into());
    }
    Ok(serde_json::from_str(&body)?)
}

/// How long the store outage lasts.
const STORE_OUTAGE: u32 = 30;

#[tokio::test]
async fn a_store_outage_holds_archiving_back_until_its_deadline_and_loses_no_wal() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-store-outage",
        Duration::from_secs(900),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let (endpoint, bucket) = store_up(&ns).await?;
            apply_value(
                &client,
                Some(&ns),
                database(DB, spec_with_store(1, &endpoint, &bucket)),
                &apply,
            )
            .await?;
            wait_ready(&client, &ns, DB, 1).await?;
            let pod = instance(1);
            sql_on(&client, &ns, DB, "rw", "CREATE TABLE filler (x text)").await?;
            archive_all(&client, &ns, DB).await?;

            let body = json!({"seconds": STORE_OUTAGE}).to_string();
            let (code, answer) =
                manager(&client, &ns, &pod, "POST", drill_path::STORE_OUTAGE, &body).await?;
            let began = unix_now();
            if code != 200 {
                return Err(format!("POST {}: {code} {answer}", drill_path::STORE_OUTAGE).into());
            }
            let answer: FaultResponse = serde_json::from_str(&answer)?;
            if !answer.active || answer.until.is_none() {
                return Err(format!("the store outage is not in effect: {answer:?}").into());
            }
            println!("store outage until {:?}", answer.until);

            // Segments closed during the outage: archiving fails, they stay
            // `.ready`, the manager says why.
            let mut closed = Vec::new();
            let mut failing = None;
            while failing.is_none() && unix_now() - began < f64::from(STORE_OUTAGE) - 5.0 {
                sql_on(
                    &client,
                    &ns,
                    DB,
                    "rw",
                    "INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 100)",
                )
                .await?;
                let name = sql_on(&client, &ns, DB, "rw", "SELECT pg_walfile_name(pg_switch_wal())")
                    .await?;
                closed.push(name.trim().to_owned());
                let seen = status(&client, &ns, &pod).await?;
                let archiver = seen.postgres.archiver.clone().unwrap_or_default();
                if archiver.failing() && seen.faults.as_ref().is_some_and(|f| f.store_outage.is_some()) {
                    failing = Some((unix_now() - began, archiver.last_error.clone()));
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            let Some((after, why)) = failing else {
                return Err(format!(
                    "archiving did not fail during the store outage (segments closed: {closed:?}): {:?}",
                    status(&client, &ns, &pod).await?.postgres.archiver
                )
                .into());
            };
            println!("archiving failing {after:.1} s into the outage: {why:?}");
            let ready = sql_on(
                &client,
                &ns,
                DB,
                "rw",
                "SELECT count(*) FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready'",
            )
            .await?;
            println!("{} segments waiting (.ready) during the outage", ready.trim());
            if ready.trim() == "0" {
                return Err("no segment is waiting for the archive during the outage".into());
            }

            // The deadline passes: the manager ends the outage by itself and
            // archiving catches up, every segment closed meanwhile included.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
            loop {
                let seen = status(&client, &ns, &pod).await?;
                if seen.faults.is_none() {
                    println!("the outage ended {:.1} s after it began", unix_now() - began);
                    break;
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(format!("the store outage outlived its deadline: {:?}", seen.faults).into());
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            archive_all(&client, &ns, DB).await?;
            let last = closed.last().ok_or("no segment closed during the outage")?;
            let archived = sql_on(
                &client,
                &ns,
                DB,
                "rw",
                &format!(
                    "SELECT last_archived_wal >= '{last}', failed_count > 0, \
                     (SELECT count(*) FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready') \
                     FROM pg_stat_archiver"
                ),
            )
            .await?;
            println!(
                "after the outage: {} (archived up to the last segment closed during it, \
                 failures seen, segments still waiting)",
                archived.trim()
            );
            if !archived.trim().starts_with("t|t|") {
                return Err(format!(
                    "after the outage the archive does not hold {last} or no failure was counted: {archived}"
                )
                .into());
            }
            let seen = status(&client, &ns, &pod).await?;
            if seen.postgres.archiver.as_ref().is_some_and(|a| a.failing()) {
                return Err(format!("archiving still failing: {:?}", seen.postgres.archiver).into());
            }
            Ok(())
        },
    )
    .await;
}
