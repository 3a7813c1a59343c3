//! Rendering `pg_hba.conf`.
//!
//! The rules, first match wins:
//! - Unix socket: only the `postgres` superuser, by `peer`. The instance manager
//!   runs as the image's `postgres` OS user (uid 999 in the official images) and
//!   talks SQL over the socket for status, bootstrap and promotion; `peer` lets it
//!   do so without a password on disk while every other OS user, and every other
//!   database role, is refused on the socket. `trust` would let any process that
//!   can reach the socket directory (other containers mounting it) be superuser.
//! - TCP without TLS configured: the replication role may open replication
//!   connections; every role may open ordinary connections; both with
//!   SCRAM-SHA-256 (never md5 or trust).
//! - TCP with TLS ([`Tls`]): only over TLS (`hostssl`). The replication role
//!   authenticates with its client certificate (`cert`: no password on the
//!   wire, and the certificate's common name must be the role), for
//!   replication and for its ordinary connections (slot upkeep), and so do
//!   the roles listed as certificate users; every other role with SCRAM-SHA-256.
//!   Plaintext TCP is rejected by an explicit `hostnossl` rule, unless the
//!   user opted into plaintext (`spec.tls.allowPlaintext`): then ordinary
//!   connections may also come without TLS with SCRAM, but replication still
//!   needs the certificate over TLS, and the certificate users never get in
//!   without TLS.
//! - Everything else is rejected explicitly, so the file's intent is readable.

/// `pg_hba.conf`'s part of TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// Let ordinary connections in without TLS (`spec.tls.allowPlaintext`).
    pub allow_plaintext: bool,
    /// Roles that authenticate with a client certificate instead of a
    /// password (the application role with `spec.tls.clientCertificates`).
    pub cert_users: Vec<String>,
}

/// Both address families, as pg_hba.conf spells "every TCP client".
const ADDRESSES: [&str; 2] = ["0.0.0.0/0", "::/0"];

type Rule = (
    &'static str,
    &'static str,
    String,
    &'static str,
    &'static str,
);

