//! The TLS planner: table tests of each decision, and a simulation of a
//! Database's TLS world (the operator applying any prefix of its plan, each
//! instance loading its Secret whenever it likes, time passing, restarts)
//! checking the safety properties after every step and that every rotation
//! ends in `Stable` with only the new CA once the instances keep up.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;

use super::*;
use crate::lifecycle::action::Action;
use crate::lifecycle::tls_pass::{for_pass, hold_pods, hold_unserved};

const DAY: i64 = 86_400;

fn t0() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn days(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n * DAY)
}

fn settings() -> Settings {
    Settings {
        lifetime: days(7),
        renew_before: SignedDuration::from_secs(7 * DAY / 3),
        ca_renew_before: days(90),
        rotate_ca: None,
        user_server: None,
        cert_manager: None,
        leftover_certificate: None,
    }
}

fn names(instance: &str) -> Vec<String> {
    vec!["orders-rw".to_owned(), instance.to_owned()]
}

/// The TLS world of one Database: what the Secrets hold, what each instance
/// has loaded, and a registry of every CA ever made.
#[derive(Clone, Debug)]
struct World {
    now: Timestamp,
    cas: BTreeMap<String, Ca>,
    /// Managed mode: `<db>-ca`.
    current: Option<String>,
    next: Option<String>,
    rotation: Option<String>,
    /// User mode: the user's CA.
    user: Option<String>,
    operator: Option<Leaf>,
    secrets: BTreeMap<String, HeldSecret>,
    /// Instances about to be created: no Secret yet.
    pending: BTreeSet<String>,
    /// What each started instance has loaded (the whole Secret, atomically).
    loaded: BTreeMap<String, HeldSecret>,
    settings: Settings,
    recorded: Stage,
    /// `<db>-ca` was lost: the operator's identity comes from a CA the
    /// instances do not trust yet (it cannot talk to them either way).
    lost: bool,
    serials: u64,
    ca_lifetime: SignedDuration,
    /// `spec.tls.clientCertificates`.
    app_wanted: bool,
    /// `<db>-app`'s certificate.
    app: Option<Leaf>,
    /// Writes of `<db>-app` fail (the apply errs before it, every time).
    app_writes_fail: bool,
}

impl World {
    fn new(user: bool) -> Self {
        let mut world = World {
            now: t0(),
            cas: BTreeMap::new(),
            current: None,
            next: None,
            rotation: None,
            user: None,
            operator: None,
            secrets: BTreeMap::new(),
            pending: BTreeSet::new(),
            loaded: BTreeMap::new(),
            settings: settings(),
            recorded: Stage::Stable,
            lost: false,
            serials: 0,
            ca_lifetime: days(3650),
            app_wanted: false,
            app: None,
            app_writes_fail: false,
        };
        if user {
            let ca = world.make_ca();
            world.user = Some(ca);
        }
        world
    }

    fn make_ca(&mut self) -> String {
        self.serials += 1;
        let fp = format!("ca{}", self.serials);
        self.cas.insert(
            fp.clone(),
            Ca {
                fingerprint: fp.clone(),
                not_before: self.now,
                not_after: self.now + self.ca_lifetime,
            },
        );
        fp
    }

    fn issue(&mut self, issuer: &str, names: Vec<String>) -> Leaf {
        self.serials += 1;
        let end = self.now + self.settings.lifetime;
        let ca_end = self.cas.get(issuer).map_or(end, |c| c.not_after);
        Leaf {
            serial: format!("{:x}", self.serials),
            issuer: Some(issuer.to_owned()),
            not_before: self.now,
            not_after: end.min(ca_end),
            names,
        }
    }

    fn known(&self) -> BTreeMap<String, Ca> {
        let mut fps: BTreeSet<String> = [&self.current, &self.next, &self.user]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        for secret in self.secrets.values() {
            fps.extend(secret.trusted.iter().cloned());
            fps.extend(secret.client_trusted.iter().cloned());
        }
        fps.into_iter()
            .filter_map(|fp| self.cas.get(&fp).map(|c| (fp, c.clone())))
            .collect()
    }

    fn observe(&self) -> TlsObserved {
        let known = self.known();
        let seen = |leaf: &Option<Leaf>| {
            leaf.clone().map(|mut l| {
                l.issuer = l.issuer.filter(|fp| known.contains_key(fp));
                l
            })
        };
        let mut instances: BTreeMap<String, InstanceTls> = BTreeMap::new();
        for (name, secret) in &self.secrets {
            let held = HeldSecret {
                server: seen(&secret.server),
                api: seen(&secret.api),
                replication: seen(&secret.replication),
                ..secret.clone()
            };
            instances.insert(
                name.clone(),
                InstanceTls {
                    secret: Some(held),
                    serving: false,
                    report: None,
                    probe: Probe::NotProbed,
                },
            );
        }
        for name in self.pending.iter().chain(self.loaded.keys()) {
            instances.entry(name.clone()).or_default();
        }
        for (name, loaded) in &self.loaded {
            if let Some(instance) = instances.get_mut(name) {
                instance.serving = true;
                instance.report = Some(report(loaded));
            }
        }
        let authority = match &self.user {
            Some(fp) => Authority::User {
                secret: "orders-user-ca".into(),
                ca: self.cas.get(fp).cloned().ok_or_else(|| Unusable {
                    missing: true,
                    message: "no CA".into(),
                }),
            },
            None => Authority::Managed {
                current: self
                    .current
                    .as_ref()
                    .and_then(|fp| self.cas.get(fp))
                    .cloned(),
                next: self.next.as_ref().and_then(|fp| self.cas.get(fp)).cloned(),
                rotation: self.rotation.clone(),
            },
        };
        let mut observed = TlsObserved {
            authority,
            operator: seen(&self.operator),
            app: AppCert {
                secret: "orders-app".into(),
                wanted: self.app_wanted,
                leaf: seen(&self.app),
                held: self.app.is_some(),
            },
            known,
            instances,
            service_names: vec!["orders-rw".into()],
            settings: self.settings.clone(),
            recorded: self.recorded,
            now: self.now,
        };
        if wants_probe(&observed) {
            for (name, loaded) in &self.loaded {
                if let (Some(instance), Some(server)) =
                    (observed.instances.get_mut(name), &loaded.server)
                {
                    instance.probe = Probe::Presented(server.serial.clone());
                }
            }
        }
        observed
    }

    fn resolve(&self, ca: &CaRef, created: Option<&String>) -> Option<String> {
        match ca {
            CaRef::Known(fp) => Some(fp.clone()),
            CaRef::Created => created.cloned(),
        }
    }

