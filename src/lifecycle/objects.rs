//! The Database's own objects besides instances: Secrets and Services,
//! (re)applied whenever they are missing or differ from what the builders
//! make, and credentials pushed to the instances when their Secret is new to
//! them (the Secret is the source of truth, never the database).

use crate::api::status::InstanceRole;
use crate::contract::Credential;

use super::action::Action;
use super::context::Context;
use super::shape::Topology;
use super::verdict::Verdict;

#[derive(Default)]
pub(super) struct Objects {
    pub first: Vec<Action>,
    pub credentials: Vec<Action>,
    pub verdicts: Vec<Verdict>,
}

/// Secrets and Services are idempotent applies that endanger nothing, so they
/// are (re)applied whatever else is going on.
pub(super) fn plan(ctx: &Context) -> Objects {
    let mut out = Objects::default();
    if !ctx.observed.secrets {
        out.first.push(Action::EnsureSecrets);
    }
    if !ctx.observed.services {
        out.first.push(Action::EnsureServices);
    }
    if !ctx.observed.lease_access {
        out.first.push(Action::EnsureLeaseAccess);
    }
    out
}

/// Once a ready primary serves, the credentials whose Secret the instances
/// have not been given: the primary sets the role; for replication, every
/// answering replica rewrites its password file too.
pub(super) fn credentials(ctx: &Context, topology: &Topology, out: &mut Objects) {
    let Some((primary, _)) = topology.reporting_primary else {
        return;
    };
    if !topology.serving || !ctx.observed.secrets {
        return;
    }
    for credential in &ctx.observed.credentials_to_sync {
        let mut instances = vec![ctx.name(primary)];
        if *credential == Credential::Replication {
            instances.extend(topology.keep.iter().filter_map(|s| {
                let status = ctx.observed.instances.get(s)?.status()?;
                (status.role == InstanceRole::Replica).then(|| ctx.name(*s))
            }));
        }
        out.credentials.push(Action::SyncPassword {
            credential: *credential,
            instances,
        });
    }
    if !out.credentials.is_empty() {
        out.verdicts.push(Verdict::progress(
            "SyncingCredentials",
            "giving the instances the passwords of recreated Secrets",
        ));
    }
}
