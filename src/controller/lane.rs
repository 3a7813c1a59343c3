//! The lane a pass and its requests to the API server wait in: its own for
//! a primary in trouble, so that a failover never queues behind routine
//! work (`passes`, `in_flight`).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;

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

/// So many turns in each lane, each lane's taken in the order they are
/// asked for (tokio's semaphore is fair).
#[derive(Clone, Debug)]
pub struct Turns {
    failover: Arc<Semaphore>,
    routine: Arc<Semaphore>,
}

impl Turns {
    /// `at_once` turns in each lane (at least one).
    pub fn new(at_once: usize) -> Self {
        Self {
            failover: Arc::new(Semaphore::new(at_once.max(1))),
            routine: Arc::new(Semaphore::new(at_once.max(1))),
        }
    }

    /// The turns of `lane`.
    pub fn of(&self, lane: Lane) -> &Arc<Semaphore> {
        match lane {
            Lane::Failover => &self.failover,
            Lane::Routine => &self.routine,
        }
    }
}
