//! What the instance managers need to take part in leader selection: the
//! Database's primary Lease, and a ServiceAccount whose Role allows exactly
//! `get` and `update` of that one Lease by name and, when the operator runs
//! with `--instance-self-label`, `patch` of the Database's instance pods by
//! name (a manager labels its own pod after a promotion; the chart's
//! ValidatingAdmissionPolicy confines it to that label of its own pod). The
//! Lease is created empty; its spec belongs to the managers (the holder
//! writes it).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};

use super::{BuildConfig, labels, names, object_meta};
use crate::api::model::ValidatedDatabase;

/// The pods the managers may label, by name: every instance up to the
/// highest serial in use or asked for (`serials`, `spec.instances`), so that
/// a replacement or a scale-up is covered once observed. `None` when the
/// operator does not let managers label themselves.
pub fn self_label_pods(
    db: &ValidatedDatabase,
    build: &BuildConfig,
    serials: impl IntoIterator<Item = u32>,
) -> Option<Vec<String>> {
    if !build.instance_self_label {
        return None;
    }
    let asked = u32::try_from(db.instances).unwrap_or(0);
    let highest = serials.into_iter().fold(asked, u32::max);
    Some(
        (1..=highest)
            .map(|serial| names::instance_name(&db.name, serial))
            .collect(),
    )
}

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

/// The managers' Role; `pods` from [`self_label_pods`].
pub fn instance_role(db: &ValidatedDatabase, pods: Option<&[String]>) -> Role {
    let name = db.name.clone();
    let mut rules = vec![PolicyRule {
        api_groups: Some(vec!["coordination.k8s.io".to_owned()]),
        resources: Some(vec!["leases".to_owned()]),
        resource_names: Some(vec![names::primary_lease(&name)]),
        // `watch` of this one lease (a watch whose field selector names
        // it): replicas learn of renewals without reading it every period.
        verbs: vec!["get".to_owned(), "update".to_owned(), "watch".to_owned()],
        ..PolicyRule::default()
    }];
    if let Some(pods) = pods.filter(|p| !p.is_empty()) {
        rules.push(self_label_rule(pods.to_vec()));
    }
    Role {
        metadata: object_meta(db, names::instance_account(&name), labels::common(&name)),
        rules: Some(rules),
    }
}

fn self_label_rule(pods: Vec<String>) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["pods".to_owned()]),
        resource_names: Some(pods),
        verbs: vec!["patch".to_owned()],
        ..PolicyRule::default()
    }
}

/// The pods a stored Role lets the managers patch (see [`self_label_pods`]),
/// `None` when it has no such rule.
pub fn role_self_label_pods(role: &Role) -> Option<Vec<String>> {
    role.rules
        .iter()
        .flatten()
        .find(|rule| rule.resources.as_deref() == Some(&["pods".to_owned()][..]))
        .map(|rule| rule.resource_names.clone().unwrap_or_default())
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
        let role = instance_role(&db, None);
        assert_eq!(role_self_label_pods(&role), None);
        let rules = role.rules.expect("rules");
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].resource_names.as_deref(),
            Some(&["orders-primary".to_owned()][..])
        );
        assert_eq!(rules[0].verbs, ["get", "update", "watch"]);
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

    #[test]
    fn with_self_labelling_the_role_lets_the_managers_patch_only_the_instance_pods() {
        let mut db = database("orders");
        db.instances = 3;
        let mut build = crate::resources::tests::config();
        assert_eq!(self_label_pods(&db, &build, [1, 2]), None);
        build.instance_self_label = true;
        // A replacement pod with a higher serial widens the set; spec.instances
        // covers a scale-up before its pods exist.
        let pods = self_label_pods(&db, &build, [1, 2, 5]).expect("pods");
        assert_eq!(
            pods,
            ["orders-1", "orders-2", "orders-3", "orders-4", "orders-5"]
        );
        assert_eq!(
            self_label_pods(&db, &build, []).expect("pods"),
            ["orders-1", "orders-2", "orders-3"]
        );
        let role = instance_role(&db, Some(&pods));
        let rules = role.rules.clone().expect("rules");
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[1].api_groups.as_deref(), Some(&[String::new()][..]));
        assert_eq!(rules[1].verbs, ["patch"]);
        assert_eq!(role_self_label_pods(&role), Some(pods));
    }
}
