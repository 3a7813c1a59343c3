//! `tusk upgrade check`: `pg_upgrade --check` while the old primary serves.
//!
//! pg_upgrade treats an old data directory with a `postmaster.pid` as "maybe
//! running": it first tries to start a server on it, and only when that
//! fails does it check the live server, through the socket directory and
//! port the file names. From another pod (other PID and IPC namespaces) the
//! running primary's PID is not visible, so that start would SUCCEED and a
//! second postmaster would run on the live data directory (tried: it does).
//! So pg_upgrade never sees the real data directory here: it gets a shadow
//! of it (PG_VERSION, a copy of `global/pg_control`, the empty
//! subdirectories it looks for, no configuration file, so no server can
//! start on it) whose `postmaster.pid` names a live process of this pod and
//! the socket to use: the server's own, or a local one forwarded over TCP
//! (TLS when the primary serves it, see [`forward`]) to the primary's pod.
//!
//! The new cluster is a throwaway `initdb` in the work directory with the
//! old cluster's settings, as `run` will create it.

use std::path::{Path, PathBuf};

use tokio::process::Command;

use super::settings::{self, ClusterSettings};
use super::{Dirs, Error, SUPERUSER, child, command, forward, report, version};

/// Where the old server is reached.
pub enum Target {
    /// Through the socket directory in its postmaster.pid (same host).
    Local,
    /// Over TCP, through a forwarded local socket.
    Tcp {
        host: String,
        port: u16,
        password: Option<String>,
        /// Start TLS to it (it serves TLS and accepts no plaintext TCP).
        tls: Option<PrimaryTls>,
    },
}

/// How the relay verifies the old primary over TLS.
pub struct PrimaryTls {
    /// The name its certificate must carry (`<db>-rw`).
    pub name: String,
    /// The PEM file of the CAs that verify it.
    pub ca_file: PathBuf,
}

/// Subdirectories pg_upgrade requires in a data directory it checks.
const SHADOW_SUBDIRS: &[&str] = &[
    "base",
    "global",
    "pg_commit_ts",
    "pg_dynshmem",
    "pg_logical",
    "pg_multixact",
    "pg_notify",
    "pg_replslot",
    "pg_serial",
    "pg_snapshots",
    "pg_stat",
    "pg_stat_tmp",
    "pg_subtrans",
    "pg_tblspc",
    "pg_twophase",
    "pg_wal",
    "pg_xact",
];

/// Lines of `postmaster.pid`: the data directory is line 2, the port line
/// 4, the first socket directory line 5.
const PID_LINE_PORT: usize = 3;
const PID_LINE_SOCKET_DIR: usize = 4;

pub async fn check(dirs: &Dirs, target: &Target, work: &Path) -> Result<String, Error> {
    let old_bindir = &dirs.old_bindir;
    let new_bindir = super::new_bindir(dirs)?;
    let old_major = version::bindir_major(old_bindir)?;
    let new_major = version::bindir_major(&new_bindir)?;
    let pgdata = &dirs.pgdata;
    match version::data_major(pgdata)? {
        Some(major) if major == old_major => {}
        other => {
            return Err(Error::Refused(format!(
                "{} holds {} but the old programs are PostgreSQL {old_major}",
                pgdata.display(),
                version::describe(other)
            )));
        }
    }
    if new_major <= old_major {
        return Err(Error::Refused(format!(
            "the new programs are PostgreSQL {new_major}, not newer than {old_major}"
        )));
    }
    let pid_file = std::fs::read_to_string(pgdata.join("postmaster.pid")).map_err(|_| {
        Error::Refused(format!(
            "the old server does not run ({} has no postmaster.pid): the check runs against the live primary",
            pgdata.display()
        ))
    })?;
    super::fresh_dir(work)?;
    let shadow = work.join("old");
    let sockets = work.join("sockets");
    std::fs::create_dir_all(&sockets).map_err(Error::io("create", &sockets))?;

    let (socket_dir, port, password, forwarder) = reach(target, &pid_file, &sockets)?;
    build_shadow(pgdata, &shadow, &socket_dir, port)?;

    let control = settings::controldata(old_bindir, &shadow).await?;
    let relay = |error| with_relay_error(error, forwarder.as_ref());
    let client = connect(&socket_dir, port, password.as_deref())
        .await
        .map_err(relay)?;
    let locale = settings::locale(&client, old_major).await?;
    drop(client);
    let settings = ClusterSettings { control, locale };

    let new = work.join("new");
    settings::initdb(&new_bindir, &new, None, &settings, new_major).await?;

    let new_port = if port == 50432 { 50433 } else { 50432 };
    let mut cmd = child::async_command(new_bindir.join("pg_upgrade"));
    cmd.arg("--check")
        .arg("--old-bindir")
        .arg(old_bindir)
        .arg("--new-bindir")
        .arg(&new_bindir)
        .arg("--old-datadir")
        .arg(&shadow)
        .arg("--new-datadir")
        .arg(&new)
        .arg(format!("--username={SUPERUSER}"))
        .arg(format!("--old-port={port}"))
        .arg(format!("--new-port={new_port}"))
        .arg("--socketdir")
        .arg(&sockets)
        .current_dir(work)
        .env("LC_MESSAGES", "C");
    let output = command::output(
        with_password(cmd, password.as_deref()),
        "pg_upgrade --check",
    )
    .await?;
    if !output.success {
        return Err(relay(Error::PgUpgrade(report::quote(
            &format!("pg_upgrade --check from {old_major} to {new_major} failed"),
            &output.stdout,
            &output.stderr,
            report::read_file,
        ))));
    }
    let _ = std::fs::remove_dir_all(work);
    Ok(format!(
        "pg_upgrade --check from {old_major} to {new_major} passed against the running server ({})",
        settings::describe(&settings)
    ))
}

