//! `kubectl tusk why <db>`: when a Database is not Ready, the chain of causes
//! in plain words, each with the field or object to look at and what to do.
//! Derived from the conditions' reasons (the planner's verdicts, see
//! `src/lifecycle`) and the instances' state; a reason this table does not
//! know still prints its condition's message. Reads what `status` reads.

use std::fmt::Write as _;

use super::render;
use super::status::{self, Inputs, StatusReport};
use super::{Error, Session};

/// One link of the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// What is wrong, in plain words.
    pub what: String,
    /// The field or object to look at.
    pub look_at: String,
    /// What to do.
    pub action: String,
    /// Other conditions that say the same, with the same advice.
    pub also: Vec<String>,
}

/// What `why` found: nothing when Ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Ready(String),
    NotReady {
        headline: String,
        causes: Vec<Cause>,
        /// The last few Warning Events, as `status` prints them.
        recent: Vec<String>,
    },
}

pub async fn run(session: &Session, name: &str) -> Result<(), Error> {
    let inputs = status::fetch(session, name).await?;
    let answer = explain(&inputs);
    print!("{}", render(&answer));
    match answer {
        Answer::Ready(_) => Ok(()),
        Answer::NotReady { .. } => Err(Error::Failed(format!("Database {name} is not Ready"))),
    }
}

/// The chain of causes (pure).
pub fn explain(inputs: &Inputs) -> Answer {
    let report = status::derive(inputs);
    let s = &report.status;
    if report.summary.ready && !report.summary.spec_pending {
        return Answer::Ready(format!(
            "Database {} is Ready: {}/{} instances ready, primary {}.",
            report.name,
            s.ready_instances.unwrap_or(0),
            report.summary.instances_wanted,
            render::or_dash(s.current_primary.clone()),
        ));
    }
    let mut causes = Vec::new();
    if report.summary.spec_pending {
        causes.push(Cause {
            what: format!(
                "The operator has not processed generation {} of the spec yet (status is of {}).",
                report.generation.unwrap_or(0),
                render::or_dash(s.observed_generation.map(|g| g.to_string()))
            ),
            look_at: "the operator's pods and logs (kubectl tusk logs DB --operator)".into(),
            action: "Wait a few seconds; if it stays, check that the operator runs and can reach the API server.".into(),
            also: Vec::new(),
        });
    }
    // Ready first (it names the blocking reason), then what degrades it, what
    // is under way, and backups.
    for type_ in ["Ready", "Degraded", "Progressing", "BackupHealthy"] {
        if let Some(c) = report.attention.iter().find(|c| c.type_ == type_) {
            let next = cause(&report, &c.type_, &c.reason, &c.message);
            // One piece of advice once: a condition that leads to the same
            // look and action joins the cause that gave it.
            match causes
                .iter_mut()
                .find(|k| k.look_at == next.look_at && k.action == next.action)
            {
                Some(same) => same.also.push(next.what),
                None => causes.push(next),
            }
        }
    }
    for instance in s.instances.iter().filter(|i| !i.ready) {
        causes.push(Cause {
            what: format!("Instance {} is not ready.", instance.name),
            look_at: format!(
                "Pod {} (kubectl describe pod {0}) and its log",
                instance.name
            ),
            action: "See the causes above; kubectl tusk logs DB shows its PostgreSQL log.".into(),
            also: Vec::new(),
        });
    }
    if causes.is_empty() {
        causes.push(Cause {
            what: "No condition says why (the operator may not have written one yet).".into(),
            look_at: "status.conditions and kubectl describe database".into(),
            action: "Wait for the next reconciliation.".into(),
            also: Vec::new(),
        });
    }
    let headline = format!(
        "Database {} is not Ready (phase {}).",
        report.name, report.summary.phase
    );
    let causes: Vec<Cause> = causes
        .into_iter()
        .map(|c| Cause {
            look_at: c.look_at.replace("DB", &report.name),
            action: c.action.replace(" DB ", &format!(" {} ", report.name)),
            ..c
        })
        .collect();
    let recent = report
        .warnings
        .iter()
        .map(|w| {
            let time = w
                .time
                .as_ref()
                .map_or_else(|| "-".to_owned(), |t| render::clock(t.0));
            format!("{time} {} {}: {}", w.object, w.reason, w.message)
        })
        .collect();
    Answer::NotReady {
        headline,
        causes,
        recent,
    }
}

/// The advice for a condition's reason; the message always comes along.
fn cause(report: &StatusReport, type_: &str, reason: &str, message: &str) -> Cause {
    let what = format!("{type_} is {reason}: {message}");
    let (look_at, action) = advice(report, reason);
    Cause {
        what,
        look_at,
        action,
        also: Vec::new(),
    }
}

