//! Leader selection inside the pod: the primary lease, the peers' heartbeat
//! and self-fencing, applying the pure rules of [`crate::failover`].
//!
//! - A manager whose data directory is a primary's may start PostgreSQL only
//!   once it holds the lease (it takes a released one, renews its own, and
//!   rejoins as a replica when another instance holds it).
//! - While primary it renews the lease every period, each write carrying the
//!   resourceVersion it read. A fence check runs ten times a period: with
//!   neither a recent renewal nor a majority of peers reached, PostgreSQL is
//!   stopped at once (immediate shutdown) and stays stopped until a renewal
//!   succeeds, or the lease turns out to be another's (then it rejoins).
//! - Every manager calls its peers' `GET /peer` every period and answers
//!   theirs, recording when it last heard from each; `/status` reports it so
//!   that the operator can tell a dead primary from a partitioned operator.
//! - A replica watches the lease too (the operator's promotion asks it to
//!   take it) and, when the holder changes, restarts its WAL receiver so that
//!   it finds the new primary at once instead of after a TCP timeout.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use crate::contract::{HaStatus, Lsn, Member, PEER_HEADER, PeerStatus, PeerView, PrimaryEnd, path};
use crate::failover::fencing::{Guard, Writable};
use crate::failover::lease::{self, Observer, Record};
use crate::failover::{Moment, Rules, Timing};

use super::{Shared, files};

/// What the supervisor is to do with PostgreSQL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Duty {
    /// Run as the data directory says.
    Serve,
    /// Keep PostgreSQL stopped: a primary that may no longer accept writes.
    Fence,
    /// Stop, rewind onto the lease holder and start as its replica.
    Rejoin,
    /// Stop cleanly, wait until `target` has every WAL record, hand it the
    /// lease and start as a replica (a switchover).
    Handover { target: String },
}

/// The outcome of a handover, for the waiting `POST /switchover`.
pub type HandoverResult = Result<crate::contract::SwitchoverResponse, String>;

/// A lease operation's outcome.
#[derive(Debug)]
pub enum Claim {
    /// This instance holds the lease.
    Held,
    /// `holder` holds it.
    Other { holder: String },
    /// Nothing can be concluded now (API unreachable, a write conflicted, the
    /// lease does not exist yet).
    Unknown(String),
}

/// The manager's part of the protocol.
pub struct Ha {
    origin: Instant,
    /// The lease's name; `None` runs without leader selection.
    lease_name: Option<String>,
    namespace: String,
    me: String,
    api: tokio::sync::OnceCell<Api<Lease>>,
    state: Mutex<State>,
    duty: watch::Sender<Duty>,
    handover: Mutex<Option<tokio::sync::oneshot::Sender<HandoverResult>>>,
    http: HttpClient<HttpConnector, Empty<Bytes>>,
    pub timing: Timing,
}

#[derive(Default)]
struct State {
    observer: Observer,
    guard: Guard,
    members: Vec<Member>,
    /// When each peer last exchanged a call with this one.
    contacts: BTreeMap<String, Moment>,
    /// Each peer's last answer.
    answers: BTreeMap<String, PeerStatus>,
    /// The last write of the lease by this instance succeeded and named it.
    holds: bool,
    /// A replica: the furthest WAL end its primary reported, and who that was.
    primary_end: Option<PrimaryEnd>,
}

