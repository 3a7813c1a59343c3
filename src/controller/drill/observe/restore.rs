//! What a `restore` drill's pass reads beside the rest: the throwaway
//! Database on record (`fault.object`) and the checker pod with the report
//! it left in its termination message.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;

use super::database_view;
use crate::api::drill::Scenario;
use crate::api::v1::{Database, Drill};
use crate::controller::{Context, Error};
use crate::drill::restore::{CheckView, CopyView, RestoreView};
use crate::probe::check::CheckReport;
use crate::resources::check_pod_name;

/// The copy and the checker of `drill`; nothing for other scenarios.
pub async fn view(ctx: &Context, drill: &Drill, namespace: &str) -> Result<RestoreView, Error> {
    if drill.spec.scenario != Scenario::Restore {
        return Ok(RestoreView::default());
    }
    let copy = match drill
        .status
        .as_ref()
        .and_then(|s| s.fault.as_ref())
        .map(|f| f.object.clone().unwrap_or_else(|| f.target.clone()))
    {
        Some(name) => {
            let databases: Api<Database> = Api::namespaced(ctx.client.clone(), namespace);
            databases
                .get_opt(&name)
                .await
                .map_err(Error::kube("reading the drill's restored copy"))?
                .filter(|db| db.metadata.deletion_timestamp.is_none())
                .and_then(|db| copy_view(&db))
        }
        None => None,
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let check = pods
        .get_opt(&check_pod_name(&drill.name_any()))
        .await
        .map_err(Error::kube("reading the drill's checker pod"))?
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .map_or_else(CheckView::default, |pod| check_view(&pod));
    Ok(RestoreView { copy, check })
}

fn copy_view(db: &Database) -> Option<CopyView> {
    let created = db.metadata.creation_timestamp.as_ref()?.0;
    let view = database_view(db, None);
    Some(CopyView {
        created,
        ready: view.ready,
        ready_since: view.ready_since,
    })
}

/// The checker's report once its pod ended, or why it left none.
pub fn check_view(pod: &Pod) -> CheckView {
    let status = pod.status.clone().unwrap_or_default();
    let ended = match status.phase.as_deref() {
        Some("Succeeded" | "Failed") => {
            let terminated = status
                .container_statuses
                .iter()
                .flatten()
                .find_map(|c| c.state.as_ref()?.terminated.clone());
            let message = terminated
                .as_ref()
                .and_then(|t| t.message.clone())
                .unwrap_or_default();
            Some(
                serde_json::from_str::<CheckReport>(message.trim()).map_err(|_| {
                    let why = terminated
                        .and_then(|t| t.reason)
                        .or(status.message.clone())
                        .unwrap_or_default();
                    format!(
                        "it ended without a report ({why}): {}",
                        message.trim().chars().take(300).collect::<String>()
                    )
                }),
            )
        }
        _ => None,
    };
    CheckView {
        exists: true,
        ended,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };

    fn ended(phase: &str, message: Option<&str>) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "check".into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 1,
                            reason: Some("Error".into()),
                            message: message.map(str::to_owned),
                            ..ContainerStateTerminated::default()
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn the_report_is_read_from_the_termination_message_and_its_absence_explained() {
        let report = r#"{"compared":5,"missing":1,"firstMissing":[4]}"#;
        let view = check_view(&ended("Succeeded", Some(report)));
        let found = view.ended.unwrap().unwrap();
        assert_eq!((found.compared, found.missing), (5, 1));
        let view = check_view(&ended("Failed", Some("panic: no\n")));
        let why = view.ended.unwrap().unwrap_err();
        assert!(why.contains("without a report (Error): panic"), "{why}");
        let running = check_view(&Pod::default());
        assert!(running.exists && running.ended.is_none());
    }
}
