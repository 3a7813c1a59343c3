//! Observe cert-manager's side of `spec.tls.certManager`: whether the
//! cluster serves cert-manager's `Certificate`, the one Tusk writes
//! (`<db>-server`) compared with what the builder makes, its `Ready`
//! condition, and the issuer's when it is one of cert-manager's own kinds.
//! The Secret cert-manager fills is read with the other TLS Secrets
//! (`super::tls`), as a `spec.tls.server` one is.

use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

use crate::api::model::ValidatedDatabase;
use crate::api::tls::{TlsSource, TlsSourceStatus};
use crate::api::tls_cert_manager::{self as api, Issuer};
use crate::controller::Error;
use crate::lifecycle::tls_cert_manager::CertManagerObserved;
use crate::resources::cert_manager as built;

/// cert-manager's side for `model`, whose server certificates carry `names`;
/// `None` without `spec.tls.certManager`.
pub async fn observe(
    client: &kube::Client,
    model: &ValidatedDatabase,
    names: &[String],
) -> Result<Option<CertManagerObserved>, Error> {
    let TlsSource::CertManager { issuer, secret } = &model.tls.source else {
        return Ok(None);
    };
    let namespace = model.namespace.clone().unwrap_or_default();
    let certificates: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &built::api_resource());
    let name = api::certificate_name(&model.name);
    let seen = certificates
        .get_opt(&name)
        .await
        .map_err(Error::kube("reading the cert-manager Certificate"))?;
    // Absent: a Certificate not written yet, or no such resource at all.
    let installed = match &seen {
        Some(_) => true,
        None => match certificates.list(&ListParams::default().limit(1)).await {
            Ok(_) => true,
            Err(kube::Error::Api(status)) if status.code == 404 => false,
            Err(e) => return Err(Error::kube("looking for cert-manager's Certificates")(e)),
        },
    };
    let wanted = built::certificate(
        model,
        issuer,
        names,
        model.tls.certificate_lifetime,
        model.tls.renew_before,
    );
    let issuer_ready = if installed && issuer.is_cert_manager() {
        read_issuer(client, &namespace, issuer).await?
    } else {
        None
    };
    Ok(Some(CertManagerObserved {
        certificate: name,
        secret: secret.clone(),
        issuer: issuer.describe(),
        installed,
        up_to_date: seen.as_ref().is_some_and(|s| built::up_to_date(&wanted, s)),
        ready: seen.as_ref().and_then(ready),
        issuer_ready,
    }))
}

/// The Certificate Tusk wrote while `spec.tls.certManager` was set, now
/// that it is not: looked for only when status still says the
/// certificates came from cert-manager (`recorded`), so that no other
/// Database pays a request for it. One the Database does not own is left.
pub async fn leftover(
    client: &kube::Client,
    model: &ValidatedDatabase,
    recorded: Option<TlsSourceStatus>,
    uid: Option<&str>,
) -> Result<Option<String>, Error> {
    if matches!(model.tls.source, TlsSource::CertManager { .. })
        || recorded != Some(TlsSourceStatus::CertManager)
    {
        return Ok(None);
    }
    let namespace = model.namespace.clone().unwrap_or_default();
    let certificates: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &built::api_resource());
    let name = api::certificate_name(&model.name);
    match certificates.get_opt(&name).await {
        Ok(Some(found)) => Ok(found
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| Some(o.uid.as_str()) == uid)
            .then_some(name)),
        Ok(None) => Ok(None),
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(None),
        Err(e) => Err(Error::kube("reading the cert-manager Certificate")(e)),
    }
}

/// The readiness of cert-manager's own issuer: `Err` saying it does not
/// exist or why it is not ready; `None` when Tusk may not read it (a
/// namespaced install and a `ClusterIssuer`) or it has no `Ready` yet.
async fn read_issuer(
    client: &kube::Client,
    namespace: &str,
    issuer: &Issuer,
) -> Result<Option<Result<(), String>>, Error> {
    let resource = built::issuer_resource(&issuer.kind);
    let cluster = issuer.kind == "ClusterIssuer";
    let issuers: Api<DynamicObject> = if cluster {
        Api::all_with(client.clone(), &resource)
    } else {
        Api::namespaced_with(client.clone(), namespace, &resource)
    };
    match issuers.get_opt(&issuer.name).await {
        Ok(Some(found)) => Ok(ready(&found)),
        Ok(None) if cluster => Ok(Some(Err("does not exist".to_owned()))),
        Ok(None) => Ok(Some(Err(format!(
            "does not exist in namespace {namespace}"
        )))),
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(None),
        Err(e) => Err(Error::kube("reading the cert-manager issuer")(e)),
    }
}

/// cert-manager's `Ready` condition on `object` (a Certificate or an
/// issuer): `Ok` when true, `Err("Reason: message")` otherwise; `None` when
/// it has none, or one about an older generation of the object (cert-manager
/// has not looked at the change yet).
pub fn ready(object: &DynamicObject) -> Option<Result<(), String>> {
    let condition = object
        .data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))?;
    let generation = object.metadata.generation;
    let observed = condition.get("observedGeneration").and_then(Value::as_i64);
    if let (Some(generation), Some(observed)) = (generation, observed)
        && observed < generation
    {
        return None;
    }
    let text = |key: &str| condition.get(key).and_then(Value::as_str).unwrap_or("");
    match text("status") {
        "True" => Some(Ok(())),
        _ => Some(Err(format!(
            "is not ready: {}: {}",
            text("reason"),
            text("message")
        )
        .trim_end_matches(": ")
        .to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with(status: Value, generation: Option<i64>) -> DynamicObject {
        let mut object = DynamicObject::new("orders-server", &built::api_resource());
        object.metadata.generation = generation;
        object.data = json!({"status": status});
        object
    }

    #[test]
    fn the_ready_condition_reads_as_cert_manager_writes_it() {
        let ready_true = json!({"conditions": [
            {"type": "Issuing", "status": "True"},
            {"type": "Ready", "status": "True", "reason": "Ready", "observedGeneration": 2}
        ]});
        assert_eq!(ready(&with(ready_true.clone(), Some(2))), Some(Ok(())));
        assert_eq!(
            ready(&with(ready_true, Some(3))),
            None,
            "about the previous spec"
        );
        let failing = json!({"conditions": [{"type": "Ready", "status": "False",
            "reason": "DoesNotExist", "message": "Issuing certificate as Secret does not exist"}]});
        assert_eq!(
            ready(&with(failing, Some(1))),
            Some(Err(
                "is not ready: DoesNotExist: Issuing certificate as Secret does not exist".into()
            ))
        );
        let bare = json!({"conditions": [{"type": "Ready", "status": "Unknown"}]});
        assert_eq!(ready(&with(bare, None)), Some(Err("is not ready".into())));
        assert_eq!(ready(&with(json!({}), Some(1))), None);
    }
}
