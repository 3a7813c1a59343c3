//! Clients outside Kubernetes, for tests of what the cluster publishes
//! (Services of type LoadBalancer, NodePorts): no kubeconfig, no cluster DNS,
//! their own source addresses.
//!
//! The local cluster (`e2e/cluster`) has an "outside" network on its bridge
//! `tusk0`: this host is [`HOST_ADDRESS`] on it, MetalLB hands out [`POOL`] to
//! LoadBalancer Services and answers ARP for them there, and a [`NetNs`] is a
//! client with an address of its own from [`CLIENTS`], a network namespace
//! whose veth is plugged into the bridge. So a test has two kinds of outside
//! client: its own process (source [`HOST_ADDRESS`] when it dials the outside
//! network) and any number of namespaces, each with its own address, which is
//! what `loadBalancerSourceRanges` tell apart.
//!
//! The network is TEST-NET-2 (198.51.100.0/24), not TEST-NET-1: on the
//! project's machine 192.0.2.0/24 is the uplink. `e2e/cluster.d/lib.sh`
//! carries the same numbers.
//!
//! Creating a namespace needs root (the e2e runs are root); it is removed when
//! the [`NetNs`] is dropped, also when the test panics or times out, and
//! `e2e/cluster down` removes any a killed test process left behind (they are
//! named `tusk-e2e-out-<pid>-<n>`).

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nix::sched::{CloneFlags, setns};

/// This host's address on the outside network (on the bridge `tusk0`).
pub const HOST_ADDRESS: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// MetalLB's address pool: LoadBalancer Services get their address from here.
pub const POOL: &str = "198.51.100.64/26";
/// Where [`NetNs`] addresses come from (198.51.100.128-254).
pub const CLIENTS: &str = "198.51.100.128/25";
/// The prefix length of the outside network.
const PREFIX_LEN: u8 = 24;
/// What every namespace this module creates is called, then `<pid>-<n>`.
pub const NETNS_PREFIX: &str = "tusk-e2e-out-";
/// The bridge the namespaces are plugged into.
const BRIDGE: &str = "tusk0";

/// What creating, using or removing an outside client can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{address} is not a client address: take one from {CLIENTS} (198.51.100.128-254)")]
    NotAClientAddress { address: Ipv4Addr },
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("cannot enter network namespace {name}: {source}")]
    Enter { name: String, source: nix::Error },
    #[error("cannot open network namespace {name}: {source}")]
    Open {
        name: String,
        source: std::io::Error,
    },
    #[error("connect from {from} to {to} (timeout {timeout:?}): {source}")]
    Connect {
        from: Ipv4Addr,
        to: SocketAddr,
        timeout: Duration,
        source: std::io::Error,
    },
    #[error("the connecting thread of {name} died: {reason}")]
    Thread { name: String, reason: String },
}

/// A client outside Kubernetes with an address of its own: a network
/// namespace with a veth pair into the bridge, `address/24` on its end, and a
/// default route via [`HOST_ADDRESS`] (so it reaches node IPs too; the pool is
/// on its own link and reached through MetalLB's ARP answers).
#[derive(Debug)]
pub struct NetNs {
    name: String,
    address: Ipv4Addr,
}

/// Numbers this process's namespaces and host-side veths.
static NEXT: AtomicU32 = AtomicU32::new(0);

