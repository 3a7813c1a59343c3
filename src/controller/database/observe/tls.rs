//! Observe the TLS material of a Database for `lifecycle::tls`: `<db>-ca`,
//! each instance's `<instance>-tls`, the user's Secret when `spec.tls.ca` or
//! `spec.tls.server` names one (or cert-manager's, with
//! `spec.tls.certManager`: [`super::cert_manager`]), what each manager reports loaded
//! (`Status.tls`), and, only while something is in flight or unconfirmed
//! (`lifecycle::tls::wants_probe`), a TLS handshake with each serving pod's
//! PostgreSQL port to see which certificate it presents. The certificates
//! are reduced to fingerprints, serials, issuers, validity and names; their
//! PEM text is kept aside ([`TlsMaterial`]) for the apply step, which must
//! keep the leaves it does not reissue and put CAs into bundles.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::Snapshot;
use crate::api::model::ValidatedDatabase;
use crate::api::tls::TlsSource;
use crate::contract::tls as files;
use crate::controller::Error;
use crate::controller::database::instances::ClientTls;
use crate::lifecycle::tls::{
    AppCert, Authority, Ca, HeldSecret, InstanceTls, Leaf, Probe, Settings, Stage, TlsObserved,
    Unusable, UserServer,
};
use crate::lifecycle::{Observed, PodPhase};
use crate::resources::tls::{self as built, KeyPair};
use crate::resources::{POSTGRES_PORT, names};
use crate::tls::CertInfo;
use crate::tls::probe::{self, Negotiation};
use crate::tls::user_secret::{self, ServerMaterial};

/// On `<db>-ca`: the `spec.tls.rotateCA` value the last rotation answered,
/// written with the next CA so that a request starts one rotation only,
/// whatever the operator forgets.
pub const ROTATION_ANNOTATION: &str = "tusk.dev/rotate-ca";

/// The cluster domain of the Service names in server certificates.
pub const CLUSTER_DOMAIN: &str = crate::tls::names::DEFAULT_CLUSTER_DOMAIN;

/// The PEM text behind what [`TlsObserved`] says, for the apply step.
#[derive(Clone, Debug, Default)]
pub struct TlsMaterial {
    /// `<db>-ca`'s current CA, next CA and operator identity.
    pub current: Option<KeyPair>,
    pub next: Option<KeyPair>,
    pub operator: Option<KeyPair>,
    /// The annotation [`ROTATION_ANNOTATION`].
    pub rotation: Option<String>,
    /// The user's CA (`spec.tls.ca`), when usable.
    pub user_ca: Option<KeyPair>,
    /// The user's server certificate (`spec.tls.server`), when usable.
    pub user_server: Option<ServerMaterial>,
    /// Every known CA certificate by fingerprint.
    pub cas: BTreeMap<String, String>,
    /// Each instance's TLS Secret as read, by instance name.
    pub instances: BTreeMap<String, InstanceParts>,
    /// The Service names every server certificate carries (what a user's
    /// `spec.tls.server` certificate must cover).
    pub service_names: Vec<String>,
    /// The published endpoints' hostnames and addresses, which Tusk's
    /// server certificates carry besides (`lifecycle::exposure`).
    pub exposure_names: Vec<String>,
}

impl TlsMaterial {
    /// The names instance `instance`'s server certificate is issued for:
    /// the Services', the instance's, then the published endpoints'
    /// hostnames and addresses (an address becomes an IP SAN).
    pub fn server_names(&self, database: &str, namespace: &str, instance: &str) -> Vec<String> {
        crate::tls::names::server_names(
            database,
            namespace,
            CLUSTER_DOMAIN,
            instance,
            &self.exposure_names,
        )
    }

    /// The names of a certificate for the Services and the published
    /// endpoints, no instance's: what cert-manager's Certificate carries
    /// (`spec.tls.certManager`).
    pub fn certificate_names(&self) -> Vec<String> {
        [self.service_names.clone(), self.exposure_names.clone()].concat()
    }

    /// The trust bundle of the operator's instance-API client: every CA
    /// Tusk knows for this Database (during a rotation old and new), PEM.
    /// FOR THE LEAD: hand this and [`TlsMaterial::operator`] to apitls's
    /// client type once it is merged.
    pub fn api_trust_bundle(&self) -> String {
        self.cas.values().cloned().collect::<Vec<_>>().join("")
    }
}

/// The Secrets one pass has read, by name (`None`: it does not exist): the
/// client material is read before the managers are polled and the TLS
/// Secrets after, and `<db>-ca` (and a user's CA) is among both, so each is
/// read from the API server once a pass. It lives as long as the pass's
/// snapshot, so it never stands in for a read of a later pass.
#[derive(Clone, Debug, Default)]
pub struct SecretReads(BTreeMap<String, Option<Secret>>);

