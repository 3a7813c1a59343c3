//! The credential Secrets of a database.
//!
//! The controller must create each Secret **only when it is absent** and never
//! apply it again: the password is generated once (by the caller, outside this
//! pure module), PostgreSQL's roles are set to it at bootstrap, and overwriting
//! the Secret with a new password would lock the instance manager and the
//! applications out. Users may rotate a password by editing the Secret together
//! with the role.
//!
//! Their TLS keys (`ca.crt`, `sslmode`, the app role's client certificate)
//! change with every renewal, so they are not written here but applied
//! separately by another field manager (`super::tls`) that never carries a
//! password.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, Secret, SecretKeySelector};

use super::container::POSTGRES_PORT;
use super::{labels, names, object_meta};
use crate::api::model::ValidatedDatabase;

/// The `sslmode` Tusk's Secrets and URIs ask for: the server's certificate
/// is verified against `ca.crt` and must name the host.
pub const SSLMODE: &str = "verify-full";
/// Key holding the password in every Tusk Secret.
pub const PASSWORD_KEY: &str = "password";
/// Key holding the role name in every Tusk Secret.
pub const USERNAME_KEY: &str = "username";
/// The superuser role, as in the official images.
pub const SUPERUSER_USERNAME: &str = "postgres";
/// The role replicas stream with.
pub const REPLICATION_USERNAME: &str = "tusk_replication";
/// The `username` of the instance token Secret: who presents the token.
pub const INSTANCE_TOKEN_USERNAME: &str = "tusk-operator";
/// The application owner when `spec.bootstrap.initdb` does not name one.
pub const APP_USERNAME_DEFAULT: &str = "app";

/// Which of a database's credential Secrets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SecretKind {
    /// `<db>-superuser`: the `postgres` role.
    Superuser,
    /// `<db>-app`: the application database's owner, with connection details.
    App,
    /// `<db>-replication`: the role replicas connect as.
    Replication,
    /// `<db>-token`: the bearer token only the operator and the
    /// instance managers know, for the managers' mutating endpoints.
    InstanceToken,
}

impl SecretKind {
    pub const ALL: [SecretKind; 4] = [
        Self::Superuser,
        Self::App,
        Self::Replication,
        Self::InstanceToken,
    ];

    /// Name of this Secret for database `db`.
    pub fn secret_name(self, db: &str) -> String {
        match self {
            Self::Superuser => names::superuser_secret(db),
            Self::App => names::app_secret(db),
            Self::Replication => names::replication_secret(db),
            Self::InstanceToken => names::instance_token_secret(db),
        }
    }
}

/// Secret `kind` of `db`, holding `password`, of type `kubernetes.io/basic-auth`
/// with keys `username` and `password`. The App and Superuser Secrets add what
/// a client needs to connect: `dbname`, `host` (`<db>-rw.<namespace>.svc`),
/// `port` and a `uri` with the password percent-encoded and
/// `sslmode=verify-full` (the CA, `ca.crt`, is added by the TLS field
/// manager: `super::tls::credential_tls_apply`).
///
/// Create only when absent; never overwrite (see the module documentation).
pub fn secret(db: &ValidatedDatabase, kind: SecretKind, password: &str) -> Secret {
    let db_name = db.name.clone();
    let mut data = BTreeMap::new();
    let mut put = |key: &str, value: &str| {
        data.insert(key.to_owned(), ByteString(value.as_bytes().to_vec()));
    };
    // Without a namespace the short name still resolves from pods in the
    // database's own namespace, which is better than a wrong guess.
    let host = match &db.namespace {
        Some(ns) => format!("{}.{ns}.svc", names::rw_service(&db_name)),
        None => names::rw_service(&db_name),
    };
    let mut connection = |user: &str, dbname: &str| {
        let uri = format!(
            "postgresql://{}:{}@{host}:{POSTGRES_PORT}/{}?sslmode={SSLMODE}",
            percent_encode(user),
            percent_encode(password),
            percent_encode(dbname),
        );
        put(USERNAME_KEY, user);
        put("dbname", dbname);
        put("host", &host);
        put("port", &POSTGRES_PORT.to_string());
        put("uri", &uri);
    };
    match kind {
        SecretKind::Superuser => connection(SUPERUSER_USERNAME, SUPERUSER_USERNAME),
        SecretKind::App => connection(&db.initdb.owner, &db.initdb.database),
        SecretKind::Replication => put(USERNAME_KEY, REPLICATION_USERNAME),
        SecretKind::InstanceToken => put(USERNAME_KEY, INSTANCE_TOKEN_USERNAME),
    }
    put(PASSWORD_KEY, password);
    Secret {
        metadata: object_meta(db, kind.secret_name(&db_name), labels::common(&db_name)),
        type_: Some("kubernetes.io/basic-auth".to_owned()),
        data: Some(data),
        ..Secret::default()
    }
}

