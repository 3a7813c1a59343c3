//! What each sub-planner says about the Database besides its actions, and how
//! those verdicts become the three standard conditions.
//!
//! The contract a user can `kubectl wait` for:
//! - `Ready=True` at generation N: everything spec N asks for is in effect,
//!   as observed (instances, versions, parameters, synchronous replication,
//!   role labels), and the Services route: `-rw` to the primary, `-ro` to
//!   every replica.
//! - `Progressing=True`: Tusk is carrying out a change; the reason says which.
//! - `Ready=False, Progressing=False` with a `Blocked` verdict: the spec asks
//!   for something Tusk cannot carry out (the message names the field), or an
//!   instance refused; nothing changes for it until the spec does.
//! - `Degraded=True`: something that was working is not (an instance that
//!   served and stopped), or a new instance failed or never started within
//!   its grace; an instance starting for the first time, or a switchover
//!   under way, is progress instead (the rule is in `alarm`).

use crate::api::status::DatabasePhase;

pub const READY: &str = "Ready";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";

/// A condition as the planner wants it, before times and generations are filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    pub type_: &'static str,
    pub status: bool,
    /// PascalCase reason.
    pub reason: &'static str,
    pub message: String,
}

impl Desired {
    pub fn new(
        type_: &'static str,
        status: bool,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason,
            message: message.into(),
        }
    }
}

/// One finding of a sub-planner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Something spec asks for is being carried out: not Ready yet.
    Progress {
        reason: &'static str,
        message: String,
    },
    /// Tusk cannot carry something out (an unsupported field, an instance
    /// that refuses, an instance API it cannot speak): not Ready, not
    /// progressing for it, until a human changes something.
    Blocked {
        reason: &'static str,
        message: String,
    },
    /// Serving with something unhealthy.
    Degraded {
        reason: &'static str,
        message: String,
    },
}

impl Verdict {
    pub fn progress(reason: &'static str, message: impl Into<String>) -> Self {
        Self::Progress {
            reason,
            message: message.into(),
        }
    }

    pub fn blocked(reason: &'static str, message: impl Into<String>) -> Self {
        Self::Blocked {
            reason,
            message: message.into(),
        }
    }

    pub fn degraded(reason: &'static str, message: impl Into<String>) -> Self {
        Self::Degraded {
            reason,
            message: message.into(),
        }
    }
}

/// The three conditions from the verdicts, `acting` (the plan has actions)
/// and the phase. Ready needs no verdict against it and the phase `Ready`;
/// its reason is the first blocking verdict's, else the first progress one's.
pub fn conditions(
    phase: DatabasePhase,
    verdicts: &[Verdict],
    acting: bool,
    ready_message: &str,
) -> Vec<Desired> {
    let blocked = verdicts.iter().find_map(|v| match v {
        Verdict::Blocked { reason, message } => Some((*reason, message.clone())),
        _ => None,
    });
    let progress = verdicts.iter().find_map(|v| match v {
        Verdict::Progress { reason, message } => Some((*reason, message.clone())),
        _ => None,
    });
    let degraded = verdicts.iter().find_map(|v| match v {
        Verdict::Degraded { reason, message } => Some((*reason, message.clone())),
        _ => None,
    });
    let ready = phase == DatabasePhase::Ready && blocked.is_none() && progress.is_none();
    let (ready_reason, ready_message) = if ready {
        ("AllInstancesReady", ready_message.to_owned())
    } else {
        blocked
            .clone()
            .or_else(|| progress.clone())
            .or_else(|| degraded.clone())
            .unwrap_or(("NotReady", format!("phase {}", phase.as_str())))
    };
    let (progressing, progress_reason, progress_message) = match &progress {
        Some((reason, message)) => (true, *reason, message.clone()),
        None if acting => (true, ready_reason, ready_message.clone()),
        None => match &blocked {
            Some((reason, message)) => (false, *reason, message.clone()),
            None => (false, "Idle", "nothing is under way".to_owned()),
        },
    };
    let (is_degraded, degraded_reason, degraded_message) = match degraded {
        Some((reason, message)) => (true, reason, message),
        None => (
            false,
            "Healthy",
            "no instance is known to be unhealthy".to_owned(),
        ),
    };
    vec![
        Desired::new(READY, ready, ready_reason, ready_message),
        Desired::new(PROGRESSING, progressing, progress_reason, progress_message),
        Desired::new(DEGRADED, is_degraded, degraded_reason, degraded_message),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_type<'a>(conditions: &'a [Desired], type_: &str) -> &'a Desired {
        conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_}"))
    }

    #[test]
    fn ready_only_without_verdicts_against_it() {
        let all = conditions(DatabasePhase::Ready, &[], false, "3 instances ready");
        assert!(by_type(&all, READY).status);
        assert!(!by_type(&all, PROGRESSING).status);
        assert!(!by_type(&all, DEGRADED).status);

        let moving = conditions(
            DatabasePhase::Ready,
            &[Verdict::progress(
                "ApplyingParameters",
                "reloading orders-2",
            )],
            true,
            "",
        );
        assert!(!by_type(&moving, READY).status);
        assert_eq!(by_type(&moving, READY).reason, "ApplyingParameters");
        assert!(by_type(&moving, PROGRESSING).status);
    }

    #[test]
    fn a_blocked_request_is_not_ready_and_not_progressing() {
        let all = conditions(
            DatabasePhase::Ready,
            &[Verdict::blocked(
                "SwitchoverNotSupported",
                "spec.primary: switchover is not supported by this build",
            )],
            false,
            "",
        );
        let ready = by_type(&all, READY);
        assert!(!ready.status);
        assert_eq!(ready.reason, "SwitchoverNotSupported");
        assert!(ready.message.starts_with("spec.primary:"));
        let progressing = by_type(&all, PROGRESSING);
        assert!(!progressing.status);
        assert_eq!(progressing.reason, "SwitchoverNotSupported");
    }

    #[test]
    fn blocked_wins_the_ready_reason_but_work_still_progresses() {
        let all = conditions(
            DatabasePhase::Scaling,
            &[
                Verdict::progress("Scaling", "adding orders-4"),
                Verdict::blocked("RestoreNotSupported", "spec.bootstrap.recovery: …"),
            ],
            true,
            "",
        );
        assert_eq!(by_type(&all, READY).reason, "RestoreNotSupported");
        assert!(by_type(&all, PROGRESSING).status);
        assert_eq!(by_type(&all, PROGRESSING).reason, "Scaling");
    }
}