impl SecretReads {
    /// Secrets `names` of `namespace`, in that order: those not read yet this
    /// pass are read now, concurrently.
    pub async fn read_all(
        &mut self,
        client: &kube::Client,
        namespace: &str,
        names: &[String],
    ) -> Result<Vec<Option<Secret>>, Error> {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let missing: BTreeSet<&String> =
            names.iter().filter(|n| !self.0.contains_key(*n)).collect();
        let reads = missing.into_iter().map(|name| {
            let secrets = secrets.clone();
            async move {
                let secret = secrets
                    .get_opt(name)
                    .await
                    .map_err(Error::kube("reading a Secret"))?;
                Ok::<_, Error>((name.clone(), secret))
            }
        });
        self.0.extend(futures::future::try_join_all(reads).await?);
        Ok(names
            .iter()
            .map(|name| self.0.get(name).cloned().flatten())
            .collect())
    }
}

/// The operator's client material for the instance API of Database `db`:
/// its identity (`operator.crt`/`operator.key` in `<db>-ca`) and every CA
/// that may have issued an instance's `api.crt` (`<db>-ca`'s current and
/// next CA, and the user's CA when `user_ca` names its Secret). Read before
/// the managers are polled, so a pass reaches them with the material in
/// effect; `None` until `<db>-ca` holds an identity (a new Database's first
/// pass, when no pod serves TLS yet). The Secrets read are kept in `reads`.
pub async fn client_tls(
    client: &kube::Client,
    namespace: &str,
    db: &str,
    user_ca: Option<&str>,
    reads: &mut SecretReads,
) -> Result<Option<ClientTls>, Error> {
    let mut names = vec![names::ca_secret(db)];
    names.extend(user_ca.map(str::to_owned));
    let mut read = reads.read_all(client, namespace, &names).await?.into_iter();
    let (Some(ca), user) = (read.next().flatten(), read.next().flatten()) else {
        return Ok(None);
    };
    let text = |secret: &Secret, key: &str| built::text(secret, key).ok();
    let (Some(cert_pem), Some(key_pem)) = (
        text(&ca, built::OPERATOR_CERT),
        text(&ca, built::OPERATOR_KEY),
    ) else {
        return Ok(None);
    };
    let mut trust: Vec<String> = [built::CA_CERT, built::NEXT_CA_CERT]
        .iter()
        .filter_map(|key| text(&ca, key))
        .collect();
    if let Some(user) = user {
        trust.extend(text(&user, user_secret::TLS_CRT));
    }
    Ok(Some(ClientTls {
        trust_pem: trust.join("\n"),
        cert_pem,
        key_pem,
    }))
}

/// Reads the TLS Secrets of `db`, fills `observed.tls` and keeps the PEM
/// text in `snapshot.tls`. Handshakes only when the planner would want to
/// confirm something.
pub async fn observe(
    client: &kube::Client,
    model: &ValidatedDatabase,
    snapshot: &mut Snapshot,
    observed: &mut Observed,
    recorded: Stage,
) -> Result<(), Error> {
    let namespace = model.namespace.clone().unwrap_or_default();
    let instance_names: Vec<String> = observed
        .instances
        .keys()
        .map(|serial| observed.name(*serial))
        .collect();
    let user_name = model
        .tls
        .source
        .user_secret()
        .map(|(_, name)| name.to_owned());
    let mut wanted = vec![
        names::ca_secret(&model.name),
        names::app_secret(&model.name),
    ];
    wanted.extend(instance_names.iter().map(|n| names::instance_tls_secret(n)));
    wanted.extend(user_name.clone());
    let mut read = snapshot
        .secret_reads
        .read_all(client, &namespace, &wanted)
        .await?
        .into_iter();
    let (ca, app) = (read.next().flatten(), read.next().flatten());
    let instances: BTreeMap<String, Option<Secret>> =
        instance_names.into_iter().zip(read.by_ref()).collect();
    let user = user_name.map(|_| read.next().flatten());
    let read = TlsSecrets {
        ca,
        user,
        app,
        instances,
    };
    let (mut tls, material) = reduce(model, &read, snapshot, observed, recorded);
    tls.settings.cert_manager =
        super::cert_manager::observe(client, model, &material.certificate_names()).await?;
    if crate::lifecycle::tls::wants_probe(&tls) {
        probe_all(&mut tls, &material, snapshot).await;
    }
    observed.tls = Some(tls);
    snapshot.tls = Some(material);
    Ok(())
}

