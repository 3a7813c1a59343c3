//! Which instance an address is: the instance pods and their TLS Secrets,
//! watched through the API server, and the TLS material each one's manager
//! would serve (its `api.crt`, PostgreSQL's `tls.crt`) and report.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use rustls::ServerConfig;
use tusk::contract::tls::{self as files, TlsReport};
use tusk::contract::{SyncSettings, env};
use tusk::resources::labels;
use tusk::tls::CertInfo;

use super::sim::Seed;

/// A pod found by its address.
#[derive(Clone, Debug)]
pub struct Found {
    pub namespace: String,
    pub name: String,
    /// Built with a TLS Secret: its manager serves HTTPS.
    pub tls: bool,
    pub seed: Seed,
}

/// What an instance's TLS Secret makes: the servers' configurations and
/// what the manager reports loaded.
pub struct Material {
    pub api: Arc<ServerConfig>,
    pub postgres: Arc<ServerConfig>,
    pub postgres_direct: Arc<ServerConfig>,
    pub report: TlsReport,
}

/// Built material by namespace and instance, with the Secret version it
/// was built from.
type MaterialCache = HashMap<(String, String), (String, Arc<Material>)>;

/// The watched pods and Secrets, and the material built from each Secret
/// version.
pub struct Pods {
    pods: Store<Pod>,
    secrets: Store<Secret>,
    material: Mutex<MaterialCache>,
}

impl Pods {
    /// Starts watching every instance pod and instance TLS Secret, in all
    /// namespaces, and waits for the first lists.
    pub async fn watch(client: Client) -> Result<Arc<Self>, watcher::Error> {
        let selector = watcher::Config::default().labels(labels::TUSK_INSTANCE);
        let (pods, pod_writer) = reflector::store();
        let (secrets, secret_writer) = reflector::store();
        let pod_stream = watcher(Api::<Pod>::all(client.clone()), selector.clone())
            .default_backoff()
            .reflect(pod_writer)
            .applied_objects();
        let secret_stream = watcher(Api::<Secret>::all(client), selector)
            .default_backoff()
            .reflect(secret_writer)
            .applied_objects();
        tokio::spawn(pod_stream.for_each(|_| futures::future::ready(())));
        tokio::spawn(secret_stream.for_each(|_| futures::future::ready(())));
        let _ = pods.wait_until_ready().await;
        let _ = secrets.wait_until_ready().await;
        Ok(Arc::new(Pods {
            pods,
            secrets,
            material: Mutex::default(),
        }))
    }

    /// The instance pod whose IP is `ip`.
    pub fn find(&self, ip: IpAddr) -> Option<Found> {
        let ip = ip.to_string();
        let pod = self.pods.find(|p| {
            p.status.as_ref().and_then(|s| s.pod_ip.as_deref()) == Some(ip.as_str())
                && p.metadata.deletion_timestamp.is_none()
        })?;
        Some(Found {
            namespace: pod.namespace()?,
            name: pod.name_any(),
            tls: tusk::resources::serves_tls(&pod),
            seed: seed(&pod),
        })
    }

    /// Whether instance pod `name` exists and is not being deleted.
    pub fn exists(&self, namespace: &str, name: &str) -> bool {
        self.pods
            .get(&ObjectRef::new(name).within(namespace))
            .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
    }

    /// The material of instance `name`'s TLS Secret as it is now; `None`
    /// while the Secret is not there or not usable.
    pub fn material(&self, namespace: &str, name: &str) -> Option<Arc<Material>> {
        let secret_name = tusk::resources::names::instance_tls_secret(name);
        let secret = self
            .secrets
            .get(&ObjectRef::new(&secret_name).within(namespace))?;
        let version = secret.resource_version().unwrap_or_default();
        let key = (namespace.to_owned(), name.to_owned());
        let mut cache = self.material.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((built_from, material)) = cache.get(&key)
            && *built_from == version
        {
            return Some(material.clone());
        }
        let material = match build(&secret) {
            Ok(material) => Arc::new(material),
            Err(why) => {
                tracing::warn!(%namespace, %name, %why, "unusable TLS Secret");
                return None;
            }
        };
        cache.insert(key, (version, material.clone()));
        Some(material)
    }
}

