//! A schema migration Job as the lifecycle sees it: where it is, and why it
//! failed in the words of its container (its termination message, which
//! holds the last lines it logged). Pure: the Jobs and their pods come from
//! the pass's snapshot.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::lifecycle::{JobState, MigrationJob, tail};
use crate::resources::{
    MIGRATION_CONTAINER, MIGRATION_DEADLINE_SECONDS, MIGRATION_VERSION_ANNOTATION,
};

/// The label the Job controller puts on its pods.
const JOB_NAME_LABEL: &str = "job-name";
/// At most this many bytes of a failure's last lines are kept in the status.
const TAIL_BYTES: usize = 1024;

/// The migration Jobs among `jobs` (the Database's own), with their pods
/// among `pods`.
pub fn migration_jobs(jobs: &[Job], pods: &[Pod]) -> Vec<MigrationJob> {
    jobs.iter()
        .filter_map(|job| {
            let version = job.annotations().get(MIGRATION_VERSION_ANNOTATION)?.clone();
            let name = job.name_any();
            let own: Vec<Pod> = pods
                .iter()
                .filter(|p| p.labels().get(JOB_NAME_LABEL) == Some(&name))
                .cloned()
                .collect();
            Some(MigrationJob {
                state: state_of(job, || failure_of(job, &own)),
                deleting: job.metadata.deletion_timestamp.is_some(),
                name,
                version,
            })
        })
        .collect()
}

/// The state of a Job from its conditions (`Complete` or `Failed`, set once
/// its pods have ended), with `why` for a failure.
pub fn state_of(job: &Job, why: impl FnOnce() -> String) -> JobState {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let is = |type_: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    };
    if is("Complete") {
        JobState::Succeeded(String::new())
    } else if is("Failed") {
        JobState::Failed(why())
    } else {
        JobState::Running
    }
}

/// Why a failed Job failed: the last lines its newest ended pod's container
/// logged (its termination message), else the Job's own reason.
pub fn failure_of(job: &Job, pods: &[Pod]) -> String {
    let condition = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Failed"));
    let deadline = condition.and_then(|c| c.reason.as_deref()) == Some("DeadlineExceeded");
    let mut ended: Vec<_> = pods
        .iter()
        .filter_map(|pod| {
            let terminated = pod
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .find(|c| c.name == MIGRATION_CONTAINER)?
                .state
                .as_ref()?
                .terminated
                .clone()?;
            Some((terminated.finished_at.clone(), terminated))
        })
        .collect();
    ended.sort_by(|a, b| a.0.as_ref().map(|t| t.0).cmp(&b.0.as_ref().map(|t| t.0)));
    let last = ended.pop().map(|(_, t)| {
        let lines = tail(t.message.as_deref().unwrap_or_default(), TAIL_BYTES);
        if lines.is_empty() {
            format!(
                "exit code {} ({})",
                t.exit_code,
                t.reason.unwrap_or_default()
            )
        } else {
            format!("exit code {}: {lines}", t.exit_code)
        }
    });
    match (deadline, last) {
        (true, last) => format!(
            "ran longer than {MIGRATION_DEADLINE_SECONDS} s{}",
            last.map(|l| format!("; {l}")).unwrap_or_default()
        ),
        (false, Some(last)) => last,
        (false, None) => condition
            .map(|c| {
                format!(
                    "{}: {}",
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "the Job failed without a message".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn job_with(conditions: Vec<(&str, &str)>) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(
                    conditions
                        .into_iter()
                        .map(|(type_, reason)| JobCondition {
                            type_: type_.into(),
                            status: "True".into(),
                            reason: Some(reason.into()),
                            message: Some(format!("{reason} happened")),
                            ..JobCondition::default()
                        })
                        .collect(),
                ),
                ..JobStatus::default()
            }),
            ..Job::default()
        }
    }

    fn ended_pod(second: i64, exit_code: i32, message: &str) -> Pod {
        Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: MIGRATION_CONTAINER.into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code,
                            message: Some(message.into()),
                            reason: Some("Error".into()),
                            finished_at: Some(Time(
                                k8s_openapi::jiff::Timestamp::from_second(second)
                                    .unwrap_or_default(),
                            )),
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
    fn job_states_come_from_their_conditions() {
        let why = || "why".to_owned();
        assert_eq!(state_of(&Job::default(), why), JobState::Running);
        assert_eq!(
            state_of(&job_with(vec![("SuccessCriteriaMet", "x")]), why),
            JobState::Running
        );
        assert_eq!(
            state_of(&job_with(vec![("Complete", "x")]), why),
            JobState::Succeeded(String::new())
        );
        assert_eq!(
            state_of(&job_with(vec![("Failed", "BackoffLimitExceeded")]), why),
            JobState::Failed("why".into())
        );
    }

    #[test]
    fn a_failure_is_the_newest_pods_last_lines() {
        let job = job_with(vec![("Failed", "BackoffLimitExceeded")]);
        let pods = [
            ended_pod(
                200,
                3,
                "psql:<stdin>:1: ERROR:  relation \"nope\" does not exist\n",
            ),
            ended_pod(100, 2, "could not connect"),
        ];
        assert_eq!(
            failure_of(&job, &pods),
            "exit code 3: psql:<stdin>:1: ERROR:  relation \"nope\" does not exist"
        );
        // No pod left: the Job's reason.
        assert_eq!(
            failure_of(&job, &[]),
            "BackoffLimitExceeded: BackoffLimitExceeded happened"
        );
        // Nothing logged.
        assert_eq!(
            failure_of(&job, &[ended_pod(1, 1, "")]),
            "exit code 1 (Error)"
        );
        // Out of time.
        let late = job_with(vec![("Failed", "DeadlineExceeded")]);
        assert_eq!(
            failure_of(&late, &[ended_pod(1, 143, "still waiting for a lock")]),
            format!(
                "ran longer than {MIGRATION_DEADLINE_SECONDS} s; exit code 143: still waiting for a lock"
            )
        );
    }
}
