//! How many requests the operator has in flight to the API server at once,
//! in each lane of [`super::passes`].
//!
//! Bounding the passes does not bound the requests: a pass sends its reads
//! together, and each request in flight holds an HTTP/1.1 connection of its
//! own, which kube's client keeps open for good once the burst is over (its
//! pool has no timer). With 32 passes at a time, 100 Databases held some 140
//! connections to the API server, each with its TLS state and buffers. So
//! requests wait for a turn here too, in the order they were sent; and, as
//! for the passes, a pass about a failover sends its requests in a lane no
//! routine pass joins.
//!
//! A request's lane is the lane of the pass it is sent from
//! ([`super::passes::Passes::run`] sets it), read where the request's
//! future is polled: kube's client calls this service in its buffer's task
//! but hands the future back to the caller's. A request from outside any
//! pass (the watches, the leader election, the samplers) is routine. Its
//! turn ends when the response's head is in: a watch does not keep one for
//! as long as it streams. Measured with `bench/scale 100`: 54 connections
//! instead of 151, and 78 MiB instead of 103 after a full resync.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower::{Layer, Service};

use super::lane::{self, Turns};

/// The turns of both lanes, shared by every clone of the client.
#[derive(Clone, Debug)]
pub struct InFlightLayer {
    turns: Turns,
}

impl InFlightLayer {
    /// At most `at_once` requests in flight in each lane (at least one).
    pub fn new(at_once: usize) -> Self {
        Self {
            turns: Turns::new(at_once),
        }
    }
}

impl<S> Layer<S> for InFlightLayer {
    type Service = InFlight<S>;

    fn layer(&self, inner: S) -> InFlight<S> {
        InFlight {
            inner,
            turns: self.turns.clone(),
        }
    }
}

/// The service [`InFlightLayer`] wraps around the client's.
#[derive(Clone, Debug)]
pub struct InFlight<S> {
    inner: S,
    turns: Turns,
}

impl<S, Request> Service<Request> for InFlight<S>
where
    S: Service<Request>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // hyper's client connects (or takes a pooled connection) when its
        // future is first polled, not here: the request goes out only once
        // it has its turn.
        let response = self.inner.call(request);
        let turns = self.turns.clone();
        Box::pin(async move {
            // The semaphores are never closed; were one, the request would go anyway.
            let _turn = turns.of(lane::current()).acquire().await.ok();
            response.await
        })
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tower::ServiceExt;
    use tower::util::BoxCloneService;

    use super::*;
    use crate::controller::lane::{Lane, in_lane};

    /// A service whose responses take 60 s, and what it has started.
    fn slow(
        started: Arc<Mutex<Vec<&'static str>>>,
    ) -> InFlight<BoxCloneService<&'static str, (), Infallible>> {
        let inner = tower::service_fn(move |name: &'static str| {
            let started = started.clone();
            async move {
                started.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok::<_, Infallible>(())
            }
        });
        InFlightLayer::new(2).layer(BoxCloneService::new(inner))
    }

    /// Every routine turn taken: further routine requests wait, in order,
    /// and a failover pass's request goes at once.
    #[tokio::test(start_paused = true)]
    async fn routine_requests_wait_their_turn_and_a_failovers_do_not() {
        let started = Arc::new(Mutex::new(Vec::new()));
        let service = slow(started.clone());
        let routine: Vec<_> = ["r1", "r2", "r3", "r4"]
            .into_iter()
            .map(|name| {
                let service = service.clone();
                let task = tokio::spawn(in_lane(Lane::Routine, service.oneshot(name)));
                (name, task)
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(*started.lock().unwrap(), ["r1", "r2"]);

        let failover = tokio::spawn(in_lane(Lane::Failover, service.clone().oneshot("f1")));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(*started.lock().unwrap(), ["r1", "r2", "f1"]);

        // The first two done, the next two routine ones go, first come first.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(*started.lock().unwrap(), ["r1", "r2", "f1", "r3", "r4"]);
        failover.await.unwrap().unwrap();
        for (_, task) in routine {
            task.await.unwrap().unwrap();
        }
    }

    /// kube's client calls the service in its buffer's task and hands the
    /// future back: the lane is the one of the task that polls it.
    #[tokio::test(start_paused = true)]
    async fn the_lane_is_the_pollers() {
        let started = Arc::new(Mutex::new(Vec::new()));
        let mut service = slow(started.clone());
        let routine: Vec<_> = ["r1", "r2"]
            .into_iter()
            .map(|name| tokio::spawn(service.clone().oneshot(name)))
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;

        // Called outside any lane, polled in the failover lane.
        let response = service.ready().await.unwrap().call("f1");
        let failover = tokio::spawn(in_lane(Lane::Failover, response));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(*started.lock().unwrap(), ["r1", "r2", "f1"]);
        failover.await.unwrap().unwrap();
        for task in routine {
            task.await.unwrap().unwrap();
        }
    }
}
