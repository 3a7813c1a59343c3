//! Component test: `GET /metrics` of real `tusk instance` managers — a primary
//! and a streaming replica on loopback — checked for the series and values
//! PostgreSQL itself reports, and by `promtool check metrics`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

mod instance_support;
mod promtool_support;

use std::collections::BTreeMap;
use std::time::Duration;

use instance_support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const READY: Duration = Duration::from_secs(90);

/// A GET with an optional `Accept` header; (status, headers, body).
async fn get(port: u16, path: &str, accept: Option<&str>) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{accept}\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response))
        .await
        .expect("a response within 30 s")
        .expect("read");
    let text = String::from_utf8(response).expect("UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("headers and body");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    (code, head.to_ascii_lowercase(), body.to_owned())
}

/// A scrape as `series -> value`, where series is `name{labels}` as exposed.
struct Scrape {
    body: String,
    series: BTreeMap<String, f64>,
}

impl Scrape {
    async fn of(manager: &Manager) -> Scrape {
        let (code, head, body) = get(manager.http_port, "/metrics", None).await;
        assert_eq!(code, 200, "{body}\n{}", manager.logs());
        assert!(
            head.contains("content-type: text/plain; version=0.0.4"),
            "{head}"
        );
        let series = body
            .lines()
            .filter(|line| !line.starts_with('#') && !line.is_empty())
            .map(|line| {
                let (series, value) = line.rsplit_once(' ').expect("series and value");
                let value = value
                    .parse()
                    .unwrap_or_else(|_| panic!("not a number in {line:?}"));
                (series.to_owned(), value)
            })
            .collect();
        Scrape { body, series }
    }

    fn value(&self, series: &str) -> f64 {
        *self
            .series
            .get(series)
            .unwrap_or_else(|| panic!("no {series} in\n{}", self.body))
    }
}

