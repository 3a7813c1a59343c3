//! The files the manager writes: Tusk's part of the configuration (TLS
//! settings and `primary_conninfo` included), `pg_hba.conf`, the replication
//! password file, and the marker that makes an instance a standby.
//!
//! Tusk's settings live in `postgresql.tusk.conf`, included on the last line of
//! `postgresql.conf`. An include (rather than rewriting `postgresql.conf`) keeps the
//! defaults `initdb` tuned for the image and lets the manager replace its own file
//! wholesale; being last, it wins over anything earlier in `postgresql.conf`. A
//! clone copies both files from the primary and simply re-renders its own.
//! (`postgresql.auto.conf`, written by `ALTER SYSTEM`, is still read after it;
//! that is why Tusk never uses `pg_basebackup -R`, which writes there.)

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::contract::Credential;
use crate::postgres::config::{self, Archiving, Settings, Standby};
use crate::postgres::identifiers::slot_name;
use crate::postgres::{REPLICATION_USER, SUPERUSER, hba};

use super::tls::{self, upstream, upstream::Upstream};
use super::{Error, InstanceConfig, Shared};

pub const TUSK_CONF: &str = "postgresql.tusk.conf";
const INCLUDE_LINE: &str = "include 'postgresql.tusk.conf'";
const STANDBY_SIGNAL: &str = "standby.signal";
const PASSFILE: &str = ".tusk-replication.pgpass";

/// A standby is an instance whose data directory carries `standby.signal`;
/// PostgreSQL removes it when it is promoted.
pub fn is_standby(pgdata: &Path) -> bool {
    pgdata.join(STANDBY_SIGNAL).exists()
}

pub fn mark_standby(pgdata: &Path) -> Result<(), Error> {
    let path = pgdata.join(STANDBY_SIGNAL);
    write_if_changed(&path, "")
}

/// The password file libpq reads for replication (`passfile=` in
/// `primary_conninfo`), so the password never sits in a config file in PGDATA
/// (which backups copy) or on a command line. It lives in the runtime directory,
/// an emptyDir rewritten at every start.
pub fn passfile(config: &InstanceConfig) -> PathBuf {
    config.socket_dir.join(PASSFILE)
}

/// `hostname:port:database:username:password`, with `:` and `\` escaped.
fn passfile_line(user: &str, password: &str) -> String {
    let escape = |s: &str| s.replace('\\', "\\\\").replace(':', "\\:");
    format!("*:*:*:{}:{}\n", escape(user), escape(password))
}

pub fn write_passfile(shared: &Shared) -> Result<(), Error> {
    let password = shared.password(Credential::Replication).unwrap_or_default();
    write_if_changed(
        &passfile(&shared.config),
        &passfile_line(REPLICATION_USER, password.expose()),
    )
}

/// The settings for this instance in its current role, for the data directory
/// `pgdata` (PGDATA, or a bootstrap's staging directory).
pub fn settings(shared: &Shared, pgdata: &Path, standby: bool) -> Result<Settings, Error> {
    let config = &shared.config;
    let standby = if standby {
        let upstream = shared
            .upstream()
            .ok_or(Error::MissingPrimary("a replica"))?;
        Some(Standby {
            primary_conninfo: primary_conninfo(shared, &upstream),
            slot: slot_name(&config.instance),
        })
    } else {
        None
    };
    let sync = shared.sync();
    let archiving = match config.objectstore_bucket {
        Some(_) => Some(Archiving {
            program: tusk_program()?,
        }),
        None => None,
    };
    Ok(Settings {
        listen_addresses: config.listen_addresses.clone(),
        port: config.port,
        socket_dir: config.socket_dir.to_string_lossy().into_owned(),
        hba_file: pgdata.join("pg_hba.conf").to_string_lossy().into_owned(),
        standby,
        sync,
        archiving,
        recovery: None,
        parameters: shared.parameters(),
        tls: shared
            .tls
            .as_ref()
            .map(|watched| tls::postgres_settings(watched, &config.tls_min_version)),
    })
}

