//! The TLS planner's part in a Database's pass ([`super::tls`] stays free
//! of the pass's context and actions, which depend on it): the instances
//! the topology is about to create get their Secrets planned, and a pod
//! whose Secret would not be complete is held back.

use super::action::Action;
use super::context::Context;
use super::tls::{LeafKind, TlsAction, TlsPlan, plan};
use super::verdict::Verdict;

/// The TLS part of a Database's pass: the planner on what was observed,
/// with the instances the topology is about to create added (their
/// Secrets are written before their pods). `None` when TLS is not observed.
pub(super) fn for_pass(ctx: &Context, additions: &[Action]) -> Option<TlsPlan> {
    let mut observed = ctx.observed.tls.clone()?;
    for action in additions {
        if let Action::CreatePod { serial, .. } | Action::CreatePvc { serial } = action {
            observed.instances.entry(ctx.name(*serial)).or_default();
        }
    }
    Some(plan(&observed))
}

/// Keeps back the (re)creation of an existing instance's pod (the first
/// primary, a restart, a repair) while the Secret PostgreSQL would serve as
/// is (`spec.tls.server`'s, cert-manager's) cannot be used and the
/// instance's own Secret holds no server certificate yet: PostgreSQL could
/// not start. Nothing is held with Tusk's own certificates (their Secrets
/// are written in the same pass, [`hold_pods`]).
pub(super) fn hold_unserved(ctx: &Context, actions: Vec<Action>) -> (Vec<Action>, Option<Verdict>) {
    let Some(observed) = ctx.observed.tls.as_ref() else {
        return (actions, None);
    };
    let Some(Err(why)) = observed.settings.user_server.as_ref().map(|u| &u.leaf) else {
        return (actions, None);
    };
    let mut waiting = Vec::new();
    let kept = actions
        .into_iter()
        .filter(|action| match action {
            Action::CreatePod { serial, .. } => {
                let name = ctx.name(*serial);
                let served = observed
                    .instances
                    .get(&name)
                    .and_then(|i| i.secret.as_ref())
                    .is_some_and(|s| s.server.is_some());
                if !served {
                    waiting.push(name);
                }
                served
            }
            _ => true,
        })
        .collect();
    let verdict = (!waiting.is_empty()).then(|| {
        Verdict::progress(
            "WaitingForCertificates",
            format!(
                "{} wait for a server certificate to serve: {}",
                waiting.join(", "),
                why.message
            ),
        )
    });
    (kept, verdict)
}

/// Keeps back the creation of a pod whose TLS Secret will not hold every
/// certificate once this plan's writes are done: the pod could not start
/// without it. Says so in a verdict naming the Secrets.
pub(super) fn hold_pods(
    ctx: &Context,
    tls: Option<&TlsPlan>,
    additions: Vec<Action>,
) -> (Vec<Action>, Option<Verdict>) {
    let (Some(observed), Some(tls)) = (ctx.observed.tls.as_ref(), tls) else {
        return (additions, None);
    };
    // A Secret PostgreSQL serves as is (spec.tls.server, cert-manager's)
    // is copied into the instance's only once it can be used: until then a
    // new pod would have no server certificate to start with.
    let user_server = observed
        .settings
        .user_server
        .as_ref()
        .is_some_and(|u| u.leaf.is_ok());
    let complete = |name: &str| {
        let held = observed
            .instances
            .get(name)
            .and_then(|i| i.secret.clone())
            .unwrap_or_default();
        let written: Vec<LeafKind> = tls
            .actions
            .iter()
            .filter_map(|a| match a {
                TlsAction::WriteInstance {
                    instance, issue, ..
                } if instance == name => Some(issue.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        LeafKind::ALL.iter().all(|kind| {
            (*kind == LeafKind::Server && user_server)
                || held.leaf(*kind).is_some()
                || written.contains(kind)
        })
    };
    let mut waiting = Vec::new();
    let kept = additions
        .into_iter()
        .filter(|action| match action {
            Action::CreatePod { serial, .. } => {
                let name = ctx.name(*serial);
                let ready = complete(&name);
                if !ready {
                    waiting.push(format!("Secret {name}-tls"));
                }
                ready
            }
            _ => true,
        })
        .collect();
    let verdict = (!waiting.is_empty()).then(|| {
        Verdict::progress(
            "WaitingForCertificates",
            format!(
                "pods wait for their certificates: {} not complete yet",
                waiting.join(", ")
            ),
        )
    });
    (kept, verdict)
}
