//! The TLS objects of a Database, built from certificates issued elsewhere
//! (`crate::tls` issues; this module only lays PEM text out in Secrets and
//! pods, so it stays pure):
//!
//! - `<db>-ca` ([`ca_secret`]): the operator-only Secret, never mounted in a
//!   pod: Tusk's CA (`ca.crt`, `ca.key`), during a CA rotation the next one
//!   (`next-ca.crt`, `next-ca.key`), and the operator's client identity on
//!   the instance API (`operator.crt`, `operator.key`). With a user CA
//!   (`spec.tls.ca`) it holds only the operator identity.
//! - `<instance>-tls` ([`instance_tls_secret`]): one per instance, mounted
//!   read-only at [`contract::tls::MOUNT`] ([`instance_volume`],
//!   [`instance_mount`]), keys [`contract::tls::FILES`].
//! - The TLS keys of `<db>-app` and `<db>-superuser`
//!   ([`credential_tls_apply`]).
//! - The instance container's TLS environment ([`instance_env`]).
//!
//! **Why the credential Secrets get a separate field manager.** The
//! credential Secrets are created once and never applied again
//! ([`super::secret`]): their passwords are generated once and PostgreSQL's
//! roles are set to them, so a re-apply must never carry a password. Their
//! TLS keys, though, change with every renewal and CA rotation. So the
//! controller writes them with a second, forced server-side apply under its
//! own field manager, [`TLS_FIELD_MANAGER`] (`tusk-tls`), whose body
//! ([`credential_tls_apply`]) holds nothing but the Secret's name and the TLS
//! keys: no `type`, no labels, no password, no `uri`. Server-side apply
//! tracks ownership per key of `data`, so this manager owns exactly
//! `ca.crt`, `sslmode` and (with client certificates) `tls.crt`, `tls.key`
//! and `tls.pk8`, and can never change or remove a password key; and when
//! client certificates are turned off, applying the body without them
//! removes the keys this manager alone owned, which a merge patch would only
//! do with explicit nulls. The password-bearing `uri` stays the
//! creator's: a Secret created from now on has `sslmode=verify-full` in it
//! ([`super::secret::secret`]).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    EnvVar, KeyToPath, Secret, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use thiserror::Error;

use super::container::{mount, value_env};
use super::secret::SecretKind;
use super::{labels, names, object_meta};
use crate::api::model::ValidatedDatabase;
use crate::contract::{env, tls as files};

/// The field manager of the TLS keys of the credential Secrets (see the
/// module documentation).
pub const TLS_FIELD_MANAGER: &str = "tusk-tls";

/// Keys of `<db>-ca`.
pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const NEXT_CA_CERT: &str = "next-ca.crt";
pub const NEXT_CA_KEY: &str = "next-ca.key";
pub const OPERATOR_CERT: &str = "operator.crt";
pub const OPERATOR_KEY: &str = "operator.key";

/// Keys the TLS field manager owns in `<db>-app` and `<db>-superuser`: the
/// CAs that verify the server (what libpq's `sslrootcert` reads), the
/// `sslmode` clients should use, and with client certificates the app
/// role's certificate and key (libpq's `sslcert`, `sslkey`).
pub const CLIENT_CA_KEY: &str = "ca.crt";
pub const SSLMODE_KEY: &str = "sslmode";
pub const CLIENT_CERT_KEY: &str = "tls.crt";
pub const CLIENT_KEY_KEY: &str = "tls.key";
/// The role's key again, as PKCS#8 DER: what the PostgreSQL JDBC driver's
/// default `sslkey` reads (it takes no PEM key).
pub const CLIENT_PK8_KEY: &str = "tls.pk8";
pub use super::secret::SSLMODE;

/// The pod volume of the instance's TLS Secret.
pub const VOLUME: &str = "tls";
/// The mode of the mounted files: readable by the pod's group (`fsGroup`,
/// the `postgres` user's) only. PostgreSQL refuses a group-readable key, so
/// the manager copies the files into a private 0600 directory.
pub const FILE_MODE: i32 = 0o440;

