//! The restore bootstrap: the first primary of a Database restored from a
//! backup fills its staging directory from its source's archive.
//!
//! 1. List the source's systems, backups and WAL; choose the backup and the
//!    timeline with [`crate::backup::select`] (a refusal costs no download).
//! 2. Stream the base backup into the staging directory, checked against its
//!    manifest.
//! 3. Start PostgreSQL there with `recovery.signal`, `restore_command`
//!    reading the source's archive (`tusk wal-restore --source`) and the
//!    target; no TCP listener, so nobody sees the data before it is promoted.
//! 4. Once it has promoted on a new timeline (archiving that timeline's first
//!    WAL to this Database's own store, never the source's), stop it cleanly.
//!
//! With a WAL volume the unpacked `pg_wal` moves onto it before step 3
//! ([`super::waldir`]). The caller renames the staging directory into place
//! (its WAL with it); the next start renders
//! the ordinary configuration, without the recovery settings. Progress is in
//! [`Shared::restore`] for `GET /restore`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;

use crate::backup::manifest::{MANIFEST, Manifest};
use crate::backup::restore::unpack_counting;
use crate::backup::select::{self, Choice, Refusal, Target};
use crate::contract::{Lsn, RestoreProgress, RestoreStage, env};
use crate::objectstore::{Configured, Layout, Store};
use crate::postgres::config::Recovery;
use crate::upgrade::child;
use crate::wal::{DEFAULT_SEGMENT_SIZE, parse_history_file};

use super::{Error, Shared, files, sql};

/// Where a restore reads from and where it stops (the `TUSK_RESTORE_*`
/// variables).
#[derive(Clone, Debug)]
pub struct Source {
    pub configured: Configured,
    pub database: String,
    pub system: Option<u64>,
    pub backup: Option<String>,
    pub target: Target,
}

impl Source {
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let get = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let invalid =
            |name: &'static str, why: String| Error::RestoreSource(format!("{name}: {why}"));
        let configured = Configured::from_env(|name| get(&env::restore(name)))
            .map_err(|e| Error::RestoreSource(e.to_string()))?;
        let database = get(env::RESTORE_SOURCE)
            .ok_or_else(|| invalid(env::RESTORE_SOURCE, "not set".to_owned()))?;
        let system = get(env::RESTORE_SYSTEM)
            .map(|s| s.parse::<u64>())
            .transpose()
            .map_err(|e| invalid(env::RESTORE_SYSTEM, e.to_string()))?;
        let target = match (get(env::RESTORE_TARGET_TIME), get(env::RESTORE_TARGET_LSN)) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    env::RESTORE_TARGET_TIME,
                    format!("set together with {}", env::RESTORE_TARGET_LSN),
                ));
            }
            (Some(time), None) => Target::Time(
                time.parse::<Timestamp>()
                    .map_err(|e| invalid(env::RESTORE_TARGET_TIME, e.to_string()))?,
            ),
            (None, Some(lsn)) => Target::Lsn(
                lsn.parse::<Lsn>()
                    .map_err(|e| invalid(env::RESTORE_TARGET_LSN, e.to_string()))?,
            ),
            (None, None) => Target::Latest,
        };
        Ok(Self {
            configured,
            database,
            system,
            backup: get(env::RESTORE_BACKUP),
            target,
        })
    }

    fn location(&self, system: u64) -> String {
        let layout = Layout::new(self.configured.path.as_deref(), &self.database, system);
        format!("s3://{}/{}", self.configured.store.bucket, layout.root())
    }
}

/// What was chosen: the system, its layout and the backup's manifest.
struct Chosen {
    system: u64,
    layout: Layout,
    manifest: Manifest,
    timeline: u32,
}

/// The restore postmaster, promoted and still running on the staging
/// directory (listening on the socket only): [`Promoted::stop`] it, or look
/// at the data first (as verification does).
pub struct Promoted {
    child: tokio::process::Child,
    /// The backup restored from.
    pub manifest: Manifest,
}

impl Promoted {
    /// A fast shutdown (a checkpoint, the archiver's last round), waited for.
    pub async fn stop(mut self) {
        stop(&mut self.child).await;
    }
}

