//! The drill contract: the faults an instance manager injects when the
//! operator's drill controller asks (each with its own deadline, after which
//! the manager undoes it by itself, so a fault outlives neither its drill nor
//! a lost operator), and the probe's API (a pod writing through `-rw` like an
//! application, serving what it saw).

use serde::{Deserialize, Serialize};

/// The paths of the drill faults on the instance API (`POST`, bearer or
/// operator certificate like every mutation).
pub mod path {
    /// [`super::FaultRequest`] → [`super::FaultResponse`]: SIGSTOP every
    /// PostgreSQL process of the instance for `seconds`, SIGCONT after (or
    /// at once with `seconds: 0`).
    pub const FREEZE: &str = "/drill/freeze";
    /// (no body) → [`super::FaultResponse`]: SIGKILL the postmaster.
    pub const KILL_POSTGRES: &str = "/drill/kill-postgres";
    /// [`super::FaultRequest`] → [`super::FaultResponse`]: WAL archiving
    /// goes to an unreachable store for `seconds` (0 ends it at once).
    pub const STORE_OUTAGE: &str = "/drill/store-outage";
    /// [`super::FaultRequest`] → [`super::FaultResponse`]: asked right
    /// before the drill's NetworkPolicy cuts the pod off; once the policy
    /// holds, the manager ends every connection that outlived it (policies
    /// only stop new ones). Reported for `seconds`; 0 clears the record.
    pub const PARTITION: &str = "/drill/partition";
}

/// Ask for a fault that holds for a while; `seconds: 0` undoes it now.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FaultRequest {
    /// How long the fault holds before the manager undoes it by itself.
    pub seconds: u32,
}

/// What the manager did.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FaultResponse {
    /// Whether the fault is in effect after this call.
    pub active: bool,
    /// When the manager undoes it by itself (RFC 3339), when it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// The processes signalled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<u32>,
}

/// The faults in effect on an instance, in its `GET /status` (`faults`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ActiveFaults {
    /// PostgreSQL's processes are stopped ([`path::FREEZE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freeze: Option<ActiveFault>,
    /// WAL archiving goes to an unreachable store ([`path::STORE_OUTAGE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_outage: Option<ActiveFault>,
    /// The pod is cut off by a partition drill ([`path::PARTITION`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<ActiveFault>,
}

impl ActiveFaults {
    /// No fault is in effect.
    pub fn is_empty(&self) -> bool {
        self.freeze.is_none() && self.store_outage.is_none() && self.partition.is_none()
    }
}

/// One fault in effect.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ActiveFault {
    /// When the manager undoes it by itself (RFC 3339).
    pub until: String,
    /// The processes it holds stopped, for a freeze.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<u32>,
}

/// The probe pod's HTTP port.
pub const PROBE_PORT: u16 = 8001;

/// The probe's paths.
pub mod probe_path {
    /// `GET` → [`super::ProbeReport`]: what the probe saw so far.
    pub const REPORT: &str = "/report";
    /// `POST` → [`super::ProbeReport`] with `finished: true`: stop writing,
    /// read back every acknowledged id through `-rw`, report the lost ones.
    /// Idempotent: later calls answer the same report.
    pub const FINISH: &str = "/finish";
}

/// What the probe saw: every acknowledged write, with its time.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProbeReport {
    /// Acknowledged ids and the Unix time (seconds) of each acknowledgement,
    /// in order.
    pub acknowledged: Vec<(i64, f64)>,
    /// Writes that failed or whose outcome is unknown.
    pub failed: i64,
    /// Whether the probe stopped and checked its writes.
    pub finished: bool,
    /// After [`probe_path::FINISH`]: acknowledged ids missing from the table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<i64>,
    /// Why the check after finishing could not run, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ProbeReport {
    /// The write outage around a fault at Unix time `fault_at`: from the last
    /// acknowledgement at or before it to the first after it. `None` while no
    /// write has been acknowledged on one side.
    pub fn outage_around(&self, fault_at: f64) -> Option<f64> {
        let before = self
            .acknowledged
            .iter()
            .map(|(_, at)| *at)
            .filter(|at| *at <= fault_at)
            .fold(None, |last: Option<f64>, at| {
                Some(last.map_or(at, |l| l.max(at)))
            })?;
        let after = self
            .acknowledged
            .iter()
            .map(|(_, at)| *at)
            .filter(|at| *at > fault_at)
            .fold(None, |first: Option<f64>, at| {
                Some(first.map_or(at, |f| f.min(at)))
            })?;
        Some(after - before)
    }
}

#[cfg(test)]
impl ProbeReport {
    /// A report of writes 1, 2, ... acknowledged at `times` (Unix seconds).
    pub fn acknowledging(times: &[f64]) -> Self {
        ProbeReport {
            acknowledged: times
                .iter()
                .enumerate()
                .map(|(i, t)| (i as i64 + 1, *t))
                .collect(),
            ..ProbeReport::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(times: &[f64]) -> ProbeReport {
        ProbeReport::acknowledging(times)
    }

    #[test]
    fn the_outage_runs_from_the_last_ack_before_the_fault_to_the_first_after() {
        let seen = report(&[10.0, 10.1, 10.2, 12.7, 12.8]);
        assert_eq!(
            seen.outage_around(10.25).map(|s| (s * 10.0).round()),
            Some(25.0)
        );
        assert_eq!(seen.outage_around(9.0), None, "nothing acknowledged before");
        assert_eq!(
            seen.outage_around(13.0),
            None,
            "nothing acknowledged after yet"
        );
    }
}
