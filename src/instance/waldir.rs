//! The instance manager's side of a WAL volume (`TUSK_WALDIR`, set with
//! `spec.walStorage`): every way a data directory is made (initdb, a clone,
//! a restore, a re-clone after a failed rewind) writes its WAL to the WAL
//! volume's staging directory and moves it into place with the data
//! directory ([`crate::wal::dir`] does the file system work). Without
//! `TUSK_WALDIR` every function here does nothing and WAL stays in PGDATA.

use std::path::{Path, PathBuf};

use super::{Error, Shared};
use crate::wal::dir;

impl From<dir::Error> for Error {
    fn from(error: dir::Error) -> Self {
        Error::Io {
            action: error.action,
            path: error.path,
            source: error.source,
        }
    }
}

/// Where a bootstrap's WAL goes while the data directory is staged
/// (`--waldir` of initdb and pg_basebackup); `None` without a WAL volume.
pub(super) fn staging(shared: &Shared) -> Option<PathBuf> {
    shared.config.waldir.as_deref().map(dir::staging)
}

/// Before a bootstrap: removes the staging WAL of an interrupted one. With
/// `fresh` (PGDATA holds no cluster) also the WAL directory itself: WAL
/// without its data directory (a bootstrap interrupted between the two
/// renames) serves nothing, and `--waldir` wants an empty directory.
pub(super) fn clear(shared: &Shared, fresh: bool) -> Result<(), Error> {
    let Some(waldir) = &shared.config.waldir else {
        return Ok(());
    };
    dir::remove_if_exists(&dir::staging(waldir))?;
    if fresh && waldir.exists() {
        tracing::warn!(path = %waldir.display(), "removing WAL left without a data directory");
        dir::remove_if_exists(waldir)?;
    }
    Ok(())
}

/// The arguments that send a new cluster's WAL (initdb's, pg_basebackup's)
/// to the staging directory.
pub(super) fn waldir_args(shared: &Shared) -> Vec<std::ffi::OsString> {
    args_for(shared.config.waldir.as_deref())
}

fn args_for(waldir: Option<&Path>) -> Vec<std::ffi::OsString> {
    waldir
        .map(|waldir| vec!["--waldir".into(), dir::staging(waldir).into_os_string()])
        .unwrap_or_default()
}

/// Moves a staged data directory's WAL (a link to the staging WAL, or a
/// restored base backup's plain `pg_wal`) to the WAL directory, then the
/// data directory to PGDATA (whose old content the caller removed).
pub(super) fn put_in_place(shared: &Shared, staging: &Path) -> Result<(), Error> {
    let pgdata = &shared.config.pgdata;
    if let Some(waldir) = &shared.config.waldir {
        dir::move_to(staging, waldir)?;
    }
    std::fs::rename(staging, pgdata).map_err(Error::io("move the new cluster into", pgdata))
}

/// A restored base backup's `pg_wal` (a plain directory) onto the WAL
/// volume's staging directory, before recovery fills it.
pub(super) fn relocate_restored(shared: &Shared, staging: &Path) -> Result<(), Error> {
    if let Some(wal) = self::staging(shared) {
        dir::move_to(staging, &wal)?;
    }
    Ok(())
}

/// Removes data directory `data` with the WAL it links to.
pub(super) fn remove_cluster(data: &Path) -> Result<(), Error> {
    Ok(dir::remove_cluster(data)?)
}

/// Moves the WAL of `aside` (a data directory set aside, see `rejoin`) to
/// `<waldir><suffix>`, so the WAL directory is free for the new cluster and
/// the set-aside copy keeps its WAL.
pub(super) fn set_aside(shared: &Shared, aside: &Path, suffix: &str) -> Result<(), Error> {
    let Some(waldir) = &shared.config.waldir else {
        return Ok(());
    };
    if dir::target(aside).is_some() {
        dir::move_to(aside, &dir::suffixed(waldir, suffix))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_cluster_s_wal_is_staged_beside_the_wal_directory() {
        assert_eq!(
            args_for(Some(Path::new("/var/lib/postgresql/wal/pg_wal"))),
            ["--waldir", "/var/lib/postgresql/wal/pg_wal.tusk-bootstrap"]
        );
    }

    #[test]
    fn without_a_wal_volume_wal_stays_in_pgdata() {
        assert!(args_for(None).is_empty());
    }
}