/// Environment variable `name` holding the password of `db`'s Secret
/// `kind`, resolved by the kubelet: the password never enters a pod spec.
pub(super) fn secret_env(name: &str, db_name: &str, kind: SecretKind) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: kind.secret_name(db_name),
                key: PASSWORD_KEY.to_owned(),
                optional: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, which is
/// safe in every part of a URI (userinfo, path) whatever the password contains.
pub(super) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::v1::{BootstrapSpec, InitdbSpec};
    use crate::resources::tests::model;

    fn text(secret: &Secret, key: &str) -> String {
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .unwrap_or_else(|| panic!("no key {key}"));
        String::from_utf8(bytes).unwrap_or_default()
    }

    #[test]
    fn superuser_and_replication() {
        let db = sample_database();
        for (kind, name, user, keys) in [
            (
                SecretKind::Superuser,
                "orders-superuser",
                "postgres",
                &["dbname", "host", "password", "port", "uri", "username"][..],
            ),
            (
                SecretKind::Replication,
                "orders-replication",
                "tusk_replication",
                &["password", "username"][..],
            ),
        ] {
            let s = secret(&model(&db), kind, "s3cret");
            assert_eq!(s.metadata.name.as_deref(), Some(name));
            assert_eq!(s.metadata.namespace.as_deref(), Some("shop"));
            assert_eq!(s.type_.as_deref(), Some("kubernetes.io/basic-auth"));
            assert_eq!(text(&s, "username"), user);
            assert_eq!(text(&s, "password"), "s3cret");
            assert_eq!(
                s.data
                    .iter()
                    .flatten()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>(),
                keys
            );
            assert_eq!(
                s.metadata.labels.clone().unwrap_or_default(),
                labels::common("orders")
            );
            assert_eq!(
                s.metadata.owner_references,
                super::super::owner_reference(&db).map(|o| vec![o])
            );
        }
    }

    #[test]
    fn the_superuser_secret_connects_with_verify_full() {
        let s = secret(&model(&sample_database()), SecretKind::Superuser, "pw");
        assert_eq!(text(&s, "dbname"), "postgres");
        assert_eq!(
            text(&s, "uri"),
            "postgresql://postgres:pw@orders-rw.shop.svc:5432/postgres?sslmode=verify-full"
        );
    }

    #[test]
    fn app_secret_has_connection_details() {
        let s = secret(&model(&sample_database()), SecretKind::App, "pw");
        assert_eq!(s.metadata.name.as_deref(), Some("orders-app"));
        assert_eq!(text(&s, "username"), "app");
        assert_eq!(text(&s, "password"), "pw");
        assert_eq!(text(&s, "dbname"), "app");
        assert_eq!(text(&s, "host"), "orders-rw.shop.svc");
        assert_eq!(text(&s, "port"), "5432");
        assert_eq!(
            text(&s, "uri"),
            "postgresql://app:pw@orders-rw.shop.svc:5432/app?sslmode=verify-full"
        );
    }

    #[test]
    fn app_secret_follows_initdb_and_encodes_the_password() {
        let mut db = sample_database();
        db.spec.bootstrap = Some(BootstrapSpec {
            initdb: Some(InitdbSpec {
                database: "shop".into(),
                owner: "clerk".into(),
            }),
            recovery: None,
        });
        let s = secret(&model(&db), SecretKind::App, "p@ss:w/rd%?#é");
        assert_eq!(text(&s, "username"), "clerk");
        assert_eq!(text(&s, "dbname"), "shop");
        assert_eq!(text(&s, "password"), "p@ss:w/rd%?#é");
        assert_eq!(
            text(&s, "uri"),
            "postgresql://clerk:p%40ss%3Aw%2Frd%25%3F%23%C3%A9@orders-rw.shop.svc:5432/shop?sslmode=verify-full"
        );
    }

    #[test]
    fn serialises_as_base64_data() {
        let s = secret(&model(&sample_database()), SecretKind::Superuser, "pw");
        let json = serde_json::to_value(&s).unwrap_or_default();
        assert_eq!(json["data"]["password"], "cHc=");
        assert_eq!(json["type"], "kubernetes.io/basic-auth");
        assert!(json.get("stringData").is_none());
    }

    #[test]
    fn unreserved_characters_pass_through() {
        assert_eq!(percent_encode("Az09-._~"), "Az09-._~");
        assert_eq!(percent_encode(" +&="), "%20%2B%26%3D");
    }
}
