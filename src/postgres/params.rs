//! Which parameter changes PostgreSQL applies on a reload and which need a restart.
//!
//! The list is the `postmaster` context of PostgreSQL 13–17 ("This parameter can
//! only be set at server start" in the documentation, `context = 'postmaster'` in
//! `pg_settings`). The operator uses it to choose between a reload and a rolling
//! restart before anything is applied; at run time the instance manager also
//! reports `pg_settings.pending_restart`, which catches what a static list cannot
//! (extension parameters, future versions).

use std::collections::BTreeMap;

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
