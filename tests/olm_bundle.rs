//! The OLM bundle under bundle/, validated by a real operator-sdk (built from its
//! Go module by scripts/install-tools) with the OperatorHub suite.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

use std::path::Path;
use std::process::Command;

use serde_yaml::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tool(name: &str) -> String {
    let output = Command::new(repo().join("scripts/install-tools"))
        .args(["--path", name])
        .output()
        .expect("run scripts/install-tools");
    assert!(
        output.status.success(),
        "scripts/install-tools --path {name}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[test]
fn operator_sdk_validates_the_bundle_with_the_operatorframework_suite() {
    let output = Command::new(tool("operator-sdk"))
        .args([
            "bundle",
            "validate",
            "./bundle",
            "--select-optional",
            "suite=operatorframework",
        ])
        .current_dir(repo())
        // Its own cache and config, never the user's.
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run operator-sdk");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "operator-sdk bundle validate:\n{text}"
    );
    assert!(
        text.contains("All validation tests have completed successfully"),
        "{text}"
    );
    // Warnings are findings too: the suite's advice is taken, not ignored,
    // except one the validator cannot get right. RBAC rules carry no API
    // version, so any rule on events or endpointslices reads to it as the
    // v1beta1 APIs removed in 1.25; Tusk uses events.k8s.io/v1 Events and
    // discovery.k8s.io/v1 EndpointSlices. A warning naming anything else stays.
    let only_v1_look_alikes = |line: &str| {
        line.split_once("Migrate the API(s) for ")
            .is_some_and(|(before, apis)| {
                before.contains("deprecated and removed in v1.25")
                    && apis
                        .trim_end_matches('"')
                        .split("),")
                        .filter(|api| !api.trim().is_empty())
                        .all(|api| {
                            let name = api.split(':').next().unwrap_or_default().trim();
                            name == "events" || name == "endpointslices"
                        })
            })
    };
    let unexplained: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("level=warning"))
        .filter(|line| !only_v1_look_alikes(line))
        .collect();
    assert!(unexplained.is_empty(), "{}", unexplained.join("\n"));
}

#[test]
fn the_bundle_installs_the_operator_the_chart_installs() {
    let read = |path: &str| -> Value {
        serde_yaml::from_str(&std::fs::read_to_string(repo().join(path)).unwrap()).unwrap()
    };
    let csv = read("bundle/manifests/tusk.clusterserviceversion.yaml");
    let annotations = read("bundle/metadata/annotations.yaml");
    assert_eq!(
        annotations["annotations"]["operators.operatorframework.io.bundle.package.v1"],
        "tusk"
    );
    assert_eq!(csv["spec"]["version"], env!("CARGO_PKG_VERSION"));
    let deployment = &csv["spec"]["install"]["spec"]["deployments"][0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    // OLM mounts its own serving certificate there and keeps the caBundles.
    let cert_dir = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "TUSK_WEBHOOK_CERT_DIR")
        .map(|e| e["value"].clone());
    assert_eq!(
        cert_dir,
        Some("/tmp/k8s-webhook-server/serving-certs".into())
    );
    let hooks: Vec<_> = csv["spec"]["webhookdefinitions"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|h| h["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        hooks,
        [
            "ValidatingAdmissionWebhook",
            "ValidatingAdmissionWebhook",
            "ValidatingAdmissionWebhook",
            "ConversionWebhook"
        ]
    );
    // A conversion webhook is cluster-wide: AllNamespaces is the only honest mode.
    let modes: Vec<_> = csv["spec"]["installModes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|m| m["supported"] == true)
        .map(|m| m["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(modes, ["AllNamespaces"]);
    // The console offers an example of every kind, a Drill too.
    let examples: Vec<serde_json::Value> = serde_json::from_str(
        csv["metadata"]["annotations"]["alm-examples"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let kinds: Vec<&str> = examples.iter().filter_map(|e| e["kind"].as_str()).collect();
    for kind in ["Database", "Backup", "Drill"] {
        assert!(
            kinds.contains(&kind),
            "no {kind} in alm-examples: {kinds:?}"
        );
    }
    for crd in ["databases", "backups", "drills"] {
        let crd = read(&format!("bundle/manifests/tusk.dev_{crd}.yaml"));
        assert_eq!(crd["kind"], "CustomResourceDefinition");
    }
}
