//! Which parameter changes PostgreSQL applies on a reload and which need a restart.
//!
//! The list is the `postmaster` context of PostgreSQL 13–17 ("This parameter can
//! only be set at server start" in the documentation, `context = 'postmaster'` in
//! `pg_settings`). The operator uses it to choose between a reload and a rolling
//! restart before anything is applied; at run time the instance manager also
//! reports `pg_settings.pending_restart`, which catches what a static list cannot
//! (extension parameters, future versions).

use std::collections::BTreeMap;

/// Parameters that Tusk renders itself (listening, replication, archiving and
/// recovery, TLS and authentication files): a user's value would fight Tusk's
/// or take the instance out of its control.
pub const OWNED: &[&str] = &[
    "archive_cleanup_command",
    "archive_command",
    "archive_library",
    "archive_mode",
    "data_directory",
    "external_pid_file",
    "hba_file",
    "ident_file",
    "listen_addresses",
    "port",
    "primary_conninfo",
    "primary_slot_name",
    "promote_trigger_file",
    "recovery_end_command",
    "recovery_target",
    "recovery_target_action",
    "recovery_target_inclusive",
    "recovery_target_lsn",
    "recovery_target_name",
    "recovery_target_time",
    "recovery_target_timeline",
    "recovery_target_xid",
    "restore_command",
    "ssl",
    "ssl_ca_file",
    "ssl_cert_file",
    "ssl_crl_dir",
    "ssl_crl_file",
    "ssl_key_file",
    "synchronous_standby_names",
    "unix_socket_directories",
    "unix_socket_group",
    "unix_socket_permissions",
    "wal_level",
];

/// Configuration-file directives, not parameters: each would make PostgreSQL
/// read a file Tusk does not write, and so bypass every other rule here.
pub const DIRECTIVES: &[&str] = &["config_file", "include", "include_dir", "include_if_exists"];

/// The units PostgreSQL accepts after a number (case-sensitive): memory, then time.
pub const UNITS: &[&str] = &[
    "B", "kB", "MB", "GB", "TB", "us", "ms", "s", "min", "h", "d",
];

/// Longest parameter name PostgreSQL accepts (NAMEDATALEN - 1).
pub const MAX_NAME_LEN: usize = 63;

/// Why one entry of `spec.postgresql.parameters` is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error(
        "is not a PostgreSQL parameter name (letters, digits, _ and $, with a . after an extension's prefix)"
    )]
    InvalidName,
    #[error("is managed by Tusk and cannot be set")]
    Owned,
    #[error("is a configuration-file directive, not a parameter, and cannot be set")]
    Directive,
    #[error("has a value with a newline, NUL or other control character")]
    ControlCharacter,
    #[error(
        "has the unit {unit:?}, which PostgreSQL does not know (units are case-sensitive: B, kB, MB, GB, TB, us, ms, s, min, h, d)"
    )]
    UnknownUnit { unit: String },
}

/// Checks one parameter: the one rule the schema's CEL (generated from the
/// constants above), the webhook, the reconciler and the instance manager
/// all apply.
pub fn check(name: &str, value: &str) -> Result<(), ParamError> {
    if !is_valid_name(name) {
        return Err(ParamError::InvalidName);
    }
    let lower = name.to_ascii_lowercase();
    if DIRECTIVES.contains(&lower.as_str()) {
        return Err(ParamError::Directive);
    }
    if OWNED.contains(&lower.as_str()) {
        return Err(ParamError::Owned);
    }
    if value.chars().any(char::is_control) {
        return Err(ParamError::ControlCharacter);
    }
    if let Some(unit) = unit_of(value)
        && !UNITS.contains(&unit)
    {
        return Err(ParamError::UnknownUnit {
            unit: unit.to_owned(),
        });
    }
    Ok(())
}

/// Every refused entry, in name order.
pub fn check_all(parameters: &BTreeMap<String, String>) -> Vec<(String, ParamError)> {
    parameters
        .iter()
        .filter_map(|(name, value)| check(name, value).err().map(|e| (name.clone(), e)))
        .collect()
}

/// A GUC name: letters, digits, `_` and `$`, with `.` separating an extension prefix.
fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.split('.').all(|part| {
            part.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        })
}

/// The unit of a value written as a number followed by letters (`128MB`,
/// `5 min`), as PostgreSQL parses integer and real parameters; `None` for
/// anything else (words, lists, paths, plain numbers).
fn unit_of(value: &str) -> Option<&str> {
    let value = value.trim();
    let digits = value
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || (*c == '.' && *i > 0) || (*c == '-' && *i == 0)))
        .map_or(value.len(), |(i, _)| i);
    let (number, rest) = value.split_at(digits);
    if !number.chars().any(|c| c.is_ascii_digit()) {
        return None;
    }
    let unit = rest.trim_start();
    (!unit.is_empty() && unit.chars().all(|c| c.is_ascii_alphabetic())).then_some(unit)
}

