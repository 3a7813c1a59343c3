//! `.ci/run`'s closing line: `tests: N passed, N failed, N skipped`, totalled
//! from every cargo test binary's `test result:` line, where a test that
//! skipped itself (its `[tusk-e2e] SKIPPED` line, e2e/src/skip.rs) counts as
//! skipped and not passed, and an ignored test as skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

use std::path::Path;
use std::process::Command;

/// Two binaries' results, one test of the second skipped by its own marker
/// (printed between libtest's name and verdict, as in a single-threaded run).
const LOG: &str = "\
running 4 tests
test a ... ok
test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.10s
test b ... 
[tusk-e2e] SKIPPED b: it needs the node of the local cluster (TUSK_E2E_ALLOW_SKIP=node-faults)
ok
a line that mentions [tusk-e2e] SKIPPED in passing is not a skip
test result: FAILED. 5 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.10s
";

#[test]
fn the_closing_line_counts_skips_apart_from_passes() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let log = std::env::temp_dir().join(format!("tusk-ci-run-{}.log", std::process::id()));
    std::fs::write(&log, LOG).expect("write the log");
    let output = Command::new(repo.join(".ci/run"))
        .arg("--totals")
        .arg(&log)
        .output()
        .expect("run .ci/run");
    let _ = std::fs::remove_file(&log);
    assert!(
        output.status.success(),
        ".ci/run --totals failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "tests: 7 passed, 2 failed, 2 skipped\n"
    );
}
