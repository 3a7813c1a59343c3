//! The ClusterServiceVersion: the hand-written base plus everything that has one
//! source elsewhere (the CRDs from the Rust types; the Deployment, the RBAC
//! rules and the webhooks from the Helm chart; the examples from config/samples).

use base64::Engine;
use serde_yaml::{Mapping, Value};

use crate::Error;
use crate::objects::{at, find, mapping_mut, required, without_helm_labels};

/// The operator Deployment, its ServiceAccount and the names OLM needs.
const DEPLOYMENT: &str = "tusk-operator";
const SERVICE_ACCOUNT: &str = "tusk-operator";
const LEADER_ROLE: &str = "tusk-operator-leader";
const CLUSTER_ROLE: &str = "tusk-operator";
const VALIDATING: &str = "tusk-validating";
/// The container port the webhooks listen on (named `webhook` in the chart).
const WEBHOOK_TARGET_PORT: u64 = 9443;

pub struct Inputs<'a> {
    /// config/manifests/bases/tusk.clusterserviceversion.yaml
    pub base: Value,
    /// The chart rendered with `webhook.certificates=external`: OLM mounts the
    /// serving certificate and keeps the caBundles.
    pub rendered: &'a [Value],
    /// The CRDs as `tusk crd` prints them.
    pub crds: &'a [Value],
    /// alm-examples, in the order the console should offer them.
    pub samples: &'a [Value],
    pub version: &'a str,
    pub icon_svg: &'a [u8],
}

pub fn csv_name(version: &str) -> String {
    format!("tusk.v{version}")
}

pub fn build(inputs: &Inputs) -> Result<Value, Error> {
    let mut csv = inputs.base.clone();
    let deployment = without_helm_labels(find(inputs.rendered, "Deployment", DEPLOYMENT)?.clone());
    let image = required(&deployment, &["spec", "template", "spec", "containers"])?
        .get(0)
        .and_then(|c| c.get("image"))
        .and_then(Value::as_str)
        .ok_or_else(|| Error::Missing("the operator container's image".into()))?
        .to_owned();

    let root = csv
        .as_mapping_mut()
        .ok_or_else(|| Error::Shape("the base CSV is not a mapping".into()))?;
    {
        let metadata = mapping_mut(root, "metadata")?;
        metadata.insert("name".into(), csv_name(inputs.version).into());
        let annotations = mapping_mut(metadata, "annotations")?;
        annotations.insert("containerImage".into(), image.clone().into());
        annotations.insert(
            "alm-examples".into(),
            serde_json::to_string_pretty(inputs.samples)
                .map_err(Error::Json)?
                .into(),
        );
        // Every earlier release upgrades straight to this one.
        annotations.insert(
            "olm.skipRange".into(),
            format!(">=0.0.0 <{}", inputs.version).into(),
        );
        annotations.insert(
            "operatorframework.io/suggested-namespace".into(),
            "tusk-system".into(),
        );
    }
    let spec = mapping_mut(root, "spec")?;
    spec.insert("version".into(), inputs.version.into());
    spec.insert("icon".into(), icon(inputs.icon_svg));
    spec.insert("install".into(), install(inputs.rendered, deployment)?);
    spec.insert(
        "webhookdefinitions".into(),
        webhooks(inputs.rendered, inputs.crds)?,
    );
    spec.insert("relatedImages".into(), related_images(&image));
    check_owned(spec, inputs.crds)?;
    Ok(csv)
}

fn icon(svg: &[u8]) -> Value {
    let mut icon = Mapping::new();
    icon.insert(
        "base64data".into(),
        base64::engine::general_purpose::STANDARD.encode(svg).into(),
    );
    icon.insert("mediatype".into(), "image/svg+xml".into());
    Value::Sequence(vec![Value::Mapping(icon)])
}

fn related_images(image: &str) -> Value {
    let mut entry = Mapping::new();
    entry.insert("name".into(), "tusk".into());
    entry.insert("image".into(), image.into());
    Value::Sequence(vec![Value::Mapping(entry)])
}

fn rules_of(rendered: &[Value], kind: &str, name: &str) -> Result<Value, Error> {
    Ok(required(find(rendered, kind, name)?, &["rules"])?.clone())
}

fn permission(rules: Value) -> Value {
    let mut entry = Mapping::new();
    entry.insert("serviceAccountName".into(), SERVICE_ACCOUNT.into());
    entry.insert("rules".into(), rules);
    Value::Sequence(vec![Value::Mapping(entry)])
}

/// The install strategy: the chart's Deployment and its RBAC, as OLM wants them.
fn install(rendered: &[Value], deployment: Value) -> Result<Value, Error> {
    let mut entry = Mapping::new();
    entry.insert("name".into(), DEPLOYMENT.into());
    if let Some(labels) = at(&deployment, &["metadata", "labels"]) {
        entry.insert("label".into(), labels.clone());
    }
    entry.insert("spec".into(), required(&deployment, &["spec"])?.clone());
    let mut strategy = Mapping::new();
    strategy.insert(
        "deployments".into(),
        Value::Sequence(vec![Value::Mapping(entry)]),
    );
    strategy.insert(
        "permissions".into(),
        permission(rules_of(rendered, "Role", LEADER_ROLE)?),
    );
    strategy.insert(
        "clusterPermissions".into(),
        permission(rules_of(rendered, "ClusterRole", CLUSTER_ROLE)?),
    );
    let mut install = Mapping::new();
    install.insert("strategy".into(), "deployment".into());
    install.insert("spec".into(), Value::Mapping(strategy));
    Ok(Value::Mapping(install))
}