    /// One operator pass that applies the first `prefix` actions of its plan
    /// (the rest failed, or the operator stopped), then writes the status.
    fn pass(&mut self, prefix: usize) -> TlsPlan {
        let plan = plan(&self.observe());
        let mut created = None;
        for action in plan.actions.iter().take(prefix) {
            match action {
                TlsAction::CreateCa { rotation } => {
                    let fp = self.make_ca();
                    self.current = Some(fp.clone());
                    self.next = None;
                    self.rotation = rotation.clone();
                    self.operator = Some(self.issue(&fp, vec!["tusk-operator".into()]));
                    created = Some(fp);
                }
                TlsAction::CreateNextCa { rotation } => {
                    self.next = Some(self.make_ca());
                    self.rotation = rotation.clone();
                }
                TlsAction::IssueOperator { issuer } => {
                    let Some(fp) = self.resolve(issuer, created.as_ref()) else {
                        panic!("operator issued from an unknown CA: {action:?}");
                    };
                    self.operator = Some(self.issue(&fp, vec!["tusk-operator".into()]));
                }
                // cert-manager is not part of this world.
                TlsAction::ApplyCertificate | TlsAction::DeleteCertificate { .. } => {}
                TlsAction::PromoteNext => {
                    assert!(self.next.is_some(), "promoted without a next CA");
                    self.current = self.next.take();
                }
                TlsAction::WriteApp { .. } if self.app_writes_fail => {}
                TlsAction::WriteApp { issuer: None } => self.app = None,
                TlsAction::WriteApp {
                    issuer: Some(issuer),
                } => {
                    let Some(fp) = self.resolve(issuer, created.as_ref()) else {
                        panic!("the app's certificate from an unknown CA: {action:?}");
                    };
                    self.app = Some(self.issue(&fp, vec![]));
                }
                TlsAction::WriteInstance {
                    instance,
                    trust,
                    issue,
                    issuer,
                } => {
                    let bundle: BTreeSet<String> = trust
                        .iter()
                        .filter_map(|c| self.resolve(c, created.as_ref()))
                        .collect();
                    let mut secret = self.secrets.get(instance).cloned().unwrap_or_default();
                    secret.trusted = bundle.clone();
                    secret.client_trusted = bundle;
                    if !issue.is_empty() {
                        let Some(fp) = issuer
                            .as_ref()
                            .and_then(|i| self.resolve(i, created.as_ref()))
                        else {
                            panic!("leaves to issue without an issuer: {action:?}");
                        };
                        for kind in issue {
                            let leaf = match kind {
                                LeafKind::Server => self.issue(&fp, names(instance)),
                                LeafKind::Api => self.issue(&fp, vec![instance.clone()]),
                                LeafKind::Replication => self.issue(&fp, vec![]),
                            };
                            match kind {
                                LeafKind::Server => secret.server = Some(leaf),
                                LeafKind::Api => secret.api = Some(leaf),
                                LeafKind::Replication => secret.replication = Some(leaf),
                            }
                        }
                    }
                    self.secrets.insert(instance.clone(), secret);
                    self.pending.remove(instance);
                }
            }
        }
        self.recorded = plan.stage;
        plan
    }

    /// Instance `name` loads its Secret (the kubelet swapped the volume and
    /// the manager reloaded); a new instance's pod starts once the Secret
    /// is complete.
    fn load(&mut self, name: &str) {
        if let Some(secret) = self.secrets.get(name)
            && secret.server.is_some()
            && secret.api.is_some()
            && secret.replication.is_some()
        {
            self.loaded.insert(name.to_owned(), secret.clone());
        }
    }

    fn add_instance(&mut self) {
        let name = format!("orders-{}", self.secrets.len() + self.pending.len() + 1);
        self.pending.insert(name);
    }

    /// Every presented leaf is verified by every serving peer's loaded
    /// bundles, and no held leaf is older than its issuer.
    fn check(&self) -> Result<(), String> {
        for (name, loaded) in &self.loaded {
            for (peer, peer_loaded) in &self.loaded {
                let checks = [
                    (&peer_loaded.server, &loaded.trusted, "server"),
                    (&peer_loaded.api, &loaded.client_trusted, "api"),
                    (
                        &peer_loaded.replication,
                        &loaded.client_trusted,
                        "replication",
                    ),
                ];
                for (leaf, bundle, what) in checks {
                    let issuer = leaf
                        .as_ref()
                        .and_then(|l| l.issuer.clone())
                        .unwrap_or_default();
                    if !bundle.contains(&issuer) {
                        return Err(format!(
                            "{name} trusts only {bundle:?} but {peer} presents a {what} leaf of {issuer}"
                        ));
                    }
                }
            }
            if let Some(op) = self.operator.as_ref().and_then(|l| l.issuer.clone())
                && !self.lost
                && !loaded.client_trusted.contains(&op)
            {
                return Err(format!(
                    "{name} does not trust the operator's identity from {op}"
                ));
            }
        }
        // Applications present the role's certificate to every instance.
        if let Some(issuer) = self.app.as_ref().and_then(|l| l.issuer.clone())
            && self.app_wanted
        {
            for (name, loaded) in &self.loaded {
                if !loaded.client_trusted.contains(&issuer) {
                    return Err(format!(
                        "{name} trusts only {:?} but the app's certificate is of {issuer}",
                        loaded.client_trusted
                    ));
                }
            }
        }
        let app = self.app.iter().map(|l| ("orders-app".to_owned(), l));
        let held = self.secrets.iter().flat_map(|(name, secret)| {
            LeafKind::ALL
                .iter()
                .filter_map(|k| secret.leaf(*k))
                .map(move |l| (name.clone(), l))
        });
        for (name, leaf) in held.chain(app) {
            let Some(ca) = leaf.issuer.as_ref().and_then(|fp| self.cas.get(fp)) else {
                continue;
            };
            if leaf.not_before < ca.not_before {
                return Err(format!(
                    "{name} holds leaf {} older than its CA",
                    leaf.serial
                ));
            }
        }
        Ok(())
    }

    /// What the world should be at rest: one CA in use everywhere.
    fn settled(&self) -> Result<(), String> {
        let target = self
            .user
            .clone()
            .or_else(|| self.current.clone())
            .unwrap_or_default();
        if self.next.is_some() {
            return Err("a next CA is left".into());
        }
        let only: BTreeSet<String> = [target.clone()].into();
        for (name, secret) in &self.secrets {
            if secret.trusted != only || secret.client_trusted != only {
                return Err(format!(
                    "{name}'s Secret trusts {:?}, not only {target}",
                    secret.trusted
                ));
            }
            for leaf in LeafKind::ALL.iter().filter_map(|k| secret.leaf(*k)) {
                if leaf.issuer.as_deref() != Some(target.as_str()) {
                    return Err(format!("{name} holds a leaf of {:?}", leaf.issuer));
                }
            }
        }
        for (name, loaded) in &self.loaded {
            if loaded.trusted != only {
                return Err(format!("{name} has loaded {:?}", loaded.trusted));
            }
        }
        match (&self.app, self.app_wanted) {
            (None, false) => {}
            (Some(leaf), true) if leaf.issuer.as_deref() == Some(target.as_str()) => {}
            (app, wanted) => {
                return Err(format!(
                    "the app's certificate is {app:?} (wanted: {wanted}), not one of {target}"
                ));
            }
        }
        if self.recorded != Stage::Stable {
            return Err(format!("stage {:?}", self.recorded));
        }
        Ok(())
    }
}