impl Ha {
    pub fn new(lease_name: Option<String>, namespace: Option<String>, me: String) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Timing::DEFAULT.request_timeout));
        let (duty, _) = watch::channel(Duty::Serve);
        Ha {
            origin: Instant::now(),
            lease_name: lease_name.filter(|name| !name.is_empty()),
            namespace: namespace.unwrap_or_else(|| "default".to_owned()),
            me,
            api: tokio::sync::OnceCell::new(),
            state: Mutex::new(State::default()),
            duty,
            handover: Mutex::new(None),
            http: HttpClient::builder(TokioExecutor::new()).build(connector),
            timing: Timing::DEFAULT,
        }
    }

    /// Leader selection is on: the pod names a lease.
    pub fn enabled(&self) -> bool {
        self.lease_name.is_some()
    }

    pub fn now(&self) -> Moment {
        self.origin.elapsed()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn duty(&self) -> Duty {
        self.duty.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Duty> {
        self.duty.subscribe()
    }

    pub fn set_duty(&self, duty: Duty) {
        self.duty.send_if_modified(|current| {
            if *current == duty {
                return false;
            }
            tracing::info!(from = ?current, to = ?duty, "duty changes");
            *current = duty;
            true
        });
    }

    pub fn fenced(&self) -> bool {
        self.state().guard.fenced()
    }

    async fn api(&self) -> Result<&Api<Lease>, String> {
        self.api
            .get_or_try_init(|| async {
                let client = kube::Client::try_default()
                    .await
                    .map_err(|e| format!("no Kubernetes client: {e}"))?;
                Ok(Api::namespaced(client, &self.namespace))
            })
            .await
    }

    /// Read the lease (and remember what was seen).
    async fn read(&self) -> Result<Option<Lease>, String> {
        let Some(name) = &self.lease_name else {
            return Ok(None);
        };
        let api = self.api().await?;
        let lease = tokio::time::timeout(LEASE_CALL_TIMEOUT, api.get_opt(name))
            .await
            .map_err(|_| "reading the lease timed out".to_owned())?
            .map_err(|e| format!("reading the lease: {e}"))?;
        if let Some(lease) = &lease {
            let record = record_of(lease);
            let now = self.now();
            self.state().observer.observe(&record, now);
        }
        Ok(lease)
    }

    /// Write `spec` over `lease` with the resourceVersion it was read at.
    async fn write(&self, mut lease: Lease, spec: LeaseSpec) -> Result<Lease, String> {
        let Some(name) = &self.lease_name else {
            return Err("no lease".into());
        };
        let api = self.api().await?;
        lease.spec = Some(spec);
        let written = tokio::time::timeout(
            LEASE_CALL_TIMEOUT,
            api.replace(name, &PostParams::default(), &lease),
        )
        .await
        .map_err(|_| "writing the lease timed out".to_owned())?
        .map_err(|e| format!("writing the lease: {e}"))?;
        let now = self.now();
        self.state().observer.observe(&record_of(&written), now);
        Ok(written)
    }

    /// Renew the lease when this instance holds it, take it when it is
    /// released: what a primary's data directory needs before PostgreSQL may
    /// start, and every period after.
    pub async fn claim(&self) -> Claim {
        let sent = self.now();
        let lease = match self.read().await {
            Ok(Some(lease)) => lease,
            Ok(None) => return Claim::Unknown("the primary lease does not exist yet".into()),
            Err(why) => return Claim::Unknown(why),
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        // A released lease is retaken only by the instance that released it
        // (or when nobody ever held it): after a release another instance may
        // have been promoted, committed and released in turn, and this data
        // would then lack its commits.
        let released_by = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RELEASED_BY))
            .cloned();
        let holder = holder.or(released_by.filter(|by| *by != self.me));
        let taking = match holder.as_deref() {
            Some(holder) if holder == self.me => false,
            None => true,
            Some(holder) => {
                let mut state = self.state();
                state.holds = false;
                state.guard.lost();
                return Claim::Other {
                    holder: holder.to_owned(),
                };
            }
        };
        match self.write(lease, self.spec_for(&spec, taking)).await {
            Ok(_) => {
                let mut state = self.state();
                state.guard.renewed(sent);
                state.holds = true;
                if taking {
                    tracing::info!("took the released primary lease");
                }
                Claim::Held
            }
            Err(why) => Claim::Unknown(why),
        }
    }

    /// Take the lease for a promotion the operator ordered: only when this
    /// manager's own observation allows it (released, expired, or already
    /// ours), waiting out what remains of a live lease up to its duration.
    pub async fn take_for_promotion(&self) -> Result<(), String> {
        let deadline = self.now() + self.timing.lease + self.timing.period;
        loop {
            let sent = self.now();
            let lease = self
                .read()
                .await?
                .ok_or_else(|| "the primary lease does not exist".to_owned())?;
            let state = self.state().observer.state(self.now());
            match lease::may_take(&state, &self.me, &Rules::ALL) {
                Ok(()) => {
                    let spec = lease.spec.clone().unwrap_or_default();
                    let taking = spec.holder_identity.as_deref() != Some(self.me.as_str());
                    self.write(lease, self.spec_for(&spec, taking)).await?;
                    let mut st = self.state();
                    st.guard.renewed(sent);
                    st.holds = true;
                    tracing::info!("took the primary lease for a promotion");
                    return Ok(());
                }
                Err(refusal) if self.now() >= deadline => return Err(refusal.to_string()),
                Err(_) => tokio::time::sleep(self.timing.period / 4).await,
            }
        }
    }

    /// Hand the lease to `target` (a switchover, after a clean shutdown).
    pub async fn transfer(&self, target: &str) -> Result<(), String> {
        let lease = self
            .read()
            .await?
            .ok_or_else(|| "the primary lease does not exist".to_owned())?;
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.me.as_str()) {
            return Err(format!(
                "the lease is {:?}'s, not this instance's",
                spec.holder_identity
            ));
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        let next = LeaseSpec {
            holder_identity: Some(target.to_owned()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + 1),
            ..spec
        };
        self.write(lease, next).await?;
        let mut state = self.state();
        state.holds = false;
        state.guard.lost();
        Ok(())
    }

    /// Give the lease up after PostgreSQL stopped cleanly, so that a replica
    /// takes over at once instead of after the lease's duration.
    pub async fn release(&self) {
        if !self.enabled() {
            return;
        }
        let result = async {
            let Some(lease) = self.read().await? else {
                return Ok(false);
            };
            let spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.me.as_str()) {
                return Ok(false);
            }
            let next = LeaseSpec {
                holder_identity: None,
                ..spec
            };
            let mut lease = lease;
            lease
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(RELEASED_BY.to_owned(), self.me.clone());
            self.write(lease, next).await.map(|_| true)
        };
        match result.await {
            Ok(true) => tracing::info!("released the primary lease"),
            Ok(false) => {}
            Err(why) => tracing::warn!(%why, "could not release the primary lease"),
        }
        let mut state = self.state();
        state.holds = false;
        state.guard.lost();
    }

    fn spec_for(&self, previous: &LeaseSpec, taking: bool) -> LeaseSpec {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let seconds = i32::try_from(self.timing.lease.as_secs()).unwrap_or(i32::MAX);
        if taking {
            LeaseSpec {
                holder_identity: Some(self.me.clone()),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_duration_seconds: Some(seconds),
                lease_transitions: Some(previous.lease_transitions.unwrap_or(0) + 1),
                ..LeaseSpec::default()
            }
        } else {
            LeaseSpec {
                renew_time: Some(now),
                lease_duration_seconds: Some(seconds),
                ..previous.clone()
            }
        }
    }

    /// Judge whether this primary may keep accepting writes.
    pub fn check(&self) -> Writable {
        let now = self.now();
        let mut state = self.state();
        let others: Vec<Option<Moment>> = state
            .members
            .iter()
            .filter(|m| m.name != self.me)
            .map(|m| state.contacts.get(&m.name).copied())
            .collect();
        // Until the operator said who the members are, a majority cannot be
        // counted: only the lease allows writes.
        let members = if state.members.is_empty() {
            2
        } else {
            state.members.len()
        };
        state
            .guard
            .check(&others, members, now, &self.timing, &Rules::ALL)
    }

    pub fn set_members(&self, members: Vec<Member>) {
        let mut state = self.state();
        if state.members != members {
            tracing::info!(?members, "members changed");
            state.members = members;
        }
    }

    pub fn members(&self) -> Vec<Member> {
        self.state().members.clone()
    }

    /// A peer called, or answered.
    pub fn heard_from(&self, peer: &str, answer: Option<PeerStatus>) {
        let now = self.now();
        let mut state = self.state();
        if !state.members.iter().any(|m| m.name == peer) {
            return;
        }
        state.contacts.insert(peer.to_owned(), now);
        if let Some(answer) = answer {
            state.answers.insert(peer.to_owned(), answer);
        }
    }

    /// `GET /peer`'s answer.
    pub fn peer_status(&self, primary_data: bool) -> PeerStatus {
        let fenced = self.fenced();
        PeerStatus {
            instance: self.me.clone(),
            primary: primary_data && !fenced,
            fenced: primary_data && fenced,
        }
    }

    /// Where the lease holder listens, when it is another instance and the
    /// operator said where it is.
    pub fn holder_address(&self) -> Option<String> {
        let state = self.state();
        let lease = state.observer.state(self.now());
        let holder = lease.holder().filter(|h| *h != self.me)?;
        state
            .members
            .iter()
            .find(|m| m.name == holder)
            .map(|m| m.address.clone())
    }

    /// A replica's WAL receiver heard `lsn` as the WAL end of `primary`.
    pub fn heard_primary_end(&self, primary: &str, lsn: Lsn) {
        let mut state = self.state();
        match &mut state.primary_end {
            Some(end) if end.instance == primary => end.lsn = end.lsn.max(lsn),
            end => {
                *end = Some(PrimaryEnd {
                    instance: primary.to_owned(),
                    lsn,
                });
            }
        }
    }

    pub fn status(&self) -> Option<HaStatus> {
        if !self.enabled() {
            return None;
        }
        let now = self.now();
        let state = self.state();
        let lease = state.observer.state(now);
        let peers = state
            .members
            .iter()
            .filter(|m| m.name != self.me)
            .map(|m| {
                let last = state.contacts.get(&m.name).copied().unwrap_or_default();
                let answer = state.answers.get(&m.name);
                PeerView {
                    name: m.name.clone(),
                    silent_ms: u64::try_from(now.saturating_sub(last).as_millis())
                        .unwrap_or(u64::MAX),
                    fenced: answer.is_some_and(|a| a.fenced),
                    primary: answer.is_some_and(|a| a.primary),
                }
            })
            .collect();
        Some(HaStatus {
            lease_holder: lease.holder().map(str::to_owned),
            holds_lease: state.holds && !state.guard.fenced(),
            fenced: state.guard.fenced(),
            members: state.members.clone(),
            peers,
            primary_end: state.primary_end.clone(),
        })
    }

    /// The supervisor finished (or gave up) a handover.
    pub fn handover_done(&self, result: HandoverResult) {
        if let Some(reply) = self
            .handover
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = reply.send(result);
        }
    }

    /// Ask the supervisor for a handover to `target` and wait for it.
    pub async fn handover(&self, target: String) -> HandoverResult {
        let (reply, answer) = tokio::sync::oneshot::channel();
        *self.handover.lock().unwrap_or_else(PoisonError::into_inner) = Some(reply);
        self.set_duty(Duty::Handover { target });
        answer
            .await
            .unwrap_or_else(|_| Err("the supervisor stopped before the handover finished".into()))
    }

    /// What `target` has received, from its `GET /status`.
    pub async fn peer_received(
        &self,
        target: &str,
    ) -> Result<Option<crate::contract::Lsn>, String> {
        let member = self
            .members()
            .into_iter()
            .find(|m| m.name == target)
            .ok_or_else(|| format!("{target} is not a member"))?;
        let status: crate::contract::Status = self.get(&member, path::STATUS, None).await?;
        Ok(status.postgres.received_lsn)
    }

    /// Call one peer's `GET /peer`.
    async fn call_peer(&self, member: &Member, token: &str) -> Result<PeerStatus, String> {
        self.get(member, path::PEER, Some(token)).await
    }

    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        member: &Member,
        path: &str,
        token: Option<&str>,
    ) -> Result<T, String> {
        let host = if member.address.contains(':') {
            format!("[{}]", member.address)
        } else {
            member.address.clone()
        };
        let url = format!("http://{host}:{}{path}", crate::contract::PORT);
        let mut request = http::Request::get(&url).header(PEER_HEADER, &self.me);
        if let Some(token) = token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(Empty::new()).map_err(|e| e.to_string())?;
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if !status.is_success() {
                return Err(format!("{status}"));
            }
            serde_json::from_slice::<T>(&body).map_err(|e| e.to_string())
        };
        tokio::time::timeout(self.timing.request_timeout, exchange)
            .await
            .map_err(|_| "timed out".to_owned())?
    }
}

