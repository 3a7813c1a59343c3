//! Events a decision asks for beside its actions and conditions (a
//! migration's outcome, the final backup's): the controller publishes them
//! once the status is written.

/// An Event a decision asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    /// PascalCase.
    pub reason: &'static str,
    /// The Event's action (`Migrate`, `Delete`, …).
    pub action: &'static str,
    pub message: String,
}

impl Note {
    pub(super) fn normal(reason: &'static str, message: String) -> Self {
        Self {
            warning: false,
            reason,
            action: "Delete",
            message,
        }
    }

    pub(super) fn warning(reason: &'static str, message: String) -> Self {
        Self {
            warning: true,
            ..Self::normal(reason, message)
        }
    }
}