/// Where the old server listens (socket directory and port), the password
/// over TCP, and the forwarder that must live as long as the check.
fn reach(
    target: &Target,
    pid_file: &str,
    sockets: &Path,
) -> Result<(PathBuf, u16, Option<String>, Option<forward::Forwarder>), Error> {
    match target {
        Target::Local => {
            let lines: Vec<&str> = pid_file.lines().collect();
            let port = lines
                .get(PID_LINE_PORT)
                .and_then(|l| l.trim().parse::<u16>().ok());
            let dir = lines
                .get(PID_LINE_SOCKET_DIR)
                .map(|l| l.trim())
                .filter(|l| !l.is_empty());
            let (Some(port), Some(dir)) = (port, dir) else {
                return Err(Error::Parse {
                    what: "the old server's postmaster.pid",
                    detail: "no port or socket directory".into(),
                });
            };
            Ok((PathBuf::from(dir), port, None, None))
        }
        Target::Tcp {
            host,
            port,
            password,
            tls,
        } => {
            let tls = tls
                .as_ref()
                .map(|t| forward::Tls::from_file(&t.ca_file, &t.name))
                .transpose()?;
            let forwarder = forward::start(sockets, *port, host, *port, tls)?;
            Ok((sockets.to_owned(), *port, password.clone(), Some(forwarder)))
        }
    }
}

/// `error`, with why the relay could not reach the old primary when a
/// connection failed there (the client only saw its socket closed).
fn with_relay_error(error: Error, forwarder: Option<&forward::Forwarder>) -> Error {
    let Some(reason) = forwarder.and_then(forward::Forwarder::last_error) else {
        return error;
    };
    let note = format!("the relay to the old primary failed: {reason}");
    match error {
        Error::Sql { context, detail } => Error::Sql {
            context,
            detail: format!("{detail} ({note})"),
        },
        Error::PgUpgrade(message) => Error::PgUpgrade(format!("{note}\n{message}")),
        other => other,
    }
}

/// `PGPASSWORD` for pg_upgrade's (and its children's) connections to the
/// old server over the forwarder.
fn with_password(mut cmd: Command, password: Option<&str>) -> Command {
    if let Some(password) = password {
        cmd.env("PGPASSWORD", password);
    }
    cmd
}

/// The shadow of `pgdata` in `shadow`: what pg_upgrade reads of a live old
/// cluster, and a postmaster.pid naming this process (alive, so no server
/// may start there) and the socket to reach the server through.
fn build_shadow(pgdata: &Path, shadow: &Path, socket_dir: &Path, port: u16) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    for sub in SHADOW_SUBDIRS {
        let dir = shadow.join(sub);
        std::fs::create_dir_all(&dir).map_err(Error::io("create", &dir))?;
    }
    std::fs::set_permissions(shadow, std::fs::Permissions::from_mode(0o700))
        .map_err(Error::io("set the mode of", shadow))?;
    let version = pgdata.join("PG_VERSION");
    std::fs::copy(&version, shadow.join("PG_VERSION")).map_err(Error::io("copy", &version))?;
    let control = pgdata.join("global/pg_control");
    let bytes = stable_read(&control)?;
    let copy = shadow.join("global/pg_control");
    std::fs::write(&copy, bytes).map_err(Error::io("write", &copy))?;
    let pid = format!(
        "{}\n{}\n0\n{port}\n{}\n\n  0 0\nready   \n",
        std::process::id(),
        shadow.display(),
        socket_dir.display()
    );
    let pid_path = shadow.join("postmaster.pid");
    std::fs::write(&pid_path, pid).map_err(Error::io("write", &pid_path))
}

/// `path` read until two reads agree: the live server rewrites pg_control
/// at checkpoints, and a read racing a write could see half of each.
fn stable_read(path: &Path) -> Result<Vec<u8>, Error> {
    let mut last = std::fs::read(path).map_err(Error::io("read", path))?;
    for _ in 0..10 {
        let next = std::fs::read(path).map_err(Error::io("read", path))?;
        if next == last {
            return Ok(next);
        }
        last = next;
    }
    Ok(last)
}

/// The superuser's connection to the old server through `socket_dir`.
async fn connect(
    socket_dir: &Path,
    port: u16,
    password: Option<&str>,
) -> Result<tokio_postgres::Client, Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host_path(socket_dir)
        .port(port)
        .user(SUPERUSER)
        .dbname("postgres")
        .application_name("tusk-upgrade")
        .connect_timeout(std::time::Duration::from_secs(10));
    if let Some(password) = password {
        config.password(password);
    }
    let (client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(Error::sql("connecting to the old server"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}