fn report(loaded: &HeldSecret) -> TlsReport {
    TlsReport {
        server_serial: loaded
            .server
            .as_ref()
            .map(|l| l.serial.clone())
            .unwrap_or_default(),
        api_serial: loaded
            .api
            .as_ref()
            .map(|l| l.serial.clone())
            .unwrap_or_default(),
        trusted: loaded.trusted.iter().cloned().collect(),
        client_trusted: loaded.client_trusted.iter().cloned().collect(),
        error: None,
    }
}

/// A Database of `n` instances at rest on one CA.
fn stable(n: usize, user: bool) -> World {
    let mut world = World::new(user);
    for _ in 0..n {
        world.add_instance();
    }
    settle(&mut world);
    world
}

/// [`stable`] with `spec.tls.clientCertificates`.
fn stable_app(n: usize, user: bool) -> World {
    let mut world = World::new(user);
    world.app_wanted = true;
    for _ in 0..n {
        world.add_instance();
    }
    settle(&mut world);
    world
}

/// Fair rounds: a full pass, then every instance loads.
fn settle(world: &mut World) {
    for _ in 0..12 {
        world.pass(usize::MAX);
        let names: Vec<String> = world.secrets.keys().cloned().collect();
        for name in names {
            world.load(&name);
        }
    }
}

// ---------------------------------------------------------------- tables

fn count(plan: &TlsPlan, f: impl Fn(&TlsAction) -> bool) -> usize {
    plan.actions.iter().filter(|a| f(a)).count()
}

#[test]
fn a_new_database_gets_a_ca_then_every_secret_from_it() {
    let mut world = World::new(false);
    world.add_instance();
    world.add_instance();
    let first = world.pass(usize::MAX);
    assert_eq!(first.actions, vec![TlsAction::CreateCa { rotation: None }]);
    let ca = CaRef::Known(world.current.clone().unwrap_or_default());
    let plan = plan(&world.observe());
    assert_eq!(
        plan.actions[0],
        TlsAction::WriteInstance {
            instance: "orders-1".into(),
            trust: vec![ca.clone()],
            issue: LeafKind::ALL.to_vec(),
            issuer: Some(ca),
        },
        "{plan:#?}"
    );
    assert_eq!(count(&plan, |a| a.instance().is_some()), 2);
    assert_eq!(
        plan.actions.len(),
        2,
        "the operator's identity came with the CA"
    );
    assert_eq!(plan.stage, Stage::Stable);
}

#[test]
fn at_rest_nothing_is_done_and_the_next_look_is_when_a_renewal_falls_due() {
    let world = stable(3, false);
    world.settled().unwrap();
    let plan = plan(&world.observe());
    assert_eq!(plan.actions, vec![]);
    assert!(plan.certificates.status);
    assert_eq!(plan.certificates.reason, "InEffect");
    assert!(plan.verdicts.is_empty(), "{:?}", plan.verdicts);
    let due = (7 * DAY - 7 * DAY / 3) as u64;
    assert!(
        plan.requeue_seconds
            .is_some_and(|s| s <= due && s > due - 3600),
        "{:?}",
        plan.requeue_seconds
    );
    assert!(!wants_probe(&world.observe()), "no handshakes at rest");
}

#[test]
fn a_leaf_within_renew_before_is_renewed_from_the_current_ca_alone() {
    let mut world = stable(2, false);
    world.now += days(5);
    let ca = world.current.clone().unwrap_or_default();
    let plan = plan(&world.observe());
    let writes: Vec<&TlsAction> = plan
        .actions
        .iter()
        .filter(|a| a.instance().is_some())
        .collect();
    assert_eq!(writes.len(), 2, "{plan:#?}");
    assert_eq!(
        writes[0],
        &TlsAction::WriteInstance {
            instance: "orders-1".into(),
            trust: vec![CaRef::Known(ca.clone())],
            issue: LeafKind::ALL.to_vec(),
            issuer: Some(CaRef::Known(ca)),
        }
    );
    assert_eq!(plan.stage, Stage::Stable);
    assert_eq!(plan.certificates.reason, "Rotating");
    assert!(
        plan.verdicts.is_empty(),
        "renewal is not a spec change: {:?}",
        plan.verdicts
    );
}

#[test]
fn changed_names_reissue_the_server_certificate_only() {
    let world = stable(2, false);
    let mut observed = world.observe();
    observed.service_names.push("db.example.com".into());
    let plan = plan(&observed);
    let ca = CaRef::Known(world.current.clone().unwrap_or_default());
    let writes: Vec<TlsAction> = ["orders-1", "orders-2"]
        .into_iter()
        .map(|name| TlsAction::WriteInstance {
            instance: name.into(),
            trust: vec![ca.clone()],
            issue: vec![LeafKind::Server],
            issuer: Some(ca.clone()),
        })
        .collect();
    assert_eq!(plan.actions, writes);
}

#[test]
fn a_published_address_is_required_and_one_no_longer_published_is_tolerated() {
    let world = stable(1, false);
    let server_leaf = |observed: &mut TlsObserved| {
        observed
            .instances
            .get_mut("orders-1")
            .and_then(|i| i.secret.as_mut())
            .and_then(|s| s.server.as_mut())
            .map(|leaf| &mut leaf.names)
            .expect("a server leaf")
            .clone()
    };
    let reissues = |observed: &TlsObserved| {
        matches!(&plan(observed).actions[..],
            [TlsAction::WriteInstance { issue, .. }] if issue == &[LeafKind::Server])
    };
    // An address to publish that the leaf lacks: reissued.
    let mut observed = world.observe();
    observed.service_names.push("192.0.2.64".into());
    assert!(reissues(&observed), "{:#?}", plan(&observed));
    // The leaf carries it, written another way (`0::1` is `::1`): kept.
    let mut observed = world.observe();
    observed.service_names.push("::1".into());
    let mut names = server_leaf(&mut observed);
    names.push("0::1".into());
    set_server_names(&mut observed, names);
    assert_eq!(plan(&observed).actions, vec![]);
    // An address no longer published stays until the next reissue...
    let mut observed = world.observe();
    let mut names = server_leaf(&mut observed);
    names.push("192.0.2.99".into());
    set_server_names(&mut observed, names);
    assert_eq!(plan(&observed).actions, vec![]);
    // ...but a DNS name no longer wanted is not carried on.
    let mut observed = world.observe();
    let mut names = server_leaf(&mut observed);
    names.push("old.example.com".into());
    set_server_names(&mut observed, names);
    assert!(reissues(&observed), "{:#?}", plan(&observed));
}

