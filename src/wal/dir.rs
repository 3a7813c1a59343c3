//! A data directory's WAL on its own volume (`spec.walStorage`): PGDATA's
//! `pg_wal` is a symlink to a directory on the WAL volume, as `initdb
//! --waldir` and `pg_basebackup --waldir` make it. PostgreSQL, pg_rewind,
//! pg_upgrade and base backups all follow the link; what Tusk does to data
//! directories itself (stage, rename, set aside, remove) goes through here so
//! that the WAL follows its data directory:
//!
//! - a bootstrap writes its WAL to [`staging`] beside the final directory,
//!   and [`move_to`] puts it in place with the data directory;
//! - a restored base backup's `pg_wal` is a plain directory: [`move_to`]
//!   moves it onto the WAL volume;
//! - [`remove_cluster`] removes a data directory and the WAL it links to.
//!
//! The symlink is authoritative: a data directory's WAL is wherever its
//! `pg_wal` points, whatever that directory is called (after a major upgrade
//! the new cluster's WAL has its own directory, see [`fresh`]).

use std::io;
use std::os::unix::fs::{DirBuilderExt, symlink};
use std::path::{Path, PathBuf};

/// A file system step on a data directory's WAL that failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {}: {source}", path.display())]
pub struct Error {
    pub action: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Error {
    let path = path.to_owned();
    move |source| Error {
        action,
        path,
        source,
    }
}

/// Where a bootstrap's WAL goes while its data directory is staged:
/// `<waldir>.tusk-bootstrap`, on the same volume as `waldir`, so that
/// putting it in place is a rename.
pub fn staging(waldir: &Path) -> PathBuf {
    suffixed(waldir, ".tusk-bootstrap")
}

/// `<dir><suffix>`.
pub fn suffixed(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The first of `<base>`, `<base>.2`, `<base>.3`, ... that is not `taken`:
/// the WAL directory of a new cluster beside others that are kept (a major
/// upgrade's new cluster next to the old one, or to a rejected one).
pub fn fresh(base: &Path, taken: impl Fn(&Path) -> bool) -> PathBuf {
    if !taken(base) {
        return base.to_owned();
    }
    (2u32..)
        .map(|n| suffixed(base, &format!(".{n}")))
        .find(|candidate| !taken(candidate))
        .unwrap_or_else(|| base.to_owned())
}

/// Where data directory `data` keeps its WAL when `pg_wal` is a symlink
/// (a relative link resolved against `data`); `None` when `pg_wal` is a
/// plain directory or absent.
pub fn target(data: &Path) -> Option<PathBuf> {
    let link = data.join("pg_wal");
    let target = std::fs::read_link(&link).ok()?;
    Some(if target.is_absolute() {
        target
    } else {
        data.join(target)
    })
}

/// Makes `to` the WAL directory of `data`: the WAL moves there (a rename
/// when `pg_wal` links elsewhere on the same volume; a copy when `pg_wal` is
/// a plain directory, as a restored base backup's is) and `pg_wal` links to
/// it. A stale `to` that `data` does not use is replaced. Safe to run again
/// after an interruption at any point: a WAL directory already renamed is
/// only linked.
pub fn move_to(data: &Path, to: &Path) -> Result<(), Error> {
    let link = data.join("pg_wal");
    match target(data) {
        Some(current) if current == to => return Ok(()),
        Some(current) => {
            if current.exists() {
                remove_if_exists(to)?;
                std::fs::rename(&current, to)
                    .map_err(io_error("move the WAL directory", &current))?;
            }
        }
        None => {
            remove_if_exists(to)?;
            create_private(to)?;
            if link.is_dir() {
                copy_tree(&link, to)?;
                std::fs::remove_dir_all(&link).map_err(io_error("remove", &link))?;
            }
        }
    }
    relink(data, to)
}

/// Removes data directory `dir` and the WAL directory its `pg_wal` links
/// to; nothing when `dir` is absent.
pub fn remove_cluster(dir: &Path) -> Result<(), Error> {
    if let Some(wal) = target(dir) {
        remove_if_exists(&wal)?;
    }
    remove_if_exists(dir)
}

/// Removes `dir` and what is in it, if it exists.
pub fn remove_if_exists(dir: &Path) -> Result<(), Error> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(dir).map_err(io_error("remove", dir)),
        Ok(_) => std::fs::remove_file(dir).map_err(io_error("remove", dir)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error {
            action: "inspect",
            path: dir.to_owned(),
            source,
        }),
    }
}

