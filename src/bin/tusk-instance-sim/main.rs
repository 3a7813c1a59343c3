//! `tusk-instance-sim`: answers the instance-manager API for every instance
//! pod the cluster has (kwok's fake ones, in `bench/scale`), over real
//! HTTP(S) with the contract's types and each instance's own certificates,
//! so that the operator runs its own client, contract and code paths
//! against thousands of instances. Only PostgreSQL is simulated: role,
//! timeline, WAL position, version, the parameters and synchronous settings
//! applied ([`sim`]). It listens on the wildcard address; the pod IPs must
//! be local to this host (`bench/scale` routes their range to `lo`), and a
//! connection's local address says which instance it is for ([`pods`]).
//!
//! Not a product binary: a bench tool. It takes no part in leader selection
//! (with `--leases` it makes the managers' lease calls, see [`leases`]) and
//! takes no backups.

mod leases;
mod pods;
mod serve;
mod sim;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use clap::Parser;
use tokio::net::TcpListener;

#[derive(Parser, Debug)]
#[command(
    name = "tusk-instance-sim",
    about = "Simulated instance managers for bench/scale"
)]
struct Args {
    /// Address to listen on (every pod IP must reach it).
    #[arg(long, default_value = "0.0.0.0")]
    listen: IpAddr,
    /// The instance API's port.
    #[arg(long, default_value_t = tusk::contract::PORT)]
    api_port: u16,
    /// PostgreSQL's port (TLS probes only).
    #[arg(long, default_value_t = 5432)]
    postgres_port: u16,
    /// Read and renew the primary Leases as the managers do, every period.
    #[arg(long)]
    leases: bool,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("cannot load a Kubernetes client configuration: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot watch the instance pods: {0}")]
    Watch(#[from] kube::runtime::watcher::Error),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

async fn listen(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    let api = listen(SocketAddr::new(args.listen, args.api_port)).await?;
    let postgres = listen(SocketAddr::new(args.listen, args.postgres_port)).await?;
    let client = kube::Client::try_default().await?;
    let pods = pods::Pods::watch(client.clone()).await?;
    tracing::info!(listen = %args.listen, api_port = args.api_port, postgres_port = args.postgres_port, "simulating instance managers");
    let shared = serve::Shared {
        pods: pods.clone(),
        sim: Arc::new(Mutex::new(sim::Sim::default())),
    };
    let renew_leases = args.leases;
    let leases = {
        let (pods, sim) = (pods.clone(), shared.sim.clone());
        async move {
            if renew_leases {
                leases::run(client, pods, sim).await;
            } else {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = leases => {}
        () = serve::api(api, shared) => {}
        () = serve::postgres(postgres, pods) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}