const LEASE_CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// The annotation a release leaves on the lease, naming who released it.
const RELEASED_BY: &str = "tusk.dev/released-by";

fn record_of(lease: &Lease) -> Record {
    let spec = lease.spec.as_ref();
    Record {
        version: lease.metadata.resource_version.clone().unwrap_or_default(),
        holder: spec.and_then(|s| s.holder_identity.clone()),
        duration: Duration::from_secs(
            spec.and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .unwrap_or(Timing::DEFAULT.lease.as_secs()),
        ),
    }
}

/// The data directory is a primary's: it exists and has no `standby.signal`.
pub fn primary_data(shared: &Shared) -> bool {
    let pgdata = &shared.config.pgdata;
    pgdata.join("PG_VERSION").is_file() && !files::is_standby(pgdata)
}

/// The lease loop: renew (primary) or watch (replica) every period; restart
/// the WAL receiver of a replica when the holder changes.
pub async fn lease_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let ha = &shared.ha;
    let mut interval = tokio::time::interval(ha.timing.period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The primary this replica's configuration names, once the lease or the
    // operator said (`None` before: the configuration written at start).
    let mut following: Option<String> = None;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let duty = ha.duty();
        if primary_data(&shared) && super::is_set(&shared.running) || duty == Duty::Fence {
            match ha.claim().await {
                Claim::Held => {
                    if duty == Duty::Fence {
                        tracing::warn!("renewed the primary lease: lifting the fence");
                        ha.set_duty(Duty::Serve);
                    }
                }
                Claim::Other { holder } => {
                    if matches!(duty, Duty::Serve | Duty::Fence) {
                        tracing::warn!(%holder, "another instance holds the primary lease: rejoining as its replica");
                        ha.set_duty(Duty::Rejoin);
                    }
                }
                Claim::Unknown(why) => tracing::debug!(%why, "cannot renew the primary lease"),
            }
        } else if let Err(why) = ha.read().await {
            tracing::debug!(%why, "cannot read the primary lease");
        }
        let holder = ha
            .state()
            .observer
            .state(ha.now())
            .holder()
            .map(str::to_owned);
        if let Some(primary) = holder.as_deref().filter(|h| *h != ha.me)
            && !primary_data(&shared)
            && let Some(lsn) = super::sql::primary_end_lsn(&shared).await
        {
            ha.heard_primary_end(primary, lsn);
        }
        if !primary_data(&shared) && super::is_set(&shared.running) {
            let host = shared.primary_host();
            if host != following && follow(&shared, host.as_deref()).await {
                following = host;
            }
        }
    }
}

