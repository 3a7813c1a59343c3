//! Names of the objects Tusk derives from a Database name.
//!
//! Database names are limited to [`crate::api::validate::MAX_NAME_LEN`] (50)
//! characters so that the longest derived name, `<db>-replication` (62) or
//! `<db>-<serial>` with a ten-digit serial (61), still fits in 63. (A WAL
//! PVC, `<db>-<serial>-wal`, and an instance's TLS Secret,
//! `<db>-<serial>-tls`, may reach 65: neither is a label value, and PVC and
//! Secret names may have 253.)

/// Instance `serial` of database `db`: its Pod, its PVC and its
/// `tusk.dev/instance` label value. Serials start at 1; a new instance takes the
/// serial after the highest one that still has a pod or a PVC, so a name never
/// stands for two sets of data at once.
pub fn instance_name(db: &str, serial: u32) -> String {
    format!("{db}-{serial}")
}

/// The serial of an instance name (see [`crate::contract::serial_of`]).
pub use crate::contract::serial_of;

/// The PVC of an instance is named like the instance, so a pod that is recreated
/// finds its data by name.
pub fn pvc(instance: &str) -> String {
    instance.to_owned()
}

/// The WAL volume's PVC of an instance (`spec.walStorage`): the data PVC's
/// name with `-wal`. Not a label value, so the 63-character limit does not
/// apply (PVC names may have 253); it cannot be taken for another
/// instance's data PVC, whose names end in digits.
pub fn wal_pvc(instance: &str) -> String {
    format!("{instance}-wal")
}

/// Every PVC of an instance: its data PVC, then its WAL PVC when the
/// Database has a WAL volume. What is created with an instance, grown with
/// it, and deleted with it (and only with it).
pub fn instance_pvcs(instance: &str, wal_volume: bool) -> Vec<String> {
    let mut claims = vec![pvc(instance)];
    if wal_volume {
        claims.push(wal_pvc(instance));
    }
    claims
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

/// The operator-only Secret of Tusk's CA and the operator's client identity
/// (never mounted in a pod; see `resources::tls`).
pub fn ca_secret(db: &str) -> String {
    format!("{db}-ca")
}

/// The TLS Secret of `instance` (`<db>-<serial>-tls`), mounted in its pod.
/// Up to 65 characters: never a label value, and Secret names may have 253.
pub fn instance_tls_secret(instance: &str) -> String {
    format!("{instance}-tls")
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

/// The name of the Backup object a scheduled run at `at` creates:
/// `<database>-<yyyymmddhhmmss>` in UTC, so names sort by time and a rerun of
/// the same scheduled time finds the object already there.
pub fn backup_name(database: &str, at: jiff::Timestamp) -> String {
    format!("{database}-{}", at.strftime("%Y%m%d%H%M%S"))
}

/// The final Backup of Database `database` whose deletion was asked at `at`:
/// named for the deletion, so that a Database of the same name created later
/// gets its own.
pub fn final_backup(database: &str, at: jiff::Timestamp) -> String {
    backup_name(&format!("{database}-final"), at)
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
    fn at(text: &str) -> jiff::Timestamp {
        text.parse().expect("a timestamp")
    }

    #[test]
    fn backup_names_are_the_database_and_the_utc_time() {
        assert_eq!(
            backup_name("orders", at("2026-11-24T02:00:00Z")),
            "orders-20261124020000"
        );
        assert_eq!(
            backup_name("orders", at("2026-11-24T02:00:00.999+05:00")),
            "orders-20261123210000"
        );
        // The longest database name still gives a valid object name.
        let longest = format!("a{}z", "-9".repeat(30)) + "9";
        assert_eq!(longest.len(), 63);
        let name = backup_name(&longest, at("2099-12-31T23:59:59Z"));
        assert!(name.len() <= 253, "{}", name.len());
        assert!(is_dns_subdomain(&name), "{name}");
    }

    fn is_dns_subdomain(name: &str) -> bool {
        name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    }

    use super::*;

    #[test]
    fn derived_names() {
        assert_eq!(instance_name("orders", 1), "orders-1");
        assert_eq!(instance_name("orders", 12), "orders-12");
        assert_eq!(pvc("orders-3"), "orders-3");
        assert_eq!(wal_pvc("orders-3"), "orders-3-wal");
        assert_eq!(instance_pvcs("orders-3", false), ["orders-3"]);
        assert_eq!(
            instance_pvcs("orders-3", true),
            ["orders-3", "orders-3-wal"]
        );
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
    fn a_wal_pvc_is_never_an_instance_s_data_pvc() {
        for serial in [1, 2, 10, u32::MAX] {
            assert_eq!(
                serial_of("orders", &wal_pvc(&instance_name("orders", serial))),
                None
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
