//! Names of the objects Tusk derives from a Database name.
//!
//! Database names are limited to [`crate::api::validate::MAX_NAME_LEN`] (50)
//! characters so that the longest derived name, `<db>-replication` (62) or
//! `<db>-<serial>` with a ten-digit serial (61), still fits in 63.

/// Instance `serial` of database `db`: its Pod, its PVC and its
/// `tusk.dev/instance` label value. Serials start at 1; a new instance takes the
/// serial after the highest one that still has a pod or a PVC, so a name never
/// stands for two sets of data at once.
pub fn instance_name(db: &str, serial: u32) -> String {
    format!("{db}-{serial}")
}

/// The serial of `instance` if it is an instance name of database `db`.
///
/// Only canonical names match (`orders-7`, not `orders-07` or `orders-0`), so a
/// serial parsed here always rebuilds the same name; and because the rest after
/// `<db>-` must be all digits, database `orders` does not claim the instances of
/// a database named `orders-1` (`orders-1-2`).
pub fn serial_of(db: &str, instance: &str) -> Option<u32> {
    let digits = instance.strip_prefix(db)?.strip_prefix('-')?;
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The PVC of an instance is named like the instance, so a pod that is recreated
/// finds its data by name.
pub fn pvc(instance: &str) -> String {
    instance.to_owned()
}

/// Service that reaches the primary (read-write).
pub fn rw_service(db: &str) -> String {
    format!("{db}-rw")
}

/// Service that reaches the replicas (read-only).
pub fn ro_service(db: &str) -> String {
    format!("{db}-ro")
}

/// Service that reaches any instance.
pub fn r_service(db: &str) -> String {
    format!("{db}-r")
}

/// Secret with the `postgres` superuser's credentials.
pub fn superuser_secret(db: &str) -> String {
    format!("{db}-superuser")
}

/// Secret with the application owner's credentials and connection details.
pub fn app_secret(db: &str) -> String {
    format!("{db}-app")
}

/// Secret with the streaming replication role's credentials.
pub fn replication_secret(db: &str) -> String {
    format!("{db}-replication")
}

/// PodDisruptionBudget protecting the primary.
/// The Secret holding the bearer token of the instance managers' mutating API.
pub fn instance_token_secret(db: &str) -> String {
    format!("{db}-token")
}

pub fn primary_pdb(db: &str) -> String {
    format!("{db}-primary")
}

/// PodDisruptionBudget limiting how many replicas a drain takes at once.
pub fn replicas_pdb(db: &str) -> String {
    format!("{db}-replicas")
}

/// Lease (coordination.k8s.io) held by the primary's instance manager.
pub fn primary_lease(db: &str) -> String {
    format!("{db}-primary")
}

/// The ServiceAccount, Role and RoleBinding of the instance managers.
pub fn instance_account(db: &str) -> String {
    format!("{db}-instance")
}

/// The Backup taken before a major upgrade from `from` to `to` stops anything.
pub fn upgrade_backup(db: &str, from: u32, to: u32) -> String {
    format!("{db}-upgrade-{from}-{to}-before")
}

/// The first Backup of the upgraded system (a new system identifier, so
/// the old base backups cannot be restored with its WAL).
pub fn upgraded_backup(db: &str, from: u32, to: u32) -> String {
    format!("{db}-upgrade-{from}-{to}-after")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names() {
        assert_eq!(instance_name("orders", 1), "orders-1");
        assert_eq!(instance_name("orders", 12), "orders-12");
        assert_eq!(pvc("orders-3"), "orders-3");
        assert_eq!(rw_service("orders"), "orders-rw");
        assert_eq!(ro_service("orders"), "orders-ro");
        assert_eq!(r_service("orders"), "orders-r");
        assert_eq!(superuser_secret("orders"), "orders-superuser");
        assert_eq!(app_secret("orders"), "orders-app");
        assert_eq!(replication_secret("orders"), "orders-replication");
        assert_eq!(primary_pdb("orders"), "orders-primary");
        assert_eq!(replicas_pdb("orders"), "orders-replicas");
        assert_eq!(primary_lease("orders"), "orders-primary");
    }

    #[test]
    fn serial_round_trips() {
        for serial in [1, 2, 9, 10, 4242, u32::MAX] {
            assert_eq!(
                serial_of("orders", &instance_name("orders", serial)),
                Some(serial)
            );
        }
    }

    #[test]
    fn serial_of_refuses_other_names() {
        for other in [
            "orders",
            "orders-",
            "orders-0",
            "orders-01",
            "orders-rw",
            "orders-1a",
            "orders-+1",
            "orders-1-2",
            "orders1",
            "other-1",
            "orders-99999999999",
        ] {
            assert_eq!(serial_of("orders", other), None, "{other}");
        }
        assert_eq!(serial_of("orders-1", "orders-1-2"), Some(2));
    }

    #[test]
    fn longest_names_fit_in_a_label() {
        let db = "d".repeat(crate::api::validate::MAX_NAME_LEN);
        for name in [
            instance_name(&db, u32::MAX),
            replication_secret(&db),
            superuser_secret(&db),
            replicas_pdb(&db),
        ] {
            assert!(name.len() <= 63, "{name} has {} characters", name.len());
        }
    }
}
