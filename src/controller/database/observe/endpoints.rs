//! Observe the published endpoints (`spec.expose`) for
//! `lifecycle::endpoints`, in two steps around the TLS observation:
//!
//! 1. [`services`], before it: each entry's Service as the snapshot listed
//!    it (its load balancer's ingress, its node port) and the operator's own address,
//!    so the certificate names the TLS planner requires include the
//!    published addresses.
//! 2. [`probe_and_secret`], after it: a PostgreSQL TLS handshake through
//!    each endpoint that has an address (its first one and the port),
//!    verifying the server certificate against the Database's CAs (the
//!    `ca.crt` clients get) for the entry's `hostname`, else that address;
//!    all at once, each within [`PROBE_TIMEOUT`], none for an entry without
//!    an address or whose target has no ready instance
//!    (`lifecycle::endpoints::probe_targets`), so a failover pass is never
//!    held up by a probe of the primary it replaces. Then
//!    `<db>-app-external` as built from `<db>-app` and the endpoints,
//!    against the one that exists.
//!
//! Nothing is read for a Database that publishes nothing, beyond the
//! Secret list the snapshot already made.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Secret, Service};

use super::Snapshot;
use crate::api::expose::{EndpointStatus, external_secret_name, service_name};
use crate::api::model::ValidatedDatabase;
use crate::controller::Error;
use crate::lifecycle::Observed;
use crate::lifecycle::endpoints::{
    EndpointProbe, EntryObserved, ExposureObserved, ExternalSecret, ProbeTarget, ServiceSeen,
};
use crate::resources::{self, AppCredentials, names};
use crate::tls::probe::{self, Negotiation};

/// The environment variable the operator's Deployment sets to its pod's IP
/// (the downward API's `status.podIP`).
pub const POD_IP_ENV: &str = "POD_IP";

/// How long a probe through a published endpoint may take, name lookup,
/// connection and handshake together.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The operator pod's own address, when its Deployment says it.
pub fn operator_address() -> Option<String> {
    std::env::var(POD_IP_ENV)
        .ok()
        .map(|ip| ip.trim().to_owned())
        .filter(|ip| !ip.is_empty())
}

/// Step 1: each `spec.expose` entry's Service, as the snapshot listed it
/// (owned by this Database), into `observed.published` (probes and the
/// Secret come in step 2).
pub fn services(model: &ValidatedDatabase, snapshot: &Snapshot, observed: &mut Observed) {
    let entries = model
        .expose
        .iter()
        .map(|entry| {
            let service = service_name(&model.name, entry.target, entry.type_);
            let seen = snapshot
                .services
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(service.as_str()))
                .map(seen);
            EntryObserved {
                target: entry.target,
                type_: entry.type_,
                hostname: entry.hostname.clone(),
                allowed_source_ranges: entry.allowed_source_ranges.clone(),
                service,
                seen,
                probe: EndpointProbe::NotProbed,
            }
        })
        .collect();
    let external_secret = if snapshot.has_secret(&external_secret_name(&model.name)) {
        ExternalSecret::Differs
    } else {
        ExternalSecret::Absent
    };
    observed.published = Some(ExposureObserved {
        entries,
        operator_address: operator_address(),
        external_secret,
    });
}

/// What a published Service says of its addresses.
pub fn seen(service: &Service) -> ServiceSeen {
    let ingress = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|all| {
            all.iter()
                .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
                .collect()
        })
        .unwrap_or_default();
    let node_port = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ports| ports.first())
        .and_then(|p| p.node_port);
    ServiceSeen { ingress, node_port }
}

/// Step 2: the probes, and `<db>-app-external` as built (kept in
/// `snapshot.external_secret` for the apply step) against the one that
/// exists.
pub async fn probe_and_secret(
    client: &kube::Client,
    model: &ValidatedDatabase,
    snapshot: &mut Snapshot,
    observed: &mut Observed,
) -> Result<(), Error> {
    let Some(exposure) = observed.published.as_ref() else {
        return Ok(());
    };
    if exposure.entries.is_empty() {
        return Ok(());
    }
    let namespace = model.namespace.clone().unwrap_or_default();
    let wanted = [
        names::app_secret(&model.name),
        external_secret_name(&model.name),
    ];
    let mut read = snapshot
        .secret_reads
        .read_all(client, &namespace, &wanted)
        .await?
        .into_iter();
    let (app, existing) = (read.next().flatten(), read.next().flatten());
    let fallback = snapshot
        .tls
        .as_ref()
        .map(|t| t.api_trust_bundle())
        .unwrap_or_default();
    let credentials = app.as_ref().map(AppCredentials::from_secret).map(|c| {
        c.map(|mut c| {
            if c.ca_pem.is_empty() {
                c.ca_pem = fallback.clone();
            }
            c
        })
    });
    let bundle = match &credentials {
        Some(Ok(c)) => c.ca_pem.clone(),
        _ => fallback,
    };
    let rows = crate::lifecycle::endpoints::endpoints(observed);
    let probes = probe_all(
        &crate::lifecycle::endpoints::probe_targets(observed),
        &bundle,
    )
    .await;
    if let Some(exposure) = observed.published.as_mut() {
        for (entry, probe) in exposure.entries.iter_mut().zip(probes) {
            entry.probe = probe;
        }
        let (state, built) = compare(model, &rows, credentials, existing.as_ref());
        exposure.external_secret = state;
        snapshot.external_secret = built;
    }
    Ok(())
}

