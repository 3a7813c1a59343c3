//! `tusk upgrade run`: the stopped old primary's data becomes a new major's
//! with `pg_upgrade --link`, the old data directory kept beside it.
//!
//! Each step records its progress in the state file first (see [`state`]),
//! so a rerun after a crash anywhere resumes: before pg_upgrade finished it
//! puts the old cluster back as it was and starts over (the new one never
//! started, so the old one is intact but for `pg_control`'s rename, which is
//! undone); after, it completes the swap. A rerun after completion changes
//! nothing. A failed pg_upgrade leaves the old cluster as it was, startable.
//! With a WAL volume the new cluster's `initdb --waldir` puts its WAL in a
//! directory of its own there (see [`new_waldir`]).

use std::path::Path;

use super::settings::{self, ClusterSettings};
use super::state::{self, Stage, State};
use super::{Dirs, Error, SUPERUSER, child, command, report, version};

pub async fn run(dirs: &Dirs, work: &Path) -> Result<String, Error> {
    let pgdata = &dirs.pgdata;
    let new_bindir = super::new_bindir(dirs)?;
    let from = version::bindir_major(&dirs.old_bindir)?;
    let to = version::bindir_major(&new_bindir)?;
    if to <= from {
        return Err(Error::Refused(format!(
            "the new programs are PostgreSQL {to}, not newer than {from}"
        )));
    }
    match resume(pgdata, from, to)? {
        Resume::Done(message) => Ok(message),
        Resume::Swap => swap(pgdata, from, to),
        Resume::Upgrade => upgrade(dirs, &new_bindir, work, from, to).await,
    }
}

/// Where a run from `from` to `to` starts, by the state file and the data.
enum Resume {
    /// Nothing (more) to do, and why.
    Done(String),
    /// pg_upgrade finished: only the swap remains.
    Swap,
    /// pg_upgrade is to run (again), the state file saying so.
    Upgrade,
}

fn resume(pgdata: &Path, from: u32, to: u32) -> Result<Resume, Error> {
    let current = state::read(pgdata)?;
    if let Some(state) = &current
        && (state.from, state.to) != (from, to)
    {
        return Err(Error::Refused(format!(
            "an upgrade from {} to {} is under way ({}), not from {from} to {to}",
            state.from,
            state.to,
            state::stage_name(state.stage)
        )));
    }
    let data = version::data_major(pgdata)?;
    match current.as_ref().map(|s| s.stage) {
        None if data == Some(to) => Ok(Resume::Done(format!(
            "{} already holds PostgreSQL {to} data: nothing to do",
            pgdata.display()
        ))),
        None if data != Some(from) => Err(Error::Refused(format!(
            "{} holds {}, not the PostgreSQL {from} data to upgrade",
            pgdata.display(),
            version::describe(data)
        ))),
        None => {
            if pgdata.join("postmaster.pid").exists() {
                return Err(Error::Refused(format!(
                    "{} has a postmaster.pid: the old server still runs, or did not stop cleanly (start it once and stop it cleanly first)",
                    pgdata.display()
                )));
            }
            state::write(pgdata, &progress(from, to, Stage::Preparing))?;
            Ok(Resume::Upgrade)
        }
        Some(Stage::Preparing) => {
            tracing::warn!(
                "an earlier run was interrupted before pg_upgrade finished: starting over"
            );
            Ok(Resume::Upgrade)
        }
        Some(Stage::Upgraded) => Ok(Resume::Swap),
        Some(Stage::Swapped) | Some(Stage::Started) => Ok(Resume::Done(format!(
            "{} was already upgraded from {from} to {to}: nothing to do",
            pgdata.display()
        ))),
        Some(Stage::RollingBack) => Err(Error::Refused(format!(
            "a rollback of the upgrade from {from} to {to} is under way: run `tusk upgrade rollback` again first"
        ))),
    }
}

/// The Preparing stage: PGDATA holds the old cluster, perhaps with
/// pg_control renamed by an interrupted pg_upgrade; the new one may be half
/// made. Runs pg_upgrade, then the swap.
async fn upgrade(
    dirs: &Dirs,
    new_bindir: &Path,
    work: &Path,
    from: u32,
    to: u32,
) -> Result<String, Error> {
    let pgdata = &dirs.pgdata;
    state::restore_pg_control(pgdata)?;
    let new = state::new_dir(pgdata, to);
    state::remove_new_cluster(&new, to)?;
    super::fresh_dir(work)?;

    let settings = read_settings(&dirs.old_bindir, pgdata, work, from).await?;
    let new_wal = dirs.waldir.as_deref().map(|waldir| new_waldir(waldir, to));
    settings::initdb(new_bindir, &new, new_wal.as_deref(), &settings, to).await?;
    let mut cmd = child::async_command(new_bindir.join("pg_upgrade"));
    cmd.arg("--link")
        .arg("--old-bindir")
        .arg(&dirs.old_bindir)
        .arg("--new-bindir")
        .arg(new_bindir)
        .arg("--old-datadir")
        .arg(pgdata)
        .arg("--new-datadir")
        .arg(&new)
        .arg(format!("--username={SUPERUSER}"))
        .args(["--old-port=50432", "--new-port=50433"])
        .arg("--socketdir")
        .arg(work)
        // No archiving, no TLS: see OLD_SERVER_OPTIONS.
        .args(["--old-options", OLD_SERVER_OPTIONS])
        .current_dir(work)
        .env("LC_MESSAGES", "C");
    let output = command::output(cmd, "pg_upgrade --link").await?;
    if !output.success {
        let quoted = report::quote(
            &format!("pg_upgrade --link from {from} to {to} failed"),
            &output.stdout,
            &output.stderr,
            report::read_file,
        );
        // The new server never started: the old cluster is intact once its
        // pg_control is back.
        state::restore_pg_control(pgdata)?;
        state::remove_new_cluster(&new, to)?;
        state::remove(pgdata)?;
        return Err(Error::PgUpgrade(format!(
            "{quoted}\nThe PostgreSQL {from} data directory is unchanged and can start again."
        )));
    }
    carry_config(pgdata, &new)?;
    state::write(pgdata, &progress(from, to, Stage::Upgraded))?;
    let _ = std::fs::remove_dir_all(work);
    let message = swap(pgdata, from, to)?;
    Ok(format!("{message} ({})", settings::describe(&settings)))
}