/// How long a handshake may hold the pass up: as long as a status poll.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Handshakes the PostgreSQL port of every serving instance whose manager
/// answered this pass, concurrently. One that did not answer is not probed
/// (it stays unconfirmed): a primary cut off from the network would
/// otherwise hold every pass of its failover up by the probe's timeout.
async fn probe_all(tls: &mut TlsObserved, material: &TlsMaterial, snapshot: &Snapshot) {
    let bundle = material.api_trust_bundle();
    let targets: Vec<(String, SocketAddr)> = tls
        .instances
        .iter()
        .filter(|(name, i)| i.serving && snapshot.managers.contains_key(name.as_str()))
        .filter_map(|(name, _)| {
            let ip = snapshot.pod_ip(name)?.parse().ok()?;
            Some((name.clone(), SocketAddr::new(ip, POSTGRES_PORT as u16)))
        })
        .collect();
    let probes = futures::future::join_all(targets.iter().map(|(name, addr)| {
        tokio::time::timeout(
            PROBE_TIMEOUT,
            probe::postgres_handshake(*addr, name, &bundle, Negotiation::SslRequest),
        )
    }))
    .await;
    for ((name, _), result) in targets.iter().zip(probes) {
        if let Some(instance) = tls.instances.get_mut(name) {
            instance.probe = match result {
                Ok(Ok(presented)) => Probe::Presented(presented.serial),
                Ok(Err(error)) => Probe::Failed(error.to_string()),
                Err(_) => Probe::Failed(format!(
                    "no TLS handshake within {}s",
                    PROBE_TIMEOUT.as_secs()
                )),
            };
        }
    }
}

/// The Secrets the TLS planner's view is made of, as read.
#[derive(Clone, Debug, Default)]
pub struct TlsSecrets {
    /// `<db>-ca`.
    pub ca: Option<Secret>,
    /// The Secret `spec.tls.ca` or `spec.tls.server` names, when one does
    /// (`Some(None)`: it does not exist).
    pub user: Option<Option<Secret>>,
    /// `<db>-app`, for the application role's certificate.
    pub app: Option<Secret>,
    /// Each instance's `<instance>-tls`, by instance name.
    pub instances: BTreeMap<String, Option<Secret>>,
}

