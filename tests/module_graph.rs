//! The module dependency rules, checked on the source: the pure core and the
//! in-pod manager must not reach into the controllers, the webhooks or kube's
//! runtime, the contract is a leaf, and the graph of top-level modules has no
//! cycle. A `use` that breaks a rule fails here with the offending file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// Top-level modules and the ones each may never depend on.
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("contract", &["*"]),
    ("error", &["*"]),
    // Cron expressions: the API validates them, the lifecycle runs them.
    ("schedule", &["*"]),
    (
        "postgres",
        &[
            "api",
            "controller",
            "operator",
            "webhook",
            "instance",
            "lifecycle",
            "resources",
            "telemetry",
            "cli",
            "plugin",
        ],
    ),
    (
        "lifecycle",
        &[
            "backup",
            "controller",
            "operator",
            "webhook",
            "instance",
            "telemetry",
            "cli",
            "plugin",
        ],
    ),
    (
        "failover",
        &[
            "controller",
            "operator",
            "webhook",
            "instance",
            "telemetry",
            "cli",
            "plugin",
        ],
    ),
    (
        "resources",
        &[
            "controller",
            "operator",
            "webhook",
            "instance",
            "lifecycle",
            "telemetry",
            "cli",
            "plugin",
        ],
    ),
    (
        "api",
        &[
            "backup",
            "controller",
            "operator",
            "webhook",
            "instance",
            "lifecycle",
            "resources",
            "telemetry",
            "cli",
            "plugin",
        ],
    ),
    (
        "instance",
        &[
            "controller",
            "operator",
            "webhook",
            "lifecycle",
            "resources",
            "api",
            "cli",
            "plugin",
        ],
    ),
    (
        "telemetry",
        &[
            "controller",
            "operator",
            "webhook",
            "instance",
            "lifecycle",
            "cli",
            "plugin",
        ],
    ),
    (
        "objectstore",
        &[
            "api",
            "controller",
            "operator",
            "webhook",
            "instance",
            "lifecycle",
            "resources",
            "telemetry",
            "wal",
            "cli",
            "plugin",
        ],
    ),
    (
        "wal",
        &[
            "api",
            "controller",
            "operator",
            "webhook",
            "instance",
            "lifecycle",
            "resources",
            "telemetry",
            "cli",
            "plugin",
        ],
    ),
    // Backups are taken in the pod and planned by the operator: the pure
    // parts and the taking serve both, so they depend on neither.
    (
        "backup",
        &[
            "api",
            "controller",
            "operator",
            "webhook",
            "instance",
            "lifecycle",
            "resources",
            "telemetry",
            "cli",
            "plugin",
        ],
    ),
    // The in-pod upgrade steps: the manager reads their state file, so
    // they know nothing of it (nor of the operator's side).
    (
        "upgrade",
        &[
            "controller",
            "operator",
            "webhook",
            "instance",
            "lifecycle",
            "resources",
            "api",
            "cli",
            "plugin",
        ],
    ),
    // The drill probe runs in its own pod: a client of PostgreSQL, nothing
    // of the operator's.
    (
        "probe",
        &[
            "api",
            "backup",
            "controller",
            "operator",
            "webhook",
            "instance",
            "lifecycle",
            "resources",
            "telemetry",
            "cli",
            "plugin",
        ],
    ),
    // The TLS core serves the operator, the manager and the webhooks alike.
    (
        "tls",
        &[
            "api",
            "backup",
            "controller",
            "operator",
            "webhook",
            "instance",
            "lifecycle",
            "resources",
            "telemetry",
            "cli",
            "plugin",
        ],
    ),
    (
        "webhook",
        &["controller", "operator", "instance", "cli", "plugin"],
    ),
    (
        "controller",
        &["operator", "webhook", "instance", "cli", "plugin"],
    ),
    // `kubectl tusk`: a user's client; it plans with the operator's pure
    // planner but never runs the operator's, the webhook's or a manager's code.
    ("plugin", &["operator", "webhook", "instance", "cli"]),
];

