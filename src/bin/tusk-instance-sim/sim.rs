//! The simulated instances: what each one's PostgreSQL would say (role,
//! timeline, WAL position, version, the parameters and synchronous settings
//! applied) and the instance API's answers over it, with the contract's own
//! types. Pure: no sockets, no Kubernetes; [`super::serve`] feeds it
//! requests and [`super::pods`] the [`Seed`] of each pod.

use std::collections::{BTreeMap, HashMap};

use http::{Method, StatusCode};
use serde::Serialize;
use tusk::contract::tls::TlsReport;
use tusk::contract::{
    API_VERSION, Backups, Change, DropSlotRequest, DropSlotResponse, ErrorBody, HaStatus, Lsn,
    Members, PasswordRequest, PasswordResponse, PeerStatus, PeerView, PgStatus, PromoteRequest,
    ReloadRequest, ReloadResponse, RestartResponse, RetentionReport, Role, Status,
    SwitchoverRequest, SwitchoverResponse, SyncResponse, SyncSettings, VolumeKind, VolumeUsage,
    Volumes, WalSwitchResponse, path,
};
use tusk::postgres::config::{SyncReplication, synchronous_standby_names};
use tusk::postgres::params::RESTART_PARAMETERS;

/// A volume as the simulated filesystem reports it: 1 GiB, 10% used.
const VOLUME_BYTES: u64 = 1 << 30;

/// What a pod says about the instance it runs, read once when the instance
/// is first called: the manager's view at start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seed {
    pub database: String,
    /// Bootstrapped as primary (`initdb`, `restore`) rather than cloned.
    pub primary: bool,
    /// From the image tag: `17` or `17.6` (minor 0 when absent).
    pub major: u32,
    pub minor: u32,
    /// `TUSK_PARAMETERS`.
    pub parameters: BTreeMap<String, String>,
    /// `TUSK_SYNC_MODE` and friends; `None` when asynchronous.
    pub sync: Option<SyncSettings>,
}

/// One simulated instance's PostgreSQL and manager.
#[derive(Clone, Debug)]
struct Instance {
    namespace: String,
    name: String,
    seed: Seed,
    role: Role,
    timeline: u32,
    parameters: BTreeMap<String, String>,
    sync: Option<SyncSettings>,
    pending_restart: bool,
    members: Vec<tusk::contract::Member>,
}

/// An answer: status and JSON (or text) body.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Vec<u8>,
}

fn json<T: Serialize>(value: &T) -> Reply {
    match serde_json::to_vec(value) {
        Ok(body) => Reply {
            status: StatusCode::OK,
            body,
        },
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn error(status: StatusCode, message: &str) -> Reply {
    let body = serde_json::to_vec(&ErrorBody {
        error: message.to_owned(),
    })
    .unwrap_or_default();
    Reply { status, body }
}

/// A request, as [`Sim::handle`] needs it.
pub struct Request<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    /// An `Authorization: Bearer …` header came with it.
    pub bearer: bool,
    pub body: &'a [u8],
}

/// Every simulated instance, by namespace and pod name.
#[derive(Default)]
pub struct Sim {
    instances: HashMap<(String, String), Instance>,
}

/// A simulated instance, as leader selection sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub namespace: String,
    pub name: String,
    pub database: String,
    pub primary: bool,
}

impl Sim {
    /// Every instance simulated so far (answered at least once).
    pub fn members(&self) -> Vec<Member> {
        self.instances
            .values()
            .map(|i| Member {
                namespace: i.namespace.clone(),
                name: i.name.clone(),
                database: i.seed.database.clone(),
                primary: i.role == Role::Primary,
            })
            .collect()
    }

