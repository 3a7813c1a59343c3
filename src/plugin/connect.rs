//! `kubectl tusk connect <db>`: how applications connect — the in-cluster
//! URIs of the `<db>-app` Secret, the published endpoints of
//! `status.endpoints` and the `<db>-app-external` Secret, and where the CA
//! is. Passwords are shown only with `--show-secrets`; otherwise the text
//! says which Secret key holds them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::render;
use super::{Error, Session};
use crate::resources::names;

/// The key of a Tusk credentials Secret holding the CA clients verify with.
const CA_KEY: &str = "ca.crt";
/// The key of `<db>-app` holding the role's client certificate.
const CLIENT_CERT_KEY: &str = "tls.crt";

pub async fn run(
    session: &Session,
    name: &str,
    show_secrets: bool,
    ca_file: Option<&Path>,
) -> Result<(), Error> {
    let db = session.database(name).await?;
    let api: Api<Secret> = Api::namespaced(session.client.clone(), &session.namespace);
    let app_name = names::app_secret(name);
    let external_name = format!("{app_name}-external");
    let app = api
        .get_opt(&app_name)
        .await
        .map_err(Error::kube(format!("reading Secret {app_name}")))?
        .map(|s| decoded(&s));
    let external = api
        .get_opt(&external_name)
        .await
        .map_err(Error::kube(format!("reading Secret {external_name}")))?
        .map(|s| decoded(&s));
    let status = db.status.unwrap_or_default();
    let mut out = String::new();
    match &app {
        Some(data) => section(&mut out, "In the cluster", &app_name, data, show_secrets),
        None => {
            let _ = writeln!(
                out,
                "Secret {app_name} does not exist yet (the Database is being created?)"
            );
        }
    }
    if !status.endpoints.is_empty() {
        out.push_str("\nPublished endpoints\n");
        for e in &status.endpoints {
            let host = e
                .hostname
                .clone()
                .or_else(|| e.addresses.first().cloned())
                .unwrap_or_else(|| "(address pending)".to_owned());
            let _ = writeln!(
                out,
                "  {} ({:?}): {}{} {}",
                e.service,
                e.type_,
                host,
                e.port.map(|p| format!(":{p}")).unwrap_or_default(),
                if e.reached {
                    "reached"
                } else {
                    "not reached yet"
                }
            );
        }
    }
    if let Some(data) = &external {
        out.push('\n');
        section(
            &mut out,
            "From outside the cluster",
            &external_name,
            data,
            show_secrets,
        );
    }
    let ca = app.as_ref().and_then(|d| d.get(CA_KEY));
    match ca {
        Some(_) => {
            let _ = writeln!(out, "\nCA certificate: Secret {app_name}, key {CA_KEY}");
        }
        None => out.push_str("\nCA certificate: none published (TLS not in use)\n"),
    }
    if app
        .as_ref()
        .is_some_and(|d| d.contains_key(CLIENT_CERT_KEY))
    {
        let _ = writeln!(
            out,
            "Client certificate (spec.tls.clientCertificates): Secret {app_name}, keys \
             {CLIENT_CERT_KEY} and tls.key (tls.pk8 for JDBC); point PGSSLCERT and PGSSLKEY at them"
        );
    }
    print!("{out}");
    if let Some(path) = ca_file {
        let pem = ca.ok_or_else(|| {
            Error::Failed(format!(
                "Secret {app_name} has no {CA_KEY} to write to --ca-file"
            ))
        })?;
        std::fs::write(path, pem)
            .map_err(Error::io(format!("writing the CA to {}", path.display())))?;
        println!("wrote the CA certificate to {}", path.display());
    }
    Ok(())
}

/// A Secret's values as text (binary values as a note).
fn decoded(secret: &Secret) -> BTreeMap<String, String> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| {
            let text = String::from_utf8(v.0.clone())
                .unwrap_or_else(|_| format!("<{} bytes of binary data>", v.0.len()));
            (k.clone(), text)
        })
        .collect()
}

/// The connection facts of one credentials Secret (pure).
pub fn section(
    out: &mut String,
    title: &str,
    secret: &str,
    data: &BTreeMap<String, String>,
    show_secrets: bool,
) {
    let _ = writeln!(out, "{title} (Secret {secret})");
    let password = data.get("password").filter(|p| !p.is_empty());
    let hidden = format!("<from Secret {secret}, key password>");
    let shown = |value: &str| -> String {
        match password {
            Some(p) if !show_secrets => value.replace(p.as_str(), &hidden),
            _ => value.to_owned(),
        }
    };
    let mut rows = Vec::new();
    for key in ["host", "port", "dbname", "username", "sslmode"] {
        if let Some(value) = data.get(key) {
            rows.push(vec![key.to_owned(), value.clone()]);
        }
    }
    if password.is_some() {
        rows.push(vec![
            "password".to_owned(),
            if show_secrets {
                password.cloned().unwrap_or_default()
            } else {
                hidden.clone()
            },
        ]);
    }
    for (key, value) in data
        .iter()
        .filter(|(k, _)| k.ends_with("uri") || k.ends_with("-host") || k.ends_with("-port"))
    {
        rows.push(vec![key.clone(), shown(value)]);
    }
    for line in render::table(&["KEY", "VALUE"], &rows).lines().skip(1) {
        let _ = writeln!(out, "  {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("host".to_owned(), "pg-rw.shop".to_owned()),
            ("password".to_owned(), "s3cr3t-pw".to_owned()),
            (
                "uri".to_owned(),
                "postgresql://app:s3cr3t-pw@pg-rw.shop:5432/app?sslmode=verify-full".to_owned(),
            ),
        ])
    }

    #[test]
    fn passwords_are_shown_only_when_asked() {
        let mut out = String::new();
        section(&mut out, "In the cluster", "pg-app", &data(), false);
        assert!(!out.contains("s3cr3t-pw"), "{out}");
        assert!(
            out.contains("postgresql://app:<from Secret pg-app, key password>@pg-rw.shop:5432/app"),
            "{out}"
        );
        let mut out = String::new();
        section(&mut out, "In the cluster", "pg-app", &data(), true);
        assert!(
            out.contains("postgresql://app:s3cr3t-pw@pg-rw.shop"),
            "{out}"
        );
    }
}
