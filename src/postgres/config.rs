//! Rendering the `postgresql.conf` settings Tusk owns, merged with the user's
//! `spec.postgresql.parameters`.
//!
//! The instance manager writes the result to its own file included from
//! `postgresql.conf`; this module only produces the text. Every value is written
//! as a quoted string (PostgreSQL accepts quotes around numbers and booleans
//! too), so one escaping rule covers all of them.

use std::collections::BTreeMap;

use super::identifiers::quote_ident;
use super::params::{self, ParamError};

/// Why a set of parameters cannot be rendered: the first refused one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.postgresql.parameters.{name} {error}")]
pub struct ConfigError {
    pub name: String,
    pub error: ParamError,
}

/// What Tusk needs to say about one instance's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `listen_addresses`: `*` in a pod; tests narrow it to loopback.
    pub listen_addresses: String,
    /// `port`: 5432 in a pod.
    pub port: u16,
    /// `unix_socket_directories`: `/var/run/postgresql` in a pod (a writable emptyDir).
    pub socket_dir: String,
    /// `hba_file`: absolute path of the `pg_hba.conf` Tusk renders.
    pub hba_file: String,
    /// Set when the instance is a streaming replica.
    pub standby: Option<Standby>,
    /// Set with `spec.replication.mode: sync`.
    pub sync: Option<SyncReplication>,
    /// Set when the Database has an object store.
    pub archiving: Option<Archiving>,
    /// Set only while a restore bootstrap replays its source's archive.
    pub recovery: Option<Recovery>,
    /// `spec.postgresql.parameters`, validated by [`validate_parameters`].
    pub parameters: BTreeMap<String, String>,
    /// Set when the instance serves TLS.
    pub tls: Option<Tls>,
}

/// PostgreSQL's TLS files (the manager's private copies) and protocol floor.
/// With them `ssl = on`; PostgreSQL 17's direct TLS negotiation
/// (`sslnegotiation=direct`, ALPN `postgresql`) needs nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// `ssl_cert_file`: the server certificate.
    pub cert_file: String,
    /// `ssl_key_file`: its key (mode 0600, or PostgreSQL refuses it).
    pub key_file: String,
    /// `ssl_ca_file`: the CAs that verify client certificates (the
    /// replication role's, certificate users').
    pub client_ca_file: String,
    /// `ssl_min_protocol_version`: `TLSv1.2` or `TLSv1.3`.
    pub min_version: String,
}

/// How a replica reaches its primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standby {
    /// `primary_conninfo`, usually built with [`conninfo`].
    pub primary_conninfo: String,
    /// `primary_slot_name`: the physical slot the primary keeps for this instance.
    pub slot: String,
}

/// WAL to and from the object store, through `tusk wal-archive` and
/// `tusk wal-restore`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archiving {
    /// The `tusk` executable, as PostgreSQL's children can run it.
    pub program: String,
}

/// Targeted recovery from another Database's archive, then promotion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// `restore_command`: reads the source's archive, never this Database's.
    pub restore_command: String,
    /// `recovery_target_time` or `recovery_target_lsn` and its value; `None`:
    /// to the end of the archive.
    pub target: Option<(&'static str, String)>,
    /// `recovery_target_timeline`.
    pub timeline: u32,
}

/// Quorum synchronous replication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncReplication {
    /// How many standbys must confirm each commit.
    pub min: u32,
    /// `application_name`s of the standbys (their instance names). Empty means any
    /// standby (`*`), for when the manager does not know the other instances.
    pub standbys: Vec<String>,
}

/// Defaults for settings that replication depends on but a user may tune.
const TUNABLE_DEFAULTS: &[(&str, &str)] = &[
    ("hot_standby", "on"),
    ("max_replication_slots", "10"),
    ("max_wal_senders", "10"),
    ("password_encryption", "scram-sha-256"),
    // After a failover a standby finds the new primary on its next attempt;
    // the default waits five seconds between attempts.
    ("wal_retrieve_retry_interval", "1s"),
    // Slots keep the WAL each replica needs; this only covers a replica whose slot
    // has not been created yet, so it stays modest.
    ("wal_keep_size", "256MB"),
];

