//! Component tests: a replica cloned by `tusk instance`, streaming from the
//! primary, and promoted through the API.

mod instance_support;

use std::time::Duration;

use instance_support::*;

const READY: Duration = Duration::from_secs(90);

async fn primary_and_replica(dir: &TestDir) -> (Manager, Manager) {
    let mut primary = Manager::start(dir, Options::primary("orders-1"));
    primary.wait_ready(READY).await;
    let mut replica = Manager::start(dir, Options::replica("orders-2", primary.pg_port));
    replica.wait_ready(READY).await;
    (primary, replica)
}

/// (2) The clone streams through its own slot; a row written on the primary is
/// read on the replica; /status reports replica, LSNs and lag.
#[tokio::test(flavor = "multi_thread")]
async fn a_cloned_replica_streams_from_the_primary() {
    let dir = TestDir::new("replication");
    let (primary, replica) = primary_and_replica(&dir).await;
    let su = superuser(primary.pg_port).await;

    let (state, slot_active) = eventually("the replica to stream", READY, || {
        let su = &su;
        async move {
            let row = su
                .query_opt(
                    "SELECT r.state::text, s.active FROM pg_stat_replication r \
                     JOIN pg_replication_slots s ON s.active_pid = r.pid \
                     WHERE r.application_name = 'orders-2' AND s.slot_name = 'orders_2'",
                    &[],
                )
                .await
                .ok()??;
            let state: String = row.get(0);
            (state == "streaming").then(|| (state, row.get::<_, bool>(1)))
        }
    })
    .await;
    assert_eq!(state, "streaming");
    assert!(slot_active);

    su.batch_execute("CREATE TABLE orders (id int); INSERT INTO orders VALUES (42)")
        .await
        .expect("write on the primary");
    let replica_su = superuser(replica.pg_port).await;
    let id: i32 = eventually("the row to reach the replica", READY, || {
        let c = &replica_su;
        async move {
            c.query_opt("SELECT id FROM orders", &[])
                .await
                .ok()
                .flatten()
                .map(|row| row.get(0))
        }
    })
    .await;
    assert_eq!(id, 42);
    let err = replica_su
        .batch_execute("INSERT INTO orders VALUES (1)")
        .await
        .expect_err("a replica is read-only");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION),
        "{err:?}"
    );

    let status = replica.status().await;
    assert_eq!(status["role"], "replica", "{status}");
    assert_eq!(status["streaming"], true, "{status}");
    assert!(
        status["lag_bytes"].as_i64().is_some_and(|lag| lag >= 0),
        "{status}"
    );
    assert!(
        status["received_lsn"]
            .as_str()
            .is_some_and(|l| l.contains('/')),
        "{status}"
    );
    assert!(
        status["replayed_lsn"]
            .as_str()
            .is_some_and(|l| l.contains('/')),
        "{status}"
    );
    assert_eq!(status["timeline"], 1);
    let primary_status = primary.status().await;
    assert_eq!(
        status["system_identifier"],
        primary_status["system_identifier"]
    );

    // The replication password is never written into PGDATA.
    let auto =
        std::fs::read_to_string(replica.pgdata.join("postgresql.auto.conf")).unwrap_or_default();
    let tusk =
        std::fs::read_to_string(replica.pgdata.join("postgresql.tusk.conf")).expect("tusk conf");
    assert!(!auto.contains(REPLICATION_PASSWORD) && !tusk.contains(REPLICATION_PASSWORD));
    assert!(tusk.contains("primary_slot_name = 'orders_2'"), "{tusk}");
}

/// (5) /promote needs the token; with it the replica becomes a writable primary
/// on a new timeline.
#[tokio::test(flavor = "multi_thread")]
async fn promote_requires_the_token_and_makes_the_replica_primary() {
    let dir = TestDir::new("promote");
    let (mut primary, replica) = primary_and_replica(&dir).await;

    let (code, _) = http(replica.http_port, "POST", "/promote", None, None)
        .await
        .expect("POST /promote");
    assert_eq!(code, 401);
    let (code, _) = http(
        replica.http_port,
        "POST",
        "/promote",
        Some("wrong-token"),
        None,
    )
    .await
    .expect("POST /promote");
    assert_eq!(code, 401);
    assert_eq!(replica.status().await["role"], "replica");

    // The old primary goes away first, as in a failover.
    assert!(primary.stop().expect("running").success());

    let (code, body) = http(replica.http_port, "POST", "/promote", Some(TOKEN), None)
        .await
        .expect("POST /promote");
    assert_eq!(code, 200, "{body}\n{}", replica.logs());
    let promoted: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(promoted["role"], "primary", "{promoted}");
    assert_eq!(promoted["timeline"], 2, "{promoted}");

    let su = superuser(replica.pg_port).await;
    su.batch_execute(
        "CREATE TABLE after_promotion (id int); INSERT INTO after_promotion VALUES (1)",
    )
    .await
    .expect("the promoted instance accepts writes");
    let tusk =
        std::fs::read_to_string(replica.pgdata.join("postgresql.tusk.conf")).expect("tusk conf");
    assert!(
        !tusk.contains("primary_conninfo"),
        "re-rendered as a primary:\n{tusk}"
    );
    assert_eq!(replica.status().await["role"], "primary");
}

/// A manager without a configured token refuses every mutation.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_token_mutations_are_refused() {
    let dir = TestDir::new("notoken");
    let mut manager = Manager::start(
        &dir,
        Options {
            token: None,
            ..Options::primary("orders-1")
        },
    );
    manager.wait_ready(READY).await;
    for path in ["/promote", "/reload"] {
        let (code, body) = http(manager.http_port, "POST", path, Some("anything"), None)
            .await
            .expect("POST");
        assert_eq!(code, 403, "{path}: {body}");
        assert!(body.contains("TUSK_INSTANCE_TOKEN"), "{body}");
    }
}