fn set_server_names(observed: &mut TlsObserved, names: Vec<String>) {
    if let Some(leaf) = observed
        .instances
        .get_mut("orders-1")
        .and_then(|i| i.secret.as_mut())
        .and_then(|s| s.server.as_mut())
    {
        leaf.names = names;
    }
}

#[test]
fn a_leaf_older_than_its_ca_is_reissued() {
    let world = stable(1, false);
    let mut observed = world.observe();
    if let Some(leaf) = observed
        .instances
        .get_mut("orders-1")
        .and_then(|i| i.secret.as_mut())
        .and_then(|s| s.api.as_mut())
    {
        leaf.not_before = t0() - days(1);
    }
    let plan = plan(&observed);
    assert!(
        matches!(&plan.actions[..], [TlsAction::WriteInstance { issue, .. }] if issue == &[LeafKind::Api]),
        "{plan:#?}"
    );
}

#[test]
fn a_new_instance_gets_its_secret_from_the_current_ca() {
    let mut world = stable(2, false);
    world.add_instance();
    let plan = plan(&world.observe());
    let ca = CaRef::Known(world.current.clone().unwrap_or_default());
    assert_eq!(
        plan.actions,
        vec![TlsAction::WriteInstance {
            instance: "orders-3".into(),
            trust: vec![ca.clone()],
            issue: LeafKind::ALL.to_vec(),
            issuer: Some(ca),
        }]
    );
}

#[test]
fn a_rotation_goes_through_every_stage_each_waiting_for_every_instance() {
    let mut world = stable(2, false);
    let old = world.current.clone().unwrap_or_default();
    world.settings.rotate_ca = Some("2026-11".into());

    let plan = world.pass(usize::MAX);
    assert_eq!(
        plan.actions,
        vec![TlsAction::CreateNextCa {
            rotation: Some("2026-11".into())
        }]
    );
    assert_eq!(plan.stage, Stage::TrustingBoth);
    assert!(matches!(
        plan.verdicts[..],
        [Verdict::Progress {
            reason: "RotatingCA",
            ..
        }]
    ));
    let new = world.next.clone().unwrap_or_default();

    // Bundles of both, no leaf yet.
    let plan = world.pass(usize::MAX);
    assert_eq!(plan.stage, Stage::TrustingBoth);
    assert_eq!(
        count(
            &plan,
            |a| matches!(a, TlsAction::WriteInstance { issue, .. } if issue.is_empty())
        ),
        2
    );
    assert!(
        world
            .secrets
            .values()
            .all(|s| s.trusted == [old.clone(), new.clone()].into())
    );
    // One instance loads: still waiting for the other.
    world.load("orders-1");
    let plan = world.pass(usize::MAX);
    assert_eq!(plan.stage, Stage::TrustingBoth);
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert!(
        plan.certificates
            .message
            .contains("orders-2 (Secret orders-2-tls)"),
        "{}",
        plan.certificates.message
    );
    world.load("orders-2");

    // Everyone trusts both: leaves and the operator from the new CA.
    let plan = world.pass(usize::MAX);
    assert_eq!(plan.stage, Stage::Reissuing);
    assert_eq!(
        plan.actions[0],
        TlsAction::IssueOperator {
            issuer: CaRef::Known(new.clone())
        }
    );
    assert_eq!(
        count(
            &plan,
            |a| matches!(a, TlsAction::WriteInstance { issue, .. } if issue.len() == 3)
        ),
        2
    );
    world.load("orders-2");
    let plan = world.pass(usize::MAX);
    assert_eq!(
        plan.stage,
        Stage::Reissuing,
        "orders-1 still presents the old leaf"
    );
    assert!(plan.actions.is_empty());
    world.load("orders-1");

    // Every instance presents a new leaf: promote, bundles of the new CA only.
    let plan = world.pass(usize::MAX);
    assert_eq!(plan.stage, Stage::DroppingOld);
    assert_eq!(plan.actions[0], TlsAction::PromoteNext);
    assert_eq!(
        count(
            &plan,
            |a| matches!(a, TlsAction::WriteInstance { trust, .. } if trust == &[CaRef::Known(new.clone())])
        ),
        2
    );
    world.load("orders-1");
    let plan = world.pass(usize::MAX);
    assert_eq!(
        plan.stage,
        Stage::DroppingOld,
        "orders-2 still loaded the old CA"
    );
    world.load("orders-2");
    let plan = world.pass(usize::MAX);
    assert_eq!(plan.stage, Stage::Stable);
    assert!(plan.actions.is_empty());
    world.settled().unwrap();
    assert_eq!(world.current, Some(new));
    assert_eq!(world.rotation.as_deref(), Some("2026-11"), "answered once");
}

#[test]
fn a_leaf_is_not_moved_to_the_new_ca_on_the_word_of_a_report_without_a_handshake() {
    let mut world = stable(1, false);
    world.settings.rotate_ca = Some("x".into());
    for _ in 0..3 {
        world.pass(usize::MAX);
        world.load("orders-1");
    }
    assert_eq!(world.recorded, Stage::Reissuing);
    let mut observed = world.observe();
    if let Some(i) = observed.instances.get_mut("orders-1") {
        i.probe = Probe::Failed("connection refused".into());
    }
    let plan = plan(&observed);
    assert_eq!(plan.stage, Stage::Reissuing);
    assert!(!plan.actions.contains(&TlsAction::PromoteNext), "{plan:#?}");
}

#[test]
fn the_ca_renews_itself_within_ca_renew_before() {
    let mut world = stable(1, false);
    let end = world
        .cas
        .get(world.current.as_deref().unwrap_or_default())
        .map(|c| c.not_after);
    world.now = end.unwrap_or(t0()) - days(89);
    let plan = plan(&world.observe());
    assert_eq!(
        plan.actions[0],
        TlsAction::CreateNextCa { rotation: None },
        "{plan:#?}"
    );
}

