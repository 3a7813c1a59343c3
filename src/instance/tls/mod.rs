//! The instance's TLS material: what its Secret holds (see
//! [`crate::contract::tls`]), read as one set so that a certificate is never
//! paired with another generation's key, and kept in effect without a
//! restart.
//!
//! At start the manager validates the mounted Secret and copies it into a
//! private directory ([`private`]) that PostgreSQL's `ssl_*_file` settings
//! and the manager's own connections read. Then [`watch`] polls the mount
//! every [`POLL`]: the kubelet swaps a Secret volume atomically, so a
//! reading that differs from the material in effect is a new Secret. It is
//! validated (every key matches its certificate), copied, PostgreSQL reloads
//! (`pg_reload_conf()`, never a restart: new connections get the new
//! certificate) and the material is published in a `watch` channel
//! ([`super::Shared::tls`]) that the instance API's server follows. A
//! reading that fails validation leaves the previous material in effect and
//! is reported ([`Watched::report`], `Status.tls.error`).
//!
//! [`upstream`] decides how this instance reaches its primary (with the
//! replication certificate and `verify-full`, or the old password way when
//! the primary's pod has no TLS); [`crate::tls::postgres`] carries the
//! manager's own SQL connections over TLS.

mod material;
mod private;
pub mod upstream;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use crate::contract::tls::{self as files, TlsReport};
use crate::tls::CertInfo;

use super::{Error, InstanceConfig, Shared, is_set, sql};

pub use crate::tls::postgres::MakeRustls;
pub use material::Material;

/// How often the mount is read.
pub const POLL: Duration = Duration::from_secs(2);

/// The TLS material in effect and what is reported about it.
pub struct Watched {
    /// The mounted Secret.
    source: PathBuf,
    /// The private copy (see [`private`]).
    dir: PathBuf,
    current: watch::Sender<Arc<Material>>,
    report: Mutex<TlsReport>,
}

impl Watched {
    /// Reads, validates and copies the mounted Secret: with TLS configured
    /// the manager does not start without usable material (PostgreSQL
    /// would refuse `ssl = on` anyway).
    pub fn start(config: &InstanceConfig, source: &Path) -> Result<Watched, Error> {
        let material = read_settled(source)?;
        private::validate(&material).map_err(|why| {
            Error::Tls(format!(
                "the TLS Secret mounted at {} is not usable: {why}",
                source.display()
            ))
        })?;
        let dir = private::dir(config);
        private::install(&dir, &material)?;
        let report = report(&material, None);
        tracing::info!(
            server_serial = %report.server_serial,
            api_serial = %report.api_serial,
            dir = %dir.display(),
            "TLS material loaded"
        );
        let (current, _) = watch::channel(Arc::new(material));
        Ok(Watched {
            source: source.to_owned(),
            dir,
            current,
            report: Mutex::new(report),
        })
    }

    /// The material in effect, and its changes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Material>> {
        self.current.subscribe()
    }

    /// `Status.tls`.
    pub fn report(&self) -> TlsReport {
        self.report
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A file of the private copy (one of [`files::FILES`]).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn set_error(&self, error: Option<String>) {
        self.report
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .error = error;
    }
}

/// What `/status` says about `material` (validated, so every part parses).
fn report(material: &Material, error: Option<String>) -> TlsReport {
    let serial = |pem: &str| CertInfo::parse(pem).map(|c| c.serial).unwrap_or_default();
    let fingerprints = |pem: &str| {
        CertInfo::parse_bundle(pem)
            .map(|certs| certs.into_iter().map(|c| c.fingerprint).collect())
            .unwrap_or_default()
    };
    TlsReport {
        server_serial: serial(&material.server_cert),
        api_serial: serial(&material.api_cert),
        trusted: fingerprints(&material.ca_bundle),
        client_trusted: fingerprints(&material.client_ca_bundle),
        error,
    }
}

/// One reading of the mount that two reads in a row agree on: a reading
/// that straddled the kubelet's swap is never loaded.
fn read_settled(source: &Path) -> Result<Material, Error> {
    let mut last = Material::read(source)?;
    for _ in 0..5 {
        let again = Material::read(source)?;
        if again == last {
            return Ok(last);
        }
        last = again;
    }
    Err(Error::Tls(format!(
        "the TLS Secret mounted at {} kept changing while it was read",
        source.display()
    )))
}

