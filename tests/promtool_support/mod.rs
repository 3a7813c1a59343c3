//! promtool (Debian's `prometheus` package) for the tests that check metrics
//! expositions and monitoring rules. It is installed through
//! `scripts/install-tools`, never skipped: a machine without it fails the test
//! and says why.

#![allow(dead_code)] // each test binary uses a different part

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// The promtool binary, installed on first use.
pub fn promtool() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-tools");
        let output = Command::new(&script)
            .args(["--path", "promtool"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            output.status.success(),
            "{} --path promtool failed ({}):\n{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        assert!(
            path.is_file(),
            "install-tools answered {}, which is no file",
            path.display()
        );
        path
    })
}

/// Runs promtool with `args`, feeding `stdin`.
pub fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(promtool())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    child
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(stdin.as_bytes())
        .expect("write to promtool");
    child.wait_with_output().expect("wait for promtool")
}

/// Everything promtool printed.
pub fn printed(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `promtool check metrics` over an exposition: fails the test on any problem
/// it reports (lint findings exit with status 3 and are printed).
pub fn check_metrics(exposition: &str) {
    let output = run(&["check", "metrics"], exposition);
    let printed = printed(&output);
    assert!(
        output.status.success() && printed.trim().is_empty(),
        "promtool check metrics ({}):\n{printed}\nexposition:\n{exposition}",
        output.status
    );
}

/// Series names (the part before `{` or the value) of a Prometheus text
/// exposition.
pub fn series_names(exposition: &str) -> std::collections::BTreeSet<String> {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}
