//! `<db>-app-external`: what an application outside Kubernetes connects
//! with, separate from the in-cluster `<db>-app` so it gets exactly what it
//! needs. The same credentials as `<db>-app` (`username`, `password`,
//! `dbname`), its `ca.crt` and `sslmode`, the role's `tls.crt`, `tls.key`
//! and `tls.pk8` when it has them (`spec.tls.clientCertificates`), and for
//! every published endpoint
//! with an address `<target>-<lb|nodeport>-host`, `-port` and `-uri`; plain
//! `host`, `port` and `uri` name the preferred endpoint: `rw` before `ro`
//! before `r`, a load balancer before a node port. The host is the entry's
//! `hostname` when set (the server certificate names it), else its first
//! address. Every URI asks for `sslmode=verify-full`.
//!
//! Unlike `<db>-app`, nothing in it is generated: it is rebuilt from
//! `<db>-app` and the endpoints on every pass and server-side applied whole
//! by field manager `tusk`, so a password rotated in `<db>-app` and an
//! address that changed both reach it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

use super::secret::{PASSWORD_KEY, SSLMODE, USERNAME_KEY, percent_encode};
use super::tls::{CLIENT_CA_KEY, KeyPair, SSLMODE_KEY, client_keys, held_client};
use super::{labels, object_meta};
use crate::api::expose::{EndpointStatus, external_secret_name, service_name};
use crate::api::model::ValidatedDatabase;

/// The key of the database name, as in `<db>-app`.
pub const DBNAME_KEY: &str = "dbname";

/// What `<db>-app` holds that `<db>-app-external` repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppCredentials {
    pub username: String,
    pub password: String,
    pub dbname: String,
    /// `ca.crt`: the CAs that verify the server's certificate.
    pub ca_pem: String,
    /// The role's client certificate (`spec.tls.clientCertificates`): an
    /// application outside needs it as much as one inside.
    pub client: Option<KeyPair>,
}

impl AppCredentials {
    /// The credentials in `<db>-app` as read; what is missing, else.
    pub fn from_secret(secret: &Secret) -> Result<Self, String> {
        let text = |key: &str| -> Result<String, String> {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
                .ok_or_else(|| format!("the Secret has no {key}"))
        };
        Ok(Self {
            username: text(USERNAME_KEY)?,
            password: text(PASSWORD_KEY)?,
            dbname: text(DBNAME_KEY)?,
            ca_pem: text(CLIENT_CA_KEY).unwrap_or_default(),
            client: held_client(secret),
        })
    }
}

/// `<db>-app-external` for `endpoints` (the rows of `status.endpoints`);
/// `None` when no endpoint has an address yet.
pub fn external_secret(
    db: &ValidatedDatabase,
    endpoints: &[EndpointStatus],
    app: &AppCredentials,
) -> Option<Secret> {
    let mut addressed: Vec<(&EndpointStatus, String, i32)> = endpoints
        .iter()
        .filter_map(|e| {
            let host = e
                .hostname
                .clone()
                .or_else(|| e.addresses.first().cloned())?;
            Some((e, host, e.port?))
        })
        .collect();
    addressed.sort_by_key(|(e, _, _)| (e.target, e.type_));
    let mut data = BTreeMap::new();
    let mut put = |key: String, value: &str| {
        data.insert(key, ByteString(value.as_bytes().to_vec()));
    };
    for (endpoint, host, port) in &addressed {
        let prefix = key_prefix(&db.name, endpoint);
        put(format!("{prefix}-host"), host);
        put(format!("{prefix}-port"), &port.to_string());
        put(format!("{prefix}-uri"), &uri(app, host, *port));
    }
    let (_, host, port) = addressed.first()?;
    put("host".to_owned(), host);
    put("port".to_owned(), &port.to_string());
    put("uri".to_owned(), &uri(app, host, *port));
    put(USERNAME_KEY.to_owned(), &app.username);
    put(PASSWORD_KEY.to_owned(), &app.password);
    put(DBNAME_KEY.to_owned(), &app.dbname);
    put(SSLMODE_KEY.to_owned(), SSLMODE);
    if !app.ca_pem.is_empty() {
        put(CLIENT_CA_KEY.to_owned(), &app.ca_pem);
    }
    if let Some(client) = &app.client {
        data.extend(client_keys(client));
    }
    Some(Secret {
        metadata: object_meta(db, external_secret_name(&db.name), labels::common(&db.name)),
        type_: Some("kubernetes.io/basic-auth".to_owned()),
        data: Some(data),
        ..Secret::default()
    })
}

