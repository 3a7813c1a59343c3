//! The TLS lifecycle of a Database as plan rows: which CA to create, which
//! instance Secrets to write (with which trusted CAs, which leaves to
//! (re)issue), the application role's certificate in `<db>-app`
//! (`spec.tls.clientCertificates`), when to promote a next CA, the stage to
//! show and the `Certificates` condition. Pure: every certificate is seen
//! through its fingerprint, serial, issuer, validity and names, and the
//! controller generates keys at the edge.
//!
//! One rule drives issuing, renewal, a staged CA rotation and the recovery
//! from a lost CA alike. The *target* CA is the next CA while one exists,
//! else the current one (Tusk's, or the user's `spec.tls.ca`):
//! - leaves are issued from the target only once every instance has it in
//!   its Secret's bundles AND its manager reports it loaded; until then from
//!   the current CA, which every instance trusts;
//! - every bundle trusts the target plus every CA any instance (or an
//!   application, with its role's certificate) may still present, until
//!   every instance is CONFIRMED to present leaves of the target only (its
//!   manager reports the Secret's serials loaded, and a handshake with its
//!   PostgreSQL port shows the Secret's server serial) and `<db>-app` holds
//!   a role certificate of the target; only then do bundles shrink to the
//!   target, and a next CA is promoted.
//!
//! So a rotation goes `Stable → TrustingBoth → Reissuing → DroppingOld →
//! Stable`, each step waiting for the previous one to be confirmed on every
//! instance, and the stage is derived from the Secrets and the reports, not
//! remembered: an operator restarted mid-rotation finds the same stage again.
//! A rotation starts when `spec.tls.rotateCA` differs from the value recorded
//! on `<db>-ca` (written with the next CA, so the request is answered once),
//! or when the current CA is within `caRenewBefore` of its end. A user's CA
//! is never rotated by Tusk: a user CA close to its end is a condition.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};

use crate::contract::tls::TlsReport;

use super::tls_cert_manager::{CertManagerObserved, Finding};
use super::verdict::{Desired, Verdict};
use crate::api::tls::{InstanceTlsStatus, TlsSourceStatus, TlsStatus, condition};

/// The condition type this planner sets besides Ready/Progressing/Degraded.
pub const CERTIFICATES: &str = condition::TYPE;
/// How soon to look again while a step waits for the instances.
pub const CONFIRM_POLL_SECONDS: u64 = 5;

/// A CA certificate as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ca {
    /// SHA-256 of its DER, lower-case hex: how bundles and reports name it.
    pub fingerprint: String,
    pub not_before: Timestamp,
    pub not_after: Timestamp,
}

/// A leaf certificate as observed in a Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    /// Lower-case hex, no separators (as [`TlsReport`] reports it).
    pub serial: String,
    /// Fingerprint of the CA that signed it, when it is one of the known
    /// CAs ([`TlsObserved::known`]); `None` when no known CA verifies it.
    pub issuer: Option<String>,
    pub not_before: Timestamp,
    pub not_after: Timestamp,
    /// Its DNS names (subject alternative names).
    pub names: Vec<String>,
}

/// The certificates of an instance's TLS Secret Tusk issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LeafKind {
    /// PostgreSQL's server certificate (`tls.crt`).
    Server,
    /// The instance API identity (`api.crt`).
    Api,
    /// The replication role's client certificate (`replication.crt`).
    Replication,
}

impl LeafKind {
    pub const ALL: [LeafKind; 3] = [LeafKind::Server, LeafKind::Api, LeafKind::Replication];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Api => "api",
            Self::Replication => "replication",
        }
    }
}

/// What an instance's TLS Secret holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeldSecret {
    pub server: Option<Leaf>,
    pub api: Option<Leaf>,
    pub replication: Option<Leaf>,
    /// Fingerprints in `ca.crt`.
    pub trusted: BTreeSet<String>,
    /// Fingerprints in `client-ca.crt`.
    pub client_trusted: BTreeSet<String>,
}

impl HeldSecret {
    pub fn leaf(&self, kind: LeafKind) -> Option<&Leaf> {
        match kind {
            LeafKind::Server => self.server.as_ref(),
            LeafKind::Api => self.api.as_ref(),
            LeafKind::Replication => self.replication.as_ref(),
        }
    }

    fn trusts(&self, fingerprint: &str) -> bool {
        self.trusted.contains(fingerprint) && self.client_trusted.contains(fingerprint)
    }
}

/// The application role's client certificate (`spec.tls.clientCertificates`)
/// in `<db>-app` (`tls.crt`, `tls.key`), which applications present. It is
/// verified by every instance's `client-ca.crt`, so it rides CA rotations
/// like the instances' leaves: issued only from a CA every instance trusts,
/// moved to the new CA before the old one is dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppCert {
    /// The Secret (`<db>-app`), as the condition names it.
    pub secret: String,
    /// `spec.tls.clientCertificates`: the Secret should hold one.
    pub wanted: bool,
    /// The certificate it holds, when that is the role's (common name) and
    /// matches the key beside it; `None` when absent or unusable.
    pub leaf: Option<Leaf>,
    /// The Secret holds `tls.crt` or `tls.key` at all (to remove once the
    /// certificate is no longer wanted).
    pub held: bool,
}

