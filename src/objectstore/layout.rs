//! Where things go in the bucket:
//!
//! ```text
//! <path>/<database>/<system-id>/base/<backup-id>/{data.tar.zst, manifest.json}
//! <path>/<database>/<system-id>/wal/<timeline>/<file>.zst
//! ```
//!
//! The system identifier (from `pg_control`) keeps apart what must never mix:
//! two clusters in one bucket path, or one cluster before and after a major
//! upgrade or a restore that started a new system.
//!
//! Pure: names and keys, and [`Listed`], what a listing of them returns, so
//! that the decisions made on a listing (retention, the choice of a backup to
//! restore) need nothing of the client that made it.

use std::fmt;

/// One object as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    pub size: u64,
    /// Seconds since the Unix epoch.
    pub modified: Option<i64>,
}

/// A WAL-directory file name PostgreSQL archives or asks back for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalFile {
    name: String,
    timeline: u32,
    kind: WalKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalKind {
    /// `000000010000000000000003`
    Segment,
    /// `000000010000000000000003.partial`: the last, incomplete segment of a
    /// timeline a promotion left behind; kept, never overwritten.
    Partial,
    /// `00000002.history`: never overwritten, whatever else happens.
    History,
    /// `000000010000000000000003.00000028.backup`: a backup history file.
    BackupHistory,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a WAL segment, .partial, .history or .backup file name")]
pub struct NotAWalFile(pub String);

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_lowercase())
}