/// Restore into `staging` (absent or empty), reporting progress in `shared`.
pub async fn restore(shared: &Shared, source: &Source, staging: &Path) -> Result<Promoted, Error> {
    let store = Store::new(&source.configured.store).map_err(Error::restore)?;
    shared.update_restore(|p| {
        p.stage = RestoreStage::Choosing;
        p.target = select::describe(source.target);
    });
    let chosen = choose(&store, source).await?;
    let location = source.location(chosen.system);
    let image = crate::upgrade::version::bindir_major(&shared.bindir)
        .map_err(|e| Error::Restore(e.to_string()))?;
    if let Some(why) = other_major(&chosen.manifest.id, chosen.manifest.pg_version, image) {
        return Err(Error::RestoreRefused { location, why });
    }
    tracing::info!(
        source = %location,
        backup = %chosen.manifest.id,
        timeline = chosen.timeline,
        target = %select::describe(source.target),
        "restoring"
    );
    shared.update_restore(|p| {
        p.stage = RestoreStage::Downloading;
        p.source = Some(location.clone());
        p.backup = Some(chosen.manifest.id.clone());
        p.timeline = Some(chosen.timeline);
        p.total_bytes = chosen.manifest.stored_bytes;
        p.downloaded_bytes = 0;
        p.replayed_lsn = None;
    });

    let downloaded = AtomicU64::new(0);
    let unpacking = unpack_counting(
        &store,
        &chosen.layout,
        &chosen.manifest,
        staging,
        &downloaded,
        crate::backup::restore::RANGE,
    );
    tokio::pin!(unpacking);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let unpacked = loop {
        tokio::select! {
            result = &mut unpacking => break result.map_err(Error::restore)?,
            _ = tick.tick() => shared.update_restore(|p| p.downloaded_bytes = downloaded.load(Ordering::Relaxed)),
        }
    };
    shared.update_restore(|p| p.downloaded_bytes = unpacked.stored_bytes);
    // A base backup's pg_wal is a plain, empty directory: onto the WAL
    // volume before replay fills it.
    super::waldir::relocate_restored(shared, staging)?;
    tracing::info!(
        stored_bytes = unpacked.stored_bytes,
        raw_bytes = unpacked.raw_bytes,
        "base backup unpacked"
    );

    let child = replay(shared, source, &chosen, staging).await?;
    Ok(Promoted {
        child,
        manifest: chosen.manifest.clone(),
    })
}

/// Lists the source and chooses, on each of its systems when none is given,
/// the backup to start from: the system whose choice is newest wins.
async fn choose(store: &Store, source: &Source) -> Result<Chosen, Error> {
    let path = source.configured.path.as_deref();
    let systems = match source.system {
        Some(system) => vec![system],
        None => {
            let prefix = Layout::database_prefix(path, &source.database);
            let listed = store.list(&prefix).await.map_err(Error::restore)?;
            Layout::systems(&prefix, listed.iter().map(|l| l.key.as_str()))
        }
    };
    let mut best: Option<Chosen> = None;
    let mut refusal: Option<(u64, Refusal)> = None;
    for system in systems {
        let layout = Layout::new(path, &source.database, system);
        match choose_in(store, source, &layout).await? {
            Ok((manifest, timeline)) => {
                let newer = best
                    .as_ref()
                    .is_none_or(|b| manifest.completed_at > b.manifest.completed_at);
                if newer {
                    best = Some(Chosen {
                        system,
                        layout,
                        manifest,
                        timeline,
                    });
                }
            }
            Err(why) => refusal = Some((system, why)),
        }
    }
    match (best, refusal) {
        (Some(chosen), _) => Ok(chosen),
        (None, Some((system, why))) => Err(Error::RestoreRefused {
            location: source.location(system),
            why: why.to_string(),
        }),
        (None, None) => Err(Error::RestoreRefused {
            location: format!(
                "s3://{}/{}",
                source.configured.store.bucket,
                Layout::database_prefix(path, &source.database)
            ),
            why: Refusal::NoBackup.to_string(),
        }),
    }
}

