//! The lane a pass and its requests to the API server wait in: its own for
//! a primary in trouble, so that a failover never queues behind routine
//! work (`passes`, `in_flight`).

use std::future::Future;

/// The queue a pass waits in, and its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// A primary in trouble, or a failover or switchover under way.
    Failover,
    /// Everything else: creation, changes, the steady requeue.
    Routine,
}

tokio::task_local! {
    static LANE: Lane;
}

/// Runs `work` with the requests it sends in `lane`.
pub async fn in_lane<F: Future>(lane: Lane, work: F) -> F::Output {
    LANE.scope(lane, work).await
}

/// The lane of the task polling now; routine outside any pass.
pub fn current() -> Lane {
    LANE.try_with(|lane| *lane).unwrap_or(Lane::Routine)
}