impl WalFile {
    /// Parses a bare file name (no directory), as `%f` gives it.
    pub fn parse(name: &str) -> Result<Self, NotAWalFile> {
        let bad = || NotAWalFile(name.to_owned());
        let (stem, kind) = match name.split_once('.') {
            None => (name, WalKind::Segment),
            Some((stem, "partial")) => (stem, WalKind::Partial),
            Some((stem, "history")) if is_hex(stem, 8) => (stem, WalKind::History),
            Some((stem, rest)) => match rest.strip_suffix(".backup") {
                Some(offset) if is_hex(offset, 8) => (stem, WalKind::BackupHistory),
                _ => return Err(bad()),
            },
        };
        let segment_like = matches!(
            kind,
            WalKind::Segment | WalKind::Partial | WalKind::BackupHistory
        );
        if segment_like && !is_hex(stem, 24) {
            return Err(bad());
        }
        let timeline = u32::from_str_radix(&stem[..8], 16).map_err(|_| bad())?;
        Ok(Self {
            name: name.to_owned(),
            timeline,
            kind,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn timeline(&self) -> u32 {
        self.timeline
    }

    pub fn kind(&self) -> WalKind {
        self.kind
    }

    /// The segment that holds the byte just before `lsn` on `timeline`: the
    /// last one a reader must have to reach `lsn` (PostgreSQL's
    /// `XLByteToPrevSeg`, so an LSN on a segment boundary needs the segment
    /// before it). `None` for LSN 0 or a zero segment size.
    pub fn ending_at(timeline: u32, lsn: u64, segment_size: u64) -> Option<WalFile> {
        if lsn == 0 || segment_size == 0 {
            return None;
        }
        let number = (lsn - 1) / segment_size;
        let per_id = 0x1_0000_0000_u64 / segment_size;
        let name = format!(
            "{timeline:08X}{:08X}{:08X}",
            number / per_id,
            number % per_id
        );
        Some(Self {
            name,
            timeline,
            kind: WalKind::Segment,
        })
    }

    /// The LSN just past this segment: the end of the WAL it holds. `None`
    /// for anything but a full segment.
    pub fn end_lsn(&self, segment_size: u64) -> Option<u64> {
        if self.kind != WalKind::Segment || segment_size == 0 {
            return None;
        }
        let per_id = 0x1_0000_0000_u64 / segment_size;
        let log = u64::from_str_radix(&self.name[8..16], 16).ok()?;
        let seg = u64::from_str_radix(&self.name[16..24], 16).ok()?;
        log.checked_mul(per_id)?
            .checked_add(seg + 1)?
            .checked_mul(segment_size)
    }

    /// The segment after this one, for restore's prefetch: `segments_per_id`
    /// segments make one 4 GiB "log id" (256 with 16 MiB segments). `None` for
    /// anything but a full segment.
    pub fn next_segment(&self, segment_size: u64) -> Option<WalFile> {
        if self.kind != WalKind::Segment || segment_size == 0 {
            return None;
        }
        let per_id = 0x1_0000_0000_u64 / segment_size;
        let log = u64::from_str_radix(&self.name[8..16], 16).ok()?;
        let seg = u64::from_str_radix(&self.name[16..24], 16).ok()?;
        let (log, seg) = if seg + 1 >= per_id {
            (log.checked_add(1)?, 0)
        } else {
            (log, seg + 1)
        };
        if log > 0xFFFF_FFFF {
            return None;
        }
        let name = format!("{:08X}{log:08X}{seg:08X}", self.timeline);
        Some(Self {
            name,
            timeline: self.timeline,
            kind: WalKind::Segment,
        })
    }
}

impl fmt::Display for WalFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// The keys of one database's system in the bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    root: String,
}

impl Layout {
    /// `<path>/<database>/`: where the systems of one Database name live,
    /// each under its system identifier.
    pub fn database_prefix(path: Option<&str>, database: &str) -> String {
        let root = Self::new(path, database, 0).root;
        format!("{}/", root.strip_suffix("/0").unwrap_or(&root))
    }

    /// The system identifiers under [`Layout::database_prefix`], from the keys
    /// listed there, ascending.
    pub fn systems(prefix: &str, keys: impl IntoIterator<Item = impl AsRef<str>>) -> Vec<u64> {
        let mut systems: Vec<u64> = keys
            .into_iter()
            .filter_map(|key| {
                let rest = key.as_ref().strip_prefix(prefix)?;
                rest.split('/').next()?.parse().ok()
            })
            .collect();
        systems.sort_unstable();
        systems.dedup();
        systems
    }

    /// The WAL file a key under [`Layout::wal_prefix`] holds.
    pub fn wal_file_of(&self, key: &str) -> Option<WalFile> {
        let name = key.strip_prefix(&self.wal_prefix())?.rsplit('/').next()?;
        WalFile::parse(name.strip_suffix(".zst")?).ok()
    }

    /// `path` is the optional prefix of `spec.backup.objectStore.path`; slashes
    /// around it are not significant.
    pub fn new(path: Option<&str>, database: &str, system_id: u64) -> Self {
        let mut parts: Vec<&str> = path
            .unwrap_or("")
            .split('/')
            .filter(|p| !p.is_empty())
            .collect();
        let system = system_id.to_string();
        parts.push(database);
        parts.push(&system);
        Self {
            root: parts.join("/"),
        }
    }

    /// `<path>/<database>/<system-id>`, no trailing slash.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Where every WAL file of this system lives, with a trailing slash.
    pub fn wal_prefix(&self) -> String {
        format!("{}/wal/", self.root)
    }

    /// The compressed object of one WAL file.
    pub fn wal_key(&self, file: &WalFile) -> String {
        format!(
            "{}{:08X}/{}.zst",
            self.wal_prefix(),
            file.timeline,
            file.name
        )
    }

    /// Where every base backup of this system lives, with a trailing slash.
    pub fn base_prefix(&self) -> String {
        format!("{}/base/", self.root)
    }

    /// The data of one base backup: a zstd-compressed tar of the data directory.
    pub fn backup_data_key(&self, backup_id: &str) -> String {
        format!("{}{backup_id}/data.tar.zst", self.base_prefix())
    }

    /// The manifest of one base backup, written last: a backup without one
    /// is not a backup.
    pub fn backup_manifest_key(&self, backup_id: &str) -> String {
        format!("{}{backup_id}/manifest.json", self.base_prefix())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systems_and_wal_files_are_read_back_from_keys() {
        let prefix = Layout::database_prefix(Some("/team/"), "orders");
        assert_eq!(prefix, "team/orders/");
        let layout = Layout::new(Some("team"), "orders", 42);
        let file = WalFile::parse("000000020000000100000003").expect("a segment");
        let key = layout.wal_key(&file);
        let keys = [
            key.clone(),
            layout.backup_manifest_key("20261124T100000Z"),
            "team/orders/7/wal/00000001/00000001.history.zst".to_owned(),
            "team/orders-2/9/base/x".to_owned(),
            "team/orders/not-a-system/x".to_owned(),
        ];
        assert_eq!(Layout::systems(&prefix, &keys), vec![7, 42]);
        assert_eq!(layout.wal_file_of(&key), Some(file.clone()));
        assert_eq!(layout.wal_file_of("team/orders/42/base/x"), None);
        // Log 1, segment 3 of 16 MiB: 256 + 4 segments in.
        assert_eq!(file.end_lsn(16 << 20), Some((256 + 4) * (16 << 20)));
        let history = WalFile::parse("00000002.history").expect("history");
        assert_eq!(history.end_lsn(16 << 20), None);
    }

    #[test]
    fn the_segment_ending_at_an_lsn_is_the_one_before_a_boundary() {
        const SIXTEEN_MIB: u64 = 16 << 20;
        let inside = WalFile::ending_at(1, 0x3000120, SIXTEEN_MIB).expect("a segment");
        assert_eq!(inside.name(), "000000010000000000000003");
        let boundary = WalFile::ending_at(1, 0x4000000, SIXTEEN_MIB).expect("a segment");
        assert_eq!(boundary.name(), "000000010000000000000003");
        let high =
            WalFile::ending_at(2, (0x1A << 32) | 0xFF00_0010, SIXTEEN_MIB).expect("a segment");
        assert_eq!(high.name(), "000000020000001A000000FF");
        let wide = WalFile::ending_at(1, 0x1_4000_0001, 1 << 30).expect("a segment");
        assert_eq!(wide.name(), "000000010000000100000001");
        assert_eq!(WalFile::ending_at(1, 0, SIXTEEN_MIB), None);
    }

    #[test]
    fn keys_follow_the_design_layout() {
        let layout = Layout::new(Some("/team/orders/"), "orders", 7_311_592_012_345_678_901);
        assert_eq!(layout.root(), "team/orders/orders/7311592012345678901");
        let segment = WalFile::parse("000000020000000A000000FF").expect("a segment");
        assert_eq!(
            layout.wal_key(&segment),
            "team/orders/orders/7311592012345678901/wal/00000002/000000020000000A000000FF.zst"
        );
        assert_eq!(
            layout.backup_manifest_key("orders-20261124020000"),
            "team/orders/orders/7311592012345678901/base/orders-20261124020000/manifest.json"
        );
        assert_eq!(
            Layout::new(None, "db", 1).backup_data_key("b"),
            "db/1/base/b/data.tar.zst"
        );
    }

    #[test]
    fn every_kind_of_wal_file_is_recognised_with_its_timeline() {
        let cases = [
            ("000000010000000000000003", 1, WalKind::Segment),
            ("0000000A0000000000000003.partial", 10, WalKind::Partial),
            ("00000002.history", 2, WalKind::History),
            (
                "000000010000000000000003.00000028.backup",
                1,
                WalKind::BackupHistory,
            ),
        ];
        for (name, timeline, kind) in cases {
            let file = WalFile::parse(name).expect(name);
            assert_eq!((file.timeline(), file.kind()), (timeline, kind), "{name}");
            assert_eq!(file.to_string(), name);
        }
        for bad in [
            "",
            "00000001000000000000003",
            "000000010000000000000003.done",
            "../00000002.history",
            "0000000g0000000000000003",
            "000000010000000000000003.ready",
            "0000000a0000000000000003",
            "RECOVERYHISTORY",
            "00000002.history.zst",
        ] {
            assert!(WalFile::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_next_segment_crosses_log_ids_by_segment_size() {
        let next = |name: &str, size: u64| {
            WalFile::parse(name)
                .expect(name)
                .next_segment(size)
                .map(|f| f.name().to_owned())
        };
        let mib = 1024 * 1024;
        assert_eq!(
            next("000000010000000000000003", 16 * mib).as_deref(),
            Some("000000010000000000000004")
        );
        assert_eq!(
            next("0000000100000000000000FF", 16 * mib).as_deref(),
            Some("000000010000000100000000")
        );
        assert_eq!(
            next("00000001000000000000003F", 64 * mib).as_deref(),
            Some("000000010000000100000000")
        );
        assert_eq!(next("00000002.history", 16 * mib), None);
        assert_eq!(next("000000010000000000000003.partial", 16 * mib), None);
    }
}
