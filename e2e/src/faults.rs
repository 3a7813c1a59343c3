//! Faults injected on the node itself, for the failover suite: killing a
//! container's processes, cutting a pod's network, stopping the API server.
//!
//! Most of them act on the host, not through the Kubernetes API: a container's
//! PID 1 ignores SIGKILL sent from inside its own pid namespace (the kernel
//! drops signals a namespace's init has no handler for), so the instance
//! manager can only be killed from outside; and a pod's network is cut from
//! inside its network namespace, which only the node can enter. So these need
//! the project's local cluster (`e2e/cluster up`), whose containerd and
//! kube-apiserver run on this machine: [`local_node`] finds it, and fails the
//! test saying why when `$KUBECONFIG` points elsewhere, unless
//! `TUSK_E2E_ALLOW_SKIP=node-faults` lets the test skip ([`crate::skip`]).
//!
//! What goes through the API (`kubectl exec`-style) is here too: killing the
//! postmaster, and writing through a pod's unix socket, which keeps working
//! while the pod's network is cut.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tusk::resources::{PGDATA, POSTGRES_CONTAINER};

use crate::{OPERATOR_NAMESPACE, Result, repo_path, skip};

/// The local cluster's state directory, as `e2e/cluster` computes it.
fn cluster_state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TUSK_CLUSTER_DIR").filter(|d| !d.is_empty()) {
        return dir.into();
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    Path::new(&home).join(".local/state/tusk/cluster")
}

/// Runs a host program to completion; its stdout, or an error carrying its
/// stderr. Blocking: call it through [`host_async`] from async code.
fn host(program: &str, args: &[&str]) -> Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// [`host`] off the async runtime.
async fn host_async(program: &str, args: &[&str]) -> Result<String> {
    let program = program.to_owned();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        host(&program, &args)
    })
    .await?
}

/// The node of the local cluster, seen from the host it runs on.
#[derive(Clone, Debug)]
pub struct LocalNode {
    /// containerd's socket (the kubelet's runtime).
    socket: PathBuf,
}

/// The group of tests that act on the node; `TUSK_E2E_ALLOW_SKIP=node-faults`
/// lets them skip where the node is not this machine.
pub const NODE_FAULTS: &str = "node-faults";

/// The local node for `test`. Call it with the operator installed (its pods
/// are the proof, see [`LocalNode::detect`]) and inside the test's namespace,
/// which holds the cluster lock: the install it looks at is the one the test
/// runs against. `Ok(None)`: the node is not this machine and skipping is
/// allowed (the skip is printed and counted); the caller returns. An error
/// otherwise, saying why the test cannot run.
pub async fn local_node(client: &Client, test: &str) -> Result<Option<LocalNode>> {
    match LocalNode::detect(client).await {
        Ok(node) => Ok(Some(node)),
        Err(why) => {
            let why = format!("it needs the node of the local cluster (`e2e/cluster up`): {why}");
            skip::cannot_run(NODE_FAULTS, test, &why)?;
            Ok(None)
        }
    }
}

/// How long [`LocalNode::detect`] waits for an operator container to show: one
/// is being replaced (a test kills the operator), not missing.
const OPERATOR_CONTAINER_WAIT: Duration = Duration::from_secs(120);

impl LocalNode {
    /// The local node when `client`'s cluster is the one `e2e/cluster up`
    /// runs on this machine; otherwise why not. The proof is that a container
    /// of the operator's pods is a task of the local containerd: a socket that
    /// merely exists could belong to a cluster that is down while
    /// `$KUBECONFIG` points elsewhere. So the operator must be installed.
    pub async fn detect(client: &Client) -> Result<LocalNode, String> {
        let socket = cluster_state_dir().join("containerd/containerd.sock");
        if !socket.exists() {
            return Err(format!(
                "no local cluster on this machine ({} is missing; `e2e/cluster up` makes it)",
                socket.display()
            ));
        }
        let node = LocalNode { socket };
        let id = operator_container(client).await?;
        let tasks = node
            .tasks()
            .await
            .map_err(|e| format!("cannot ask the local containerd: {e}"))?;
        if !tasks
            .iter()
            .any(|(task, _)| Some(task.as_str()) == bare_id(&id))
        {
            return Err(format!(
                "$KUBECONFIG points at another cluster: the operator's container {id} is not \
                 one of the local containerd's ({})",
                node.socket.display()
            ));
        }
        Ok(node)
    }