    /// Answers `request` for instance `name` in `namespace`, created from
    /// `seed` on its first call; `tls` is what its manager would report
    /// loaded from its TLS Secret.
    pub fn handle(
        &mut self,
        namespace: &str,
        name: &str,
        seed: impl FnOnce() -> Seed,
        tls: Option<TlsReport>,
        request: &Request<'_>,
    ) -> Reply {
        let key = (namespace.to_owned(), name.to_owned());
        if !self.instances.contains_key(&key) {
            let seed = seed();
            self.instances
                .insert(key.clone(), Instance::new(namespace, name, seed));
        }
        let is_get = *request.method == Method::GET;
        if !is_get && !request.bearer {
            return error(StatusCode::UNAUTHORIZED, "a bearer token is required");
        }
        match (is_get, request.path) {
            (true, path::HEALTHZ) | (true, path::READYZ) => Reply {
                status: StatusCode::OK,
                body: b"ok".to_vec(),
            },
            (true, path::METRICS) => Reply {
                status: StatusCode::OK,
                body: Vec::new(),
            },
            (true, path::STATUS) => json(&self.status(&key, tls)),
            (true, path::PEER) => {
                let me = &self.instances[&key];
                json(&PeerStatus {
                    instance: me.name.clone(),
                    primary: me.role == Role::Primary,
                    fenced: false,
                })
            }
            (true, path::VOLUMES) => json(&Volumes {
                volumes: vec![VolumeUsage {
                    volume: VolumeKind::Data,
                    total_bytes: VOLUME_BYTES,
                    available_bytes: VOLUME_BYTES / 10 * 9,
                }],
            }),
            (true, path::BACKUPS) => json(&Backups::default()),
            (true, path::RESTORE) => error(StatusCode::NOT_FOUND, "not bootstrapped by restore"),
            (false, path::RELOAD) => self.reload(&key, request.body),
            (false, path::SYNC) => self.with_body(&key, request.body, |me, sync: SyncSettings| {
                me.sync = (sync.min > 0).then_some(sync);
                json(&SyncResponse {
                    synchronous_standby_names: me.sync.as_ref().map(render_sync),
                })
            }),
            (false, path::MEMBERS) => self.with_body(&key, request.body, |me, members: Members| {
                me.members = members.members.clone();
                json(&members)
            }),
            (false, path::RESTART) => {
                let me = self.instance(&key);
                me.pending_restart = false;
                json(&RestartResponse { restarting: true })
            }
            (false, path::DROP_SLOT) => {
                self.with_body(&key, request.body, |_, drop: DropSlotRequest| {
                    json(&DropSlotResponse {
                        slot: drop.slot,
                        dropped: true,
                    })
                })
            }
            (false, path::PASSWORD) => {
                self.with_body(&key, request.body, |me, password: PasswordRequest| {
                    json(&PasswordResponse {
                        credential: password.credential,
                        role_updated: me.role == Role::Primary,
                    })
                })
            }
            (false, path::WAL_SWITCH) => {
                let me = &self.instances[&key];
                if me.role != Role::Primary {
                    return error(StatusCode::CONFLICT, "not a primary");
                }
                json(&WalSwitchResponse { lsn: me.lsn() })
            }
            (false, path::RETENTION) => json(&RetentionReport::default()),
            (false, path::PROMOTE) => self.promote(&key, request.body, tls),
            (false, path::SWITCHOVER) => self.switchover(&key, request.body),
            _ => error(
                StatusCode::NOT_IMPLEMENTED,
                &format!("{} {} is not simulated", request.method, request.path),
            ),
        }
    }

    fn instance(&mut self, key: &(String, String)) -> &mut Instance {
        // `handle` inserted it before dispatching.
        self.instances
            .entry(key.clone())
            .or_insert_with(|| Instance::new(&key.0, &key.1, Seed::default()))
    }

    fn with_body<T: serde::de::DeserializeOwned>(
        &mut self,
        key: &(String, String),
        body: &[u8],
        then: impl FnOnce(&mut Instance, T) -> Reply,
    ) -> Reply {
        match serde_json::from_slice::<T>(body) {
            Ok(request) => then(self.instance(key), request),
            Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
        }
    }

    fn reload(&mut self, key: &(String, String), body: &[u8]) -> Reply {
        self.with_body(key, body, |me, reload: ReloadRequest| {
            let Some(wanted) = reload.parameters else {
                return json(&ReloadResponse {
                    change: Change::Nothing,
                    pending_restart: me.pending_restart,
                });
            };
            let change = change(&me.parameters, &wanted);
            if change == Change::Restart {
                me.pending_restart = true;
            }
            me.parameters = wanted;
            json(&ReloadResponse {
                change,
                pending_restart: me.pending_restart,
            })
        })
    }

    fn promote(&mut self, key: &(String, String), body: &[u8], tls: Option<TlsReport>) -> Reply {
        let request: PromoteRequest = if body.is_empty() {
            PromoteRequest::default()
        } else {
            match serde_json::from_slice(body) {
                Ok(request) => request,
                Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
            }
        };
        let me = self.instance(key);
        if me.role == Role::Replica {
            me.role = Role::Primary;
            me.timeline += 1;
        }
        if let Some(sync) = request.sync {
            me.sync = (sync.min > 0).then_some(sync);
        }
        json(&self.status(key, tls))
    }

    /// The primary hands over to `target`: both move to the next timeline.
    fn switchover(&mut self, key: &(String, String), body: &[u8]) -> Reply {
        let request: SwitchoverRequest = match serde_json::from_slice(body) {
            Ok(request) => request,
            Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
        };
        let me = self.instance(key);
        if me.role != Role::Primary {
            return error(StatusCode::CONFLICT, "not a primary");
        }
        let final_lsn = me.lsn();
        let timeline = me.timeline + 1;
        let target_key = (key.0.clone(), request.target.clone());
        let Some(target) = self.instances.get_mut(&target_key) else {
            return error(
                StatusCode::CONFLICT,
                &format!("{} has not been heard from", request.target),
            );
        };
        target.role = Role::Primary;
        target.timeline = timeline;
        let me = self.instance(key);
        me.role = Role::Replica;
        me.timeline = timeline;
        json(&SwitchoverResponse {
            target: request.target,
            final_lsn,
        })
    }

