//! How many passes of a controller run at once, and in what order the others
//! start: in the order they asked, whatever their object, except that a
//! pass about a primary in trouble never waits behind routine ones.
//!
//! kube-runtime can bound a controller's concurrency itself, but then picks
//! the next object from a hash set of those waiting: an object re-triggered
//! by its own writes (status, Services, Secrets, pods) sits early in that
//! set's order and is picked again and again. Measured with 1,000 Databases
//! created at once and 32 passes at a time: some Databases had 80 passes
//! while 445 had none in 20 minutes. So the controllers run unbounded in
//! kube-runtime, and each pass first waits here, in a first-come queue (a
//! fair semaphore): a Database asking again goes behind every one already
//! waiting, so one busy Database never delays another by more than one
//! round.
//!
//! With 1,000 Databases being created, that queue is hundreds of passes
//! long: a failover waiting its turn there would wait minutes. So there are
//! two lanes ([`Lane`]), each with its own turns: failovers are few, and
//! take their turns from a queue no routine pass joins.

use std::future::Future;

use super::lane::{Lane, Turns, in_lane};

/// The passes of one controller (all its watched namespaces).
#[derive(Clone, Debug)]
pub struct Passes {
    turns: Turns,
}

impl Passes {
    /// At most `at_once` passes at a time in each lane (at least one).
    pub fn new(at_once: usize) -> Self {
        Self {
            turns: Turns::new(at_once),
        }
    }

    /// Runs `pass` once its turn in `lane` comes.
    pub async fn run<F: Future>(&self, lane: Lane, pass: F) -> F::Output {
        // The semaphore is never closed; were it, the pass would run anyway.
        let _turn = self.turns.of(lane).acquire().await.ok();
        // Its requests to the API server wait in the same lane.
        in_lane(lane, pass).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    /// With one pass at a time, a Database that asks again after each of its
    /// passes (as its own writes re-trigger it) waits behind every Database
    /// already waiting, instead of going first each time.
    #[tokio::test(start_paused = true)]
    async fn an_object_that_asks_again_waits_behind_those_already_waiting() {
        let passes = Passes::new(1);
        let order = Arc::new(Mutex::new(Vec::new()));
        let pass = |name: String, order: Arc<Mutex<Vec<String>>>| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            order.lock().unwrap().push(name);
        };
        let busy = {
            let (passes, order) = (passes.clone(), order.clone());
            tokio::spawn(async move {
                for round in 0..3 {
                    passes
                        .run(Lane::Routine, pass(format!("busy-{round}"), order.clone()))
                        .await;
                }
            })
        };
        // The others ask while busy's first pass runs.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let others: Vec<_> = (0..3)
            .map(|i| {
                let (passes, order) = (passes.clone(), order.clone());
                tokio::spawn(async move {
                    passes
                        .run(Lane::Routine, pass(format!("db-{i}"), order))
                        .await
                })
            })
            .collect();
        busy.await.unwrap();
        for other in others {
            other.await.unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            ["busy-0", "db-0", "db-1", "db-2", "busy-1", "busy-2"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_than_the_bound_run_at_once() {
        let passes = Passes::new(3);
        let running = Arc::new(Mutex::new((0usize, 0usize)));
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let (passes, running) = (passes.clone(), running.clone());
                tokio::spawn(async move {
                    passes
                        .run(Lane::Routine, async {
                            {
                                let mut r = running.lock().unwrap();
                                r.0 += 1;
                                r.1 = r.1.max(r.0);
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            running.lock().unwrap().0 -= 1;
                        })
                        .await;
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(running.lock().unwrap().1, 3);
    }

    /// Every routine turn taken and many more waiting: a failover's pass
    /// still starts at once.
    #[tokio::test(start_paused = true)]
    async fn a_failover_does_not_wait_behind_routine_passes() {
        let passes = Passes::new(2);
        let routine: Vec<_> = (0..10)
            .map(|_| {
                let passes = passes.clone();
                tokio::spawn(async move {
                    passes
                        .run(Lane::Routine, tokio::time::sleep(Duration::from_secs(60)))
                        .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let started = tokio::time::Instant::now();
        passes
            .run(Lane::Failover, async {
                assert!(started.elapsed() < Duration::from_secs(1));
            })
            .await;
        for task in routine {
            task.abort();
        }
    }

    /// What a pass sends to the API server waits in its lane too.
    #[tokio::test]
    async fn a_pass_runs_in_its_lane() {
        let passes = Passes::new(1);
        for lane in [Lane::Failover, Lane::Routine] {
            let seen = passes
                .run(lane, async { crate::controller::lane::current() })
                .await;
            assert_eq!(seen, lane);
        }
    }
}
