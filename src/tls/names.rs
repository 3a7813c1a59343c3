//! The names a PostgreSQL server certificate must carry (DNS names, and
//! the published endpoints' addresses), and which of them a certificate
//! does not cover.

use std::net::IpAddr;

/// The default Kubernetes cluster domain.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// The Services through which clients reach a database: read-write,
/// read-only (standbys) and read (any instance).
const SERVICE_SUFFIXES: [&str; 3] = ["rw", "ro", "r"];

/// Every name under which clients reach the database's Services: for
/// `<db>-rw`, `<db>-ro` and `<db>-r` the forms `name`, `name.ns`,
/// `name.ns.svc` and `name.ns.svc.<cluster_domain>`, then `extra_hostnames`
/// (external hostnames). Deduplicated, first occurrence kept. A user-provided
/// server certificate must cover these.
pub fn service_names(
    db: &str,
    namespace: &str,
    cluster_domain: &str,
    extra_hostnames: &[String],
) -> Vec<String> {
    let generated = SERVICE_SUFFIXES.iter().flat_map(|suffix| {
        let service = format!("{db}-{suffix}");
        [
            service.clone(),
            format!("{service}.{namespace}"),
            format!("{service}.{namespace}.svc"),
            format!("{service}.{namespace}.svc.{cluster_domain}"),
        ]
    });
    dedup(generated.chain(extra_hostnames.iter().cloned()))
}

/// The names of one instance's PostgreSQL server certificate: the
/// [`service_names`], the instance name (standbys dial the primary's pod IP
/// and verify the instance name), then `extra_hostnames`. Deduplicated,
/// stable order.
pub fn server_names(
    db: &str,
    namespace: &str,
    cluster_domain: &str,
    instance: &str,
    extra_hostnames: &[String],
) -> Vec<String> {
    let mut names = service_names(db, namespace, cluster_domain, &[]);
    names.push(instance.to_owned());
    names.extend(extra_hostnames.iter().cloned());
    dedup(names)
}

/// The names of `required` that none of `cert_dns_names` covers, in order. A
/// wildcard `*.example.com` covers exactly one label (`a.example.com`, not
/// `example.com` nor `a.b.example.com`), as RFC 6125 verifiers do. DNS names
/// compare case-insensitively, IP addresses by value (`::1` = `0::1`).
pub fn uncovered(cert_dns_names: &[String], required: &[String]) -> Vec<String> {
    required
        .iter()
        .filter(|name| !cert_dns_names.iter().any(|pattern| covers(pattern, name)))
        .cloned()
        .collect()
}

/// Whether the certificate name `pattern` covers `name`.
pub fn covers(pattern: &str, name: &str) -> bool {
    // An address is covered by the same address only, never by a wildcard.
    if let Ok(address) = name.parse::<IpAddr>() {
        return pattern.parse::<IpAddr>() == Ok(address);
    }
    let pattern = pattern.trim_end_matches('.');
    let name = name.trim_end_matches('.');
    match pattern.strip_prefix("*.") {
        Some(parent) => name
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest.eq_ignore_ascii_case(parent)),
        None => pattern.eq_ignore_ascii_case(name),
    }
}

/// An IP address as Rust prints it (`0::1` → `::1`), a DNS name in lower
/// case without a trailing dot: how certificate names compare.
pub fn canonical(name: &str) -> String {
    match name.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => name.trim_end_matches('.').to_ascii_lowercase(),
    }
}

