//! Labels on everything Tusk creates, and the selectors built from them.
//!
//! The selectors lean on `app.kubernetes.io/component=database` as well as
//! `tusk.dev/database`, so pods that other Tusk work may later start for the same
//! database (backup or upgrade Jobs, with another component) never receive client
//! traffic or count towards a disruption budget.

use std::collections::BTreeMap;

use crate::api::status::InstanceRole;

pub const NAME: &str = "app.kubernetes.io/name";
pub const INSTANCE: &str = "app.kubernetes.io/instance";
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const COMPONENT: &str = "app.kubernetes.io/component";
/// The Database an object belongs to; the label to find orphans by.
pub const DATABASE: &str = "tusk.dev/database";
/// The instance (Pod and PVC) an object belongs to.
pub const TUSK_INSTANCE: &str = "tusk.dev/instance";
/// `primary` or `replica`, on instance Pods only. The operator moves it on
/// switchover and failover; the Services and PDBs follow it.
pub const ROLE: &str = crate::contract::ROLE_LABEL;
/// On the Services of `spec.expose`: the target they route to (`rw`, `ro`,
/// `r`). With [`DATABASE`], how the controller finds those to remove.
pub const EXPOSED: &str = "tusk.dev/exposed";

pub const NAME_VALUE: &str = "postgresql";
pub const MANAGED_BY_VALUE: &str = "tusk";
pub const COMPONENT_VALUE: &str = "database";

/// Value of the [`ROLE`] label for `role`.
pub fn role_value(role: InstanceRole) -> &'static str {
    match role {
        InstanceRole::Primary => "primary",
        InstanceRole::Replica => "replica",
    }
}

/// Labels on every object of database `db`.
pub fn common(db: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME.to_owned(), NAME_VALUE.to_owned()),
        (INSTANCE.to_owned(), db.to_owned()),
        (MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (COMPONENT.to_owned(), COMPONENT_VALUE.to_owned()),
        (DATABASE.to_owned(), db.to_owned()),
    ])
}

/// Labels on the PVC of `instance` (no role: a volume keeps its data whatever
/// the role of the pod that mounts it).
pub fn instance(db: &str, instance: &str) -> BTreeMap<String, String> {
    let mut labels = common(db);
    labels.insert(TUSK_INSTANCE.to_owned(), instance.to_owned());
    labels
}

/// Labels on the Pod of `instance` when it is created with `role`.
pub fn pod(db: &str, instance_name: &str, role: InstanceRole) -> BTreeMap<String, String> {
    let mut labels = instance(db, instance_name);
    labels.insert(ROLE.to_owned(), role_value(role).to_owned());
    labels
}

/// Selects every instance Pod of `db` (Service `<db>-r`, anti-affinity).
pub fn any_instance_selector(db: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (DATABASE.to_owned(), db.to_owned()),
        (COMPONENT.to_owned(), COMPONENT_VALUE.to_owned()),
    ])
}

/// Selects the instance Pods of `db` that have `role`.
pub fn role_selector(db: &str, role: InstanceRole) -> BTreeMap<String, String> {
    let mut selector = any_instance_selector(db);
    selector.insert(ROLE.to_owned(), role_value(role).to_owned());
    selector
}

/// Selector of Service `<db>-rw`: the primary.
pub fn rw_selector(db: &str) -> BTreeMap<String, String> {
    role_selector(db, InstanceRole::Primary)
}

/// Selector of Service `<db>-ro`: the replicas.
pub fn ro_selector(db: &str) -> BTreeMap<String, String> {
    role_selector(db, InstanceRole::Replica)
}

/// Selector of Service `<db>-r`: every instance.
pub fn r_selector(db: &str) -> BTreeMap<String, String> {
    any_instance_selector(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
        selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    }

    #[test]
    fn common_labels() {
        let labels = common("orders");
        assert_eq!(labels[NAME], "postgresql");
        assert_eq!(labels[INSTANCE], "orders");
        assert_eq!(labels[MANAGED_BY], "tusk");
        assert_eq!(labels[COMPONENT], "database");
        assert_eq!(labels[DATABASE], "orders");
        assert_eq!(labels.len(), 5);
    }

    #[test]
    fn role_only_on_pods() {
        let pvc = instance("orders", "orders-1");
        assert_eq!(pvc[TUSK_INSTANCE], "orders-1");
        assert!(!pvc.contains_key(ROLE));
        let pod = pod("orders", "orders-1", InstanceRole::Replica);
        assert_eq!(pod[ROLE], "replica");
        assert_eq!(pod[TUSK_INSTANCE], "orders-1");
    }

    #[test]
    fn selectors_pick_the_right_pods() {
        let primary = pod("orders", "orders-1", InstanceRole::Primary);
        let replica = pod("orders", "orders-2", InstanceRole::Replica);
        let other_db = pod("orders-x", "orders-x-1", InstanceRole::Primary);
        let mut job = common("orders");
        job.insert(COMPONENT.to_owned(), "backup".to_owned());

        assert!(matches(&rw_selector("orders"), &primary));
        assert!(!matches(&rw_selector("orders"), &replica));
        assert!(matches(&ro_selector("orders"), &replica));
        assert!(!matches(&ro_selector("orders"), &primary));
        assert!(matches(&r_selector("orders"), &primary));
        assert!(matches(&r_selector("orders"), &replica));
        for selector in [
            rw_selector("orders"),
            ro_selector("orders"),
            r_selector("orders"),
        ] {
            assert!(!matches(&selector, &other_db));
            assert!(!matches(&selector, &job));
        }
    }
}