/// A webhook definition with the fields OLM needs to create and route it.
fn definition(kind: &str, generate_name: &str, path: &str) -> Mapping {
    let mut def = Mapping::new();
    def.insert("type".into(), kind.into());
    def.insert("generateName".into(), generate_name.into());
    def.insert("deploymentName".into(), DEPLOYMENT.into());
    def.insert("containerPort".into(), 443.into());
    def.insert("targetPort".into(), WEBHOOK_TARGET_PORT.into());
    def.insert("webhookPath".into(), path.into());
    def.insert(
        "admissionReviewVersions".into(),
        Value::Sequence(vec!["v1".into()]),
    );
    def.insert("sideEffects".into(), "None".into());
    def
}

/// The chart's validating webhooks, and the CRDs' conversion webhook.
fn webhooks(rendered: &[Value], crds: &[Value]) -> Result<Value, Error> {
    let validating = find(rendered, "ValidatingWebhookConfiguration", VALIDATING)?;
    let mut out = Vec::new();
    for hook in required(validating, &["webhooks"])?
        .as_sequence()
        .ok_or_else(|| Error::Shape("webhooks is not a list".into()))?
    {
        let name = required(hook, &["name"])?
            .as_str()
            .ok_or_else(|| Error::Shape("a webhook name is not a string".into()))?;
        let path = required(hook, &["clientConfig", "service", "path"])?
            .as_str()
            .ok_or_else(|| Error::Shape(format!("{name}: path is not a string")))?;
        let mut def = definition("ValidatingAdmissionWebhook", name, path);
        for key in [
            "failurePolicy",
            "matchPolicy",
            "timeoutSeconds",
            "rules",
            "sideEffects",
        ] {
            if let Some(value) = hook.get(key) {
                def.insert(key.into(), value.clone());
            }
        }
        out.push(Value::Mapping(def));
    }

    let mut converted = Vec::new();
    let mut conversion_path = None;
    for crd in crds {
        if at(crd, &["spec", "conversion", "strategy"]).and_then(Value::as_str) == Some("Webhook") {
            converted.push(required(crd, &["metadata", "name"])?.clone());
            conversion_path = at(
                crd,
                &[
                    "spec",
                    "conversion",
                    "webhook",
                    "clientConfig",
                    "service",
                    "path",
                ],
            )
            .and_then(Value::as_str)
            .map(str::to_owned);
        }
    }
    if let Some(path) = conversion_path {
        let mut def = definition("ConversionWebhook", "conversion.tusk.dev", &path);
        def.insert("conversionCRDs".into(), Value::Sequence(converted));
        def.insert("failurePolicy".into(), "Fail".into());
        out.push(Value::Mapping(def));
    }
    Ok(Value::Sequence(out))
}

