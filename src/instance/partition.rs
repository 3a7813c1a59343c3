//! The instance manager's part in a `partition-primary` drill. The drill
//! cuts this pod off with a NetworkPolicy, and NetworkPolicy implementations
//! only stop *new* connections: connections established before the policy
//! (this manager's lease renewals, the peers' heartbeats in both directions,
//! the replicas' WAL streams, client sessions) go on as if nothing happened,
//! so the primary would keep its lease and nobody would notice a partition.
//!
//! So, asked before the policy goes in, the manager waits until the
//! partition holds (a fresh connection to the API server fails), then ends
//! every connection that outlived it: its own clients are rebuilt on their
//! next call ([`epoch`]), the TLS API server drops the connections it serves,
//! and PostgreSQL's WAL senders and client backends are terminated. From
//! then on the pod is as cut off as a real partition would leave it; the
//! operator removes the policy at the drill's deadline (this manager holds
//! nothing to undo: the record here only reports the partition until then).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::contract::drill::FaultRequest;

use super::{Shared, sql};

/// How long the manager waits for the policy to take hold before it gives
/// up cutting (the partition then cuts only new connections).
const HOLD_WAIT: Duration = Duration::from_secs(15);
/// A fresh connection that does not complete this fast is taken as cut.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const RETRY: Duration = Duration::from_millis(200);

/// Which generation of connections is current: a cut bumps it, and every
/// client or server connection made under an older one is dropped.
static EPOCH: LazyLock<watch::Sender<u64>> = LazyLock::new(|| watch::Sender::new(0));

/// The current connection epoch.
pub fn epoch() -> u64 {
    *EPOCH.borrow()
}

/// A receiver that sees every cut.
pub fn cuts() -> watch::Receiver<u64> {
    EPOCH.subscribe()
}

fn cut() -> u64 {
    EPOCH.send_modify(|epoch| *epoch += 1);
    epoch()
}

/// The partition on record, for `/status`.
#[derive(Default)]
pub struct Partition {
    until: Mutex<Option<SystemTime>>,
    generation: AtomicU64,
}

impl Partition {
    /// Until when a partition is reported, if one is now.
    pub fn until(&self, now: SystemTime) -> Option<SystemTime> {
        let until = *self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until.filter(|until| *until > now)
    }
}

/// `POST /drill/partition`: `seconds: 0` clears the record; otherwise the
/// connections that outlive the policy are ended once it holds. Answers
/// until when the partition is reported.
pub fn partition(shared: &Arc<Shared>, request: &FaultRequest) -> Option<SystemTime> {
    let record = &shared.drill.partition;
    let generation = record.generation.fetch_add(1, Ordering::SeqCst) + 1;
    if request.seconds == 0 {
        *record.until.lock().unwrap_or_else(PoisonError::into_inner) = None;
        tracing::warn!("drill: partition over");
        return None;
    }
    let until = SystemTime::now() + Duration::from_secs(u64::from(request.seconds));
    *record.until.lock().unwrap_or_else(PoisonError::into_inner) = Some(until);
    let shared = shared.clone();
    tokio::spawn(async move {
        let Some(api) = api_server() else {
            tracing::warn!("drill: no API server address in the environment; nothing cut");
            return;
        };
        if !holds(api).await {
            tracing::warn!(%api, "drill: the partition did not take hold within {HOLD_WAIT:?}; only new connections are cut");
            return;
        }
        if shared.drill.partition.generation.load(Ordering::SeqCst) != generation {
            return;
        }
        let epoch = cut();
        let terminated = terminate_sessions(&shared).await;
        tracing::warn!(
            epoch,
            ?terminated,
            "drill: partitioned; every connection that outlived the policy ended"
        );
    });
    Some(until)
}

/// The API server as this pod reaches it (the `kubernetes` Service).
fn api_server() -> Option<SocketAddr> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").ok()?;
    format!("{host}:{port}")
        .parse()
        .ok()
        .or_else(|| format!("[{host}]:{port}").parse().ok())
}

/// Whether a fresh connection to `api` fails within [`HOLD_WAIT`]: the
/// policy holds.
async fn holds(api: SocketAddr) -> bool {
    let deadline = tokio::time::Instant::now() + HOLD_WAIT;
    while tokio::time::Instant::now() < deadline {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(api)).await {
            Ok(Ok(_)) => tokio::time::sleep(RETRY).await,
            Ok(Err(_)) | Err(_) => return true,
        }
    }
    false
}

/// Terminates PostgreSQL's WAL senders and client backends (over the local
/// socket, which no policy covers); how many went, or why none did.
async fn terminate_sessions(shared: &Shared) -> Result<i64, String> {
    let client = sql::connect_local(&shared.config.socket_dir, shared.config.port)
        .await
        .map_err(|e| e.to_string())?;
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE backend_type IN ('walsender', 'client backend') AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_listening_address_does_not_hold_and_a_closed_one_does() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap();
        let accept = tokio::spawn(async move { while listener.accept().await.is_ok() {} });
        let closed = {
            let spare = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            spare.local_addr().unwrap()
        };
        assert!(holds(closed).await);
        let answered = tokio::time::timeout(Duration::from_secs(1), holds(open)).await;
        assert!(answered.is_err(), "an open address must not count as cut");
        accept.abort();
    }

    #[test]
    fn a_cut_bumps_the_epoch_every_receiver_sees() {
        let cuts = cuts();
        let before = epoch();
        assert_eq!(cut(), before + 1);
        assert!(cuts.has_changed().unwrap());
    }
}
