//! Where the probe writes: the Database's `-rw` Service as its `-app`
//! Secret describes it (its role's certificate presented when the Secret
//! holds one), with the libpq settings of an application that
//! wants to notice a vanished primary quickly (a short connect timeout, TCP
//! keepalives and a user timeout, so a connection to a primary behind a cut
//! network fails in seconds instead of TCP's minutes of retransmissions).

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use tokio_postgres::{Client, NoTls};

use crate::tls::postgres::MakeRustls;

use super::Error;

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection to `-rw`'s primary, as often as asked.
#[derive(Clone)]
pub struct Target {
    config: tokio_postgres::Config,
    tls: Option<MakeRustls>,
}

impl Target {
    /// From the Secret mounted at `dir`; `address` is dialled when given
    /// (the name verified stays the Secret's `host`).
    pub fn load(dir: &Path, address: Option<IpAddr>) -> Result<Self, Error> {
        let read = |key: &'static str| -> Result<Option<String>, Error> {
            let path = dir.join(key);
            match std::fs::read_to_string(&path) {
                Ok(text) => Ok(Some(text.trim().to_owned())),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(source) => Err(Error::Read { path, source }),
            }
        };
        let required = |key: &'static str| {
            read(key)?
                .filter(|v| !v.is_empty())
                .ok_or(Error::Missing(key))
        };
        let host = required("host")?;
        let port: u16 = required("port")?
            .parse()
            .map_err(|_| Error::Missing("port"))?;
        let mut config = tokio_postgres::Config::new();
        config
            .host(&host)
            .port(port)
            .user(required("username")?)
            .password(required("password")?)
            .dbname(required("dbname")?)
            .application_name("tusk-drill-probe")
            .connect_timeout(CONNECT_TIMEOUT)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(1))
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3)
            .tcp_user_timeout(Duration::from_secs(3));
        if let Some(address) = address {
            config.hostaddr(address);
        }
        // With spec.tls.clientCertificates the role logs in with its
        // certificate: pg_hba refuses its password.
        let identity = match (read("tls.crt")?, read("tls.key")?) {
            (Some(cert), Some(key)) if !cert.is_empty() && !key.is_empty() => Some((cert, key)),
            _ => None,
        };
        let identity = identity
            .as_ref()
            .map(|(cert, key)| (cert.as_str(), key.as_str()));
        let tls = match read("ca.crt")?.filter(|ca| !ca.is_empty()) {
            None => None,
            Some(ca) => {
                config.ssl_mode(tokio_postgres::config::SslMode::Require);
                let client = crate::tls::rustls_config::client_config(&ca, identity, &host)
                    .map_err(|source| Error::Tls {
                        host: host.clone(),
                        source,
                    })?;
                Some(MakeRustls::new(client, &host).map_err(|_| Error::Name(host.clone()))?)
            }
        };
        Ok(Target { config, tls })
    }

    /// The same server, database `dbname`.
    pub fn with_dbname(mut self, dbname: &str) -> Self {
        self.config.dbname(dbname);
        self
    }

    /// A new connection; its driver runs on the runtime until the client
    /// is dropped.
    pub async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        match &self.tls {
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.clone()).await?;
                tokio::spawn(connection);
                Ok(client)
            }
            None => {
                let (client, connection) = self.config.connect(NoTls).await?;
                tokio::spawn(connection);
                Ok(client)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tusk-probe-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn secret(dir: &Path, entries: &[(&str, &str)]) {
        for (key, value) in entries {
            std::fs::write(dir.join(key), value).unwrap();
        }
    }

    const PLAIN: [(&str, &str); 5] = [
        ("host", "orders-rw.shop.svc"),
        ("port", "5432"),
        ("username", "app"),
        ("password", "pw"),
        ("dbname", "app"),
    ];

    #[test]
    fn a_secret_without_a_ca_dials_in_plaintext_and_one_with_a_ca_verifies_the_host() {
        let dir = scratch("tls");
        secret(&dir, &PLAIN);
        let target = Target::load(&dir, Some("10.0.0.7".parse().unwrap())).unwrap();
        assert!(target.tls.is_none());
        assert_eq!(
            target.config.get_hostaddrs(),
            &["10.0.0.7".parse::<IpAddr>().unwrap()]
        );

        secret(&dir, &[("ca.crt", crate::tls::test_support::USER_CA_CRT)]);
        let target = Target::load(&dir, None).unwrap();
        assert!(target.tls.is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// With the role's certificate in the Secret the probe presents it; a
    /// certificate whose key is not beside it is refused, not ignored.
    #[test]
    fn a_secret_with_the_role_s_certificate_presents_it() {
        use crate::tls::test_support::{ca, days, now};
        let dir = scratch("client");
        let ca = ca();
        let leaf = ca.issue_client("app", days(1), now()).unwrap();
        secret(&dir, &PLAIN);
        secret(
            &dir,
            &[
                ("ca.crt", ca.cert_pem()),
                ("tls.crt", &leaf.cert_pem),
                ("tls.key", &leaf.key_pem),
            ],
        );
        let target = Target::load(&dir, None).unwrap();
        assert!(target.tls.is_some());
        let other = ca.issue_client("app", days(1), now()).unwrap();
        secret(&dir, &[("tls.key", &other.key_pem)]);
        let err = Target::load(&dir, None).err().unwrap();
        assert!(matches!(err, Error::Tls { .. }), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_key_is_named() {
        let dir = scratch("missing");
        secret(&dir, &PLAIN[..4]);
        let err = Target::load(&dir, None).err().unwrap();
        assert_eq!(err.to_string(), "the credentials have no usable dbname");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