/// What a TLS handshake with an instance's PostgreSQL port showed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Probe {
    /// Not probed in this pass (nothing was in flight).
    #[default]
    NotProbed,
    /// It presented the server certificate with this serial.
    Presented(String),
    /// The handshake failed; why.
    Failed(String),
}

/// One instance, as far as TLS goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceTls {
    /// Its Secret `<instance>-tls`; `None` while it does not exist.
    pub secret: Option<HeldSecret>,
    /// Its pod runs with the Secret mounted (built with TLS) and is not
    /// terminating: its manager is expected to report, and PostgreSQL to
    /// present its certificate.
    pub serving: bool,
    /// What its manager reports loaded (`Status.tls`), when it answered.
    pub report: Option<TlsReport>,
    pub probe: Probe,
}

/// Where the certificates come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authority {
    /// Tusk's own CA in `<db>-ca`.
    Managed {
        current: Option<Ca>,
        next: Option<Ca>,
        /// The `spec.tls.rotateCA` value the last rotation answered (an
        /// annotation on `<db>-ca`).
        rotation: Option<String>,
    },
    /// The user's CA (`spec.tls.ca.secretName`), or why it cannot be used
    /// (the message names the Secret and what is wrong).
    User {
        secret: String,
        ca: Result<Ca, Unusable>,
    },
}

/// The user's server certificate (`spec.tls.server.secretName`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserServer {
    pub secret: String,
    /// Its certificate, or why it cannot be used.
    pub leaf: Result<Leaf, Unusable>,
}

/// The resolved `spec.tls` durations and requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub lifetime: SignedDuration,
    pub renew_before: SignedDuration,
    pub ca_renew_before: SignedDuration,
    /// `spec.tls.rotateCA`.
    pub rotate_ca: Option<String>,
    /// The Secret PostgreSQL serves as is: `spec.tls.server`'s, or
    /// cert-manager's with `spec.tls.certManager`.
    pub user_server: Option<UserServer>,
    /// `spec.tls.certManager`: cert-manager's side.
    pub cert_manager: Option<CertManagerObserved>,
    /// A Certificate Tusk wrote for `spec.tls.certManager`, which is no
    /// longer set: cert-manager would go on renewing it for nobody.
    pub leftover_certificate: Option<String>,
}

/// The rotation stages of `status.tls.stage`.
pub use crate::api::tls::TlsStage as Stage;

fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::Stable => "Stable",
        Stage::TrustingBoth => "TrustingBoth",
        Stage::Reissuing => "Reissuing",
        Stage::DroppingOld => "DroppingOld",
    }
}

/// Why a user's Secret cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unusable {
    /// The Secret does not exist (rather than being malformed).
    pub missing: bool,
    /// Names the Secret and what is wrong with it.
    pub message: String,
}

impl Unusable {
    fn reason(&self) -> &'static str {
        if self.missing {
            condition::SECRET_MISSING
        } else {
            condition::SECRET_INVALID
        }
    }
}

/// Everything the TLS planner decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsObserved {
    pub authority: Authority,
    /// Every CA whose certificate Tusk has (in `<db>-ca`, the user's Secret,
    /// the bundles of the instance Secrets), by fingerprint: only these can
    /// go into a bundle.
    pub known: BTreeMap<String, Ca>,
    /// The operator's client identity in `<db>-ca`.
    pub operator: Option<Leaf>,
    /// The application role's certificate in `<db>-app`.
    pub app: AppCert,
    /// By instance name: those that exist and those about to be created.
    pub instances: BTreeMap<String, InstanceTls>,
    /// The names every server certificate carries besides its instance's
    /// name: the Services' (`tls::names::service_names`), then the
    /// published endpoints' hostnames and addresses
    /// (`lifecycle::endpoints::certificate_names`).
    pub service_names: Vec<String>,
    pub settings: Settings,
    /// `status.tls.stage` as last recorded: only to tell a change.
    pub recorded: Stage,
    pub now: Timestamp,
}

/// A CA an action issues from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaRef {
    /// The CA with this fingerprint (current, next or the user's).
    Known(String),
    /// The CA [`TlsAction::CreateCa`] made (`<db>-ca`'s current one).
    Created,
}

/// One TLS step for the controller, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsAction {
    /// Make `<db>-ca` with a new CA and the operator's identity from it,
    /// recording `rotation` (the rotateCA value it answers) so that it does
    /// not start a rotation. Nothing else is planned in that pass.
    CreateCa { rotation: Option<String> },
    /// Add a next CA to `<db>-ca`: a rotation begins. Records `rotation`.
    CreateNextCa { rotation: Option<String> },
    /// (Re)issue the operator's client identity in `<db>-ca` from `issuer`.
    IssueOperator { issuer: CaRef },
    /// Write `<instance>-tls`: both bundles trust exactly `trust`; the leaves
    /// in `issue` are issued anew from `issuer`, the others kept (the server
    /// certificate copied from the user's Secret in that mode).
    WriteInstance {
        instance: String,
        trust: Vec<CaRef>,
        issue: Vec<LeafKind>,
        issuer: Option<CaRef>,
    },
    /// The next CA becomes the current one in `<db>-ca`; the old one goes.
    PromoteNext,
    /// Write the TLS keys of `<db>-app`: the application role's certificate
    /// issued anew from `issuer`, or removed when `None`
    /// (`clientCertificates` turned off). Its `ca.crt` is kept.
    WriteApp { issuer: Option<CaRef> },
    /// Write cert-manager's `Certificate` (`spec.tls.certManager`) for the
    /// names every server certificate carries.
    ApplyCertificate,
    /// Delete the Certificate `spec.tls.certManager` no longer asks for.
    DeleteCertificate { name: String },
}