fn build(secret: &Secret) -> Result<Material, String> {
    let data = secret.data.clone().unwrap_or_default();
    let text = |key: &str| {
        data.get(key)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .ok_or_else(|| format!("no {key}"))
    };
    let (api_cert, api_key) = (text(files::API_CERT)?, text(files::API_KEY)?);
    let (server_cert, server_key) = (text(files::SERVER_CERT)?, text(files::SERVER_KEY)?);
    let config = |cert: &str, key: &str, alpn: &[&[u8]]| {
        tusk::tls::rustls_config::server_config(cert, key, None, alpn).map_err(|e| e.to_string())
    };
    let serial = |pem: &str| CertInfo::parse(pem).map(|c| c.serial).unwrap_or_default();
    let fingerprints = |key: &str| {
        text(key)
            .ok()
            .and_then(|pem| CertInfo::parse_bundle(&pem).ok())
            .map(|certs| certs.into_iter().map(|c| c.fingerprint).collect())
            .unwrap_or_default()
    };
    Ok(Material {
        api: config(&api_cert, &api_key, &[])?,
        postgres: config(&server_cert, &server_key, &[])?,
        postgres_direct: config(
            &server_cert,
            &server_key,
            &[tusk::tls::probe::ALPN_POSTGRESQL],
        )?,
        report: TlsReport {
            server_serial: serial(&server_cert),
            api_serial: serial(&api_cert),
            trusted: fingerprints(files::CA_BUNDLE),
            client_trusted: fingerprints(files::CLIENT_CA_BUNDLE),
            error: None,
        },
    })
}

/// The manager's view at start, from the pod as built.
pub fn seed(pod: &Pod) -> Seed {
    let env: BTreeMap<&str, &str> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.env.iter().flatten())
        .filter_map(|e| Some((e.name.as_str(), e.value.as_deref()?)))
        .collect();
    let bootstrap = pod
        .annotations()
        .get(env::BOOTSTRAP_ANNOTATION)
        .map(String::as_str);
    let image = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .find(|c| c.name == "postgres")
        .and_then(|c| c.image.as_deref())
        .unwrap_or_default();
    let (major, minor) = version_of(image);
    let sync = (env.get(env::SYNC_MODE) == Some(&"sync")).then(|| SyncSettings {
        min: env
            .get(env::MIN_SYNC)
            .and_then(|m| m.parse().ok())
            .unwrap_or(1),
        standbys: env
            .get(env::SYNC_STANDBYS)
            .map(|s| {
                s.split(',')
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
    });
    Seed {
        database: pod
            .labels()
            .get(labels::DATABASE)
            .cloned()
            .unwrap_or_default(),
        primary: bootstrap != Some("clone"),
        major,
        minor,
        parameters: env
            .get(env::PARAMETERS)
            .and_then(|p| serde_json::from_str(p).ok())
            .unwrap_or_default(),
        sync,
    }
}

/// `(major, minor)` of an image's tag: `postgres:17.6` → (17, 6),
/// `postgres:17` → (17, 0); (17, 0) when the tag says neither.
pub fn version_of(image: &str) -> (u32, u32) {
    let tag = image
        .rsplit_once(':')
        .map(|(_, t)| t)
        .filter(|t| !t.contains('/'))
        .unwrap_or_default();
    let mut parts = tag.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|m| m.parse().ok()).unwrap_or(17);
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    (major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_comes_from_the_image_tag() {
        assert_eq!(version_of("postgres:17.6"), (17, 6));
        assert_eq!(version_of("localhost/postgres:16"), (16, 0));
        assert_eq!(version_of("localhost:5000/postgres"), (17, 0));
        assert_eq!(version_of("postgres:15.4-bookworm"), (15, 4));
    }

    #[test]
    fn the_seed_reads_the_bootstrap_the_parameters_and_the_sync_mode() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "orders-2",
                "labels": { "tusk.dev/database": "orders" },
                "annotations": { "tusk.dev/bootstrap": "clone" }
            },
            "spec": { "containers": [{
                "name": "postgres",
                "image": "postgres:17.6",
                "env": [
                    { "name": "TUSK_PARAMETERS", "value": "{\"work_mem\":\"8MB\"}" },
                    { "name": "TUSK_SYNC_MODE", "value": "sync" },
                    { "name": "TUSK_MIN_SYNC", "value": "1" },
                    { "name": "TUSK_SYNC_STANDBYS", "value": "orders-1,orders-3" }
                ]
            }]}
        }))
        .unwrap_or_default();
        let seed = seed(&pod);
        assert_eq!(seed.database, "orders");
        assert!(!seed.primary);
        assert_eq!((seed.major, seed.minor), (17, 6));
        assert_eq!(seed.parameters["work_mem"], "8MB");
        let sync = seed.sync.unwrap_or_default();
        assert_eq!(sync.min, 1);
        assert_eq!(sync.standbys, vec!["orders-1", "orders-3"]);
    }
}