impl NetNs {
    /// Creates the namespace; `address` from [`CLIENTS`], unique among the
    /// namespaces alive at the same time (see [`client_address`]).
    pub fn create(address: Ipv4Addr) -> Result<NetNs, Error> {
        if !is_client_address(address) {
            return Err(Error::NotAClientAddress { address });
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let name = format!("{NETNS_PREFIX}{pid}-{n}");
        // At most 15 characters (IFNAMSIZ); pid and counter keep it unique on
        // the host. The namespace's end is plain `eth0`.
        let veth = format!("tko{pid:x}n{n:x}");
        ip(&["netns", "add", &name])?;
        // From here on Drop removes the namespace, and with it both veth ends.
        let netns = NetNs { name, address };
        let name = netns.name.as_str();
        let cidr = format!("{address}/{PREFIX_LEN}");
        let gateway = HOST_ADDRESS.to_string();
        ip(&[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", name,
        ])?;
        ip(&["link", "set", &veth, "master", BRIDGE, "up"])?;
        ip(&["-n", name, "addr", "add", &cidr, "dev", "eth0"])?;
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        ip(&["-n", name, "link", "set", "eth0", "up"])?;
        ip(&["-n", name, "route", "add", "default", "via", &gateway])?;
        Ok(netns)
    }

    /// The namespace's source address.
    pub fn address(&self) -> Ipv4Addr {
        self.address
    }

    /// The namespace's name (`ip netns exec <name> ...` runs a command in it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Opens a TCP connection to `addr` from inside the namespace, failing
    /// after `timeout`. The socket is made by a thread of its own that enters
    /// the namespace (a thread of tokio's blocking pool would stay in it and
    /// serve other tasks from there); the stream it returns keeps the
    /// namespace it was created in.
    pub async fn connect(
        &self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<tokio::net::TcpStream, Error> {
        let name = self.name.clone();
        let from = self.address;
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("connect-{name}"))
            .spawn(move || {
                let _ = sender.send(connect_in(&name, from, addr, timeout));
            });
        if let Err(source) = spawned {
            return Err(Error::Thread {
                name: self.name.clone(),
                reason: source.to_string(),
            });
        }
        let stream = receiver.await.map_err(|_| Error::Thread {
            name: self.name.clone(),
            reason: "it ended without an answer".into(),
        })??;
        tokio::net::TcpStream::from_std(stream).map_err(|source| Error::Connect {
            from,
            to: addr,
            timeout,
            source,
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the namespace destroys its veth end, which takes the peer
        // on the bridge with it.
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("[e2e] cannot remove network namespace {}: {e}", self.name);
        }
    }
}

/// Runs on a thread of its own, which it moves into the namespace.
fn connect_in(
    name: &str,
    from: Ipv4Addr,
    to: SocketAddr,
    timeout: Duration,
) -> Result<std::net::TcpStream, Error> {
    let path = format!("/run/netns/{name}");
    let file = std::fs::File::open(&path).map_err(|source| Error::Open {
        name: name.to_owned(),
        source,
    })?;
    setns(file.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|source| Error::Enter {
        name: name.to_owned(),
        source,
    })?;
    let connect_error = |source| Error::Connect {
        from,
        to,
        timeout,
        source,
    };
    let stream = std::net::TcpStream::connect_timeout(&to, timeout).map_err(connect_error)?;
    stream.set_nonblocking(true).map_err(connect_error)?;
    Ok(stream)
}

fn ip(args: &[&str]) -> Result<(), Error> {
    let command = format!("ip {}", args.join(" "));
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|source| Error::Spawn {
            command: command.clone(),
            source,
        })?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::Command {
        command,
        status: output.status,
        stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
    })
}

fn is_client_address(address: Ipv4Addr) -> bool {
    let [a, b, c, d] = address.octets();
    let [na, nb, nc, _] = HOST_ADDRESS.octets();
    (a, b, c) == (na, nb, nc) && (128..=254).contains(&d)
}

/// The group of tests that need the outside network; `TUSK_E2E_ALLOW_SKIP=outside-network`
/// lets them skip where it is missing (another cluster than the local one).
pub const OUTSIDE_NETWORK: &str = "outside-network";

/// Checks that this host is on the outside network ([`HOST_ADDRESS`] on the
/// bridge, which `e2e/cluster up` sets up with MetalLB). `Ok(false)`: it is
/// not and skipping is allowed (the skip is printed); the caller returns. An
/// error otherwise, saying why `test` cannot run.
pub fn available(test: &str) -> crate::Result<bool> {
    let output = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "dev", BRIDGE])
        .output()?;
    let mine = format!(" {HOST_ADDRESS}/{PREFIX_LEN} ");
    if output.status.success() && String::from_utf8_lossy(&output.stdout).contains(&mine) {
        return Ok(true);
    }
    let why = format!(
        "this host has no {HOST_ADDRESS}/{PREFIX_LEN} on {BRIDGE}: the outside network and \
         MetalLB come with the local cluster (`e2e/cluster up`, or `e2e/cluster lb-up` on a \
         running one)"
    );
    crate::skip::cannot_run(OUTSIDE_NETWORK, test, &why)?;
    Ok(false)
}

/// A client address from [`CLIENTS`] for a [`NetNs`]: a different one on each
/// call (127 of them, then it wraps), starting at an offset of this process's
/// id, so tests in parallel, and most test processes beside each other, do
/// not collide.
pub fn client_address() -> Ipv4Addr {
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let offset = std::process::id().wrapping_mul(37).wrapping_add(call) % 127;
    let [a, b, c, _] = HOST_ADDRESS.octets();
    // offset < 127, so the last octet is 128..=254
    Ipv4Addr::new(a, b, c, 128 + offset as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_addresses_stay_in_the_client_range_and_differ() {
        let addresses: Vec<Ipv4Addr> = (0..127).map(|_| client_address()).collect();
        assert!(
            addresses.iter().all(|a| is_client_address(*a)),
            "{addresses:?}"
        );
        let mut unique = addresses.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 127, "{addresses:?}");
    }

    #[test]
    fn only_the_upper_half_of_the_outside_network_is_for_clients() {
        assert!(is_client_address(Ipv4Addr::new(198, 51, 100, 128)));
        assert!(is_client_address(Ipv4Addr::new(198, 51, 100, 254)));
        assert!(!is_client_address(Ipv4Addr::new(198, 51, 100, 255)));
        assert!(!is_client_address(Ipv4Addr::new(198, 51, 100, 64)));
        assert!(!is_client_address(HOST_ADDRESS));
        assert!(!is_client_address(Ipv4Addr::new(192, 0, 2, 130)));
    }

    #[test]
    fn a_namespace_refuses_an_address_outside_the_client_range() {
        let error = NetNs::create(Ipv4Addr::new(198, 51, 100, 70)).expect_err("created");
        assert!(error.to_string().contains("198.51.100.128/25"), "{error}");
    }
}