/// The planner's view and the PEM text, from the Secrets as read. Pure.
pub fn reduce(
    model: &ValidatedDatabase,
    read: &TlsSecrets,
    snapshot: &Snapshot,
    observed: &Observed,
    recorded: Stage,
) -> (TlsObserved, TlsMaterial) {
    let TlsSecrets {
        ca,
        user,
        app,
        instances,
    } = read;
    let (ca, app) = (ca.as_ref(), app.as_ref());
    let now = observed.now;
    let namespace = model.namespace.clone().unwrap_or_default();
    let mut material = TlsMaterial {
        service_names: crate::tls::names::service_names(
            &model.name,
            &namespace,
            CLUSTER_DOMAIN,
            &[],
        ),
        exposure_names: crate::lifecycle::endpoints::certificate_names(observed),
        ..TlsMaterial::default()
    };
    let pair = |secret: &Secret, cert: &str, key: &str| {
        Some(KeyPair {
            cert_pem: built::text(secret, cert).ok()?,
            key_pem: built::text(secret, key).ok()?,
        })
    };
    if let Some(secret) = ca {
        material.current = pair(secret, built::CA_CERT, built::CA_KEY);
        material.next = pair(secret, built::NEXT_CA_CERT, built::NEXT_CA_KEY);
        material.operator = pair(secret, built::OPERATOR_CERT, built::OPERATOR_KEY);
        material.rotation = secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ROTATION_ANNOTATION))
            .cloned();
    }
    let mut known: BTreeMap<String, (Ca, CertInfo)> = BTreeMap::new();
    let mut remember = |pem: &str, material: &mut TlsMaterial| -> Option<Ca> {
        let mut first = None;
        for info in CertInfo::parse_bundle(pem)
            .ok()?
            .into_iter()
            .filter(|i| i.is_ca)
        {
            let ca = Ca {
                fingerprint: info.fingerprint.clone(),
                not_before: info.not_before,
                not_after: info.not_after,
            };
            material
                .cas
                .entry(info.fingerprint.clone())
                .or_insert_with(|| pem_of(pem, &info));
            first.get_or_insert(ca.clone());
            known.insert(info.fingerprint.clone(), (ca, info));
        }
        first
    };
    let current = material
        .current
        .clone()
        .and_then(|p| remember(&p.cert_pem, &mut material));
    let next = material
        .next
        .clone()
        .and_then(|p| remember(&p.cert_pem, &mut material));
    let (authority, user_server) = match (&model.tls.source, user) {
        (TlsSource::CaSecret(name), Some(secret)) => {
            let ca = match secret {
                None => Err(absent(name)),
                Some(secret) => match user_secret::check_ca(secret, now) {
                    Ok(authority) => {
                        material.user_ca = Some(KeyPair {
                            cert_pem: authority.cert_pem().to_owned(),
                            key_pem: authority.key_pem().to_owned(),
                        });
                        remember(authority.cert_pem(), &mut material)
                            .ok_or_else(|| unusable(name, "its tls.crt does not parse"))
                    }
                    Err(error) => Err(Unusable {
                        missing: false,
                        message: error.to_string(),
                    }),
                },
            };
            (
                Authority::User {
                    secret: name.clone(),
                    ca,
                },
                None,
            )
        }
        (
            TlsSource::ServerSecret(name) | TlsSource::CertManager { secret: name, .. },
            Some(secret),
        ) => {
            let field = match &model.tls.source {
                TlsSource::CertManager { .. } => user_secret::CERT_MANAGER_FIELD,
                _ => user_secret::SERVER_FIELD,
            };
            let leaf = match secret {
                None => Err(absent(name)),
                Some(secret) => {
                    match user_secret::check_served(field, secret, &material.service_names, now) {
                        Ok(server) => {
                            let leaf = leaf_of(&server.info, None);
                            material.user_server = Some(server);
                            Ok(leaf)
                        }
                        Err(error) => Err(Unusable {
                            missing: false,
                            message: error.to_string(),
                        }),
                    }
                }
            };
            (
                managed(current, next, &material),
                Some(UserServer {
                    secret: name.clone(),
                    leaf,
                }),
            )
        }
        _ => (managed(current, next, &material), None),
    };
    // The instances' bundles: CAs they trust that `<db>-ca` may have lost.
    let mut parts = BTreeMap::new();
    for (name, secret) in instances {
        if let Some(secret) = secret {
            let read = InstanceParts::from_secret(secret);
            for bundle in [&read.ca_bundle, &read.client_ca_bundle] {
                remember(bundle, &mut material);
            }
            parts.insert(name.clone(), read);
        }
    }
    // spec.tls.server: the user's CA is in every ca.crt beside Tusk's, and
    // not Tusk's to plan with: it is left out of what the planner sees.
    let user_cas: BTreeSet<String> = material
        .user_server
        .as_ref()
        .and_then(|u| CertInfo::parse_bundle(&u.ca_pem).ok())
        .map(|all| all.into_iter().map(|i| i.fingerprint).collect())
        .unwrap_or_default();
    known.retain(|fp, _| !user_cas.contains(fp));
    material.cas.retain(|fp, _| !user_cas.contains(fp));
    let issuer_of = |info: &CertInfo| {
        known
            .iter()
            .find(|(_, (_, ca))| info.issued_by(ca))
            .map(|(fp, _)| fp.clone())
    };
    let leaf = |pem: &Option<KeyPair>| {
        let info = CertInfo::parse(&pem.as_ref()?.cert_pem).ok()?;
        Some(leaf_of(&info, issuer_of(&info)))
    };
    let fingerprints = |pem: &str| -> BTreeSet<String> {
        CertInfo::parse_bundle(pem)
            .map(|all| {
                all.into_iter()
                    .map(|i| i.fingerprint)
                    .collect::<BTreeSet<_>>()
            })
            .unwrap_or_default()
            .into_iter()
            .filter(|fp| !user_cas.contains(fp))
            .collect()
    };
    let mut tls_instances = BTreeMap::new();
    for (serial, instance) in &observed.instances {
        let name = observed.name(*serial);
        let secret = parts.get(&name).map(|read| HeldSecret {
            server: leaf(&read.server),
            api: leaf(&read.api),
            replication: leaf(&read.replication),
            trusted: fingerprints(&read.ca_bundle),
            client_trusted: fingerprints(&read.client_ca_bundle),
        });
        let serving = instance
            .pod
            .as_ref()
            .is_some_and(|p| p.tls && p.phase == PodPhase::Running);
        let report = snapshot
            .managers
            .get(&name)
            .filter(|s| s.api_version == crate::contract::API_VERSION)
            .and_then(|s| s.tls.clone())
            .map(|mut report| {
                report.trusted.retain(|fp| !user_cas.contains(fp));
                report.client_trusted.retain(|fp| !user_cas.contains(fp));
                report
            });
        tls_instances.insert(
            name,
            InstanceTls {
                secret,
                serving,
                report,
                probe: Probe::NotProbed,
            },
        );
    }
    let operator = leaf(&material.operator);
    let app = AppCert {
        secret: names::app_secret(&model.name),
        wanted: model.tls.client_certificates,
        leaf: app
            .and_then(|s| role_certificate(s, &model.initdb.owner))
            .map(|info| leaf_of(&info, issuer_of(&info))),
        held: app.is_some_and(tls_manager_holds_client),
    };
    material.instances = parts;
    let tls = TlsObserved {
        authority,
        known: known.into_iter().map(|(fp, (ca, _))| (fp, ca)).collect(),
        operator,
        app,
        instances: tls_instances,
        service_names: [
            material.service_names.clone(),
            material.exposure_names.clone(),
        ]
        .concat(),
        settings: settings(model, user_server),
        recorded,
        now,
    };
    (tls, material)
}

/// Whether the TLS field manager wrote a client certificate into the
/// credential Secret `secret`: only what it owns can its apply remove (a
/// `tls.crt` put there by hand would otherwise be "removed" on every pass).
fn tls_manager_holds_client(secret: &Secret) -> bool {
    secret
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|entry| {
            entry.manager.as_deref() == Some(built::TLS_FIELD_MANAGER)
                && entry.fields_v1.as_ref().is_some_and(|fields| {
                    [built::CLIENT_CERT_KEY, built::CLIENT_KEY_KEY]
                        .iter()
                        .any(|key| !fields.0["f:data"][format!("f:{key}")].is_null())
                })
        })
}