impl TlsAction {
    pub fn instance(&self) -> Option<&str> {
        match self {
            Self::WriteInstance { instance, .. } => Some(instance),
            _ => None,
        }
    }
}

/// The TLS part of a pass.
#[derive(Clone, Debug, PartialEq)]
pub struct TlsPlan {
    pub actions: Vec<TlsAction>,
    pub stage: Stage,
    /// What weighs on Ready/Progressing/Degraded.
    pub verdicts: Vec<Verdict>,
    pub certificates: Desired,
    /// Look again this soon: something waits for the instances, or a
    /// renewal falls due.
    pub requeue_seconds: Option<u64>,
    /// The earliest end of the material in use (leaves and target CA).
    pub not_after: Option<Timestamp>,
    /// The target CA's fingerprint.
    pub authority: Option<String>,
    /// What to record as `status.tls`.
    pub status: TlsStatus,
}

/// Whether this pass should handshake every serving instance: something is
/// in flight (a rotation, or a Secret whose serials its manager does not
/// report yet). Decided before probing, from the same inputs.
pub fn wants_probe(observed: &TlsObserved) -> bool {
    if observed.recorded != Stage::Stable {
        return true;
    }
    if matches!(
        &observed.authority,
        Authority::Managed { next: Some(_), .. }
    ) {
        return true;
    }
    observed
        .instances
        .values()
        .filter(|i| i.serving)
        .any(|i| !in_effect(i))
}

/// Decides the TLS actions, stage and condition of one pass. Pure.
pub fn plan(observed: &TlsObserved) -> TlsPlan {
    let mut out = Out::default();
    if observed
        .settings
        .cert_manager
        .as_ref()
        .is_some_and(CertManagerObserved::wants_apply)
    {
        out.actions.push(TlsAction::ApplyCertificate);
    }
    if let Some(name) = &observed.settings.leftover_certificate {
        out.actions
            .push(TlsAction::DeleteCertificate { name: name.clone() });
    }
    let Some(target) = target(observed, &mut out) else {
        return out.finish(observed, Stage::Stable, None);
    };
    if target == CaRef::Created {
        // A new CA, with the operator's identity from it, is a pass of its
        // own: the next pass sees it and writes the instances' Secrets
        // (their pods wait for them).
        return out.finish(observed, Stage::Stable, None);
    }
    let current = match &observed.authority {
        Authority::Managed { current, .. } => current.as_ref().map(|c| c.fingerprint.clone()),
        Authority::User { .. } => None,
    };
    let target_fp = match &target {
        CaRef::Known(fp) => Some(fp.clone()),
        CaRef::Created => None,
    };
    let everyone_trusts = |fp: &str| observed.instances.values().all(|i| trusts_confirmed(i, fp));
    // A CA made in this pass is trusted by nothing that serves yet.
    let trusting = match &target_fp {
        Some(fp) => everyone_trusts(fp),
        None => !observed.instances.values().any(|i| i.serving),
    };
    // The CA leaves come from: the target once trusted everywhere, else the
    // current one (trusted everywhere while a rotation prepares).
    let issuer = if trusting {
        Some(target.clone())
    } else {
        current
            .as_deref()
            .filter(|c| everyone_trusts(c))
            .map(|c| CaRef::Known(c.to_owned()))
    };
    let in_use = in_use(observed, target_fp.as_deref(), current.as_deref());
    let leaves_moved = trusting
        && observed
            .instances
            .iter()
            .all(|(name, i)| leaves_on(observed, name, i, target_fp.as_deref()))
        && operator_on(observed, target_fp.as_deref())
        && app_on(observed, target_fp.as_deref());
    // Bundles shrink to the target only once nothing else is presented.
    let mut trust = vec![target.clone()];
    if !leaves_moved {
        trust.extend(in_use.iter().map(|fp| CaRef::Known(fp.clone())));
    }
    // A manager may still have loaded a CA Tusk no longer has: dropping it
    // is not done before it says so.
    let lingering = observed.instances.values().any(|i| {
        i.serving
            && i.report.as_ref().is_some_and(|r| {
                r.trusted
                    .iter()
                    .chain(&r.client_trusted)
                    .any(|fp| Some(fp) != target_fp.as_ref())
            })
    });
    let stage = match () {
        _ if in_use.is_empty() && !has_next(observed) && !lingering => Stage::Stable,
        _ if !trusting => Stage::TrustingBoth,
        _ if !leaves_moved => Stage::Reissuing,
        _ => Stage::DroppingOld,
    };
    if stage == Stage::DroppingOld && has_next(observed) {
        out.actions.push(TlsAction::PromoteNext);
    }
    operator(observed, &target_fp, (issuer.as_ref(), &target), &mut out);
    for (name, instance) in &observed.instances {
        write(
            observed,
            (name, instance),
            (&trust, issuer.as_ref(), &target),
            &target_fp,
            &mut out,
        );
    }
    // After the instances: their writes put `ca.crt` into `<db>-app`.
    app(observed, &target_fp, (issuer.as_ref(), &target), &mut out);
    out.finish(observed, stage, target_fp)
}