/// Modules that must not use kube's runtime (controllers, finalizers, watchers).
const NO_KUBE_RUNTIME: &[&str] = &[
    "contract",
    "objectstore",
    "wal",
    "backup",
    "error",
    "postgres",
    "lifecycle",
    "failover",
    "resources",
    "api",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    // An unreadable folder must fail the checks, not give them nothing to check.
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`src/lifecycle/plan.rs` → `lifecycle`).
fn module_of(path: &Path) -> Option<String> {
    let relative = path.strip_prefix(SRC).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_owned())
}

/// The code of a file without its `#[cfg(test)]` modules' bodies and comments:
/// tests may use whatever they need.
fn non_test_code(text: &str) -> String {
    let mut code = String::new();
    let mut skipping = false;
    let mut depth = 0i32;
    let mut pending_cfg_test = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if skipping {
            depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if depth <= 0 {
                skipping = false;
            }
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            pending_cfg_test = true;
            continue;
        }
        if pending_cfg_test {
            pending_cfg_test = false;
            if trimmed.starts_with("mod ") && trimmed.ends_with('{') {
                skipping = true;
                depth = 1;
                continue;
            }
            // `#[cfg(test)] mod x;` or a test-only item on one line.
            continue;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// Top-level module → the modules it names.
type Graph = BTreeMap<String, BTreeSet<String>>;
/// (module, what it names, where).
type Use = (String, String, PathBuf);

/// Top-level module → the top-level modules its non-test code names as `crate::<m>`.
fn graph() -> (Graph, Vec<Use>) {
    let mut files = Vec::new();
    rust_files(Path::new(SRC), &mut files);
    let mut graph = Graph::new();
    let mut uses = Vec::new();
    for path in files {
        let Some(module) = module_of(&path) else {
            continue;
        };
        if matches!(module.as_str(), "bin" | "main" | "lib") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read a source file");
        let code = non_test_code(&text);
        let deps = graph.entry(module.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                deps.insert(name.clone());
                uses.push((module.clone(), name, path.clone()));
            }
        }
        if code.contains("kube::runtime") {
            uses.push((module.clone(), "kube::runtime".to_owned(), path.clone()));
        }
    }
    (graph, uses)
}

#[test]
fn dependencies_point_one_way() {
    let (graph, uses) = graph();
    let mut broken = Vec::new();
    for (module, target, path) in &uses {
        if target == "kube::runtime" {
            if NO_KUBE_RUNTIME.contains(&module.as_str()) {
                broken.push(format!("{module} uses kube::runtime in {}", path.display()));
            }
            continue;
        }
        let Some((_, forbidden)) = FORBIDDEN.iter().find(|(m, _)| m == module) else {
            continue;
        };
        if forbidden.contains(&"*") || forbidden.contains(&target.as_str()) {
            broken.push(format!(
                "{module} depends on {target} in {}",
                path.display()
            ));
        }
    }
    assert!(
        broken.is_empty(),
        "module dependency rules broken:\n  {}\ngraph: {graph:#?}",
        broken.join("\n  ")
    );
}

#[test]
fn the_module_graph_has_no_cycle() {
    let (graph, _) = graph();
    // Depth-first search; a node met again while on the stack closes a cycle.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, &graph, &mut Vec::new(), &mut done) {
            panic!("module cycle: {}\ngraph: {graph:#?}", cycle.join(" → "));
        }
    }
}

#[test]
fn the_checker_sees_a_forbidden_use() {
    // The check itself can fail: a non-test `crate::controller` in lifecycle
    // code is seen, one inside a test module is not.
    let code = non_test_code(
        "use crate::controller::Context;\n#[cfg(test)]\nmod tests {\n    use crate::operator::x;\n}\n",
    );
    assert!(code.contains("crate::controller"));
    assert!(!code.contains("crate::operator"));
}

