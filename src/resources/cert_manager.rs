//! The cert-manager `Certificate` of a Database with `spec.tls.certManager`
//! (`<db>-server`): the names Tusk would put on its own server certificates,
//! issued by the user's issuer into `<db>-server-tls`, lasting
//! `certificateLifetime` and renewed `renewBefore` its end. cert-manager is
//! not a dependency of Tusk's: the object is a [`DynamicObject`] of
//! [`api_resource`], and [`up_to_date`] says whether one read back carries
//! what [`certificate`] would write.

use std::net::IpAddr;
use std::time::Duration;

use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use super::{labels, object_meta};
use crate::api::model::ValidatedDatabase;
use crate::api::tls_cert_manager::{self as api, Issuer};

/// cert-manager's `Certificate`, `cert-manager.io/v1`.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(api::GROUP, "v1", "Certificate"),
        "certificates",
    )
}

/// cert-manager's own issuer kinds, `cert-manager.io/v1` (`Issuer`
/// namespaced, `ClusterIssuer` not): read only for their `Ready` condition.
pub fn issuer_resource(kind: &str) -> ApiResource {
    let plural = format!("{}s", kind.to_ascii_lowercase());
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(api::GROUP, "v1", kind), &plural)
}

/// The label on the Secret cert-manager fills (through the Certificate's
/// `secretTemplate`), so that the operator can watch it and wake the
/// Database when cert-manager renews it (with [`labels::DATABASE`], which
/// names the Database to wake).
pub const SECRET_COMPONENT: &str = "server-certificate";

/// The private key: ECDSA P-256 as Tusk's own leaves, PKCS#8 (cert-manager's
/// default, PKCS#1/SEC1, is not what every reader takes), a new key at each
/// renewal.
fn private_key() -> Value {
    json!({"algorithm": "ECDSA", "size": 256, "encoding": "PKCS8", "rotationPolicy": "Always"})
}

/// What Tusk writes into the Certificate's spec: `names` split into DNS
/// names and IP addresses, the issuer, the Secret and the durations.
fn spec(
    db: &ValidatedDatabase,
    issuer: &Issuer,
    names: &[String],
    lifetime: Duration,
    renew_before: Duration,
) -> Value {
    let (ips, dns): (Vec<&String>, Vec<&String>) =
        names.iter().partition(|n| n.parse::<IpAddr>().is_ok());
    let mut spec = json!({
        "secretName": api::secret_name(&db.name),
        "secretTemplate": {"labels": {
            labels::DATABASE: db.name,
            labels::COMPONENT: SECRET_COMPONENT,
        }},
        "dnsNames": dns,
        "duration": go_duration(lifetime),
        "renewBefore": go_duration(renew_before),
        "issuerRef": {"name": issuer.name, "kind": issuer.kind, "group": issuer.group},
        "privateKey": private_key(),
        "usages": ["digital signature", "server auth"],
        // The Secret holds what is in effect; old requests are only noise.
        "revisionHistoryLimit": 1,
    });
    if !ips.is_empty() {
        spec["ipAddresses"] = json!(ips);
    }
    spec
}

/// The Certificate `<db>-server` for `names` (the Services' forms, then the
/// published endpoints' hostnames and addresses), owned by the Database.
pub fn certificate(
    db: &ValidatedDatabase,
    issuer: &Issuer,
    names: &[String],
    lifetime: Duration,
    renew_before: Duration,
) -> DynamicObject {
    let resource = api_resource();
    let mut labels = labels::common(&db.name);
    labels.insert(labels::COMPONENT.to_owned(), SECRET_COMPONENT.to_owned());
    let mut object = DynamicObject::new(&api::certificate_name(&db.name), &resource);
    object.metadata = object_meta(db, api::certificate_name(&db.name), labels);
    object.data = json!({"spec": spec(db, issuer, names, lifetime, renew_before)});
    object
}

/// Whether `seen` carries every field of the spec [`certificate`] writes
/// with the same value (cert-manager and others may add fields; those are
/// theirs). DNS names compare as sets, in any case; addresses by value.
pub fn up_to_date(wanted: &DynamicObject, seen: &DynamicObject) -> bool {
    let (Some(wanted), Some(seen)) = (wanted.data.get("spec"), seen.data.get("spec")) else {
        return false;
    };
    let Some(fields) = wanted.as_object() else {
        return false;
    };
    fields.iter().all(|(key, value)| match key.as_str() {
        "dnsNames" | "ipAddresses" => same_names(value, seen.get(key)),
        _ => seen.get(key).is_some_and(|s| contains(value, s)),
    }) && (fields.contains_key("ipAddresses")
        || seen
            .get("ipAddresses")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty))
}

/// `seen` holds `wanted`: equal scalars and arrays, and for objects every
/// key of `wanted` held.
fn contains(wanted: &Value, seen: &Value) -> bool {
    match (wanted, seen) {
        (Value::Object(w), Value::Object(s)) => w
            .iter()
            .all(|(k, v)| s.get(k).is_some_and(|sv| contains(v, sv))),
        _ => wanted == seen,
    }
}

fn same_names(wanted: &Value, seen: Option<&Value>) -> bool {
    let set = |value: Option<&Value>| -> std::collections::BTreeSet<String> {
        value
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(crate::tls::names::canonical)
            .collect()
    };
    set(Some(wanted)) == set(seen)
}

