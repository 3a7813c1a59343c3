//! The kinds of Job a major upgrade runs, named once for the planner that
//! decides which runs and the builder that makes it (and `tusk upgrade`,
//! whose subcommands they are).

/// The kind of upgrade Job: `tusk upgrade check`, `run` or `rollback` on the
/// primary's volume. Not the upgrade's progress (`status.upgrade.step`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpgradeJob {
    Check,
    Upgrade,
    Rollback,
}

impl UpgradeJob {
    /// The `tusk upgrade` subcommand the Job runs.
    pub fn subcommand(self) -> &'static str {
        match self {
            Self::Check => "check",
            Self::Upgrade => "run",
            Self::Rollback => "rollback",
        }
    }

    /// In the Job's name and its step label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Check => "check",
            Self::Upgrade => "upgrade",
            Self::Rollback => "rollback",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_subcommands() {
        let all = [UpgradeJob::Check, UpgradeJob::Upgrade, UpgradeJob::Rollback];
        let names: Vec<_> = all.iter().map(|j| j.as_str()).collect();
        let commands: Vec<_> = all.iter().map(|j| j.subcommand()).collect();
        assert_eq!(names, ["check", "upgrade", "rollback"]);
        assert_eq!(commands, ["check", "run", "rollback"]);
    }
}
