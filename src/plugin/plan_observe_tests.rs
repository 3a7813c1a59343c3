//! The reduction from API objects: the managers' answers made up from
//! `status.instances`, the Lease as read once, and which pods are outdated
//! under the new spec by the hash the operator wrote on them.

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use super::*;
use crate::api::status::InstanceRole;
use crate::contract::Bootstrap;
use crate::resources::PlannedInstance;

fn at(text: &str) -> Timestamp {
    text.parse().expect("a time")
}

fn reported(role: Option<InstanceRole>) -> InstanceStatus {
    InstanceStatus {
        name: "pg-2".into(),
        role,
        ready: true,
        lsn: Some("0/5000060".into()),
        version: Some("17.11".into()),
        timeline: Some(3),
        system_identifier: Some("744".into()),
        ..InstanceStatus::default()
    }
}

#[test]
fn a_manager_answer_is_made_from_what_the_status_last_showed() {
    let parameters = BTreeMap::from([("work_mem".to_owned(), "8MB".to_owned())]);
    let replica = manager_of(&reported(Some(InstanceRole::Replica)), &parameters).expect("answers");
    assert_eq!(replica.api_version, API_VERSION);
    assert_eq!(replica.postgres.major_minor(), Some((17, 11)));
    assert_eq!(replica.postgres.timeline, Some(3));
    assert_eq!(replica.postgres.received(), Some(Lsn(0x500_0060)));
    assert_eq!(replica.postgres.replayed(), Some(Lsn(0x500_0060)));
    assert_eq!(replica.postgres.streaming, Some(true));
    assert_eq!(replica.parameters, parameters);
    let primary = manager_of(&reported(Some(InstanceRole::Primary)), &parameters).expect("answers");
    assert_eq!(primary.postgres.current_lsn, Some(Lsn(0x500_0060)));
    assert_eq!(primary.postgres.received_lsn, None);
    assert!(
        manager_of(&reported(None), &parameters).is_none(),
        "no role: its manager did not answer"
    );
}

fn lease(holder: Option<&str>, renewed: &str) -> Lease {
    Lease {
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(at(renewed))),
            ..LeaseSpec::default()
        }),
        ..Lease::default()
    }
}

#[test]
fn the_lease_is_held_expired_released_or_unobserved() {
    let now = at("2026-11-26T12:00:20Z");
    assert_eq!(
        lease_state(Some(&lease(Some("pg-1"), "2026-11-26T12:00:10Z")), now),
        LeaseState::Held {
            holder: "pg-1".into(),
            remaining: std::time::Duration::from_secs(5)
        }
    );
    assert_eq!(
        lease_state(Some(&lease(Some("pg-1"), "2026-11-26T12:00:00Z")), now),
        LeaseState::Expired {
            holder: "pg-1".into(),
            overdue: std::time::Duration::from_secs(5)
        }
    );
    assert_eq!(
        lease_state(Some(&lease(None, "2026-11-26T12:00:10Z")), now),
        LeaseState::Released
    );
    assert_eq!(lease_state(None, now), LeaseState::Unobserved);
}

fn build() -> BuildConfig {
    BuildConfig {
        postgres_repository: "localhost/postgres".into(),
        tusk_image: "localhost/tusk:dev".into(),
        image_pull_policy: None,
        instance_env: Vec::new(),
        default_store: None,
        node_ports: Default::default(),
        instance_self_label: false,
    }
}

fn model(version: &str, memory: Option<&str>) -> ValidatedDatabase {
    let mut db = crate::api::arbitrary::sample_database();
    db.metadata.name = Some("pg".into());
    db.spec.version = version.into();
    if let Some(memory) = memory {
        db.spec.resources = Some(crate::api::resources::ResourcesSpec {
            requests: Some(crate::api::resources::ComputeResources {
                cpu: None,
                memory: Some(memory.into()),
            }),
            limits: None,
        });
    }
    crate::api::validate::validated(&db, &build().defaults()).expect("valid")
}

fn pod_of(model: &ValidatedDatabase, config: &BuildConfig) -> KubePod {
    resources::instance_pod(
        model,
        &PlannedInstance {
            serial: 2,
            role: InstanceRole::Replica,
            bootstrap: Bootstrap::Clone,
            image: &model.image,
        },
        config,
    )
}

#[test]
fn a_pod_is_outdated_when_the_new_spec_builds_it_otherwise() {
    let current = model("17.11", None);
    let pod = pod_of(&current, &build());
    assert!(!outdated(&current, &current, 2, &pod, &build(), false));
    assert!(outdated(
        &current,
        &model("17.12", None),
        2,
        &pod,
        &build(),
        false
    ));
    assert!(outdated(
        &current,
        &model("17.11", Some("1Gi")),
        2,
        &pod,
        &build(),
        false
    ));
    // Built for the new spec already: only the reduction's CPU verdict
    // rolls it.
    let new = model("17.12", None);
    let rebuilt = pod_of(&new, &build());
    assert!(!outdated(&current, &new, 2, &rebuilt, &build(), false));
    assert!(outdated(&current, &new, 2, &rebuilt, &build(), true));
}

#[test]
fn a_pod_built_with_other_operator_settings_is_taken_as_built_from_the_current_spec() {
    let operator = BuildConfig {
        instance_env: vec![("SOMETHING".into(), "unseen".into())],
        ..build()
    };
    let current = model("17.11", None);
    let pod = pod_of(&current, &operator);
    assert!(!outdated(&current, &current, 2, &pod, &build(), true));
    assert!(outdated(
        &current,
        &model("17.12", None),
        2,
        &pod,
        &build(),
        true
    ));
}