/// The choice within one system, or why there is none.
async fn choose_in(
    store: &Store,
    source: &Source,
    layout: &Layout,
) -> Result<Result<(Manifest, u32), Refusal>, Error> {
    let listed = store
        .list(&layout.base_prefix())
        .await
        .map_err(Error::restore)?;
    let mut manifests = Vec::new();
    for item in listed.iter().filter(|l| l.key.ends_with(MANIFEST)) {
        let Some(bytes) = store.get(&item.key).await.map_err(Error::restore)? else {
            continue; // pruned since the listing
        };
        let manifest = Manifest::from_json(&bytes).map_err(|e| Error::RestoreRefused {
            location: item.key.clone(),
            why: format!("not a readable manifest: {e}"),
        })?;
        let wanted = source.backup.as_ref().is_none_or(|id| *id == manifest.id);
        if wanted {
            manifests.push(manifest);
        }
    }
    let wal = store
        .list(&layout.wal_prefix())
        .await
        .map_err(Error::restore)?;
    let timeline = select::newest_timeline(layout, &wal);
    let history = if timeline > 1 {
        let key = format!(
            "{}{timeline:08X}/{timeline:08X}.history.zst",
            layout.wal_prefix()
        );
        match store.get(&key).await.map_err(Error::restore)? {
            Some(bytes) => {
                parse_history_file(&key, &bytes).map_err(|why| Error::RestoreRefused {
                    location: key.clone(),
                    why,
                })?
            }
            None => Vec::new(),
        }
    } else {
        Vec::new()
    };
    let end = select::archive_end(layout, &wal, timeline, DEFAULT_SEGMENT_SIZE);
    Ok(
        select::choose(&manifests, timeline, &history, end, source.target).and_then(
            |Choice { backup, timeline }| {
                manifests
                    .into_iter()
                    .find(|m| m.id == backup)
                    .map(|m| (m, timeline))
                    .ok_or(Refusal::NoBackup)
            },
        ),
    )
}

/// Why backup `id`, taken by `server_version_num` `taken_by`, cannot be
/// restored by PostgreSQL `image`: it was taken by another major, whose data
/// files this one cannot read. Checked before any download (a recovery from a
/// Database's archive may choose a backup from before its major upgrade,
/// under the old system identifier).
fn other_major(id: &str, taken_by: u32, image: u32) -> Option<String> {
    // server_version_num: major * 10000 + minor since PostgreSQL 10.
    let taken = taken_by / 10_000;
    (taken != image).then(|| {
        format!(
            "backup {id} was taken with PostgreSQL {taken} and this image runs {image}: a base backup is restored by its own major (restore with spec.version {taken}, then upgrade)"
        )
    })
}

/// The PostgreSQL form of a target.
fn target_setting(target: Target) -> Option<(&'static str, String)> {
    match target {
        Target::Latest => None,
        // PostgreSQL's own form: it refuses RFC 3339's `T` and `Z`.
        Target::Time(at) => Some((
            "recovery_target_time",
            at.strftime("%Y-%m-%d %H:%M:%S%.f+00").to_string(),
        )),
        Target::Lsn(lsn) => Some(("recovery_target_lsn", lsn.to_string())),
    }
}

/// Where the bootstrap postmaster's output goes, beside the data directory.
fn log_file(pgdata: &Path) -> PathBuf {
    pgdata.parent().unwrap_or(pgdata).join("tusk-restore.log")
}