/// Points `data/pg_wal` at `to`, replacing whatever is there atomically
/// (a new link renamed over the old one).
fn relink(data: &Path, to: &Path) -> Result<(), Error> {
    let link = data.join("pg_wal");
    let fresh = data.join("pg_wal.tusk-link");
    remove_if_exists(&fresh)?;
    symlink(to, &fresh).map_err(io_error("create the symlink", &fresh))?;
    std::fs::rename(&fresh, &link).map_err(io_error("replace", &link))
}

/// A directory only its owner may read, as PostgreSQL wants its own.
fn create_private(dir: &Path) -> Result<(), Error> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_error("create", dir))
}

/// Copies the files and subdirectories of `from` into `to` (which exists):
/// across volumes, where a rename cannot go.
fn copy_tree(from: &Path, to: &Path) -> Result<(), Error> {
    let entries = std::fs::read_dir(from).map_err(io_error("read", from))?;
    for entry in entries {
        let entry = entry.map_err(io_error("read", from))?;
        let source = entry.path();
        let dest = to.join(entry.file_name());
        let kind = entry.file_type().map_err(io_error("inspect", &source))?;
        if kind.is_dir() {
            create_private(&dest)?;
            copy_tree(&source, &dest)?;
        } else {
            std::fs::copy(&source, &dest).map_err(io_error("copy", &source))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tusk-waldir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    fn write(path: &Path, text: &str) {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("parent");
        }
        std::fs::write(path, text).expect("write");
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn a_staged_wal_directory_moves_into_place_with_its_link() {
        let root = scratch("staged");
        let data = root.join("pgdata");
        let wal = root.join("wal/pg_wal");
        let staged = staging(&wal);
        write(&staged.join("000000010000000000000001"), "segment");
        std::fs::create_dir_all(&data).expect("data");
        symlink(&staged, data.join("pg_wal")).expect("link");
        // A stale WAL directory nobody uses is replaced.
        write(&wal.join("stale"), "old");

        move_to(&data, &wal).expect("moved");
        assert_eq!(target(&data), Some(wal.clone()));
        assert!(!staged.exists());
        assert!(!wal.join("stale").exists());
        assert_eq!(
            read(&data.join("pg_wal/000000010000000000000001")),
            "segment"
        );
        // Again: nothing to do.
        move_to(&data, &wal).expect("idempotent");
        assert_eq!(
            read(&data.join("pg_wal/000000010000000000000001")),
            "segment"
        );
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn an_interrupted_move_is_finished_by_linking() {
        let root = scratch("interrupted");
        let data = root.join("pgdata");
        let wal = root.join("wal/pg_wal");
        let staged = staging(&wal);
        std::fs::create_dir_all(&data).expect("data");
        symlink(&staged, data.join("pg_wal")).expect("link");
        // The rename happened, the link was not replaced yet.
        write(&wal.join("000000010000000000000002"), "segment");

        move_to(&data, &wal).expect("moved");
        assert_eq!(target(&data), Some(wal.clone()));
        assert_eq!(
            read(&data.join("pg_wal/000000010000000000000002")),
            "segment"
        );
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn a_plain_pg_wal_is_copied_onto_the_wal_volume() {
        let root = scratch("plain");
        let data = root.join("pgdata");
        let wal = root.join("wal/pg_wal");
        write(&data.join("pg_wal/archive_status/x.ready"), "");
        write(&data.join("pg_wal/000000010000000000000003"), "segment");

        move_to(&data, &wal).expect("moved");
        assert_eq!(target(&data), Some(wal.clone()));
        assert!(wal.join("archive_status/x.ready").is_file());
        assert_eq!(read(&wal.join("000000010000000000000003")), "segment");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&wal).expect("wal").permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn removing_a_cluster_removes_the_wal_it_links_to_and_nothing_else() {
        let root = scratch("remove");
        let data = root.join("pgdata.15.old");
        let wal = root.join("wal/pg_wal");
        let other = root.join("wal/pg_wal.17");
        write(&wal.join("a"), "old");
        write(&other.join("b"), "new");
        std::fs::create_dir_all(&data).expect("data");
        symlink(&wal, data.join("pg_wal")).expect("link");

        remove_cluster(&data).expect("removed");
        assert!(!data.exists());
        assert!(!wal.exists());
        assert_eq!(read(&other.join("b")), "new");
        remove_cluster(&data).expect("absent is fine");
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn a_fresh_name_skips_the_taken_ones() {
        let base = Path::new("/wal/pg_wal.17");
        assert_eq!(fresh(base, |_| false), base);
        let taken = [
            PathBuf::from("/wal/pg_wal.17"),
            PathBuf::from("/wal/pg_wal.17.2"),
        ];
        assert_eq!(
            fresh(base, |p| taken.iter().any(|t| t == p)),
            PathBuf::from("/wal/pg_wal.17.3")
        );
    }
}
