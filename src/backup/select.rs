//! Which base backup a recovery starts from, and on which timeline it ends.
//!
//! PostgreSQL recovers along the target timeline's history: the `.history`
//! file of timeline N lists each ancestor timeline and the LSN where N's
//! lineage left it. A base backup is a valid start when it lies on that
//! lineage (its timeline is an ancestor, or N itself, and it ended before the
//! lineage left that timeline) and it is consistent before the target: the
//! newest such backup replays the least WAL. A target before the oldest
//! backup, or past the end of the archive, is refused here, naming why and the
//! Database field it came from, rather than found out by PostgreSQL after a
//! long replay.
//!
//! Pure: the caller lists the archive, reads the manifests and the target
//! timeline's history file, and hands them over.

use jiff::Timestamp;

use super::manifest::Manifest;
use crate::contract::Lsn;
use crate::objectstore::layout::{Layout, Listed, WalKind};

/// Where recovery stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The end of the archive.
    Latest,
    /// Just before the first commit after this time.
    Time(Timestamp),
    /// Just after this WAL location.
    Lsn(Lsn),
}

/// One line of a timeline history file: `parent` was left at `switch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    pub parent: u32,
    pub switch: Lsn,
}

/// Parses a `.history` file (`<parent>\t<switch LSN>\t<reason>` lines;
/// comments and blank lines skipped). `None` when a line is malformed: a
/// history that cannot be read must not be guessed.
pub fn parse_history(text: &str) -> Option<Vec<Switch>> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let mut fields = line.split_whitespace();
            let parent = fields.next()?.parse().ok()?;
            let switch = fields.next()?.parse().ok()?;
            Some(Switch { parent, switch })
        })
        .collect()
}

/// The end of the archive on the target timeline: the last archived
/// segment's end, and when it was stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchiveEnd {
    pub lsn: Lsn,
    pub stored_at: Option<Timestamp>,
}

/// The timeline a recovery to the end of the archive follows: the newest one
/// with a `.history` file (a promotion wrote it), else the newest with
/// segments, else 1.
pub fn newest_timeline(layout: &Layout, wal: &[Listed]) -> u32 {
    let files: Vec<_> = wal
        .iter()
        .filter_map(|l| layout.wal_file_of(&l.key))
        .collect();
    let newest = |kind: WalKind| {
        files
            .iter()
            .filter(|f| f.kind() == kind)
            .map(|f| f.timeline())
            .max()
    };
    newest(WalKind::History)
        .or_else(|| newest(WalKind::Segment))
        .unwrap_or(1)
}

/// The end of the archive on `timeline`: the end of its last stored segment
/// (segment names sort in WAL order), and when that was stored.
pub fn archive_end(
    layout: &Layout,
    wal: &[Listed],
    timeline: u32,
    segment_size: u64,
) -> Option<ArchiveEnd> {
    wal.iter()
        .filter_map(|l| Some((layout.wal_file_of(&l.key)?, l.modified)))
        .filter(|(f, _)| f.kind() == WalKind::Segment && f.timeline() == timeline)
        .max_by(|a, b| a.0.name().cmp(b.0.name()))
        .and_then(|(file, modified)| {
            Some(ArchiveEnd {
                lsn: Lsn(file.end_lsn(segment_size)?),
                stored_at: modified.and_then(|s| Timestamp::from_second(s).ok()),
            })
        })
}

/// What to restore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The backup id (`manifest.id`).
    pub backup: String,
    /// The timeline recovery follows (`recovery_target_timeline`).
    pub timeline: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the object store holds no completed backup of this system")]
    NoBackup,
    #[error("no backup on timeline {timeline}'s history; backups exist on timelines {found:?}")]
    NotOnLineage { timeline: u32, found: Vec<u32> },
    #[error(
        "{field}: the target {target} is before the oldest usable backup ({oldest}, consistent at {oldest_at})"
    )]
    BeforeOldest {
        field: &'static str,
        target: String,
        oldest: String,
        oldest_at: String,
    },
    #[error("{field}: the target {target} is past the end of the archive ({end})")]
    AfterArchive {
        field: &'static str,
        target: String,
        end: String,
    },
}

/// The Database field a target comes from, so that a target out of range is
/// refused in words that name what to change (the instance manager only sees
/// its `TUSK_RESTORE_TARGET_*` variable).
pub fn field(target: Target) -> &'static str {
    match target {
        Target::Latest => "spec.bootstrap.recovery",
        Target::Time(_) => "spec.bootstrap.recovery.targetTime",
        Target::Lsn(_) => "spec.bootstrap.recovery.targetLsn",
    }
}

