//! `spec.walStorage`: the rules a separate WAL volume must meet beyond the
//! schema. The schema's CEL refuses adding or removing it on an existing
//! Database (the apiserver enforces that even without the webhook); these
//! functions run in the webhook and the reconciler like the rest of
//! [`super::validate`].
//!
//! The size rule is a pure function of `max_wal_size` ([`min_volume_bytes`]),
//! so that whoever decides `max_wal_size` (the spec, PostgreSQL's default, or
//! a value derived from the instance's memory and volume) can ask it.

use super::field::FieldError;
use super::quantity;
use super::v1::DatabaseSpec;

/// PostgreSQL's default `max_wal_size` (1GB), used when the spec sets none.
pub const DEFAULT_MAX_WAL_SIZE_BYTES: u128 = 1 << 30;
/// The margin's fixed part: a few 16MB segments in flight (the one being
/// written, recycled ones, a `.partial` after a promotion).
pub const MARGIN_BYTES: u128 = 64 << 20;
/// The margin's proportional part, in quarters of `max_wal_size`:
/// `max_wal_size` is a soft limit, exceeded while a spread checkpoint
/// (`checkpoint_completion_target` 0.9) completes under load.
pub const MARGIN_QUARTERS: u128 = 1;

const MIB: u128 = 1 << 20;

/// The smallest WAL volume that holds `max_wal_size` bytes of WAL with the
/// margin: `max_wal_size` × 1.25 + 64Mi.
pub fn min_volume_bytes(max_wal_size: u128) -> u128 {
    max_wal_size + max_wal_size * MARGIN_QUARTERS / 4 + MARGIN_BYTES
}

/// `max_wal_size` as PostgreSQL reads it: an integer, in MB unless a memory
/// unit (`B`, `kB`, `MB`, `GB`, `TB`) follows.
pub fn parse_max_wal_size(value: &str) -> Result<u128, String> {
    let bad = || format!("{value:?} is not a size such as \"1GB\" or \"2048\" (MB)");
    let trimmed = value.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number: u128 = number.parse().map_err(|_| bad())?;
    let multiplier: u128 = match unit.trim() {
        "" | "MB" => MIB,
        "B" => 1,
        "kB" => 1 << 10,
        "GB" => 1 << 30,
        "TB" => 1 << 40,
        _ => return Err(bad()),
    };
    number.checked_mul(multiplier).ok_or_else(bad)
}

/// The `max_wal_size` the spec asks for: its parameter, or PostgreSQL's
/// default. `Err` names the parameter when its value does not parse.
pub fn spec_max_wal_size(spec: &DatabaseSpec) -> Result<u128, FieldError> {
    match spec.postgresql.parameters.get("max_wal_size") {
        None => Ok(DEFAULT_MAX_WAL_SIZE_BYTES),
        Some(value) => parse_max_wal_size(value)
            .map_err(|e| FieldError::new("spec.postgresql.parameters.max_wal_size", e)),
    }
}

/// Checks `spec.walStorage` on its own (create, and every reconcile)
/// against the spec's `max_wal_size`.
pub fn errors(spec: &DatabaseSpec) -> Vec<FieldError> {
    let Some(wal) = &spec.wal_storage else {
        return Vec::new();
    };
    match spec_max_wal_size(spec) {
        Ok(max_wal_size) => {
            let source = if spec.postgresql.parameters.contains_key("max_wal_size") {
                "spec.postgresql.parameters.max_wal_size"
            } else {
                "PostgreSQL's default"
            };
            size_errors(&wal.size, max_wal_size, source)
        }
        Err(error) => vec![error],
    }
}

/// Checks a WAL volume of `size` for `max_wal_size` bytes of WAL (from
/// `source`, named in the message).
pub fn size_errors(size: &str, max_wal_size: u128, source: &str) -> Vec<FieldError> {
    const FIELD: &str = "spec.walStorage.size";
    let bytes = match quantity::parse_bytes(size) {
        Ok(bytes) => bytes,
        Err(e) => return vec![FieldError::new(FIELD, e)],
    };
    let needed = min_volume_bytes(max_wal_size);
    if bytes >= needed {
        return Vec::new();
    }
    vec![FieldError::new(
        FIELD,
        format!(
            "{size} cannot hold max_wal_size ({} from {source}) with its margin: \
             the WAL volume needs at least {}Mi (max_wal_size × 1.25 + 64Mi); \
             make spec.walStorage.size larger or lower max_wal_size",
            postgres_size(max_wal_size),
            needed.div_ceil(MIB)
        ),
    )]
}

/// `bytes` as PostgreSQL writes a size (its MB and GB are powers of 1024).
fn postgres_size(bytes: u128) -> String {
    if bytes.is_multiple_of(1 << 30) {
        format!("{}GB", bytes >> 30)
    } else {
        format!("{}MB", bytes.div_ceil(MIB))
    }
}