/// A certificate and its private key, PEM.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyPair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// What `<db>-ca` holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaMaterial {
    /// Tusk's current CA; `None` with a user CA (`spec.tls.ca`).
    pub ca: Option<KeyPair>,
    /// The CA a rotation moves to, from `TrustingBoth` until `DroppingOld`
    /// makes it the current one.
    pub next: Option<KeyPair>,
    /// The operator's client certificate on the instance API (common name
    /// [`files::OPERATOR_COMMON_NAME`]).
    pub operator: KeyPair,
}

/// What an instance's TLS Secret holds (the keys of [`files::FILES`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceMaterial {
    /// CAs that verify PostgreSQL server certificates (old and new during a
    /// CA rotation; with `spec.tls.server` the user Secret's `ca.crt`).
    pub ca_bundle: String,
    /// CAs that verify client certificates (replication, the app role, the
    /// instance API's callers).
    pub client_ca_bundle: String,
    /// PostgreSQL's serving certificate (the user's with `spec.tls.server`).
    pub server: KeyPair,
    /// The instance API identity.
    pub api: KeyPair,
    /// The replication role's client certificate.
    pub replication: KeyPair,
}

/// The TLS keys of a credential Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientMaterial {
    /// CAs that verify PostgreSQL's server certificate.
    pub ca_bundle: String,
    /// The role's client certificate (`<db>-app` with
    /// `spec.tls.clientCertificates`), else `None`.
    pub client: Option<KeyPair>,
}

/// A Secret read back lacks a key (or it is not UTF-8).
#[derive(Debug, Error, PartialEq, Eq)]
#[error("Secret {secret} has no usable key {key}")]
pub struct MissingKey {
    pub secret: String,
    pub key: String,
}

/// `<db>-ca`: Tusk's CA, the next one during a rotation, and the operator's
/// identity. Opaque, owned by the Database, labelled like every child.
pub fn ca_secret(db: &ValidatedDatabase, material: &CaMaterial) -> Secret {
    let mut data = BTreeMap::new();
    for (cert, key, pair) in [
        (CA_CERT, CA_KEY, material.ca.as_ref()),
        (NEXT_CA_CERT, NEXT_CA_KEY, material.next.as_ref()),
        (OPERATOR_CERT, OPERATOR_KEY, Some(&material.operator)),
    ] {
        if let Some(pair) = pair {
            put(&mut data, cert, &pair.cert_pem);
            put(&mut data, key, &pair.key_pem);
        }
    }
    opaque(
        object_meta(db, names::ca_secret(&db.name), labels::common(&db.name)),
        data,
    )
}

/// `<instance>-tls`: every key of [`files::FILES`], labelled with the
/// instance (so it can be found and deleted with it).
pub fn instance_tls_secret(
    db: &ValidatedDatabase,
    instance: &str,
    material: &InstanceMaterial,
) -> Secret {
    let mut data = BTreeMap::new();
    for (key, value) in [
        (files::CA_BUNDLE, &material.ca_bundle),
        (files::CLIENT_CA_BUNDLE, &material.client_ca_bundle),
        (files::SERVER_CERT, &material.server.cert_pem),
        (files::SERVER_KEY, &material.server.key_pem),
        (files::API_CERT, &material.api.cert_pem),
        (files::API_KEY, &material.api.key_pem),
        (files::REPLICATION_CERT, &material.replication.cert_pem),
        (files::REPLICATION_KEY, &material.replication.key_pem),
    ] {
        put(&mut data, key, value);
    }
    opaque(
        object_meta(
            db,
            names::instance_tls_secret(instance),
            labels::instance(&db.name, instance),
        ),
        data,
    )
}

