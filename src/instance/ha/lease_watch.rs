//! The lease as a watch delivers it: every instance keeps a watch of the
//! primary Lease open, so that a replica learns of each renewal (one a
//! period) without reading the lease every period. The lease loop still
//! reads it whenever the watch has been quiet for two periods: a primary
//! that stopped renewing, or a watch that broke without a word. A watch
//! never makes the view less cautious than reading did: the observer counts
//! a lease's time from when it first saw a version, so an event that comes
//! late only makes the lease look live for longer, and a promotion reads
//! the lease afresh before it judges whether it may take it.

use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::WatchEvent;
use tokio::sync::watch;

use super::super::{Shared, partition};
use super::Ha;
use super::lease::{self, Call, LeaseError, WATCH_SECONDS};

/// How long to wait before watching again after a failure (no lease yet, a
/// Role without `watch`, the API server out of reach).
const RETRY: Duration = Duration::from_secs(5);

/// Keep a watch of the lease open until `stop`; a partition drill's cut
/// starts it over on a fresh connection.
pub async fn lease_watch_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let ha = &shared.ha;
    let mut cuts = partition::cuts();
    // Said once at warning level, until a watch works again.
    let mut failing = false;
    // The version the last watch ended at, to go on from without a read.
    let mut resume: Option<String> = None;
    loop {
        let began = tokio::time::Instant::now();
        let from = resume.take();
        let wait = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            _ = cuts.changed() => Duration::ZERO,
            ended = ha.watch_lease(from) => match ended {
                Ok(next) => {
                    resume = next;
                    if std::mem::take(&mut failing) {
                        tracing::info!("watching the primary lease again");
                    }
                    // A watch the server ends at once is not started over
                    // in a busy loop.
                    ha.timing.period.saturating_sub(began.elapsed())
                }
                Err(why) if failing => {
                    tracing::debug!(%why, "cannot watch the primary lease");
                    RETRY
                }
                Err(why) => {
                    failing = true;
                    tracing::warn!(%why, "cannot watch the primary lease; reading it each period instead");
                    RETRY
                }
            },
        };
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

impl Ha {
    /// One watch, from version `from` or else from a read of the lease,
    /// until the API server ends it. The version to go on from when it ended
    /// as it does every WATCH_SECONDS; `None` when the next watch must read
    /// first.
    async fn watch_lease(&self, from: Option<String>) -> Result<Option<String>, LeaseError> {
        let mut version = match from {
            Some(version) => version,
            None => {
                let Some(lease) = self.read().await? else {
                    return Err(LeaseError::NotFound);
                };
                lease.metadata.resource_version.unwrap_or_default()
            }
        };
        let Some(events) = self.lease.watch(&version).await? else {
            return Err(LeaseError::Disabled);
        };
        let mut events = std::pin::pin!(events);
        // The server ends the watch after WATCH_SECONDS; a connection that
        // died silently is given up a little later.
        let limit = Duration::from_secs(u64::from(WATCH_SECONDS) + 5);
        loop {
            let event = match tokio::time::timeout(limit, events.try_next()).await {
                Ok(Ok(None)) => return Ok(Some(version)),
                Err(_) => return Ok(None),
                Ok(Err(error)) => return Err(LeaseError::of(Call::Watch, error)),
                Ok(Ok(Some(event))) => event,
            };
            match event {
                WatchEvent::Added(lease) | WatchEvent::Modified(lease) => {
                    if let Some(seen) = &lease.metadata.resource_version {
                        version.clone_from(seen);
                    }
                    self.watched(&lease);
                }
                WatchEvent::Bookmark(_) => {}
                // Gone, or too old a version: read and watch again.
                WatchEvent::Deleted(_) => return Ok(None),
                WatchEvent::Error(status) if status.code == 410 => return Ok(None),
                WatchEvent::Error(status) => {
                    return Err(LeaseError::of(Call::Watch, kube::Error::Api(status)));
                }
            }
        }
    }

    /// A version of the lease the watch delivered.
    fn watched(&self, lease: &Lease) {
        let now = self.now();
        let mut state = self.state();
        state.observer.observe(&lease::record_of(lease), now);
        state.watched(now);
    }

    /// Whether the watch delivered a version within the last two periods,
    /// so that the lease loop need not read the lease.
    pub(super) fn watch_is_live(&self) -> bool {
        let now = self.now();
        self.state().watched_within(now, self.timing.period * 2)
    }
}
