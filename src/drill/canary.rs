//! The check that the cluster enforces NetworkPolicy, before a
//! `partition-primary` fault is trusted to cut anything: a cluster without
//! an implementation accepts every policy and ignores it, and a partition
//! drill there would measure nothing and pass.
//!
//! The canary is a policy denying all ingress to the drill's own probe pod,
//! which the operator reads every pass: where policies are enforced the
//! probe stops answering within moments; where it still answers after
//! [`CANARY_WAIT`], the run is refused naming `spec.scenario`. The canary is
//! then removed, and the fault waits until the probe answers again.
//!
//! Pure: the shell applies and removes the policy; [`check`] reads the
//! record in `status.policyCheck` and whether the probe answered this pass.

use jiff::{SignedDuration, Timestamp};

use crate::api::drill::PolicyCheck;

/// How long the probe may keep answering behind the canary before the
/// cluster is taken not to enforce NetworkPolicy. Implementations program a
/// new policy within a second or two; the operator reads the probe once a
/// second with a fresh connection each time.
pub const CANARY_WAIT: SignedDuration = SignedDuration::from_secs(10);

/// Where the check is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Nothing on record: apply the canary (recorded first).
    Apply,
    /// Applied; the probe still answers, within [`CANARY_WAIT`].
    Waiting,
    /// The probe stopped answering: enforced. Remove the canary.
    Enforced,
    /// The probe still answers after [`CANARY_WAIT`]: not enforced.
    NotEnforced,
    /// Enforced but the canary is not removed yet: remove it (again).
    Remove,
    /// Removed; waiting for the probe to answer again.
    Reopening,
    /// Removed, yet the probe has not answered for [`CANARY_WAIT`].
    StaysClosed,
    /// Enforced, removed and the probe answers: the fault may go in.
    Passed,
}

/// The next step of the check on record `check`, given whether the probe
/// answered its report this pass.
pub fn check(record: Option<&PolicyCheck>, probe_answers: bool, now: Timestamp) -> Check {
    let Some(record) = record else {
        return Check::Apply;
    };
    match (&record.enforced_at, &record.removed_at) {
        (None, None) if !probe_answers => Check::Enforced,
        (None, None) if now.duration_since(record.applied_at.0) >= CANARY_WAIT => {
            Check::NotEnforced
        }
        (None, None) => Check::Waiting,
        (Some(_), None) => Check::Remove,
        // Removed without proof of enforcement: a run that ended (refused,
        // aborted) and is not looked at again.
        (None, Some(_)) => Check::NotEnforced,
        (Some(_), Some(_)) if probe_answers => Check::Passed,
        (Some(_), Some(removed)) if now.duration_since(removed.0) >= CANARY_WAIT => {
            Check::StaysClosed
        }
        (Some(_), Some(_)) => Check::Reopening,
    }
}

/// The canary is on record and not known to be removed.
pub fn outstanding(record: Option<&PolicyCheck>) -> bool {
    record.is_some_and(|r| r.removed_at.is_none())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).expect("a valid time")
    }

    fn record(enforced: Option<i64>, removed: Option<i64>) -> PolicyCheck {
        PolicyCheck {
            policy: "weekly-canary".into(),
            applied_at: Time(at(0)),
            enforced_at: enforced.map(|s| Time(at(s))),
            removed_at: removed.map(|s| Time(at(s))),
        }
    }

    #[test]
    fn nothing_on_record_applies_the_canary() {
        assert_eq!(check(None, true, at(0)), Check::Apply);
    }

    #[test]
    fn a_probe_that_stops_answering_proves_enforcement() {
        assert_eq!(
            check(Some(&record(None, None)), false, at(1)),
            Check::Enforced
        );
    }

    #[test]
    fn a_probe_that_answers_is_waited_for_then_refused() {
        let applied = record(None, None);
        assert_eq!(check(Some(&applied), true, at(9)), Check::Waiting);
        assert_eq!(check(Some(&applied), true, at(10)), Check::NotEnforced);
    }

    #[test]
    fn an_unremoved_canary_is_removed_again() {
        assert_eq!(
            check(Some(&record(Some(1), None)), false, at(3)),
            Check::Remove
        );
        assert_eq!(
            check(Some(&record(Some(1), None)), true, at(3)),
            Check::Remove
        );
    }

    #[test]
    fn after_removal_the_fault_waits_for_the_probe() {
        let removed = record(Some(1), Some(2));
        assert_eq!(check(Some(&removed), false, at(3)), Check::Reopening);
        assert_eq!(check(Some(&removed), true, at(3)), Check::Passed);
        assert_eq!(check(Some(&removed), false, at(12)), Check::StaysClosed);
    }

    #[test]
    fn only_an_unremoved_canary_is_outstanding() {
        assert!(outstanding(Some(&record(None, None))));
        assert!(outstanding(Some(&record(Some(1), None))));
        assert!(!outstanding(Some(&record(Some(1), Some(2)))));
        assert!(!outstanding(None));
    }
}