/// The application role's certificate in `<db>-app`: one that parses,
/// matches the key beside it and names `role`; anything else is issued
/// anew.
fn role_certificate(secret: &Secret, role: &str) -> Option<CertInfo> {
    let cert = built::text(secret, built::CLIENT_CERT_KEY).ok()?;
    let key = built::text(secret, built::CLIENT_KEY_KEY).ok()?;
    let info = CertInfo::parse(&cert).ok()?;
    (info.common_name.as_deref() == Some(role) && crate::tls::key_matches(&cert, &key))
        .then_some(info)
}

fn managed(current: Option<Ca>, next: Option<Ca>, material: &TlsMaterial) -> Authority {
    Authority::Managed {
        current,
        next,
        rotation: material.rotation.clone(),
    }
}

fn settings(model: &ValidatedDatabase, user_server: Option<UserServer>) -> Settings {
    let duration =
        |d: std::time::Duration| SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
    Settings {
        lifetime: duration(model.tls.certificate_lifetime),
        renew_before: duration(model.tls.renew_before),
        ca_renew_before: duration(model.tls.ca_renew_before),
        rotate_ca: model.tls.rotate_ca.clone(),
        user_server,
        // Read by [`observe`] after this pure reduction (it needs the API).
        cert_manager: None,
        leftover_certificate: None,
    }
}

/// The planner's view of a leaf; its names are every subjectAltName, IP
/// addresses included (a published endpoint's address is one).
fn leaf_of(info: &CertInfo, issuer: Option<String>) -> Leaf {
    Leaf {
        serial: info.serial.clone(),
        issuer,
        not_before: info.not_before,
        not_after: info.not_after,
        names: info.names(),
    }
}

fn absent(name: &str) -> Unusable {
    Unusable {
        missing: true,
        message: format!("Secret \"{name}\" does not exist"),
    }
}

fn unusable(name: &str, why: &str) -> Unusable {
    Unusable {
        missing: false,
        message: format!("Secret \"{name}\" {why}"),
    }
}

/// The PEM of the one certificate `info` out of `bundle`.
fn pem_of(bundle: &str, info: &CertInfo) -> String {
    pem_blocks(bundle)
        .into_iter()
        .find(|block| CertInfo::parse(block).is_ok_and(|i| i.fingerprint == info.fingerprint))
        .unwrap_or_default()
}

/// An instance's TLS Secret as read, every key optional (a Secret from an
/// interrupted write, or one a human edited, is repaired, not refused).
#[derive(Clone, Debug, Default)]
pub struct InstanceParts {
    pub ca_bundle: String,
    pub client_ca_bundle: String,
    pub server: Option<KeyPair>,
    pub api: Option<KeyPair>,
    pub replication: Option<KeyPair>,
}

impl InstanceParts {
    pub fn from_secret(secret: &Secret) -> Self {
        let pair = |cert: &str, key: &str| {
            Some(KeyPair {
                cert_pem: built::text(secret, cert).ok()?,
                key_pem: built::text(secret, key).ok()?,
            })
        };
        Self {
            ca_bundle: built::text(secret, files::CA_BUNDLE).unwrap_or_default(),
            client_ca_bundle: built::text(secret, files::CLIENT_CA_BUNDLE).unwrap_or_default(),
            server: pair(files::SERVER_CERT, files::SERVER_KEY),
            api: pair(files::API_CERT, files::API_KEY),
            replication: pair(files::REPLICATION_CERT, files::REPLICATION_KEY),
        }
    }
}

/// The PEM blocks of certificates in `bundle`, each with its END line.
pub fn pem_blocks(bundle: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    bundle
        .split_inclusive(END)
        .filter_map(|part| {
            let start = part.find("-----BEGIN CERTIFICATE-----")?;
            part.ends_with(END).then(|| format!("{}\n", &part[start..]))
        })
        .collect()
}

