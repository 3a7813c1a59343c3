//! Serving certificates provided by someone else: cert-manager (a Secret mounted
//! as files) or OLM (which mounts its own certificate into the Deployment). Tusk
//! then only serves what it finds, reloading it when the files change, and
//! leaves the Secret and every caBundle to whoever issued it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use tokio::sync::watch;
use tracing::{info, warn};

use super::Error;

/// The PEM pair as mounted from a `kubernetes.io/tls` Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PemPair {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>, Error> {
    let path = dir.join(name);
    std::fs::read(&path).map_err(|source| Error::CertFile { path, source })
}

/// Reads `tls.crt` and `tls.key` from `dir`.
pub fn read_pair(dir: &Path) -> Result<PemPair, Error> {
    Ok(PemPair {
        cert: read(dir, "tls.crt")?,
        key: read(dir, "tls.key")?,
    })
}

/// The TLS configuration the server starts with; fails when the files are
/// missing or unusable, so a misconfigured mount stops the operator early.
pub async fn initial(dir: &Path) -> Result<(RustlsConfig, PemPair), Error> {
    let pair = read_pair(dir)?;
    let tls = RustlsConfig::from_pem(pair.cert.clone(), pair.key.clone())
        .await
        .map_err(Error::Tls)?;
    Ok((tls, pair))
}

/// Re-reads the files every `interval` until `shutdown`, reloading `tls` when
/// they changed. Kubernetes swaps a mounted Secret atomically (a symlink flip),
/// so a read never sees half of a renewal; a pair that does not load (the key
/// and certificate briefly disagree) is retried on the next pass.
pub async fn watch(
    dir: PathBuf,
    tls: RustlsConfig,
    mut current: PemPair,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let pair = match read_pair(&dir) {
            Ok(pair) => pair,
            Err(error) => {
                warn!(%error, "could not read the webhook certificate files");
                continue;
            }
        };
        if pair == current {
            continue;
        }
        match tls
            .reload_from_pem(pair.cert.clone(), pair.key.clone())
            .await
        {
            Ok(()) => {
                info!(dir = %dir.display(), "reloaded the webhook certificate from its files");
                current = pair;
            }
            Err(error) => warn!(%error, "could not load the renewed webhook certificate"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use k8s_openapi::jiff::Timestamp;
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
    use tokio_rustls::rustls::{ClientConfig, RootCertStore};

    use super::*;
    use crate::webhook::certs;
    use crate::webhook::{WebhookState, serve};

    /// A fresh directory under the system's temp dir (removed by the test).
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tusk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write(dir: &Path, bundle: &certs::CertBundle) {
        // The way the kubelet updates a Secret volume: new files, then a rename.
        let staging = dir.join("..staging");
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("tls.crt"), &bundle.tls_cert).unwrap();
        std::fs::write(staging.join("tls.key"), &bundle.tls_key).unwrap();
        std::fs::rename(staging.join("tls.crt"), dir.join("tls.crt")).unwrap();
        std::fs::rename(staging.join("tls.key"), dir.join("tls.key")).unwrap();
    }

    /// Completes a TLS handshake trusting only `ca`, under the Service's DNS name.
    async fn handshake(addr: SocketAddr, ca: &str) -> Result<(), String> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let config = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let name = ServerName::try_from("tusk-webhook.tusk-system.svc").unwrap();
        TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn missing_files_name_the_path() {
        let dir = scratch("no-certs");
        let error = initial(&dir).await.unwrap_err().to_string();
        assert!(
            error.contains(&format!("{}/tls.crt", dir.display())),
            "{error}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_renewed_certificate_on_disk_is_served_without_a_restart() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = scratch("cert-files");
        let first = certs::generate("tusk-webhook", "tusk-system", Timestamp::now()).unwrap();
        write(&dir, &first);
        let (tls, pair) = initial(&dir).await.unwrap();

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let (stop, shutdown) = watch::channel(false);
        let server = tokio::spawn(serve(
            addr,
            tls.clone(),
            WebhookState {
                client: None,
                default_store: None,
                node_ports: Default::default(),
            },
            shutdown.clone(),
        ));
        tokio::spawn(watch(
            dir.clone(),
            tls,
            pair,
            Duration::from_millis(50),
            shutdown,
        ));
        let mut served = Err(String::new());
        for _ in 0..100 {
            served = handshake(addr, &first.ca_cert).await;
            if served.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        served.expect("the first certificate is served");

        // A new CA as well: only a reload can make a client trusting it succeed.
        let second = certs::generate("tusk-webhook", "tusk-system", Timestamp::now()).unwrap();
        assert_ne!(first.ca_cert, second.ca_cert);
        write(&dir, &second);
        let mut reloaded = Err(String::new());
        for _ in 0..100 {
            reloaded = handshake(addr, &second.ca_cert).await;
            if reloaded.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        reloaded.expect("the renewed certificate is served");
        assert!(handshake(addr, &first.ca_cert).await.is_err());

        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }
}