/// The server-side apply body of the TLS keys of credential Secret `kind`
/// (`<db>-app` or `<db>-superuser`), for field manager
/// [`TLS_FIELD_MANAGER`]: only the name, the namespace and `ca.crt` (left
/// out while no bundle is known), `sslmode` and, when `material.client` is
/// set (`<db>-app` with `spec.tls.clientCertificates`), the keys of
/// [`client_keys`]. Never a password, a `uri`, the type or labels (see the
/// module documentation).
pub fn credential_tls_apply(
    db: &ValidatedDatabase,
    kind: SecretKind,
    material: &ClientMaterial,
) -> Secret {
    let mut data = BTreeMap::new();
    if !material.ca_bundle.is_empty() {
        put(&mut data, CLIENT_CA_KEY, &material.ca_bundle);
    }
    put(&mut data, SSLMODE_KEY, SSLMODE);
    if let Some(client) = &material.client {
        data.extend(client_keys(client));
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(kind.secret_name(&db.name)),
            namespace: db.namespace.clone(),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..Secret::default()
    }
}

/// The keys of a role's client certificate in a credential Secret:
/// `tls.crt` and `tls.key` (PEM, libpq's `sslcert` and `sslkey`) and
/// `tls.pk8` (the key as PKCS#8 DER, for JDBC; left out for a key that is
/// not PKCS#8, which Tusk never issues).
pub fn client_keys(client: &KeyPair) -> BTreeMap<String, ByteString> {
    use rustls::pki_types::PrivatePkcs8KeyDer;
    use rustls::pki_types::pem::PemObject;
    let mut data = BTreeMap::new();
    put(&mut data, CLIENT_CERT_KEY, &client.cert_pem);
    put(&mut data, CLIENT_KEY_KEY, &client.key_pem);
    if let Ok(der) = PrivatePkcs8KeyDer::from_pem_slice(client.key_pem.as_bytes()) {
        data.insert(
            CLIENT_PK8_KEY.to_owned(),
            ByteString(der.secret_pkcs8_der().to_vec()),
        );
    }
    data
}

/// The role's client certificate and key in credential Secret `secret`
/// (`tls.crt`, `tls.key`), when both are there.
pub fn held_client(secret: &Secret) -> Option<KeyPair> {
    pair(secret, CLIENT_CERT_KEY, CLIENT_KEY_KEY).ok()
}

/// The credential Secrets that carry TLS keys, and whether the role's
/// client certificate goes in: `<db>-superuser` (CA only) and `<db>-app`
/// (with `spec.tls.clientCertificates` also its certificate, common name
/// the application owner).
pub fn credential_secrets(db: &ValidatedDatabase) -> [(SecretKind, bool); 2] {
    [
        (SecretKind::Superuser, false),
        (SecretKind::App, db.tls.client_certificates),
    ]
}

/// The instance pod's volume of its TLS Secret: every key, mode
/// [`FILE_MODE`]. Not optional: a pod never starts without TLS material
/// (the controller writes the Secret before it creates the pod).
pub fn instance_volume(instance: &str) -> Volume {
    Volume {
        name: VOLUME.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(names::instance_tls_secret(instance)),
            items: Some(
                files::FILES
                    .iter()
                    .map(|key| KeyToPath {
                        key: (*key).to_owned(),
                        path: (*key).to_owned(),
                        mode: None,
                    })
                    .collect(),
            ),
            default_mode: Some(FILE_MODE),
            optional: None,
        }),
        ..Volume::default()
    }
}

/// The instance container's read-only mount of [`instance_volume`].
pub fn instance_mount() -> VolumeMount {
    mount(VOLUME, files::MOUNT, true)
}

/// The TLS environment of the instance manager: where the files are, the
/// lowest protocol version, whether plaintext clients are let in, and the
/// roles that authenticate by certificate (only when there are any).
///
/// All of them are part of the pod's spec hash: the manager reads them at
/// start only (the instance API has no way to change them), so a change
/// rolls the instances like any pod-spec change. Certificates themselves
/// are not in the pod spec: a renewal or rotation changes the Secret, the
/// kubelet swaps the files and the manager reloads PostgreSQL, without a
/// restart.
pub fn instance_env(db: &ValidatedDatabase) -> Vec<EnvVar> {
    let tls = &db.tls;
    let mut vars = vec![
        value_env(env::TLS_DIR, files::MOUNT),
        value_env(env::TLS_MIN_VERSION, tls.min_protocol_version.as_str()),
        value_env(
            env::TLS_ALLOW_PLAINTEXT,
            if tls.allow_plaintext { "true" } else { "false" },
        ),
    ];
    let users = tls.cert_users(&db.initdb.owner);
    if !users.is_empty() {
        vars.push(value_env(env::TLS_CERT_USERS, &users.join(",")));
    }
    vars
}

