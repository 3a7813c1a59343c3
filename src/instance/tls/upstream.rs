//! How this instance reaches its primary, for streaming (`primary_conninfo`),
//! cloning (`pg_basebackup`), rewinding (`pg_rewind`) and the manager's own
//! SQL (slots).
//!
//! With TLS on both sides the connection verifies the primary's certificate
//! against the CA bundle AND its name (`sslmode=verify-full`): the lease
//! holder is dialled at its pod IP (`hostaddr`) while `host` names the
//! instance, which its server certificate carries; the replication role
//! authenticates with its client certificate, so no password goes on the
//! wire. When the primary's pod was built before TLS (`Member.tls` false,
//! during an operator upgrade) the old way stays: the password, TLS if
//! offered.

use crate::contract::Member;

/// Where and how to connect to the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `host`: the name to verify (and to resolve when `hostaddr` is unset).
    pub host: String,
    /// `hostaddr`: the address to dial, when the host is a name that only
    /// the certificate knows (an instance name is not in DNS).
    pub hostaddr: Option<String>,
    /// Verify the primary's certificate and name, and present the
    /// replication certificate instead of a password.
    pub tls: bool,
}

/// The decision, from what the manager knows: whether it has TLS itself,
/// the lease holder's member entry (when leader selection knows it), the
/// configured primary Service, and the members the operator posted.
///
/// Without a known holder the Service is dialled by its name, which the
/// primary's server certificate carries; TLS then unless some other member
/// is a pod without TLS (the primary behind the Service may be that one).
///
/// The name verified on the holder's certificate is its instance name when
/// the instances' server certificates carry their own names (`pin_instance`:
/// Tusk issued them), else the Service's (a user's server certificate, the
/// same on every instance, names the Services only).
pub fn decide(
    own_tls: bool,
    pin_instance: bool,
    holder: Option<&Member>,
    service: Option<&str>,
    members: &[Member],
    me: &str,
) -> Option<Upstream> {
    if let Some(holder) = holder {
        let tls = own_tls && holder.tls;
        let verified = match service {
            Some(service) if !pin_instance => service.to_owned(),
            _ => holder.name.clone(),
        };
        return Some(if tls {
            Upstream {
                host: verified,
                hostaddr: Some(holder.address.clone()),
                tls,
            }
        } else {
            Upstream {
                host: holder.address.clone(),
                hostaddr: None,
                tls,
            }
        });
    }
    let service = service?;
    let plain_member = members.iter().any(|m| m.name != me && !m.tls);
    Some(Upstream {
        host: service.to_owned(),
        hostaddr: None,
        tls: own_tls && !plain_member,
    })
}

/// The TLS files a connection to the primary uses: the private copies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFiles {
    /// `sslrootcert`: CAs that verify the primary's certificate.
    pub root: String,
    /// `sslcert`/`sslkey`: the replication role's certificate and key.
    pub cert: String,
    pub key: String,
}