    fn status(&self, key: &(String, String), tls: Option<TlsReport>) -> Status {
        let me = &self.instances[key];
        let primary = self
            .instances
            .values()
            .find(|i| {
                i.namespace == me.namespace
                    && i.seed.database == me.seed.database
                    && i.role == Role::Primary
            })
            .map(|i| i.name.clone());
        let peers = me
            .members
            .iter()
            .filter(|m| m.name != me.name)
            .map(|m| PeerView {
                name: m.name.clone(),
                silent_ms: 500,
                fenced: false,
                primary: primary.as_deref() == Some(m.name.as_str()),
            })
            .collect();
        let replica = me.role == Role::Replica;
        let lsn = me.lsn();
        Status {
            api_version: API_VERSION,
            instance: me.name.clone(),
            pod: Some(me.name.clone()),
            namespace: Some(me.namespace.clone()),
            postgres: PgStatus {
                role: me.role,
                timeline: Some(me.timeline),
                current_lsn: (!replica).then_some(lsn),
                received_lsn: replica.then_some(lsn),
                replayed_lsn: replica.then_some(lsn),
                streaming: replica.then_some(true),
                system_identifier: system_identifier(&me.namespace, &me.seed.database),
                version: format!("{}.{}", me.seed.major, me.seed.minor),
                version_num: i32::try_from(me.seed.major * 10_000 + me.seed.minor)
                    .unwrap_or(i32::MAX),
                pending_restart: me.pending_restart,
                inactive_slots: Vec::new(),
                archiver: None,
                replay_lag_milliseconds: BTreeMap::new(),
            },
            ready: true,
            parameters: me.parameters.clone(),
            sync: me.sync.clone(),
            ha: Some(HaStatus {
                holds_lease: me.role == Role::Primary,
                lease_holder: primary,
                fenced: false,
                members: me.members.clone(),
                peers,
                primary_end: None,
            }),
            tls,
            faults: None,
        }
    }
}

impl Instance {
    fn new(namespace: &str, name: &str, seed: Seed) -> Self {
        Instance {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            role: if seed.primary {
                Role::Primary
            } else {
                Role::Replica
            },
            timeline: 1,
            parameters: seed.parameters.clone(),
            sync: seed.sync.clone(),
            pending_restart: false,
            members: Vec::new(),
            seed,
        }
    }

    /// Nothing writes: the WAL stands where the timeline began, on every
    /// instance alike (replicas have received and replayed all of it).
    fn lsn(&self) -> Lsn {
        Lsn(0x0300_0000 + u64::from(self.timeline) * 0x100)
    }
}

/// What going from `from` to `to` takes, as PostgreSQL would apply it.
pub fn change(from: &BTreeMap<String, String>, to: &BTreeMap<String, String>) -> Change {
    let changed: Vec<&String> = from
        .keys()
        .chain(to.keys())
        .filter(|k| from.get(*k) != to.get(*k))
        .collect();
    if changed.is_empty() {
        Change::Nothing
    } else if changed
        .iter()
        .any(|k| RESTART_PARAMETERS.contains(&k.as_str()))
    {
        Change::Restart
    } else {
        Change::Reload
    }
}

/// `synchronous_standby_names` as the manager renders it.
pub fn render_sync(sync: &SyncSettings) -> String {
    synchronous_standby_names(&SyncReplication {
        min: sync.min,
        standbys: sync.standbys.clone(),
    })
}

