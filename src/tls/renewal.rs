//! When to reissue a leaf certificate: missing, issued by another CA (a CA
//! rotation or a switch to the user's CA), expired or about to, or naming
//! other names than wanted. Pure: the caller passes the time.

use jiff::{SignedDuration, Timestamp};

use super::inspect::CertInfo;

/// Why a leaf must be reissued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// There is no leaf (or it could not be read).
    Missing,
    /// The leaf was not signed by the issuer that should have signed it.
    OtherIssuer,
    /// The leaf is no longer valid.
    Expired { not_after: Timestamp },
    /// Less than `renew_before` remains.
    Expiring { not_after: Timestamp },
    /// The leaf's DNS names differ from the wanted ones.
    NamesChanged {
        /// Wanted, not in the leaf.
        missing: Vec<String>,
        /// In the leaf, no longer wanted.
        unwanted: Vec<String>,
    },
}

/// Whether `leaf` must be reissued by `issuer` at `now`, and why (the first
/// reason in the order of [`Reason`]'s variants).
///
/// A leaf is due when at most `renew_before` remains of it, unless it already
/// ends with its issuer: a new leaf could not end later (it is clamped to the
/// issuer's notAfter), so reissuing would only repeat on every pass; that
/// leaf is renewed when the issuer is replaced ([`Reason::OtherIssuer`]) or
/// when it expires. `wanted_names` are compared exactly (case-insensitively),
/// not by wildcard: the leaves checked here are the ones Tusk issued. For a
/// CA, pass it as both `leaf` and `issuer` and no names.
pub fn renewal(
    leaf: Option<&CertInfo>,
    issuer: &CertInfo,
    wanted_names: &[String],
    now: Timestamp,
    renew_before: SignedDuration,
) -> Option<Reason> {
    let Some(leaf) = leaf else {
        return Some(Reason::Missing);
    };
    if !leaf.issued_by(issuer) {
        return Some(Reason::OtherIssuer);
    }
    if now >= leaf.not_after {
        return Some(Reason::Expired {
            not_after: leaf.not_after,
        });
    }
    if now >= leaf.not_after - renew_before && leaf.not_after < issuer.not_after {
        return Some(Reason::Expiring {
            not_after: leaf.not_after,
        });
    }
    let missing = absent_from(wanted_names, &leaf.dns_names);
    let unwanted = absent_from(&leaf.dns_names, wanted_names);
    if missing.is_empty() && unwanted.is_empty() {
        None
    } else {
        Some(Reason::NamesChanged { missing, unwanted })
    }
}

/// The names of `these` not in `those`.
fn absent_from(these: &[String], those: &[String]) -> Vec<String> {
    these
        .iter()
        .filter(|name| !those.iter().any(|other| other.eq_ignore_ascii_case(name)))
        .cloned()
        .collect()
}
