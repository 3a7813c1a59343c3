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
    /// The lease holder this reaches, by instance name; `None`: whichever
    /// primary the Service routes to.
    pub holder: Option<String>,
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
        let (host, hostaddr) = if tls {
            (verified, Some(holder.address.clone()))
        } else {
            (holder.address.clone(), None)
        };
        return Some(Upstream {
            host,
            hostaddr,
            tls,
            holder: Some(holder.name.clone()),
        });
    }
    let service = service?;
    let plain_member = members.iter().any(|m| m.name != me && !m.tls);
    Some(Upstream {
        host: service.to_owned(),
        hostaddr: None,
        tls: own_tls && !plain_member,
        holder: None,
    })
}

/// What a running replica does when the upstream it should follow is `next`
/// and the one its configuration names is `following` (`None`: the
/// configuration written at start, before the lease loop knew anything).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redial {
    /// The same upstream: nothing to do.
    Stay,
    /// Write the configuration and reload: PostgreSQL restarts its WAL
    /// receiver towards `next`.
    Reload,
    /// The first holder the lease loop knows, after a configuration that
    /// dialled the primary Service (or the one written at start): the
    /// receiver may stream from that very holder already, through the
    /// Service, and restarting it only to dial the holder by address is a
    /// needless gap in streaming, which the operator rightly reports as a
    /// replica not streaming. So: reload unless the WAL receiver streams from
    /// the holder; then write the file for the next connection and leave the
    /// receiver alone.
    ReloadUnlessStreaming,
}

/// See [`Redial`]. A holder replacing another one, TLS coming or going, or
/// the holder forgotten always reloads: the receiver must leave whatever it
/// streams from.
pub fn redial(following: Option<&Upstream>, next: Option<&Upstream>) -> Redial {
    let Some(next) = next else {
        return match following {
            None => Redial::Stay,
            Some(_) => Redial::Reload,
        };
    };
    match following {
        Some(current) if current == next => Redial::Stay,
        Some(current) if current.holder.is_some() || current.tls != next.tls => Redial::Reload,
        _ if next.holder.is_some() => Redial::ReloadUnlessStreaming,
        // Still the Service, as written at start (or as TLS of the members
        // changed it, handled above): nothing to gain by keeping it.
        None => Redial::ReloadUnlessStreaming,
        Some(_) => Redial::Reload,
    }
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
                tls: true,
                holder: Some("orders-1".to_owned()),
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
    fn only_the_first_holder_after_the_service_may_keep_a_streaming_receiver() {
        let holder = |name, tls| {
            decide(
                true,
                true,
                Some(&member(name, tls)),
                Some("orders-rw"),
                &[],
                "orders-3",
            )
        };
        let (one, two) = (holder("orders-1", true), holder("orders-22", true));
        let service = decide(true, true, None, Some("orders-rw"), &[], "orders-3");
        assert_eq!(
            one.as_ref().and_then(|u| u.holder.as_deref()),
            Some("orders-1")
        );
        assert_eq!(service.as_ref().and_then(|u| u.holder.as_deref()), None);
        assert_eq!(redial(None, None), Redial::Stay);
        assert_eq!(
            redial(None, service.as_ref()),
            Redial::ReloadUnlessStreaming
        );
        assert_eq!(redial(None, one.as_ref()), Redial::ReloadUnlessStreaming);
        assert_eq!(
            redial(service.as_ref(), one.as_ref()),
            Redial::ReloadUnlessStreaming
        );
        assert_eq!(redial(one.as_ref(), one.as_ref()), Redial::Stay);
        assert_eq!(redial(service.as_ref(), service.as_ref()), Redial::Stay);
        // A new holder, TLS changing, or the holder forgotten: the receiver
        // must leave whatever it streams from.
        assert_eq!(redial(one.as_ref(), two.as_ref()), Redial::Reload);
        assert_eq!(
            redial(one.as_ref(), holder("orders-1", false).as_ref()),
            Redial::Reload
        );
        assert_eq!(redial(one.as_ref(), service.as_ref()), Redial::Reload);
        assert_eq!(redial(one.as_ref(), None), Redial::Reload);
        let plain_service = decide(false, true, None, Some("orders-rw"), &[], "orders-3");
        assert_eq!(
            redial(service.as_ref(), plain_service.as_ref()),
            Redial::Reload
        );
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
                tls: true,
                holder: None,
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
