//! Failover and switchover: a seat for the failover work. Today the topology
//! reports a primary that is gone (`FailingOver`, `FailoverRequired`) and
//! `spec.primary` is refused as a request (see `requests`); promotion, the
//! primary lease and candidate choice land here, contributing actions and
//! verdicts like every other sub-planner.

use super::context::Context;
use super::topology::Topology;
use super::verdict::Verdict;

pub(super) fn plan(_ctx: &Context, _topology: &Topology) -> Vec<Verdict> {
    Vec::new()
}
