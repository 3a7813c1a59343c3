//! The claim rule: what an instance whose data directory is a primary's does
//! with the lease it just read, each period and before PostgreSQL starts.
//! The instance manager applies it to the lease as read; the model checker
//! (`tests/failover_model.rs`) applies it to the lease of its state.
//!
//! The rule: renew the lease when it names this instance; take it when it is
//! released, but only if this instance released it (or nobody ever did):
//! after a release another instance may have been promoted, committed and
//! released in turn, and this data would then lack its commits. Any other
//! holder, live or expired, means standing down (rejoining as a replica):
//! deciding that a holder is gone is the operator's failover, not this rule,
//! so the lease's expiry is not an input.

use super::Rules;

/// The lease as read: who holds it and who released it last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseView<'a> {
    /// `spec.holderIdentity`; `None` (or empty) when released.
    pub holder: Option<&'a str>,
    /// The instance that released it last (the `tusk.dev/released-by`
    /// annotation); `None` when nobody ever released it.
    pub released_by: Option<&'a str>,
}

/// What the claimant does with the lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// It names the claimant: write a renewal.
    Renew,
    /// It is released and the claimant may take it: write itself in.
    Take,
    /// `holder` holds it, or released it last: the claimant is no longer the
    /// primary and becomes a replica.
    StandDown { holder: String },
}

/// The claim rule for `me` (the write that follows still carries the
/// resourceVersion read, so a change in between makes it fail). With
/// [`Rules::releaser_retakes`] off, whoever finds the lease released takes
/// it: what the model checker shows to lose commits.
pub fn claim(lease: &LeaseView<'_>, me: &str, rules: &Rules) -> Claim {
    let holder = lease.holder.filter(|h| !h.is_empty());
    let released_by = lease.released_by.filter(|by| !by.is_empty());
    match holder {
        Some(holder) if holder == me => Claim::Renew,
        Some(holder) => Claim::StandDown {
            holder: holder.to_owned(),
        },
        None => match released_by {
            Some(by) if by != me && rules.releaser_retakes => Claim::StandDown {
                holder: by.to_owned(),
            },
            _ => Claim::Take,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(holder: Option<&'a str>, released_by: Option<&'a str>) -> LeaseView<'a> {
        LeaseView {
            holder,
            released_by,
        }
    }

    fn stand_down(holder: &str) -> Claim {
        Claim::StandDown {
            holder: holder.to_owned(),
        }
    }

    #[test]
    fn who_renews_takes_or_stands_down() {
        let off = Rules {
            releaser_retakes: false,
            ..Rules::ALL
        };
        // (holder, released by, rules, what pg-1 does)
        let cases = [
            (Some("pg-1"), None, Rules::ALL, Claim::Renew),
            // A stale annotation from an older release changes nothing.
            (Some("pg-1"), Some("pg-2"), Rules::ALL, Claim::Renew),
            (Some("pg-2"), None, Rules::ALL, stand_down("pg-2")),
            (Some("pg-2"), Some("pg-1"), Rules::ALL, stand_down("pg-2")),
            // Released by this instance, or never held: take it.
            (None, Some("pg-1"), Rules::ALL, Claim::Take),
            (None, None, Rules::ALL, Claim::Take),
            (Some(""), Some(""), Rules::ALL, Claim::Take),
            // Released by another: it may have committed since this one stopped.
            (None, Some("pg-2"), Rules::ALL, stand_down("pg-2")),
            (Some(""), Some("pg-2"), Rules::ALL, stand_down("pg-2")),
            // Without the rule, a released lease is anyone's.
            (None, Some("pg-2"), off, Claim::Take),
            (Some("pg-2"), None, off, stand_down("pg-2")),
        ];
        for (holder, released_by, rules, expected) in cases {
            assert_eq!(
                claim(&view(holder, released_by), "pg-1", &rules),
                expected,
                "holder {holder:?}, released by {released_by:?}, {rules:?}"
            );
        }
    }
}
