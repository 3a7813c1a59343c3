//! `kubectl tusk` as users run it: the tusk binary from the operator image
//! (the one static binary), installed under the plugin's name in a directory
//! of its own that goes first on `PATH`, and called through the real kubectl,
//! which finds it the way it finds any plugin.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tokio::sync::OnceCell;

/// What a command printed and how it ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn success(&self) -> bool {
        self.code == 0
    }

    /// The stdout of a command that must have succeeded, else an error with
    /// everything it printed.
    pub fn ok(self, what: &str) -> crate::Result<String> {
        if self.success() {
            Ok(self.stdout)
        } else {
            Err(format!(
                "`kubectl tusk {what}` exited {}:\n{}{}",
                self.code, self.stdout, self.stderr
            )
            .into())
        }
    }
}

/// The cache: `$TUSK_CACHE`, else ~/.cache/tusk (as the scripts use it).
fn cache_dir() -> PathBuf {
    std::env::var_os("TUSK_CACHE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/tusk")
        })
}

/// The kubectl the local cluster was built with (`$KUBECTL` overrides).
pub fn kubectl() -> PathBuf {
    if let Some(path) = std::env::var_os("KUBECTL").filter(|p| !p.is_empty()) {
        return path.into();
    }
    let go_mod = std::fs::read_to_string(crate::repo_path("e2e/tools/go.mod"))
        .expect("read e2e/tools/go.mod for the Kubernetes version");
    let version = go_mod
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("k8s.io/kubernetes")).then(|| words.next())?
        })
        .find(|v| v.starts_with("v1."))
        .expect("e2e/tools/go.mod requires k8s.io/kubernetes");
    cache_dir().join("k8s").join(version).join("bin/kubectl")
}

static PLUGIN_DIR: OnceCell<PathBuf> = OnceCell::const_new();

/// The directory holding `kubectl-tusk`: the image's `/usr/local/bin/tusk`,
/// extracted once per test process from the image tarball the suite loaded.
pub async fn plugin_dir() -> &'static Path {
    PLUGIN_DIR
        .get_or_init(|| async {
            tokio::task::spawn_blocking(extract)
                .await
                .expect("extracting kubectl-tusk panicked")
        })
        .await
}

fn extract() -> PathBuf {
    let image = cache_dir().join("images/tusk.tar");
    let dir = std::env::temp_dir().join(format!("tusk-e2e-plugin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the plugin directory");
    // A docker-archive: manifest.json lists the layers, each a plain tar.
    let manifest = Command::new("tar")
        .arg("-xOf")
        .arg(&image)
        .arg("manifest.json")
        .output()
        .expect("run tar");
    assert!(
        manifest.status.success(),
        "no manifest.json in {}: build the image first (e2e/images/build-all tusk)",
        image.display()
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&manifest.stdout).expect("manifest.json is JSON");
    let layers: Vec<String> = manifest[0]["Layers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str().map(str::to_owned))
        .collect();
    // The last layer holding the file wins, as in the image's filesystem.
    for layer in layers.iter().rev() {
        let status = Command::new("sh")
            .arg("-c")
            .arg(r#"tar -xOf "$1" "$2" | tar -xf - -C "$3" usr/local/bin/tusk 2>/dev/null"#)
            .arg("sh")
            .arg(&image)
            .arg(layer)
            .arg(&dir)
            .status()
            .expect("run tar");
        if status.success() {
            let binary = dir.join("kubectl-tusk");
            std::fs::rename(dir.join("usr/local/bin/tusk"), &binary)
                .expect("move the binary into place");
            return dir;
        }
    }
    panic!("no usr/local/bin/tusk in any layer of {}", image.display());
}

/// `PATH` with the plugin and kubectl first.
async fn path() -> String {
    let kubectl_dir = kubectl()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    format!(
        "{}:{}:{}",
        plugin_dir().await.display(),
        kubectl_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A `kubectl …` command with the plugin on `PATH` and no colour.
pub async fn kubectl_command(args: &[&str]) -> Command {
    let mut command = Command::new(kubectl());
    command
        .args(args)
        .env("PATH", path().await)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    command
}

/// Runs `kubectl tusk <args>` (the KUBECONFIG of the tests) to the end.
pub async fn tusk(args: &[&str]) -> Outcome {
    let mut all = vec!["tusk"];
    all.extend_from_slice(args);
    run(kubectl_command(&all).await).await
}

/// Runs `command` to the end, off the async threads.
pub async fn run(mut command: Command) -> Outcome {
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the command's thread panicked")
        .expect("run kubectl");
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
