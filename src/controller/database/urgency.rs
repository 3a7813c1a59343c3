//! Which lane a Database's pass waits in ([`Lane`]): the failover lane when
//! its primary is in trouble or a failover or switchover is under way, so
//! that with hundreds of routine passes waiting (a thousand Databases being
//! created) a failover still starts at once.
//!
//! A pass cannot see what woke it, so the pod watch raises an [`Alarms`]
//! entry when a primary's pod goes, and the pass takes it before it
//! waits; the lease and the status speak for themselves.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::v1::Database;
use crate::contract::Role;
use crate::controller::lane::Lane;
use crate::resources::labels;

/// The lane of a pass over `db`: `lease_troubled` when its primary Lease
/// has stopped changing ([`crate::controller::leases::Leases::troubled`]),
/// `alarmed` when the pod watch saw its primary's pod go since its
/// last pass.
pub fn lane(db: &Database, lease_troubled: bool, alarmed: bool) -> Lane {
    let status = db.status.as_ref();
    let handing_over =
        status.is_some_and(|s| s.target_primary.is_some() && s.target_primary != s.current_primary);
    if lease_troubled || alarmed || handing_over {
        Lane::Failover
    } else {
        Lane::Routine
    }
}

/// Whether a pod, by its metadata as a watch delivered it (`deleted`: in a
/// delete event), is a primary's that is gone or going. Its metadata is all
/// the pod watch keeps: a primary whose container dies in place is noticed
/// by its lease ([`lane`]'s `lease_troubled`) instead.
pub fn primary_going(pod: &ObjectMeta, deleted: bool) -> bool {
    let primary = pod
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::ROLE))
        .and_then(|r| Role::parse(r))
        == Some(Role::Primary);
    primary && (deleted || pod.deletion_timestamp.is_some())
}

/// The Databases whose primary's pod the watch saw go, not yet
/// taken by a pass, by `namespace/name`.
#[derive(Debug, Default)]
pub struct Alarms(Mutex<HashSet<String>>);

impl Alarms {
    pub fn raise(&self, namespace: &str, database: &str) {
        self.lock().insert(format!("{namespace}/{database}"));
    }

    /// Whether one was raised for `database` in `namespace`, clearing it.
    pub fn take(&self, namespace: &str, database: &str) -> bool {
        self.lock().remove(&format!("{namespace}/{database}"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::arbitrary::sample_database;

    fn pod(role: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some("orders-1".into()),
            labels: Some([(labels::ROLE.to_owned(), role.to_owned())].into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_primary_deleted_or_being_deleted_is_going_and_nothing_else() {
        assert!(primary_going(&pod("primary"), true));
        let mut going = pod("primary");
        going.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(primary_going(&going, false));
        assert!(!primary_going(&pod("primary"), false));
        assert!(!primary_going(&pod("replica"), true));
        assert!(!primary_going(&ObjectMeta::default(), true));
    }

    #[test]
    fn a_failover_waits_in_its_own_lane_and_routine_work_does_not() {
        let mut db = sample_database();
        let status = db.status.get_or_insert_with(Default::default);
        status.current_primary = Some("orders-1".into());
        status.target_primary = Some("orders-1".into());
        assert_eq!(lane(&db, false, false), Lane::Routine);
        assert_eq!(lane(&db, true, false), Lane::Failover);
        assert_eq!(lane(&db, false, true), Lane::Failover);
        db.status.as_mut().unwrap().target_primary = Some("orders-2".into());
        assert_eq!(lane(&db, false, false), Lane::Failover);
    }

    #[test]
    fn an_alarm_is_taken_once() {
        let alarms = Alarms::default();
        alarms.raise("shop", "orders");
        assert!(alarms.take("shop", "orders"));
        assert!(!alarms.take("shop", "orders"));
        assert!(!alarms.take("shop", "billing"));
    }
}