/// Refuses what [`params::check`] refuses: the instance manager applies the
/// same rule as the API server, the webhook and the reconciler.
pub fn validate_parameters(parameters: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    match params::check_all(parameters).into_iter().next() {
        Some((name, error)) => Err(ConfigError { name, error }),
        None => Ok(()),
    }
}

/// Render the configuration: Tusk's tunable defaults, overridden by the user's
/// parameters, then the settings Tusk owns. Sorted by name, so the same input
/// always gives the same bytes (and an unchanged file is not rewritten).
pub fn render(settings: &Settings) -> Result<String, ConfigError> {
    validate_parameters(&settings.parameters)?;

    let mut values: BTreeMap<String, String> = TUNABLE_DEFAULTS
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    if settings.archiving.is_some() {
        // A segment is archived at least this often even when little is
        // written, which bounds what a lost volume can take with it.
        values.insert("archive_timeout".to_owned(), "5min".to_owned());
    }
    for (name, value) in &settings.parameters {
        values.insert(name.to_ascii_lowercase(), value.clone());
    }
    let owned = [
        ("listen_addresses", settings.listen_addresses.clone()),
        ("port", settings.port.to_string()),
        ("unix_socket_directories", settings.socket_dir.clone()),
        ("wal_level", "replica".to_owned()),
        ("hba_file", settings.hba_file.clone()),
    ];
    for (name, value) in owned {
        values.insert(name.to_owned(), value);
    }
    if let Some(tls) = &settings.tls {
        let owned = [
            ("ssl", "on"),
            ("ssl_cert_file", &tls.cert_file),
            ("ssl_key_file", &tls.key_file),
            ("ssl_ca_file", &tls.client_ca_file),
            ("ssl_min_protocol_version", &tls.min_version),
        ];
        for (name, value) in owned {
            values.insert(name.to_owned(), value.to_owned());
        }
    }
    if let Some(standby) = &settings.standby {
        values.insert(
            "primary_conninfo".to_owned(),
            standby.primary_conninfo.clone(),
        );
        values.insert("primary_slot_name".to_owned(), standby.slot.clone());
    }
    if let Some(archiving) = &settings.archiving {
        values.insert("archive_mode".to_owned(), "on".to_owned());
        values.insert(
            "archive_command".to_owned(),
            format!("{} wal-archive %p", archiving.program),
        );
        values.insert(
            "restore_command".to_owned(),
            format!("{} wal-restore %f %p", archiving.program),
        );
    }
    if let Some(recovery) = &settings.recovery {
        values.insert(
            "restore_command".to_owned(),
            recovery.restore_command.clone(),
        );
        // No connections until promoted: a hot standby would refuse to
        // recover a source whose max_connections, max_worker_processes,
        // max_wal_senders, max_prepared_transactions or
        // max_locks_per_transaction exceed this Database's.
        values.insert("hot_standby".to_owned(), "off".to_owned());
        values.insert(
            "recovery_target_timeline".to_owned(),
            recovery.timeline.to_string(),
        );
        if let Some((name, value)) = &recovery.target {
            values.insert((*name).to_owned(), value.clone());
            values.insert("recovery_target_action".to_owned(), "promote".to_owned());
        }
    }
    if let Some(sync) = &settings.sync {
        values.insert(
            "synchronous_standby_names".to_owned(),
            synchronous_standby_names(sync),
        );
    }

    let mut out = String::from(
        "# Written by the Tusk instance manager at every start and reload; edits are lost.\n\
         # Set parameters in spec.postgresql.parameters of the Database instead.\n",
    );
    for (name, value) in &values {
        out.push_str(name);
        out.push_str(" = ");
        out.push_str(&quote_value(value));
        out.push('\n');
    }
    Ok(out)
}