/// Sets `tusk_certificate_not_after_seconds` for the Database from what was
/// observed: the CAs, the operator's identity and each instance's leaves,
/// by the Secret that holds them.
pub fn set_metrics(
    metrics: &crate::telemetry::metrics::Metrics,
    namespace: &str,
    database: &str,
    tls: &TlsObserved,
) {
    use crate::lifecycle::tls::LeafKind;
    use crate::telemetry::metrics::CertificateKind;
    let seconds = |t: jiff::Timestamp| u64::try_from(t.as_second()).unwrap_or(0);
    let ca_secret = names::ca_secret(database);
    let mut all: Vec<(String, CertificateKind, u64)> = Vec::new();
    match &tls.authority {
        Authority::Managed { current, next, .. } => {
            all.extend(
                current
                    .iter()
                    .map(|c| (ca_secret.clone(), CertificateKind::Ca, seconds(c.not_after))),
            );
            all.extend(next.iter().map(|c| {
                (
                    ca_secret.clone(),
                    CertificateKind::NextCa,
                    seconds(c.not_after),
                )
            }));
        }
        Authority::User { secret, ca } => {
            all.extend(
                ca.iter()
                    .map(|c| (secret.clone(), CertificateKind::Ca, seconds(c.not_after))),
            );
        }
    }
    all.extend(tls.operator.iter().map(|l| {
        (
            ca_secret.clone(),
            CertificateKind::Operator,
            seconds(l.not_after),
        )
    }));
    all.extend(tls.app.leaf.iter().filter(|_| tls.app.wanted).map(|l| {
        (
            tls.app.secret.clone(),
            CertificateKind::Client,
            seconds(l.not_after),
        )
    }));
    for (name, instance) in &tls.instances {
        let Some(secret) = &instance.secret else {
            continue;
        };
        for (kind, metric) in [
            (LeafKind::Server, CertificateKind::Server),
            (LeafKind::Api, CertificateKind::Api),
            (LeafKind::Replication, CertificateKind::Replication),
        ] {
            if let Some(leaf) = secret.leaf(kind) {
                all.push((
                    names::instance_tls_secret(name),
                    metric,
                    seconds(leaf.not_after),
                ));
            }
        }
    }
    metrics.set_certificates(
        namespace,
        database,
        all.iter()
            .map(|(secret, kind, at)| (secret.as_str(), *kind, *at)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::lifecycle::{Instance, Pod};
    use crate::resources::BuildConfig;
    use crate::resources::tls::{CaMaterial, InstanceMaterial};
    use crate::tls::Authority as Issuer;

    fn model() -> ValidatedDatabase {
        let build = BuildConfig {
            postgres_repository: "localhost/postgres".into(),
            tusk_image: "localhost/tusk:dev".into(),
            image_pull_policy: None,
            instance_env: Vec::new(),
            default_store: None,
            instance_self_label: false,
            node_ports: Default::default(),
        };
        crate::api::validate::validated(&sample_database(), &build.defaults())
            .unwrap_or_else(|e| panic!("{}", crate::api::validate::summary(&e)))
    }

    fn pair(leaf: crate::tls::Leaf) -> KeyPair {
        KeyPair {
            cert_pem: leaf.cert_pem,
            key_pem: leaf.key_pem,
        }
    }

    /// Secrets as the apply step writes them read back to what the planner
    /// expects: every leaf issued by the CA, bundles of it, nothing to do.
    #[test]
    fn written_secrets_read_back_as_the_planner_expects() {
        let model = model();
        let now = jiff::Timestamp::now();
        let week = SignedDuration::from_hours(7 * 24);
        let ca = Issuer::generate("test CA", SignedDuration::from_hours(24 * 3650), now).unwrap();
        let operator = ca.issue_client("tusk-operator", week, now).unwrap();
        let ca_secret = built::ca_secret(
            &model,
            &CaMaterial {
                ca: Some(KeyPair {
                    cert_pem: ca.cert_pem().to_owned(),
                    key_pem: ca.key_pem().to_owned(),
                }),
                next: None,
                operator: pair(operator),
            },
        );
        let mut observed = Observed {
            database: model.name.clone(),
            now,
            ..Observed::default()
        };
        observed.instances.insert(
            1,
            Instance {
                pod: Some(Pod {
                    tls: true,
                    phase: PodPhase::Running,
                    ..Pod::default()
                }),
                ..Instance::default()
            },
        );
        let name = observed.name(1);
        let namespace = model.namespace.clone().unwrap_or_default();
        let names =
            crate::tls::names::server_names(&model.name, &namespace, CLUSTER_DOMAIN, &name, &[]);
        let material = InstanceMaterial {
            ca_bundle: ca.cert_pem().to_owned(),
            client_ca_bundle: ca.cert_pem().to_owned(),
            server: pair(ca.issue_server(&names, week, now).unwrap()),
            api: pair(ca.issue_identity(&name, week, now).unwrap()),
            replication: pair(ca.issue_client("tusk_replication", week, now).unwrap()),
        };
        let instances = BTreeMap::from([(
            name.clone(),
            Some(built::instance_tls_secret(&model, &name, &material)),
        )]);
        let read = TlsSecrets {
            ca: Some(ca_secret),
            instances,
            ..TlsSecrets::default()
        };
        let (tls, material) = reduce(
            &model,
            &read,
            &Snapshot::default(),
            &observed,
            Stage::Stable,
        );
        let fp = ca.info().fingerprint.clone();
        assert!(
            matches!(&tls.authority, Authority::Managed { current: Some(c), next: None, .. } if c.fingerprint == fp),
            "{:?}",
            tls.authority
        );
        let held = tls.instances[&name].secret.clone().unwrap_or_default();
        for leaf in [&held.server, &held.api, &held.replication] {
            assert_eq!(
                leaf.as_ref().and_then(|l| l.issuer.clone()),
                Some(fp.clone())
            );
        }
        assert_eq!(held.trusted, BTreeSet::from([fp.clone()]));
        assert_eq!(
            tls.operator.as_ref().and_then(|l| l.issuer.clone()),
            Some(fp.clone())
        );
        assert!(material.api_trust_bundle().contains("BEGIN CERTIFICATE"));
        let plan = crate::lifecycle::tls::plan(&tls);
        assert_eq!(plan.actions, vec![], "{plan:#?}");
    }
}

#[cfg(test)]
mod app_tests {
    //! `<db>-app`'s certificate, as the apply step writes it, read back.

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::resources::SecretKind;
    use crate::resources::tls::{CaMaterial, ClientMaterial};
    use crate::tls::Authority as Issuer;

    fn pair(leaf: crate::tls::Leaf) -> KeyPair {
        KeyPair {
            cert_pem: leaf.cert_pem,
            key_pem: leaf.key_pem,
        }
    }

    /// `<db>-app` as created, with the TLS keys applied over it by the TLS
    /// field manager (as the API server would record it).
    fn app_secret(model: &ValidatedDatabase, client: Option<KeyPair>) -> Secret {
        let mut secret = crate::resources::secret(model, SecretKind::App, "pw");
        let tls = built::credential_tls_apply(
            model,
            SecretKind::App,
            &ClientMaterial {
                ca_bundle: "CA".into(),
                client,
            },
        );
        let owned: serde_json::Map<String, serde_json::Value> = tls
            .data
            .iter()
            .flatten()
            .map(|(k, _)| (format!("f:{k}"), serde_json::json!({})))
            .collect();
        secret
            .data
            .get_or_insert_with(Default::default)
            .extend(tls.data.unwrap_or_default());
        secret.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some(built::TLS_FIELD_MANAGER.to_owned()),
            operation: Some("Apply".to_owned()),
            fields_v1: Some(FieldsV1(serde_json::json!({ "f:data": owned }))),
            ..ManagedFieldsEntry::default()
        }]);
        secret
    }

    #[test]
    fn the_app_certificate_reads_back_only_when_it_is_the_role_s_and_its_key_s() {
        let mut model = crate::resources::tests::model(&sample_database());
        model.tls.client_certificates = true;
        let now = jiff::Timestamp::now();
        let week = SignedDuration::from_hours(7 * 24);
        let ca = Issuer::generate("test CA", SignedDuration::from_hours(24 * 3650), now).unwrap();
        let ca_secret = built::ca_secret(
            &model,
            &CaMaterial {
                ca: Some(KeyPair {
                    cert_pem: ca.cert_pem().to_owned(),
                    key_pem: ca.key_pem().to_owned(),
                }),
                next: None,
                operator: pair(ca.issue_client("tusk-operator", week, now).unwrap()),
            },
        );
        let observed = Observed {
            database: model.name.clone(),
            now,
            ..Observed::default()
        };
        let read = |app: Secret| {
            let secrets = TlsSecrets {
                ca: Some(ca_secret.clone()),
                app: Some(app),
                ..TlsSecrets::default()
            };
            reduce(
                &model,
                &secrets,
                &Snapshot::default(),
                &observed,
                Stage::Stable,
            )
            .0
            .app
        };
        let good = ca.issue_client("app", week, now).unwrap();
        let app = read(app_secret(&model, Some(pair(good.clone()))));
        assert_eq!(app.secret, "orders-app");
        assert!(app.wanted && app.held);
        let leaf = app.leaf.expect("the role's certificate");
        assert_eq!(leaf.serial, good.info.serial);
        assert_eq!(leaf.issuer.as_deref(), Some(ca.info().fingerprint.as_str()));

        let someone = pair(ca.issue_client("someone", week, now).unwrap());
        assert_eq!(
            read(app_secret(&model, Some(someone))).leaf,
            None,
            "another role's"
        );
        let mismatched = KeyPair {
            key_pem: ca.issue_client("app", week, now).unwrap().key_pem,
            ..pair(good)
        };
        let app = read(app_secret(&model, Some(mismatched)));
        assert_eq!(app.leaf, None, "not its key");
        assert!(
            app.held,
            "but the TLS field manager wrote it: it can replace it"
        );

        let none = read(app_secret(&model, None));
        assert_eq!((none.leaf, none.held), (None, false));
        // Put there by someone else: not the TLS manager's to remove.
        let mut by_hand = app_secret(&model, None);
        by_hand
            .data
            .get_or_insert_with(Default::default)
            .insert("tls.crt".into(), k8s_openapi::ByteString(b"PEM".to_vec()));
        assert!(!read(by_hand).held);
    }
}

