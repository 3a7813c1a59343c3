//! The progress of a major upgrade of one data directory, in a small JSON
//! file beside it (`<PGDATA>.upgrade.json`, on the same volume, outside
//! PGDATA so that neither base backups nor clones carry it), and the
//! directories around it:
//!
//! - `<PGDATA>.<to>.new`: the new cluster while `run` builds it;
//! - `<PGDATA>.<from>.old`: the old cluster once swapped out, kept until the
//!   new server answered;
//! - `<PGDATA>.<to>.rejected`: a new cluster a rollback swapped out (never
//!   started, so removed at once).
//!
//! Stages, in order: [`Stage::Preparing`] (written before the old cluster is
//! touched) → [`Stage::Upgraded`] (pg_upgrade finished) → [`Stage::Swapped`]
//! (PGDATA holds the new cluster, never started) → [`Stage::Started`] (the
//! new server answered; the instance manager removes the old directory and
//! then this file). [`Stage::RollingBack`] is a rollback under way. No file:
//! no upgrade under way.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Error, version};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    Preparing,
    Upgraded,
    Swapped,
    Started,
    RollingBack,
}

/// The state file's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub from: u32,
    pub to: u32,
    pub stage: Stage,
}

/// What the instance manager does with a data directory in `stage`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnStart {
    /// Start as usual.
    Start,
    /// Start; once the server answers it is the upgraded one's first start:
    /// mark it started, then remove the old directory.
    FirstStart,
    /// Do not start: an upgrade or rollback is half done.
    Refuse(String),
}

/// The instance manager's decision for a data directory whose state is
/// `state` (pure).
pub fn on_start(state: Option<&State>) -> OnStart {
    let Some(state) = state else {
        return OnStart::Start;
    };
    let (from, to) = (state.from, state.to);
    match state.stage {
        Stage::Swapped | Stage::Started => OnStart::FirstStart,
        Stage::Preparing | Stage::Upgraded => OnStart::Refuse(format!(
            "a major upgrade from {from} to {to} was interrupted ({}): run `tusk upgrade run` again to finish it, or `tusk upgrade rollback` to return to {from}",
            stage_name(state.stage)
        )),
        Stage::RollingBack => OnStart::Refuse(format!(
            "a rollback of the upgrade from {from} to {to} was interrupted: run `tusk upgrade rollback` again"
        )),
    }
}

/// Whether a rollback may still put the old cluster back (pure): only
/// before the new server ever started. pg_upgrade's documentation: once the
/// new cluster started in link mode it has written to files it shares with
/// the old one, which is then unsafe to start.
pub fn rollback_allowed(stage: Stage) -> bool {
    stage != Stage::Started
}

pub fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::Preparing => "preparing",
        Stage::Upgraded => "upgraded",
        Stage::Swapped => "swapped",
        Stage::Started => "started",
        Stage::RollingBack => "rolling-back",
    }
}

fn sibling(pgdata: &Path, suffix: &str) -> PathBuf {
    let mut name = pgdata.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

pub fn state_path(pgdata: &Path) -> PathBuf {
    sibling(pgdata, ".upgrade.json")
}

/// Where the old cluster is kept after the swap.
pub fn old_dir(pgdata: &Path, from: u32) -> PathBuf {
    sibling(pgdata, &format!(".{from}.old"))
}

/// Where `run` builds the new cluster.
pub fn new_dir(pgdata: &Path, to: u32) -> PathBuf {
    sibling(pgdata, &format!(".{to}.new"))
}

/// Where a rollback puts the new cluster it swaps out.
pub fn rejected_dir(pgdata: &Path, to: u32) -> PathBuf {
    sibling(pgdata, &format!(".{to}.rejected"))
}

/// The state of `pgdata`'s upgrade; `None` when none is under way.
pub fn read(pgdata: &Path) -> Result<Option<State>, Error> {
    let path = state_path(pgdata);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|error| Error::State {
                path,
                detail: error.to_string(),
            }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(Error::io("read", &path)(error)),
    }
}