/// The target CA, creating or rotating Tusk's when due; `None` when there
/// is no CA to issue from (a user CA that cannot be used: a condition).
fn target(observed: &TlsObserved, out: &mut Out) -> Option<CaRef> {
    let rotate = observed.settings.rotate_ca.clone();
    match &observed.authority {
        Authority::User { secret, ca } => match ca {
            Ok(ca) => {
                if ca.not_after <= observed.now {
                    out.expired.push(format!(
                        "spec.tls.ca.secretName: the CA in Secret {secret} expired at {}; renew it there",
                        ca.not_after
                    ));
                } else if before(ca.not_after, observed.settings.ca_renew_before) <= observed.now {
                    out.warnings.push(format!(
                        "spec.tls.ca.secretName: the CA in Secret {secret} expires at {}; Tusk does not rotate a user's CA, renew it there",
                        ca.not_after
                    ));
                }
                Some(CaRef::Known(ca.fingerprint.clone()))
            }
            Err(why) => {
                let message = format!("spec.tls.ca.secretName: {}", why.message);
                out.verdicts
                    .push(Verdict::blocked(why.reason(), message.clone()));
                out.blocked = Some((why.reason(), message));
                None
            }
        },
        Authority::Managed {
            current: None,
            next,
            ..
        } => {
            // Without a current CA a next one is pointless: start over.
            let _ = next;
            out.actions.push(TlsAction::CreateCa { rotation: rotate });
            Some(CaRef::Created)
        }
        Authority::Managed {
            current: Some(current),
            next: Some(next),
            ..
        } => {
            if current.not_after <= observed.now {
                out.expired.push(format!(
                    "Tusk's CA expired at {}; the rotation under way replaces it",
                    current.not_after
                ));
            }
            Some(CaRef::Known(next.fingerprint.clone()))
        }
        Authority::Managed {
            current: Some(current),
            next: None,
            rotation,
        } => {
            let asked = rotate.is_some() && rotate != *rotation;
            let due = before(current.not_after, observed.settings.ca_renew_before) <= observed.now;
            if current.not_after <= observed.now {
                out.expired.push(format!(
                    "Tusk's CA expired at {}; rotating it",
                    current.not_after
                ));
            }
            if asked || due {
                out.actions.push(TlsAction::CreateNextCa {
                    rotation: if asked { rotate } else { rotation.clone() },
                });
                out.rotation_started = true;
            }
            Some(CaRef::Known(current.fingerprint.clone()))
        }
    }
}

fn has_next(observed: &TlsObserved) -> bool {
    matches!(
        &observed.authority,
        Authority::Managed { next: Some(_), .. }
    )
}

/// CAs besides the target that an instance may still present or trust: in
/// a bundle, loaded by a manager, the issuer of a held leaf, or the current
/// CA while a next one exists. Only those Tusk has the certificate of.
fn in_use(observed: &TlsObserved, target: Option<&str>, current: Option<&str>) -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for instance in observed.instances.values() {
        if let Some(secret) = &instance.secret {
            all.extend(secret.trusted.iter().cloned());
            all.extend(secret.client_trusted.iter().cloned());
            all.extend(
                LeafKind::ALL
                    .iter()
                    .filter_map(|k| secret.leaf(*k))
                    .filter_map(|l| l.issuer.clone()),
            );
        }
        if let Some(report) = instance.report.as_ref().filter(|_| instance.serving) {
            all.extend(report.trusted.iter().cloned());
            all.extend(report.client_trusted.iter().cloned());
        }
    }
    if has_next(observed) {
        all.extend(current.map(str::to_owned));
    }
    if let Some(issuer) = observed.operator.as_ref().and_then(|l| l.issuer.clone()) {
        all.insert(issuer);
    }
    // Applications present the role's certificate to every instance.
    if let Some(issuer) = app_leaf(observed).and_then(|l| l.issuer.clone()) {
        all.insert(issuer);
    }
    all.into_iter()
        .filter(|fp| Some(fp.as_str()) != target)
        .filter(|fp| observed.known.contains_key(fp))
        .collect()
}

/// Instance `i` trusts `fp` and will keep doing so: its Secret's bundles
/// have it, and (when it serves) its manager reports it loaded.
fn trusts_confirmed(i: &InstanceTls, fp: &str) -> bool {
    let held = i.secret.as_ref().is_none_or(|s| s.trusts(fp));
    let loaded = !i.serving
        || i.report.as_ref().is_some_and(|r| {
            r.trusted.iter().any(|t| t == fp) && r.client_trusted.iter().any(|t| t == fp)
        });
    held && loaded
}

/// The manager reports its Secret's serials loaded, with no error.
fn reports_secret(i: &InstanceTls) -> bool {
    let (Some(secret), Some(report)) = (&i.secret, &i.report) else {
        return false;
    };
    report.error.is_none()
        && secret.server.as_ref().map(|l| l.serial.as_str()) == Some(report.server_serial.as_str())
        && secret.api.as_ref().map(|l| l.serial.as_str()) == Some(report.api_serial.as_str())
}