#[test]
fn a_users_ca_is_never_rotated_and_its_end_is_a_condition() {
    let mut world = stable(2, true);
    world.settled().unwrap();
    world.settings.rotate_ca = Some("please".into());
    if let Some(ca) = world.cas.get_mut(world.user.as_deref().unwrap_or_default()) {
        ca.not_after = world.now + days(30);
    }
    let plan = plan(&world.observe());
    assert!(
        !plan.actions.iter().any(|a| matches!(
            a,
            TlsAction::CreateCa { .. } | TlsAction::CreateNextCa { .. } | TlsAction::PromoteNext
        )),
        "{plan:#?}"
    );
    assert_eq!(plan.certificates.reason, "InEffect");
    assert!(
        plan.certificates
            .message
            .starts_with("spec.tls.ca.secretName: the CA in Secret orders-user-ca expires")
    );
}

#[test]
fn an_unusable_user_ca_blocks_naming_the_field_and_touches_nothing() {
    let world = stable(2, true);
    let mut observed = world.observe();
    observed.authority = Authority::User {
        secret: "orders-user-ca".into(),
        ca: Err(Unusable {
            missing: false,
            message: "Secret orders-user-ca: tls.crt is not a CA certificate".into(),
        }),
    };
    let plan = plan(&observed);
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert!(!plan.certificates.status);
    assert!(
        matches!(
            &plan.verdicts[..],
            [Verdict::Blocked { reason: "SecretInvalid", message }]
                if message == "spec.tls.ca.secretName: Secret orders-user-ca: tls.crt is not a CA certificate"
        ),
        "{:?}",
        plan.verdicts
    );
}

#[test]
fn expired_material_is_a_condition_never_silence() {
    let mut world = stable(1, false);
    world.now += days(8);
    let plan = plan(&world.observe());
    assert!(!plan.certificates.status);
    assert_eq!(plan.certificates.reason, "Expired");
    assert!(
        plan.certificates
            .message
            .contains("instance orders-1's server certificate expired")
    );
    assert!(plan.verdicts.iter().any(|v| matches!(
        v,
        Verdict::Degraded {
            reason: "CertificateExpired",
            ..
        }
    )));
    assert!(
        plan.actions
            .iter()
            .any(|a| matches!(a, TlsAction::WriteInstance { issue, .. } if issue.len() == 3)),
        "and renewed"
    );
}

#[test]
fn a_manager_that_refused_its_files_is_degraded_and_holds_the_step() {
    let world = stable(1, false);
    let mut observed = world.observe();
    if let Some(report) = observed
        .instances
        .get_mut("orders-1")
        .and_then(|i| i.report.as_mut())
    {
        report.error = Some("key does not match certificate".into());
    }
    let plan = plan(&observed);
    assert!(plan.verdicts.iter().any(|v| matches!(
        v,
        Verdict::Degraded { reason: "CertificateNotLoaded", message } if message.contains("orders-1-tls")
    )));
    assert!(wants_probe(&observed));
}

#[test]
fn a_users_server_certificate_is_copied_not_issued_and_its_end_named() {
    let mut world = stable(1, false);
    let leaf = Leaf {
        serial: "beef".into(),
        issuer: None,
        not_before: t0(),
        not_after: t0() + days(2),
        names: vec!["db.example.com".into()],
    };
    world.settings.user_server = Some(UserServer {
        secret: "orders-server".into(),
        leaf: Ok(leaf),
    });
    let plan = plan(&world.observe());
    assert!(
        matches!(
            &plan.actions[..],
            [TlsAction::WriteInstance { issue, .. }] if issue.is_empty()
        ),
        "{plan:#?}"
    );
    assert_eq!(plan.certificates.reason, "InEffect");
    assert!(
        plan.certificates
            .message
            .contains("spec.tls.server.secretName")
    );
}

#[test]
fn a_lost_ca_is_replaced_in_stages_without_breaking_trust() {
    let mut world = stable(2, false);
    // `<db>-ca` deleted: the instances still trust and present the old CA.
    world.current = None;
    world.operator = None;
    world.lost = true;
    let plan = world.pass(usize::MAX);
    assert!(matches!(plan.actions[0], TlsAction::CreateCa { .. }));
    world.check().unwrap();
    settle(&mut world);
    world.check().unwrap();
    world.settled().unwrap();
}

// ---------------------------------------------------------------- the application role's certificate

fn app_writes(plan: &TlsPlan) -> Vec<&TlsAction> {
    plan.actions
        .iter()
        .filter(|a| matches!(a, TlsAction::WriteApp { .. }))
        .collect()
}

#[test]
fn the_app_certificate_comes_after_the_instances_from_the_ca_they_trust() {
    let mut world = World::new(false);
    world.app_wanted = true;
    world.add_instance();
    world.add_instance();
    let first = world.pass(usize::MAX);
    assert_eq!(first.actions, vec![TlsAction::CreateCa { rotation: None }]);
    assert!(!first.certificates.status, "{:?}", first.certificates);
    assert!(
        first.certificates.message.contains("Secret orders-app"),
        "{:?}",
        first.certificates
    );
    let ca = CaRef::Known(world.current.clone().unwrap_or_default());
    let plan = plan(&world.observe());
    assert_eq!(
        plan.actions.last(),
        Some(&TlsAction::WriteApp {
            issuer: Some(ca.clone())
        }),
        "after the instances, whose writes put ca.crt into <db>-app: {plan:#?}"
    );
    assert_eq!(app_writes(&plan).len(), 1);
    settle(&mut world);
    world.settled().unwrap();
    let at_rest = super::plan(&world.observe());
    assert_eq!(at_rest.actions, vec![]);
    assert_eq!(at_rest.certificates.reason, "InEffect");
    let app = world.app.clone().unwrap_or_else(|| unreachable!());
    assert_eq!(app.issuer, world.current);
}

#[test]
fn the_app_certificate_is_renewed_like_a_leaf_and_its_end_is_watched() {
    let world = stable_app(2, false);
    let ca = CaRef::Known(world.current.clone().unwrap_or_default());
    // Only the application's certificate close to its end.
    let mut observed = world.observe();
    if let Some(leaf) = observed.app.leaf.as_mut() {
        leaf.not_after = world.now + days(3);
    }
    let plan_ = plan(&observed);
    assert_eq!(plan_.actions, vec![], "more than renewBefore is left");
    let due = (3 * DAY - 7 * DAY / 3) as u64;
    assert!(
        plan_.requeue_seconds.is_some_and(|s| s <= due),
        "the next look is when it falls due: {:?}",
        plan_.requeue_seconds
    );
    if let Some(leaf) = observed.app.leaf.as_mut() {
        leaf.not_after = world.now + days(1);
    }
    let plan_ = plan(&observed);
    assert_eq!(
        plan_.actions,
        vec![TlsAction::WriteApp {
            issuer: Some(ca.clone())
        }]
    );
    assert_eq!(plan_.certificates.reason, "Rotating");
    assert!(plan_.certificates.status, "a renewal is no outage");
    // A shortened lifetime, or a leaf older than its CA: issued anew.
    let mut longer = world.observe();
    longer.settings.lifetime = days(2);
    assert_eq!(app_writes(&plan(&longer)).len(), 1);
    let mut older = world.observe();
    if let Some(leaf) = older.app.leaf.as_mut() {
        leaf.not_before = t0() - days(1);
    }
    assert_eq!(
        plan(&older).actions,
        vec![TlsAction::WriteApp { issuer: Some(ca) }]
    );
}