/// The primary reports itself primary, its standby's lag, its databases and
/// connections; the replica reports itself replica with its own lag; both pass
/// promtool; and a PostgreSQL that does not answer still gets a 200 with up 0.
async fn metrics_of_a_primary_and_its_streaming_replica(pg: Pg) {
    let dir = TestDir::new(&format!("metrics{}", pg.major));
    let mut primary = Manager::start(&dir, Options::primary(&pg, "orders-1"));
    primary.wait_ready(READY).await;
    let mut replica = Manager::start(&dir, Options::replica(&pg, "orders-2", primary.pg_port));
    replica.wait_ready(READY).await;
    let su = superuser(primary.pg_port).await;
    su.batch_execute("CREATE TABLE filler AS SELECT generate_series(1, 1000) AS id")
        .await
        .expect("write on the primary");

    // The standby shows up once it streams.
    let primary_scrape = eventually("the primary to list its standby", READY, || {
        let primary = &primary;
        async move {
            let scrape = Scrape::of(primary).await;
            scrape
                .series
                .contains_key("tusk_pg_standby_replay_lag_bytes{standby=\"orders-2\"}")
                .then_some(scrape)
        }
    })
    .await;
    promtool_support::check_metrics(&primary_scrape.body);
    assert_eq!(primary_scrape.value("tusk_pg_up"), 1.0);
    assert_eq!(primary_scrape.value("tusk_pg_role{role=\"primary\"}"), 1.0);
    assert_eq!(primary_scrape.value("tusk_pg_role{role=\"replica\"}"), 0.0);
    assert!(primary_scrape.value("tusk_pg_standby_replay_lag_bytes{standby=\"orders-2\"}") >= 0.0);
    assert!(
        !primary_scrape.body.contains("tusk_pg_replication_lag_"),
        "a primary has no replica-side lag:\n{}",
        primary_scrape.body
    );
    let app_size: i64 = su
        .query_one("SELECT pg_database_size('app')", &[])
        .await
        .expect("size of app")
        .get(0);
    let exposed = primary_scrape.value("tusk_pg_database_size_bytes{datname=\"app\"}");
    assert!(exposed > 0.0, "{}", primary_scrape.body);
    // Sizes move a little as the server works; the same order is what counts.
    assert!(
        (exposed - app_size as f64).abs() < 0.1 * app_size as f64,
        "exposed {exposed}, pg_database_size {app_size}"
    );
    assert!(
        !primary_scrape.body.contains("datname=\"template"),
        "{}",
        primary_scrape.body
    );
    let max_connections: String = su
        .query_one("SHOW max_connections", &[])
        .await
        .expect("SHOW")
        .get(0);
    assert_eq!(
        primary_scrape.value("tusk_pg_max_connections"),
        max_connections.parse::<f64>().expect("a number")
    );
    // This test's own session sits idle on the primary.
    assert!(primary_scrape.value("tusk_pg_connections{state=\"idle\"}") >= 1.0);
    assert!(primary_scrape.value("tusk_pg_connections{state=\"idle in transaction\"}") >= 0.0);
    let xid_age: i32 = su
        .query_one("SELECT max(age(datfrozenxid)) FROM pg_database", &[])
        .await
        .expect("xid age")
        .get(0);
    let exposed_age = primary_scrape.value("tusk_pg_xid_age");
    assert!(
        exposed_age > 0.0 && exposed_age <= f64::from(xid_age),
        "exposed {exposed_age}, now {xid_age}"
    );
    let archived: i64 = su
        .query_one("SELECT archived_count FROM pg_stat_archiver", &[])
        .await
        .expect("pg_stat_archiver")
        .get(0);
    assert_eq!(
        primary_scrape.value("tusk_pg_wal_archived_total"),
        archived as f64
    );
    assert!(
        primary_scrape
            .series
            .contains_key("tusk_pg_wal_archive_last_failure_timestamp_seconds"),
        "{}",
        primary_scrape.body
    );

    let replica_scrape = eventually("the replica to report its lag", READY, || {
        let replica = &replica;
        async move {
            let scrape = Scrape::of(replica).await;
            scrape
                .series
                .contains_key("tusk_pg_replication_lag_seconds")
                .then_some(scrape)
        }
    })
    .await;
    promtool_support::check_metrics(&replica_scrape.body);
    assert_eq!(replica_scrape.value("tusk_pg_up"), 1.0);
    assert_eq!(replica_scrape.value("tusk_pg_role{role=\"replica\"}"), 1.0);
    assert_eq!(replica_scrape.value("tusk_pg_role{role=\"primary\"}"), 0.0);
    assert!(replica_scrape.value("tusk_pg_replication_lag_bytes") >= 0.0);
    assert!(replica_scrape.value("tusk_pg_replication_lag_seconds") >= 0.0);
    assert!(replica_scrape.value("tusk_pg_database_size_bytes{datname=\"app\"}") > 0.0);
    assert!(
        !replica_scrape.body.contains("tusk_pg_standby_replay_lag"),
        "{}",
        replica_scrape.body
    );

    // Prometheus asks for OpenMetrics and gets it.
    let (code, head, body) = get(
        replica.http_port,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        head.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(
        body.contains("tusk_pg_up 1\n") && body.ends_with("# EOF\n"),
        "{body}"
    );

    // A postmaster that answers nothing (stopped with SIGSTOP, so that the
    // manager does not restart it) makes the scrape time out: 200, up 0.
    let postmaster = Pid::from_raw(primary.postmaster_pid().expect("postmaster.pid"));
    kill(postmaster, Signal::SIGSTOP).expect("SIGSTOP the postmaster");
    let resume = Resume(postmaster);
    // Scrapes within a second share one sample, so the first scrapes may still
    // answer from the sample taken before the SIGSTOP; a new sample is what
    // counts, and a stopped postmaster cannot hand out a connection for one:
    // the answer (200, up 0) can only come from the manager giving up on it.
    let down = eventually("a scrape of the stopped postmaster", READY, || {
        let primary = &primary;
        async move {
            let scrape = Scrape::of(primary).await;
            (scrape.value("tusk_pg_up") == 0.0).then_some(scrape)
        }
    })
    .await;
    drop(resume);
    promtool_support::check_metrics(&down.body);
    assert_eq!(down.value("tusk_pg_role{role=\"primary\"}"), 0.0);
    assert!(
        !down.body.contains("tusk_pg_wal_archived_total"),
        "no counter values are made up:\n{}",
        down.body
    );
    // And once it answers again, so does the scrape.
    eventually("the primary to answer again", READY, || {
        let primary = &primary;
        async move { (Scrape::of(primary).await.value("tusk_pg_up") == 1.0).then_some(()) }
    })
    .await;

    replica.stop();
    primary.stop();
}
per_major!(metrics_of_a_primary_and_its_streaming_replica);

/// Sends SIGCONT when dropped, so a failing assertion never leaves a stopped
/// postmaster behind.
struct Resume(Pid);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}