/// A duration as cert-manager's Go parser reads it, in whole hours (Tusk's
/// durations are hours, days and weeks); minutes only below an hour.
fn go_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds.is_multiple_of(3600) {
        format!("{}h", seconds / 3600)
    } else {
        format!("{}m", seconds.div_ceil(60))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tls_cert_manager::IssuerReference;

    fn model() -> ValidatedDatabase {
        super::super::tests::model(&crate::api::arbitrary::sample_database())
    }

    fn issuer() -> Issuer {
        Issuer::resolve(&IssuerReference {
            name: "ca-issuer".into(),
            kind: None,
            group: None,
        })
    }

    fn names(extra: &[&str]) -> Vec<String> {
        let mut names = crate::tls::names::service_names("orders", "shop", "cluster.local", &[]);
        names.extend(extra.iter().map(|n| (*n).to_owned()));
        names
    }

    const WEEK: Duration = Duration::from_secs(7 * 86_400);

    #[test]
    fn the_certificate_names_every_service_form_and_the_published_endpoints() {
        let db = model();
        let cert = certificate(
            &db,
            &issuer(),
            &names(&["orders.example.com", "198.51.100.64"]),
            WEEK,
            WEEK / 3,
        );
        assert_eq!(
            cert.types.as_ref().map(|t| t.api_version.as_str()),
            Some("cert-manager.io/v1")
        );
        assert_eq!(
            cert.types.as_ref().map(|t| t.kind.as_str()),
            Some("Certificate")
        );
        assert_eq!(cert.metadata.name.as_deref(), Some("orders-server"));
        assert_eq!(cert.metadata.namespace, db.namespace);
        let owner = &cert.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Database", "orders")
        );
        let spec = &cert.data["spec"];
        assert_eq!(spec["secretName"], "orders-server-tls");
        assert_eq!(
            spec["issuerRef"],
            json!({"name": "ca-issuer", "kind": "Issuer", "group": "cert-manager.io"})
        );
        assert_eq!(spec["duration"], "168h");
        assert_eq!(spec["renewBefore"], "56h");
        let dns: Vec<&str> = spec["dnsNames"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(dns.len(), 13);
        assert_eq!(dns[0], "orders-rw");
        assert!(dns.contains(&"orders-r.shop.svc.cluster.local"));
        assert_eq!(dns[12], "orders.example.com");
        assert_eq!(spec["ipAddresses"], json!(["198.51.100.64"]));
        assert_eq!(spec["privateKey"]["encoding"], "PKCS8");
        assert_eq!(
            spec["secretTemplate"]["labels"]["tusk.dev/database"],
            "orders"
        );
        assert!(
            spec["usages"]
                .as_array()
                .unwrap()
                .contains(&json!("server auth"))
        );
        // No published address, no empty list.
        let plain = certificate(&db, &issuer(), &names(&[]), WEEK, WEEK / 3);
        assert!(plain.data["spec"].get("ipAddresses").is_none());
    }

    #[test]
    fn read_back_it_is_up_to_date_and_any_change_of_ours_is_seen() {
        let db = model();
        let wanted = certificate(&db, &issuer(), &names(&["198.51.100.64"]), WEEK, WEEK / 3);
        // As the API server returns it: defaults and cert-manager's status
        // added, the names in another order and case.
        let mut seen = wanted.clone();
        seen.data["spec"]["privateKey"]["extra"] = json!("x");
        seen.data["spec"]["subject"] = json!({"organizations": ["x"]});
        seen.data["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        let mut reversed: Vec<Value> = seen.data["spec"]["dnsNames"].as_array().unwrap().clone();
        reversed.reverse();
        reversed[0] = json!(reversed[0].as_str().unwrap().to_ascii_uppercase());
        seen.data["spec"]["dnsNames"] = json!(reversed);
        assert!(up_to_date(&wanted, &seen));

        let changed = |edit: &dyn Fn(&mut Value)| {
            let mut other = seen.clone();
            edit(&mut other.data["spec"]);
            up_to_date(&wanted, &other)
        };
        assert!(!changed(&|s| s["duration"] = json!("48h")));
        assert!(!changed(&|s| s["issuerRef"]["name"] = json!("other")));
        assert!(!changed(&|s| s["secretName"] = json!("x")));
        assert!(!changed(&|s| s["ipAddresses"] = json!([])));
        assert!(!changed(&|s| {
            s["dnsNames"].as_array_mut().unwrap().pop();
        }));
        // A published address that went away is dropped from the Certificate.
        let fewer = certificate(&db, &issuer(), &names(&[]), WEEK, WEEK / 3);
        assert!(!up_to_date(&fewer, &seen));
        assert!(!up_to_date(
            &wanted,
            &DynamicObject::new("x", &api_resource())
        ));
    }

    #[test]
    fn durations_are_written_as_cert_manager_reads_them() {
        assert_eq!(go_duration(Duration::from_secs(36 * 3600)), "36h");
        assert_eq!(go_duration(Duration::from_secs(7 * 86_400 / 3)), "56h");
        assert_eq!(go_duration(Duration::from_secs(86_401)), "1441m");
        assert_eq!(go_duration(Duration::from_secs(1200)), "20m");
    }

    #[test]
    fn issuers_resolve_to_their_plural() {
        assert_eq!(issuer_resource("ClusterIssuer").plural, "clusterissuers");
        assert_eq!(issuer_resource("Issuer").api_version, "cert-manager.io/v1");
    }
}
