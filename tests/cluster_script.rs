//! `e2e/cluster`'s process handling (`e2e/cluster.d/lib.sh`), without a
//! cluster: every component is started, and judged alive at once (as
//! `cluster up` does while it waits for the API server), over and over on a
//! machine kept busy by CPU hogs. A cold start once died with "kube-apiserver
//! exited" while it ran: the pid was judged before the forked shell had
//! exec'd the binary. Stand-ins (copies of `sleep`, one per component name,
//! in a scratch directory) replace the binaries, and the state directory is a
//! scratch one too, so a running local cluster is left alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

use std::path::Path;
use std::process::Command;

/// Rounds of "start all seven components, judge each at once, stop them".
const ROUNDS: u32 = 12;

/// Sources lib.sh as `e2e/cluster` does, with scratch state and stand-in
/// binaries; `$1` the scratch directory, `$2` the rounds.
const SCRIPT: &str = r#"
set -euo pipefail
work=$1 rounds=$2
REPO=$(cd "$(dirname "$0")" && pwd)
HERE=$REPO/e2e D=$REPO/e2e/cluster.d CACHE=$work/cache STATE=$work/state
# shellcheck source=/dev/null
source "$D/lib.sh"
standins=$work/bin
mkdir -p "$standins"
for c in "${COMPONENTS[@]}"; do cp "$(command -v sleep)" "$standins/$c"; done
comp_bin() { echo "$standins/$1"; }
hogs=()
cleanup() {
  ((${#hogs[@]})) && kill "${hogs[@]}" 2>/dev/null
  stop_comps "${COMPONENTS[@]}"
}
trap cleanup EXIT
for ((i = 0; i < $(nproc) * 2; i++)); do
  (while :; do :; done) &
  hogs+=($!)
done
for ((r = 1; r <= rounds; r++)); do
  for c in "${COMPONENTS[@]}"; do
    start_comp "$c" infinity
    comp_alive "$c"
  done
  stop_comps "${COMPONENTS[@]}"
  for c in "${COMPONENTS[@]}"; do
    if comp_pid "$c" >/dev/null; then die "round $r: $c still runs after stop_comps"; fi
  done
done
echo "started and judged alive: $((rounds * ${#COMPONENTS[@]}))"
"#;

#[test]
fn components_started_under_load_are_never_judged_dead() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = std::env::temp_dir().join(format!("tusk-cluster-script-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("scratch directory");
    let output = Command::new("bash")
        .arg("-c")
        .arg(SCRIPT)
        // `$0`: where the repository is.
        .arg(repo.join("cluster-script"))
        .arg(&work)
        .arg(ROUNDS.to_string())
        .output()
        .expect("run bash");
    let _ = std::fs::remove_dir_all(&work);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "lib.sh misjudged a component it had just started ({}):\n{stderr}{stdout}",
        output.status
    );
    let expected = format!("started and judged alive: {}", ROUNDS * 7);
    assert!(
        stdout.contains(&expected),
        "the script did not go through every round: {stdout}{stderr}"
    );
}