/// Point a running replica's `primary_conninfo` at `host`: PostgreSQL
/// restarts its WAL receiver when a reload changes it, so the replica leaves
/// a primary that is gone (or cut off, whose connection would otherwise hang
/// until `wal_receiver_timeout`) for the one that took the lease. `false`
/// when it could not: the next period tries again.
async fn follow(shared: &Shared, host: Option<&str>) -> bool {
    if let Err(error) = super::files::write_config(shared) {
        tracing::warn!(%error, "cannot write the configuration to follow the new primary");
        return false;
    }
    let reloaded =
        match super::sql::connect_local(&shared.config.socket_dir, shared.config.port).await {
            Ok(client) => super::sql::reload(&client).await,
            Err(error) => Err(error),
        };
    match reloaded {
        Ok(()) => {
            tracing::info!(?host, "following the primary");
            true
        }
        Err(error) => {
            tracing::warn!(%error, "cannot reload to follow the new primary");
            false
        }
    }
}

/// The fence check, ten times a period, on a running primary.
pub async fn fence_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let ha = &shared.ha;
    let mut interval = tokio::time::interval(ha.timing.fence_check);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        if ha.duty() != Duty::Serve || !primary_data(&shared) || !super::is_set(&shared.running) {
            continue;
        }
        if let Writable::Fenced { reached, members } = ha.check() {
            tracing::error!(
                reached,
                members,
                "cannot renew the primary lease and reach no majority: fencing (PostgreSQL stops accepting writes)"
            );
            ha.set_duty(Duty::Fence);
        }
    }
}