#[cfg(test)]
mod exposure_tests {
    //! The published endpoints' names on the server certificates, from the
    //! Secrets as read to the planner's decision and back.

    use super::*;
    use crate::api::expose::{ExposeTarget, ExposeType};
    use crate::lifecycle::endpoints::{
        EndpointProbe, EntryObserved, ExposureObserved, ExternalSecret, ServiceSeen,
    };
    use crate::lifecycle::tls::{LeafKind, TlsAction};
    use crate::lifecycle::{Instance, Pod};
    use crate::resources::tls::{CaMaterial, InstanceMaterial};
    use crate::tls::Authority as Issuer;

    fn model() -> ValidatedDatabase {
        crate::resources::tests::model(&crate::api::arbitrary::sample_database())
    }

    fn pair(leaf: crate::tls::Leaf) -> KeyPair {
        KeyPair {
            cert_pem: leaf.cert_pem,
            key_pem: leaf.key_pem,
        }
    }

    /// One instance whose pod starts (no manager confirms what it loaded
    /// yet, so its Secret may be written at once), publishing `rw` through
    /// a load balancer at `address` (none yet when `None`) under hostname
    /// `orders.example.com`.
    fn observed(
        model: &ValidatedDatabase,
        now: jiff::Timestamp,
        address: Option<&str>,
    ) -> Observed {
        let mut observed = Observed {
            database: model.name.clone(),
            now,
            ..Observed::default()
        };
        observed.instances.insert(
            1,
            Instance {
                pod: Some(Pod {
                    tls: true,
                    phase: PodPhase::Pending,
                    ..Pod::default()
                }),
                ..Instance::default()
            },
        );
        observed.published = Some(ExposureObserved {
            entries: vec![EntryObserved {
                target: ExposeTarget::Rw,
                type_: ExposeType::LoadBalancer,
                hostname: Some("orders.example.com".into()),
                allowed_source_ranges: vec!["0.0.0.0/0".into()],
                service: "orders-rw-lb".into(),
                seen: Some(ServiceSeen {
                    ingress: address.map(str::to_owned).into_iter().collect(),
                    node_port: None,
                }),
                probe: EndpointProbe::NotProbed,
            }],
            operator_address: None,
            external_secret: ExternalSecret::Absent,
        });
        observed
    }

