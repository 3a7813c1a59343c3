//! Which base backups and WAL may go, by `spec.backup.retention`.
//!
//! The retention is a recovery window, as barman's and pgBackRest's
//! time-based retention are: any moment of the last `window` must stay
//! restorable. That takes every backup completed inside the window, the newest
//! one completed before it (the base from which WAL is replayed up to the
//! window's start), and all WAL from the oldest of those onward. The newest
//! completed backup stays whatever the window, and nothing at all goes while
//! no completed backup exists to anchor the rest to.
//!
//! Pure: the caller lists the system's root once, fetches the manifests that
//! [`manifest_keys`] names, hands both to [`decide`] and deletes what it says.
//! Keys it does not recognise, and everything outside the system's root
//! (another system identifier's backups and WAL), are left alone.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;

use crate::backup::manifest::{self, Manifest};
use crate::objectstore::layout::{Layout, Listed, WalFile, WalKind};

/// What [`decide`] decides from: one listing of the system's root and the
/// manifests found in it.
#[derive(Clone, Copy, Debug)]
pub struct Inventory<'a> {
    /// The layout of the database's current system; only keys under its root
    /// are considered.
    pub layout: &'a Layout,
    /// The system the layout was made for: a manifest naming another one is
    /// not trusted.
    pub system_identifier: u64,
    /// `Store::list` of `<root>/`. A wider listing does no harm: keys outside
    /// the root are counted and left alone.
    pub listed: &'a [Listed],
    /// The manifest read from each key [`manifest_keys`] named, by backup id.
    /// A backup whose manifest is missing here is kept but anchors nothing,
    /// so its WAL may go: when a fetch failed for a reason that may pass, skip
    /// the pass rather than leave the manifest out.
    pub manifests: &'a BTreeMap<String, Manifest>,
}

/// What to delete, and why, for the caller to carry out and report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruning {
    /// Keys to delete, in this order: every `manifest.json` first, then the
    /// rest, each part sorted. A deletion cut short then leaves backups
    /// without a manifest (interrupted ones, which a later pass removes),
    /// never a manifest whose data is gone.
    pub delete: Vec<String>,
    /// Completed backups removed, oldest first.
    pub removed: Vec<String>,
    /// Completed backups kept, oldest first; the last is the newest.
    pub kept: Vec<String>,
    /// Backup directories without a manifest that are removed.
    pub interrupted_removed: Vec<String>,
    /// Backup directories without a manifest that stay: possibly still being
    /// written, or too recent to tell.
    pub interrupted_kept: Vec<String>,
    /// Backups with a manifest that cannot be used: none read, one for another
    /// id or system, no data beside it, or a begin WAL that is not a segment.
    /// They stay, and anchor no WAL.
    pub unusable: Vec<String>,
    /// How many of the deleted keys are WAL files.
    pub wal_removed: usize,
    /// The begin WAL of the oldest kept backup: WAL of earlier segments goes.
    pub oldest_kept_begin: Option<String>,
    /// Keys under the root that are neither a backup's nor a WAL file; they
    /// stay.
    pub ignored: Vec<String>,
    /// How many listed keys were outside the root (another system); they stay.
    pub outside: usize,
}

/// The `manifest.json` keys in `listed`, by backup id: what the caller fetches
/// and parses into [`Inventory::manifests`].
pub fn manifest_keys(layout: &Layout, listed: &[Listed]) -> BTreeMap<String, String> {
    let root = root_prefix(layout);
    listed
        .iter()
        .filter_map(|object| match classify(&root, &object.key) {
            Key::Backup { id, file } if file == manifest::MANIFEST => {
                Some((id.to_owned(), object.key.clone()))
            }
            _ => None,
        })
        .collect()
}

