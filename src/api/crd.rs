//! The CustomResourceDefinitions Tusk installs: every kind (Backup, Database,
//! Drill), both versions (v1 stored), converted by the operator's webhook.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use kube::CustomResourceExt;
use kube::core::crd::{MergeError, merge_crds};

use super::{v1, v1alpha1};

/// Where the API server reaches the conversion webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookService {
    pub namespace: String,
    pub name: String,
    pub port: i32,
    /// PEM CA bundle; empty until the operator (or cert-manager, or OLM) fills it in.
    pub ca_bundle: Option<Vec<u8>>,
}

impl Default for WebhookService {
    fn default() -> Self {
        Self {
            namespace: "tusk-system".to_owned(),
            name: "tusk-webhook".to_owned(),
            port: 443,
            ca_bundle: None,
        }
    }
}

fn with_conversion(
    mut crd: CustomResourceDefinition,
    webhook: &WebhookService,
) -> CustomResourceDefinition {
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".to_owned(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: vec!["v1".to_owned()],
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: webhook.namespace.clone(),
                    name: webhook.name.clone(),
                    path: Some("/convert".to_owned()),
                    port: Some(webhook.port),
                }),
                ca_bundle: webhook.ca_bundle.clone().map(k8s_openapi::ByteString),
                url: None,
            }),
        }),
    });
    crd
}

/// The names of the CRDs [`all`] returns, in its order: the operator keeps
/// their conversion webhook's caBundle current.
pub const NAMES: [&str; 3] = ["backups.tusk.dev", "databases.tusk.dev", "drills.tusk.dev"];

/// Every CRD, in a stable order (Backup, Database, Drill).
pub fn all(webhook: &WebhookService) -> Result<Vec<CustomResourceDefinition>, MergeError> {
    let database = merge_crds(vec![v1::Database::crd(), v1alpha1::Database::crd()], "v1")?;
    let backup = merge_crds(vec![v1::Backup::crd(), v1alpha1::Backup::crd()], "v1")?;
    let drill = merge_crds(vec![v1::Drill::crd(), v1alpha1::Drill::crd()], "v1")?;
    Ok(vec![
        with_conversion(backup, webhook),
        with_conversion(database, webhook),
        with_conversion(drill, webhook),
    ])
}

