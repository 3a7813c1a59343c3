//! Scheduled base backups: the name of the Backup object a run creates. The
//! schedule itself, `spec.backup.schedule` parsed and searched, is
//! [`crate::schedule`]'s, a leaf that validation in `api` uses too (`api`
//! may not depend on `backup`); it is re-exported here for the backup side.
//!
//! Pure.

use jiff::Timestamp;

pub use crate::schedule::{Schedule, ScheduleError};

/// The name of the Backup object a scheduled run at `at` creates:
/// `<database>-<yyyymmddhhmmss>` in UTC, so names sort by time and a rerun of
/// the same scheduled time finds the object already there.
pub fn backup_name(database: &str, at: Timestamp) -> String {
    format!("{database}-{}", at.strftime("%Y%m%d%H%M%S"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    #[test]
    fn backup_names_are_the_database_and_the_utc_time() {
        assert_eq!(
            backup_name("orders", at("2026-11-24T02:00:00Z")),
            "orders-20261124020000"
        );
        assert_eq!(
            backup_name("orders", at("2026-11-24T02:00:00.999+05:00")),
            "orders-20261123210000"
        );
        // The longest database name still gives a valid object name.
        let longest = format!("a{}z", "-9".repeat(30)) + "9";
        assert_eq!(longest.len(), 63);
        let name = backup_name(&longest, at("2099-12-31T23:59:59Z"));
        assert!(name.len() <= 253, "{}", name.len());
        assert!(is_dns_subdomain(&name), "{name}");
    }

    fn is_dns_subdomain(name: &str) -> bool {
        name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    }
}
