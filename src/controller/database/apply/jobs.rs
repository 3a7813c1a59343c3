//! The Jobs of a major upgrade, and the Backup taken before one.

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{DeleteParams, PropagationPolicy};

use super::{Applier, Done};
use crate::contract::UpgradeJob;
use crate::controller::Error;
use crate::resources::{self, names};

/// An upgrade Job as the plan asked for it ([`crate::lifecycle::Action::RunUpgradeJob`]).
pub(super) struct UpgradeRun<'a> {
    pub job: UpgradeJob,
    pub from: u32,
    pub to: u32,
    /// The instance whose data directory is upgraded.
    pub instance: &'a str,
    /// The node its volume is used on.
    pub node: Option<&'a str>,
    pub from_image: &'a str,
    pub to_image: &'a str,
}

impl Applier<'_> {
    /// Creates the Job; one that exists (an earlier pass made it) is never run twice.
    pub(super) async fn run_upgrade_job(
        &self,
        run: &UpgradeRun<'_>,
    ) -> Result<Option<Done>, Error> {
        let input = resources::upgrade::UpgradeJobInput {
            db: self.model,
            config: self.build,
            old_image: run.from_image.to_owned(),
            new_image: run.to_image.to_owned(),
            old_major: run.from,
            new_major: run.to,
            claim: names::pvc(run.instance),
            node: run.node.map(str::to_owned),
            primary_host: self.snapshot.pod_ip(run.instance),
            primary_tls: self.snapshot.pod_serves_tls(run.instance),
        };
        let built = resources::upgrade::job(&input, run.job);
        let name = built.name_any();
        if !self.create_once(&built, "creating an upgrade Job").await? {
            return Ok(None);
        }
        Ok(Some(Done {
            reason: "UpgradeJob",
            note: format!(
                "created Job {name}: {} of {} from PostgreSQL {} to {}",
                run.job.as_str(),
                run.instance,
                run.from,
                run.to
            ),
        }))
    }

    pub(super) async fn delete_job(&self, name: &str) -> Result<Option<Done>, Error> {
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        match self.api::<Job>().delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
            Err(err) => return Err(Error::kube("deleting a Job")(err)),
        }
        Ok(Some(Done {
            reason: "DeletedJob",
            note: format!("deleted Job {name}"),
        }))
    }
}
