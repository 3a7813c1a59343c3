//! The kubelet's probes of an instance follow its API: HTTPS when the pod
//! serves TLS (its manager has [`env::TLS_DIR`], the same signal observe reads
//! as `Pod.tls`), plain HTTP otherwise. The kubelet neither presents a client
//! certificate nor verifies the server's, and the probe paths are open to
//! callers without one (see `instance::api::access`).

use k8s_openapi::api::core::v1::{Container, Probe};

use crate::contract::env;

/// `container` with its HTTP probes on HTTPS when its environment gives it a
/// TLS directory.
pub fn https_when_tls(mut container: Container) -> Container {
    let tls = container
        .env
        .iter()
        .flatten()
        .any(|var| var.name == env::TLS_DIR);
    if tls {
        for probe in [
            &mut container.readiness_probe,
            &mut container.liveness_probe,
            &mut container.startup_probe,
        ] {
            set_https(probe.as_mut());
        }
    }
    container
}

fn set_https(probe: Option<&mut Probe>) {
    if let Some(get) = probe.and_then(|p| p.http_get.as_mut()) {
        get.scheme = Some("HTTPS".to_owned());
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{EnvVar, HTTPGetAction};

    use super::*;

    fn probe() -> Option<Probe> {
        Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/healthz".into()),
                ..HTTPGetAction::default()
            }),
            ..Probe::default()
        })
    }

    fn container(env: &[&str]) -> Container {
        Container {
            env: Some(
                env.iter()
                    .map(|name| EnvVar {
                        name: (*name).to_owned(),
                        value: Some("/tusk/tls".into()),
                        ..EnvVar::default()
                    })
                    .collect(),
            ),
            readiness_probe: probe(),
            liveness_probe: probe(),
            startup_probe: probe(),
            ..Container::default()
        }
    }

    fn schemes(container: &Container) -> Vec<Option<String>> {
        [
            &container.readiness_probe,
            &container.liveness_probe,
            &container.startup_probe,
        ]
        .iter()
        .map(|p| {
            p.as_ref()
                .and_then(|p| p.http_get.as_ref())
                .and_then(|g| g.scheme.clone())
        })
        .collect()
    }

    #[test]
    fn probes_use_https_exactly_when_the_pod_serves_tls() {
        let with = https_when_tls(container(&["TUSK_INSTANCE", env::TLS_DIR]));
        assert_eq!(schemes(&with), vec![Some("HTTPS".to_owned()); 3]);
        let without = https_when_tls(container(&["TUSK_INSTANCE"]));
        assert_eq!(schemes(&without), vec![None; 3], "the default, HTTP");
    }
}
