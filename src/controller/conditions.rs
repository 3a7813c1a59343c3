//! Standard Kubernetes Conditions, computed once per pass. Transition times are kept
//! while a condition's status stays the same; every condition carries the generation
//! it was computed for.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

pub use crate::lifecycle::{DEGRADED, Desired, EXPOSED, PROGRESSING, READY};

fn status_str(status: bool) -> &'static str {
    if status { "True" } else { "False" }
}

/// Builds the new condition list from the previous one: unchanged statuses keep
/// their `lastTransitionTime`, changed or new ones get `now`. Conditions not in
/// `desired` are dropped, so the list always says exactly what Tusk computed.
pub fn merge(
    previous: &[Condition],
    desired: &[Desired],
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    desired
        .iter()
        .map(|want| {
            let status = status_str(want.status);
            let since = previous
                .iter()
                .find(|c| c.type_ == want.type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: want.type_.to_owned(),
                status: status.to_owned(),
                reason: want.reason.to_owned(),
                message: want.message.clone(),
                last_transition_time: since,
                observed_generation: generation,
            }
        })
        .collect()
}

/// Conditions whose status differs between `before` and `after` (new ones included).
pub fn transitions<'a>(before: &[Condition], after: &'a [Condition]) -> Vec<&'a Condition> {
    after
        .iter()
        .filter(|c| {
            !before
                .iter()
                .any(|b| b.type_ == c.type_ && b.status == c.status && b.reason == c.reason)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    #[test]
    fn transition_time_is_kept_while_status_holds() {
        let first = merge(
            &[],
            &[Desired::new(READY, false, "Provisioning", "a")],
            Some(1),
            &at(10),
        );
        let second = merge(
            &first,
            &[Desired::new(READY, false, "Provisioning", "b")],
            Some(2),
            &at(20),
        );
        assert_eq!(second[0].last_transition_time, at(10));
        assert_eq!(second[0].observed_generation, Some(2));
        assert_eq!(second[0].message, "b");
        let third = merge(
            &second,
            &[Desired::new(READY, true, "AllInstancesReady", "")],
            Some(2),
            &at(30),
        );
        assert_eq!(third[0].last_transition_time, at(30));
        assert_eq!(third[0].status, "True");
    }

    #[test]
    fn transitions_lists_only_changes() {
        let before = merge(
            &[],
            &[
                Desired::new(READY, false, "A", ""),
                Desired::new(DEGRADED, false, "B", ""),
            ],
            None,
            &at(1),
        );
        let after = merge(
            &before,
            &[
                Desired::new(READY, true, "C", ""),
                Desired::new(DEGRADED, false, "B", "x"),
            ],
            None,
            &at(2),
        );
        let changed: Vec<_> = transitions(&before, &after)
            .into_iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(changed, [READY]);
    }
}
