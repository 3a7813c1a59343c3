//! What the instance managers need to take part in leader selection: the
//! Database's primary Lease, and a ServiceAccount whose Role allows exactly
//! `get` and `update` of that one Lease by name, nothing else. The Lease is
//! created empty; its spec belongs to the managers (the holder writes it).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};

use super::{labels, names, object_meta};
use crate::api::model::ValidatedDatabase;

pub fn primary_lease(db: &ValidatedDatabase) -> Lease {
    let name = db.name.clone();
    Lease {
        metadata: object_meta(db, names::primary_lease(&name), labels::common(&name)),
        spec: None,
    }
}

pub fn instance_account(db: &ValidatedDatabase) -> ServiceAccount {
    let name = db.name.clone();
    ServiceAccount {
        metadata: object_meta(db, names::instance_account(&name), labels::common(&name)),
        // The token is projected into the manager's container alone.
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    }
}

pub fn instance_role(db: &ValidatedDatabase) -> Role {
    let name = db.name.clone();
    Role {
        metadata: object_meta(db, names::instance_account(&name), labels::common(&name)),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".to_owned()]),
            resources: Some(vec!["leases".to_owned()]),
            resource_names: Some(vec![names::primary_lease(&name)]),
            verbs: vec!["get".to_owned(), "update".to_owned()],
            ..PolicyRule::default()
        }]),
    }
}

pub fn instance_role_binding(db: &ValidatedDatabase) -> RoleBinding {
    let name = db.name.clone();
    let account = names::instance_account(&name);
    RoleBinding {
        metadata: object_meta(db, account.clone(), labels::common(&name)),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "Role".to_owned(),
            name: account.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: account,
            namespace: db.namespace.clone(),
            ..Subject::default()
        }]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::resources::tests::model;

    fn database(name: &str) -> ValidatedDatabase {
        let mut db = sample_database();
        db.metadata.name = Some(name.to_owned());
        model(&db)
    }

    #[test]
    fn the_role_allows_only_get_and_update_of_the_one_lease() {
        let db = database("orders");
        let role = instance_role(&db);
        let rules = role.rules.expect("rules");
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].resource_names.as_deref(),
            Some(&["orders-primary".to_owned()][..])
        );
        assert_eq!(rules[0].verbs, ["get", "update"]);
        let binding = instance_role_binding(&db);
        assert_eq!(binding.role_ref.name, "orders-instance");
        let subjects = binding.subjects.expect("subjects");
        assert_eq!(subjects[0].name, "orders-instance");
        assert!(primary_lease(&db).spec.is_none());
        assert_eq!(
            instance_account(&db).automount_service_account_token,
            Some(false)
        );
    }
}