/// The state of `<db>-app-external` against what the builder makes.
fn compare(
    model: &ValidatedDatabase,
    rows: &[EndpointStatus],
    credentials: Option<Result<AppCredentials, String>>,
    existing: Option<&Secret>,
) -> (ExternalSecret, Option<Secret>) {
    // Without the credentials nothing is written: one that exists is kept.
    let built = match credentials {
        Some(Ok(app)) => resources::external_secret(model, rows, &app),
        Some(Err(why)) => {
            let why = format!("{}: {why}", names::app_secret(&model.name));
            return (ExternalSecret::Unbuildable(why), None);
        }
        None => {
            let why = format!("{} does not exist yet", names::app_secret(&model.name));
            return (ExternalSecret::Unbuildable(why), None);
        }
    };
    let state = match (existing, &built) {
        (None, _) => ExternalSecret::Absent,
        (Some(existing), Some(built))
            if existing.data == built.data
                && existing.type_ == built.type_
                && resources::compare::as_built(&built.metadata, &existing.metadata) =>
        {
            ExternalSecret::AsBuilt
        }
        (Some(_), _) => ExternalSecret::Differs,
    };
    (state, built)
}

/// One handshake per target, all at once, in order; `None` is not probed.
async fn probe_all(targets: &[Option<ProbeTarget>], bundle: &str) -> Vec<EndpointProbe> {
    let probes = targets.iter().map(|target| async move {
        let Some(ProbeTarget {
            address,
            port,
            name,
        }) = target
        else {
            return EndpointProbe::NotProbed;
        };
        match tokio::time::timeout(PROBE_TIMEOUT, handshake(address, *port, name, bundle)).await {
            Ok(Ok(())) => EndpointProbe::Reached,
            Ok(Err(why)) => EndpointProbe::Failed(why),
            Err(_) => EndpointProbe::Failed(format!(
                "no answer within {}s (a firewall or allowedSourceRanges dropping the \
                 connection looks like this)",
                PROBE_TIMEOUT.as_secs()
            )),
        }
    });
    futures::future::join_all(probes).await
}