    fn ctr_args<'a>(&'a self, args: &[&'a str]) -> Result<Vec<&'a str>> {
        let socket = self
            .socket
            .to_str()
            .ok_or("the containerd socket's path is not UTF-8")?;
        let mut all = vec!["--address", socket, "--namespace", "k8s.io"];
        all.extend_from_slice(args);
        Ok(all)
    }

    /// Every running task of the kubelet's containerd: (container id, host pid
    /// of its init process).
    async fn tasks(&self) -> Result<Vec<(String, u32)>> {
        let listing = host_async("ctr", &self.ctr_args(&["task", "ls"])?).await?;
        // TASK  PID  STATUS, one line per container.
        Ok(listing
            .lines()
            .skip(1)
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                let id = words.next()?.to_owned();
                let pid = words.next()?.parse().ok()?;
                Some((id, pid))
            })
            .collect())
    }

    /// The host pid of the init process (PID 1 inside) of a container, by the
    /// id the pod's status gives (`containerd://<id>`).
    pub async fn host_pid(&self, container_id: &str) -> Result<u32> {
        let id =
            bare_id(container_id).ok_or_else(|| format!("not a containerd id: {container_id}"))?;
        self.tasks()
            .await?
            .into_iter()
            .find_map(|(task, pid)| (task == id).then_some(pid))
            .filter(|pid| *pid > 0)
            .ok_or_else(|| format!("container {id} has no running task").into())
    }

    /// The network namespace a container runs in, as a path `nsenter --net`
    /// takes. It is the pod sandbox's (the pause process's), which outlives
    /// restarts of the container itself: a network cut stays in place, and can
    /// be lifted, when the kubelet restarts the container meanwhile.
    pub async fn network_namespace(&self, container_id: &str) -> Result<PathBuf> {
        let id =
            bare_id(container_id).ok_or_else(|| format!("not a containerd id: {container_id}"))?;
        let info: Value = serde_json::from_str(
            &host_async("ctr", &self.ctr_args(&["container", "info", id])?).await?,
        )?;
        let path = info["Spec"]["linux"]["namespaces"]
            .as_array()
            .and_then(|all| {
                all.iter()
                    .find(|ns| ns["type"] == "network")
                    .and_then(|ns| ns["path"].as_str())
            })
            .map(PathBuf::from);
        match path {
            Some(path) => Ok(path),
            // A container with a network namespace of its own (not the case
            // for a pod's containers, but harmless to handle).
            None => Ok(PathBuf::from(format!(
                "/proc/{}/ns/net",
                self.host_pid(container_id).await?
            ))),
        }
    }

    /// SIGKILL to `pid` from the host, where a container's PID 1 cannot
    /// ignore it.
    pub async fn kill(&self, pid: u32) -> Result<()> {
        host_async("kill", &["-s", "KILL", &pid.to_string()]).await?;
        Ok(())
    }

    /// SIGSTOP to `pid` from the host: the process is frozen, does nothing
    /// more (not even on SIGTERM) and dies only by SIGKILL, as the kubelet
    /// sends when its pod goes.
    pub async fn freeze(&self, pid: u32) -> Result<()> {
        host_async("kill", &["-s", "STOP", &pid.to_string()]).await?;
        Ok(())
    }

    /// Drops every packet into and out of the network namespace `netns`
    /// except on loopback: the pod can reach neither its peers, nor the API
    /// server, nor its clients, and nobody reaches it; the processes inside
    /// keep running, and `kubectl exec` still works (it does not use the pod's
    /// network). Lifted by [`NetworkCut::restore`], or when dropped.
    pub async fn cut_network(&self, netns: &Path) -> Result<NetworkCut> {
        let cut = NetworkCut {
            netns: netns.to_owned(),
            restored: false,
        };
        for rule in RULES {
            cut.iptables("-I", rule).await?;
        }
        Ok(cut)
    }

    /// `e2e/cluster freeze-apiserver <seconds>`: the API server stopped
    /// (SIGSTOP) for that long, then continued. Returns the Unix times it
    /// was stopped and continued at, as the script reports them.
    pub async fn freeze_api_server(&self, seconds: u32) -> Result<(f64, f64)> {
        let script = repo_path("e2e/cluster");
        let script = script
            .to_str()
            .ok_or("the repository's path is not UTF-8")?
            .to_owned();
        let out = host_async(&script, &["freeze-apiserver", &seconds.to_string()]).await?;
        let at = |word: &str| -> Result<f64> {
            out.lines()
                .find_map(|l| l.strip_prefix(word)?.trim().parse().ok())
                .ok_or_else(|| {
                    format!("e2e/cluster freeze-apiserver printed no `{word}`: {out}").into()
                })
        };
        Ok((at("stopped")?, at("continued")?))
    }
}