/// Writes `state` durably: a temporary file, fsynced, renamed over the
/// old one, and the directory fsynced, so a crash leaves either state.
pub fn write(pgdata: &Path, state: &State) -> Result<(), Error> {
    let path = state_path(pgdata);
    let tmp = sibling(pgdata, ".upgrade.json.tmp");
    let text = serde_json::to_string(state).map_err(|error| Error::State {
        path: path.clone(),
        detail: error.to_string(),
    })?;
    let mut file = std::fs::File::create(&tmp).map_err(Error::io("create", &tmp))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(Error::io("write", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(Error::io("rename into", &path))?;
    sync_parent(&path)?;
    tracing::info!(
        from = state.from,
        to = state.to,
        stage = stage_name(state.stage),
        "upgrade state"
    );
    Ok(())
}

/// Removes the state file: no upgrade under way any more.
pub fn remove(pgdata: &Path) -> Result<(), Error> {
    let path = state_path(pgdata);
    match std::fs::remove_file(&path) {
        Ok(()) => sync_parent(&path),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(Error::io("remove", &path)(error)),
    }
}

/// fsync of the directory holding `path`, so a rename or removal in it is
/// durable.
pub fn sync_parent(path: &Path) -> Result<(), Error> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(Error::io("sync", parent))
}

/// `rename(from, to)`, made durable.
pub fn rename(from: &Path, to: &Path) -> Result<(), Error> {
    std::fs::rename(from, to).map_err(Error::io("rename", from))?;
    sync_parent(to)
}

/// Undoes what link mode did to the old cluster in `dir`: pg_upgrade
/// renames `global/pg_control` to `pg_control.old` just before linking, so
/// that the old cluster cannot start by mistake.
pub fn restore_pg_control(dir: &Path) -> Result<bool, Error> {
    let control = dir.join("global/pg_control");
    let disabled = dir.join("global/pg_control.old");
    if control.exists() || !disabled.exists() {
        return Ok(false);
    }
    rename(&disabled, &control)?;
    Ok(true)
}

/// Removes data directory `dir` and, when its `pg_wal` links to a WAL
/// volume, that WAL directory too (else it would stay there, unused).
fn remove_with_wal(dir: &Path) -> Result<(), Error> {
    crate::wal::dir::remove_cluster(dir).map_err(|e| Error::io(e.action, &e.path)(e.source))
}

/// Removes `dir` when it holds a new cluster of major `to` (or a partial
/// one without PG_VERSION) — and refuses anything else, so that a mix-up of
/// names can never remove an old cluster's data.
pub fn remove_new_cluster(dir: &Path, to: u32) -> Result<(), Error> {
    if !dir.exists() {
        return Ok(());
    }
    match version::data_major(dir)? {
        Some(major) if major != to => {
            return Err(Error::Refused(format!(
                "{} holds PostgreSQL {major} data, not a new {to} cluster: left alone",
                dir.display()
            )));
        }
        _ => {}
    }
    remove_with_wal(dir)?;
    sync_parent(dir)
}

/// The instance manager's part once the upgraded server answered: the
/// state says started first (from then on a rollback refuses), then the
/// kept old directory goes, then the state file. Idempotent: a manager
/// restarted halfway finishes it on its next first answer.
pub fn finish_first_start(pgdata: &Path) -> Result<Option<State>, Error> {
    let Some(state) = read(pgdata)? else {
        return Ok(None);
    };
    if !matches!(state.stage, Stage::Swapped | Stage::Started) {
        return Ok(None);
    }
    if state.stage == Stage::Swapped {
        write(
            pgdata,
            &State {
                stage: Stage::Started,
                ..state.clone()
            },
        )?;
    }
    let old = old_dir(pgdata, state.from);
    if old.exists() {
        match version::data_major(&old)? {
            Some(major) if major == state.from => {
                remove_with_wal(&old)?;
                sync_parent(&old)?;
            }
            other => {
                return Err(Error::Refused(format!(
                    "{} does not hold the old {} cluster ({other:?}): left alone",
                    old.display(),
                    state.from
                )));
            }
        }
    }
    remove(pgdata)?;
    Ok(Some(state))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(stage: Stage) -> State {
        State {
            from: 15,
            to: 17,
            stage,
        }
    }

    #[test]
    fn the_manager_starts_only_complete_upgrades() {
        assert_eq!(on_start(None), OnStart::Start);
        assert_eq!(on_start(Some(&state(Stage::Swapped))), OnStart::FirstStart);
        assert_eq!(on_start(Some(&state(Stage::Started))), OnStart::FirstStart);
        for stage in [Stage::Preparing, Stage::Upgraded, Stage::RollingBack] {
            let OnStart::Refuse(why) = on_start(Some(&state(stage))) else {
                panic!("{stage:?} must not start");
            };
            assert!(why.contains("tusk upgrade"), "{why}");
        }
    }

    #[test]
    fn rollback_is_refused_once_the_new_server_started() {
        for stage in [
            Stage::Preparing,
            Stage::Upgraded,
            Stage::Swapped,
            Stage::RollingBack,
        ] {
            assert!(rollback_allowed(stage), "{stage:?}");
        }
        assert!(!rollback_allowed(Stage::Started));
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tusk-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    fn cluster(dir: &Path, major: u32) {
        std::fs::create_dir_all(dir.join("global")).expect("mkdir");
        std::fs::write(dir.join("PG_VERSION"), format!("{major}\n")).expect("write");
    }

    #[test]
    fn the_first_start_marks_started_before_removing_the_old_directory() {
        let root = scratch("first");
        let pgdata = root.join("pgdata");
        cluster(&pgdata, 17);
        cluster(&old_dir(&pgdata, 15), 15);
        assert_eq!(finish_first_start(&pgdata).expect("no state"), None);
        write(&pgdata, &state(Stage::Swapped)).expect("write");
        assert_eq!(read(&pgdata).expect("read"), Some(state(Stage::Swapped)));
        // A wrong directory under the old name is left alone, and the state
        // already says started: a rollback refuses from then on.
        std::fs::write(old_dir(&pgdata, 15).join("PG_VERSION"), "16\n").expect("write");
        assert!(finish_first_start(&pgdata).is_err());
        assert_eq!(read(&pgdata).expect("read"), Some(state(Stage::Started)));
        std::fs::write(old_dir(&pgdata, 15).join("PG_VERSION"), "15\n").expect("write");
        assert_eq!(
            finish_first_start(&pgdata).expect("finishes"),
            Some(state(Stage::Started))
        );
        assert!(!old_dir(&pgdata, 15).exists());
        assert_eq!(read(&pgdata).expect("read"), None);
        assert!(pgdata.join("PG_VERSION").exists());
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn only_new_clusters_are_removed_and_pg_control_comes_back() {
        let root = scratch("remove");
        let old = root.join("old");
        cluster(&old, 15);
        assert!(remove_new_cluster(&old, 17).is_err());
        assert!(old.join("PG_VERSION").exists());
        let partial = root.join("partial");
        std::fs::create_dir_all(&partial).expect("mkdir");
        remove_new_cluster(&partial, 17).expect("a partial new cluster goes");
        assert!(!partial.exists());

        std::fs::write(old.join("global/pg_control.old"), "c").expect("write");
        assert!(restore_pg_control(&old).expect("restores"));
        assert!(old.join("global/pg_control").exists());
        assert!(!restore_pg_control(&old).expect("nothing to do"));
        std::fs::remove_dir_all(&root).expect("cleanup");
    }
}