/// The heartbeat: call every peer's `GET /peer` each period.
pub async fn peer_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let ha = &shared.ha;
    let Some(token) = shared.config.token.clone() else {
        tracing::warn!("no instance token: peers cannot be called");
        return;
    };
    let mut interval = tokio::time::interval(ha.timing.period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let members = ha.members();
        let calls = members
            .iter()
            .filter(|m| m.name != ha.me && !m.address.is_empty())
            .map(|member| async {
                match ha.call_peer(member, token.expose()).await {
                    Ok(answer) => ha.heard_from(&member.name, Some(answer)),
                    Err(why) => tracing::debug!(peer = %member.name, %why, "peer did not answer"),
                }
            });
        futures::future::join_all(calls).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_keeps_the_furthest_wal_end_of_the_current_primary() {
        let ha = Ha::new(None, None, "pg-2".into());
        assert_eq!(ha.state().primary_end, None);
        ha.heard_primary_end("pg-1", Lsn(300));
        // An older report (a keepalive carrying the sent position) does not
        // move it back.
        ha.heard_primary_end("pg-1", Lsn(200));
        assert_eq!(
            ha.state().primary_end,
            Some(PrimaryEnd {
                instance: "pg-1".into(),
                lsn: Lsn(300)
            })
        );
        // A new primary starts afresh.
        ha.heard_primary_end("pg-3", Lsn(250));
        assert_eq!(
            ha.state().primary_end,
            Some(PrimaryEnd {
                instance: "pg-3".into(),
                lsn: Lsn(250)
            })
        );
    }
}