/// The manager reports its whole Secret in effect: serials and bundles.
fn in_effect(i: &InstanceTls) -> bool {
    let (Some(secret), Some(report)) = (&i.secret, &i.report) else {
        return false;
    };
    let set = |v: &Vec<String>| v.iter().cloned().collect::<BTreeSet<String>>();
    reports_secret(i)
        && set(&report.trusted) == secret.trusted
        && set(&report.client_trusted) == secret.client_trusted
}

/// Instance `name` holds leaves of `target` only, sound and confirmed in
/// effect: reported loaded, and the server one presented in a handshake.
fn leaves_on(observed: &TlsObserved, name: &str, i: &InstanceTls, target: Option<&str>) -> bool {
    let Some(secret) = &i.secret else {
        return !i.serving;
    };
    let held = LeafKind::ALL.iter().all(|kind| {
        if *kind == LeafKind::Server && observed.settings.user_server.is_some() {
            return secret.server.is_some();
        }
        secret
            .leaf(*kind)
            .is_some_and(|l| reason(observed, name, *kind, l, target).is_none())
    });
    let presented = match &i.probe {
        Probe::Presented(serial) => secret.server.as_ref().is_some_and(|l| l.serial == *serial),
        Probe::NotProbed | Probe::Failed(_) => false,
    };
    held && (!i.serving || (reports_secret(i) && presented))
}

/// The application role's certificate, when one is wanted and held.
fn app_leaf(observed: &TlsObserved) -> Option<&Leaf> {
    observed.app.leaf.as_ref().filter(|_| observed.app.wanted)
}

/// No application certificate is wanted, or the one held is sound and of
/// `target`: the old CA may be dropped as far as applications go.
fn app_on(observed: &TlsObserved, target: Option<&str>) -> bool {
    !observed.app.wanted
        || app_leaf(observed).is_some_and(|l| stale(observed, l, target, true).is_none())
}

fn operator_on(observed: &TlsObserved, target: Option<&str>) -> bool {
    observed
        .operator
        .as_ref()
        .is_some_and(|l| target.is_some() && l.issuer.as_deref() == target && !due(observed, l))
}

/// Issued for longer than `certificateLifetime` allows now (the lifetime
/// was shortened): reissued, so a shorter lifetime is in effect at once
/// rather than when the old leaves run out. Leaves start a little before
/// they are issued (clock skew), hence the slack.
fn outlives(observed: &TlsObserved, leaf: &Leaf) -> bool {
    let slack = crate::tls::authority::BACKDATE + SignedDuration::from_mins(1);
    leaf.not_after.duration_since(leaf.not_before) > observed.settings.lifetime + slack
}

/// Within `renewBefore` of its end, or past it.
fn due(observed: &TlsObserved, leaf: &Leaf) -> bool {
    before(leaf.not_after, observed.settings.renew_before) <= observed.now
}

const MISSING: &str = "missing";
const EXPIRED: &str = "expired";
const MOVING: &str = "issued by the previous CA";

/// Why leaf `kind` of instance `name` must be issued anew; `None` when it
/// is fine as it is (issued by `target`, in time, with the right names).
fn reason(
    observed: &TlsObserved,
    name: &str,
    kind: LeafKind,
    leaf: &Leaf,
    target: Option<&str>,
) -> Option<&'static str> {
    let names_ok = match kind {
        LeafKind::Server => server_names_ok(&leaf.names, &server_names(observed, name)),
        LeafKind::Api => leaf.names == [name.to_owned()],
        LeafKind::Replication => true,
    };
    stale(observed, leaf, target, names_ok)
}

/// Why `leaf` must be issued anew whatever it is for, `names_ok` saying
/// whether it carries the names it should; `None` when it is fine.
fn stale(
    observed: &TlsObserved,
    leaf: &Leaf,
    target: Option<&str>,
    names_ok: bool,
) -> Option<&'static str> {
    let issuer = leaf.issuer.as_deref().and_then(|fp| observed.known.get(fp));
    match issuer {
        _ if leaf.not_after <= observed.now => Some(EXPIRED),
        _ if due(observed, leaf) => Some("expiring"),
        None => Some("issued by an unknown CA"),
        Some(ca) if leaf.not_before < ca.not_before => Some("older than its CA"),
        Some(ca) if Some(ca.fingerprint.as_str()) != target => Some(MOVING),
        Some(_) if !names_ok => Some("names changed"),
        Some(_) if outlives(observed, leaf) => Some("longer than spec.tls.certificateLifetime"),
        Some(_) => None,
    }
}

/// A server leaf has the right names when it carries every required one
/// and no DNS name beyond them. An address beyond them is tolerated: a
/// published node's address that went away for a moment (its instance's
/// pod being recreated) must not reissue every leaf twice; the next
/// reissue drops it.
fn server_names_ok(held: &[String], required: &[String]) -> bool {
    use crate::tls::names::canonical;
    let held: BTreeSet<String> = held.iter().map(|n| canonical(n)).collect();
    let required: BTreeSet<String> = required.iter().map(|n| canonical(n)).collect();
    required.is_subset(&held)
        && held
            .difference(&required)
            .all(|n| n.parse::<std::net::IpAddr>().is_ok())
}