/// Decides what of one system's backups and WAL goes, for a recovery
/// `window` ending at `now`.
pub fn decide(window: Duration, now: Timestamp, inventory: &Inventory<'_>) -> Pruning {
    let mut pruning = Pruning::default();
    let Listing { dirs, wal } = sort_listing(inventory, &mut pruning);
    let mut completed = Vec::new();
    let mut interrupted = Vec::new();
    for (&id, dir) in &dirs {
        if !dir.has_manifest {
            interrupted.push((id, dir));
        } else if let Some(backup) = usable(id, dir, inventory) {
            completed.push(backup);
        } else {
            pruning.unusable.push(id.to_owned());
        }
    }
    completed.sort_by_key(|b| (b.completed_at, b.id));

    let Some(newest) = completed.last() else {
        pruning.interrupted_kept = interrupted.iter().map(|(id, _)| (*id).to_owned()).collect();
        return pruning;
    };
    // A window reaching before the representable past covers everything.
    let cutoff = now.checked_sub(window).ok();
    let before_window = |t: Timestamp| cutoff.is_some_and(|c| t < c);

    let mut delete = Vec::new();
    let anchor = sort_completed(&completed, before_window, &mut pruning, &mut delete);
    for (id, dir) in interrupted {
        let started = started_at(id);
        let last_seen = started.max(dir.last_modified);
        // Unknown age is not old: it may be a backup still being written.
        let stale = last_seen.is_some_and(|t| before_window(t) && t < newest.started_at);
        if stale {
            pruning.interrupted_removed.push(id.to_owned());
            delete.extend(dir.keys.iter().copied());
        } else {
            pruning.interrupted_kept.push(id.to_owned());
        }
    }
    if let Some(anchor) = anchor {
        pruning.oldest_kept_begin = Some(anchor.begin_wal.to_owned());
        for (key, segment) in wal {
            if segment.is_some_and(|s| s < anchor.begin) {
                delete.push(key);
                pruning.wal_removed += 1;
            }
        }
    }
    pruning.delete = deletion_order(delete);
    pruning
}

/// The keys of a listing that [`decide`] weighs.
struct Listing<'a> {
    /// Backup directories by id.
    dirs: BTreeMap<&'a str, Dir<'a>>,
    /// WAL files with their segment.
    wal: Vec<(&'a str, Option<Segment>)>,
}

/// The listing by kind; keys outside the root and unknown ones are counted
/// in `pruning`.
fn sort_listing<'a>(inventory: &Inventory<'a>, pruning: &mut Pruning) -> Listing<'a> {
    let root = root_prefix(inventory.layout);
    let mut dirs: BTreeMap<&str, Dir<'_>> = BTreeMap::new();
    let mut wal: Vec<(&str, Option<Segment>)> = Vec::new();
    for object in inventory.listed {
        match classify(&root, &object.key) {
            Key::Outside => pruning.outside += 1,
            Key::Unknown => pruning.ignored.push(object.key.clone()),
            Key::Wal(segment) => wal.push((&object.key, segment)),
            Key::Backup { id, file } => {
                let dir = dirs.entry(id).or_default();
                dir.keys.push(&object.key);
                dir.has_data |= file == manifest::DATA;
                dir.has_manifest |= file == manifest::MANIFEST;
                let modified = object.modified.and_then(|s| Timestamp::from_second(s).ok());
                dir.last_modified = dir.last_modified.max(modified);
            }
        }
    }
    pruning.ignored.sort();
    Listing { dirs, wal }
}

/// Keeps the completed backups (oldest first) inside the window and the
/// newest one before it, removes the rest; returns the kept one that begins
/// earliest, from which on WAL stays.
fn sort_completed<'c, 'a>(
    completed: &'c [Completed<'a>],
    before_window: impl Fn(Timestamp) -> bool,
    pruning: &mut Pruning,
    delete: &mut Vec<&'a str>,
) -> Option<&'c Completed<'a>> {
    // The base from which WAL is replayed up to the window's start.
    let base = completed
        .iter()
        .rposition(|b| before_window(b.completed_at));
    let mut anchor: Option<&Completed<'_>> = None;
    for (index, backup) in completed.iter().enumerate() {
        if before_window(backup.completed_at) && Some(index) != base {
            pruning.removed.push(backup.id.to_owned());
            delete.extend(backup.keys.iter().copied());
        } else {
            pruning.kept.push(backup.id.to_owned());
            if anchor.is_none_or(|a| backup.begin < a.begin) {
                anchor = Some(backup);
            }
        }
    }
    anchor
}

