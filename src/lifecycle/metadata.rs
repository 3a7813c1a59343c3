//! Inherited metadata kept on the instances: a Pod or PVC that lost (or
//! had changed) a label or annotation of `spec.inheritedMetadata` gets it
//! back in place. Pod metadata is mutable, so this never recreates a pod,
//! and it only ever touches inherited keys, never Tusk's own (which the
//! Services select on), so it is safe on an instance in any state. Other
//! objects (Services, Secrets, PodDisruptionBudgets) are compared whole
//! with what the builders make and re-applied in `objects`.

use super::action::Action;
use super::context::Context;

/// The action restoring what drifted; none when nothing did.
pub(super) fn plan(ctx: &Context) -> Vec<Action> {
    let drift = &ctx.observed.inherited_drift;
    if drift.pods.is_empty() && drift.pvcs.is_empty() {
        return Vec::new();
    }
    vec![Action::RestoreInheritedMetadata {
        pods: drift.pods.clone(),
        pvcs: drift.pvcs.clone(),
    }]
}

#[cfg(test)]
mod tests {
    use super::super::observed::InheritedDrift;
    use super::super::plan::plan;
    use super::super::tests::{healthy_three, spec};
    use super::*;
    use crate::api::status::DatabasePhase;
    use crate::api::v1::ReplicationMode;

    #[test]
    fn drifted_pods_and_volumes_get_their_metadata_back_without_a_roll() {
        let spec = spec(3, ReplicationMode::Async, 1);
        let mut observed = healthy_three();
        let steady = plan(&spec, None, &observed);
        assert!(
            !steady
                .actions
                .iter()
                .any(|a| matches!(a, Action::RestoreInheritedMetadata { .. })),
            "nothing drifted: {:?}",
            steady.actions
        );
        observed.inherited_drift = InheritedDrift {
            pods: vec!["orders-2".into()],
            pvcs: vec!["orders-3".into()],
        };
        let decided = plan(&spec, None, &observed);
        assert!(decided.actions.contains(&Action::RestoreInheritedMetadata {
            pods: vec!["orders-2".into()],
            pvcs: vec!["orders-3".into()],
        }));
        assert!(
            !decided.actions.iter().any(|a| matches!(
                a,
                Action::RollPod { .. } | Action::DeletePod { .. } | Action::CreatePod { .. }
            )),
            "metadata is patched in place: {:?}",
            decided.actions
        );
        assert_eq!(decided.phase, DatabasePhase::Ready);
    }
}
