//! When to reissue a leaf certificate: missing, issued by another CA (a CA
//! rotation or a switch to the user's CA), expired or about to, or naming
//! other names than wanted. Pure: the caller passes the time.

use std::net::IpAddr;

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
/// not by wildcard: the leaves checked here are the ones Tusk issued; a
/// wanted name that is an IP address is compared with the leaf's IP
/// addresses (Tusk issues it as one). For a
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
    let issued = leaf.names();
    let missing = absent_from(wanted_names, &issued);
    let unwanted = absent_from(&issued, wanted_names);
    if missing.is_empty() && unwanted.is_empty() {
        None
    } else {
        Some(Reason::NamesChanged { missing, unwanted })
    }
}

/// The names of `these` not in `those`: DNS names compared
/// case-insensitively, addresses by value, wildcards literally.
fn absent_from(these: &[String], those: &[String]) -> Vec<String> {
    these
        .iter()
        .filter(|name| !those.iter().any(|other| same_name(other, name)))
        .cloned()
        .collect()
}

fn same_name(a: &str, b: &str) -> bool {
    match (a.parse::<IpAddr>(), b.parse::<IpAddr>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a.eq_ignore_ascii_case(b),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::tls::authority::{Authority, Leaf};
    use crate::tls::test_support::*;

    fn names() -> Vec<String> {
        strings(&["shop-rw", "shop-1"])
    }

    fn leaf(ca: &Authority) -> Leaf {
        ca.issue_server(&names(), days(7), now()).unwrap()
    }

    #[test]
    fn decision_table() {
        let ca = ca();
        let leaf = leaf(&ca);
        let other = crate::tls::test_support::ca();
        let third = days(7) / 3;
        let not_after = leaf.info.not_after;
        type Case<'a> = (
            &'a str,
            Option<&'a CertInfo>,
            &'a CertInfo,
            Vec<String>,
            Timestamp,
            Option<Reason>,
        );
        let table: Vec<Case> = vec![
            ("fresh", Some(&leaf.info), ca.info(), names(), now(), None),
            (
                "missing",
                None,
                ca.info(),
                names(),
                now(),
                Some(Reason::Missing),
            ),
            (
                "other issuer",
                Some(&leaf.info),
                other.info(),
                names(),
                now(),
                Some(Reason::OtherIssuer),
            ),
            (
                "just before the window",
                Some(&leaf.info),
                ca.info(),
                names(),
                not_after - third - SignedDuration::from_secs(1),
                None,
            ),
            (
                "window opens",
                Some(&leaf.info),
                ca.info(),
                names(),
                not_after - third,
                Some(Reason::Expiring { not_after }),
            ),
            (
                "expired",
                Some(&leaf.info),
                ca.info(),
                names(),
                not_after,
                Some(Reason::Expired { not_after }),
            ),
            (
                "a name added",
                Some(&leaf.info),
                ca.info(),
                strings(&["shop-rw", "shop-1", "db.example.com"]),
                now(),
                Some(Reason::NamesChanged {
                    missing: strings(&["db.example.com"]),
                    unwanted: vec![],
                }),
            ),
            (
                "a name dropped",
                Some(&leaf.info),
                ca.info(),
                strings(&["shop-rw"]),
                now(),
                Some(Reason::NamesChanged {
                    missing: vec![],
                    unwanted: strings(&["shop-1"]),
                }),
            ),
            (
                "names compare case-insensitively",
                Some(&leaf.info),
                ca.info(),
                strings(&["SHOP-rw", "shop-1"]),
                now(),
                None,
            ),
        ];
        for (case, leaf, issuer, wanted, at, expected) in table {
            assert_eq!(
                renewal(leaf, issuer, &wanted, at, third),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn a_leaf_with_an_address_matches_the_names_it_was_issued_for() {
        let ca = ca();
        let wanted = strings(&["shop-rw", "2001:db8::1"]);
        let leaf = ca.issue_server(&wanted, days(7), now()).unwrap();
        assert_eq!(
            renewal(Some(&leaf.info), ca.info(), &wanted, now(), days(2)),
            None
        );
        let spelled_out = strings(&["shop-rw", "2001:db8:0:0:0:0:0:1"]);
        assert_eq!(
            renewal(Some(&leaf.info), ca.info(), &spelled_out, now(), days(2)),
            None
        );
    }

    #[test]
    fn a_leaf_ending_with_its_ca_is_not_reissued_in_a_loop() {
        let ca = Authority::generate("short", days(3), now()).unwrap();
        let leaf = leaf(&ca);
        assert_eq!(leaf.info.not_after, ca.info().not_after);
        let late = ca.info().not_after - days(1);
        assert_eq!(
            renewal(Some(&leaf.info), ca.info(), &names(), late, days(2)),
            None
        );
        let expired = ca.info().not_after;
        assert!(matches!(
            renewal(Some(&leaf.info), ca.info(), &names(), expired, days(2)),
            Some(Reason::Expired { .. })
        ));
    }

    #[test]
    fn a_ca_checks_against_itself() {
        let ca = ca();
        let info = ca.info();
        assert_eq!(renewal(Some(info), info, &[], now(), days(90)), None);
        // A CA ends with itself: only its expiry is due.
        assert!(matches!(
            renewal(Some(info), info, &[], info.not_after, days(90)),
            Some(Reason::Expired { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Renewal is due at the latest `renew_before` ahead of expiry, and a
        /// matching leaf with more than that left is never reissued.
        #[test]
        fn due_exactly_when_renew_before_remains(
            lifetime_minutes in 10i64..(60 * 24 * 30),
            renew_fraction in 1i64..100,
            elapsed_permille in 0i64..1200,
        ) {
            let ca = ca();
            let lifetime = SignedDuration::from_mins(lifetime_minutes);
            let leaf = ca.issue_server(&names(), lifetime, now()).unwrap();
            let renew_before = lifetime * renew_fraction as i32 / 100;
            let at = now() + lifetime * elapsed_permille as i32 / 1000;
            let remaining = leaf.info.not_after.duration_since(at);
            let decision = renewal(Some(&leaf.info), ca.info(), &names(), at, renew_before);
            if remaining > renew_before {
                prop_assert_eq!(decision, None);
            } else {
                prop_assert!(matches!(
                    decision,
                    Some(Reason::Expiring { .. } | Reason::Expired { .. })
                ), "{:?} with {} left", decision, remaining);
            }
        }
    }
}