/// `<target>-<lb|nodeport>`: the endpoint's Service name without the
/// Database's.
fn key_prefix(db: &str, endpoint: &EndpointStatus) -> String {
    let service = service_name(db, endpoint.target, endpoint.type_);
    service
        .strip_prefix(&format!("{db}-"))
        .map(str::to_owned)
        .unwrap_or(service)
}

/// A libpq URI; an IPv6 address goes in brackets.
fn uri(app: &AppCredentials, host: &str, port: i32) -> String {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    format!(
        "postgresql://{}:{}@{host}:{port}/{}?sslmode={SSLMODE}",
        percent_encode(&app.username),
        percent_encode(&app.password),
        percent_encode(&app.dbname),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::expose::{ExposeTarget, ExposeType};
    use crate::resources::tests::model;

    fn app() -> AppCredentials {
        AppCredentials {
            username: "app".into(),
            password: "p@ss".into(),
            dbname: "app".into(),
            ca_pem: "CA PEM".into(),
            client: None,
        }
    }

    fn row(
        target: ExposeTarget,
        type_: ExposeType,
        addresses: &[&str],
        port: Option<i32>,
    ) -> EndpointStatus {
        EndpointStatus {
            service: service_name("orders", target, type_),
            target,
            type_,
            hostname: None,
            addresses: addresses.iter().map(|a| (*a).to_owned()).collect(),
            port,
            reached: false,
            message: None,
        }
    }

    fn data(secret: &Secret) -> BTreeMap<String, String> {
        secret
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), String::from_utf8(v.0.clone()).unwrap()))
            .collect()
    }

    #[test]
    fn every_addressed_endpoint_has_its_keys_and_the_preferred_is_plain() {
        let rows = [
            row(
                ExposeTarget::Ro,
                ExposeType::LoadBalancer,
                &["192.0.2.65"],
                Some(5432),
            ),
            row(
                ExposeTarget::Rw,
                ExposeType::NodePort,
                &["192.0.2.1"],
                Some(30432),
            ),
            row(
                ExposeTarget::Rw,
                ExposeType::LoadBalancer,
                &["192.0.2.64"],
                Some(5432),
            ),
            row(ExposeTarget::R, ExposeType::LoadBalancer, &[], Some(5432)),
        ];
        let secret = external_secret(&model(&sample_database()), &rows, &app()).expect("built");
        assert_eq!(secret.metadata.name.as_deref(), Some("orders-app-external"));
        assert_eq!(secret.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(
            secret.metadata.labels.clone().unwrap_or_default(),
            labels::common("orders")
        );
        assert_eq!(
            secret.metadata.owner_references,
            super::super::owner_reference(&sample_database()).map(|o| vec![o])
        );
        let uri = |host: &str, port: u16| {
            format!("postgresql://app:p%40ss@{host}:{port}/app?sslmode=verify-full")
        };
        let expected: BTreeMap<String, String> = [
            ("ca.crt", "CA PEM".to_owned()),
            ("dbname", "app".to_owned()),
            ("host", "192.0.2.64".to_owned()),
            ("password", "p@ss".to_owned()),
            ("port", "5432".to_owned()),
            ("ro-lb-host", "192.0.2.65".to_owned()),
            ("ro-lb-port", "5432".to_owned()),
            ("ro-lb-uri", uri("192.0.2.65", 5432)),
            ("rw-lb-host", "192.0.2.64".to_owned()),
            ("rw-lb-port", "5432".to_owned()),
            ("rw-lb-uri", uri("192.0.2.64", 5432)),
            ("rw-nodeport-host", "192.0.2.1".to_owned()),
            ("rw-nodeport-port", "30432".to_owned()),
            ("rw-nodeport-uri", uri("192.0.2.1", 30432)),
            ("sslmode", "verify-full".to_owned()),
            ("uri", uri("192.0.2.64", 5432)),
            ("username", "app".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(data(&secret), expected);
    }

    #[test]
    fn the_hostname_is_the_host_when_set_and_ipv6_goes_in_brackets() {
        let mut named = row(
            ExposeTarget::Ro,
            ExposeType::LoadBalancer,
            &["192.0.2.65"],
            Some(5432),
        );
        named.hostname = Some("orders-ro.db.example.com".into());
        let v6 = row(
            ExposeTarget::R,
            ExposeType::NodePort,
            &["2001:db8::1"],
            Some(31000),
        );
        let secret =
            external_secret(&model(&sample_database()), &[v6, named], &app()).expect("built");
        let data = data(&secret);
        assert_eq!(data["host"], "orders-ro.db.example.com");
        assert_eq!(
            data["uri"],
            "postgresql://app:p%40ss@orders-ro.db.example.com:5432/app?sslmode=verify-full"
        );
        assert_eq!(
            data["r-nodeport-uri"],
            "postgresql://app:p%40ss@[2001:db8::1]:31000/app?sslmode=verify-full"
        );
        assert_eq!(data["r-nodeport-host"], "2001:db8::1");
    }

    #[test]
    fn nothing_is_built_before_an_endpoint_has_an_address() {
        let rows = [
            row(ExposeTarget::Rw, ExposeType::LoadBalancer, &[], Some(5432)),
            row(ExposeTarget::Rw, ExposeType::NodePort, &["192.0.2.1"], None),
        ];
        assert_eq!(
            external_secret(&model(&sample_database()), &rows, &app()),
            None
        );
    }

    /// With client certificates an application outside presents the
    /// role's certificate too: it comes from `<db>-app` with the rest.
    #[test]
    fn the_role_s_certificate_goes_along_when_the_app_secret_has_one() {
        let mut app_secret = crate::resources::secret(
            &model(&sample_database()),
            crate::resources::SecretKind::App,
            "pw",
        );
        let ca = crate::tls::test_support::ca();
        let leaf = ca
            .issue_client(
                "app",
                jiff::SignedDuration::from_hours(24),
                crate::tls::test_support::now(),
            )
            .unwrap();
        let pair = KeyPair {
            cert_pem: leaf.cert_pem,
            key_pem: leaf.key_pem,
        };
        if let Some(data) = app_secret.data.as_mut() {
            data.extend(client_keys(&pair));
        }
        let read = AppCredentials::from_secret(&app_secret).expect("complete");
        assert_eq!(read.client.as_ref(), Some(&pair));
        let rows = [row(
            ExposeTarget::Rw,
            ExposeType::LoadBalancer,
            &["192.0.2.64"],
            Some(5432),
        )];
        let secret = external_secret(&model(&sample_database()), &rows, &read).expect("built");
        let data = secret.data.unwrap_or_default();
        assert_eq!(data["tls.crt"].0, pair.cert_pem.as_bytes());
        assert_eq!(data["tls.key"].0, pair.key_pem.as_bytes());
        assert!(data.contains_key("tls.pk8"));
        let without = external_secret(&model(&sample_database()), &rows, &app()).expect("built");
        assert!(
            !without.data.unwrap_or_default().contains_key("tls.crt"),
            "no certificate unless <db>-app has one"
        );
    }

    #[test]
    fn credentials_come_from_the_app_secret() {
        let app_secret = crate::resources::secret(
            &model(&sample_database()),
            crate::resources::SecretKind::App,
            "pw",
        );
        let read = AppCredentials::from_secret(&app_secret).expect("complete");
        assert_eq!(
            read,
            AppCredentials {
                username: "app".into(),
                password: "pw".into(),
                dbname: "app".into(),
                ca_pem: String::new(),
                client: None,
            }
        );
        let mut broken = app_secret;
        broken.data.as_mut().unwrap().remove("password");
        assert_eq!(
            AppCredentials::from_secret(&broken),
            Err("the Secret has no password".to_owned())
        );
    }
}