/// A CEL list literal of `names`.
fn cel_list(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The CEL test for a refused key `k` of `self`, the parameters map.
fn cel_refused() -> String {
    format!(
        "k.lowerAscii() in {} || k.lowerAscii() in {} || self[k].matches('[\\x00-\\x1f\\x7f]')",
        cel_list(DIRECTIVES),
        cel_list(OWNED)
    )
}

/// The CEL rule of `spec.postgresql.parameters`, generated from the same
/// constants [`check`] uses, so that the API server refuses what it can
/// (names and control characters) before the webhook is even asked.
pub fn cel_rule() -> String {
    format!("!self.exists(k, {})", cel_refused())
}

/// The CEL message expression that goes with [`cel_rule`]: the first refused
/// entry, by field and with [`check`]'s words for why.
pub fn cel_message_expression() -> String {
    format!(
        "self.filter(k, {refused}).map(k, 'spec.postgresql.parameters.' + k + ' ' + \
         (k.lowerAscii() in {directives} ? '{directive}' : k.lowerAscii() in {owned} ? '{owned_error}' : '{control}'))[0]",
        refused = cel_refused(),
        directives = cel_list(DIRECTIVES),
        owned = cel_list(OWNED),
        directive = ParamError::Directive,
        owned_error = ParamError::Owned,
        control = ParamError::ControlCharacter,
    )
}

/// The message of [`cel_rule`] where its expression cannot be evaluated.
pub const CEL_MESSAGE: &str = "spec.postgresql.parameters sets a directive (include, include_dir, include_if_exists, config_file) or a parameter that Tusk manages itself (archiving, recovery, replication, listening, TLS files), or a value with a control character";

/// Parameters that only take effect when the postmaster starts (sorted, lower case).
pub const RESTART_PARAMETERS: &[&str] = &[
    "archive_mode",
    "autovacuum_freeze_max_age",
    "autovacuum_max_workers",
    "autovacuum_multixact_freeze_max_age",
    "bonjour",
    "bonjour_name",
    "cluster_name",
    "commit_timestamp_buffers",
    "config_file",
    "data_directory",
    "data_sync_retry",
    "debug_io_direct",
    "dynamic_shared_memory_type",
    "event_source",
    "external_pid_file",
    "hba_file",
    "hot_standby",
    "huge_page_size",
    "huge_pages",
    "ident_file",
    "ignore_invalid_pages",
    "jit_provider",
    "listen_addresses",
    "logging_collector",
    "max_connections",
    "max_files_per_process",
    "max_locks_per_transaction",
    "max_logical_replication_workers",
    "max_notify_queue_pages",
    "max_pred_locks_per_transaction",
    "max_prepared_transactions",
    "max_replication_slots",
    "max_wal_senders",
    "max_worker_processes",
    "min_dynamic_shared_memory",
    "multixact_member_buffers",
    "multixact_offset_buffers",
    "notify_buffers",
    "old_snapshot_threshold",
    "pg_stat_statements.max",
    "port",
    "recovery_target",
    "recovery_target_action",
    "recovery_target_inclusive",
    "recovery_target_lsn",
    "recovery_target_name",
    "recovery_target_time",
    "recovery_target_timeline",
    "recovery_target_xid",
    "reserved_connections",
    "serializable_buffers",
    "shared_buffers",
    "shared_memory_type",
    "shared_preload_libraries",
    "subtransaction_buffers",
    "superuser_reserved_connections",
    "track_activity_query_size",
    "track_commit_timestamp",
    "transaction_buffers",
    "unix_socket_directories",
    "unix_socket_group",
    "unix_socket_permissions",
    "wal_buffers",
    "wal_decode_buffer_size",
    "wal_level",
    "wal_log_hints",
];

/// Whether a change to `name` takes effect only after a restart. Parameter names
/// are case-insensitive in PostgreSQL.
pub fn needs_restart(name: &str) -> bool {
    RESTART_PARAMETERS
        .binary_search(&name.to_ascii_lowercase().as_str())
        .is_ok()
}

pub use crate::contract::Change;

/// Compare two parameter maps. A parameter added, removed (back to its default) or
/// with a different value counts as changed; values are compared as written, so
/// `128MB` → `131072kB` is (conservatively) a change.
pub fn classify(old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Change {
    let old = normalize(old);
    let new = normalize(new);
    let changed = old
        .iter()
        .filter(|(name, value)| new.get(*name) != Some(*value))
        .map(|(name, _)| name)
        .chain(
            new.iter()
                .filter(|(name, _)| !old.contains_key(*name))
                .map(|(name, _)| name),
        );
    changed.fold(Change::Nothing, |change, name| {
        change.max(if needs_restart(name) {
            Change::Restart
        } else {
            Change::Reload
        })
    })
}

fn normalize(parameters: &BTreeMap<String, String>) -> BTreeMap<String, &str> {
    parameters
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_for_names_values_and_units() {
        for ok in [
            ("work_mem", "8MB"),
            ("statement_timeout", "5min"),
            ("log_min_duration_statement", "250 ms"),
            ("pg_stat_statements.max", "1000"),
            ("search_path", "'$user', public"),
            ("random_page_cost", "1.1"),
            ("synchronous_commit", "on"),
        ] {
            assert_eq!(check(ok.0, ok.1), Ok(()), "{ok:?}");
        }
        let refused = [
            ("include", "/etc/passwd", ParamError::Directive),
            ("Include_Dir", "/tmp", ParamError::Directive),
            ("include_if_exists", "/tmp/x", ParamError::Directive),
            ("config_file", "/tmp/x.conf", ParamError::Directive),
            ("archive_command", "true", ParamError::Owned),
            ("Listen_Addresses", "*", ParamError::Owned),
            ("work_mem\nport", "1", ParamError::InvalidName),
            ("", "1", ParamError::InvalidName),
            ("1abc", "1", ParamError::InvalidName),
            ("work_mem", "4MB\nport = 1", ParamError::ControlCharacter),
            ("work_mem", "4MB\0", ParamError::ControlCharacter),
            (
                "work_mem",
                "128mb",
                ParamError::UnknownUnit { unit: "mb".into() },
            ),
            (
                "statement_timeout",
                "5 minutes",
                ParamError::UnknownUnit {
                    unit: "minutes".into(),
                },
            ),
        ];
        for (name, value, error) in refused {
            assert_eq!(check(name, value), Err(error), "{name:?} = {value:?}");
        }
    }

    #[test]
    fn the_cel_rule_names_every_refused_name() {
        let rule = cel_rule();
        let message = cel_message_expression();
        for name in DIRECTIVES.iter().chain(OWNED) {
            assert!(rule.contains(&format!("'{name}'")), "{name}");
            assert!(message.contains(&format!("'{name}'")), "{name}");
        }
        for error in [
            ParamError::Directive,
            ParamError::Owned,
            ParamError::ControlCharacter,
        ] {
            let words = error.to_string();
            assert!(!words.contains('\''), "{words} would end the CEL string");
            assert!(message.contains(&words), "{words}");
        }
        let mut sorted = OWNED.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, OWNED, "kept sorted for review");
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_list_is_sorted_so_binary_search_works() {
        let mut sorted = RESTART_PARAMETERS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, RESTART_PARAMETERS);
    }

    #[test]
    fn postmaster_parameters_need_a_restart() {
        for name in [
            "shared_buffers",
            "max_connections",
            "max_wal_senders",
            "max_replication_slots",
            "wal_level",
            "port",
            "shared_preload_libraries",
            "huge_pages",
            "max_worker_processes",
            "Shared_Buffers",
        ] {
            assert!(needs_restart(name), "{name}");
        }
        for name in ["work_mem", "log_min_duration_statement", "archive_command"] {
            assert!(!needs_restart(name), "{name}");
        }
    }

    #[test]
    fn classify_picks_the_strongest_change() {
        let old = map(&[("work_mem", "4MB"), ("max_connections", "100")]);
        assert_eq!(classify(&old, &old), Change::Nothing);
        assert_eq!(
            classify(
                &old,
                &map(&[("work_mem", "8MB"), ("max_connections", "100")])
            ),
            Change::Reload
        );
        assert_eq!(
            classify(
                &old,
                &map(&[("work_mem", "8MB"), ("max_connections", "200")])
            ),
            Change::Restart
        );
        // removing a postmaster parameter returns it to its default: a restart
        assert_eq!(
            classify(&old, &map(&[("work_mem", "4MB")])),
            Change::Restart
        );
        // adding a reloadable one
        assert_eq!(
            classify(&BTreeMap::new(), &map(&[("work_mem", "4MB")])),
            Change::Reload
        );
        // names are case-insensitive
        assert_eq!(
            classify(
                &old,
                &map(&[("WORK_MEM", "4MB"), ("max_connections", "100")])
            ),
            Change::Nothing
        );
    }
}