/// The target, for people: `end of the archive`, `time …`, `LSN …`.
pub fn describe(target: Target) -> String {
    match target {
        Target::Latest => "end of the archive".to_owned(),
        Target::Time(at) => format!("time {at}"),
        Target::Lsn(lsn) => format!("LSN {lsn}"),
    }
}

/// Chooses the backup to recover `target` from, on `timeline` whose history
/// is `history` (empty for timeline 1). `manifests` are the system's
/// completed backups; `end` the archive's end on `timeline`, when known.
pub fn choose(
    manifests: &[Manifest],
    timeline: u32,
    history: &[Switch],
    end: Option<ArchiveEnd>,
    target: Target,
) -> Result<Choice, Refusal> {
    if manifests.is_empty() {
        return Err(Refusal::NoBackup);
    }
    // How far each timeline of the lineage may be used: ancestors up to
    // where the lineage left them, the target timeline without bound.
    let limit = |tli: u32| -> Option<Lsn> {
        if tli == timeline {
            return Some(Lsn(u64::MAX));
        }
        history.iter().find(|s| s.parent == tli).map(|s| s.switch)
    };
    let mut usable: Vec<&Manifest> = manifests
        .iter()
        .filter(|m| limit(m.timeline).is_some_and(|l| m.end_lsn <= l))
        .collect();
    if usable.is_empty() {
        let mut found: Vec<u32> = manifests.iter().map(|m| m.timeline).collect();
        found.sort_unstable();
        found.dedup();
        return Err(Refusal::NotOnLineage { timeline, found });
    }
    usable.sort_by_key(|m| (m.end_lsn, m.completed_at));
    if let Some(end) = end {
        let past = match target {
            Target::Latest => false,
            Target::Lsn(lsn) => lsn > end.lsn,
            Target::Time(at) => end.stored_at.is_some_and(|stored| at > stored),
        };
        if past {
            return Err(Refusal::AfterArchive {
                field: field(target),
                target: describe(target),
                end: match end.stored_at {
                    Some(at) => format!("WAL up to {} stored at {at}", end.lsn),
                    None => format!("WAL up to {}", end.lsn),
                },
            });
        }
    }
    let consistent_before = |m: &&&Manifest| match target {
        Target::Latest => true,
        Target::Lsn(lsn) => m.end_lsn <= lsn,
        // The backup is consistent at its end, which it reached before it
        // completed: completing before the target is the safe test.
        Target::Time(at) => m.completed_at <= at,
    };
    match usable.iter().rev().find(consistent_before) {
        Some(m) => Ok(Choice {
            backup: m.id.clone(),
            timeline,
        }),
        None => {
            let oldest = usable[0];
            Err(Refusal::BeforeOldest {
                field: field(target),
                target: describe(target),
                oldest: oldest.id.clone(),
                oldest_at: match target {
                    Target::Time(_) => oldest.completed_at.to_string(),
                    _ => oldest.end_lsn.to_string(),
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::manifest::tests::sample;

    fn backup(id: &str, timeline: u32, end: u64, completed: &str) -> Manifest {
        Manifest {
            id: id.into(),
            timeline,
            begin_lsn: Lsn(end - 0x100),
            end_lsn: Lsn(end),
            completed_at: completed.parse().expect("a timestamp"),
            ..sample()
        }
    }

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    #[test]
    fn the_archive_listing_gives_the_newest_timeline_and_its_end() {
        let layout = Layout::new(None, "orders", 7);
        let listed = |name: &str, modified: i64| Listed {
            key: layout.wal_key(&crate::objectstore::WalFile::parse(name).expect("a name")),
            size: 1,
            modified: Some(modified),
        };
        let mut wal = vec![
            listed("000000010000000000000001", 100),
            listed("000000010000000000000002", 200),
            listed("000000010000000000000003.partial", 250),
        ];
        assert_eq!(newest_timeline(&layout, &wal), 1);
        let end = archive_end(&layout, &wal, 1, 16 << 20).expect("an end");
        assert_eq!(end.lsn, Lsn(3 * (16 << 20)));
        assert_eq!(end.stored_at, Timestamp::from_second(200).ok());
        wal.push(listed("00000002.history", 260));
        wal.push(listed("000000020000000000000003", 300));
        assert_eq!(newest_timeline(&layout, &wal), 2);
        assert_eq!(
            archive_end(&layout, &wal, 2, 16 << 20).map(|e| e.lsn),
            Some(Lsn(4 * (16 << 20)))
        );
        assert_eq!(archive_end(&layout, &wal, 3, 16 << 20), None);
        assert_eq!(newest_timeline(&layout, &[]), 1);
    }

    fn three_on_timeline_one() -> Vec<Manifest> {
        vec![
            backup("a", 1, 0x0300_0000, "2026-11-24T10:00:00Z"),
            backup("b", 1, 0x0500_0000, "2026-11-24T11:00:00Z"),
            backup("c", 1, 0x0700_0000, "2026-11-24T12:00:00Z"),
        ]
    }

    #[test]
    fn the_newest_backup_consistent_before_the_target_is_chosen() {
        let all = three_on_timeline_one();
        let pick = |target| choose(&all, 1, &[], None, target).map(|c| c.backup);
        assert_eq!(pick(Target::Latest), Ok("c".into()));
        assert_eq!(
            pick(Target::Time(at("2026-11-24T11:30:00Z"))),
            Ok("b".into())
        );
        assert_eq!(
            pick(Target::Time(at("2026-11-24T11:00:00Z"))),
            Ok("b".into())
        );
        assert_eq!(pick(Target::Lsn(Lsn(0x0600_0000))), Ok("b".into()));
        assert_eq!(pick(Target::Lsn(Lsn(0x0700_0000))), Ok("c".into()));
    }

    #[test]
    fn a_target_before_the_oldest_backup_is_refused_naming_it() {
        let all = three_on_timeline_one();
        let refused = choose(&all, 1, &[], None, Target::Time(at("2026-11-24T09:59:00Z")));
        let Err(Refusal::BeforeOldest { oldest, .. }) = &refused else {
            panic!("{refused:?}");
        };
        assert_eq!(oldest, "a");
        let message = refused.expect_err("refused").to_string();
        assert!(
            message.starts_with("spec.bootstrap.recovery.targetTime: the target time "),
            "{message}"
        );
        assert!(matches!(
            choose(&all, 1, &[], None, Target::Lsn(Lsn(0x0100_0000))),
            Err(Refusal::BeforeOldest { .. })
        ));
        assert_eq!(
            choose(&[], 1, &[], None, Target::Latest),
            Err(Refusal::NoBackup)
        );
    }

    #[test]
    fn a_target_past_the_archive_is_refused() {
        let all = three_on_timeline_one();
        let end = ArchiveEnd {
            lsn: Lsn(0x0800_0000),
            stored_at: Some(at("2026-11-24T12:30:00Z")),
        };
        let past_lsn = choose(&all, 1, &[], Some(end), Target::Lsn(Lsn(0x0900_0000)));
        assert!(
            matches!(past_lsn, Err(Refusal::AfterArchive { .. })),
            "{past_lsn:?}"
        );
        let message = past_lsn.expect_err("refused").to_string();
        assert!(
            message.starts_with("spec.bootstrap.recovery.targetLsn: the target LSN 0/9000000 "),
            "{message}"
        );
        let past_time = choose(
            &all,
            1,
            &[],
            Some(end),
            Target::Time(at("2026-11-24T13:00:00Z")),
        );
        let message = past_time.expect_err("refused").to_string();
        assert!(message.contains("past the end of the archive"), "{message}");
        assert!(
            message.starts_with("spec.bootstrap.recovery.targetTime: "),
            "{message}"
        );
        assert!(choose(&all, 1, &[], Some(end), Target::Latest).is_ok());
    }

    #[test]
    fn recovery_follows_the_target_timelines_history() {
        // Timeline 2 left timeline 1 at 0/6000000 (a failover); a backup of
        // timeline 1 past that point is on the abandoned branch.
        let mut all = three_on_timeline_one();
        all.push(backup("d", 2, 0x0900_0000, "2026-11-24T13:00:00Z"));
        let history =
            parse_history("1\t0/6000000\tno recovery target specified\n").expect("history");
        assert_eq!(
            history,
            [Switch {
                parent: 1,
                switch: Lsn(0x0600_0000)
            }]
        );
        let pick = |target| choose(&all, 2, &history, None, target).map(|c| c.backup);
        assert_eq!(pick(Target::Latest), Ok("d".into()));
        // Before d, the newest backup on the lineage is b, not c (which ended
        // after the switch, on the branch timeline 2 did not take).
        assert_eq!(
            pick(Target::Time(at("2026-11-24T12:30:00Z"))),
            Ok("b".into())
        );
        assert_eq!(
            choose(&all, 2, &history, None, Target::Latest).map(|c| c.timeline),
            Ok(2)
        );
        // On timeline 3, with no history naming 1 or 2, nothing is usable.
        let refused = choose(&all, 3, &[], None, Target::Latest);
        assert_eq!(
            refused,
            Err(Refusal::NotOnLineage {
                timeline: 3,
                found: vec![1, 2]
            })
        );
    }

    #[test]
    fn a_malformed_history_is_not_guessed() {
        assert_eq!(parse_history("# comment\n\n"), Some(vec![]));
        assert_eq!(parse_history("1\tnot-an-lsn\treason"), None);
        assert_eq!(parse_history("x\t0/1\treason"), None);
    }
}
