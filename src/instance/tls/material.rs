//! One reading of the mounted TLS Secret.

use std::path::Path;

use crate::contract::tls;

use super::super::Error;

/// The PEM files of an instance's TLS Secret, as read together.
#[derive(Clone, PartialEq, Eq)]
pub struct Material {
    /// CAs that verify PostgreSQL server certificates ([`tls::CA_BUNDLE`]).
    pub ca_bundle: String,
    /// CAs that verify client certificates ([`tls::CLIENT_CA_BUNDLE`]).
    pub client_ca_bundle: String,
    pub server_cert: String,
    pub server_key: String,
    pub api_cert: String,
    pub api_key: String,
    pub replication_cert: String,
    pub replication_key: String,
}

impl std::fmt::Debug for Material {
    /// Keys stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Material")
            .field("ca_bundle", &self.ca_bundle.len())
            .field("client_ca_bundle", &self.client_ca_bundle.len())
            .field("server_cert", &self.server_cert.len())
            .field("api_cert", &self.api_cert.len())
            .field("replication_cert", &self.replication_cert.len())
            .finish_non_exhaustive()
    }
}

impl Material {
    /// Every file of the Secret mounted at `dir`; a missing file is an error
    /// (the operator writes them all at once).
    pub fn read(dir: &Path) -> Result<Self, Error> {
        let file = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| Error::Io {
                action: "reading the TLS Secret",
                path,
                source,
            })
        };
        Ok(Self {
            ca_bundle: file(tls::CA_BUNDLE)?,
            client_ca_bundle: file(tls::CLIENT_CA_BUNDLE)?,
            server_cert: file(tls::SERVER_CERT)?,
            server_key: file(tls::SERVER_KEY)?,
            api_cert: file(tls::API_CERT)?,
            api_key: file(tls::API_KEY)?,
            replication_cert: file(tls::REPLICATION_CERT)?,
            replication_key: file(tls::REPLICATION_KEY)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_file_and_names_a_missing_one() {
        let dir = std::env::temp_dir().join(format!("tusk-tls-material-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        for name in tls::FILES {
            std::fs::write(dir.join(name), format!("pem of {name}")).expect("write");
        }
        let material = Material::read(&dir).expect("read");
        assert_eq!(material.server_key, "pem of tls.key");
        assert_eq!(material.client_ca_bundle, "pem of client-ca.crt");
        assert!(!format!("{material:?}").contains("pem of tls.key"));

        std::fs::remove_file(dir.join(tls::REPLICATION_KEY)).expect("remove");
        let err = Material::read(&dir).expect_err("a missing key");
        std::fs::remove_dir_all(&dir).ok();
        assert!(
            err.to_string().contains("replication.key")
                || format!("{err:?}").contains("replication.key"),
            "{err:?}"
        );
    }
}