fn advice(report: &StatusReport, reason: &str) -> (String, String) {
    let primary = render::or_dash(report.status.current_primary.clone());
    let pair = |look: &str, act: &str| (look.to_owned(), act.to_owned());
    match reason {
        "Unschedulable" | "WaitingForPods" | "PodTopologySpread" => pair(
            "the pending Pod's events (kubectl describe pod <instance>), spec.resources, spec.affinity, spec.topologySpreadConstraints",
            "Free or add nodes that fit the request, or lower spec.resources / relax the placement rules.",
        ),
        "VolumeFull" => pair(
            "status.instances[].volumes (usedPercent), spec.storage.size, spec.storage.autoGrow",
            "Raise spec.storage.size (the StorageClass must allow expansion) or enable spec.storage.autoGrow; delete data only as a last resort.",
        ),
        "VolumeExpansionNotSupported" | "FileSystemResizePending" | "ExpandingVolumes" => pair(
            "the PVCs (kubectl describe pvc) and their StorageClass's allowVolumeExpansion",
            "Use a StorageClass that allows expansion, or wait for the resize to finish on the node.",
        ),
        "ArchivingFailing" | "CredentialsSecretMissing" => pair(
            "spec.backup (bucket, endpoint, credentials Secret) and the primary's log",
            "Fix the object store access; PostgreSQL keeps WAL until it is archived, so the volume fills meanwhile.",
        ),
        "UpgradeBackupFailed" | "FinalBackupFailed" => pair(
            "the Backups of this Database (kubectl get backups) and spec.backup",
            "Fix the object store access; the operator retries the backup.",
        ),
        "SecretInvalid" | "RestoreSourceInvalid" | "RestoreNotSupported"
        | "SwitchoverNotSupported" | "DowngradeRefused" | "VersionMismatch" => pair(
            "the field the message names, in the Database's spec",
            "Change the spec as the message says: nothing happens for it until the spec changes.",
        ),
        "SwitchoverRefused" | "SwitchoverWaiting" | "SwitchingOver" => pair(
            "spec.primary and status.instances (the target must be a ready, streaming replica)",
            "Wait for the target replica to catch up, or point spec.primary at a healthy replica.",
        ),
        "PrimaryDown" | "PrimaryUnavailable" | "PrimaryUnreachable" | "PrimaryNotReady"
        | "NoPrimary" | "FailoverRequired" | "FailingOver" | "PrimaryStarting" => (
            format!("Pod {primary} and its log (kubectl tusk logs DB), status.lastFailover"),
            "A replica is promoted automatically when spec.failover allows it; if none is healthy, bring the primary's pod back.".to_owned(),
        ),
        "MultiplePrimaries" | "PrimaryDataLost" => pair(
            "status.instances (role, timeline, systemIdentifier) and the instances' logs",
            "Do not write to any instance until it is resolved; collect kubectl tusk report DB for support.",
        ),
        "ReplicaNotStreaming" | "NotReady" | "PodFailed" | "ProbeFailed" => pair(
            "the instance's Pod and its log (kubectl tusk logs DB)",
            "Look for the error in the log; a replica that cannot catch up can be deleted and is cloned again.",
        ),
        "MajorUpgrade" => pair(
            "status.upgrade (step, message)",
            "Nothing: the instances are stopped while pg_upgrade runs; kubectl tusk status DB --watch follows it.",
        ),
        "UpgradeCheckFailed" | "UpgradeRolledBack" => pair(
            "status.upgrade.message (what pg_upgrade said) and the upgrade Jobs' logs",
            "Nothing was lost: fix what pg_upgrade reports (extensions, settings), then change spec.version again.",
        ),
        "UpgradeRollbackFailed" => pair(
            "status.upgrade.message, the primary's volume and the upgrade Jobs' logs",
            "Tusk could not put the old data directory back: a human must; collect kubectl tusk report DB first.",
        ),
        "CertificateExpired" | "CertificateNotLoaded" | "WaitingForCertificates" | "RotatingCA" => pair(
            "status.tls and spec.tls (the Secrets it names)",
            "Renew or fix the certificate Secret spec.tls names; Tusk's own certificates renew by themselves.",
        ),
        "MigrationFailed" | "Migrating" => pair(
            "status.migrations.message and spec.migrations",
            "Fix the migration and change spec.migrations.version to run it again.",
        ),
        "InstanceApiMismatch" => pair(
            "the instances' image and the operator's version",
            "Let the rolling update replace the instances with the operator's image.",
        ),
        "RollingUpdate" | "Scaling" | "CreatingReplicas" | "InitializingPrimary"
        | "ApplyingParameters" | "RestartingForParameters" | "ConfiguringSynchronousReplication"
        | "LabellingRoles" | "WaitingForRouting" | "SyncingCredentials" | "ResizingCpu"
        | "RestoreDownloading" | "RestoreReplaying" => pair(
            "status.phase and the Progressing condition",
            "Nothing: Tusk is carrying out the spec; kubectl tusk status DB --watch follows it.",
        ),
        _ => pair(
            "status.conditions and the Database's Events (kubectl describe database)",
            "Read the message above; kubectl tusk report DB collects everything for support.",
        ),
    }
}

/// The text (pure).
pub fn render(answer: &Answer) -> String {
    match answer {
        Answer::Ready(line) => format!("{line}\n"),
        Answer::NotReady {
            headline,
            causes,
            recent,
        } => {
            let mut out = format!("{headline}\n");
            for (n, c) in causes.iter().enumerate() {
                let _ = writeln!(out, "\n{}. {}", n + 1, c.what);
                for also in &c.also {
                    let _ = writeln!(out, "   also {also}");
                }
                let _ = writeln!(out, "   look at: {}", c.look_at);
                let _ = writeln!(out, "   do:      {}", c.action);
            }
            if !recent.is_empty() {
                out.push_str("\nRecent warnings (kubectl get events shows them all)\n");
                for line in recent {
                    let _ = writeln!(out, "  {line}");
                }
            }
            out
        }
    }
}