/// The names instance `name`'s server certificate must carry (DNS names,
/// and the published endpoints' addresses).
pub fn server_names(observed: &TlsObserved, name: &str) -> Vec<String> {
    let mut names = observed.service_names.clone();
    if !names.iter().any(|n| n == name) {
        names.push(name.to_owned());
    }
    names
}

/// The operator's identity: issued when missing, due, or from another CA
/// once the target is trusted everywhere.
fn operator(
    observed: &TlsObserved,
    target: &Option<String>,
    (issuer, target_ref): (Option<&CaRef>, &CaRef),
    out: &mut Out,
) {
    // Without an identity the operator reads no report, so no step could
    // ever be confirmed: a missing one comes from the target at worst.
    let issuer = match (issuer, &observed.operator) {
        (Some(issuer), _) => issuer,
        (None, None) => target_ref,
        (None, Some(_)) => return,
    };
    let stale = match &observed.operator {
        None => true,
        Some(leaf) => {
            due(observed, leaf)
                || leaf.issuer.is_none()
                || (leaf.issuer.as_deref() != target.as_deref()
                    && matches!(issuer, CaRef::Known(fp) if Some(fp) == target.as_ref()))
        }
    };
    if stale {
        out.actions.push(TlsAction::IssueOperator {
            issuer: issuer.clone(),
        });
    }
}

/// The application role's certificate: issued when missing, due, of
/// another CA, or older than its CA, from the CA every instance trusts
/// (PostgreSQL verifies it with `client-ca.crt`); moved to the target only
/// once the target is trusted everywhere, like the instances' leaves; with
/// no CA trusted everywhere nothing is issued (the condition says so).
/// Removed once `clientCertificates` is off.
fn app(
    observed: &TlsObserved,
    target: &Option<String>,
    (issuer, target_ref): (Option<&CaRef>, &CaRef),
    out: &mut Out,
) {
    let app = &observed.app;
    if !app.wanted {
        if app.held {
            out.actions.push(TlsAction::WriteApp { issuer: None });
        }
        return;
    }
    let why = match &app.leaf {
        None => MISSING,
        Some(leaf) => match stale(observed, leaf, target.as_deref(), true) {
            Some(why) => why,
            None => return,
        },
    };
    if why == EXPIRED {
        out.expired.push(format!(
            "the application role's certificate in Secret {} expired",
            app.secret
        ));
    }
    if let Some(issuer) = issuer
        && (why != MOVING || issuer == target_ref)
    {
        out.renewing |= app.leaf.is_some();
        out.actions.push(TlsAction::WriteApp {
            issuer: Some(issuer.clone()),
        });
    }
}

/// The write of one instance's Secret, when anything in it should change.
fn write(
    observed: &TlsObserved,
    (name, instance): (&String, &InstanceTls),
    (trust, issuer, target_ref): (&[CaRef], Option<&CaRef>, &CaRef),
    target: &Option<String>,
    out: &mut Out,
) {
    let held = instance.secret.clone().unwrap_or_default();
    let mut issue = Vec::new();
    for kind in LeafKind::ALL {
        if kind == LeafKind::Server && observed.settings.user_server.is_some() {
            continue;
        }
        let why = match held.leaf(kind) {
            None => MISSING,
            Some(leaf) => match reason(observed, name, kind, leaf, target.as_deref()) {
                Some(why) => why,
                None => continue,
            },
        };
        if why == EXPIRED {
            out.expired.push(format!(
                "instance {name}'s {} certificate expired",
                kind.as_str()
            ));
        }
        // Moving a sound leaf to the target waits until the target is
        // trusted everywhere; anything else is renewed from the CA that is.
        // With none (a user's CA replaced, Tusk's lost) nothing is issued
        // until the bundles with the target are loaded everywhere: a new
        // instance's pod waits for its leaves.
        if let Some(issuer) = issuer
            && (why != MOVING || issuer == target_ref)
        {
            issue.push(kind);
        }
    }
    let wanted: BTreeSet<String> = trust
        .iter()
        .filter_map(|c| match c {
            CaRef::Known(fp) => Some(fp.clone()),
            CaRef::Created => None,
        })
        .collect();
    let created = trust.contains(&CaRef::Created);
    let bundles_differ = created || held.trusted != wanted || held.client_trusted != wanted;
    let server_stale = observed.settings.user_server.as_ref().is_some_and(|u| {
        u.leaf
            .as_ref()
            .is_ok_and(|l| held.server.as_ref().map(|s| &s.serial) != Some(&l.serial))
    });
    if instance.secret.is_none() || !issue.is_empty() || bundles_differ || server_stale {
        out.renewing |= instance.secret.is_some() && !issue.is_empty();
        out.actions.push(TlsAction::WriteInstance {
            instance: name.clone(),
            trust: trust.to_vec(),
            issuer: issuer.filter(|_| !issue.is_empty()).cloned(),
            issue,
        });
    }
}

