//! The operator's HTTPS clients of the instance API, one per pod address and
//! instance name (the name is pinned in the client's verifier), each with the
//! digest of the TLS material it was built from.
//!
//! A client lives as long as it is used: every instance the operator manages
//! is read at least once per steady pass, so one unused for [`IDLE_CLIENT`]
//! belongs to a pod that is gone or moved, and is dropped at the next insert.
//! No count bounds the pool: with thousands of instances any cap below their
//! number would drop live clients over and over (and redo their handshakes),
//! and above it would bound nothing the idle rule does not.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A client unused this long is dropped; several steady passes.
pub(super) const IDLE_CLIENT: Duration = Duration::from_secs(5 * 60);

/// (pod address, instance name).
pub(super) type Target = (String, String);

struct Pooled<C> {
    built_from: [u8; 32],
    client: C,
    used: Instant,
}

/// The pool; `C` is the client (cheap to clone, sharing its connections).
pub(super) struct ClientPool<C> {
    by_target: HashMap<Target, Pooled<C>>,
    swept: Option<Instant>,
}

impl<C> Default for ClientPool<C> {
    fn default() -> Self {
        Self {
            by_target: HashMap::new(),
            swept: None,
        }
    }
}

impl<C: Clone> ClientPool<C> {
    /// The client for `target` built from material `digest`, marked used.
    pub(super) fn get(&mut self, target: &Target, digest: &[u8; 32], now: Instant) -> Option<C> {
        let pooled = self.by_target.get_mut(target)?;
        if pooled.built_from != *digest {
            return None;
        }
        pooled.used = now;
        Some(pooled.client.clone())
    }

    /// Pools `client` for `target`, replacing one built from other material;
    /// at most once per [`IDLE_CLIENT`], first drops the clients idle that
    /// long.
    pub(super) fn insert(&mut self, target: Target, digest: [u8; 32], client: C, now: Instant) {
        if self
            .swept
            .is_none_or(|at| now.saturating_duration_since(at) >= IDLE_CLIENT)
        {
            self.by_target
                .retain(|_, pooled| now.saturating_duration_since(pooled.used) < IDLE_CLIENT);
            self.swept = Some(now);
        }
        self.by_target.insert(
            target,
            Pooled {
                built_from: digest,
                client,
                used: now,
            },
        );
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_target.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(i: usize) -> Target {
        (format!("10.0.{}.{}", i / 250, i % 250), format!("db-{i}"))
    }

    #[test]
    fn thousands_of_clients_in_use_all_stay_pooled() {
        let start = Instant::now();
        let mut pool = ClientPool::default();
        for i in 0..5_000 {
            pool.insert(target(i), [0; 32], i, start);
        }
        // A steady pass later, each is used again and found.
        let later = start + Duration::from_secs(60);
        for i in 0..5_000 {
            assert_eq!(pool.get(&target(i), &[0; 32], later), Some(i));
        }
        // A sweep when the first clients are IDLE_CLIENT old keeps them all.
        pool.insert(target(5_000), [0; 32], 5_000, start + IDLE_CLIENT);
        assert_eq!(pool.len(), 5_001);
    }

    #[test]
    fn a_client_idle_past_the_limit_is_dropped_at_the_next_insert() {
        let start = Instant::now();
        let mut pool = ClientPool::default();
        pool.insert(target(1), [0; 32], 1, start);
        pool.insert(target(2), [0; 32], 2, start);
        // Target 1 is used just inside the limit, target 2 not at all.
        let used = start + IDLE_CLIENT - Duration::from_secs(1);
        assert_eq!(pool.get(&target(1), &[0; 32], used), Some(1));
        let swept = start + IDLE_CLIENT;
        pool.insert(target(3), [0; 32], 3, swept);
        assert_eq!(pool.get(&target(2), &[0; 32], swept), None);
        assert_eq!(pool.get(&target(1), &[0; 32], swept), Some(1));
        assert_eq!(pool.len(), 2);
    }

    #[test]
    fn a_client_built_from_other_material_is_not_handed_out_and_is_replaced() {
        let now = Instant::now();
        let mut pool = ClientPool::default();
        pool.insert(target(1), [1; 32], 1, now);
        assert_eq!(pool.get(&target(1), &[2; 32], now), None);
        pool.insert(target(1), [2; 32], 10, now);
        assert_eq!(pool.get(&target(1), &[2; 32], now), Some(10));
        assert_eq!(pool.get(&target(1), &[1; 32], now), None);
        assert_eq!(pool.len(), 1);
    }
}