/// Render `pg_hba.conf` for an instance; `tls` `None` runs without TLS.
pub fn render(superuser: &str, replication_user: &str, tls: Option<&Tls>) -> String {
    let mut rules: Vec<Rule> = vec![
        ("local", "all", superuser.to_owned(), "", "peer"),
        ("local", "all", "all".to_owned(), "", "reject"),
        ("local", "replication", "all".to_owned(), "", "reject"),
    ];
    match tls {
        None => plaintext_rules(&mut rules, replication_user),
        Some(tls) => tls_rules(&mut rules, replication_user, tls),
    }
    // `all` in the database column does not match replication connections,
    // so they need their own catch-all.
    rules.push(("host", "replication", "all".to_owned(), "all", "reject"));
    rules.push(("host", "all", "all".to_owned(), "all", "reject"));
    // Without TLS the file stays byte for byte what it was before TLS
    // existed, so an upgrade of the operator rewrites nothing.
    let (width, header) = match tls {
        None => (
            7,
            "# TYPE  DATABASE     USER                 ADDRESS      METHOD\n",
        ),
        Some(_) => (
            9,
            "# TYPE    DATABASE     USER                 ADDRESS      METHOD\n",
        ),
    };
    let mut out =
        String::from("# Written by the Tusk instance manager at every start; edits are lost.\n");
    out.push_str(header);
    for (kind, database, user, address, method) in rules {
        let line = format!(
            "{kind:<width$} {database:<12} {:<20} {address:<12} {method}",
            quote_user(&user)
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn plaintext_rules(rules: &mut Vec<Rule>, replication_user: &str) {
    for address in ADDRESSES {
        rules.push((
            "host",
            "replication",
            replication_user.to_owned(),
            address,
            "scram-sha-256",
        ));
    }
    for address in ADDRESSES {
        rules.push(("host", "all", "all".to_owned(), address, "scram-sha-256"));
    }
}

fn tls_rules(rules: &mut Vec<Rule>, replication_user: &str, tls: &Tls) {
    for address in ADDRESSES {
        rules.push((
            "hostssl",
            "replication",
            replication_user.to_owned(),
            address,
            "cert",
        ));
    }
    // The replication role's ordinary connections (the manager's slot
    // upkeep on the primary) authenticate by certificate too.
    let cert_users =
        std::iter::once(replication_user).chain(tls.cert_users.iter().map(String::as_str));
    for user in cert_users {
        for address in ADDRESSES {
            rules.push(("hostssl", "all", user.to_owned(), address, "cert"));
        }
    }
    for address in ADDRESSES {
        rules.push(("hostssl", "all", "all".to_owned(), address, "scram-sha-256"));
    }
    // Replication never goes without TLS once the instance has it.
    rules.push((
        "hostnossl",
        "replication",
        "all".to_owned(),
        "all",
        "reject",
    ));
    if tls.allow_plaintext {
        // A certificate user has no password login, with or without TLS.
        for user in &tls.cert_users {
            rules.push(("hostnossl", "all", user.clone(), "all", "reject"));
        }
        for address in ADDRESSES {
            rules.push((
                "hostnossl",
                "all",
                "all".to_owned(),
                address,
                "scram-sha-256",
            ));
        }
    } else {
        rules.push(("hostnossl", "all", "all".to_owned(), "all", "reject"));
    }
}

/// Role names in pg_hba.conf are double-quoted when they are not plain words, and
/// `all` must stay unquoted to keep its special meaning.
fn quote_user(user: &str) -> String {
    if user == "all"
        || user
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        user.to_owned()
    } else {
        format!("\"{}\"", user.replace('"', "\"\""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> Vec<Vec<&str>> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect())
            .collect()
    }

    #[test]
    fn only_the_superuser_gets_the_socket_and_only_by_peer() {
        let text = render("postgres", "tusk_replication", None);
        let r = rules(&text);
        assert_eq!(r[0], vec!["local", "all", "postgres", "peer"]);
        assert_eq!(r[1], vec!["local", "all", "all", "reject"]);
        assert!(!render("postgres", "tusk_replication", None).contains("trust"));
        assert!(!render("postgres", "tusk_replication", None).contains("md5"));
    }

    #[test]
    fn replication_is_only_for_the_replication_role_with_scram() {
        let text = render("postgres", "tusk_replication", None);
        let r = rules(&text);
        let allowed: Vec<_> = r
            .iter()
            .filter(|rule| rule[1] == "replication" && rule.last() != Some(&"reject"))
            .collect();
        assert_eq!(allowed.len(), 2);
        for rule in allowed {
            assert_eq!(rule[0], "host");
            assert_eq!(rule[2], "tusk_replication");
            assert_eq!(rule[4], "scram-sha-256");
        }
    }

    #[test]
    fn ordinary_tcp_connections_need_scram_and_the_rest_is_rejected() {
        let text = render("postgres", "tusk_replication", None);
        let r = rules(&text);
        assert!(r.contains(&vec!["host", "all", "all", "0.0.0.0/0", "scram-sha-256"]));
        assert!(r.contains(&vec!["host", "all", "all", "::/0", "scram-sha-256"]));
        assert!(r.contains(&vec!["host", "all", "all", "all", "reject"]));
    }

    fn tls(allow_plaintext: bool) -> Tls {
        Tls {
            allow_plaintext,
            cert_users: vec!["app".to_owned()],
        }
    }

    /// The first rule that matches a connection of `kind` (`hostssl` or
    /// `hostnossl`) for `database` (`replication` or another) and `user`
    /// from an IPv4 or IPv6 client: what PostgreSQL would apply.
    fn first_match<'a>(
        r: &'a [Vec<&'a str>],
        ssl: bool,
        replication: bool,
        user: &str,
        v6: bool,
    ) -> &'a [&'a str] {
        r.iter()
            .find(|rule| {
                let kind = match rule[0] {
                    "host" => true,
                    "hostssl" => ssl,
                    "hostnossl" => !ssl,
                    _ => false,
                };
                let database = if replication {
                    rule[1] == "replication"
                } else {
                    rule[1] == "all"
                };
                let address = match rule[3] {
                    "all" => true,
                    "::/0" => v6,
                    "0.0.0.0/0" => !v6,
                    _ => false,
                };
                kind && database && (rule[2] == "all" || rule[2] == user) && address
            })
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    #[test]
    fn with_tls_replication_and_cert_users_need_a_certificate_over_tls() {
        for allow_plaintext in [false, true] {
            let text = render("postgres", "tusk_replication", Some(&tls(allow_plaintext)));
            let r = rules(&text);
            for v6 in [false, true] {
                let method = |ssl, replication, user| {
                    first_match(&r, ssl, replication, user, v6).last().copied()
                };
                assert_eq!(method(true, true, "tusk_replication"), Some("cert"));
                assert_eq!(method(true, false, "app"), Some("cert"));
                assert_eq!(method(true, false, "tusk_replication"), Some("cert"));
                assert_eq!(method(true, false, "postgres"), Some("scram-sha-256"));
                assert_eq!(method(true, false, "someone"), Some("scram-sha-256"));
                // No other role replicates, over TLS or not; the
                // replication role never without TLS.
                assert_eq!(method(true, true, "postgres"), Some("reject"));
                assert_eq!(method(false, true, "tusk_replication"), Some("reject"));
            }
            assert!(!text.contains("trust") && !text.contains("md5"), "{text}");
            assert!(!text.contains("password"), "{text}");
        }
    }

    #[test]
    fn with_tls_plaintext_is_rejected_unless_allowed() {
        let strict = render("postgres", "tusk_replication", Some(&tls(false)));
        let r = rules(&strict);
        for user in ["postgres", "app", "someone"] {
            for v6 in [false, true] {
                assert_eq!(
                    first_match(&r, false, false, user, v6),
                    ["hostnossl", "all", "all", "all", "reject"],
                    "{user}\n{strict}"
                );
            }
        }
        let open = render("postgres", "tusk_replication", Some(&tls(true)));
        let r = rules(&open);
        assert_eq!(
            first_match(&r, false, false, "someone", true),
            ["hostnossl", "all", "all", "::/0", "scram-sha-256"]
        );
        assert_eq!(
            first_match(&r, false, false, "postgres", false),
            ["hostnossl", "all", "all", "0.0.0.0/0", "scram-sha-256"]
        );
        // A certificate user has no password login without TLS either.
        for v6 in [false, true] {
            assert_eq!(
                first_match(&r, false, false, "app", v6),
                ["hostnossl", "all", "app", "all", "reject"],
                "{open}"
            );
        }
        // The local socket rules are the same either way.
        assert_eq!(
            rules(&strict)[..3],
            rules(&render("postgres", "r", None))[..3]
        );
    }

    #[test]
    fn without_tls_the_file_is_what_it_was_before_tls() {
        assert_eq!(
            render("postgres", "tusk_replication", None),
            concat!(
                "# Written by the Tusk instance manager at every start; edits are lost.\n",
                "# TYPE  DATABASE     USER                 ADDRESS      METHOD\n",
                "local   all          postgres                          peer\n",
                "local   all          all                               reject\n",
                "local   replication  all                               reject\n",
                "host    replication  tusk_replication     0.0.0.0/0    scram-sha-256\n",
                "host    replication  tusk_replication     ::/0         scram-sha-256\n",
                "host    all          all                  0.0.0.0/0    scram-sha-256\n",
                "host    all          all                  ::/0         scram-sha-256\n",
                "host    replication  all                  all          reject\n",
                "host    all          all                  all          reject\n",
            )
        );
    }

    #[test]
    fn unusual_role_names_are_quoted() {
        assert_eq!(quote_user("Odd Name"), "\"Odd Name\"");
        assert_eq!(quote_user("all"), "all");
    }
}
