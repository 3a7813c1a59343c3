//! `manifest.json`, written next to `data.tar.zst` once the data is stored.
//! Its presence is what makes a backup: a backup directory without one is an
//! interrupted backup, never restored from and removed by retention.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::contract::Lsn;

/// The manifest format this build writes and reads.
pub const FORMAT: u32 = 1;

/// The name of the stored data object inside a backup's directory.
pub const DATA: &str = "data.tar.zst";
/// The name of the manifest inside a backup's directory.
pub const MANIFEST: &str = "manifest.json";

/// Everything a restore needs to know about one base backup.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: u32,
    /// The backup id: the directory under `base/`, `YYYYMMDDTHHMMSSZ` of the
    /// start, so ids sort by time.
    pub id: String,
    /// The Backup object that asked for it.
    pub backup: String,
    pub database: String,
    /// The instance (pod) that took it, and whether it was a standby then.
    pub instance: String,
    pub from_standby: bool,
    /// From `pg_control`; a string, as JSON numbers lose bits past 2^53.
    #[serde(with = "u64_string")]
    pub system_identifier: u64,
    /// `server_version_num`, e.g. 170005.
    pub pg_version: u32,
    /// The timeline the backup starts on.
    pub timeline: u32,
    /// Restoring must replay WAL from `begin_lsn` to at least `end_lsn`.
    pub begin_lsn: Lsn,
    pub end_lsn: Lsn,
    /// The WAL files holding `begin_lsn` and `end_lsn`.
    pub begin_wal: String,
    pub end_wal: String,
    pub started_at: Timestamp,
    pub completed_at: Timestamp,
    /// The tar stream, before compression.
    pub raw_bytes: u64,
    /// `data.tar.zst` as stored, and its SHA-256 (lower-case hex).
    pub stored_bytes: u64,
    pub sha256: String,
    /// Regular files in the tar.
    pub files: u64,
}

impl Manifest {
    pub fn to_json(&self) -> Vec<u8> {
        // A struct of strings and numbers always serializes.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// `stored / raw`, what compression saved (1.0 when nothing was read).
    pub fn compression_ratio(&self) -> f64 {
        if self.stored_bytes == 0 {
            return 1.0;
        }
        self.raw_bytes as f64 / self.stored_bytes as f64
    }
}

/// A backup id for a backup that starts at `at`: sortable, and a valid key part.
pub fn backup_id(at: Timestamp) -> String {
    at.strftime("%Y%m%dT%H%M%SZ").to_string()
}

/// The second that names a backup starting at `now`, after the one that
/// named the backup before it (`previous`): ids have a second's resolution
/// and name the backup's keys, so a backup started within the same second as
/// the one before (a scheduled one, then one asked for by hand) takes the
/// next free second instead of writing over the first one's data.
pub fn id_second(now: Timestamp, previous: Option<Timestamp>) -> Timestamp {
    let now_second = Timestamp::from_second(now.as_second()).unwrap_or(now);
    match previous {
        Some(previous) if now_second.as_second() <= previous.as_second() => previous
            .checked_add(jiff::SignedDuration::from_secs(1))
            .unwrap_or(now_second),
        _ => now_second,
    }
}

mod u64_string {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &u64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> Manifest {
        Manifest {
            format: FORMAT,
            id: "20261124T101500Z".into(),
            backup: "orders-20261124101500".into(),
            database: "orders".into(),
            instance: "orders-2".into(),
            from_standby: true,
            system_identifier: 7_441_234_567_890_123_456,
            pg_version: 170_005,
            timeline: 1,
            begin_lsn: "0/3000028".parse().expect("lsn"),
            end_lsn: "0/3000120".parse().expect("lsn"),
            begin_wal: "000000010000000000000003".into(),
            end_wal: "000000010000000000000003".into(),
            started_at: "2026-11-24T10:15:00Z".parse().expect("time"),
            completed_at: "2026-11-24T10:15:09Z".parse().expect("time"),
            raw_bytes: 40_000_000,
            stored_bytes: 5_000_000,
            sha256: "ab".repeat(32),
            files: 1000,
        }
    }

    #[test]
    fn a_manifest_round_trips_and_keeps_the_system_identifier_exact() {
        let manifest = sample();
        let json = manifest.to_json();
        let text = String::from_utf8(json.clone()).expect("utf-8");
        assert!(
            text.contains("\"systemIdentifier\": \"7441234567890123456\""),
            "{text}"
        );
        assert!(text.contains("\"beginLsn\": \"0/3000028\""), "{text}");
        assert_eq!(Manifest::from_json(&json).expect("parse"), manifest);
        assert_eq!(manifest.compression_ratio(), 8.0);
    }

    #[test]
    fn a_backup_in_the_same_second_as_the_one_before_takes_the_next_second() {
        let at = |text: &str| -> Timestamp { text.parse().expect("time") };
        let first = id_second(at("2026-11-27T18:25:57.19Z"), None);
        assert_eq!(backup_id(first), "20261127T182557Z");
        let second = id_second(at("2026-11-27T18:25:57.71Z"), Some(first));
        assert_eq!(backup_id(second), "20261127T182558Z");
        // A third within that second again moves on; a clock that stepped
        // back does not reuse an id either.
        let third = id_second(at("2026-11-27T18:25:57.90Z"), Some(second));
        assert_eq!(backup_id(third), "20261127T182559Z");
        // Once time has passed the last id, the id is the start's second.
        let later = id_second(at("2026-11-27T18:31:00.5Z"), Some(third));
        assert_eq!(backup_id(later), "20261127T183100Z");
    }

    #[test]
    fn backup_ids_sort_by_time() {
        let early = backup_id("2026-11-24T09:59:59Z".parse().expect("time"));
        let late = backup_id("2026-11-24T10:00:00Z".parse().expect("time"));
        assert_eq!(early, "20261124T095959Z");
        assert!(early < late);
    }
}