/// Takes the TLS volume, its mount and the TLS environment out of a pod
/// built as an instance's: the verification Job restores a backup into a
/// throwaway server that only it connects to (through the local socket),
/// so it gets no instance's keys and no TLS.
pub(super) fn remove_from(spec: &mut k8s_openapi::api::core::v1::PodSpec) {
    if let Some(volumes) = &mut spec.volumes {
        volumes.retain(|v| v.name != VOLUME);
    }
    let tls_env = [
        env::TLS_DIR,
        env::TLS_MIN_VERSION,
        env::TLS_ALLOW_PLAINTEXT,
        env::TLS_CERT_USERS,
    ];
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        if let Some(mounts) = &mut container.volume_mounts {
            mounts.retain(|m| m.name != VOLUME);
        }
        if let Some(vars) = &mut container.env {
            vars.retain(|v| !tls_env.contains(&v.name.as_str()));
        }
    }
}

impl CaMaterial {
    /// Reads `<db>-ca` back: the operator identity must be there; the CA
    /// pairs are `None` when either half is missing.
    pub fn from_secret(secret: &Secret) -> Result<Self, MissingKey> {
        Ok(Self {
            ca: pair(secret, CA_CERT, CA_KEY).ok(),
            next: pair(secret, NEXT_CA_CERT, NEXT_CA_KEY).ok(),
            operator: pair(secret, OPERATOR_CERT, OPERATOR_KEY)?,
        })
    }
}

impl InstanceMaterial {
    /// Reads an instance's TLS Secret back; every key must be there.
    pub fn from_secret(secret: &Secret) -> Result<Self, MissingKey> {
        Ok(Self {
            ca_bundle: text(secret, files::CA_BUNDLE)?,
            client_ca_bundle: text(secret, files::CLIENT_CA_BUNDLE)?,
            server: pair(secret, files::SERVER_CERT, files::SERVER_KEY)?,
            api: pair(secret, files::API_CERT, files::API_KEY)?,
            replication: pair(secret, files::REPLICATION_CERT, files::REPLICATION_KEY)?,
        })
    }
}

fn pair(secret: &Secret, cert: &str, key: &str) -> Result<KeyPair, MissingKey> {
    Ok(KeyPair {
        cert_pem: text(secret, cert)?,
        key_pem: text(secret, key)?,
    })
}

/// Key `key` of `secret` as text.
pub fn text(secret: &Secret, key: &str) -> Result<String, MissingKey> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| MissingKey {
            secret: secret.metadata.name.clone().unwrap_or_default(),
            key: key.to_owned(),
        })
}

fn put(data: &mut BTreeMap<String, ByteString>, key: &str, value: &str) {
    data.insert(key.to_owned(), ByteString(value.as_bytes().to_vec()));
}

