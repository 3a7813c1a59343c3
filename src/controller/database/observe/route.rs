//! Where the `-rw` Service takes a client now: a TLS handshake through its
//! cluster IP, the way an application connects, that verifies an instance's
//! own name (only that instance's certificate carries it). The EndpointSlice
//! moves first; a client reaches the new primary only once kube-proxy has
//! rewritten its rules, about a second later, and that is what a
//! switchover's write pause ends with.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::resources::names;
use crate::tls::probe::{self, Negotiation};

use super::Snapshot;

/// Long enough for a handshake on a loaded node, short enough not to hold
/// the pass that asks.
const TIMEOUT: Duration = Duration::from_secs(1);

/// Whether dialling `<db>-rw` now reaches `instance`; `None` when that
/// cannot be asked (no cluster IP, no CA to verify with).
pub async fn rw_reaches(db: &str, snapshot: &Snapshot, instance: &str) -> Option<bool> {
    let service = names::rw_service(db);
    let ip: IpAddr = snapshot
        .services
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(service.as_str()))?
        .spec
        .as_ref()?
        .cluster_ip
        .as_deref()?
        .parse()
        .ok()?;
    let bundle = snapshot.tls.as_ref()?.api_trust_bundle();
    if bundle.is_empty() {
        return None;
    }
    let port = u16::try_from(crate::resources::POSTGRES_PORT).ok()?;
    let address = SocketAddr::new(ip, port);
    let handshake = probe::postgres_handshake(address, instance, &bundle, Negotiation::SslRequest);
    Some(matches!(
        tokio::time::timeout(TIMEOUT, handshake).await,
        Ok(Ok(_))
    ))
}
