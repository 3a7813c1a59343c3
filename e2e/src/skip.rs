//! A test that cannot run where it is pointed fails, and says why; it skips
//! only when `$TUSK_E2E_ALLOW_SKIP` names its group (a comma-separated list:
//! `TUSK_E2E_ALLOW_SKIP=node-faults` on kind, k3d or a cloud cluster, where
//! the node is not this machine). A skip prints one [`MARKER`] line, which
//! `.ci/run` counts in its closing line (`N passed, N failed, N skipped`):
//! libtest reports a skipped test as passed, so the count has to come from us.

use std::io::Write as _;

use crate::Result;

/// The opt-out variable.
pub const ALLOW_SKIP: &str = "TUSK_E2E_ALLOW_SKIP";

/// The start of the line a skipped test prints; `.ci/run` counts these.
pub const MARKER: &str = "[tusk-e2e] SKIPPED";

/// Whether `allowed` (the opt-out variable's value) names `group`.
pub fn allowed(allowed: Option<&str>, group: &str) -> bool {
    allowed.is_some_and(|list| list.split(',').any(|g| g.trim() == group))
}

/// `test` (of `group`) cannot run here, for `why`. Fails with that reason and
/// the way to opt out, unless `$TUSK_E2E_ALLOW_SKIP` names `group`: then it
/// prints the skip's [`MARKER`] line and returns `Ok`, and the caller returns
/// without testing anything.
pub fn cannot_run(group: &str, test: &str, why: &str) -> Result<()> {
    let setting = std::env::var(ALLOW_SKIP).ok();
    if !allowed(setting.as_deref(), group) {
        return Err(format!(
            "{test} cannot run here: {why}. Point $KUBECONFIG where it can run, or set \
             {ALLOW_SKIP}={group} to skip it (counted as skipped by .ci/run)"
        )
        .into());
    }
    // Straight to the stderr file descriptor: libtest captures what `println!`
    // and `eprintln!` print in a passing test, and the count needs this line
    // in every run. One write, so parallel tests do not split it.
    let line = format!("\n{MARKER} {test}: {why} ({ALLOW_SKIP}={group})\n");
    std::io::stderr()
        .lock()
        .write_all(line.as_bytes())
        .map_err(|e| format!("cannot print that {test} is skipped: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_named_group_may_skip() {
        assert!(allowed(Some("node-faults"), "node-faults"));
        assert!(allowed(Some("olm, node-faults"), "node-faults"));
        assert!(!allowed(None, "node-faults"));
        assert!(!allowed(Some(""), "node-faults"));
        assert!(!allowed(Some("node"), "node-faults"));
        assert!(!allowed(Some("node-faults-x"), "node-faults"));
    }

    /// `.ci/run` counts the lines that start with the marker (its own test,
    /// tests/ci_run.rs, shows how): both must spell it the same.
    #[test]
    fn ci_run_counts_this_marker() {
        let script = std::fs::read_to_string(crate::repo_path(".ci/run")).expect("read .ci/run");
        assert!(
            script.contains(&format!("index($0, \"{MARKER} \") == 1")),
            ".ci/run does not count lines starting with {MARKER:?}"
        );
    }
}