/// The new cluster's WAL directory on the WAL volume: `<waldir>.<to>`, or
/// the first free `<waldir>.<to>.<n>`. The old cluster's WAL stays where its
/// `pg_wal` links (a rollback needs it); a half-made new cluster's WAL went
/// with it ([`state::remove_new_cluster`]). pg_upgrade itself never touches
/// either `pg_wal` (it resets the new cluster's WAL with pg_resetwal, which
/// follows the link).
fn new_waldir(waldir: &Path, to: u32) -> std::path::PathBuf {
    let base = crate::wal::dir::suffixed(waldir, &format!(".{to}"));
    crate::wal::dir::fresh(&base, |candidate| candidate.exists())
}

/// Configuration the new cluster keeps from the old: `ALTER SYSTEM`'s file
/// and the authentication files (the instance manager renders its own
/// `postgresql.tusk.conf`, `pg_hba.conf` and the include line at every
/// start; `postgresql.conf` stays initdb's, tuned for the new major).
const CARRIED: &[&str] = &["postgresql.auto.conf", "pg_hba.conf", "pg_ident.conf"];

fn carry_config(old: &Path, new: &Path) -> Result<(), Error> {
    for name in CARRIED {
        let from = old.join(name);
        if from.is_file() {
            std::fs::copy(&from, new.join(name)).map_err(Error::io("copy", &from))?;
        }
    }
    Ok(())
}

fn progress(from: u32, to: u32, stage: Stage) -> State {
    State { from, to, stage }
}

/// PGDATA becomes the new cluster, the old one is kept beside it; each
/// rename is a step a rerun recognises from the directories.
fn swap(pgdata: &Path, from: u32, to: u32) -> Result<String, Error> {
    let old = state::old_dir(pgdata, from);
    let new = state::new_dir(pgdata, to);
    if version::data_major(pgdata)? == Some(from) {
        if old.exists() {
            return Err(Error::Refused(format!(
                "{} exists already (an earlier upgrade's old data?): move it away, Tusk never removes it",
                old.display()
            )));
        }
        state::rename(pgdata, &old)?;
    }
    if !pgdata.exists() {
        if version::data_major(&new)? != Some(to) {
            return Err(Error::Refused(format!(
                "{} is missing and {} holds no PostgreSQL {to} cluster: the swap cannot complete",
                pgdata.display(),
                new.display()
            )));
        }
        state::rename(&new, pgdata)?;
    }
    state::write(pgdata, &progress(from, to, Stage::Swapped))?;
    Ok(format!(
        "upgraded {} from PostgreSQL {from} to {to} with pg_upgrade --link; the old data directory is kept at {} until the new server has started",
        pgdata.display(),
        old.display()
    ))
}

/// What the old server is started with here: no archiving (`wal-archive`
/// has no store in this Job) and no TLS (its certificate and key are the
/// instance manager's private copies, absent here; only the socket is used).
const OLD_SERVER_OPTIONS: &str = "-c archive_mode=off -c ssl=off";

/// The old cluster's settings: pg_controldata for checksums and segment
/// size; template0's locale from the server itself, started briefly on a
/// private socket (which also replays WAL after an unclean stop and shuts
/// down cleanly, as pg_upgrade needs).
async fn read_settings(
    bindir: &Path,
    pgdata: &Path,
    work: &Path,
    major: u32,
) -> Result<ClusterSettings, Error> {
    const PORT: u16 = 50431;
    let log = work.join("old-server.log");
    let options = format!(
        "-c listen_addresses='' -c unix_socket_directories='{}' -c port={PORT} {OLD_SERVER_OPTIONS}",
        work.display()
    );
    let mut start = child::async_command(bindir.join("pg_ctl"));
    start
        .arg("start")
        .arg("--wait")
        .arg("--pgdata")
        .arg(pgdata)
        .arg("--log")
        .arg(&log)
        .arg("-o")
        .arg(&options)
        .env("LC_MESSAGES", "C");
    if let Err(error) = command::run(start, "pg_ctl start (old server)").await {
        let tail = std::fs::read_to_string(&log).unwrap_or_default();
        return Err(Error::Refused(format!(
            "the old server does not start: {error}\n{}",
            report::tail(tail.trim(), 1000)
        )));
    }
    let locale = async {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(work)
            .port(PORT)
            .user(SUPERUSER)
            .dbname("postgres")
            .application_name("tusk-upgrade");
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(Error::sql("connecting to the old server"))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        settings::locale(&client, major).await
    }
    .await;
    let mut stop = child::async_command(bindir.join("pg_ctl"));
    stop.arg("stop")
        .arg("--wait")
        .args(["--mode", "fast"])
        .arg("--pgdata")
        .arg(pgdata);
    let stopped = command::run(stop, "pg_ctl stop (old server)").await;
    let locale = locale?;
    stopped?;
    let control = settings::controldata(bindir, pgdata).await?;
    if control.state != "shut down" {
        return Err(Error::Refused(format!(
            "the old cluster's state is \"{}\" after a clean stop",
            control.state
        )));
    }
    Ok(ClusterSettings { control, locale })
}