/// Checks a change of `spec.walStorage`: never added or removed (also the
/// schema's CEL), its class immutable, its size never smaller (a larger one
/// grows the WAL PVCs like the data PVCs: `crate::lifecycle::growth`).
pub fn update_errors(old: &DatabaseSpec, new: &DatabaseSpec) -> Vec<FieldError> {
    match (&old.wal_storage, &new.wal_storage) {
        (None, None) => Vec::new(),
        (None, Some(_)) | (Some(_), None) => vec![FieldError::new(
            "spec.walStorage",
            "cannot be added to or removed from an existing Database: each instance's WAL \
             volume is chosen when the Database is created (create a new Database, for \
             example restored from a backup)",
        )],
        (Some(before), Some(after)) => {
            let mut errors = Vec::new();
            if before.storage_class_name != after.storage_class_name {
                errors.push(FieldError::new(
                    "spec.walStorage.storageClassName",
                    "is immutable",
                ));
            }
            if let (Ok(was), Ok(is)) = (
                quantity::parse_bytes(&before.size),
                quantity::parse_bytes(&after.size),
            ) && is < was
            {
                errors.push(FieldError::new(
                    "spec.walStorage.size",
                    format!(
                        "cannot shrink from {} to {}: volumes may only grow",
                        before.size, after.size
                    ),
                ));
            }
            errors
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::v1::WalStorageSpec;

    fn with_wal(size: &str) -> DatabaseSpec {
        let mut spec = sample_database().spec;
        spec.wal_storage = Some(WalStorageSpec {
            size: size.into(),
            storage_class_name: None,
        });
        spec
    }

    fn paths(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn max_wal_size_reads_like_postgresql() {
        assert_eq!(parse_max_wal_size("1024"), Ok(1 << 30));
        assert_eq!(parse_max_wal_size("2GB"), Ok(2 << 30));
        assert_eq!(parse_max_wal_size("512MB"), Ok(512 << 20));
        assert_eq!(parse_max_wal_size("1048576kB"), Ok(1 << 30));
        assert_eq!(parse_max_wal_size("1TB"), Ok(1 << 40));
        for bad in ["", "GB", "1gb", "1.5GB", "-1", "1 Gi"] {
            assert!(parse_max_wal_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_volume_holds_max_wal_size_and_a_quarter_and_64_mebibytes() {
        assert_eq!(
            min_volume_bytes(1 << 30),
            (1 << 30) + (256 << 20) + (64 << 20)
        );
        assert_eq!(min_volume_bytes(0), 64 << 20);
        // Never below max_wal_size itself, at any size.
        for gib in [1u128, 3, 100, 1 << 20] {
            assert!(min_volume_bytes(gib << 30) > gib << 30);
        }
    }

    #[test]
    fn a_database_without_a_wal_volume_has_nothing_to_check() {
        let mut spec = sample_database().spec;
        spec.postgresql
            .parameters
            .insert("max_wal_size".into(), "100GB".into());
        assert_eq!(errors(&spec), []);
    }

    #[test]
    fn the_default_max_wal_size_needs_1344_mebibytes() {
        assert_eq!(errors(&with_wal("1344Mi")), []);
        assert_eq!(errors(&with_wal("2Gi")), []);
        let refused = errors(&with_wal("1Gi"));
        assert_eq!(paths(&refused), ["spec.walStorage.size"]);
        let message = &refused[0].message;
        assert!(
            message.contains("1GB from PostgreSQL's default"),
            "{message}"
        );
        assert!(message.contains("at least 1344Mi"), "{message}");
    }

    #[test]
    fn the_spec_s_max_wal_size_is_the_one_checked() {
        let mut spec = with_wal("2Gi");
        spec.postgresql
            .parameters
            .insert("max_wal_size".into(), "4GB".into());
        let refused = errors(&spec);
        assert_eq!(paths(&refused), ["spec.walStorage.size"]);
        assert!(
            refused[0]
                .message
                .contains("4GB from spec.postgresql.parameters.max_wal_size"),
            "{}",
            refused[0].message
        );
        spec.postgresql
            .parameters
            .insert("max_wal_size".into(), "512MB".into());
        assert_eq!(errors(&spec), []);
        spec.postgresql
            .parameters
            .insert("max_wal_size".into(), "lots".into());
        assert_eq!(
            paths(&errors(&spec)),
            ["spec.postgresql.parameters.max_wal_size"]
        );
    }

    #[test]
    fn a_size_that_does_not_parse_is_named() {
        assert_eq!(
            paths(&errors(&with_wal("two gigs"))),
            ["spec.walStorage.size"]
        );
    }

    #[test]
    fn the_size_rule_takes_any_max_wal_size() {
        assert_eq!(size_errors("11Gi", 8 << 30, "derived"), []);
        let refused = size_errors("11Gi", 9 << 30, "derived");
        assert!(refused[0].message.contains("9GB from derived"));
    }

    #[test]
    fn adding_or_removing_the_wal_volume_is_refused_naming_it() {
        let without = sample_database().spec;
        let with = with_wal("2Gi");
        assert_eq!(paths(&update_errors(&without, &with)), ["spec.walStorage"]);
        assert_eq!(paths(&update_errors(&with, &without)), ["spec.walStorage"]);
        assert_eq!(update_errors(&with, &with), []);
        assert_eq!(update_errors(&without, &without), []);
    }

    #[test]
    fn the_wal_volume_may_grow_but_not_shrink_or_change_class() {
        let before = with_wal("2Gi");
        let grown = update_errors(&before, &with_wal("3Gi"));
        assert_eq!(grown, []);
        assert_eq!(
            paths(&update_errors(&before, &with_wal("1500Mi"))),
            ["spec.walStorage.size"]
        );
        let mut other_class = with_wal("2Gi");
        if let Some(wal) = &mut other_class.wal_storage {
            wal.storage_class_name = Some("fast".into());
        }
        assert_eq!(
            paths(&update_errors(&before, &other_class)),
            ["spec.walStorage.storageClassName"]
        );
    }
}
