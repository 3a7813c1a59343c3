//! A drill's store outage (`POST /drill/store-outage` on the instance API):
//! until a deadline, `tusk wal-archive` talks to a store that cannot be
//! reached, so archiving fails exactly as it does when the real store is
//! down (the real client, its retries, its error) and PostgreSQL keeps the
//! segments `.ready` until it succeeds again.
//!
//! The instance manager and `tusk wal-archive` are separate processes (the
//! second is PostgreSQL's `archive_command`), so the outage is a file: the
//! deadline in Unix seconds, beside the data directory (on its volume, out
//! of base backups). `wal-archive` reads it on every call and ignores it
//! once its deadline has passed, so the outage ends on time even when the
//! manager that wrote it is gone; the manager removes it at the deadline,
//! or at once when the drill undoes it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::objectstore::StoreConfig;

/// Where no store answers: a loopback port nothing listens on in a pod
/// (TCP port 1), so every request is refused at once and retried as the
/// client retries any unreachable store.
pub const UNREACHABLE_ENDPOINT: &str = "http://127.0.0.1:1";

/// The file holding the outage's deadline.
pub fn file(pgdata: &Path) -> PathBuf {
    pgdata.parent().unwrap_or(pgdata).join("tusk-store-outage")
}

/// Start (or extend) an outage until `until`.
pub fn begin(pgdata: &Path, until: SystemTime) -> std::io::Result<()> {
    // Rounded up: an outage may end a moment late, never early.
    let since_epoch = until.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let seconds = since_epoch.as_secs() + u64::from(since_epoch.subsec_nanos() > 0);
    let path = file(pgdata);
    let partial = path.with_extension("partial");
    std::fs::write(&partial, format!("{seconds}\n"))?;
    std::fs::rename(&partial, &path)
}

/// End the outage (nothing to do when none is in effect).
pub fn end(pgdata: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(file(pgdata)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The deadline of the outage in effect at `now`, if one is.
pub fn active(pgdata: &Path, now: SystemTime) -> Option<SystemTime> {
    let text = std::fs::read_to_string(file(pgdata)).ok()?;
    in_effect(&text, now)
}

/// The deadline in `text` (the file's contents), when it is still ahead of
/// `now`; a file that does not parse is no outage.
pub fn in_effect(text: &str, now: SystemTime) -> Option<SystemTime> {
    let seconds: u64 = text.trim().parse().ok()?;
    let until = UNIX_EPOCH + Duration::from_secs(seconds);
    (until > now).then_some(until)
}

/// The store `wal-archive` uses at `now`: `configured`, or an unreachable
/// one while an outage is in effect.
pub fn apply(pgdata: &Path, mut configured: StoreConfig, now: SystemTime) -> StoreConfig {
    if active(pgdata, now).is_some() {
        configured.endpoint = Some(UNREACHABLE_ENDPOINT.to_owned());
    }
    configured
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn an_outage_holds_until_its_deadline_and_not_a_second_longer() {
        // (file contents, now, in effect until)
        let rows = [
            ("1000\n", 999, Some(1000)),
            ("1000", 1000, None),
            ("1000", 5000, None),
            ("", 10, None),
            ("soon", 10, None),
            ("-5", 10, None),
        ];
        for (text, now, until) in rows {
            assert_eq!(in_effect(text, at(now)), until.map(at), "{text:?} at {now}");
        }
    }

    #[test]
    fn the_store_is_unreachable_only_while_the_file_says_so() {
        let dir = std::env::temp_dir().join(format!("tusk-outage-{}", std::process::id()));
        let pgdata = dir.join("pgdata");
        std::fs::create_dir_all(&pgdata).expect("mkdir");
        let configured = StoreConfig {
            endpoint: Some("https://store.example:9000".into()),
            bucket: "b".into(),
            ..StoreConfig::default()
        };
        let now = SystemTime::now();
        assert_eq!(apply(&pgdata, configured.clone(), now), configured);
        begin(&pgdata, now + Duration::from_secs(30)).expect("begin");
        assert!(file(&pgdata).starts_with(&dir) && !file(&pgdata).starts_with(&pgdata));
        let during = apply(&pgdata, configured.clone(), now);
        assert_eq!(during.endpoint.as_deref(), Some(UNREACHABLE_ENDPOINT));
        assert_eq!(during.bucket, "b");
        // Past the deadline the file changes nothing, even left behind.
        assert_eq!(
            apply(&pgdata, configured.clone(), now + Duration::from_secs(31)),
            configured
        );
        end(&pgdata).expect("end");
        end(&pgdata).expect("ending twice is fine");
        assert_eq!(active(&pgdata, now), None);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
