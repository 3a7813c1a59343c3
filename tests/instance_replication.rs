//! Component tests: a replica cloned by `tusk instance`, streaming from the
//! primary, and promoted through the API.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

mod instance_support;

use std::time::Duration;

use instance_support::*;

const READY: Duration = Duration::from_secs(90);

async fn primary_and_replica(pg: &Pg, dir: &TestDir) -> (Manager, Manager) {
    let mut primary = Manager::start(dir, Options::primary(pg, "orders-1"));
    primary.wait_ready(READY).await;
    let mut replica = Manager::start(dir, Options::replica(pg, "orders-2", primary.pg_port));
    replica.wait_ready(READY).await;
    (primary, replica)
}

/// (2) The clone streams through its own slot; a row written on the primary is
/// read on the replica; /status reports replica, LSNs and lag.
async fn a_cloned_replica_streams_from_the_primary(pg: Pg) {
    let dir = TestDir::new(&format!("replication{}", pg.major));
    let (primary, replica) = primary_and_replica(&pg, &dir).await;
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
    assert_eq!(
        status["api_version"],
        tusk::contract::API_VERSION,
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
per_major!(a_cloned_replica_streams_from_the_primary);

/// (5) /promote needs the token; with it the replica becomes a writable primary
/// on a new timeline.
async fn promote_requires_the_token_and_makes_the_replica_primary(pg: Pg) {
    let dir = TestDir::new(&format!("promote{}", pg.major));
    let (mut primary, replica) = primary_and_replica(&pg, &dir).await;

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
    // A refused promote that started one anyway, in the background, would not
    // show yet in /status; a write on the primary that still reaches the
    // replica after the refusals shows it is following.
    superuser(primary.pg_port)
        .await
        .batch_execute(
            "CREATE TABLE before_promotion (id int); INSERT INTO before_promotion VALUES (1)",
        )
        .await
        .expect("write on the primary");
    let replica_su = superuser(replica.pg_port).await;
    eventually(
        "the replica to replay the write after the refusals",
        READY,
        || {
            let c = &replica_su;
            async move {
                c.query_opt("SELECT id FROM before_promotion", &[])
                    .await
                    .ok()
                    .flatten()
                    .map(|_| ())
            }
        },
    )
    .await;
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
per_major!(promote_requires_the_token_and_makes_the_replica_primary);

/// A manager without a configured token refuses every mutation.
async fn without_a_token_mutations_are_refused(pg: Pg) {
    let dir = TestDir::new(&format!("notoken{}", pg.major));
    let mut manager = Manager::start(
        &dir,
        Options {
            token: None,
            ..Options::primary(&pg, "orders-1")
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
per_major!(without_a_token_mutations_are_refused);

/// The operator's levers on a running pair: a quorum of named standbys
/// (`POST /sync`), a clean restart (`POST /restart`), and dropping the slot of a
/// replica that is gone (`POST /slots/drop`), which `/status` lists as inactive.
async fn sync_standbys_restart_and_slot_cleanup_through_the_api(pg: Pg) {
    let dir = TestDir::new(&format!("levers{}", pg.major));
    let (primary, mut replica) = primary_and_replica(&pg, &dir).await;
    let su = superuser(primary.pg_port).await;

    let sync = r#"{"min": 1, "standbys": ["orders-2"]}"#;
    let (code, _) = http(primary.http_port, "POST", "/sync", None, Some(sync))
        .await
        .expect("POST /sync");
    assert_eq!(code, 401, "no token, no change");
    let (code, body) = http(primary.http_port, "POST", "/sync", Some(TOKEN), Some(sync))
        .await
        .expect("POST /sync");
    assert_eq!(code, 200, "{body}");
    // pg_reload_conf() only signals the postmaster; backends pick it up shortly.
    let names: String = eventually("the reload to take effect", READY, || {
        let su = &su;
        async move {
            let names: String = su
                .query_one("SHOW synchronous_standby_names", &[])
                .await
                .ok()?
                .get(0);
            (!names.is_empty()).then_some(names)
        }
    })
    .await;
    assert_eq!(names, r#"ANY 1 ("orders-2")"#);
    let status = primary.status().await;
    assert_eq!(status["sync"]["min"], 1, "{status}");
    assert_eq!(status["sync"]["standbys"][0], "orders-2", "{status}");
    let sync_state: String = eventually("the standby to be a quorum member", READY, || {
        let su = &su;
        async move {
            let row = su
                .query_opt(
                    "SELECT sync_state::text FROM pg_stat_replication WHERE application_name = 'orders-2'",
                    &[],
                )
                .await
                .ok()??;
            let state: String = row.get(0);
            (state == "quorum").then_some(state)
        }
    })
    .await;
    assert_eq!(sync_state, "quorum");
    // With the standby streaming, a commit comes back.
    tokio::time::timeout(
        Duration::from_secs(30),
        su.batch_execute("CREATE TABLE synced (id int); INSERT INTO synced VALUES (1)"),
    )
    .await
    .expect("a synchronous commit with a standby returns")
    .expect("commit");

    // A restart replaces the postmaster and the replica streams again.
    let before = replica.postmaster_pid().expect("postmaster.pid");
    let (code, body) = http(replica.http_port, "POST", "/restart", Some(TOKEN), None)
        .await
        .expect("POST /restart");
    assert_eq!(code, 202, "{body}");
    eventually("a new postmaster", READY, || {
        let replica = &replica;
        async move { replica.postmaster_pid().filter(|pid| *pid != before) }
    })
    .await;
    replica.wait_ready(READY).await;
    eventually("the restarted replica to stream", READY, || {
        let replica = &replica;
        async move { (replica.status().await["streaming"] == true).then_some(()) }
    })
    .await;

    // Synchronous replication off, then the replica goes: its slot turns inactive
    // and can be dropped; a slot in use would have been kept.
    let (code, _) = http(
        primary.http_port,
        "POST",
        "/sync",
        Some(TOKEN),
        Some(r#"{"min": 0, "standbys": []}"#),
    )
    .await
    .expect("POST /sync");
    assert_eq!(code, 200);
    assert!(primary.status().await.get("sync").is_none());
    let (code, body) = http(
        primary.http_port,
        "POST",
        "/slots/drop",
        Some(TOKEN),
        Some(r#"{"slot": "orders_2"}"#),
    )
    .await
    .expect("POST /slots/drop");
    assert_eq!(code, 200);
    assert!(
        body.contains(r#""dropped":false"#),
        "an active slot was dropped: {body}"
    );
    replica.stop();
    eventually("the slot to be listed inactive", READY, || {
        let primary = &primary;
        async move {
            let status = primary.status().await;
            (status["inactive_slots"][0] == "orders_2").then_some(())
        }
    })
    .await;
    let (code, body) = http(
        primary.http_port,
        "POST",
        "/slots/drop",
        Some(TOKEN),
        Some(r#"{"slot": "orders_2"}"#),
    )
    .await
    .expect("POST /slots/drop");
    assert_eq!(code, 200);
    assert!(body.contains(r#""dropped":true"#), "{body}");
    let slots: i64 = su
        .query_one("SELECT count(*) FROM pg_replication_slots", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(slots, 0);
}
per_major!(sync_standbys_restart_and_slot_cleanup_through_the_api);