#[test]
fn an_expired_app_certificate_is_named_on_the_condition_and_renewed() {
    let world = stable_app(1, false);
    let mut observed = world.observe();
    if let Some(leaf) = observed.app.leaf.as_mut() {
        leaf.not_after = world.now - SignedDuration::from_hours(1);
    }
    let plan = plan(&observed);
    assert!(!plan.certificates.status);
    assert_eq!(plan.certificates.reason, "Expired");
    assert!(
        plan.certificates
            .message
            .contains("the application role's certificate in Secret orders-app expired"),
        "{:?}",
        plan.certificates
    );
    assert_eq!(app_writes(&plan).len(), 1);
}

#[test]
fn a_rotation_moves_the_app_certificate_before_the_old_ca_is_dropped() {
    let mut world = stable_app(2, false);
    let old = world.current.clone().unwrap_or_default();
    world.settings.rotate_ca = Some("2026-11".into());
    world.app_writes_fail = true;
    for _ in 0..12 {
        let plan = world.pass(usize::MAX);
        assert!(
            !plan.actions.contains(&TlsAction::PromoteNext),
            "promoted while the app's certificate is of the old CA: {plan:#?}"
        );
        assert_ne!(plan.stage, Stage::DroppingOld);
        for name in ["orders-1", "orders-2"] {
            world.load(name);
        }
        world.check().unwrap();
    }
    assert_eq!(world.recorded, Stage::Reissuing, "every instance moved");
    for secret in world.secrets.values() {
        assert!(secret.client_trusted.contains(&old), "{secret:?}");
    }
    let plan = plan(&world.observe());
    let new = world.next.clone().unwrap_or_default();
    assert_eq!(
        app_writes(&plan),
        [&TlsAction::WriteApp {
            issuer: Some(CaRef::Known(new.clone()))
        }]
    );
    world.app_writes_fail = false;
    settle(&mut world);
    world.check().unwrap();
    world.settled().unwrap();
    assert_eq!(world.current, Some(new.clone()));
    assert_eq!(world.app.and_then(|l| l.issuer), Some(new));
}

#[test]
fn turning_client_certificates_off_removes_the_certificate() {
    let mut world = stable_app(2, false);
    world.app_wanted = false;
    let plan = world.pass(usize::MAX);
    assert_eq!(plan.actions, vec![TlsAction::WriteApp { issuer: None }]);
    assert_eq!(world.app, None);
    assert_eq!(super::plan(&world.observe()).actions, vec![]);
    world.settled().unwrap();
}

#[test]
fn an_unusable_user_ca_names_the_app_certificate_it_cannot_issue() {
    let mut world = stable(2, true);
    world.app_wanted = true;
    let mut observed = world.observe();
    observed.authority = Authority::User {
        secret: "orders-user-ca".into(),
        ca: Err(Unusable {
            missing: false,
            message: "Secret orders-user-ca: tls.crt is not a CA certificate".into(),
        }),
    };
    let plan = plan(&observed);
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert!(!plan.certificates.status);
    assert_eq!(plan.certificates.reason, "SecretInvalid");
    assert!(
        plan.certificates
            .message
            .starts_with("spec.tls.ca.secretName: Secret orders-user-ca"),
        "{:?}",
        plan.certificates
    );
    assert!(
        plan.certificates.message.contains("Secret orders-app"),
        "{:?}",
        plan.certificates
    );
    // The usable CA issues it on the next pass.
    let plan = world.pass(usize::MAX);
    assert_eq!(app_writes(&plan).len(), 1, "{plan:#?}");
    assert_eq!(world.app.and_then(|l| l.issuer), world.user);
}

// ---------------------------------------------------------------- the simulation

#[derive(Clone, Debug)]
enum Step {
    /// An operator pass applying this many of its actions.
    Pass(usize),
    /// Instance (index) loads its Secret.
    Load(usize),
    /// Time passes, in hours.
    Wait(u8),
    RequestRotation,
    AddInstance,
    /// The operator restarts: only the recorded stage may be anything.
    Restart(u8),
    /// The user puts another CA in their Secret.
    ReplaceUserCa,
    /// The user turns `clientCertificates` on.
    EnableClientCertificates,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0usize..8).prop_map(Step::Pass),
        3 => (0usize..5).prop_map(Step::Load),
        1 => (1u8..48).prop_map(Step::Wait),
        1 => Just(Step::RequestRotation),
        1 => Just(Step::AddInstance),
        1 => (0u8..4).prop_map(Step::Restart),
        1 => Just(Step::ReplaceUserCa),
        1 => Just(Step::EnableClientCertificates),
    ]
}