/// An SSLRequest and a verified TLS handshake with `address:port`, the
/// certificate required to name `name`.
async fn handshake(address: &str, port: i32, name: &str, bundle: &str) -> Result<(), String> {
    let port = u16::try_from(port).map_err(|_| format!("port {port} is out of range"))?;
    let addr = match address.parse::<std::net::IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port),
        Err(_) => tokio::net::lookup_host((address, port))
            .await
            .map_err(|e| format!("cannot resolve {address}: {e}"))?
            .next()
            .ok_or_else(|| format!("{address} resolves to no address"))?,
    };
    probe::postgres_handshake(addr, name, bundle, Negotiation::SslRequest)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::authority::Authority;
    use crate::tls::test_support::*;
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, ServicePort, ServiceSpec, ServiceStatus,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[test]
    fn a_service_shows_its_ingress_and_node_port() {
        let service = Service {
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    port: 5432,
                    node_port: Some(30432),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(vec![
                        LoadBalancerIngress {
                            ip: Some("192.0.2.64".into()),
                            ..LoadBalancerIngress::default()
                        },
                        LoadBalancerIngress {
                            hostname: Some("lb.example.com".into()),
                            ..LoadBalancerIngress::default()
                        },
                    ]),
                }),
                ..ServiceStatus::default()
            }),
            ..Service::default()
        };
        assert_eq!(
            seen(&service),
            ServiceSeen {
                ingress: vec!["192.0.2.64".into(), "lb.example.com".into()],
                node_port: Some(30432),
            }
        );
        assert_eq!(seen(&Service::default()), ServiceSeen::default());
    }

    fn target(address: &str, port: i32, name: &str) -> Option<ProbeTarget> {
        Some(ProbeTarget {
            address: address.to_owned(),
            port,
            name: name.to_owned(),
        })
    }

    /// A PostgreSQL-like TLS server on loopback presenting a leaf for `names`.
    async fn serve(ca: &Authority, names: &[&str]) -> u16 {
        let leaf = ca.issue_server(&strings(names), days(7), now()).unwrap();
        let config =
            crate::tls::rustls_config::server_config(&leaf.cert_pem, &leaf.key_pem, None, &[])
                .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let config = config.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 8];
                    tcp.read_exact(&mut request).await.ok()?;
                    tcp.write_all(b"S").await.ok()?;
                    tokio_rustls::TlsAcceptor::from(config)
                        .accept(tcp)
                        .await
                        .ok()
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn the_probe_verifies_the_address_or_the_hostname() {
        let ca = ca();
        let port = i32::from(serve(&ca, &["orders-rw", "127.0.0.1", "db.example.com"]).await);
        let targets = [
            target("127.0.0.1", port, "127.0.0.1"),
            target("127.0.0.1", port, "db.example.com"),
            target("127.0.0.1", port, "other.example.com"),
        ];
        let probes = probe_all(&targets, ca.cert_pem()).await;
        assert_eq!(probes[0], EndpointProbe::Reached);
        assert_eq!(probes[1], EndpointProbe::Reached);
        assert!(
            matches!(&probes[2], EndpointProbe::Failed(why) if why.contains("other.example.com")),
            "{:?}",
            probes[2]
        );
    }

    #[tokio::test]
    async fn a_certificate_without_the_address_fails_the_probe() {
        let ca = ca();
        let port = i32::from(serve(&ca, &["orders-rw"]).await);
        let probes = probe_all(&[target("127.0.0.1", port, "127.0.0.1")], ca.cert_pem()).await;
        assert!(
            matches!(&probes[0], EndpointProbe::Failed(why) if why.contains("127.0.0.1")),
            "{:?}",
            probes[0]
        );
    }

    #[tokio::test]
    async fn nothing_to_probe_is_not_probed() {
        assert_eq!(
            probe_all(&[None], ca().cert_pem()).await,
            vec![EndpointProbe::NotProbed]
        );
    }

    fn model() -> ValidatedDatabase {
        crate::resources::tests::model(&crate::api::arbitrary::sample_database())
    }

    #[test]
    fn the_external_secret_is_compared_with_what_the_builder_makes() {
        use crate::api::expose::{ExposeTarget, ExposeType};
        let model = model();
        let rows = |address: &str| {
            vec![EndpointStatus {
                service: "orders-rw-lb".into(),
                target: ExposeTarget::Rw,
                type_: ExposeType::LoadBalancer,
                hostname: None,
                addresses: vec![address.to_owned()],
                port: Some(5432),
                reached: true,
                message: None,
            }]
        };
        let app = || {
            Some(Ok(AppCredentials {
                username: "app".into(),
                password: "pw".into(),
                dbname: "app".into(),
                ca_pem: "CA".into(),
                client: None,
            }))
        };
        let (state, built) = compare(&model, &rows("192.0.2.64"), app(), None);
        assert_eq!(state, ExternalSecret::Absent);
        let built = built.expect("built");
        // As the API server returns it: more metadata, the same data.
        let mut stored = built.clone();
        stored.metadata.resource_version = Some("7".into());
        let (state, _) = compare(&model, &rows("192.0.2.64"), app(), Some(&stored));
        assert_eq!(state, ExternalSecret::AsBuilt);
        // The address moved, or a key was added by hand: applied again.
        let (state, _) = compare(&model, &rows("192.0.2.65"), app(), Some(&stored));
        assert_eq!(state, ExternalSecret::Differs);
        let mut edited = stored.clone();
        if let Some(data) = edited.data.as_mut() {
            data.insert("extra".into(), k8s_openapi::ByteString(b"x".to_vec()));
        }
        let (state, _) = compare(&model, &rows("192.0.2.64"), app(), Some(&edited));
        assert_eq!(state, ExternalSecret::Differs);
        // Without <db>-app nothing can be built; one that exists is kept.
        let (state, built) = compare(&model, &rows("192.0.2.64"), None, None);
        assert_eq!(
            state,
            ExternalSecret::Unbuildable("orders-app does not exist yet".into())
        );
        assert_eq!(built, None);
        let (state, _) = compare(&model, &rows("192.0.2.64"), None, Some(&stored));
        assert!(matches!(state, ExternalSecret::Unbuildable(_)), "{state:?}");
    }
}