/// A stable identifier per Database, as `initdb` would have drawn one: the
/// instances of one Database agree, two Databases differ.
pub fn system_identifier(namespace: &str, database: &str) -> String {
    // FNV-1a: stable across runs and builds, unlike the std hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in namespace.bytes().chain([b'/']).chain(database.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // PostgreSQL's identifiers are 19-digit numbers.
    (hash | (1 << 62)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(primary: bool) -> Seed {
        Seed {
            database: "orders".into(),
            primary,
            major: 17,
            minor: 6,
            parameters: BTreeMap::from([("work_mem".into(), "4MB".into())]),
            sync: None,
        }
    }

    fn call(sim: &mut Sim, name: &str, method: Method, path: &str, body: &str) -> Reply {
        let primary = name.ends_with("-1");
        sim.handle(
            "shop",
            name,
            || seed(primary),
            None,
            &Request {
                method: &method,
                path,
                bearer: true,
                body: body.as_bytes(),
            },
        )
    }

    fn status(sim: &mut Sim, name: &str) -> Status {
        let reply = call(sim, name, Method::GET, path::STATUS, "");
        assert_eq!(reply.status, StatusCode::OK);
        serde_json::from_slice(&reply.body).unwrap_or_else(|e| panic!("status: {e}"))
    }

    #[test]
    fn the_seed_decides_the_role_and_the_instances_of_one_database_agree() {
        let mut sim = Sim::default();
        let one = status(&mut sim, "orders-1");
        let two = status(&mut sim, "orders-2");
        assert_eq!(one.postgres.role, Role::Primary);
        assert_eq!(two.postgres.role, Role::Replica);
        assert_eq!(one.api_version, API_VERSION);
        assert_eq!(
            one.postgres.system_identifier,
            two.postgres.system_identifier
        );
        assert_eq!(one.postgres.version_num, 170_006);
        assert_eq!(two.postgres.received(), one.postgres.received());
        assert_eq!(
            two.ha.and_then(|h| h.lease_holder).as_deref(),
            Some("orders-1")
        );
        assert_ne!(
            system_identifier("shop", "orders"),
            system_identifier("shop", "orders-2")
        );
    }

    #[test]
    fn a_reload_applies_the_parameters_and_says_what_it_took() {
        let mut sim = Sim::default();
        let reply = call(
            &mut sim,
            "orders-1",
            Method::POST,
            path::RELOAD,
            r#"{"parameters":{"work_mem":"8MB"}}"#,
        );
        let answer: ReloadResponse =
            serde_json::from_slice(&reply.body).unwrap_or_else(|e| panic!("reload: {e}"));
        assert_eq!(answer.change, Change::Reload);
        assert_eq!(status(&mut sim, "orders-1").parameters["work_mem"], "8MB");
        let restart = call(
            &mut sim,
            "orders-1",
            Method::POST,
            path::RELOAD,
            r#"{"parameters":{"work_mem":"8MB","shared_buffers":"1GB"}}"#,
        );
        let answer: ReloadResponse =
            serde_json::from_slice(&restart.body).unwrap_or_else(|e| panic!("reload: {e}"));
        assert_eq!(answer.change, Change::Restart);
        assert!(status(&mut sim, "orders-1").postgres.pending_restart);
        call(&mut sim, "orders-1", Method::POST, path::RESTART, "{}");
        assert!(!status(&mut sim, "orders-1").postgres.pending_restart);
    }

    #[test]
    fn a_switchover_swaps_the_roles_on_a_new_timeline() {
        let mut sim = Sim::default();
        status(&mut sim, "orders-2");
        let reply = call(
            &mut sim,
            "orders-1",
            Method::POST,
            path::SWITCHOVER,
            r#"{"target":"orders-2"}"#,
        );
        assert_eq!(reply.status, StatusCode::OK);
        let one = status(&mut sim, "orders-1");
        let two = status(&mut sim, "orders-2");
        assert_eq!(one.postgres.role, Role::Replica);
        assert_eq!(two.postgres.role, Role::Primary);
        assert_eq!(two.postgres.timeline, Some(2));
    }

    #[test]
    fn mutations_need_a_bearer_token_and_unknown_paths_say_so() {
        let mut sim = Sim::default();
        let reply = sim.handle(
            "shop",
            "orders-1",
            || seed(true),
            None,
            &Request {
                method: &Method::POST,
                path: path::RELOAD,
                bearer: false,
                body: b"{}",
            },
        );
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        let reply = call(&mut sim, "orders-1", Method::POST, "/drill/freeze", "{}");
        assert_eq!(reply.status, StatusCode::NOT_IMPLEMENTED);
    }

    #[test]
    fn members_pushed_come_back_in_the_status() {
        let mut sim = Sim::default();
        let members = r#"{"members":[{"name":"orders-1","address":"198.18.128.2","tls":true},{"name":"orders-2","address":"198.18.128.3","tls":true}]}"#;
        call(&mut sim, "orders-1", Method::POST, path::MEMBERS, members);
        let ha = status(&mut sim, "orders-1").ha.unwrap_or_default();
        assert_eq!(ha.members.len(), 2);
        assert_eq!(ha.peers.len(), 1);
        assert!(ha.holds_lease);
    }

    #[test]
    fn sync_settings_render_like_postgresql_reads_them() {
        let sync = SyncSettings {
            min: 1,
            standbys: vec!["orders-2".into(), "orders-3".into()],
        };
        assert_eq!(render_sync(&sync), r#"ANY 1 ("orders-2", "orders-3")"#);
        let any = SyncSettings {
            min: 2,
            standbys: Vec::new(),
        };
        assert_eq!(render_sync(&any), "ANY 2 (*)");
    }
}