/// Every `manifest.json` first, then the rest, each part sorted, no key
/// twice (see [`Pruning::delete`]).
fn deletion_order(delete: Vec<&str>) -> Vec<String> {
    let manifest_suffix = format!("/{}", manifest::MANIFEST);
    let is_manifest = |key: &&str| key.ends_with(&manifest_suffix);
    let (mut manifests, mut rest): (Vec<&str>, Vec<&str>) =
        delete.into_iter().partition(is_manifest);
    manifests.sort_unstable();
    rest.sort_unstable();
    let mut ordered: Vec<String> = manifests
        .into_iter()
        .chain(rest)
        .map(str::to_owned)
        .collect();
    ordered.dedup();
    ordered
}

/// A WAL position to the segment, timeline aside: `(log, seg)` of the name.
type Segment = (u32, u32);

/// The keys of one `base/<id>/` directory.
#[derive(Default)]
struct Dir<'a> {
    keys: Vec<&'a str>,
    has_data: bool,
    has_manifest: bool,
    last_modified: Option<Timestamp>,
}

/// A backup that can be restored from.
struct Completed<'a> {
    id: &'a str,
    started_at: Timestamp,
    completed_at: Timestamp,
    begin: Segment,
    begin_wal: &'a str,
    keys: &'a [&'a str],
}

enum Key<'a> {
    Outside,
    Unknown,
    /// Anything under `base/<id>/`: a backup directory goes as a whole.
    Backup {
        id: &'a str,
        file: &'a str,
    },
    /// A WAL file in its timeline's directory; no segment for `.history`.
    Wal(Option<Segment>),
}

fn root_prefix(layout: &Layout) -> String {
    format!("{}/", layout.root())
}

fn classify<'a>(root: &str, key: &'a str) -> Key<'a> {
    let Some(rest) = key.strip_prefix(root) else {
        return Key::Outside;
    };
    if let Some(rest) = rest.strip_prefix("base/") {
        return match rest.split_once('/') {
            Some((id, file)) if !id.is_empty() => Key::Backup { id, file },
            _ => Key::Unknown,
        };
    }
    let wal = rest
        .strip_prefix("wal/")
        .and_then(|rest| rest.split_once('/'))
        .and_then(|(timeline, name)| {
            let file = WalFile::parse(name.strip_suffix(".zst")?).ok()?;
            // Where `Layout::wal_key` puts it, or not one of ours.
            (timeline == format!("{:08X}", file.timeline())).then_some(file)
        });
    match wal {
        Some(file) => Key::Wal(segment(&file)),
        None => Key::Unknown,
    }
}

/// The segment a WAL file belongs to; `None` for a timeline history file.
fn segment(file: &WalFile) -> Option<Segment> {
    if file.kind() == WalKind::History {
        return None;
    }
    // Parsing checked the name starts with 24 hex digits: TLI, log, seg.
    let name = file.name();
    let log = u32::from_str_radix(name.get(8..16)?, 16).ok()?;
    let seg = u32::from_str_radix(name.get(16..24)?, 16).ok()?;
    Some((log, seg))
}