fn run(world: &mut World, steps: &[Step]) -> Result<bool, TestCaseError> {
    let mut rotated = false;
    for (n, step) in steps.iter().enumerate() {
        match step {
            Step::Pass(prefix) => {
                world.pass(*prefix);
            }
            Step::Load(i) => {
                let names: Vec<String> = world.secrets.keys().cloned().collect();
                if let Some(name) = names.get(i % names.len().max(1)) {
                    world.load(name);
                }
            }
            Step::Wait(hours) => world.now += SignedDuration::from_hours(i64::from(*hours)),
            Step::RequestRotation => {
                world.settings.rotate_ca = Some(format!("r{n}"));
                rotated |= world.user.is_none();
            }
            Step::AddInstance => {
                if world.secrets.len() + world.pending.len() < 5 {
                    world.add_instance();
                }
            }
            Step::Restart(stage) => {
                world.recorded = [
                    Stage::Stable,
                    Stage::TrustingBoth,
                    Stage::Reissuing,
                    Stage::DroppingOld,
                ][usize::from(*stage) % 4];
            }
            Step::ReplaceUserCa => {
                if world.user.is_some() {
                    world.user = Some(world.make_ca());
                }
            }
            Step::EnableClientCertificates => world.app_wanted = true,
        }
        if let Err(broken) = world.check() {
            return Err(TestCaseError::fail(format!(
                "after step {n} ({step:?}): {broken}"
            )));
        }
    }
    Ok(rotated)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever order and delay the instances load their Secrets in,
    /// whatever part of a plan is applied and whenever the operator
    /// restarts: every presented leaf stays verifiable by every peer, no
    /// leaf predates its CA, and once the instances keep up the Database
    /// rests on one CA: the new one when a rotation was asked for.
    #[test]
    fn rotations_are_safe_and_finish(
        n in 1usize..4,
        user in proptest::bool::weighted(0.3),
        app in any::<bool>(),
        steps in proptest::collection::vec(step(), 0..60),
    ) {
        let mut world = if app { stable_app(n, user) } else { stable(n, user) };
        let first = world.current.clone();
        let rotated = run(&mut world, &steps)?;
        settle(&mut world);
        world.check().map_err(TestCaseError::fail)?;
        world.settled().map_err(TestCaseError::fail)?;
        if rotated {
            prop_assert_ne!(&world.current, &first, "a rotation was asked for");
            prop_assert_eq!(&world.rotation, &world.settings.rotate_ca);
        }
        if user {
            prop_assert!(world.current.is_none() && world.next.is_none(), "Tusk made a CA in user mode");
        }
    }

    /// An operator restarted mid-rotation (anything it remembered lost)
    /// carries on from the Secrets: it never goes back to trusting only
    /// the old CA once an instance presents a new leaf.
    #[test]
    fn a_restart_never_regresses_to_the_old_ca(
        steps in proptest::collection::vec(step(), 0..40),
        stage in 0u8..4,
        app in any::<bool>(),
    ) {
        let mut world = if app { stable_app(3, false) } else { stable(3, false) };
        world.settings.rotate_ca = Some("go".into());
        run(&mut world, &steps)?;
        let old = world.current.clone().unwrap_or_default();
        let presents_new = world
            .loaded
            .values()
            .any(|l| l.server.as_ref().and_then(|s| s.issuer.as_deref()) != Some(old.as_str()));
        run(&mut world, &[Step::Restart(stage), Step::Pass(usize::MAX)])?;
        if presents_new {
            for (name, secret) in &world.secrets {
                prop_assert!(
                    secret.trusted != BTreeSet::from([old.clone()]),
                    "{} went back to trusting only {}", name, old
                );
            }
        }
    }

    /// Expired material always shows: the Certificates condition is False
    /// and a Degraded verdict names it.
    #[test]
    fn expired_material_always_shows(
        n in 1usize..4,
        user in any::<bool>(),
        later in 7i64..4000,
    ) {
        let mut world = stable(n, user);
        world.now += days(later);
        let plan = plan(&world.observe());
        prop_assert!(!plan.certificates.status, "{:?}", plan.certificates);
        let degraded = plan
            .verdicts
            .iter()
            .any(|v| matches!(v, Verdict::Degraded { reason: "CertificateExpired", .. }));
        prop_assert!(degraded, "{:?}", plan.verdicts);
    }
}

// ---------------------------------------------------------------- in the Database's plan

/// The TLS world of a healthy three-instance Database, as `Observed.tls`.
fn database_tls(world: &World) -> crate::lifecycle::Observed {
    let mut observed = crate::lifecycle::tests::healthy_three();
    let mut tls = world.observe();
    // The pods of healthy_three were built with TLS and serve.
    for instance in tls.instances.values_mut() {
        instance.serving = instance.report.is_some();
    }
    observed.tls = Some(tls);
    observed
}

#[test]
fn a_new_instances_secret_is_written_before_anything_creates_its_pod() {
    let world = stable(3, false);
    let observed = database_tls(&world);
    let spec = crate::lifecycle::tests::async_spec(3);
    let tls = super::plan(observed.tls.as_ref().unwrap_or_else(|| unreachable!()));
    assert!(tls.actions.is_empty(), "at rest: {tls:#?}");
    let ctx = super::super::context::Context::new(&spec, None, &observed);
    let additions = vec![
        Action::CreatePvc { serial: 4 },
        Action::CreatePod {
            serial: 4,
            bootstrap: crate::contract::Bootstrap::Clone,
            role: crate::api::status::InstanceRole::Replica,
            image: "postgres".into(),
        },
    ];
    let planned = for_pass(&ctx, &additions).unwrap_or_else(|| unreachable!());
    assert!(
        matches!(&planned.actions[..], [TlsAction::WriteInstance { instance, issue, .. }]
            if instance == "orders-4" && issue.len() == 3),
        "{planned:#?}"
    );
    let (kept, verdict) = hold_pods(&ctx, Some(&planned), additions.clone());
    assert_eq!(
        kept, additions,
        "its Secret is complete once this plan is applied"
    );
    assert_eq!(verdict, None);

    // The user's CA is unusable: nothing is issued, so the pod waits.
    let mut broken = observed.clone();
    if let Some(tls) = broken.tls.as_mut() {
        tls.authority = Authority::User {
            secret: "mine".into(),
            ca: Err(Unusable {
                missing: true,
                message: "Secret \"mine\" does not exist".into(),
            }),
        };
    }
    let ctx = super::super::context::Context::new(&spec, None, &broken);
    let planned = for_pass(&ctx, &additions).unwrap_or_else(|| unreachable!());
    let (kept, verdict) = hold_pods(&ctx, Some(&planned), additions);
    assert_eq!(kept, vec![Action::CreatePvc { serial: 4 }]);
    assert!(
        matches!(&verdict, Some(Verdict::Progress { reason: "WaitingForCertificates", message })
            if message.contains("Secret orders-4-tls")),
        "{verdict:?}"
    );
}

#[test]
fn the_database_plan_applies_tls_steps_before_pods_and_shows_certificates() {
    let mut world = stable(3, false);
    world.now += days(5);
    let observed = database_tls(&world);
    let spec = crate::lifecycle::tests::async_spec(3);
    let decided = crate::lifecycle::plan(&spec, None, &observed);
    let first_tls = decided
        .actions
        .iter()
        .position(|a| matches!(a, Action::Tls(_)));
    let first_pod = decided
        .actions
        .iter()
        .position(|a| matches!(a, Action::CreatePod { .. } | Action::CreatePvc { .. }));
    assert!(first_tls.is_some(), "{:#?}", decided.actions);
    if let (Some(tls), Some(pod)) = (first_tls, first_pod) {
        assert!(tls < pod);
    }
    assert!(
        decided.conditions.iter().any(|c| c.type_ == CERTIFICATES),
        "{:?}",
        decided.conditions
    );
    assert!(decided.tls.is_some_and(|t| t.status.instances.len() == 3));
}

