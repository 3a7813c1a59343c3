//! Rendering `pg_hba.conf`.
//!
//! The rules, first match wins:
//! - Unix socket: only the `postgres` superuser, by `peer`. The instance manager
//!   runs as the image's `postgres` OS user (uid 999 in the official images) and
//!   talks SQL over the socket for status, bootstrap and promotion; `peer` lets it
//!   do so without a password on disk while every other OS user, and every other
//!   database role, is refused on the socket. `trust` would let any process that
//!   can reach the socket directory (other containers mounting it) be superuser.
//! - TCP: the replication role may open replication connections; every role may
//!   open ordinary connections; both with SCRAM-SHA-256 (never md5 or trust).
//! - Everything else is rejected explicitly, so the file's intent is readable.

/// Render `pg_hba.conf` for an instance.
pub fn render(superuser: &str, replication_user: &str) -> String {
    let rules: [(&str, &str, &str, &str, &str); 9] = [
        ("local", "all", superuser, "", "peer"),
        ("local", "all", "all", "", "reject"),
        ("local", "replication", "all", "", "reject"),
        (
            "host",
            "replication",
            replication_user,
            "0.0.0.0/0",
            "scram-sha-256",
        ),
        (
            "host",
            "replication",
            replication_user,
            "::/0",
            "scram-sha-256",
        ),
        ("host", "all", "all", "0.0.0.0/0", "scram-sha-256"),
        ("host", "all", "all", "::/0", "scram-sha-256"),
        // `all` in the database column does not match replication connections,
        // so they need their own catch-all.
        ("host", "replication", "all", "all", "reject"),
        ("host", "all", "all", "all", "reject"),
    ];
    let mut out = String::from(
        "# Written by the Tusk instance manager at every start; edits are lost.\n\
         # TYPE  DATABASE     USER                 ADDRESS      METHOD\n",
    );
    for (kind, database, user, address, method) in rules {
        let line = format!(
            "{kind:<7} {database:<12} {:<20} {address:<12} {method}",
            quote_user(user)
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
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
        let text = render("postgres", "tusk_replication");
        let r = rules(&text);
        assert_eq!(r[0], vec!["local", "all", "postgres", "peer"]);
        assert_eq!(r[1], vec!["local", "all", "all", "reject"]);
        assert!(!render("postgres", "tusk_replication").contains("trust"));
        assert!(!render("postgres", "tusk_replication").contains("md5"));
    }

    #[test]
    fn replication_is_only_for_the_replication_role_with_scram() {
        let text = render("postgres", "tusk_replication");
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
        let text = render("postgres", "tusk_replication");
        let r = rules(&text);
        assert!(r.contains(&vec!["host", "all", "all", "0.0.0.0/0", "scram-sha-256"]));
        assert!(r.contains(&vec!["host", "all", "all", "::/0", "scram-sha-256"]));
        assert!(r.contains(&vec!["host", "all", "all", "all", "reject"]));
    }

    #[test]
    fn unusual_role_names_are_quoted() {
        assert_eq!(quote_user("Odd Name"), "\"Odd Name\"");
        assert_eq!(quote_user("all"), "all");
    }
}
