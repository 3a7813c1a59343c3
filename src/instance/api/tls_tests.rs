//! The API over TLS on a loopback port, with freshly issued certificates:
//! who gets in where, that a caller pins the name of the instance it meant,
//! and that renewed material is served from the next connection on.

use std::sync::Arc;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use jiff::{SignedDuration, Timestamp};
use rustls::pki_types::ServerName;
use tokio::sync::watch;

use super::tests::{loopback, serve_on};
use crate::contract::{Member, path, tls::OPERATOR_COMMON_NAME};
use crate::instance::tls::Material;
use crate::tls::{Authority, CertInfo, Leaf, rustls_config};

/// A CA that issues leaves as the operator does (`crate::tls`).
struct Ca {
    pem: String,
    authority: Authority,
}

const DAY: SignedDuration = SignedDuration::from_hours(24);

impl Ca {
    fn new(name: &str) -> Self {
        let authority = Authority::generate(name, DAY * 365, Timestamp::now()).expect("CA");
        Ca {
            pem: authority.cert_pem().to_owned(),
            authority,
        }
    }

    /// An instance's API identity: common name and DNS name `name`.
    fn leaf(&self, name: &str) -> Leaf {
        self.authority
            .issue_identity(name, DAY, Timestamp::now())
            .expect("instance identity")
    }

    /// The operator's client certificate.
    fn operator(&self) -> Leaf {
        self.authority
            .issue_client(OPERATOR_COMMON_NAME, DAY, Timestamp::now())
            .expect("operator identity")
    }

    /// An instance's material with `api` as its API identity.
    fn material(&self, api: &Leaf) -> Arc<Material> {
        Arc::new(Material {
            ca_bundle: self.pem.clone(),
            client_ca_bundle: self.pem.clone(),
            server_cert: api.cert_pem.clone(),
            server_key: api.key_pem.clone(),
            api_cert: api.cert_pem.clone(),
            api_key: api.key_pem.clone(),
            replication_cert: api.cert_pem.clone(),
            replication_key: api.key_pem.clone(),
        })
    }
}

/// A client of `ca`'s instances expecting `name`, as `identity`.
fn client(ca: &Ca, identity: Option<&Leaf>, name: &str) -> rustls::ClientConfig {
    let config = rustls_config::client_config(
        &ca.pem,
        identity.map(|leaf| (leaf.cert_pem.as_str(), leaf.key_pem.as_str())),
        name,
    )
    .expect("client config");
    Arc::unwrap_or_clone(config)
}

/// Status and body of one request over TLS, or why there was no answer.
async fn call(
    config: rustls::ClientConfig,
    method: &str,
    url: &str,
    bearer: Option<&str>,
) -> Result<(u16, String), String> {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    let client = Client::builder(TokioExecutor::new()).build(https);
    let mut request = http::Request::builder().method(method).uri(url);
    if let Some(token) = bearer {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request.body(Full::new(Bytes::new())).expect("request");
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok((
        status,
        String::from_utf8_lossy(&body.to_bytes()).into_owned(),
    ))
}

/// The serial of the certificate the server at `addr` presents.
async fn presented_serial(ca: &Ca, addr: &str) -> String {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client(ca, None, "pg-1")));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("pg-1").expect("name");
    let tls = connector.connect(name, tcp).await.expect("handshake");
    let cert = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .expect("a server certificate")
        .clone();
    CertInfo::from_der(&cert).expect("parse").serial
}

struct Fixture {
    ca: Ca,
    https: String,
    material: watch::Sender<Arc<Material>>,
    _stop: watch::Sender<bool>,
}

/// Instance `pg-1` of Database `pg` serving TLS with token `t0ken`.
async fn instance() -> Fixture {
    let ca = Ca::new("pg CA");
    let (material, rx) = watch::channel(ca.material(&ca.leaf("pg-1")));
    let (listener, url) = loopback("127.0.0.1").await;
    let stop = serve_on(listener, Some("t0ken"), Some(rx));
    Fixture {
        https: url.replace("http://", "https://"),
        ca,
        material,
        _stop: stop,
    }
}