/// `spec.tls.certManager`: the Certificate is written when it is missing or
/// stale, its Secret is served as a user's is, and what holds it up is
/// named on the condition, looked at again soon.
#[test]
fn cert_manager_writes_its_certificate_and_names_what_holds_it_up() {
    use crate::lifecycle::tls_cert_manager::CertManagerObserved;
    let seen = CertManagerObserved {
        certificate: "orders-server".into(),
        secret: "orders-server-tls".into(),
        issuer: "Issuer \"ca\"".into(),
        installed: true,
        up_to_date: false,
        ready: None,
        issuer_ready: Some(Err("does not exist in namespace shop".into())),
    };
    let mut world = stable(1, false);
    world.settings.user_server = Some(UserServer {
        secret: "orders-server-tls".into(),
        leaf: Err(Unusable {
            missing: true,
            message: "Secret \"orders-server-tls\" does not exist".into(),
        }),
    });
    world.settings.cert_manager = Some(seen.clone());
    let planned = plan(&world.observe());
    assert_eq!(
        planned.actions.first(),
        Some(&TlsAction::ApplyCertificate),
        "{planned:#?}"
    );
    assert!(!planned.certificates.status);
    assert_eq!(planned.certificates.reason, "IssuerNotReady");
    assert_eq!(
        planned.certificates.message,
        "spec.tls.certManager.issuerRef: Issuer \"ca\" does not exist in namespace shop"
    );
    assert!(planned.verdicts.iter().any(|v| matches!(
        v,
        Verdict::Blocked {
            reason: "IssuerNotReady",
            ..
        }
    )));
    assert_eq!(planned.requeue_seconds, Some(CONFIRM_POLL_SECONDS));
    assert_eq!(planned.status.source, Some(TlsSourceStatus::CertManager));

    // Issued and current: served like a user's certificate, nothing to do
    // beyond copying it, no condition against it.
    world.settings.user_server = Some(UserServer {
        secret: "orders-server-tls".into(),
        leaf: Ok(Leaf {
            serial: "beef".into(),
            issuer: None,
            not_before: t0(),
            not_after: t0() + days(7),
            names: vec!["orders-rw".into()],
        }),
    });
    world.settings.cert_manager = Some(CertManagerObserved {
        up_to_date: true,
        ready: Some(Ok(())),
        issuer_ready: Some(Ok(())),
        ..seen
    });
    let planned = plan(&world.observe());
    assert!(
        planned
            .actions
            .iter()
            .all(|a| matches!(a, TlsAction::WriteInstance { issue, .. } if issue.is_empty())),
        "{planned:#?}"
    );
    assert!(planned.certificates.status, "{:?}", planned.certificates);
    assert!(!planned.actions.contains(&TlsAction::ApplyCertificate));
}

/// A new instance's pod waits while the Secret PostgreSQL would serve (a
/// user's, or cert-manager's) cannot be used: it would have no server
/// certificate to start with. Once usable, it starts.
#[test]
fn a_new_pod_waits_for_a_usable_served_secret() {
    let world = stable(3, false);
    let spec = crate::lifecycle::tests::async_spec(3);
    let additions = vec![
        Action::CreatePvc { serial: 4 },
        Action::CreatePod {
            serial: 4,
            bootstrap: crate::contract::Bootstrap::Clone,
            role: crate::api::status::InstanceRole::Replica,
            image: "postgres".into(),
        },
    ];
    let with_served = |leaf: Result<Leaf, Unusable>| {
        let mut observed = database_tls(&world);
        if let Some(tls) = observed.tls.as_mut() {
            tls.settings.user_server = Some(UserServer {
                secret: "orders-server-tls".into(),
                leaf,
            });
        }
        observed
    };
    let missing = with_served(Err(Unusable {
        missing: true,
        message: "Secret \"orders-server-tls\" does not exist".into(),
    }));
    let ctx = super::super::context::Context::new(&spec, None, &missing);
    let planned = for_pass(&ctx, &additions).unwrap_or_else(|| unreachable!());
    let (kept, verdict) = hold_pods(&ctx, Some(&planned), additions.clone());
    assert_eq!(kept, vec![Action::CreatePvc { serial: 4 }]);
    assert!(
        matches!(
            &verdict,
            Some(Verdict::Progress {
                reason: "WaitingForCertificates",
                ..
            })
        ),
        "{verdict:?}"
    );
    let usable = with_served(Ok(Leaf {
        serial: "beef".into(),
        issuer: None,
        not_before: t0(),
        not_after: t0() + days(7),
        names: vec!["orders-rw".into()],
    }));
    let ctx = super::super::context::Context::new(&spec, None, &usable);
    let planned = for_pass(&ctx, &additions).unwrap_or_else(|| unreachable!());
    let (kept, verdict) = hold_pods(&ctx, Some(&planned), additions.clone());
    assert_eq!(kept, additions);
    assert_eq!(verdict, None);
}

/// `spec.tls.certManager` unset: the Certificate Tusk wrote is deleted.
#[test]
fn a_certificate_no_longer_asked_for_is_deleted() {
    let mut world = stable(1, false);
    world.settings.leftover_certificate = Some("orders-server".into());
    let planned = plan(&world.observe());
    assert!(
        planned.actions.contains(&TlsAction::DeleteCertificate {
            name: "orders-server".into()
        }),
        "{planned:#?}"
    );
    world.settings.leftover_certificate = None;
    assert!(
        !plan(&world.observe())
            .actions
            .iter()
            .any(|a| matches!(a, TlsAction::DeleteCertificate { .. }))
    );
}

/// The first primary's (or a restarted instance's) pod waits too while the
/// served Secret cannot be used and its own Secret has no server
/// certificate; one whose Secret has one restarts.
#[test]
fn an_existing_instance_s_pod_waits_for_a_server_certificate_to_serve() {
    let world = stable(1, false);
    let spec = crate::lifecycle::tests::async_spec(3);
    let mut observed = database_tls(&world);
    let pod = |serial| Action::CreatePod {
        serial,
        bootstrap: crate::contract::Bootstrap::Initdb,
        role: crate::api::status::InstanceRole::Primary,
        image: "postgres".into(),
    };
    let actions = vec![pod(1), pod(2), Action::CreatePvc { serial: 2 }];
    let ctx = super::super::context::Context::new(&spec, None, &observed);
    assert_eq!(
        hold_unserved(&ctx, actions.clone()),
        (actions.clone(), None),
        "Tusk's own certificates hold nothing back"
    );
    if let Some(tls) = observed.tls.as_mut() {
        tls.settings.user_server = Some(UserServer {
            secret: "orders-server-tls".into(),
            leaf: Err(Unusable {
                missing: true,
                message: "Secret \"orders-server-tls\" does not exist".into(),
            }),
        });
    }
    let ctx = super::super::context::Context::new(&spec, None, &observed);
    let (kept, verdict) = hold_unserved(&ctx, actions);
    assert_eq!(kept, vec![pod(1), Action::CreatePvc { serial: 2 }]);
    assert!(
        matches!(&verdict, Some(Verdict::Progress { reason: "WaitingForCertificates", message })
            if message.starts_with("orders-2 wait for a server certificate")),
        "{verdict:?}"
    );
}