/// Runs PostgreSQL on `staging` until it has replayed to the target and
/// promoted.
async fn replay(
    shared: &Shared,
    source: &Source,
    chosen: &Chosen,
    staging: &Path,
) -> Result<tokio::process::Child, Error> {
    use std::os::unix::fs::PermissionsExt;
    // PostgreSQL refuses a data directory others can read.
    std::fs::set_permissions(staging, std::fs::Permissions::from_mode(0o700))
        .map_err(Error::io("set the mode of", staging))?;
    let mut settings = files::settings(shared, staging, false)?;
    // Only the manager, over the socket, until the data is promoted and moved.
    settings.listen_addresses = String::new();
    // Nobody streams from this postmaster: with synchronous standbys named,
    // a commit after the promotion (verification's checks) would wait forever.
    settings.sync = None;
    settings.recovery = Some(Recovery {
        restore_command: format!("{} wal-restore --source %f %p", files::tusk_program()?),
        target: target_setting(source.target),
        timeline: chosen.timeline,
    });
    files::write_settings(shared, staging, &settings)?;
    files::write_if_changed(&staging.join("recovery.signal"), "")?;

    let log_path = log_file(staging);
    let log = std::fs::File::create(&log_path).map_err(Error::io("create", &log_path))?;
    let program = shared.bindir.join("postgres");
    let mut command = child::async_command(&program);
    command
        .arg("-D")
        .arg(staging)
        // `tusk wal-restore` and `wal-archive` find the data directory here.
        .env(env::PGDATA, staging)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(Error::io("open", &log_path))?)
        .stderr(log)
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|source| Error::Spawn {
        program: program.display().to_string(),
        source,
    })?;
    shared.update_restore(|p| p.stage = RestoreStage::Replaying);

    let config = &shared.config;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        if let Some(status) = child.try_wait().map_err(Error::io("wait for", &program))? {
            return Err(Error::RestoreReplay(format!(
                "PostgreSQL exited ({status}) before promoting: {}",
                log_tail(&log_path)
            )));
        }
        if let Some(lsn) = child.id().and_then(recovering_at) {
            shared.update_restore(|p| p.replayed_lsn = Some(lsn));
        }
        let Ok(client) = sql::connect_local(&config.socket_dir, config.port).await else {
            continue; // no connections before the promotion (hot_standby off)
        };
        let Ok(row) = client
            .query_one(
                "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text",
                &[],
            )
            .await
        else {
            continue;
        };
        let in_recovery: bool = row.get(0);
        let replayed = row
            .get::<_, Option<String>>(1)
            .and_then(|s| s.parse::<Lsn>().ok());
        shared.update_restore(|p| p.replayed_lsn = replayed.or(p.replayed_lsn));
        if !in_recovery {
            break;
        }
    }
    tracing::info!("promoted after recovery");
    Ok(child)
}

