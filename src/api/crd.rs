//! The CustomResourceDefinitions Tusk installs: both kinds, both versions (v1
//! stored), converted by the operator's webhook.

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

/// Both CRDs, in a stable order (Backup, then Database).
pub fn all(webhook: &WebhookService) -> Result<Vec<CustomResourceDefinition>, MergeError> {
    let database = merge_crds(vec![v1::Database::crd(), v1alpha1::Database::crd()], "v1")?;
    let backup = merge_crds(vec![v1::Backup::crd(), v1alpha1::Backup::crd()], "v1")?;
    Ok(vec![
        with_conversion(backup, webhook),
        with_conversion(database, webhook),
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
    fn both_kinds_serve_both_versions_and_store_v1() {
        let crds = all(&WebhookService::default()).unwrap();
        let names: Vec<_> = crds
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["backups.tusk.dev", "databases.tusk.dev"]);
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
