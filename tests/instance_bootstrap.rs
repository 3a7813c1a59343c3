//! Component tests: bootstrapping a primary with `tusk instance` and rendering its
//! configuration, against real PostgreSQL processes on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

mod instance_support;

use std::time::Duration;

use instance_support::*;

const READY: Duration = Duration::from_secs(60);

/// (1) initdb through the manager: /status says primary, the application
/// database and owner exist, the owner logs in over TCP with SCRAM, and SIGTERM
/// stops everything with exit status 0.
async fn initdb_bootstraps_a_primary_with_the_app_database_and_owner(pg: Pg) {
    let dir = TestDir::new(&format!("bootstrap{}", pg.major));
    let mut manager = Manager::start(&dir, Options::primary(&pg, "orders-1"));
    manager.wait_ready(READY).await;

    let status = manager.status().await;
    assert_eq!(status["role"], "primary", "{status}");
    assert_eq!(status["instance"], "orders-1");
    assert_eq!(status["timeline"], 1);
    assert_eq!(
        status["version_num"].as_i64().map(|v| v / 10000),
        Some(pg.major.into())
    );
    assert!(
        status["current_lsn"]
            .as_str()
            .is_some_and(|l| l.contains('/')),
        "{status}"
    );
    assert!(
        status["system_identifier"]
            .as_str()
            .is_some_and(|s| s.parse::<u64>().is_ok()),
        "{status}"
    );
    assert_eq!(status["pending_restart"], false);

    // The owner logs in with its password over TCP, into its own database.
    let app = connect(manager.pg_port, "app", APP_PASSWORD, "app")
        .await
        .expect("the app owner logs in with its password");
    let row = app
        .query_one(
            "SELECT current_user::text, current_database()::text, \
                    (SELECT pg_get_userbyid(datdba)::text FROM pg_database WHERE datname = 'app')",
            &[],
        )
        .await
        .expect("query as app");
    assert_eq!(row.get::<_, String>(0), "app");
    assert_eq!(row.get::<_, String>(1), "app");
    assert_eq!(row.get::<_, String>(2), "app");
    app.batch_execute("CREATE TABLE owned_by_app (id int)")
        .await
        .expect("the owner can create tables in its database");

    // Stored as SCRAM verifiers, and a wrong password is refused.
    let su = superuser(manager.pg_port).await;
    let scram: i64 = su
        .query_one(
            "SELECT count(*) FROM pg_authid WHERE rolname IN ('app', 'postgres', 'tusk_replication') \
             AND rolpassword LIKE 'SCRAM-SHA-256$%'",
            &[],
        )
        .await
        .expect("query pg_authid")
        .get(0);
    assert_eq!(scram, 3);
    let replication: bool = su
        .query_one(
            "SELECT rolreplication FROM pg_roles WHERE rolname = 'tusk_replication'",
            &[],
        )
        .await
        .expect("query pg_roles")
        .get(0);
    assert!(replication);
    let checksums: String = su
        .query_one("SHOW data_checksums", &[])
        .await
        .expect("SHOW")
        .get(0);
    assert_eq!(checksums, "on");
    let err = connect(manager.pg_port, "app", "wrong", "app")
        .await
        .expect_err("a wrong password is refused");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::INVALID_PASSWORD),
        "{err:?}"
    );

    let exit = manager.stop().expect("the manager was running");
    assert!(exit.success(), "SIGTERM must end in exit 0, got {exit}");
    assert!(
        manager.logs().contains("database system is shut down"),
        "postgres was shut down cleanly:\n{}",
        manager.logs()
    );
    assert!(manager.postmaster_pid().is_none(), "postmaster.pid is gone");
}
per_major!(initdb_bootstraps_a_primary_with_the_app_database_and_owner);

/// (3) A user parameter lands in SHOW; /reload applies a new one (and says when a
/// restart is needed); an owned parameter is refused with a message naming it.
async fn user_parameters_are_rendered_and_owned_ones_refused(pg: Pg) {
    let dir = TestDir::new(&format!("params{}", pg.major));
    let mut manager = Manager::start(
        &dir,
        Options {
            parameters: r#"{"work_mem": "7MB", "application_name": "it's quoted"}"#.to_owned(),
            ..Options::primary(&pg, "orders-1")
        },
    );
    manager.wait_ready(READY).await;
    let su = superuser(manager.pg_port).await;
    let show = |name: &'static str| {
        let su = &su;
        async move {
            su.query_one(&format!("SHOW {name}"), &[])
                .await
                .expect("SHOW")
                .get::<_, String>(0)
        }
    };
    assert_eq!(show("work_mem").await, "7MB");
    assert_eq!(show("wal_level").await, "replica");
    assert_eq!(show("password_encryption").await, "scram-sha-256");
    assert_eq!(show("max_wal_senders").await, "10");

    // A reloadable change through the API.
    let (code, body) = http(
        manager.http_port,
        "POST",
        "/reload",
        Some(TOKEN),
        Some(r#"{"parameters": {"work_mem": "9MB"}}"#),
    )
    .await
    .expect("POST /reload");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""change":"reload""#), "{body}");
    let su2 = superuser(manager.pg_port).await;
    let work_mem: String = su2
        .query_one("SHOW work_mem", &[])
        .await
        .expect("SHOW")
        .get(0);
    assert_eq!(work_mem, "9MB");

    // A postmaster-level change: reported as needing a restart.
    let (code, body) = http(
        manager.http_port,
        "POST",
        "/reload",
        Some(TOKEN),
        Some(r#"{"parameters": {"work_mem": "9MB", "max_connections": "50"}}"#),
    )
    .await
    .expect("POST /reload");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""change":"restart""#), "{body}");
    assert!(body.contains(r#""pending_restart":true"#), "{body}");

    // An owned parameter through the API: 400, naming it; nothing changes.
    let (code, body) = http(
        manager.http_port,
        "POST",
        "/reload",
        Some(TOKEN),
        Some(r#"{"parameters": {"listen_addresses": "*"}}"#),
    )
    .await
    .expect("POST /reload");
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("listen_addresses") && body.contains("managed by Tusk"),
        "{body}"
    );
    // The refusal is the whole answer (the handler validates before it writes),
    // so the file PostgreSQL would read next is checked right away.
    let tusk_conf =
        std::fs::read_to_string(manager.pgdata.join("postgresql.tusk.conf")).expect("tusk conf");
    assert!(
        tusk_conf.contains("listen_addresses = '127.0.0.1'\n") && !tusk_conf.contains("'*'"),
        "{tusk_conf}"
    );
    let (code, _) = http(manager.http_port, "POST", "/reload", None, None)
        .await
        .expect("POST /reload");
    assert_eq!(code, 401, "no token, no reload");
    drop(manager);

    // An owned parameter at start: the manager refuses to start and says why,
    // before touching the data directory.
    let mut refused = Manager::start(
        &dir,
        Options {
            parameters: r#"{"port": "6000"}"#.to_owned(),
            ..Options::primary(&pg, "orders-9")
        },
    );
    let child = refused.child.as_mut().expect("child");
    let status = eventually("the manager to exit", Duration::from_secs(20), || {
        let exited = child.try_wait().ok().flatten();
        async move { exited }
    })
    .await;
    assert!(!status.success());
    let logs = refused.logs();
    assert!(
        logs.contains("spec.postgresql.parameters.port is managed by Tusk"),
        "the error names the parameter:\n{logs}"
    );
    assert!(!refused.pgdata.exists(), "no data directory was created");
}
per_major!(user_parameters_are_rendered_and_owned_ones_refused);