/// Files (under `src/`) that must stay pure: no async runtime, file system,
/// processes, HTTP, object store SDK, Kubernetes client or runtime, clock or
/// randomness. A folder ending in `/` covers every file in it. Decisions and
/// builders live here, so that unit and property tests see all of them.
const PURE: &[&str] = &[
    "lifecycle/",
    "resources/",
    "postgres/",
    "contract/",
    "failover/candidate.rs",
    "failover/quorum.rs",
    "schedule.rs",
    "backup/retention.rs",
    "backup/select.rs",
    "backup/manifest.rs",
    "backup/progress.rs",
    "objectstore/layout.rs",
    "controller/backup/decide.rs",
    "controller/backup/status.rs",
    "controller/verification/decide.rs",
    "controller/store_credentials/decide.rs",
    "controller/database/plan.rs",
    "controller/database/status.rs",
    "controller/database/observe/reduce.rs",
    "controller/database/observe/views.rs",
    "controller/database/observe/exposure.rs",
    "controller/database/migration_jobs.rs",
    "controller/database/client_pool.rs",
    "controller/database/urgency.rs",
    "api/validate.rs",
    "api/validate_drill.rs",
    "api/conversion.rs",
    "api/expose.rs",
    "api/expose/",
    "tls/ca_key.rs",
    "tls/error.rs",
    "tls/inspect.rs",
    "tls/names.rs",
    "tls/pem.rs",
    "tls/renewal.rs",
    "tls/rustls_config.rs",
    "tls/user_secret.rs",
];

/// What a pure file may not name, and why it matters.
const IMPURE: &[(&str, &str)] = &[
    ("tokio::", "an async runtime"),
    ("std::fs", "the file system"),
    ("std::process", "processes"),
    ("hyper", "HTTP"),
    ("aws_sdk_s3", "the object store SDK"),
    ("kube::Client", "a Kubernetes client"),
    ("kube::Api", "a Kubernetes client"),
    ("kube::api::Api", "a Kubernetes client"),
    ("kube::runtime", "kube's runtime"),
    ("Client::", "a Kubernetes client"),
    ("SystemTime", "the clock"),
    ("Instant::now", "the clock"),
    ("Timestamp::now", "the clock"),
    ("Utc::now", "the clock"),
    ("rand::", "randomness"),
    ("async fn", "async I/O"),
];

fn relative(path: &Path) -> String {
    path.strip_prefix(SRC)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Files that are a `#[cfg(test)] mod x;` of their parent: tests may use
/// whatever they need.
fn test_files(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut tests = BTreeSet::new();
    for path in files {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        // A `mod x;` in `a/b.rs` is `a/b/x.rs`; in `a/mod.rs` it is `a/x.rs`.
        let dir = match path.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs" | "lib.rs" | "main.rs") => path.parent().map(Path::to_path_buf),
            _ => Some(path.with_extension("")),
        };
        let Some(dir) = dir else {
            continue;
        };
        let mut cfg_test = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[cfg(test)]") {
                cfg_test = true;
                continue;
            }
            if cfg_test
                && let Some(name) = line
                    .trim_start_matches("pub(crate) ")
                    .strip_prefix("mod ")
                    .and_then(|r| r.strip_suffix(';'))
            {
                tests.insert(dir.join(format!("{name}.rs")));
                tests.insert(dir.join(name).join("mod.rs"));
            }
            cfg_test = false;
        }
    }
    tests
}

fn pure_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(Path::new(SRC), &mut files);
    files.sort();
    let tests = test_files(&files);
    files
        .into_iter()
        .filter(|f| !tests.contains(f))
        .filter(|f| {
            let name = relative(f);
            PURE.iter().any(|p| {
                if p.ends_with('/') {
                    name.starts_with(p)
                } else {
                    name == *p
                }
            })
        })
        .collect()
}

/// The forbidden names in `code`, with why.
fn impurities(code: &str) -> Vec<String> {
    IMPURE
        .iter()
        .filter(|(needle, _)| code.contains(needle))
        .map(|(needle, why)| format!("{needle} ({why})"))
        .collect()
}

