//! Carrying out the actions the drill's state machine asks for: the probe
//! pod, the injections (a switchover through `spec.primary`, pods deleted
//! with grace 0, the fault endpoints of the primary's instance manager with
//! the operator's token and, for a pod that serves TLS, its certificate, the
//! partition and canary NetworkPolicies),
//! their undo, the Database's `LastDrill` condition, Events and metrics.
//!
//! Each action answers an [`Outcome`]: whether it happened, was refused (it
//! did not happen: a 4xx, a pod that is not there) or may have happened.
//! Nothing is pretended: an endpoint that answers 404 is a refused
//! injection, and the run fails with its error.
//!
//! The `restore` scenario's actions (its throwaway Database, its checker
//! pod, their deletion) are in [`restore`].

mod restore;

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use serde_json::json;
use tracing::{info, warn};

use super::observe::Seen;
use super::probe_client;
use crate::api::drill::{Scenario, defaults};
use crate::api::v1::{Database, Drill};
use crate::contract::drill::FaultRequest;
use crate::controller::credentials::instance_token;
use crate::controller::database::instances::{Call, CallError, Target};
use crate::controller::database::observe::tls::{SecretReads, client_tls};
use crate::controller::{Context, Error};
use crate::drill::{Action, Outcome};
use crate::resources::{self, names};
use crate::resources::{DrillPolicy, canary_policy, drill_policy_name, partition_policy};
use crate::resources::{probe_pod, probe_pod_name};
use crate::telemetry::drill_metrics::FinishedRun;

/// Field manager of the Database's `LastDrill` condition: the Database
/// controller's own conditions (field manager `tusk`) are untouched.
pub const LAST_DRILL_MANAGER: &str = "tusk-drill";
/// The Database condition a drill's end sets.
pub const LAST_DRILL: &str = "LastDrill";

/// One pass's actions on one Drill.
pub struct Act<'a> {
    pub ctx: &'a Context,
    pub drill: &'a Drill,
    pub namespace: &'a str,
    pub seen: &'a Seen,
}