/// `primary_conninfo` for `upstream`: over TLS the replication certificate
/// authenticates (no password file named, so no password can be sent);
/// the old way the password comes from the password file.
fn primary_conninfo(shared: &Shared, upstream: &Upstream) -> String {
    let config = &shared.config;
    let client_files = shared.tls_client_files();
    let mut pairs = upstream::libpq_pairs(
        upstream,
        config.primary_port,
        REPLICATION_USER,
        client_files.as_ref(),
    );
    if !(upstream.tls && client_files.is_some()) {
        pairs.push(("passfile", passfile(config).to_string_lossy().into_owned()));
    }
    pairs.push(("application_name", config.instance.clone()));
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    config::conninfo(&pairs)
}

/// This executable, as PostgreSQL's children can run it (`archive_command`,
/// `restore_command`).
pub fn tusk_program() -> Result<String, Error> {
    let program = std::env::current_exe().map_err(|source| Error::Io {
        action: "finding the tusk executable for archive_command",
        path: PathBuf::from("/proc/self/exe"),
        source,
    })?;
    Ok(program.to_string_lossy().into_owned())
}

/// Render and write everything PostgreSQL reads at start or reload, for the role
/// the data directory says this instance has. Unchanged files are left alone.
pub fn write_config(shared: &Shared) -> Result<(), Error> {
    let pgdata = &shared.config.pgdata;
    let standby = is_standby(pgdata);
    write_settings(shared, pgdata, &settings(shared, pgdata, standby)?)
}

/// Write `settings` and the rest of what PostgreSQL reads into `pgdata`.
pub fn write_settings(shared: &Shared, pgdata: &Path, settings: &Settings) -> Result<(), Error> {
    let text = config::render(settings)?;
    write_if_changed(&pgdata.join(TUSK_CONF), &text)?;
    write_if_changed(
        &pgdata.join("pg_hba.conf"),
        &hba::render(SUPERUSER, REPLICATION_USER, hba_tls(shared).as_ref()),
    )?;
    ensure_include(&pgdata.join("postgresql.conf"))?;
    write_passfile(shared)?;
    Ok(())
}

/// `pg_hba.conf`'s TLS rules, when the instance has TLS.
fn hba_tls(shared: &Shared) -> Option<hba::Tls> {
    let config = &shared.config;
    shared.tls.as_ref().map(|_| hba::Tls {
        allow_plaintext: config.tls_allow_plaintext,
        cert_users: config.tls_cert_users.clone(),
    })
}

/// Append the include line to `postgresql.conf` unless it is there already.
fn ensure_include(path: &Path) -> Result<(), Error> {
    let current = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(Error::io("read", path)(err)),
    };
    if current.lines().any(|line| line.trim() == INCLUDE_LINE) {
        return Ok(());
    }
    let mut text = current;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("\n# Tusk's settings; last, so that they win over the lines above.\n");
    text.push_str(INCLUDE_LINE);
    text.push('\n');
    write_if_changed(path, &text)
}

/// Write `contents` to `path` with mode 0600 (libpq ignores a password file others
/// can read; config files hold nothing others need), through a temporary file and
/// a rename so PostgreSQL never reads half a file.
pub fn write_if_changed(path: &Path, contents: &str) -> Result<(), Error> {
    if let Ok(existing) = std::fs::read(path)
        && existing == contents.as_bytes()
    {
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(Error::io("set the mode of", path))?;
        }
        return Ok(());
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tusk-tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(Error::io("create", &tmp))?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(Error::io("write", &tmp))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(Error::io("set the mode of", &tmp))?;
    std::fs::rename(&tmp, path).map_err(Error::io("rename into", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passfile_lines_escape_colons_and_backslashes() {
        assert_eq!(
            passfile_line("tusk_replication", r"a:b\c"),
            "*:*:*:tusk_replication:a\\:b\\\\c\n"
        );
    }

    #[test]
    fn the_include_is_appended_once() {
        let dir = std::env::temp_dir().join(format!("tusk-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let conf = dir.join("postgresql.conf");
        std::fs::write(&conf, "max_connections = 100").expect("write");
        ensure_include(&conf).expect("first");
        ensure_include(&conf).expect("second");
        let text = std::fs::read_to_string(&conf).expect("read");
        assert_eq!(text.matches(INCLUDE_LINE).count(), 1);
        assert!(text.starts_with("max_connections = 100\n"));
        assert!(text.trim_end().ends_with(INCLUDE_LINE));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