/// The CRDs as one multi-document YAML stream, as committed under `config/crd/`.
pub fn to_yaml(crds: &[CustomResourceDefinition]) -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions(crd: &CustomResourceDefinition) -> Vec<(String, bool, bool)> {
        crd.spec
            .versions
            .iter()
            .map(|v| (v.name.clone(), v.served, v.storage))
            .collect()
    }

    #[test]
    fn every_kind_serves_both_versions_and_stores_v1() {
        let crds = all(&WebhookService::default()).unwrap();
        let names: Vec<_> = crds
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, NAMES);
        for crd in &crds {
            let mut v = versions(crd);
            v.sort();
            assert_eq!(
                v,
                [("v1".into(), true, true), ("v1alpha1".into(), true, false)]
            );
            assert_eq!(
                crd.spec.names.categories.as_deref(),
                Some(&["tusk".to_owned()][..])
            );
            let conversion = crd.spec.conversion.as_ref().unwrap();
            assert_eq!(conversion.strategy, "Webhook");
            let service = conversion
                .webhook
                .as_ref()
                .unwrap()
                .client_config
                .as_ref()
                .unwrap()
                .service
                .as_ref()
                .unwrap();
            assert_eq!(
                (service.name.as_str(), service.path.as_deref()),
                ("tusk-webhook", Some("/convert"))
            );
            for version in &crd.spec.versions {
                assert!(
                    version
                        .subresources
                        .as_ref()
                        .and_then(|s| s.status.as_ref())
                        .is_some()
                );
                assert!(
                    !version
                        .additional_printer_columns
                        .as_deref()
                        .unwrap_or_default()
                        .is_empty()
                );
            }
        }
    }

    /// Both versions of a Drill print the same columns, and v1alpha1's schema
    /// holds v1's fields with v1's constraints and rules (the shapes agree).
    #[test]
    fn the_drill_versions_agree() {
        let crds = all(&WebhookService::default()).unwrap();
        let drill = crds.iter().find(|c| c.spec.names.kind == "Drill").unwrap();
        assert_eq!(
            drill.spec.names.short_names.as_deref(),
            Some(&["tdr".to_owned()][..])
        );
        let version = |name: &str| drill.spec.versions.iter().find(|v| v.name == name).unwrap();
        let (v1, alpha) = (version("v1"), version("v1alpha1"));
        let columns = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
            v.additional_printer_columns
                .as_deref()
                .unwrap_or_default()
                .iter()
                .map(|c| (c.name.clone(), c.json_path.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(columns(v1), columns(alpha));
        assert_eq!(
            columns(v1).iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
            ["Database", "Scenario", "Phase", "Outage", "Lost", "Age"]
        );
        let schema = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
            serde_json::to_value(&v.schema.as_ref().unwrap().open_api_v3_schema).unwrap()
        };
        let (v1, alpha) = (schema(v1), schema(alpha));
        let v1_spec = &v1["properties"]["spec"];
        let alpha_spec = &alpha["properties"]["spec"];
        for (field, property) in alpha_spec["properties"].as_object().unwrap() {
            let mut want = v1_spec["properties"][field].clone();
            let mut got = property.clone();
            // Only the words may differ.
            for p in [&mut want, &mut got] {
                if let Some(o) = p.as_object_mut() {
                    o.remove("description");
                }
            }
            assert_eq!(got, want, "spec.{field} differs between the versions");
        }
        assert_eq!(
            alpha_spec["x-kubernetes-validations"],
            v1_spec["x-kubernetes-validations"]
        );
        assert_eq!(
            alpha["x-kubernetes-validations"],
            v1["x-kubernetes-validations"]
        );
        assert_eq!(alpha["properties"]["status"], v1["properties"]["status"]);
    }

    /// `kubectl explain` shows descriptions; every property Tusk defines needs one.
    #[test]
    fn every_property_has_a_description() {
        fn walk(path: &str, schema: &serde_json::Value, missing: &mut Vec<String>) {
            if let Some(props) = schema.get("properties").and_then(|p| p.as_object()) {
                for (name, prop) in props {
                    let here = format!("{path}.{name}");
                    let described = prop
                        .get("description")
                        .and_then(|d| d.as_str())
                        .is_some_and(|d| !d.is_empty());
                    // metadata and the Condition fields come from Kubernetes itself.
                    if !described && name != "metadata" && name != "apiVersion" && name != "kind" {
                        missing.push(here.clone());
                    }
                    if !here.contains(".conditions") {
                        walk(&here, prop, missing);
                    }
                }
            }
            if let Some(items) = schema.get("items") {
                walk(&format!("{path}[]"), items, missing);
            }
        }
        let mut missing = Vec::new();
        for crd in all(&WebhookService::default()).unwrap() {
            for version in &crd.spec.versions {
                let schema =
                    serde_json::to_value(&version.schema.as_ref().unwrap().open_api_v3_schema)
                        .unwrap();
                walk(
                    &format!("{}/{}", crd.spec.names.kind, version.name),
                    &schema,
                    &mut missing,
                );
            }
        }
        assert!(
            missing.is_empty(),
            "properties without a description: {missing:#?}"
        );
    }

    /// The committed `config/crd/` must be exactly what the code generates.
    #[test]
    fn committed_crds_are_current() {
        let generated = to_yaml(&all(&WebhookService::default()).unwrap()).unwrap();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/crd/tusk.dev.yaml");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "config/crd/tusk.dev.yaml is stale: run `cargo run -- crd > config/crd/tusk.dev.yaml`"
        );
    }
}
