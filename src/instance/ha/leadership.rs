//! Holding the primary lease: the claim each period (and before a primary's
//! PostgreSQL starts), the take a promotion needs, the hand-over of a
//! switchover and the release after a clean stop. Who may claim is
//! [`crate::failover::claim`]'s rule; this file carries it out.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};

use crate::failover::claim::{self, Claim};
use crate::failover::lease::{self as rules, Refusal};
use crate::failover::{Moment, Rules};

use super::Ha;
use super::lease::{self, LeaseError};

/// A claim's outcome.
#[derive(Debug)]
pub enum ClaimOutcome {
    /// This instance holds the lease.
    Held,
    /// `holder` holds it (or released it last).
    Other { holder: String },
    /// Nothing can be concluded now: the API is out of reach, a write lost a
    /// race, or the lease does not exist yet.
    Unknown(LeaseError),
}

/// Why a promotion may not take the lease.
#[derive(Debug, thiserror::Error)]
pub enum TakeError {
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// Another instance holds it, and went on holding it for a lease's
    /// duration.
    #[error(transparent)]
    Refused(#[from] Refusal),
}

impl Ha {
    /// Read the lease and remember what was seen.
    pub(super) async fn read(&self) -> Result<Option<Lease>, LeaseError> {
        let lease = self.lease.read().await?;
        if let Some(lease) = &lease {
            let now = self.now();
            self.state().observer.observe(&lease::record_of(lease), now);
        }
        Ok(lease)
    }

    async fn read_existing(&self) -> Result<Lease, LeaseError> {
        self.read().await?.ok_or(LeaseError::NotFound)
    }

    /// Write `spec` over `lease` (read at its resourceVersion), and remember
    /// what was written.
    async fn write(&self, mut lease: Lease, spec: LeaseSpec) -> Result<Lease, LeaseError> {
        lease.spec = Some(spec);
        let written = match self.lease.write(&lease).await {
            Ok(written) => written,
            Err(error) => {
                if matches!(error, LeaseError::Conflict { .. }) {
                    self.state().overtaken();
                }
                return Err(error);
            }
        };
        let now = self.now();
        let mut state = self.state();
        state.observer.observe(&lease::record_of(&written), now);
        state.wrote(&written, &self.me);
        Ok(written)
    }

    /// Renew the lease when this instance holds it, take it when it is
    /// released (by this instance): what a primary's data directory needs
    /// before PostgreSQL may start, and every period after.
    ///
    /// A renewal is written over the lease as this instance last wrote it,
    /// without reading it first: the write carries that resourceVersion, so
    /// it succeeds only when nothing changed the lease since, and then the
    /// claim rule reads the same lease a read would have returned. Only a
    /// lost race (409) costs a read, and the claim is made over what it
    /// returns. One call a period instead of two, on every primary.
    pub async fn claim(&self) -> ClaimOutcome {
        let sent = self.now();
        let written = self.state().written();
        if let Some(mine) = written {
            match self.claim_over(mine, sent).await {
                ClaimOutcome::Unknown(LeaseError::Conflict { .. }) => {}
                outcome => return outcome,
            }
        }
        match self.read_existing().await {
            Ok(lease) => self.claim_over(lease, sent).await,
            Err(error) => ClaimOutcome::Unknown(error),
        }
    }

    /// The claim rule over `lease`, and the write it calls for; `sent` is
    /// when the claim began, the moment a renewal counts from.
    async fn claim_over(&self, lease: Lease, sent: Moment) -> ClaimOutcome {
        let taking = match claim::claim(&lease::view_of(&lease), &self.me, &Rules::ALL) {
            Claim::Renew => false,
            Claim::Take => true,
            Claim::StandDown { holder } => {
                self.state().lost();
                return ClaimOutcome::Other { holder };
            }
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let next = lease::claim_spec(&spec, &self.me, self.timing.lease, taking);
        match self.write(lease, next).await {
            Ok(_) => {
                self.state().renewed(sent);
                if taking {
                    tracing::info!("took the released primary lease");
                }
                ClaimOutcome::Held
            }
            Err(error) => ClaimOutcome::Unknown(error),
        }
    }

    /// What the claim rule says of the lease now, without writing it.
    pub async fn standing(&self) -> Result<Claim, LeaseError> {
        let lease = self.read_existing().await?;
        Ok(claim::claim(&lease::view_of(&lease), &self.me, &Rules::ALL))
    }

    /// Take the lease for a promotion the operator ordered: only when this
    /// manager's own observation allows it (released, expired, or already
    /// ours), waiting out what remains of a live lease up to its duration.
    pub async fn take_for_promotion(&self) -> Result<(), TakeError> {
        let deadline = self.now() + self.timing.lease + self.timing.period;
        loop {
            let sent = self.now();
            let lease = self.read_existing().await?;
            let state = self.state().observer.state(self.now());
            match rules::may_take(&state, &self.me, &Rules::ALL) {
                Ok(()) => {
                    let spec = lease.spec.clone().unwrap_or_default();
                    let taking = spec.holder_identity.as_deref() != Some(self.me.as_str());
                    let next = lease::claim_spec(&spec, &self.me, self.timing.lease, taking);
                    self.write(lease, next).await?;
                    self.state().renewed(sent);
                    tracing::info!("took the primary lease for a promotion");
                    return Ok(());
                }
                Err(refusal) if self.now() >= deadline => return Err(refusal.into()),
                Err(_) => tokio::time::sleep(self.timing.period / 4).await,
            }
        }
    }

    /// Hand the lease to `target` (a switchover, after a clean shutdown).
    pub async fn transfer(&self, target: &str) -> Result<(), LeaseError> {
        let lease = self.read_existing().await?;
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.me.as_str()) {
            return Err(LeaseError::NotHeld {
                holder: spec.holder_identity,
            });
        }
        self.write(lease, lease::transfer_spec(spec, target))
            .await?;
        self.state().lost();
        Ok(())
    }

    /// Give the lease up after PostgreSQL stopped cleanly, so that a replica
    /// takes over at once instead of after the lease's duration.
    pub async fn release(&self) {
        if !self.enabled() {
            return;
        }
        let result = async {
            let Some(lease) = self.read().await? else {
                return Ok(false);
            };
            let holder = lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref());
            if holder != Some(self.me.as_str()) {
                return Ok(false);
            }
            let mut lease = lease::released(lease, &self.me);
            let spec = lease.spec.take().unwrap_or_default();
            self.write(lease, spec).await.map(|_| true)
        };
        match result.await {
            Ok(true) => tracing::info!("released the primary lease"),
            Ok(false) => {}
            Err(LeaseError::Conflict { .. }) => tracing::warn!(
                "could not release the primary lease: another write changed it first"
            ),
            Err(why) => tracing::warn!(%why, "could not release the primary lease"),
        }
        self.state().lost();
    }
}