#[tokio::test]
async fn probes_and_metrics_answer_without_a_client_certificate() {
    let f = instance().await;
    let anonymous = || client(&f.ca, None, "pg-1");
    let healthz = call(
        anonymous(),
        "GET",
        &format!("{}{}", f.https, path::HEALTHZ),
        None,
    )
    .await;
    assert_eq!(healthz, Ok((200, "ok".to_owned())));
    let (readyz, _) = call(
        anonymous(),
        "GET",
        &format!("{}{}", f.https, path::READYZ),
        None,
    )
    .await
    .expect("readyz answers");
    assert_eq!(readyz, 503, "not ready, but answered");
    let (metrics, _) = call(
        anonymous(),
        "GET",
        &format!("{}{}", f.https, path::METRICS),
        None,
    )
    .await
    .expect("metrics answer");
    assert_ne!(metrics, 401);
    assert_ne!(metrics, 403);
}

#[tokio::test]
async fn status_needs_the_operators_or_a_members_certificate() {
    let f = instance().await;
    let status = format!("{}{}", f.https, path::STATUS);
    let backups = format!("{}{}", f.https, path::BACKUPS);

    let anonymous = call(client(&f.ca, None, "pg-1"), "GET", &status, None).await;
    assert_eq!(
        anonymous,
        Ok((
            401,
            r#"{"error":"a client certificate is required: the operator's or an instance's of this Database"}"#
                .to_owned()
        ))
    );

    let operator = f.ca.operator();
    let (code, body) = call(client(&f.ca, Some(&operator), "pg-1"), "GET", &status, None)
        .await
        .expect("status answers the operator");
    // No PostgreSQL behind this API: past the authorisation, the handler speaks.
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("PostgreSQL is not available"), "{body}");
    let (code, body) = call(
        client(&f.ca, Some(&operator), "pg-1"),
        "GET",
        &backups,
        None,
    )
    .await
    .expect("backups answer the operator");
    assert_eq!((code, body.as_str()), (200, r#"{"backups":[]}"#));

    let peer = f.ca.leaf("pg-2");
    let (code, _) = call(client(&f.ca, Some(&peer), "pg-1"), "GET", &backups, None)
        .await
        .expect("backups answer a peer");
    assert_eq!(code, 200);

    // Same CA (a user CA shared by two Databases), another Database.
    let stranger = f.ca.leaf("other-1");
    let refused = call(
        client(&f.ca, Some(&stranger), "pg-1"),
        "GET",
        &backups,
        None,
    )
    .await;
    assert_eq!(
        refused,
        Ok((
            403,
            r#"{"error":"client certificate \"other-1\" is neither \"tusk-operator\" nor an instance of Database \"pg\""}"#
                .to_owned()
        ))
    );
}

#[tokio::test]
async fn mutations_need_the_certificate_and_the_token() {
    let f = instance().await;
    let restart = format!("{}{}", f.https, path::RESTART);
    let operator = f.ca.operator();
    let (code, _) = call(client(&f.ca, None, "pg-1"), "POST", &restart, Some("t0ken"))
        .await
        .expect("answered");
    assert_eq!(code, 401, "a token without a certificate");
    let (code, body) = call(
        client(&f.ca, Some(&operator), "pg-1"),
        "POST",
        &restart,
        None,
    )
    .await
    .expect("answered");
    assert_eq!(
        (code, body.as_str()),
        (401, r#"{"error":"missing or wrong bearer token"}"#),
        "a certificate without a token"
    );
    let (code, body) = call(
        client(&f.ca, Some(&operator), "pg-1"),
        "POST",
        &restart,
        Some("t0ken"),
    )
    .await
    .expect("answered");
    assert_eq!(
        (code, body.as_str()),
        (409, r#"{"error":"postgres is not running"}"#)
    );
}

#[tokio::test]
async fn a_certificate_from_another_ca_fails_the_handshake() {
    let f = instance().await;
    let other = Ca::new("someone else's CA");
    let impostor = other.operator();
    // Trusts the right CA for the server, presents a certificate of another.
    let config = client(&f.ca, Some(&impostor), "pg-1");
    let refused = call(
        config,
        "GET",
        &format!("{}{}", f.https, path::HEALTHZ),
        None,
    )
    .await;
    let Err(why) = refused else {
        panic!("a certificate of another CA got an answer: {refused:?}");
    };
    assert!(why.contains("AlertReceived(UnknownCA)"), "{why}");
}

#[tokio::test]
async fn a_caller_refuses_a_server_that_names_another_instance() {
    let f = instance().await;
    let operator = f.ca.operator();
    let url = format!("{}{}", f.https, path::HEALTHZ);
    let meant_pg2 = call(client(&f.ca, Some(&operator), "pg-2"), "GET", &url, None).await;
    let Err(why) = meant_pg2 else {
        panic!("pg-1's certificate was accepted for pg-2: {meant_pg2:?}");
    };
    assert!(why.contains("NotValidForName"), "{why}");
    // The same call meaning pg-1 goes through.
    let meant_pg1 = call(client(&f.ca, Some(&operator), "pg-1"), "GET", &url, None).await;
    assert_eq!(meant_pg1, Ok((200, "ok".to_owned())));
}

#[tokio::test]
async fn renewed_material_is_served_from_the_next_connection() {
    let f = instance().await;
    let addr = f.https.trim_start_matches("https://").to_owned();
    let first = CertInfo::parse(&f.material.borrow().api_cert)
        .expect("parse")
        .serial;
    assert_eq!(presented_serial(&f.ca, &addr).await, first);
    let renewed = f.ca.leaf("pg-1");
    assert_ne!(renewed.info.serial, first);
    f.material.send_replace(f.ca.material(&renewed));
    assert_eq!(presented_serial(&f.ca, &addr).await, renewed.info.serial);
    // Material that does not make a configuration keeps the last good one.
    let mut broken = (*f.ca.material(&f.ca.leaf("pg-1"))).clone();
    broken.api_key = f.ca.leaf("pg-1").key_pem;
    f.material.send_replace(Arc::new(broken));
    assert_eq!(presented_serial(&f.ca, &addr).await, renewed.info.serial);
}

/// The peer client calls a member with TLS over HTTPS as its own instance
/// (an instance of the Database: let in), pinning the member's name; a
/// member built before TLS the old way.
#[tokio::test]
async fn peers_call_each_other_with_their_api_certificates() {
    let ca = Ca::new("pg CA");
    // The peer client dials the managers' fixed port: an address of its own.
    let ip = "127.0.0.94";
    let listener = tokio::net::TcpListener::bind((ip, crate::contract::PORT))
        .await
        .unwrap_or_else(|e| panic!("cannot listen on {ip}:{}: {e}", crate::contract::PORT));
    let (_material, served) = watch::channel(ca.material(&ca.leaf("pg-1")));
    let _stop = serve_on(listener, Some("t0ken"), Some(served));

    let timing = crate::failover::Timing::DEFAULT;
    let peers = crate::instance::ha::PeerClientForTests::new("pg-2".to_owned(), &timing);
    let (_mine, mine) = watch::channel(ca.material(&ca.leaf("pg-2")));
    peers.use_tls(mine);
    let member = |name: &str, tls: bool| Member {
        name: name.to_owned(),
        address: ip.to_owned(),
        tls,
    };
    let answer = peers.heartbeat(&member("pg-1", true), "t0ken").await;
    assert_eq!(answer.map(|a| a.instance), Ok("pg-1".to_owned()));
    let wrong_name = peers.heartbeat(&member("pg-3", true), "t0ken").await;
    let Err(why) = wrong_name else {
        panic!("pg-1 was taken for pg-3: {wrong_name:?}");
    };
    assert!(why.contains("not valid for name \"pg-3\""), "{why}");
    // Plaintext to a TLS server: no answer (a pod built before TLS is
    // called like this, and answers).
    let plain = peers.heartbeat(&member("pg-1", false), "t0ken").await;
    assert!(plain.is_err(), "{plain:?}");

    let old_ip = "127.0.0.95";
    let listener = tokio::net::TcpListener::bind((old_ip, crate::contract::PORT))
        .await
        .unwrap_or_else(|e| panic!("cannot listen on {old_ip}:{}: {e}", crate::contract::PORT));
    let _old_stop = serve_on(listener, Some("t0ken"), None);
    let built_before_tls = Member {
        name: "pg-1".to_owned(),
        address: old_ip.to_owned(),
        tls: false,
    };
    let answer = peers.heartbeat(&built_before_tls, "t0ken").await;
    assert_eq!(answer.map(|a| a.instance), Ok("pg-1".to_owned()));
}