    /// A load balancer address appears: the planner reissues the server
    /// leaf; issued for the names the apply step computes, it carries the
    /// address as an IP SAN and the planner is content again.
    #[test]
    fn a_published_address_reissues_the_server_leaf_which_then_covers_it() {
        let model = model();
        let now = jiff::Timestamp::now();
        let week = SignedDuration::from_hours(7 * 24);
        let ca = Issuer::generate("test CA", SignedDuration::from_hours(24 * 3650), now).unwrap();
        let ca_secret = built::ca_secret(
            &model,
            &CaMaterial {
                ca: Some(KeyPair {
                    cert_pem: ca.cert_pem().to_owned(),
                    key_pem: ca.key_pem().to_owned(),
                }),
                next: None,
                operator: pair(ca.issue_client("tusk-operator", week, now).unwrap()),
            },
        );
        let name = "orders-1".to_owned();
        let namespace = model.namespace.clone().unwrap_or_default();
        let secret_for = |names: &[String]| {
            let material = InstanceMaterial {
                ca_bundle: ca.cert_pem().to_owned(),
                client_ca_bundle: ca.cert_pem().to_owned(),
                server: pair(ca.issue_server(names, week, now).unwrap()),
                api: pair(ca.issue_identity(&name, week, now).unwrap()),
                replication: pair(ca.issue_client("tusk_replication", week, now).unwrap()),
            };
            BTreeMap::from([(
                name.clone(),
                Some(built::instance_tls_secret(&model, &name, &material)),
            )])
        };
        let plan_for = |observed: &Observed, instances: &BTreeMap<String, Option<Secret>>| {
            let read = TlsSecrets {
                ca: Some(ca_secret.clone()),
                instances: instances.clone(),
                ..TlsSecrets::default()
            };
            let (tls, material) =
                reduce(&model, &read, &Snapshot::default(), observed, Stage::Stable);
            (crate::lifecycle::tls::plan(&tls).actions, material)
        };

        // Before the load balancer assigns an address: the hostname only.
        let pending = observed(&model, now, None);
        let (_, material) = plan_for(&pending, &BTreeMap::new());
        let first = secret_for(&material.server_names(&model.name, &namespace, &name));
        assert_eq!(
            plan_for(&pending, &first).0,
            vec![],
            "the hostname is covered"
        );

        // The address appears: only the server leaf is issued again.
        let assigned = observed(&model, now, Some("192.0.2.64"));
        let (actions, material) = plan_for(&assigned, &first);
        assert!(
            matches!(&actions[..], [TlsAction::WriteInstance { instance, issue, .. }]
                if instance == &name && issue == &[LeafKind::Server]),
            "{actions:#?}"
        );
        let names = material.server_names(&model.name, &namespace, &name);
        let second = secret_for(&names);
        let leaf = crate::tls::CertInfo::parse(
            &InstanceParts::from_secret(second[&name].as_ref().unwrap())
                .server
                .unwrap()
                .cert_pem,
        )
        .unwrap();
        assert!(leaf.dns_names.contains(&"orders.example.com".to_owned()));
        assert_eq!(
            leaf.ip_addresses,
            vec![std::net::IpAddr::from([192, 0, 2, 64])]
        );
        assert_eq!(
            plan_for(&assigned, &second).0,
            vec![],
            "the address is covered"
        );

        // The address goes away (the Service was removed from the spec):
        // the leaf naming it is kept, nothing is issued for that alone.
        assert_eq!(plan_for(&pending, &second).0, vec![]);
    }
}
