//! Verifying a Backup against the cluster: create the verification Job,
//! follow it, read its pod's report and delete it; [`super::decide`] says
//! what the status becomes.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams, PropagationPolicy};

use super::decide::{finished, outcome_of, running, source};
use crate::api::status::BackupStatus;
use crate::api::v1::{Backup, Database};
use crate::api::{store, validate};
use crate::controller::{Context, Error};
use crate::resources::{verify_job, verify_job_name};

/// How often a running verification is looked at.
const POLL: Duration = Duration::from_secs(5);

/// One verification step for a completed Backup: create the Job, or read its
/// outcome once it ended (then delete it). Returns the status and when to
/// look again.
pub async fn step(
    ctx: &Context,
    backup: &Backup,
    db: &Database,
    status: &BackupStatus,
    now: &Time,
) -> Result<(BackupStatus, Option<Duration>), Error> {
    let namespace = backup.namespace().unwrap_or_default();
    let generation = backup.metadata.generation;
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = verify_job_name(&backup.name_any());
    let Some(job) = jobs
        .get_opt(&name)
        .await
        .map_err(Error::kube("reading the verification Job"))?
    else {
        let db = store::with_default(db, ctx.build.default_store.as_ref());
        let Some(source) = source(backup, &db) else {
            let why = "the Backup's status has no location or end LSN to verify".to_owned();
            return Ok((finished(status, Err(why), generation, now), None));
        };
        // A Database whose spec is invalid builds nothing, this Job included:
        // the verification waits for the spec to be corrected.
        let Ok(model) = validate::validated(&db, &ctx.build.defaults()) else {
            return Ok((status.clone(), Some(POLL)));
        };
        let job = verify_job(&model, backup, &source, &ctx.build);
        match jobs.create(&PostParams::default(), &job).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(Error::kube("creating the verification Job")(e)),
        }
        return Ok((running(status, &name, generation, now), Some(POLL)));
    };
    let job_status = job.status.clone().unwrap_or_default();
    let ended = job_status.succeeded.unwrap_or(0) > 0 || job_status.failed.unwrap_or(0) > 0;
    if !ended {
        return Ok((running(status, &name, generation, now), Some(POLL)));
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let listed = pods
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .map_err(Error::kube("listing the verification Job's pod"))?;
    let outcome = outcome_of(&listed.items, &name);
    let next = finished(status, outcome, generation, now);
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match jobs.delete(&name, &background).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => return Err(Error::kube("deleting the verification Job")(e)),
    }
    Ok((next, None))
}
