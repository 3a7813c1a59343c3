//! The manager's private copy of the TLS Secret, which PostgreSQL and the
//! manager's own connections read: `<TUSK_SOCKET_DIR>/tls/`, every file
//! mode 0600 and owned by the manager's user. The mounted files belong to
//! root or to the pod's fsGroup and are group-readable, which PostgreSQL
//! refuses for a key; and a copy that changes only after validation keeps
//! a half-rotated or broken Secret from reaching PostgreSQL.

use std::path::{Path, PathBuf};

use crate::contract::tls;
use crate::tls::CertInfo;
use crate::tls::inspect::check_key;

use super::super::{Error, InstanceConfig, files};
use super::Material;

/// The private copy's directory.
pub fn dir(config: &InstanceConfig) -> PathBuf {
    config.socket_dir.join("tls")
}

/// Why a reading of the Secret is not loaded; names the file at fault.
pub fn validate(material: &Material) -> Result<(), String> {
    for (name, bundle) in [
        (tls::CA_BUNDLE, &material.ca_bundle),
        (tls::CLIENT_CA_BUNDLE, &material.client_ca_bundle),
    ] {
        CertInfo::parse_bundle(bundle).map_err(|error| format!("{name}: {error}"))?;
    }
    for (cert_name, cert, key_name, key) in [
        (
            tls::SERVER_CERT,
            &material.server_cert,
            tls::SERVER_KEY,
            &material.server_key,
        ),
        (
            tls::API_CERT,
            &material.api_cert,
            tls::API_KEY,
            &material.api_key,
        ),
        (
            tls::REPLICATION_CERT,
            &material.replication_cert,
            tls::REPLICATION_KEY,
            &material.replication_key,
        ),
    ] {
        check_key("the certificate", cert, key)
            .map_err(|error| format!("{cert_name} and {key_name}: {error}"))?;
    }
    Ok(())
}

/// Write `material` into `dir`, each file through a temporary file and a
/// rename (never half a file), keys included mode 0600.
pub fn install(dir: &Path, material: &Material) -> Result<(), Error> {
    create_dir(dir)?;
    for (name, contents) in [
        (tls::CA_BUNDLE, &material.ca_bundle),
        (tls::CLIENT_CA_BUNDLE, &material.client_ca_bundle),
        (tls::SERVER_CERT, &material.server_cert),
        (tls::SERVER_KEY, &material.server_key),
        (tls::API_CERT, &material.api_cert),
        (tls::API_KEY, &material.api_key),
        (tls::REPLICATION_CERT, &material.replication_cert),
        (tls::REPLICATION_KEY, &material.replication_key),
    ] {
        files::write_if_changed(&dir.join(name), contents)?;
    }
    Ok(())
}

fn create_dir(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| Error::Io {
            action: "create the private TLS directory",
            path: dir.to_owned(),
            source,
        })?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|source| {
        Error::Io {
            action: "set the mode of",
            path: dir.to_owned(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    fn material() -> Material {
        let (ca, _) = pair("ca");
        let (server_cert, server_key) = pair("server");
        let (api_cert, api_key) = pair("api");
        let (replication_cert, replication_key) = pair("replication");
        Material {
            ca_bundle: ca.clone(),
            client_ca_bundle: ca,
            server_cert,
            server_key,
            api_cert,
            api_key,
            replication_cert,
            replication_key,
        }
    }

    #[test]
    fn a_key_that_is_not_its_certificate_s_is_refused_by_name() {
        let good = material();
        assert_eq!(validate(&good), Ok(()));
        let mut swapped = good.clone();
        swapped.api_key = good.replication_key.clone();
        let error = validate(&swapped).expect_err("mismatched");
        assert_eq!(
            error,
            "api.crt and api.key: the private key does not match the certificate"
        );
        let mut garbage = good.clone();
        garbage.client_ca_bundle = "nothing".to_owned();
        let error = validate(&garbage).expect_err("no certificate");
        assert!(error.starts_with("client-ca.crt: "), "{error}");
        let mut keyless = good;
        keyless.server_key = String::new();
        let error = validate(&keyless).expect_err("no key");
        assert!(error.starts_with("tls.crt and tls.key: "), "{error}");
    }

    #[test]
    fn the_copy_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tusk-tls-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let material = material();
        install(&dir.join("tls"), &material).expect("install");
        for name in tls::FILES {
            let meta = std::fs::metadata(dir.join("tls").join(name)).expect("stat");
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
        }
        let dir_mode = std::fs::metadata(dir.join("tls"))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        let copied = Material::read(&dir.join("tls")).expect("read back");
        std::fs::remove_dir_all(&dir).ok();
        assert!(copied == material);
    }
}