/// The two rules of a cut: everything in and out, loopback excepted.
const RULES: [&[&str]; 2] = [
    &["INPUT", "!", "-i", "lo", "-j", "DROP"],
    &["OUTPUT", "!", "-o", "lo", "-j", "DROP"],
];

/// A pod's network, cut (see [`LocalNode::cut_network`]).
#[must_use = "the cut is lifted when this is dropped"]
pub struct NetworkCut {
    netns: PathBuf,
    restored: bool,
}

impl NetworkCut {
    fn args<'a>(&'a self, op: &'a str, rule: &[&'a str]) -> Result<Vec<String>> {
        let netns = self
            .netns
            .to_str()
            .ok_or("the network namespace's path is not UTF-8")?;
        let mut args = vec![
            format!("--net={netns}"),
            "iptables".into(),
            "-w".into(),
            op.into(),
        ];
        args.extend(rule.iter().map(|w| (*w).to_owned()));
        Ok(args)
    }

    async fn iptables(&self, op: &str, rule: &[&str]) -> Result<()> {
        let args = self.args(op, rule)?;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        host_async("nsenter", &args).await?;
        Ok(())
    }

    /// Lifts the cut.
    pub async fn restore(mut self) -> Result<()> {
        for rule in RULES {
            self.iptables("-D", rule).await?;
        }
        self.restored = true;
        Ok(())
    }
}

impl Drop for NetworkCut {
    /// A test that failed half way must not leave a pod cut off: its
    /// namespace is dumped (logs through the API work regardless) and
    /// deleted, but the pod would take its full grace period to go.
    fn drop(&mut self) {
        if self.restored {
            return;
        }
        for rule in RULES {
            if let Ok(args) = self.args("-D", rule) {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                if let Err(e) = host("nsenter", &args) {
                    eprintln!("[e2e] could not lift the network cut: {e}");
                }
            }
        }
    }
}