fn opaque(metadata: ObjectMeta, data: BTreeMap<String, ByteString>) -> Secret {
    Secret {
        metadata,
        type_: Some("Opaque".to_owned()),
        data: Some(data),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::resources::tests::model;

    fn pair(name: &str) -> KeyPair {
        KeyPair {
            cert_pem: format!("CERT {name}"),
            key_pem: format!("KEY {name}"),
        }
    }

    fn keys(secret: &Secret) -> Vec<String> {
        secret
            .data
            .iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn value(secret: &Secret, key: &str) -> String {
        text(secret, key).unwrap_or_else(|e| panic!("{e}"))
    }

    fn instance_material() -> InstanceMaterial {
        InstanceMaterial {
            ca_bundle: "CA BUNDLE".into(),
            client_ca_bundle: "CLIENT CA BUNDLE".into(),
            server: pair("server"),
            api: pair("api"),
            replication: pair("replication"),
        }
    }

    #[test]
    fn the_ca_secret_holds_the_ca_the_next_one_and_the_operator_identity() {
        let db = sample_database();
        let material = CaMaterial {
            ca: Some(pair("ca")),
            next: Some(pair("next")),
            operator: pair("operator"),
        };
        let secret = ca_secret(&model(&db), &material);
        assert_eq!(secret.metadata.name.as_deref(), Some("orders-ca"));
        assert_eq!(secret.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(secret.type_.as_deref(), Some("Opaque"));
        assert_eq!(
            secret.metadata.labels.clone().unwrap_or_default(),
            labels::common("orders")
        );
        assert_eq!(
            secret.metadata.owner_references,
            super::super::owner_reference(&db).map(|o| vec![o])
        );
        assert_eq!(
            keys(&secret),
            [
                "ca.crt",
                "ca.key",
                "next-ca.crt",
                "next-ca.key",
                "operator.crt",
                "operator.key"
            ]
        );
        assert_eq!(value(&secret, "next-ca.key"), "KEY next");
        assert_eq!(CaMaterial::from_secret(&secret), Ok(material));
    }

    #[test]
    fn with_a_user_ca_the_ca_secret_holds_only_the_operator_identity() {
        let material = CaMaterial {
            ca: None,
            next: None,
            operator: pair("operator"),
        };
        let secret = ca_secret(&model(&sample_database()), &material);
        assert_eq!(keys(&secret), ["operator.crt", "operator.key"]);
        assert_eq!(CaMaterial::from_secret(&secret), Ok(material));
    }

    #[test]
    fn an_instance_secret_has_every_file_of_the_contract() {
        let db = sample_database();
        let secret = instance_tls_secret(&model(&db), "orders-2", &instance_material());
        assert_eq!(secret.metadata.name.as_deref(), Some("orders-2-tls"));
        assert_eq!(
            secret.metadata.labels.clone().unwrap_or_default(),
            labels::instance("orders", "orders-2")
        );
        assert_eq!(
            secret.metadata.owner_references,
            super::super::owner_reference(&db).map(|o| vec![o])
        );
        let mut expected: Vec<String> = files::FILES.iter().map(|f| (*f).to_owned()).collect();
        expected.sort();
        assert_eq!(keys(&secret), expected);
        assert_eq!(value(&secret, "tls.key"), "KEY server");
        assert_eq!(value(&secret, "api.crt"), "CERT api");
        assert_eq!(value(&secret, "replication.key"), "KEY replication");
        assert_eq!(value(&secret, "client-ca.crt"), "CLIENT CA BUNDLE");
        assert_eq!(
            InstanceMaterial::from_secret(&secret),
            Ok(instance_material())
        );
    }

    #[test]
    fn reading_back_names_the_missing_key() {
        let mut secret =
            instance_tls_secret(&model(&sample_database()), "orders-1", &instance_material());
        if let Some(data) = &mut secret.data {
            data.remove("api.key");
        }
        assert_eq!(
            InstanceMaterial::from_secret(&secret)
                .map_err(|e| e.to_string())
                .err()
                .as_deref(),
            Some("Secret orders-1-tls has no usable key api.key")
        );
    }

    #[test]
    fn the_credential_apply_carries_only_tls_keys() {
        let db = model(&sample_database());
        let material = ClientMaterial {
            ca_bundle: "CA".into(),
            client: None,
        };
        let body = credential_tls_apply(&db, SecretKind::Superuser, &material);
        let json = serde_json::to_value(&body).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "orders-superuser", "namespace": "shop"},
                "data": {"ca.crt": "Q0E=", "sslmode": "dmVyaWZ5LWZ1bGw="},
            }),
            "no type, labels, password or uri: those stay the creator's"
        );
        let with_cert = credential_tls_apply(
            &db,
            SecretKind::App,
            &ClientMaterial {
                client: Some(pair("app")),
                ..material
            },
        );
        assert_eq!(with_cert.metadata.name.as_deref(), Some("orders-app"));
        assert_eq!(
            keys(&with_cert),
            ["ca.crt", "sslmode", "tls.crt", "tls.key"]
        );
        assert_eq!(value(&with_cert, "sslmode"), "verify-full");
        assert_eq!(value(&with_cert, "tls.crt"), "CERT app");
    }

    /// A real key: `tls.pk8` is the same key in PKCS#8 DER (what JDBC
    /// reads), and the held pair reads back from the keys written.
    #[test]
    fn the_role_s_certificate_is_written_as_pem_and_its_key_as_pkcs8_der() {
        let db = model(&sample_database());
        let leaf = crate::tls::test_support::ca()
            .issue_client(
                "app",
                jiff::SignedDuration::from_hours(24),
                crate::tls::test_support::now(),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let client = KeyPair {
            cert_pem: leaf.cert_pem.clone(),
            key_pem: leaf.key_pem.clone(),
        };
        let body = credential_tls_apply(
            &db,
            SecretKind::App,
            &ClientMaterial {
                ca_bundle: String::new(),
                client: Some(client.clone()),
            },
        );
        assert_eq!(
            keys(&body),
            ["sslmode", "tls.crt", "tls.key", "tls.pk8"],
            "no ca.crt while no bundle is known: an empty one would replace it"
        );
        let der = body
            .data
            .as_ref()
            .and_then(|d| d.get(CLIENT_PK8_KEY))
            .map(|b| b.0.clone())
            .unwrap_or_default();
        let body_b64: String = leaf
            .key_pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        use base64::Engine as _;
        assert_eq!(
            base64::engine::general_purpose::STANDARD.encode(&der),
            body_b64
        );
        assert_eq!(held_client(&body), Some(client));
    }

    #[test]
    fn only_the_app_secret_gets_a_client_certificate_and_only_when_asked() {
        let db = sample_database();
        assert_eq!(
            credential_secrets(&model(&db)),
            [(SecretKind::Superuser, false), (SecretKind::App, false)]
        );
        let mut with_client = model(&db);
        with_client.tls.client_certificates = true;
        assert_eq!(
            credential_secrets(&with_client),
            [(SecretKind::Superuser, false), (SecretKind::App, true)]
        );
    }

    #[test]
    fn the_volume_mounts_every_file_group_readable_and_read_only() {
        let volume = instance_volume("orders-3");
        let secret = volume.secret.clone().unwrap_or_default();
        assert_eq!(volume.name, "tls");
        assert_eq!(secret.secret_name.as_deref(), Some("orders-3-tls"));
        assert_eq!(secret.default_mode, Some(0o440));
        assert_eq!(secret.optional, None, "a pod never starts without TLS");
        let paths: Vec<String> = secret
            .items
            .iter()
            .flatten()
            .map(|i| i.path.clone())
            .collect();
        assert_eq!(paths, files::FILES);
        let mount = instance_mount();
        assert_eq!(mount.mount_path, "/tusk/tls");
        assert_eq!(mount.read_only, Some(true));
    }

    #[test]
    fn the_environment_follows_spec_tls() {
        let as_map = |vars: Vec<EnvVar>| -> BTreeMap<String, String> {
            vars.into_iter()
                .map(|v| (v.name, v.value.unwrap_or_default()))
                .collect()
        };
        let mut db = sample_database();
        assert_eq!(
            as_map(instance_env(&model(&db))),
            BTreeMap::from([
                ("TUSK_TLS_DIR".to_owned(), "/tusk/tls".to_owned()),
                ("TUSK_TLS_MIN_VERSION".to_owned(), "TLSv1.3".to_owned()),
                ("TUSK_TLS_ALLOW_PLAINTEXT".to_owned(), "false".to_owned()),
            ])
        );
        db.spec.tls.allow_plaintext = true;
        db.spec.tls.min_protocol_version = crate::api::v1::TlsVersion::Tls12;
        let mut with_client = model(&db);
        with_client.tls.client_certificates = true;
        assert_eq!(
            as_map(instance_env(&with_client)),
            BTreeMap::from([
                ("TUSK_TLS_DIR".to_owned(), "/tusk/tls".to_owned()),
                ("TUSK_TLS_MIN_VERSION".to_owned(), "TLSv1.2".to_owned()),
                ("TUSK_TLS_ALLOW_PLAINTEXT".to_owned(), "true".to_owned()),
                ("TUSK_TLS_CERT_USERS".to_owned(), "app".to_owned()),
            ])
        );
    }
}
