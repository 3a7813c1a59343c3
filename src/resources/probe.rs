//! The pod of a drill's probe ([`crate::probe`]): the operator image running
//! `tusk probe` against the Database's `-rw` Service with the `-app`
//! Secret mounted, owned by the Drill (deleting the Drill removes it).
//! Small and restricted like every pod Tusk builds; never restarted (a
//! restarted probe would have forgotten what it saw).

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, Pod, PodSecurityContext, PodSpec, Probe,
    ResourceRequirements, SeccompProfile, SecretVolumeSource, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::api::v1::Drill;
use crate::contract::drill::PROBE_PORT;
use crate::probe::CREDENTIALS_DIR;

use super::container::{container_security_context, mount};
use super::{BuildConfig, names};

/// The label naming the Drill a probe pod belongs to.
pub const DRILL_LABEL: &str = "tusk.dev/drill";

/// The uid the probe runs as: the operator image's `nonroot`.
const PROBE_UID: i64 = 65532;

const CREDENTIALS_VOLUME: &str = "credentials";

/// The probe pod's name for Drill `drill`.
pub fn probe_pod_name(drill: &str) -> String {
    let name = format!("{drill}-probe");
    if name.len() <= 63 {
        return name;
    }
    format!("{}-probe", drill[..57].trim_end_matches('-'))
}

/// The probe pod of `drill`, dialling `address` (the `-rw` Service's
/// cluster IP) when given. `None` when the Drill was never stored (no uid to
/// own the pod by).
pub fn probe_pod(drill: &Drill, address: Option<IpAddr>, config: &BuildConfig) -> Option<Pod> {
    let owner = drill.controller_owner_ref(&())?;
    let mut args = vec!["probe".to_owned()];
    if let Some(address) = address {
        args.extend(["--address".to_owned(), address.to_string()]);
    }
    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/name".to_owned(),
            "tusk-drill-probe".to_owned(),
        ),
        ("app.kubernetes.io/managed-by".to_owned(), "tusk".to_owned()),
        (DRILL_LABEL.to_owned(), drill.name_any()),
    ]);
    let quantity = |q: &str| Quantity(q.to_owned());
    let container = Container {
        name: "probe".to_owned(),
        image: Some(config.tusk_image.clone()),
        image_pull_policy: config.image_pull_policy.clone(),
        args: Some(args),
        ports: Some(vec![ContainerPort {
            name: Some("probe".to_owned()),
            container_port: i32::from(PROBE_PORT),
            ..ContainerPort::default()
        }]),
        // Why it ended, in the pod's status: the drill's verdict quotes it.
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/healthz".to_owned()),
                port: IntOrString::Int(i32::from(PROBE_PORT)),
                ..HTTPGetAction::default()
            }),
            period_seconds: Some(2),
            ..Probe::default()
        }),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), quantity("10m")),
                ("memory".to_owned(), quantity("16Mi")),
            ])),
            limits: Some(BTreeMap::from([("memory".to_owned(), quantity("64Mi"))])),
            ..ResourceRequirements::default()
        }),
        volume_mounts: Some(vec![mount(CREDENTIALS_VOLUME, CREDENTIALS_DIR, true)]),
        security_context: Some(container_security_context()),
        ..Container::default()
    };
    Some(Pod {
        metadata: ObjectMeta {
            name: Some(probe_pod_name(&drill.name_any())),
            namespace: drill.namespace(),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_owned()),
            termination_grace_period_seconds: Some(2),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(PROBE_UID),
                run_as_group: Some(PROBE_UID),
                // The Secret's files are 0400: owned by this group, or the
                // probe (not root) cannot read its credentials.
                fs_group: Some(PROBE_UID),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".to_owned(),
                    localhost_profile: None,
                }),
                ..PodSecurityContext::default()
            }),
            containers: vec![container],
            volumes: Some(vec![Volume {
                name: CREDENTIALS_VOLUME.to_owned(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(names::app_secret(&drill.spec.database)),
                    // Readable by the probe's uid only.
                    default_mode: Some(0o400),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            }]),
            ..PodSpec::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v1::Scenario;
    use crate::resources::tests::config;

    fn drill(name: &str) -> Drill {
        crate::api::arbitrary::stored_drill(name, Scenario::DeletePrimaryPod)
    }

    #[test]
    fn the_probe_runs_the_operator_image_against_rw_with_the_app_secret_owned_by_the_drill() {
        let pod = probe_pod(
            &drill("orders-kill"),
            Some("10.96.0.12".parse().unwrap()),
            &config(),
        )
        .unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("orders-kill-probe"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("shop"));
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Drill", "u-1"));
        assert_eq!(owner.controller, Some(true));
        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        let container = &spec.containers[0];
        assert_eq!(container.image.as_deref(), Some("localhost/tusk:dev"));
        assert_eq!(
            container.args.as_deref().unwrap(),
            ["probe", "--address", "10.96.0.12"]
        );
        let secret = spec.volumes.unwrap()[0].secret.clone().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("orders-app"));
        assert_eq!(
            container.volume_mounts.as_ref().unwrap()[0].mount_path,
            CREDENTIALS_DIR
        );
        assert_eq!(
            container
                .security_context
                .as_ref()
                .unwrap()
                .read_only_root_filesystem,
            Some(true)
        );
        let pod_security = spec.security_context.as_ref().unwrap();
        assert_eq!(
            pod_security.fs_group, pod_security.run_as_user,
            "the probe reads its 0400 credentials through its group"
        );
    }

    #[test]
    fn an_unstored_drill_gets_no_probe_and_long_names_fit_a_label() {
        let mut unstored = drill("orders-kill");
        unstored.metadata.uid = None;
        assert!(probe_pod(&unstored, None, &config()).is_none());
        let long = "d".repeat(63);
        let name = probe_pod_name(&long);
        assert!(name.len() <= 63 && name.ends_with("-probe"), "{name}");
    }
}