fn usable<'a>(
    id: &'a str,
    dir: &'a Dir<'a>,
    inventory: &'a Inventory<'_>,
) -> Option<Completed<'a>> {
    let manifest = inventory.manifests.get(id)?;
    if !dir.has_data
        || manifest.id != id
        || manifest.system_identifier != inventory.system_identifier
    {
        return None;
    }
    let begin = WalFile::parse(&manifest.begin_wal).ok()?;
    if begin.kind() != WalKind::Segment {
        return None;
    }
    Some(Completed {
        id,
        started_at: manifest.started_at,
        completed_at: manifest.completed_at,
        begin: segment(&begin)?,
        begin_wal: &manifest.begin_wal,
        keys: &dir.keys,
    })
}

/// When a backup with this id started, if the id is [`manifest::backup_id`]'s
/// `YYYYMMDDTHHMMSSZ`.
fn started_at(id: &str) -> Option<Timestamp> {
    let bytes = id.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i16> {
        let part = bytes.get(range)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    if bytes.len() != 16 || bytes[8] != b'T' || bytes[15] != b'Z' {
        return None;
    }
    let small = |range| digits(range).and_then(|v| i8::try_from(v).ok());
    let at = DateTime::new(
        digits(0..4)?,
        small(4..6)?,
        small(6..8)?,
        small(9..11)?,
        small(11..13)?,
        small(13..15)?,
        0,
    )
    .ok()?;
    TimeZone::UTC.to_timestamp(at).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SYSTEM: u64 = 7_441_234_567_890_123_456;
    const DAY: u64 = 86_400;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    fn days(n: u64) -> Duration {
        Duration::from_secs(n * DAY)
    }

    fn layout() -> Layout {
        Layout::new(Some("team"), "orders", SYSTEM)
    }

    /// A 16 MiB segment's name: 256 segments to a log id.
    fn segment_name(timeline: u32, n: u64) -> String {
        format!("{timeline:08X}{:08X}{:08X}", n >> 8, n & 0xFF)
    }

    fn manifest(id: &str, started: Timestamp, completed: Timestamp, begin_wal: &str) -> Manifest {
        Manifest {
            format: manifest::FORMAT,
            id: id.into(),
            backup: format!("orders-{id}"),
            database: "orders".into(),
            instance: "orders-1".into(),
            from_standby: false,
            system_identifier: SYSTEM,
            pg_version: 170_005,
            timeline: 1,
            begin_lsn: "0/3000028".parse().expect("lsn"),
            end_lsn: "0/3000120".parse().expect("lsn"),
            begin_wal: begin_wal.into(),
            end_wal: begin_wal.into(),
            started_at: started,
            completed_at: completed,
            raw_bytes: 1,
            stored_bytes: 1,
            sha256: "ab".repeat(32),
            files: 1,
        }
    }

    #[derive(Default)]
    struct Bucket {
        listed: Vec<Listed>,
        manifests: BTreeMap<String, Manifest>,
    }

    impl Bucket {
        fn key(&mut self, key: impl Into<String>, modified: Option<Timestamp>) {
            self.listed.push(Listed {
                key: key.into(),
                size: 1,
                modified: modified.map(|t| t.as_second()),
            });
        }

        /// A completed backup that started at `started`, took ten minutes and
        /// began in segment `begin`; returns its id.
        fn backup(&mut self, started: Timestamp, begin: u64) -> String {
            let id = manifest::backup_id(started);
            let completed = started
                .checked_add(Duration::from_secs(600))
                .expect("in range");
            let layout = layout();
            self.key(layout.backup_data_key(&id), Some(completed));
            self.key(layout.backup_manifest_key(&id), Some(completed));
            self.manifests.insert(
                id.clone(),
                manifest(&id, started, completed, &segment_name(1, begin)),
            );
            id
        }

        fn interrupted(&mut self, id: &str, modified: Option<Timestamp>) {
            self.key(layout().backup_data_key(id), modified);
        }

        fn wal(&mut self, name: &str) -> String {
            let key = layout().wal_key(&WalFile::parse(name).expect(name));
            self.key(key.clone(), None);
            key
        }

        fn pruning(&self, window: Duration, now: Timestamp) -> Pruning {
            let layout = layout();
            decide(
                window,
                now,
                &Inventory {
                    layout: &layout,
                    system_identifier: SYSTEM,
                    listed: &self.listed,
                    manifests: &self.manifests,
                },
            )
        }
    }

    fn ago(now: Timestamp, d: Duration) -> Timestamp {
        now.checked_sub(d).expect("in range")
    }

    fn backup_keys(id: &str) -> [String; 2] {
        let layout = layout();
        [layout.backup_manifest_key(id), layout.backup_data_key(id)]
    }

    #[test]
    fn keeps_the_backups_in_the_window_and_the_newest_before_it() {
        let now = at("2026-11-24T12:00:00Z");
        let mut bucket = Bucket::default();
        let ids: Vec<String> = [(10, 2), (8, 5), (6, 9), (4, 13), (2, 17)]
            .into_iter()
            .map(|(d, begin)| bucket.backup(ago(now, days(d)), begin))
            .collect();
        let wal: Vec<String> = (1..=20).map(|n| bucket.wal(&segment_name(1, n))).collect();

        let pruning = bucket.pruning(days(5), now);
        assert_eq!(pruning.removed, ids[..2]);
        assert_eq!(pruning.kept, ids[2..]);
        assert_eq!(pruning.oldest_kept_begin, Some(segment_name(1, 9)));
        assert_eq!(pruning.wal_removed, 8);
        let mut expected: Vec<String> = backup_keys(&ids[0])
            .into_iter()
            .chain(backup_keys(&ids[1]))
            .collect();
        expected.sort_by_key(|k| (!k.ends_with("manifest.json"), k.clone()));
        expected.extend(wal[..8].iter().cloned());
        assert_eq!(pruning.delete, expected);
        assert!(pruning.ignored.is_empty() && pruning.unusable.is_empty());
    }

    #[test]
    fn the_newest_completed_backup_is_never_removed() {
        let now = at("2026-11-24T12:00:00Z");
        let mut bucket = Bucket::default();
        let old = bucket.backup(ago(now, days(90)), 3);
        let newest = bucket.backup(ago(now, days(60)), 40);
        let pruning = bucket.pruning(Duration::from_secs(3600), now);
        assert_eq!(pruning.kept, std::slice::from_ref(&newest));
        assert_eq!(pruning.removed, [old]);
        for key in backup_keys(&newest) {
            assert!(!pruning.delete.contains(&key), "{key}");
        }
        // Even with no window at all.
        let pruning = bucket.pruning(Duration::ZERO, now);
        assert_eq!(pruning.kept, [newest]);
    }

    #[test]
    fn wal_goes_by_segment_whatever_the_timeline_and_history_stays() {
        let now = at("2026-11-24T12:00:00Z");
        let mut bucket = Bucket::default();
        let started = ago(now, days(1));
        let id = manifest::backup_id(started);
        let layout = layout();
        bucket.key(layout.backup_data_key(&id), None);
        bucket.key(layout.backup_manifest_key(&id), None);
        let mut m = manifest(&id, started, started, "000000020000000100000002");
        m.timeline = 2;
        bucket.manifests.insert(id, m);
        let gone = [
            "0000000100000000000000FF",
            "000000010000000100000001",
            "000000010000000100000001.partial",
            "000000010000000100000001.00000028.backup",
            "000000030000000000000005",
        ];
        let kept = [
            "000000010000000100000002.partial",
            "000000020000000100000002",
            "000000020000000100000002.00000028.backup",
            "000000020000000200000000",
            "00000002.history",
            "00000003.history",
        ];
        let gone: Vec<String> = gone.iter().map(|n| bucket.wal(n)).collect();
        let kept: Vec<String> = kept.iter().map(|n| bucket.wal(n)).collect();
        let pruning = bucket.pruning(days(7), now);
        let mut expected = gone.clone();
        expected.sort();
        assert_eq!(pruning.delete, expected);
        assert_eq!(pruning.wal_removed, gone.len());
        for key in &kept {
            assert!(!pruning.delete.contains(key), "{key}");
        }
    }

    #[test]
    fn interrupted_backups_go_only_when_older_than_the_window_and_the_newest_backup() {
        let now = at("2026-11-24T12:00:00Z");
        let mut bucket = Bucket::default();
        bucket.backup(ago(now, days(10)), 2);
        bucket.backup(ago(now, days(4)), 9);
        let stale = manifest::backup_id(ago(now, days(9)));
        bucket.interrupted(&stale, None);
        // Inside the window: perhaps a backup still being written.
        let recent = manifest::backup_id(ago(now, Duration::from_secs(3600)));
        bucket.interrupted(&recent, None);
        // Started long ago but written to lately.
        let busy = manifest::backup_id(ago(now, days(8)));
        bucket.interrupted(&busy, Some(ago(now, Duration::from_secs(600))));
        // Older than the window but newer than the newest completed backup.
        let after_newest = manifest::backup_id(ago(now, days(3)));
        bucket.interrupted(&after_newest, None);
        // Not a backup id: its objects' age decides, or it stays.
        bucket.interrupted("manual", Some(ago(now, days(20))));
        bucket.interrupted("unknown-age", None);

        let pruning = bucket.pruning(days(2), now);
        assert_eq!(
            pruning.interrupted_removed,
            [stale.clone(), "manual".to_owned()]
        );
        let mut kept = vec![recent, busy, after_newest, "unknown-age".to_owned()];
        kept.sort();
        assert_eq!(pruning.interrupted_kept, kept);
        assert!(pruning.delete.contains(&layout().backup_data_key(&stale)));
        assert!(pruning.delete.contains(&layout().backup_data_key("manual")));
    }

    #[test]
    fn other_systems_and_unknown_keys_are_left_alone() {
        let now = at("2026-11-24T12:00:00Z");
        let mut bucket = Bucket::default();
        bucket.backup(ago(now, days(30)), 2);
        let newest = bucket.backup(ago(now, days(20)), 50);
        let old = ago(now, days(400));
        let foreign = [
            "team/orders/1234/base/20200101T000000Z/data.tar.zst".to_owned(),
            "team/orders/1234/wal/00000001/000000010000000000000001.zst".to_owned(),
            // The root as a prefix of another system's identifier.
            format!("team/orders/{SYSTEM}0/wal/00000001/000000010000000000000001.zst"),
            "team/other/wal/00000001/000000010000000000000001.zst".to_owned(),
        ];
        let root = layout().root().to_owned();
        let unknown = [
            format!("{root}/wal/00000001/000000010000000000000001"),
            format!("{root}/wal/00000002/000000010000000000000001.zst"),
            format!("{root}/wal/00000001/RECOVERYHISTORY.zst"),
            format!("{root}/wal/000000010000000000000001.zst"),
            format!("{root}/base/readme"),
            format!("{root}/base//data.tar.zst"),
            format!("{root}/notes.txt"),
        ];
        for key in foreign.iter().chain(&unknown) {
            bucket.key(key.clone(), Some(old));
        }
        let pruning = bucket.pruning(days(1), now);
        assert_eq!(pruning.outside, foreign.len());
        let mut ignored = unknown.to_vec();
        ignored.sort();
        assert_eq!(pruning.ignored, ignored);
        for key in foreign.iter().chain(&unknown) {
            assert!(!pruning.delete.contains(key), "{key}");
        }
        assert_eq!(pruning.kept, [newest]);
    }

    #[test]
    fn backups_whose_manifest_cannot_be_used_stay_and_anchor_nothing() {
        let now = at("2026-11-24T12:00:00Z");
        let mut bucket = Bucket::default();
        let unread = bucket.backup(ago(now, days(40)), 1);
        bucket.manifests.remove(&unread);
        let other_system = bucket.backup(ago(now, days(39)), 1);
        if let Some(m) = bucket.manifests.get_mut(&other_system) {
            m.system_identifier = 1;
        }
        let other_id = bucket.backup(ago(now, days(38)), 1);
        if let Some(m) = bucket.manifests.get_mut(&other_id) {
            m.id = "20200101T000000Z".into();
        }
        let bad_begin = bucket.backup(ago(now, days(37)), 1);
        if let Some(m) = bucket.manifests.get_mut(&bad_begin) {
            m.begin_wal = "00000001.history".into();
        }
        let no_data_at = ago(now, days(36));
        let no_data = manifest::backup_id(no_data_at);
        bucket.key(layout().backup_manifest_key(&no_data), None);
        bucket.manifests.insert(
            no_data.clone(),
            manifest(&no_data, no_data_at, no_data_at, &segment_name(1, 1)),
        );
        let good = bucket.backup(ago(now, days(30)), 20);
        for n in 1..=25 {
            bucket.wal(&segment_name(1, n));
        }

        let pruning = bucket.pruning(days(1), now);
        let mut unusable = vec![unread, other_system, other_id, bad_begin, no_data];
        unusable.sort();
        assert_eq!(pruning.unusable, unusable);
        assert_eq!(pruning.kept, [good]);
        assert!(pruning.removed.is_empty());
        assert_eq!(pruning.oldest_kept_begin, Some(segment_name(1, 20)));
        assert_eq!(pruning.wal_removed, 19);
        assert!(pruning.delete.iter().all(|k| k.contains("/wal/")));
    }

    #[test]
    fn nothing_goes_while_no_backup_has_completed() {
        let now = at("2026-11-24T12:00:00Z");
        let mut bucket = Bucket::default();
        let old = manifest::backup_id(ago(now, days(100)));
        bucket.interrupted(&old, Some(ago(now, days(100))));
        for n in 1..=5 {
            bucket.wal(&segment_name(1, n));
        }
        let pruning = bucket.pruning(Duration::from_secs(3600), now);
        assert!(pruning.delete.is_empty());
        assert_eq!(pruning.interrupted_kept, [old]);
        assert_eq!(pruning.oldest_kept_begin, None);
        assert_eq!(bucket.pruning(Duration::ZERO, now), pruning);
        assert_eq!(Bucket::default().pruning(days(1), now), Pruning::default());
    }

    #[test]
    fn a_window_covering_everything_removes_nothing() {
        let now = at("2026-11-24T12:00:00Z");
        let mut bucket = Bucket::default();
        for (d, begin) in [(300, 2), (200, 60), (100, 90)] {
            bucket.backup(ago(now, days(d)), begin);
        }
        for n in 2..=100 {
            bucket.wal(&segment_name(1, n));
        }
        bucket.wal("00000001.history");
        let pruning = bucket.pruning(days(7 * 52), now);
        assert!(pruning.delete.is_empty(), "{:?}", pruning.delete);
        assert_eq!(pruning.kept.len(), 3);
        // A window longer than time itself is no error.
        assert!(bucket.pruning(Duration::MAX, now).delete.is_empty());
    }

    #[test]
    fn wal_from_before_the_first_backup_goes_as_nothing_can_replay_it() {
        let now = at("2026-11-24T12:00:00Z");
        let mut bucket = Bucket::default();
        bucket.backup(ago(now, days(1)), 3);
        let before: Vec<String> = (1..3).map(|n| bucket.wal(&segment_name(1, n))).collect();
        bucket.wal(&segment_name(1, 3));
        let pruning = bucket.pruning(days(7), now);
        assert_eq!(pruning.delete, before);
        assert!(pruning.removed.is_empty());
    }

    #[test]
    fn manifest_keys_name_each_backup_that_has_one() {
        let now = at("2026-11-24T12:00:00Z");
        let mut bucket = Bucket::default();
        let id = bucket.backup(ago(now, days(1)), 3);
        bucket.interrupted("20261101T000000Z", None);
        bucket.key("team/orders/1/base/20261101T000000Z/manifest.json", None);
        let keys = manifest_keys(&layout(), &bucket.listed);
        assert_eq!(
            keys,
            BTreeMap::from([(id.clone(), layout().backup_manifest_key(&id))])
        );
    }

    #[test]
    fn backup_ids_give_their_start_time() {
        assert_eq!(
            started_at("20261124T101500Z"),
            Some(at("2026-11-24T10:15:00Z"))
        );
        for bad in [
            "20261124T101500",
            "2026112XT101500Z",
            "20261324T101500Z",
            "20261124 101500Z",
            "orders-20261124101500",
            "+0261124T101500Z",
        ] {
            assert_eq!(started_at(bad), None, "{bad}");
        }
    }

    /// One generated backup: days before now it started, whether it got a
    /// manifest, and how many segments after the previous one it began.
    type Generated = (u64, bool, u64);

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn the_newest_backup_and_the_wal_it_needs_never_go(
            generated in prop::collection::vec((0_u64..400, prop::bool::weighted(0.8), 1_u64..40), 0..10),
            window_hours in 1_u64..(24 * 200),
        ) {
            let now = at("2026-11-24T12:00:00Z");
            let mut bucket = Bucket::default();
            let mut ordered: Vec<Generated> = generated;
            // Later starts begin at later segments, as in a real system.
            ordered.sort_by_key(|(d, _, _)| std::cmp::Reverse(*d));
            ordered.dedup_by_key(|(d, _, _)| *d);
            let mut begin = 1;
            let mut completed = Vec::new();
            for (d, finished, step) in &ordered {
                begin += step;
                let started = ago(now, days(*d) + Duration::from_secs(3600));
                if *finished {
                    let id = bucket.backup(started, begin);
                    completed.push((id, begin, started.checked_add(Duration::from_secs(600)).expect("in range")));
                } else {
                    bucket.interrupted(&manifest::backup_id(started), None);
                }
            }
            let wal: Vec<(u64, String)> = (1..=begin + 3).map(|n| (n, bucket.wal(&segment_name(1, n)))).collect();
            let history = bucket.wal("00000002.history");
            let foreign = format!("team/orders/42/wal/00000001/{}.zst", segment_name(1, 1));
            bucket.key(foreign.clone(), None);

            let window = Duration::from_secs(window_hours * 3600);
            let pruning = bucket.pruning(window, now);
            let cutoff = ago(now, window);

            prop_assert!(!pruning.delete.contains(&history));
            prop_assert!(!pruning.delete.contains(&foreign));
            let Some((newest, _, _)) = completed.last() else {
                prop_assert!(pruning.delete.is_empty());
                return Ok(());
            };
            prop_assert_eq!(pruning.kept.last(), Some(newest));
            for key in backup_keys(newest) {
                prop_assert!(!pruning.delete.contains(&key));
            }
            // Every backup inside the window stays.
            for (id, _, completed_at) in &completed {
                if *completed_at >= cutoff {
                    prop_assert!(pruning.kept.contains(id));
                }
            }
            // The window's start stays restorable: a kept backup from
            // before it, when there was one, and WAL from the oldest kept on.
            if completed.iter().any(|(_, _, c)| *c < cutoff) {
                prop_assert!(completed.iter().any(|(id, _, c)| *c < cutoff && pruning.kept.contains(id)));
            }
            let oldest_begin = completed
                .iter()
                .filter(|(id, _, _)| pruning.kept.contains(id))
                .map(|(_, b, _)| *b)
                .min()
                .expect("the newest is kept");
            prop_assert_eq!(pruning.oldest_kept_begin.clone(), Some(segment_name(1, oldest_begin)));
            for (n, key) in &wal {
                prop_assert_eq!(pruning.delete.contains(key), *n < oldest_begin, "{}", key);
            }
        }
    }
}