fn dedup(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    names
        .into_iter()
        .filter(|name| seen.insert(name.to_ascii_lowercase()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_server_certificate_names_every_service_form_then_the_instance() {
        assert_eq!(
            server_names("shop", "prod", "cluster.local", "shop-1", &[]),
            s(&[
                "shop-rw",
                "shop-rw.prod",
                "shop-rw.prod.svc",
                "shop-rw.prod.svc.cluster.local",
                "shop-ro",
                "shop-ro.prod",
                "shop-ro.prod.svc",
                "shop-ro.prod.svc.cluster.local",
                "shop-r",
                "shop-r.prod",
                "shop-r.prod.svc",
                "shop-r.prod.svc.cluster.local",
                "shop-1",
            ])
        );
    }

    #[test]
    fn extras_follow_and_duplicates_are_dropped() {
        let names = server_names(
            "shop",
            "prod",
            "example.internal",
            "shop-1",
            &s(&["db.example.com", "SHOP-RW", "db.example.com"]),
        );
        assert_eq!(names.len(), 14);
        assert_eq!(names[3], "shop-rw.prod.svc.example.internal");
        assert_eq!(names[12], "shop-1");
        assert_eq!(names[13], "db.example.com");
    }

    #[test]
    fn service_names_leave_the_instance_out() {
        let names = service_names("shop", "prod", "cluster.local", &s(&["db.example.com"]));
        assert_eq!(names.len(), 13);
        assert!(!names.iter().any(|n| n == "shop-1"));
        assert_eq!(names[12], "db.example.com");
    }

    #[test]
    fn coverage_table() {
        let table: &[(&str, &str, bool)] = &[
            ("shop-rw", "shop-rw", true),
            ("SHOP-rw", "shop-RW", true),
            ("shop-rw", "shop-ro", false),
            ("*.prod.svc", "shop-rw.prod.svc", true),
            ("*.prod.svc", "prod.svc", false),
            ("*.prod.svc", "a.shop-rw.prod.svc", false),
            ("*.prod.svc", ".prod.svc", false),
            ("*.svc", "shop-rw.prod.svc", false),
            ("shop-rw.prod.", "shop-rw.prod", true),
            ("::1", "0::1", true),
            ("10.0.0.1", "10.0.0.1", true),
            ("10.0.0.1", "10.0.0.2", false),
            ("*.0.0.1", "10.0.0.1", false),
        ];
        for (pattern, name, expected) in table {
            assert_eq!(covers(pattern, name), *expected, "{pattern} covers {name}");
        }
    }

    proptest::proptest! {
        /// Whatever the inputs, the list holds each name once, starts with
        /// the twelve service names in their fixed order, holds the instance
        /// and every extra, and covers itself.
        #[test]
        fn server_names_are_complete_unique_and_stable(
            db in "[a-z][a-z0-9-]{0,8}",
            ns in "[a-z][a-z0-9-]{0,8}",
            instance in "[a-z][a-z0-9-]{0,12}",
            extras in proptest::collection::vec("[a-z]{1,6}(\\.[a-z]{1,6}){0,2}", 0..4),
        ) {
            let names = server_names(&db, &ns, "cluster.local", &instance, &extras);
            let mut seen = std::collections::BTreeSet::new();
            for name in &names {
                proptest::prop_assert!(seen.insert(name.to_ascii_lowercase()), "{} twice", name);
            }
            let services = service_names(&db, &ns, "cluster.local", &[]);
            proptest::prop_assert_eq!(services.len(), 12);
            proptest::prop_assert!(names.starts_with(&services));
            proptest::prop_assert!(uncovered(&names, &extras).is_empty());
            proptest::prop_assert!(uncovered(&names, std::slice::from_ref(&instance)).is_empty());
            proptest::prop_assert!(uncovered(&names, &names).is_empty());
            proptest::prop_assert_eq!(
                names.clone(),
                server_names(&db, &ns, "cluster.local", &instance, &extras)
            );
        }

        /// A wildcard covers exactly one more label.
        #[test]
        fn a_wildcard_covers_one_label(
            parent in "[a-z]{1,6}(\\.[a-z]{1,6}){0,2}",
            first in "[a-z0-9-]{1,8}",
            second in "[a-z0-9-]{1,8}",
        ) {
            let wildcard = format!("*.{parent}");
            let one_deeper = format!("{first}.{parent}");
            let two_deeper = format!("{first}.{second}.{parent}");
            proptest::prop_assert!(covers(&wildcard, &one_deeper));
            proptest::prop_assert!(!covers(&wildcard, &two_deeper));
            proptest::prop_assert!(!covers(&wildcard, &parent));
        }
    }

    #[test]
    fn uncovered_lists_what_no_name_covers_in_order() {
        let cert = s(&["*.prod.svc", "shop-rw"]);
        let required = s(&["shop-rw", "shop-ro", "shop-ro.prod.svc", "shop-ro.prod"]);
        assert_eq!(uncovered(&cert, &required), s(&["shop-ro", "shop-ro.prod"]));
        assert!(uncovered(&required, &required).is_empty());
    }
}