#[derive(Default)]
struct Out {
    actions: Vec<TlsAction>,
    verdicts: Vec<Verdict>,
    /// Expired material, one line each.
    expired: Vec<String>,
    /// Material close to its end that Tusk cannot renew.
    warnings: Vec<String>,
    blocked: Option<(&'static str, String)>,
    rotation_started: bool,
    renewing: bool,
    /// cert-manager is writing, issuing or renewing: look again soon.
    cert_manager_pending: bool,
}

impl Out {
    fn finish(mut self, observed: &TlsObserved, stage: Stage, target: Option<String>) -> TlsPlan {
        user_server(observed, &mut self);
        let waiting = waiting(observed, stage);
        let rotating = stage != Stage::Stable || self.rotation_started;
        let stage = if self.rotation_started {
            Stage::TrustingBoth
        } else {
            stage
        };
        if rotating {
            self.verdicts.push(Verdict::progress(
                "RotatingCA",
                format!("rotating the CA: stage {}{waiting}", stage_name(stage)),
            ));
        }
        for instance in &observed.instances {
            if let Some(error) = instance.1.report.as_ref().and_then(|r| r.error.as_deref()) {
                self.verdicts.push(Verdict::degraded(
                    "CertificateNotLoaded",
                    format!(
                        "instance {} did not load the files of Secret {}-tls: {error}",
                        instance.0, instance.0
                    ),
                ));
            }
        }
        if !self.expired.is_empty() {
            self.verdicts.push(Verdict::degraded(
                "CertificateExpired",
                self.expired.join("; "),
            ));
        }
        // Applications cannot log in without it: never True while missing.
        let app = app_missing(observed, &self.actions)
            .map(|note| format!("; {note}"))
            .unwrap_or_default();
        let certificates = if let Some((reason, why)) = &self.blocked {
            Desired::new(CERTIFICATES, false, reason, format!("{why}{app}"))
        } else if !self.expired.is_empty() {
            Desired::new(
                CERTIFICATES,
                false,
                condition::EXPIRED,
                format!("{}{app}", self.expired.join("; ")),
            )
        } else if rotating {
            Desired::new(
                CERTIFICATES,
                false,
                condition::ROTATING,
                format!("stage {}{app}{waiting}", stage_name(stage)),
            )
        } else if !app.is_empty() {
            Desired::new(
                CERTIFICATES,
                false,
                condition::ROTATING,
                format!("issuing certificates{app}{waiting}"),
            )
        } else if !self.warnings.is_empty() {
            Desired::new(
                CERTIFICATES,
                true,
                condition::IN_EFFECT,
                self.warnings.join("; "),
            )
        } else if self.renewing || !self.actions.is_empty() || !waiting.is_empty() {
            Desired::new(
                CERTIFICATES,
                true,
                condition::ROTATING,
                format!("issuing certificates{waiting}"),
            )
        } else {
            Desired::new(
                CERTIFICATES,
                true,
                condition::IN_EFFECT,
                "every instance serves current certificates",
            )
        };
        let not_after = not_after(observed, target.as_deref());
        let busy = rotating
            || !self.actions.is_empty()
            || !waiting.is_empty()
            || self.cert_manager_pending;
        let requeue_seconds = if busy {
            Some(CONFIRM_POLL_SECONDS)
        } else {
            next_due(observed, target.as_deref()).map(|due| {
                u64::try_from(due.duration_since(observed.now).as_secs())
                    .unwrap_or(0)
                    .max(1)
            })
        };
        let status = status(observed, stage, target.as_deref(), not_after);
        TlsPlan {
            status,
            actions: self.actions,
            stage,
            verdicts: self.verdicts,
            certificates,
            requeue_seconds,
            not_after,
            authority: target,
        }
    }
}

/// The application role's certificate is wanted, none usable is held and
/// this pass issues none (no CA to issue from, or none every instance
/// trusts yet): says so, naming the Secret.
fn app_missing(observed: &TlsObserved, actions: &[TlsAction]) -> Option<String> {
    let app = &observed.app;
    let usable = app
        .leaf
        .as_ref()
        .is_some_and(|l| l.not_after > observed.now);
    let issuing = actions
        .iter()
        .any(|a| matches!(a, TlsAction::WriteApp { issuer: Some(_) }));
    (app.wanted && !usable && !issuing).then(|| {
        format!(
            "the application role's certificate (spec.tls.clientCertificates) is not issued into Secret {} yet",
            app.secret
        )
    })
}

/// `status.tls`: the stage, where the certificates come from, and per
/// instance the server certificate its Secret holds and whether it was
/// seen presented.
fn status(
    observed: &TlsObserved,
    stage: Stage,
    target: Option<&str>,
    earliest: Option<Timestamp>,
) -> TlsStatus {
    let source = match (
        &observed.authority,
        &observed.settings.user_server,
        &observed.settings.cert_manager,
    ) {
        (Authority::User { .. }, _, _) => TlsSourceStatus::CaSecret,
        (Authority::Managed { .. }, _, Some(_)) => TlsSourceStatus::CertManager,
        (Authority::Managed { .. }, Some(_), None) => TlsSourceStatus::ServerSecret,
        (Authority::Managed { .. }, None, None) => TlsSourceStatus::Operator,
    };
    let instances = observed
        .instances
        .iter()
        .map(|(name, i)| {
            let server = i.secret.as_ref().and_then(|s| s.server.as_ref());
            InstanceTlsStatus {
                name: name.clone(),
                secret: format!("{name}-tls"),
                serial: server.map(|l| l.serial.clone()),
                not_after: server.map(|l| l.not_after.to_string()),
                // Not probed: nothing was in flight, and it was probed
                // when its Secret last changed, until its manager reported
                // the Secret in effect.
                presented: match (&i.probe, server) {
                    (Probe::Presented(serial), Some(l)) => *serial == l.serial,
                    (Probe::NotProbed, Some(_)) => i.serving && in_effect(i),
                    _ => false,
                },
            }
        })
        .collect();
    TlsStatus {
        stage,
        source: Some(source),
        ca_not_after: target
            .and_then(|fp| observed.known.get(fp))
            .map(|c| c.not_after.to_string()),
        earliest_not_after: earliest.map(|t| t.to_string()),
        instances,
    }
}

/// The user's server certificate: its end is the user's to renew (or
/// cert-manager's, with `spec.tls.certManager`).
fn user_server(observed: &TlsObserved, out: &mut Out) {
    let Some(user) = &observed.settings.user_server else {
        return;
    };
    if let Some(cert_manager) = &observed.settings.cert_manager {
        return cert_manager_server(cert_manager, user, observed, out);
    }
    match &user.leaf {
        Err(why) => {
            let message = format!("spec.tls.server.secretName: {}", why.message);
            out.verdicts
                .push(Verdict::blocked(why.reason(), message.clone()));
            out.blocked.get_or_insert((why.reason(), message));
        }
        Ok(leaf) if leaf.not_after <= observed.now => out.expired.push(format!(
            "spec.tls.server.secretName: the certificate in Secret {} expired at {}; renew it there",
            user.secret, leaf.not_after
        )),
        Ok(leaf) if due(observed, leaf) => out.warnings.push(format!(
            "spec.tls.server.secretName: the certificate in Secret {} expires at {}; renew it there",
            user.secret, leaf.not_after
        )),
        Ok(_) => {}
    }
}

/// The Secret cert-manager fills: served like a `spec.tls.server` one,
/// renewed by cert-manager; what holds it up is named on the condition.
fn cert_manager_server(
    cert_manager: &CertManagerObserved,
    user: &UserServer,
    observed: &TlsObserved,
    out: &mut Out,
) {
    out.cert_manager_pending = cert_manager.pending(user.leaf.is_ok());
    let finding = match &user.leaf {
        Err(why) => cert_manager.unusable(why.missing, &why.message),
        Ok(leaf) if leaf.not_after <= observed.now => {
            out.expired.push(format!(
                "{}: the certificate in Secret {} expired at {}; cert-manager has not renewed it",
                super::tls_cert_manager::FIELD,
                user.secret,
                leaf.not_after
            ));
            cert_manager.serving()
        }
        Ok(_) => cert_manager.serving(),
    };
    match finding {
        Finding::Fine => {}
        Finding::Warning(message) => out.warnings.push(message),
        Finding::Blocked(reason, message) => {
            out.verdicts.push(Verdict::blocked(reason, message.clone()));
            out.blocked.get_or_insert((reason, message));
        }
    }
}

/// `: waiting for …` naming the instances whose Secret is not in effect.
fn waiting(observed: &TlsObserved, stage: Stage) -> String {
    let pending: Vec<String> = observed
        .instances
        .iter()
        .filter(|(_, i)| i.serving && i.secret.is_some())
        .filter(|(_, i)| {
            !in_effect(i)
                || (stage != Stage::Stable
                    && !matches!(&i.probe, Probe::Presented(s) if i.secret.as_ref().and_then(|h| h.server.as_ref()).is_some_and(|l| l.serial == *s)))
        })
        .map(|(name, _)| format!("{name} (Secret {name}-tls)"))
        .collect();
    if pending.is_empty() {
        String::new()
    } else {
        format!(
            "; waiting for {} to load and present their Secret",
            pending.join(", ")
        )
    }
}

/// The earliest end among the held leaves and the target CA.
fn not_after(observed: &TlsObserved, target: Option<&str>) -> Option<Timestamp> {
    leaves(observed)
        .map(|l| l.not_after)
        .chain(
            target
                .and_then(|fp| observed.known.get(fp))
                .map(|c| c.not_after),
        )
        .min()
}

/// When the next renewal (of a leaf, or of Tusk's CA) falls due.
fn next_due(observed: &TlsObserved, target: Option<&str>) -> Option<Timestamp> {
    let ca = match &observed.authority {
        Authority::Managed { .. } => target
            .and_then(|fp| observed.known.get(fp))
            .map(|c| before(c.not_after, observed.settings.ca_renew_before)),
        Authority::User { .. } => None,
    };
    leaves(observed)
        .map(|l| before(l.not_after, observed.settings.renew_before))
        .chain(ca)
        .min()
}

/// `at` less `margin`, saturating at the earliest time.
fn before(at: Timestamp, margin: SignedDuration) -> Timestamp {
    at.checked_sub(margin).unwrap_or(Timestamp::MIN)
}

fn leaves(observed: &TlsObserved) -> impl Iterator<Item = &Leaf> {
    observed
        .instances
        .values()
        .filter_map(|i| i.secret.as_ref())
        .flat_map(|s| LeafKind::ALL.iter().filter_map(|k| s.leaf(*k)))
        .chain(observed.operator.as_ref())
        .chain(app_leaf(observed))
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