/// Follow the mounted Secret until `stop`.
pub(crate) async fn watch(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let Some(watched) = shared.tls.as_ref() else {
        return;
    };
    let mut interval = tokio::time::interval(POLL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The last reading refused, so that a broken Secret is logged once.
    let mut refused: Option<Material> = None;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let material = match read_settled(&watched.source) {
            Ok(material) => material,
            Err(error) => {
                tracing::debug!(%error, "cannot read the TLS Secret; retrying");
                continue;
            }
        };
        if **watched.current.borrow() == material {
            if refused.take().is_some() {
                watched.set_error(None);
            }
            continue;
        }
        if refused.as_ref() == Some(&material) {
            continue;
        }
        match apply(&shared, watched, material.clone()).await {
            Ok(()) => refused = None,
            Err(error) => {
                tracing::error!(%error, "the new TLS material is not loaded; the previous stays in effect");
                watched.set_error(Some(error));
                refused = Some(material);
            }
        }
    }
}

/// Validate, copy, reload PostgreSQL and publish a new reading.
async fn apply(shared: &Shared, watched: &Watched, material: Material) -> Result<(), String> {
    private::validate(&material)?;
    {
        // Rendering, reloads and promotion rewrite what PostgreSQL reads.
        let _config = shared.config_lock.lock().await;
        private::install(&watched.dir, &material).map_err(|error| error.to_string())?;
        // Not running (or restarting): the next start reads the new files.
        if is_set(&shared.running)
            && let Err(error) = reload(shared).await
        {
            tracing::warn!(%error, "PostgreSQL did not reload the new TLS files");
        }
    }
    let report = report(&material, None);
    tracing::info!(
        server_serial = %report.server_serial,
        api_serial = %report.api_serial,
        "new TLS material in effect"
    );
    *watched
        .report
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = report;
    watched.current.send_replace(Arc::new(material));
    Ok(())
}

async fn reload(shared: &Shared) -> Result<(), String> {
    let config = &shared.config;
    let client = sql::connect_local(&config.socket_dir, config.port)
        .await
        .map_err(|error| format!("cannot connect to reload PostgreSQL: {error}"))?;
    sql::reload(&client)
        .await
        .map_err(|error| format!("PostgreSQL refused the reload: {error}"))
}

/// The names of the private copy's files PostgreSQL reads.
pub(crate) fn postgres_settings(
    watched: &Watched,
    min_version: &str,
) -> crate::postgres::config::Tls {
    let path = |name: &str| watched.file(name).to_string_lossy().into_owned();
    crate::postgres::config::Tls {
        cert_file: path(files::SERVER_CERT),
        key_file: path(files::SERVER_KEY),
        client_ca_file: path(files::CLIENT_CA_BUNDLE),
        min_version: min_version.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(serial: u64, ca: bool) -> String {
        let mut params =
            rcgen::CertificateParams::new(vec!["orders-1".to_owned()]).expect("params");
        params.serial_number = Some(rcgen::SerialNumber::from(serial));
        if ca {
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("sign").pem()
    }

    #[test]
    fn the_report_names_the_serials_and_every_bundle_certificate() {
        let (old_ca, new_ca) = (certificate(1, true), certificate(2, true));
        let material = Material {
            ca_bundle: format!("{old_ca}{new_ca}"),
            client_ca_bundle: new_ca.clone(),
            server_cert: certificate(0xabcdef, false),
            server_key: String::new(),
            api_cert: certificate(0x0102, false),
            api_key: String::new(),
            replication_cert: certificate(3, false),
            replication_key: String::new(),
        };
        let report = report(&material, Some("why".to_owned()));
        assert_eq!(report.server_serial, "abcdef");
        assert_eq!(report.api_serial, "0102");
        let print = |pem: &str| CertInfo::parse(pem).expect("parse").fingerprint;
        assert_eq!(report.trusted, vec![print(&old_ca), print(&new_ca)]);
        assert_eq!(report.client_trusted, vec![print(&new_ca)]);
        assert_eq!(report.error.as_deref(), Some("why"));
    }
}
