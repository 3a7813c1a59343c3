//! The `restore` scenario's pure parts: what the shell observes of the
//! throwaway Database and of the checker pod, the recovery point a run
//! restores to, the ids the copy must hold, and the copy's name.
//!
//! A restore drill injects nothing into its Database: it marks a recovery
//! point T between the probe's acknowledged writes, has the primary switch
//! WAL so that T is archived, restores the Database to T into a throwaway
//! Database owned by the Drill, counts in it the probe's writes
//! acknowledged by T, and deletes it. The phases are in
//! [`plan`](mod@super::plan)'s `restore` part.

use jiff::Timestamp;

use crate::contract::drill::ProbeReport;
use crate::probe::check::CheckReport;

use super::plan::{BASELINE_WRITES, unix};

/// What the restore scenario sees beside the Database and the probe.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RestoreView {
    /// The throwaway Database on record (`fault.object`), when it exists.
    pub copy: Option<CopyView>,
    /// The checker pod.
    pub check: CheckView,
}

/// The throwaway Database as observed.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyView {
    /// Its `metadata.creationTimestamp`.
    pub created: Timestamp,
    /// Ready=True at its generation.
    pub ready: bool,
    /// When Ready last turned True.
    pub ready_since: Option<Timestamp>,
}

/// The checker pod as observed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckView {
    /// The pod exists (and is not being deleted).
    pub exists: bool,
    /// Its report once it ended, or why there is none.
    pub ended: Option<Result<CheckReport, String>>,
}

/// The recovery point of a run: the latest whole second T such that two
/// acknowledged writes came after it and at least
/// [`BASELINE_WRITES`] at or before it; `None` until the probe has those.
///
/// Whole seconds, because a `metav1.Time` keeps no more (T is the fault's
/// `injectedAt`, read back by a restarted operator). Two writes after T,
/// because the later one started after the earlier was acknowledged, so
/// its commit is stamped after T: recovery finds a commit past T in WAL
/// written before the switch that archives it, and stops there, instead of
/// reaching the end of the archive short of its target.
pub fn recovery_point(report: &ProbeReport) -> Option<Timestamp> {
    let mut times: Vec<f64> = report.acknowledged.iter().map(|(_, at)| *at).collect();
    times.sort_by(f64::total_cmp);
    let second_newest = *times.iter().rev().nth(1)?;
    // The latest whole second strictly before the second-newest write.
    let point = second_newest.ceil() as i64 - 1;
    let before = times.iter().filter(|at| **at <= point as f64).count();
    if before < BASELINE_WRITES {
        return None;
    }
    Timestamp::from_second(point).ok()
}

/// The ids the probe saw acknowledged at or before `point`: committed
/// before it, so the copy restored to it must hold them.
pub fn acknowledged_by(report: &ProbeReport, point: Timestamp) -> Vec<i64> {
    let bound = unix(point);
    let mut ids: Vec<i64> = report
        .acknowledged
        .iter()
        .filter(|(_, at)| *at <= bound)
        .map(|(id, _)| *id)
        .collect();
    ids.sort_unstable();
    ids
}

/// The longest name a Database may have.
const MAX_DATABASE_NAME: usize = crate::api::validate::MAX_NAME_LEN;

/// The throwaway Database of drill `drill`'s run started at `started`:
/// `<drill>-restore-<hash>`, the drill's name cut to fit a Database's 50
/// characters and to a DNS label's alphabet, the hash of both keeping
/// names of different drills and runs apart. Deterministic, so that a
/// restarted operator finds the same name.
pub fn copy_name(drill: &str, started: Timestamp) -> String {
    let hash = crate::resources::short_hash(&format!("{drill}/{}", started.as_second()));
    let mut base: String = drill
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    if !base.starts_with(|c: char| c.is_ascii_lowercase()) {
        base.insert_str(0, "r-");
    }
    let suffix = format!("-restore-{hash}");
    base.truncate(MAX_DATABASE_NAME - suffix.len());
    format!("{}{suffix}", base.trim_end_matches('-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(times: &[f64]) -> ProbeReport {
        ProbeReport::acknowledging(times)
    }

    #[test]
    fn the_recovery_point_is_a_whole_second_with_the_baseline_before_and_two_writes_after() {
        let seen = report(&[100.1, 100.4, 100.9, 101.2, 101.5]);
        let point = recovery_point(&seen).unwrap();
        assert_eq!(point.as_second(), 101);
        assert_eq!(acknowledged_by(&seen, point), vec![1, 2, 3]);
        // Two writes after 101 but only 3 before it: still waiting for a
        // second boundary with both.
        assert_eq!(recovery_point(&report(&[100.1, 100.4, 101.1, 101.3])), None);
        assert_eq!(recovery_point(&report(&[100.1])), None);
        // A write exactly on the second counts as before it.
        let exact = report(&[100.1, 100.4, 101.0, 101.2, 102.0]);
        assert_eq!(recovery_point(&exact).unwrap().as_second(), 101);
        assert_eq!(
            acknowledged_by(&exact, Timestamp::from_second(101).unwrap()),
            vec![1, 2, 3]
        );
    }

    #[test]
    fn a_copy_name_fits_a_database_is_a_dns_label_and_differs_per_run() {
        let at = |s| Timestamp::from_second(s).unwrap();
        let name = copy_name("weekly", at(1));
        assert!(name.starts_with("weekly-restore-"), "{name}");
        assert_eq!(name, copy_name("weekly", at(1)), "deterministic");
        assert_ne!(name, copy_name("weekly", at(2)), "one per run");
        let long = copy_name(&format!("9{}", "a.b".repeat(19)), at(1));
        assert!(long.len() <= MAX_DATABASE_NAME, "{long}");
        assert!(long.starts_with("r-9a-b"), "{long}");
        assert!(
            long.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{long}"
        );
        assert_ne!(long, copy_name(&format!("9{}", "a.b".repeat(18)), at(1)));
    }
}