/// `ANY n ("a", "b")`: quorum commit over the named standbys, or over any standby.
pub fn synchronous_standby_names(sync: &SyncReplication) -> String {
    let names = if sync.standbys.is_empty() {
        "*".to_owned()
    } else {
        let mut names: Vec<&str> = sync.standbys.iter().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .map(quote_ident)
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("ANY {} ({names})", sync.min.max(1))
}

/// Quote a value for `postgresql.conf`: inside single quotes the file format
/// treats a doubled quote as a quote and processes backslash escapes, so both are
/// escaped. Control characters are refused earlier by [`validate_parameters`].
pub fn quote_value(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

/// A libpq connection string from keyword/value pairs; every value is quoted
/// (`'...'` with `\` and `'` backslash-escaped) so spaces and quotes survive.
pub fn conninfo(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(key, value)| {
            format!(
                "{key}='{}'",
                value.replace('\\', "\\\\").replace('\'', "\\'")
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            listen_addresses: "*".to_owned(),
            port: 5432,
            socket_dir: "/var/run/postgresql".to_owned(),
            hba_file: "/var/lib/postgresql/data/pgdata/pg_hba.conf".to_owned(),
            standby: None,
            sync: None,
            archiving: None,
            recovery: None,
            parameters: BTreeMap::new(),
            tls: None,
        }
    }

    #[test]
    fn with_tls_ssl_is_on_with_the_private_files_and_the_floor() {
        let mut s = settings();
        s.tls = Some(Tls {
            cert_file: "/run/tls/tls.crt".to_owned(),
            key_file: "/run/tls/tls.key".to_owned(),
            client_ca_file: "/run/tls/client-ca.crt".to_owned(),
            min_version: "TLSv1.3".to_owned(),
        });
        let lines = lines_of(&render(&s).expect("renders"));
        for line in [
            "ssl = 'on'",
            "ssl_cert_file = '/run/tls/tls.crt'",
            "ssl_key_file = '/run/tls/tls.key'",
            "ssl_ca_file = '/run/tls/client-ca.crt'",
            "ssl_min_protocol_version = 'TLSv1.3'",
        ] {
            assert!(
                lines.contains(&line.to_owned()),
                "{line} missing: {lines:?}"
            );
        }
        let text = render(&settings()).expect("renders");
        assert!(!text.contains("ssl"), "{text}");
    }

    #[test]
    fn with_a_store_wal_goes_through_tusk_and_the_timeout_is_tunable() {
        let mut with_store = settings();
        with_store.archiving = Some(Archiving {
            program: "/tusk/bin/tusk".into(),
        });
        let text = render(&with_store).expect("renders");
        let lines = lines(&text);
        for line in [
            "archive_mode = 'on'",
            "archive_command = '/tusk/bin/tusk wal-archive %p'",
            "restore_command = '/tusk/bin/tusk wal-restore %f %p'",
            "archive_timeout = '5min'",
        ] {
            assert!(lines.contains(&line), "{line} missing from {lines:?}");
        }
        with_store
            .parameters
            .insert("archive_timeout".into(), "60s".into());
        let text = render(&with_store).expect("renders");
        assert!(lines_of(&text).contains(&"archive_timeout = '60s'".to_owned()));
        let text = render(&settings()).expect("renders");
        assert!(!text.contains("archive"), "{text}");
    }

    fn lines_of(text: &str) -> Vec<String> {
        lines(text).into_iter().map(str::to_owned).collect()
    }

    fn lines(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn a_primary_gets_the_owned_settings_sorted() {
        let text = render(&settings()).expect("renders");
        assert_eq!(
            lines(&text),
            vec![
                "hba_file = '/var/lib/postgresql/data/pgdata/pg_hba.conf'",
                "hot_standby = 'on'",
                "listen_addresses = '*'",
                "max_replication_slots = '10'",
                "max_wal_senders = '10'",
                "password_encryption = 'scram-sha-256'",
                "port = '5432'",
                "unix_socket_directories = '/var/run/postgresql'",
                "wal_keep_size = '256MB'",
                "wal_level = 'replica'",
                "wal_retrieve_retry_interval = '1s'",
            ]
        );
        assert_eq!(render(&settings()), render(&settings()));
    }

    #[test]
    fn a_replica_gets_conninfo_and_slot() {
        let mut s = settings();
        s.standby = Some(Standby {
            primary_conninfo: conninfo(&[
                ("host", "orders-rw"),
                ("user", "tusk_replication"),
                ("application_name", "orders-2"),
            ]),
            slot: "orders_2".to_owned(),
        });
        let text = render(&s).expect("renders");
        assert!(text.contains(
            "primary_conninfo = 'host=''orders-rw'' user=''tusk_replication'' application_name=''orders-2'''\n"
        ));
        assert!(text.contains("primary_slot_name = 'orders_2'\n"));
    }

    #[test]
    fn a_targeted_restore_reads_the_source_and_promotes_at_the_target() {
        let mut s = settings();
        s.recovery = Some(Recovery {
            restore_command: "/tusk/bin/tusk wal-restore --source %f %p".to_owned(),
            target: Some(("recovery_target_time", "2026-11-24 10:01:00+00".to_owned())),
            timeline: 2,
        });
        let lines = lines_of(&render(&s).expect("renders"));
        for line in [
            "restore_command = '/tusk/bin/tusk wal-restore --source %f %p'",
            "recovery_target_time = '2026-11-24 10:01:00+00'",
            "recovery_target_action = 'promote'",
            "recovery_target_timeline = '2'",
            "hot_standby = 'off'",
        ] {
            assert!(
                lines.contains(&line.to_owned()),
                "{line} missing: {lines:?}"
            );
        }
        // To the end of the archive: no target, PostgreSQL promotes by itself.
        s.recovery = Some(Recovery {
            restore_command: "x".to_owned(),
            target: None,
            timeline: 1,
        });
        let text = render(&s).expect("renders");
        assert!(!text.contains("recovery_target_action"), "{text}");
    }

    #[test]
    fn sync_mode_names_a_quorum_of_standbys() {
        let sync = SyncReplication {
            min: 1,
            standbys: vec!["orders-3".to_owned(), "orders-2".to_owned()],
        };
        assert_eq!(
            synchronous_standby_names(&sync),
            r#"ANY 1 ("orders-2", "orders-3")"#
        );
        let any = SyncReplication {
            min: 2,
            standbys: vec![],
        };
        assert_eq!(synchronous_standby_names(&any), "ANY 2 (*)");
        let mut s = settings();
        s.sync = Some(sync);
        assert!(
            render(&s)
                .expect("renders")
                .contains("synchronous_standby_names = 'ANY 1 (\"orders-2\", \"orders-3\")'\n")
        );
    }

    #[test]
    fn user_parameters_override_tunable_defaults_and_are_quoted() {
        let mut s = settings();
        s.parameters.insert("max_wal_senders".into(), "20".into());
        s.parameters
            .insert("search_path".into(), "'$user', public".into());
        s.parameters
            .insert("log_line_prefix".into(), r"%m \ x".into());
        let text = render(&s).expect("renders");
        assert!(text.contains("max_wal_senders = '20'\n"));
        assert!(!text.contains("max_wal_senders = '10'"));
        assert!(text.contains("search_path = '''$user'', public'\n"));
        assert!(text.contains(r"log_line_prefix = '%m \\ x'"));
    }

    #[test]
    fn owned_parameters_are_refused_by_name() {
        for name in ["archive_command", "port", "Listen_Addresses", "wal_level"] {
            let mut s = settings();
            s.parameters.insert(name.into(), "x".into());
            let err = render(&s).expect_err("refused");
            assert_eq!(err.error, ParamError::Owned);
            assert!(
                err.to_string()
                    .starts_with(&format!("spec.postgresql.parameters.{name} ")),
                "{err}"
            );
            assert!(err.to_string().contains("managed by Tusk"), "{err}");
        }
    }

    #[test]
    fn directives_bad_names_and_control_characters_are_refused() {
        let cases = [
            ("include", "/etc/passwd"),
            ("include_dir", "/tmp"),
            ("work_mem\nport", "1"),
            ("", "1"),
            ("1abc", "1"),
            ("work_mem", "4MB\nport = 1"),
        ];
        for (name, value) in cases {
            let mut parameters = BTreeMap::new();
            parameters.insert(name.to_owned(), value.to_owned());
            assert!(validate_parameters(&parameters).is_err(), "{name:?}");
        }
        let mut ok = BTreeMap::new();
        ok.insert("pg_stat_statements.max".to_owned(), "1000".to_owned());
        assert_eq!(validate_parameters(&ok), Ok(()));
    }

    #[test]
    fn conninfo_quotes_every_value() {
        assert_eq!(
            conninfo(&[("host", "a b"), ("passfile", r"/x/it's\y")]),
            r"host='a b' passfile='/x/it\'s\\y'"
        );
    }
}