/// The id (`containerd://…`) of a running container of the operator's pods,
/// waiting while there is none: a pod being replaced has none for a moment.
async fn operator_container(client: &Client) -> Result<String, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let deadline = tokio::time::Instant::now() + OPERATOR_CONTAINER_WAIT;
    loop {
        let listed = pods
            .list(&Default::default())
            .await
            .map_err(|e| format!("cannot list the operator's pods: {e}"))?;
        let running = listed.items.iter().find_map(|p| {
            p.status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .find(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))?
                .container_id
                .clone()
        });
        if let Some(id) = running {
            return Ok(id);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "no running container in {OPERATOR_NAMESPACE} within {OPERATOR_CONTAINER_WAIT:?} \
                 to tell which cluster this is (is the operator installed?)"
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `containerd://<id>` → `<id>`.
fn bare_id(container_id: &str) -> Option<&str> {
    container_id
        .strip_prefix("containerd://")
        .filter(|id| !id.is_empty())
}

/// What a command run in a container did.
#[derive(Debug)]
pub struct Exec {
    /// It exited 0.
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `command` in `container` of pod `pod` (as `kubectl exec` does:
/// through the API server and the kubelet, not the pod's network), bounded
/// by 30 s.
pub async fn exec(
    client: &Client,
    ns: &str,
    pod: &str,
    container: &str,
    command: &[&str],
) -> Result<Exec> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let run = async {
        let params = AttachParams::default()
            .container(container)
            .stdout(true)
            .stderr(true);
        let mut attached = pods.exec(pod, command.to_vec(), &params).await?;
        let mut stdout = attached.stdout().ok_or("exec without stdout")?;
        let mut stderr = attached.stderr().ok_or("exec without stderr")?;
        let status = attached.take_status().ok_or("exec without a status")?;
        let (mut out, mut err) = (String::new(), String::new());
        let (read_out, read_err) = tokio::join!(
            stdout.read_to_string(&mut out),
            stderr.read_to_string(&mut err)
        );
        read_out?;
        read_err?;
        let status = status.await;
        attached.join().await?;
        let success = status
            .as_ref()
            .is_some_and(|s| s.status.as_deref() == Some("Success"));
        Ok::<_, crate::Error>(Exec {
            success,
            stdout: out,
            stderr: err,
        })
    };
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .map_err(|_| format!("exec in {ns}/{pod} did not finish within 30 s"))?
}

/// Runs `statements` (one `-c` each) with psql in an instance's container over
/// its unix socket, as the superuser (peer authentication): the way in that
/// needs neither the pod's network nor a password.
pub async fn psql_local(client: &Client, ns: &str, pod: &str, statements: &[&str]) -> Result<Exec> {
    let mut command = vec![
        "psql",
        "-h",
        "/var/run/postgresql",
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-v",
        "ON_ERROR_STOP=1",
        "-qAt",
    ];
    for statement in statements {
        command.extend(["-c", statement]);
    }
    exec(client, ns, pod, POSTGRES_CONTAINER, &command).await
}

/// The postmaster's pid inside an instance's container (the first line of
/// `postmaster.pid`), `None` when PostgreSQL does not run.
pub async fn postmaster_pid(client: &Client, ns: &str, pod: &str) -> Result<Option<u32>> {
    let file = format!("{PGDATA}/postmaster.pid");
    let out = exec(
        client,
        ns,
        pod,
        POSTGRES_CONTAINER,
        &["sh", "-c", &format!("head -n 1 {file} 2>/dev/null || true")],
    )
    .await?;
    Ok(out.stdout.trim().parse().ok())
}

/// SIGKILL to an instance's postmaster, from inside its container (it is not
/// the container's PID 1, so the signal is delivered). Returns its pid.
pub async fn kill_postmaster(client: &Client, ns: &str, pod: &str) -> Result<u32> {
    let pid = postmaster_pid(client, ns, pod)
        .await?
        .ok_or_else(|| format!("{pod}: PostgreSQL does not run"))?;
    let out = exec(
        client,
        ns,
        pod,
        POSTGRES_CONTAINER,
        &["sh", "-c", &format!("kill -9 {pid}")],
    )
    .await?;
    if !out.success {
        return Err(format!("{pod}: kill -9 {pid} failed: {}", out.stderr.trim()).into());
    }
    Ok(pid)
}

/// The id (`containerd://…`) and restart count of an instance pod's main
/// container.
pub async fn main_container(client: &Client, ns: &str, pod: &str) -> Result<(String, i32)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let found = pods.get(pod).await?;
    found
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|all| all.iter().find(|c| c.name == POSTGRES_CONTAINER))
        .and_then(|c| Some((c.container_id.clone()?, c.restart_count)))
        .ok_or_else(|| {
            format!(
                "{}: no running {POSTGRES_CONTAINER} container",
                found.name_any()
            )
            .into()
        })
}