impl Act<'_> {
    /// Carries out `action`. Errors are API failures of the bookkeeping
    /// (the `LastDrill` condition) that the next pass retries.
    pub async fn run(&self, action: &Action) -> Result<Outcome, Error> {
        Ok(match action {
            Action::CreateProbe => self.create_probe().await,
            Action::ApplyCanary => self.apply_policy(canary_policy(self.drill)).await,
            Action::RemoveCanary => self.remove_policy(DrillPolicy::Canary).await,
            Action::Inject { scenario, target } => self.inject(*scenario, target).await,
            Action::Undo { scenario, target } => self.undo(*scenario, target).await,
            Action::FinishProbe => match &self.seen.probe_ip {
                Some(ip) => match probe_client::finish(ip).await {
                    Ok(_) => Outcome::Done,
                    Err(error) => Outcome::Unknown(error.to_string()),
                },
                None => Outcome::Unknown("the probe has no IP".to_owned()),
            },
            Action::StartRestore {
                primary,
                copy,
                target_time,
            } => self.start_restore(primary, copy, *target_time).await,
            Action::CheckCopy { copy, ids } => self.check_copy(copy, ids).await,
            Action::DeleteProbe => {
                self.delete_pod(&probe_pod_name(&self.drill.name_any()))
                    .await
            }
            Action::ApplyLastDrill {
                succeeded,
                reason,
                message,
            } => {
                self.last_drill(*succeeded, reason, message).await?;
                Outcome::Done
            }
            Action::Event {
                warning,
                reason,
                message,
            } => {
                let type_ = if *warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                };
                self.ctx
                    .publish(self.drill, type_, reason, "Drill", message.clone())
                    .await;
                Outcome::Done
            }
            Action::Record {
                phase,
                figures,
                finished_at,
            } => {
                self.ctx.metrics.drills.finished(&FinishedRun {
                    namespace: self.namespace,
                    database: &self.drill.spec.database,
                    drill: &self.drill.name_any(),
                    scenario: self.drill.spec.scenario.as_str(),
                    verdict: phase.as_str(),
                    write_outage_seconds: figures.write_outage_seconds,
                    lost_writes: figures.lost_writes,
                    seconds_to_ready: figures.seconds_to_ready,
                    finished_at: finished_at.as_millisecond() as f64 / 1000.0,
                });
                Outcome::Done
            }
        })
    }

    async fn create_probe(&self) -> Outcome {
        let address = self.rw_address().await;
        let Some(pod) = probe_pod(self.drill, address, &self.ctx.build) else {
            return Outcome::Refused("the Drill has no uid to own its probe by".to_owned());
        };
        let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        match pods.create(&PostParams::default(), &pod).await {
            Ok(_) => Outcome::Done,
            Err(kube::Error::Api(e)) if e.code == 409 => Outcome::Done,
            Err(error) => kube_outcome(error),
        }
    }

    /// The `-rw` Service's cluster IP: the probe dials it without DNS.
    async fn rw_address(&self) -> Option<IpAddr> {
        let services: Api<Service> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        let service = services
            .get_opt(&names::rw_service(&self.drill.spec.database))
            .await
            .ok()
            .flatten()?;
        service.spec?.cluster_ip?.parse().ok()
    }

    async fn inject(&self, scenario: Scenario, target: &str) -> Outcome {
        info!(scenario = scenario.as_str(), %target, "injecting");
        let seconds = self
            .drill
            .spec
            .duration_seconds
            .unwrap_or(defaults::DURATION_SECONDS);
        match scenario {
            Scenario::Switchover => self.switchover(target).await,
            Scenario::DeletePrimaryPod | Scenario::KillReplica => self.delete_pod(target).await,
            Scenario::KillPostgres => self.manager(target, Call::KillPostgres).await,
            Scenario::FreezePrimary => {
                self.manager(target, Call::Freeze(FaultRequest { seconds }))
                    .await
            }
            Scenario::StoreOutage => {
                self.manager(target, Call::StoreOutage(FaultRequest { seconds }))
                    .await
            }
            // The manager first, while it can still be reached: once the
            // policy holds it ends the connections that outlive it.
            Scenario::PartitionPrimary => {
                match self
                    .manager(target, Call::Partition(FaultRequest { seconds }))
                    .await
                {
                    Outcome::Done => {
                        self.apply_policy(partition_policy(self.drill, target))
                            .await
                    }
                    refused_or_unknown => refused_or_unknown,
                }
            }
            // A restore injects nothing into the Database: the plan starts
            // its copy (`Action::StartRestore`).
            Scenario::Restore => Outcome::Refused("a restore drill injects no fault".to_owned()),
        }
    }

    /// `seconds: 0` on the fault's endpoint. A target pod that is gone took
    /// the fault with it; an endpoint that does not exist holds nothing.
    async fn undo(&self, scenario: Scenario, target: &str) -> Outcome {
        if scenario == Scenario::Restore {
            return self.undo_restore(target).await;
        }
        let call = match scenario {
            Scenario::FreezePrimary => Call::Freeze(FaultRequest { seconds: 0 }),
            Scenario::StoreOutage => Call::StoreOutage(FaultRequest { seconds: 0 }),
            Scenario::PartitionPrimary => return self.remove_policy(DrillPolicy::Partition).await,
            _ => return Outcome::Done,
        };
        match self.manager(target, call).await {
            Outcome::Refused(why) => {
                warn!(%target, %why, "the undo was refused: nothing held there");
                Outcome::Done
            }
            outcome => outcome,
        }
    }

    /// Creates one of the drill's NetworkPolicies; one already there (a pass
    /// that did this before its status was read back) is done.
    async fn apply_policy(&self, policy: Option<NetworkPolicy>) -> Outcome {
        let Some(policy) = policy else {
            return Outcome::Refused("the Drill has no uid to own its policy by".to_owned());
        };
        info!(
            policy = policy.metadata.name.as_deref().unwrap_or_default(),
            "applying"
        );
        let policies: Api<NetworkPolicy> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        match policies.create(&PostParams::default(), &policy).await {
            Ok(_) => Outcome::Done,
            Err(kube::Error::Api(e)) if e.code == 409 => Outcome::Done,
            Err(error) => kube_outcome(error),
        }
    }

    /// Deletes the drill's policy of `kind`; one already gone is done.
    async fn remove_policy(&self, kind: DrillPolicy) -> Outcome {
        let name = drill_policy_name(&self.drill.name_any(), kind);
        info!(policy = %name, "removing");
        let policies: Api<NetworkPolicy> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        match policies.delete(&name, &DeleteParams::default()).await {
            Ok(_) => Outcome::Done,
            Err(kube::Error::Api(e)) if e.code == 404 => Outcome::Done,
            Err(error) => kube_outcome(error),
        }
    }

    /// Hands the primary role to `target` the way a user would: `spec.primary`.
    async fn switchover(&self, target: &str) -> Outcome {
        let databases: Api<Database> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        match databases
            .patch(
                &self.drill.spec.database,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"primary": target}})),
            )
            .await
        {
            Ok(_) => Outcome::Done,
            Err(error) => kube_outcome(error),
        }
    }

    /// Deletes pod `name` at once (grace 0); a pod already gone is refused
    /// for an injection (nothing was deleted) and done for a cleanup.
    async fn delete_pod(&self, name: &str) -> Outcome {
        let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        match pods
            .delete(name, &DeleteParams::default().grace_period(0))
            .await
        {
            Ok(_) => Outcome::Done,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                if name == probe_pod_name(&self.drill.name_any()) {
                    Outcome::Done
                } else {
                    Outcome::Refused(format!("pod {name} not found"))
                }
            }
            Err(error) => kube_outcome(error),
        }
    }

    /// A fault call on `instance`'s manager.
    async fn manager(&self, instance: &str, call: Call) -> Outcome {
        let database = &self.drill.spec.database;
        let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        let pod = match pods.get_opt(instance).await {
            Ok(Some(pod)) => pod,
            Ok(None) => return Outcome::Refused(format!("pod {instance} not found")),
            Err(error) => return Outcome::Unknown(error.to_string()),
        };
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            return Outcome::Unknown(format!("pod {instance} has no IP"));
        };
        let user_ca = self
            .seen
            .database
            .as_ref()
            .and_then(|db| db.spec.tls.ca.as_ref())
            .map(|r| r.secret_name.as_str());
        let client = match client_tls(
            &self.ctx.client,
            self.namespace,
            database,
            user_ca,
            &mut SecretReads::default(),
        )
        .await
        {
            Ok(client) => client,
            Err(error) => return Outcome::Unknown(error.to_string()),
        };
        let token = match instance_token(self.ctx, self.namespace, database).await {
            Ok(token) => token,
            Err(error) => return Outcome::Unknown(error.to_string()),
        };
        let target = Target::of(&ip, instance, resources::serves_tls(&pod), client.as_ref());
        match self.ctx.instances.call(target, &token, call).await {
            Ok(_) => Outcome::Done,
            Err(error @ CallError::Refused { .. }) => Outcome::Refused(error.to_string()),
            Err(error) => Outcome::Unknown(error.to_string()),
        }
    }

    /// The Database's `LastDrill` condition, server-side applied under its
    /// own field manager.
    async fn last_drill(&self, succeeded: bool, reason: &str, message: &str) -> Result<(), Error> {
        let Some(db) = &self.seen.database else {
            return Ok(());
        };
        let databases: Api<Database> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        let condition = json!({
            "type": LAST_DRILL,
            "status": if succeeded { "True" } else { "False" },
            "reason": reason,
            "message": message,
            "lastTransitionTime": Time(k8s_openapi::jiff::Timestamp::now()),
            "observedGeneration": db.metadata.generation,
        });
        let body = json!({
            "apiVersion": "tusk.dev/v1",
            "kind": "Database",
            "status": { "conditions": [condition] },
        });
        databases
            .patch_status(
                &db.name_any(),
                &PatchParams::apply(LAST_DRILL_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(Error::kube("setting the Database's LastDrill condition"))?;
        Ok(())
    }
}

/// A refused request (4xx) did not happen; anything else may have.
fn kube_outcome(error: kube::Error) -> Outcome {
    match &error {
        kube::Error::Api(e) if (400..500).contains(&e.code) => Outcome::Refused(error.to_string()),
        _ => Outcome::Unknown(error.to_string()),
    }
}