#[test]
fn pure_files_stay_pure() {
    // Every entry names something that exists: the list cannot rot.
    for entry in PURE {
        assert!(
            Path::new(SRC).join(entry).exists(),
            "PURE names {entry}, which does not exist"
        );
    }
    let mut broken = Vec::new();
    for path in pure_files() {
        let text = std::fs::read_to_string(&path).expect("read a source file");
        let found = impurities(&non_test_code(&text));
        if !found.is_empty() {
            broken.push(format!("{}: {}", relative(&path), found.join(", ")));
        }
    }
    assert!(
        broken.is_empty(),
        "pure files that are not:\n  {}",
        broken.join("\n  ")
    );
}

/// The module path of a file (`lifecycle/plan.rs` → `lifecycle::plan`,
/// `lifecycle/backups/mod.rs` → `lifecycle::backups`).
fn module_path(path: &Path) -> Vec<String> {
    let name = relative(path);
    let mut parts: Vec<String> = name
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The first name of each item of a `{a, b::c, d as e}` group (one level).
fn group_names(rest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0;
    let mut item = String::new();
    for c in rest.chars().skip(1) {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                names.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        if depth == 0 {
            item.push(c);
        }
    }
    names.push(item);
    names
        .iter()
        .map(|i| {
            i.trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .filter(|n: &String| !n.is_empty())
        .collect()
}

/// File → the sibling files (same folder, same parent module) its non-test
/// code names, through `super::x`, `crate::<parent>::x` or a group of them.
fn sibling_graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    rust_files(Path::new(SRC), &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(f)).collect();
    let mut graph = BTreeMap::new();
    for path in &files {
        let me = module_path(path);
        if path
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs" || n == "main.rs")
        {
            continue;
        }
        let Some((_, parent)) = me.split_last() else {
            continue;
        };
        let text = std::fs::read_to_string(path).expect("read a source file");
        let code = non_test_code(&text);
        let mut prefixes = vec!["super::".to_owned()];
        if !parent.is_empty() {
            prefixes.push(format!("crate::{}::", parent.join("::")));
        }
        let mut named = BTreeSet::new();
        for prefix in &prefixes {
            for (i, _) in code.match_indices(prefix.as_str()) {
                // `super::super::x` is not a sibling.
                let rest = &code[i + prefix.len()..];
                if rest.starts_with("super::") {
                    continue;
                }
                if rest.starts_with('{') {
                    named.extend(group_names(rest));
                } else {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    named.insert(name);
                }
            }
        }
        let siblings: BTreeSet<Vec<String>> = named
            .into_iter()
            .map(|n| {
                let mut sibling = parent.to_vec();
                sibling.push(n);
                sibling
            })
            .filter(|s| *s != me && modules.contains(s))
            .collect();
        graph.insert(me, siblings);
    }
    graph
}

#[test]
fn no_circle_between_the_files_of_one_folder() {
    let graph = sibling_graph();
    let mut circles = BTreeSet::new();
    for (file, named) in &graph {
        // A circle of any length passes through a pair reachable both ways.
        for other in named {
            let mut seen = BTreeSet::new();
            let mut todo = vec![other.clone()];
            while let Some(next) = todo.pop() {
                if &next == file {
                    let mut pair = [file.join("::"), other.join("::")];
                    pair.sort();
                    circles.insert(pair.join(" ↔ "));
                    break;
                }
                if seen.insert(next.clone()) {
                    todo.extend(graph.get(&next).into_iter().flatten().cloned());
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "files of one folder that depend on each other (move the shared part into its own file):\n  {}",
        circles.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}

#[test]
fn the_checkers_see_an_impure_use_and_a_sibling_group() {
    assert_eq!(
        impurities("fn f() { let _ = std::fs::read(\"x\"); }"),
        ["std::fs (the file system)"]
    );
    assert!(impurities("#[cfg(test)]\nmod tests { }\nfn f() {}").is_empty());
    assert_eq!(
        group_names("{backups, roles::desired_sync, verdict::{self, Desired}}"),
        ["backups", "roles", "verdict"]
    );
}
