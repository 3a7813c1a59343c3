//! Quoting SQL identifiers and literals, and deriving replication slot names.
//!
//! Tusk runs DDL whose names and passwords come from the Database spec and its
//! Secrets; statements like `CREATE ROLE` and `ALTER ROLE ... PASSWORD` take no
//! bind parameters, so these have to be quoted by hand.

/// Quote a name as a SQL identifier: always in double quotes, inner quotes doubled,
/// so any string becomes exactly one identifier.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quote a string as a SQL literal the way PostgreSQL's own `quote_literal` does:
/// quotes doubled, and when a backslash is present, backslashes doubled inside an
/// `E'...'` string, so the result means the same whatever
/// `standard_conforming_strings` is.
pub fn quote_literal(value: &str) -> String {
    let quoted = value.replace('\'', "''");
    if quoted.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    }
}

/// Longest name PostgreSQL keeps for identifiers, slot names included (NAMEDATALEN - 1).
pub const MAX_NAME_LEN: usize = 63;

/// The physical replication slot that keeps WAL on the primary for an instance.
///
/// Slot names may only contain lower-case letters, digits and underscores, so
/// `orders-2` becomes `orders_2`; anything else maps to `_` and the result is cut
/// to 63 bytes. Instance names are DNS labels (≤ 63, `[a-z0-9-]`), so the mapping
/// is one to one for every name the operator generates.
pub fn slot_name(instance: &str) -> String {
    let mut slot: String = instance
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '_' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '_',
        })
        .take(MAX_NAME_LEN)
        .collect();
    if slot.is_empty() {
        slot.push('_');
    }
    slot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_always_quoted_with_inner_quotes_doubled() {
        assert_eq!(quote_ident("app"), "\"app\"");
        assert_eq!(quote_ident("my\"role"), "\"my\"\"role\"");
        assert_eq!(quote_ident("orders-2"), "\"orders-2\"");
    }

    #[test]
    fn literals_double_quotes_and_escape_backslashes() {
        assert_eq!(quote_literal("secret"), "'secret'");
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal(r"a\b'c"), r"E'a\\b''c'");
        assert_eq!(quote_literal(""), "''");
    }

    #[test]
    fn slot_names_keep_only_lowercase_digits_and_underscores() {
        assert_eq!(slot_name("orders-2"), "orders_2");
        assert_eq!(slot_name("Orders.West-10"), "orders_west_10");
        assert_eq!(slot_name(""), "_");
        let long = "a".repeat(80);
        assert_eq!(slot_name(&long).len(), MAX_NAME_LEN);
        assert!(
            slot_name("x-y_z 9!")
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        );
    }
}