/// libpq keywords and values for `upstream`, port and user included;
/// `files` are used only when the upstream is TLS. The old way leaves
/// `sslmode=prefer` (TLS when the server offers it, unverified).
pub fn libpq_pairs(
    upstream: &Upstream,
    port: u16,
    user: &str,
    files: Option<&ClientFiles>,
) -> Vec<(&'static str, String)> {
    let mut pairs = vec![("host", upstream.host.clone())];
    if let Some(hostaddr) = &upstream.hostaddr {
        pairs.push(("hostaddr", hostaddr.clone()));
    }
    pairs.push(("port", port.to_string()));
    pairs.push(("user", user.to_owned()));
    match files.filter(|_| upstream.tls) {
        Some(files) => {
            pairs.push(("sslmode", "verify-full".to_owned()));
            pairs.push(("sslrootcert", files.root.clone()));
            pairs.push(("sslcert", files.cert.clone()));
            pairs.push(("sslkey", files.key.clone()));
        }
        None => pairs.push(("sslmode", "prefer".to_owned())),
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, tls: bool) -> Member {
        Member {
            name: name.to_owned(),
            address: format!("10.0.0.{}", name.len()),
            tls,
        }
    }

    #[test]
    fn a_user_server_certificate_is_verified_by_the_service_name() {
        let holder = member("orders-1", true);
        let upstream = decide(
            true,
            false,
            Some(&holder),
            Some("orders-rw"),
            &[],
            "orders-2",
        )
        .expect("an upstream");
        assert_eq!(upstream.host, "orders-rw");
        assert_eq!(upstream.hostaddr.as_deref(), Some(holder.address.as_str()));
        assert!(upstream.tls);
    }

    fn files() -> ClientFiles {
        ClientFiles {
            root: "/run/tls/ca.crt".to_owned(),
            cert: "/run/tls/replication.crt".to_owned(),
            key: "/run/tls/replication.key".to_owned(),
        }
    }

    #[test]
    fn a_tls_holder_is_dialled_by_ip_and_verified_by_its_instance_name() {
        let holder = member("orders-1", true);
        let upstream = decide(
            true,
            true,
            Some(&holder),
            Some("orders-rw"),
            &[],
            "orders-2",
        )
        .expect("an upstream");
        assert_eq!(
            upstream,
            Upstream {
                host: "orders-1".to_owned(),
                hostaddr: Some("10.0.0.8".to_owned()),
                tls: true
            }
        );
        let pairs = libpq_pairs(&upstream, 5432, "tusk_replication", Some(&files()));
        let get = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("host"), Some("orders-1"));
        assert_eq!(get("hostaddr"), Some("10.0.0.8"));
        assert_eq!(get("sslmode"), Some("verify-full"));
        assert_eq!(get("sslrootcert"), Some("/run/tls/ca.crt"));
        assert_eq!(get("sslcert"), Some("/run/tls/replication.crt"));
        assert_eq!(get("sslkey"), Some("/run/tls/replication.key"));
        assert!(get("passfile").is_none() && get("password").is_none());
    }

    #[test]
    fn a_holder_without_tls_or_a_manager_without_tls_keeps_the_old_way() {
        for (own, holder_tls) in [(true, false), (false, true), (false, false)] {
            let holder = member("orders-1", holder_tls);
            let upstream = decide(own, true, Some(&holder), Some("orders-rw"), &[], "orders-2")
                .expect("upstream");
            assert_eq!(upstream.host, "10.0.0.8");
            assert_eq!(upstream.hostaddr, None);
            assert!(!upstream.tls);
            let pairs = libpq_pairs(&upstream, 5432, "tusk_replication", Some(&files()));
            assert!(
                pairs.contains(&("sslmode", "prefer".to_owned())),
                "{pairs:?}"
            );
            assert!(
                !pairs.iter().any(|(k, _)| k.starts_with("sslcert")),
                "{pairs:?}"
            );
        }
    }

    #[test]
    fn without_a_holder_the_service_is_verified_unless_a_peer_lacks_tls() {
        let all_tls = [member("orders-1", true), member("orders-2", true)];
        let upstream =
            decide(true, true, None, Some("orders-rw"), &all_tls, "orders-2").expect("up");
        assert_eq!(
            upstream,
            Upstream {
                host: "orders-rw".to_owned(),
                hostaddr: None,
                tls: true
            }
        );
        // Only this instance lacking TLS does not matter; another one does.
        let mixed = [member("orders-1", false), member("orders-2", true)];
        assert!(
            !decide(true, true, None, Some("orders-rw"), &mixed, "orders-2")
                .expect("up")
                .tls
        );
        let me_plain = [member("orders-1", true), member("orders-2", false)];
        assert!(
            decide(true, true, None, Some("orders-rw"), &me_plain, "orders-2")
                .expect("up")
                .tls
        );
        assert_eq!(decide(true, true, None, None, &all_tls, "orders-2"), None);
    }
}
