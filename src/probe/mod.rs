//! The drill probe (`tusk probe`): the application a drill measures with.
//! A drill's pod runs it against the Database's `-rw` Service: it inserts
//! 1, 2, 3, … into [`TABLE`], one new connection and one synchronous commit
//! per row like an application would, records every acknowledgement with its
//! time ([`record`]), and serves what it saw ([`crate::contract::drill`]'s
//! `ProbeReport`) until the drill controller asks it to finish; then it
//! reads every acknowledged id back and reports the ones lost.
//!
//! It runs in its own pod rather than in the operator so that a drill's
//! measurement survives the operator: a new leader reads the same probe.
//!
//! `tusk probe check` ([`check`]) is the `restore` drill's reader: it
//! counts which acknowledged ids a restored copy holds and exits.

pub mod check;
pub mod record;
mod server;
mod target;
mod writer;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

pub use record::Record;

/// The table the probe writes; dropped when it finishes.
pub const TABLE: &str = "tusk_drill_probe";

/// Where the probe's pod mounts the Database's `-app` Secret.
pub const CREDENTIALS_DIR: &str = "/etc/tusk/credentials";

/// `tusk probe`.
#[derive(clap::Args, Debug, Clone)]
pub struct ProbeConfig {
    /// Directory holding the Database's `-app` Secret: `username`,
    /// `password`, `dbname`, `host`, `port`, and `ca.crt` when the Database
    /// serves TLS (then the server must present a certificate for `host`).
    #[arg(long, default_value = CREDENTIALS_DIR)]
    pub credentials: PathBuf,
    /// The address to dial, the `-rw` Service's cluster IP; without it,
    /// `host` is resolved.
    #[arg(long)]
    pub address: Option<IpAddr>,
    /// Where the report is served.
    #[arg(long, default_value = "0.0.0.0:8001")]
    pub listen: SocketAddr,
    /// Pause between two writes, in milliseconds.
    #[arg(long, default_value_t = 50)]
    pub interval_ms: u64,
    /// Instead of writing: check a restored copy and exit.
    #[command(subcommand)]
    pub command: Option<ProbeCommand>,
}

/// What `tusk probe` does instead of writing.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum ProbeCommand {
    /// Read which of the given ids a (restored) Database holds, write the
    /// report to the termination message and exit.
    Check(check::CheckConfig),
}

/// Why the probe cannot run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the credentials have no usable {0}")]
    Missing(&'static str),
    #[error("TLS to {host}: {source}")]
    Tls {
        host: String,
        #[source]
        source: crate::tls::Error,
    },
    #[error("{0} is not a name a server certificate can be verified against")]
    Name(String),
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("serving the report: {0}")]
    Serve(#[source] std::io::Error),
    #[error("checking the restored copy: {0}")]
    Check(String),
}

/// Runs the probe until the process is stopped (or, for `check`, until
/// the check is done).
pub async fn run(config: ProbeConfig) -> Result<(), Error> {
    let target = target::Target::load(&config.credentials, config.address)?;
    if let Some(ProbeCommand::Check(check)) = config.command {
        let target = match &check.dbname {
            Some(dbname) => target.with_dbname(dbname),
            None => target,
        };
        return check::run(target, check).await;
    }
    server::serve(
        target,
        config.listen,
        std::time::Duration::from_millis(config.interval_ms),
    )
    .await
}