/// Where the startup process of postmaster `pid` replays: the start of the
/// segment its process title names. Without hot standby no SQL answers
/// during recovery; the title does (`postgres: startup recovering <segment>`).
fn recovering_at(pid: u32) -> Option<Lsn> {
    let parent = pid.to_string();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`: comm may hold spaces, so after the last ')'.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
            if ppid != parent {
                return None;
            }
            let title = std::fs::read(entry.path().join("cmdline")).ok()?;
            segment_in_title(&String::from_utf8_lossy(&title))
        })
}

/// The start of the WAL segment a startup process's title names.
fn segment_in_title(title: &str) -> Option<Lsn> {
    let name = title.split("recovering ").nth(1)?.get(..24)?;
    let file = crate::objectstore::WalFile::parse(name).ok()?;
    let end = file.end_lsn(DEFAULT_SEGMENT_SIZE)?;
    Some(Lsn(end - DEFAULT_SEGMENT_SIZE))
}

/// SIGINT (fast shutdown: a checkpoint, the archiver's last round) and wait.
async fn stop(child: &mut tokio::process::Child) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
    }
    match tokio::time::timeout(super::FAST_SHUTDOWN_TIMEOUT, child.wait()).await {
        Ok(status) => tracing::info!(?status, "restore postmaster stopped"),
        Err(_) => {
            tracing::warn!("fast shutdown timed out; killing the restore postmaster");
            let _ = child.kill().await;
        }
    }
}

/// The last error lines PostgreSQL logged, for the failure's message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    // The last fatal line and the one before it, which usually says why.
    let end = lines
        .iter()
        .rposition(|l| l.contains("FATAL") || l.contains("PANIC"))
        .map_or(lines.len(), |i| i + 1);
    lines[end.saturating_sub(2)..end].join(" | ")
}

/// How long a failed attempt waits before the next: doubling from 15 s to 5 min.
pub fn retry_delay(attempts: u32) -> Duration {
    let seconds = 15u64.saturating_mul(1 << attempts.saturating_sub(1).min(5));
    Duration::from_secs(seconds.min(300))
}

impl Shared {
    /// Changes the restore progress (created on first use).
    pub fn update_restore(&self, change: impl FnOnce(&mut RestoreProgress)) {
        let mut progress = self
            .restore
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        change(progress.get_or_insert_with(RestoreProgress::default));
    }

    pub fn restore_progress(&self) -> Option<RestoreProgress> {
        self.restore
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(extra: &[(&str, &str)]) -> HashMap<String, String> {
        let mut vars: HashMap<String, String> = [
            ("TUSK_RESTORE_OBJECTSTORE_BUCKET", "backups"),
            ("TUSK_RESTORE_OBJECTSTORE_PATH", "team"),
            ("TUSK_RESTORE_AWS_ACCESS_KEY_ID", "id"),
            ("TUSK_RESTORE_AWS_SECRET_ACCESS_KEY", "secret"),
            ("TUSK_RESTORE_SOURCE", "orders"),
            // The restored Database's own store must not be read.
            ("TUSK_OBJECTSTORE_BUCKET", "own"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        vars.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        vars
    }

    #[test]
    fn a_backup_of_another_major_is_refused_naming_both() {
        assert_eq!(other_major("20261124T020000Z", 170_005, 17), None);
        assert_eq!(other_major("20261124T020000Z", 150_018, 15), None);
        let why = other_major("20261124T020000Z", 150_018, 17).expect("refused");
        assert!(
            why.contains("20261124T020000Z")
                && why.contains("PostgreSQL 15")
                && why.contains("runs 17")
                && why.contains("spec.version 15"),
            "{why}"
        );
    }

    #[test]
    fn the_source_comes_from_the_restore_variables() {
        let v = vars(&[("TUSK_RESTORE_TARGET_TIME", "2026-11-24T10:01:00Z")]);
        let source = Source::from_env(|n| v.get(n).cloned()).expect("a source");
        assert_eq!(source.configured.store.bucket, "backups");
        assert_eq!(source.configured.path.as_deref(), Some("team"));
        assert_eq!(source.database, "orders");
        assert_eq!(
            source.target,
            Target::Time("2026-11-24T10:01:00Z".parse().expect("time"))
        );
        assert_eq!(source.location(7), "s3://backups/team/orders/7");
        assert_eq!(
            target_setting(source.target),
            Some(("recovery_target_time", "2026-11-24 10:01:00+00".to_owned()))
        );

        let v = vars(&[("TUSK_RESTORE_TARGET_LSN", "0/3000148")]);
        let source = Source::from_env(|n| v.get(n).cloned()).expect("a source");
        assert_eq!(source.target, Target::Lsn(Lsn(0x0300_0148)));
        let v = vars(&[]);
        assert_eq!(
            Source::from_env(|n| v.get(n).cloned())
                .expect("a source")
                .target,
            Target::Latest
        );
    }

    #[test]
    fn bad_restore_variables_are_named() {
        let v = vars(&[("TUSK_RESTORE_TARGET_LSN", "nope")]);
        let err = Source::from_env(|n| v.get(n).cloned()).expect_err("refused");
        assert!(err.to_string().contains("TUSK_RESTORE_TARGET_LSN"), "{err}");
        let mut v = vars(&[]);
        v.remove("TUSK_RESTORE_SOURCE");
        let err = Source::from_env(|n| v.get(n).cloned()).expect_err("refused");
        assert!(err.to_string().contains("TUSK_RESTORE_SOURCE"), "{err}");
    }

    #[test]
    fn the_startup_process_title_gives_the_segment_replayed() {
        assert_eq!(
            segment_in_title("postgres: startup recovering 00000002000000010000000A\0\0"),
            Some(Lsn((0x1_0000_0000) + 10 * DEFAULT_SEGMENT_SIZE))
        );
        assert_eq!(segment_in_title("postgres: checkpointer"), None);
        assert_eq!(segment_in_title("postgres: startup recovering 0000"), None);
    }

    #[test]
    fn retries_back_off_to_five_minutes() {
        assert_eq!(retry_delay(1), Duration::from_secs(15));
        assert_eq!(retry_delay(2), Duration::from_secs(30));
        assert_eq!(retry_delay(10), Duration::from_secs(300));
    }
}