/// Every served version of every CRD has an owned entry, and every owned entry
/// names a version a CRD serves: the console and OLM read them.
fn check_owned(spec: &Mapping, crds: &[Value]) -> Result<(), Error> {
    let owned: Vec<(String, String)> = spec
        .get("customresourcedefinitions")
        .and_then(|c| c.get("owned"))
        .and_then(Value::as_sequence)
        .ok_or_else(|| Error::Missing("spec.customresourcedefinitions.owned".into()))?
        .iter()
        .map(|o| {
            let field = |k: &str| {
                o.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            (field("name"), field("version"))
        })
        .collect();
    let mut served = Vec::new();
    for crd in crds {
        let name = required(crd, &["metadata", "name"])?
            .as_str()
            .unwrap_or_default()
            .to_owned();
        for version in required(crd, &["spec", "versions"])?
            .as_sequence()
            .into_iter()
            .flatten()
        {
            if version.get("served").and_then(Value::as_bool) == Some(true) {
                let v = version
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                served.push((name.clone(), v.to_owned()));
            }
        }
    }
    for entry in &served {
        if !owned.contains(entry) {
            return Err(Error::Stale(format!(
                "{} {} is served but has no owned entry in the base CSV",
                entry.0, entry.1
            )));
        }
    }
    for entry in &owned {
        if !served.contains(entry) {
            return Err(Error::Stale(format!(
                "the base CSV owns {} {}, which no CRD serves",
                entry.0, entry.1
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::parse_stream;

    const RENDERED: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: tusk-operator}
rules:
  - {apiGroups: ["tusk.dev"], resources: ["databases"], verbs: ["get"]}
---
kind: Role
metadata: {name: tusk-operator-leader, namespace: tusk-system}
rules:
  - {apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get"]}
---
kind: Deployment
metadata:
  name: tusk-operator
  labels: {app.kubernetes.io/name: tusk, helm.sh/chart: tusk-0.1.0}
spec:
  replicas: 2
  template:
    spec:
      containers:
        - {name: operator, image: "example/tusk:1.2.3"}
---
kind: ValidatingWebhookConfiguration
metadata: {name: tusk-validating}
webhooks:
  - name: database.tusk.dev
    failurePolicy: Fail
    clientConfig: {service: {name: tusk-webhook, path: /validate/database}}
    rules: [{apiGroups: ["tusk.dev"], operations: ["CREATE"], resources: ["databases"]}]
"#;

    const CRDS: &str = r#"
kind: CustomResourceDefinition
metadata: {name: databases.tusk.dev}
spec:
  conversion:
    strategy: Webhook
    webhook: {clientConfig: {service: {name: tusk-webhook, path: /convert}}}
  versions:
    - {name: v1, served: true}
    - {name: v1alpha1, served: true}
"#;

    fn base(owned: &str) -> Value {
        serde_yaml::from_str(&format!(
            "kind: ClusterServiceVersion\nmetadata:\n  annotations:\n    capabilities: Basic Install\nspec:\n  customresourcedefinitions:\n    owned: {owned}\n"
        ))
        .unwrap()
    }

    fn built(owned: &str) -> Result<Value, Error> {
        let rendered = parse_stream(RENDERED).unwrap();
        let crds = parse_stream(CRDS).unwrap();
        let samples =
            vec![serde_yaml::from_str("{kind: Database, metadata: {name: orders}}").unwrap()];
        build(&Inputs {
            base: base(owned),
            rendered: &rendered,
            crds: &crds,
            samples: &samples,
            version: "1.2.3",
            icon_svg: b"<svg/>",
        })
    }

    const BOTH: &str =
        "[{name: databases.tusk.dev, version: v1}, {name: databases.tusk.dev, version: v1alpha1}]";

    #[test]
    fn the_csv_carries_the_charts_deployment_rbac_and_webhooks() {
        let csv = built(BOTH).unwrap();
        assert_eq!(csv["metadata"]["name"], "tusk.v1.2.3");
        assert_eq!(csv["spec"]["version"], "1.2.3");
        assert_eq!(
            csv["metadata"]["annotations"]["capabilities"],
            "Basic Install"
        );
        assert_eq!(
            csv["metadata"]["annotations"]["containerImage"],
            "example/tusk:1.2.3"
        );
        assert_eq!(
            csv["metadata"]["annotations"]["olm.skipRange"],
            ">=0.0.0 <1.2.3"
        );
        let examples: serde_json::Value = serde_json::from_str(
            csv["metadata"]["annotations"]["alm-examples"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(examples[0]["metadata"]["name"], "orders");

        let install = &csv["spec"]["install"];
        assert_eq!(install["strategy"], "deployment");
        let deployment = &install["spec"]["deployments"][0];
        assert_eq!(deployment["name"], "tusk-operator");
        assert_eq!(deployment["spec"]["replicas"], 2);
        assert!(deployment["label"].get("helm.sh/chart").is_none());
        assert_eq!(
            install["spec"]["clusterPermissions"][0]["rules"][0]["resources"][0],
            "databases"
        );
        assert_eq!(
            install["spec"]["permissions"][0]["rules"][0]["resources"][0],
            "leases"
        );
        assert_eq!(
            install["spec"]["permissions"][0]["serviceAccountName"],
            "tusk-operator"
        );

        let hooks = csv["spec"]["webhookdefinitions"].as_sequence().unwrap();
        assert_eq!(hooks.len(), 2);
        assert_eq!(hooks[0]["type"], "ValidatingAdmissionWebhook");
        assert_eq!(hooks[0]["generateName"], "database.tusk.dev");
        assert_eq!(hooks[0]["webhookPath"], "/validate/database");
        assert_eq!(hooks[0]["targetPort"], 9443);
        assert_eq!(hooks[0]["rules"][0]["operations"][0], "CREATE");
        assert_eq!(hooks[1]["type"], "ConversionWebhook");
        assert_eq!(hooks[1]["conversionCRDs"][0], "databases.tusk.dev");
        assert_eq!(hooks[1]["webhookPath"], "/convert");
        assert_eq!(
            csv["spec"]["relatedImages"][0]["image"],
            "example/tusk:1.2.3"
        );
        assert_eq!(csv["spec"]["icon"][0]["mediatype"], "image/svg+xml");
    }

    #[test]
    fn a_served_version_without_an_owned_entry_is_an_error() {
        let error = built("[{name: databases.tusk.dev, version: v1}]").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("databases.tusk.dev v1alpha1 is served"),
            "{error}"
        );
    }

    #[test]
    fn an_owned_entry_no_crd_serves_is_an_error() {
        let owned = "[{name: databases.tusk.dev, version: v1}, {name: databases.tusk.dev, version: v1alpha1}, {name: databases.tusk.dev, version: v2}]";
        let error = built(owned).unwrap_err();
        assert!(
            error.to_string().contains("owns databases.tusk.dev v2"),
            "{error}"
        );
    }
}
