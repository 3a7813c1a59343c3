//! Quorum arithmetic. A primary without a fresh lease keeps serving only while
//! it reaches a majority that includes itself; a failover needs confirmations
//! from enough *other* instances that every such majority contains one of the
//! confirmers, so the two can never both hold.

use super::Timing;
use std::time::Duration;

/// The smallest majority of `members`.
pub fn majority(members: usize) -> usize {
    members / 2 + 1
}

/// How many of the other instances must confirm the primary gone: more than
/// the others left outside the primary's smallest majority (the primary plus
/// `majority - 1` peers), so that every majority the primary could still
/// reach contains a confirmer. A majority of the others for odd sizes; one
/// for two instances; unreachable for one.
pub fn confirmations_needed(members: usize) -> usize {
    members.saturating_sub(majority(members)) + 1
}

/// With `synchronous_standby_names = ANY min (standbys)`, every acknowledged
/// commit is on `min` of them; hearing from all but `min - 1` means one that
/// heard has it (R + W > N).
pub fn sync_reports_needed(standbys: usize, min: usize) -> usize {
    (standbys + 1).saturating_sub(min.max(1))
}

/// What a replica says of the primary in its status: how long since it last
/// exchanged a call with it (measured from the replica's own start when
/// never), and whether the primary answered that it fenced itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Report {
    pub silent_for: Duration,
    pub fenced: bool,
}

/// Whether `report` confirms the primary gone: it said it fenced, or it has
/// been silent for longer than it could have kept counting this replica as
/// reached.
pub fn confirms_gone(report: Report, timing: &Timing) -> bool {
    report.fenced || report.silent_for >= timing.gone_after
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majorities_and_confirmations() {
        let table = [(1, 1, 1), (2, 2, 1), (3, 2, 2), (4, 3, 2), (5, 3, 3)];
        for (members, majority_of, confirmations) in table {
            assert_eq!(majority(members), majority_of, "{members}");
            assert_eq!(confirmations_needed(members), confirmations, "{members}");
        }
    }

    #[test]
    fn every_primary_majority_meets_every_confirming_set() {
        // Exhaustively for small sizes: instance 0 is the primary.
        for members in 2..=6usize {
            let others = members - 1;
            for serving in 0u32..(1 << others) {
                if 1 + (serving.count_ones() as usize) < majority(members) {
                    continue;
                }
                for confirming in 0u32..(1 << others) {
                    if (confirming.count_ones() as usize) < confirmations_needed(members) {
                        continue;
                    }
                    assert_ne!(
                        serving & confirming,
                        0,
                        "{members}: {serving:b} {confirming:b}"
                    );
                }
            }
        }
    }

    #[test]
    fn sync_reports() {
        assert_eq!(sync_reports_needed(2, 1), 2);
        assert_eq!(sync_reports_needed(2, 2), 1);
        assert_eq!(sync_reports_needed(4, 2), 3);
    }

    #[test]
    fn confirmation_needs_silence_longer_than_the_contact_window() {
        let t = Timing::DEFAULT;
        let silent = |secs: u64| Report {
            silent_for: Duration::from_secs(secs),
            fenced: false,
        };
        assert!(!confirms_gone(silent(3), &t));
        assert!(confirms_gone(silent(4), &t));
        assert!(confirms_gone(
            Report {
                silent_for: Duration::ZERO,
                fenced: true
            },
            &t
        ));
    }
}
