//! A model checker run of the failover protocol, over the very functions the
//! instance manager and the operator call (`tusk::failover`): `Observer`,
//! `may_take`, `claim`, `Guard::check`, `elect`, with the model's state as
//! input, and `Pulse`, the hang fence's judgement.
//!
//! # The model
//!
//! Three instances `pg-0`, `pg-1`, `pg-2`; `pg-0` starts as the primary and
//! holds the lease, the others stream from it. The API server and the operator
//! are one network node, the control plane: the operator reaches an instance
//! exactly when that instance reaches the API server (its reports and the
//! promotion go through it), and an operator cut off from the API server is no
//! different from one that does not act, which the model always allows.
//!
//! Time is discrete, one tick per period (1 s). Moments are never compared
//! across processes, so all clocks can advance together. A tick is:
//!
//! 1. the environment: any faults, heals and restarts, within the budget;
//! 2. every live instance takes its periodic step, in a fixed order, with the
//!    operator free to fail over before, between or after them:
//!    - a primary that reaches the API server applies `claim::claim` to the
//!      lease: it renews it, takes it back when it released it itself, and
//!      otherwise learns it `lost` (a compare-and-swap on the version, so
//!      once another instance wrote itself in, or released it in turn, the
//!      renewal fails): it is deposed and waits to be rewound. (The manager
//!      writes a renewal over the lease as it last wrote it, and reads only
//!      after a lost race. That is this same step: a write that succeeds
//!      proves the lease unchanged since, so the rule judged the lease as it
//!      was.) It then calls its peers and judges with `Guard::check` whether
//!      it may accept writes;
//!    - a replica calls its peers.
//!
//!    Every instance's peers are all the others, whatever it can reach. In
//!    the product the operator pushes the member list; it keeps the lease
//!    holder in it, at its last address, while the lease names it, even once
//!    its pod is gone (`lifecycle::primary::members`), or a primary that
//!    vanished without releasing could never be confirmed gone.
//!
//!    Both sides of an exchange record it, and each answer says whether the
//!    peer fenced itself. Latencies are the worst the protocol allows: an
//!    answer reaches a primary as late as the request timeout permits (so it
//!    counts that peer as reached for longest), everything else arrives at
//!    once (so replicas confirm as early as possible);
//! 3. the operator's failover, at any point of the steps: it reads the lease
//!    with its `Observer`, collects the reports and candidates it can reach
//!    and calls `candidate::elect`; on `Promote`, the chosen replica checks
//!    `lease::may_take` with its own observer and takes the lease by
//!    compare-and-swap (read and write in one step: a write in between could
//!    only make it fail), then opens a new timeline;
//! 4. in synchronous mode, after the steps, an instance that became primary
//!    during the run may commit once, acknowledged through a standby that
//!    streams from it.
//!
//! Between steps a primary's fence loop keeps judging: at each tick, the
//! verdict in force is the one reached `fence_lag` earlier, a tenth of a
//! period as in the instance manager's fence loop (stopping PostgreSQL is
//! taken as instant). Every process that reaches the API
//! server observes the lease after every transition, so it sees each write
//! the moment it is made: the earliest, and so the tightest, expiry.
//!
//! Faults: an instance crashes (and may restart with fresh memory; a primary
//! restarts fenced until it renews), a primary shuts down cleanly (it stops
//! writing, then releases the lease), a primary's PostgreSQL hangs (it
//! commits nothing, while its manager goes on renewing and answering its
//! peers; each step its probe gets nothing, and once `Pulse` says it hung
//! for a lease duration the manager kills it and releases the lease, then
//! follows the claim rule like any primary: it may take its own release
//! back at once, the earliest the instance manager could), the operator
//! restarts (with a fresh observer), a link between two nodes is cut, or an
//! instance is isolated from everything at once. A cut link may heal.
//!
//! Commits: `pg-0` has acknowledged LSN 1, which `pg-2` received and `pg-1`
//! did not. Before the first failover, commits change nothing but the
//! replicas' positions, and this is the worst one: a replica promoted without
//! the most advanced position loses an acknowledged commit (in synchronous
//! mode, `ANY 1` of the other two, through `pg-2`), and a rule picking the
//! first listed replica picks the lagging one. Its mirror image (`pg-1`
//! ahead) is the same model with the replicas' names swapped. The commit a
//! later primary may make is what a later change of primary could lose.
//! Asynchronous mode may lose acknowledged commits by design: it has none
//! beyond the first, and no commit property.
//!
//! Bounds: [`HORIZON`] ticks, at most two faults and one heal per path; the
//! counterexample searches use the smallest budget that exhibits them.
//!
//! # What is checked
//!
//! - `at most one writable primary`: never two live primaries whose verdicts
//!   in force both allow writes;
//! - `no acknowledged commit lost` (synchronous replication): whoever becomes
//!   primary holds every acknowledged commit;
//! - `failover after the primary crashed` (sometimes): with `pg-0` down
//!   after a crash, another instance is a writable primary;
//! - `failover keeps acknowledged commits` (sometimes, synchronous mode): a
//!   primary that took over acknowledged a commit of its own, none lost;
//! - `failover after the primary's PostgreSQL hung` (sometimes): `pg-0`'s
//!   hang fence killed it and another instance is a writable primary.
//!
//! The last three show the first two do not hold vacuously.
//!
//! With `Rules::ALL` and `Timing::DEFAULT` both safety properties hold and
//! both failovers are reachable, in synchronous and asynchronous mode. Each
//! rule switched off alone yields a counterexample, and so do: a timing that
//! breaks an inequality of `Timing::is_safe`, the default timing with a fence
//! judged only once a period, a primary restarting with its old (unfenced) guard,
//! and, without `releaser_retakes`, a former primary taking back a lease
//! another instance released. Without `hang_fence` a hung primary is never
//! replaced (a liveness rule: the failover after a hang is unreachable). The
//! tests
//! print each counterexample, one line per tick (`cargo test --test
//! failover_model -- --nocapture`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model, Property};
use tusk::failover::candidate::{self, Candidate, Decision, Situation, SyncQuorum};
use tusk::failover::claim::{self, Claim, LeaseView};
use tusk::failover::fencing::Guard;
use tusk::failover::lease::{self, Observer, Record};
use tusk::failover::pulse::{Probe, Pulse};
use tusk::failover::quorum::Report;
use tusk::failover::{Moment, Rules, Timing};

const N: usize = 3;
const NAMES: [&str; N] = ["pg-0", "pg-1", "pg-2"];
/// The network node of the API server and the operator.
const CONTROL: usize = N;
/// Every link of the network, as node pairs.
const LINKS: [(usize, usize); 6] = [(0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3)];
const TICK: Duration = Duration::from_secs(1);
/// A lease last renewed at 0 expires at 5, a failover then needs the old
/// primary's step to show its effect, and a heal one more tick.
const HORIZON: u32 = 6;

const SPLIT_BRAIN: &str = "at most one writable primary";
const LOST_COMMIT: &str = "no acknowledged commit lost";
const FAILOVER: &str = "failover after the primary crashed";
const KEPT_COMMITS: &str = "failover keeps acknowledged commits";
const HANG_FAILOVER: &str = "failover after the primary's PostgreSQL hung";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Role {
    Primary,
    Replica,
    /// A former primary that learned the lease is not its own any more: it
    /// waits to be rewound and is neither writable nor a candidate.
    Deposed,
}

/// A point in the WAL: a timeline and an LSN on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Position {
    timeline: u32,
    lsn: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Instance {
    alive: bool,
    /// Down after a crash, rather than a clean shutdown.
    crashed: bool,
    role: Role,
    /// When this process (re)started: a replica that never heard from the
    /// primary reports silence since then.
    started: Moment,
    guard: Guard,
    /// The verdict in force, from the last `guard.check`.
    writable: bool,
    /// When each peer last answered or called this instance.
    contact: [Option<Moment>; N],
    /// What each peer said of its fence at that exchange.
    heard_fenced: [bool; N],
    observer: Observer,
    /// The WAL received (a replica) or written (a primary).
    position: Position,
    /// As primary, it already made its one commit.
    committed: bool,
    /// Its PostgreSQL hangs: it commits nothing while its manager goes on.
    hung: bool,
    /// The manager's probes of its PostgreSQL.
    pulse: Pulse,
}

impl Instance {
    fn new(role: Role, lsn: u64) -> Instance {
        Instance {
            alive: true,
            crashed: false,
            role,
            started: Duration::ZERO,
            guard: Guard::default(),
            writable: false,
            contact: [Some(Duration::ZERO); N],
            heard_fenced: [false; N],
            observer: Observer::default(),
            position: Position { timeline: 1, lsn },
            committed: true,
            hung: false,
            pulse: Pulse::default(),
        }
    }

    fn is_writable_primary(&self) -> bool {
        self.alive && self.role == Role::Primary && self.writable
    }

    /// What it answers a peer about its fence.
    fn says_fenced(&self) -> bool {
        match self.role {
            Role::Primary => !self.writable,
            Role::Deposed => true,
            Role::Replica => false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Lease {
    version: u64,
    holder: Option<usize>,
    /// Who released it last (the instance manager's `released-by`
    /// annotation).
    released_by: Option<usize>,
}

/// Where a tick is at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Environment,
    /// Instance `k` steps next; all have at `N`.
    Steps(usize),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    now: Moment,
    phase: Phase,
    lease: Lease,
    instances: [Instance; N],
    /// The primary as the operator knows it (the Database's status): the
    /// last holder of the lease it saw.
    primary: usize,
    /// The operator's memory of the lease.
    operator: Observer,
    /// Where each timeline after the first branched off: timeline `k` from
    /// `branches[k - 2]`.
    branches: Vec<Position>,
    /// The last acknowledged commit (the ones before it are in its history,
    /// as long as no commit was lost).
    acknowledged: Position,
    /// Cut links, bit `a * 4 + b` for nodes `a < b`.
    cut: u16,
    faults: u8,
    heals: u8,
    /// Someone became primary without an acknowledged commit.
    lost: bool,
    /// The instance whose hung PostgreSQL its manager killed, once one did.
    hang_fenced: Option<usize>,
}

impl State {
    fn linked(&self, a: usize, b: usize) -> bool {
        self.cut & link_bit(a, b) == 0
    }

    fn reaches_control(&self, i: usize) -> bool {
        self.instances[i].alive && self.linked(i, CONTROL)
    }

    fn record(&self, duration: Duration) -> Record {
        Record {
            version: self.lease.version.to_string(),
            holder: self.lease.holder.map(|h| NAMES[h].to_owned()),
            duration,
        }
    }

    /// Whether the WAL up to `position` contains `point`.
    fn contains(&self, position: Position, point: Position) -> bool {
        let mut at = position;
        loop {
            if at.timeline == point.timeline {
                return at.lsn >= point.lsn;
            }
            let Some(branch) = (at.timeline as usize)
                .checked_sub(2)
                .and_then(|k| self.branches.get(k))
            else {
                return false;
            };
            at = Position {
                timeline: branch.timeline,
                lsn: at.lsn.min(branch.lsn),
            };
        }
    }

    /// Instance `i` becomes primary: its WAL must hold every acknowledged
    /// commit.
    fn becomes_primary(&mut self, i: usize, sync: bool) {
        if sync && !self.contains(self.instances[i].position, self.acknowledged) {
            self.lost = true;
        }
        let instance = &mut self.instances[i];
        instance.role = Role::Primary;
        instance.committed = false;
    }
}

fn link_bit(a: usize, b: usize) -> u16 {
    let (a, b) = if a < b { (a, b) } else { (b, a) };
    1 << (a * 4 + b)
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    /// The environment is done for this tick: the steps begin.
    Proceed,
    Step(usize),
    Failover,
    /// A commit on `primary`, received by the standby `via`.
    Commit {
        primary: usize,
        via: usize,
    },
    Crash(usize),
    /// A clean stop of a primary: it stops writing, then releases the lease.
    Shutdown(usize),
    /// A primary's PostgreSQL hangs (frozen, its manager alive).
    Hang(usize),
    Restart(usize),
    RestartOperator,
    Cut(usize, usize),
    Isolate(usize),
    Heal(usize, usize),
}

/// How a primary's fencing memory starts after a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RestartGuard {
    /// Fenced until it renews: what the protocol requires.
    Fenced,
    /// The guard from before the restart, kept: its last renewal long past,
    /// and not fenced.
    Stale,
}

#[derive(Clone, Debug)]
struct FailoverModel {
    timing: Timing,
    rules: Rules,
    /// Synchronous replication, `ANY 1` of the other two instances.
    sync: bool,
    /// How long before a tick the verdict in force at it was reached.
    fence_lag: Duration,
    restart_guard: RestartGuard,
    max_faults: u8,
    max_heals: u8,
}

impl FailoverModel {
    fn new(sync: bool) -> FailoverModel {
        FailoverModel {
            timing: Timing::DEFAULT,
            rules: Rules::ALL,
            sync,
            // The instance manager's fence loop runs ten times a period.
            fence_lag: Timing::DEFAULT.period / 10,
            restart_guard: RestartGuard::Fenced,
            max_faults: 2,
            max_heals: 1,
        }
    }

    fn without(self, rules: Rules) -> FailoverModel {
        FailoverModel { rules, ..self }
    }

    fn timing(self, timing: Timing) -> FailoverModel {
        FailoverModel { timing, ..self }
    }

    /// The smallest budget a counterexample needs keeps its search short.
    fn budget(self, max_faults: u8, max_heals: u8) -> FailoverModel {
        FailoverModel {
            max_faults,
            max_heals,
            ..self
        }
    }

    /// Every process reaching the API server reads the lease. Reading a
    /// version an observer already saw changes nothing in it, so those reads,
    /// most of them, are skipped.
    fn observe(&self, state: &mut State) {
        let version = state.lease.version.to_string();
        let seen = |observer: &Observer| observer.version() == Some(version.as_str());
        let record = state.record(self.timing.lease);
        let now = state.now;
        for i in 0..N {
            if state.reaches_control(i) && !seen(&state.instances[i].observer) {
                state.instances[i].observer.observe(&record, now);
            }
        }
        if !seen(&state.operator) {
            state.operator.observe(&record, now);
        }
        if let Some(holder) = state.lease.holder {
            state.primary = holder;
        }
    }

    /// Instance `i`'s fence verdict as of `at`.
    fn judge(&self, state: &mut State, i: usize, at: Moment) {
        let instance = &mut state.instances[i];
        let contacts: Vec<Option<Moment>> = (0..N)
            .filter(|j| *j != i)
            .map(|j| instance.contact[j])
            .collect();
        instance.writable = instance
            .guard
            .check(&contacts, N, at, &self.timing, &self.rules)
            .allows_writes();
    }

    /// `caller` calls `callee`: each records the exchange and what the other
    /// said of its fence.
    fn exchange(&self, state: &mut State, caller: usize, callee: usize) {
        let now = state.now;
        let caller_heard = if state.instances[caller].role == Role::Primary {
            now + self.timing.request_timeout
        } else {
            now
        };
        let callee_fenced = state.instances[callee].says_fenced();
        let caller_fenced = state.instances[caller].says_fenced();
        let c = &mut state.instances[caller];
        c.contact[callee] = c.contact[callee].max(Some(caller_heard));
        c.heard_fenced[callee] = callee_fenced;
        let d = &mut state.instances[callee];
        d.contact[caller] = d.contact[caller].max(Some(now));
        d.heard_fenced[caller] = caller_fenced;
    }

    fn step(&self, state: &mut State, i: usize) {
        let now = state.now;
        if self.gives_up(state, i) {
            self.exchange_all(state, i);
            return;
        }
        if state.instances[i].role == Role::Primary && state.reaches_control(i) {
            let lease = LeaseView {
                holder: state.lease.holder.map(|h| NAMES[h]),
                released_by: state.lease.released_by.map(|r| NAMES[r]),
            };
            match claim::claim(&lease, NAMES[i], &self.rules) {
                Claim::Renew => {
                    state.lease.version += 1;
                    state.instances[i].guard.renewed(now);
                }
                Claim::Take => {
                    state.lease.version += 1;
                    state.instances[i].guard.renewed(now);
                    state.lease.holder = Some(i);
                    state.becomes_primary(i, self.sync);
                }
                Claim::StandDown { .. } => {
                    state.instances[i].guard.lost();
                    state.instances[i].role = Role::Deposed;
                    state.instances[i].writable = false;
                }
            }
        }
        let peers = self.exchange_all(state, i);
        if state.instances[i].role == Role::Primary {
            self.judge(state, i, now);
            // The answers carry the verdict of this very step.
            let fenced = state.instances[i].says_fenced();
            for j in peers {
                state.instances[j].heard_fenced[i] = fenced;
            }
        }
    }

    /// `i` calls every peer it reaches; the peers called.
    fn exchange_all(&self, state: &mut State, i: usize) -> Vec<usize> {
        let peers: Vec<usize> = (0..N)
            .filter(|j| *j != i && state.instances[*j].alive && state.linked(i, *j))
            .collect();
        for j in &peers {
            self.exchange(state, i, *j);
        }
        peers
    }

    /// The hang fence of a primary whose PostgreSQL hangs: its probe of this
    /// step got nothing ([`Pulse`]); once that makes a lease duration of
    /// silence, PostgreSQL is killed (it writes nothing more) and the lease
    /// released, as after a clean stop, while the manager runs on. Whether
    /// it gave the role up.
    fn gives_up(&self, state: &mut State, i: usize) -> bool {
        let now = state.now;
        let instance = &mut state.instances[i];
        if !instance.hung || instance.role != Role::Primary {
            return false;
        }
        instance.pulse.record(now, Probe::Silent);
        if !instance
            .pulse
            .health(now, &self.timing)
            .gives_up(&self.rules)
        {
            return false;
        }
        instance.hung = false;
        instance.pulse = Pulse::default();
        instance.writable = false;
        instance.guard.lost();
        state.hang_fenced = Some(i);
        if state.reaches_control(i) && state.lease.holder == Some(i) {
            state.lease.version += 1;
            state.lease.holder = None;
            state.lease.released_by = Some(i);
        }
        true
    }

    /// The operator's decision, and the chosen replica taking the lease.
    fn failover(&self, state: &mut State) -> Option<()> {
        let now = state.now;
        let lease_state = state.operator.state(now);
        let primary = state.primary;
        let reporting: Vec<usize> = (0..N)
            .filter(|k| *k != primary && state.reaches_control(*k))
            .collect();
        let reports: Vec<Report> = reporting
            .iter()
            .map(|k| {
                let instance = &state.instances[*k];
                let last = instance.contact[primary].unwrap_or(instance.started);
                Report {
                    silent_for: now.saturating_sub(last),
                    fenced: instance.heard_fenced[primary],
                }
            })
            .collect();
        let candidates: Vec<Candidate> = reporting
            .iter()
            .filter(|k| state.instances[**k].role == Role::Replica)
            .map(|k| {
                let position = state.instances[*k].position;
                Candidate {
                    name: NAMES[*k].to_owned(),
                    timeline: position.timeline,
                    received: position.lsn,
                    replayed: position.lsn,
                    healthy: true,
                    full: false,
                }
            })
            .collect();
        let sync = SyncQuorum {
            standbys: (0..N)
                .filter(|k| *k != primary)
                .map(|k| NAMES[k].to_owned())
                .collect(),
            min: 1,
        };
        let situation = Situation {
            lease: &lease_state,
            primary: NAMES[primary],
            members: N,
            reports: &reports,
            candidates: &candidates,
            sync: self.sync.then_some(&sync),
            delay: Duration::ZERO,
        };
        let Decision::Promote(chosen) = candidate::elect(&situation, &self.timing, &self.rules)
        else {
            return None;
        };
        let r = NAMES.iter().position(|n| *n == chosen)?;
        // `may_take` enforces the lease expiry rule a second time, where the
        // lease is taken: switching the rule off switches off both.
        let own_view = state.instances[r].observer.state(now);
        if lease::may_take(&own_view, &chosen, &self.rules).is_err() {
            return None;
        }
        state.lease.version += 1;
        state.lease.holder = Some(r);
        state.becomes_primary(r, self.sync);
        state.branches.push(state.instances[r].position);
        let timeline = state.branches.len() as u32 + 1;
        let promoted = &mut state.instances[r];
        promoted.position.timeline = timeline;
        promoted.guard = Guard::default();
        promoted.guard.renewed(now);
        self.judge(state, r, now);
        Some(())
    }

    /// A commit acknowledged once `via`, streaming from `p`, received it.
    fn commit(&self, state: &mut State, p: usize, via: usize) -> Option<()> {
        let (primary, standby) = (&state.instances[p], &state.instances[via]);
        let streams = state.lease.holder == Some(p)
            && standby.alive
            && standby.role == Role::Replica
            && state.linked(p, via)
            && state.contains(primary.position, standby.position);
        if !primary.is_writable_primary() || primary.hung || primary.committed || !streams {
            return None;
        }
        let primary = &mut state.instances[p];
        primary.position.lsn += 1;
        primary.committed = true;
        let position = primary.position;
        state.instances[via].position = position;
        state.acknowledged = position;
        Some(())
    }

    fn environment_actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, instance) in state.instances.iter().enumerate() {
            if !instance.alive {
                actions.push(Action::Restart(i));
            }
        }
        if state.faults < self.max_faults {
            for (i, instance) in state.instances.iter().enumerate() {
                if instance.alive {
                    actions.push(Action::Crash(i));
                }
                if instance.role == Role::Primary && state.reaches_control(i) {
                    actions.push(Action::Shutdown(i));
                }
                if instance.alive && instance.role == Role::Primary && !instance.hung {
                    actions.push(Action::Hang(i));
                }
            }
            actions.push(Action::RestartOperator);
            for (a, b) in LINKS {
                if state.linked(a, b) {
                    actions.push(Action::Cut(a, b));
                }
            }
            for i in 0..N {
                if (0..=N).any(|j| j != i && state.linked(i, j)) {
                    actions.push(Action::Isolate(i));
                }
            }
        }
        if state.heals < self.max_heals {
            for (a, b) in LINKS {
                if !state.linked(a, b) {
                    actions.push(Action::Heal(a, b));
                }
            }
        }
    }

    fn restart(&self, state: &mut State, i: usize) {
        let now = state.now;
        let instance = &mut state.instances[i];
        instance.alive = true;
        instance.crashed = false;
        // A restarted container runs a new PostgreSQL.
        instance.hung = false;
        instance.pulse = Pulse::default();
        instance.started = now;
        instance.contact = [None; N];
        instance.heard_fenced = [false; N];
        instance.observer = Observer::default();
        instance.guard = Guard::default();
        if self.restart_guard == RestartGuard::Stale {
            instance.guard.renewed(Duration::ZERO);
        }
        instance.writable = false;
    }
}

impl Model for FailoverModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut primary = Instance::new(Role::Primary, 1);
        primary.guard.renewed(Duration::ZERO);
        primary.writable = true;
        let mut state = State {
            now: Duration::ZERO,
            phase: Phase::Environment,
            lease: Lease {
                version: 1,
                holder: Some(0),
                released_by: None,
            },
            instances: [
                primary,
                Instance::new(Role::Replica, 0),
                Instance::new(Role::Replica, 1),
            ],
            primary: 0,
            operator: Observer::default(),
            branches: Vec::new(),
            acknowledged: Position {
                timeline: 1,
                lsn: 1,
            },
            cut: 0,
            faults: 0,
            heals: 0,
            lost: false,
            hang_fenced: None,
        };
        self.observe(&mut state);
        vec![state]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        match state.phase {
            Phase::Environment => {
                actions.push(Action::Proceed);
                self.environment_actions(state, actions);
            }
            Phase::Steps(k) if k < N => {
                actions.push(Action::Step(k));
                actions.push(Action::Failover);
            }
            Phase::Steps(_) => {
                if state.now < TICK * HORIZON {
                    actions.push(Action::Tick);
                }
                actions.push(Action::Failover);
                for (p, instance) in state.instances.iter().enumerate() {
                    if self.sync && instance.is_writable_primary() && !instance.committed {
                        for via in (0..N).filter(|via| *via != p) {
                            actions.push(Action::Commit { primary: p, via });
                        }
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => {
                state.now += TICK;
                state.phase = Phase::Environment;
                let judged_at = state.now.saturating_sub(self.fence_lag);
                for i in 0..N {
                    let instance = &state.instances[i];
                    if instance.alive && instance.role == Role::Primary {
                        self.judge(&mut state, i, judged_at);
                    }
                }
            }
            Action::Proceed => state.phase = Phase::Steps(0),
            Action::Step(i) => {
                if state.instances[i].alive {
                    self.step(&mut state, i);
                }
                state.phase = Phase::Steps(i + 1);
            }
            Action::Failover => self.failover(&mut state)?,
            Action::Commit { primary, via } => self.commit(&mut state, primary, via)?,
            Action::Crash(i) => {
                state.instances[i].alive = false;
                state.instances[i].crashed = true;
                state.faults += 1;
            }
            Action::Shutdown(i) => {
                state.instances[i].alive = false;
                state.instances[i].writable = false;
                if state.lease.holder == Some(i) {
                    state.lease.version += 1;
                    state.lease.holder = None;
                    state.lease.released_by = Some(i);
                }
                state.faults += 1;
            }
            Action::Hang(i) => {
                // It answered the probe just before.
                let now = state.now;
                let instance = &mut state.instances[i];
                instance.hung = true;
                instance.pulse = Pulse::default();
                instance.pulse.record(now, Probe::Ready);
                state.faults += 1;
            }
            Action::Restart(i) => self.restart(&mut state, i),
            Action::RestartOperator => {
                state.operator = Observer::default();
                state.faults += 1;
            }
            Action::Cut(a, b) => {
                state.cut |= link_bit(a, b);
                state.faults += 1;
            }
            Action::Isolate(i) => {
                for j in (0..=N).filter(|j| *j != i) {
                    state.cut |= link_bit(i, j);
                }
                state.faults += 1;
            }
            Action::Heal(a, b) => {
                state.cut &= !link_bit(a, b);
                state.heals += 1;
            }
        }
        self.observe(&mut state);
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(SPLIT_BRAIN, |_, state: &State| {
                state
                    .instances
                    .iter()
                    .filter(|i| i.is_writable_primary())
                    .count()
                    <= 1
            }),
            Property::always(LOST_COMMIT, |_, state: &State| !state.lost),
            Property::sometimes(FAILOVER, |_, state: &State| {
                state.instances[0].crashed
                    && state.instances[1..]
                        .iter()
                        .any(Instance::is_writable_primary)
            }),
            Property::sometimes(HANG_FAILOVER, |_, state: &State| {
                state.hang_fenced == Some(0)
                    && state.instances[1..]
                        .iter()
                        .any(Instance::is_writable_primary)
            }),
            Property::sometimes(KEPT_COMMITS, |model: &Self, state: &State| {
                model.sync
                    && !state.lost
                    && state.acknowledged.timeline > 1
                    && state.instances[1..]
                        .iter()
                        .any(Instance::is_writable_primary)
            }),
        ]
    }
}

/// Checks `model` breadth first, stopping once `stop_at` is discovered.
fn check(
    label: &str,
    model: FailoverModel,
    stop_at: Option<&'static str>,
) -> impl Checker<FailoverModel> {
    let started = Instant::now();
    let mut builder = model.checker();
    if let Some(name) = stop_at {
        builder = builder.finish_when(HasDiscoveries::AnyOf(BTreeSet::from([name])));
    }
    let checker = builder.spawn_bfs().join();
    eprintln!(
        "{label}: {} states ({} unique), depth {}, {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    checker
}

fn node(i: usize) -> &'static str {
    NAMES.get(i).copied().unwrap_or("control plane")
}

/// One step of a path, for people.
fn describe_step(before: &State, action: &Action, after: &State) -> Option<String> {
    Some(match action {
        Action::Tick | Action::Proceed => return None,
        Action::Step(i) => {
            let instance = &after.instances[*i];
            let verdict = match instance.role {
                _ if !instance.alive => return None,
                Role::Primary if before.instances[*i].hung && !instance.hung => {
                    " (PostgreSQL hung a lease duration: killed, lease released)"
                }
                Role::Primary
                    if before.lease.holder.is_none() && after.lease.holder == Some(*i) =>
                {
                    " (takes the released lease)"
                }
                Role::Primary if instance.writable => " (writable)",
                Role::Primary => " (fenced)",
                Role::Deposed if before.instances[*i].role == Role::Primary => " (deposed)",
                Role::Deposed | Role::Replica => "",
            };
            format!("{} steps{verdict}", node(*i))
        }
        Action::Failover => match after.lease.holder {
            Some(r) => format!("operator promotes {}", node(r)),
            None => "operator fails over".to_owned(),
        },
        Action::Commit { primary, via } => {
            format!("{} commits, {} acknowledges", node(*primary), node(*via))
        }
        Action::Crash(i) => format!("{} crashes", node(*i)),
        Action::Shutdown(i) => format!("{} shuts down, releasing the lease", node(*i)),
        Action::Hang(i) => format!("{}'s PostgreSQL hangs", node(*i)),
        Action::Restart(i) => format!("{} restarts", node(*i)),
        Action::RestartOperator => "operator restarts".to_owned(),
        Action::Cut(a, b) => format!("{} | {} cut", node(*a), node(*b)),
        Action::Isolate(i) => format!("{} isolated", node(*i)),
        Action::Heal(a, b) => format!("{} | {} healed", node(*a), node(*b)),
    })
}

/// Whether `state` is what the discovery of `name` looks for.
fn found(model: &FailoverModel, name: &'static str, state: &State) -> bool {
    let property = model.property(name);
    let holds = (property.condition)(model, state);
    match property.expectation {
        Expectation::Sometimes => holds,
        Expectation::Always | Expectation::Eventually => !holds,
    }
}

/// The states `actions` go through from the initial state, up to the first
/// one `name` looks for; `None` if an action is not enabled on the way or
/// the path never gets there.
fn replay(model: &FailoverModel, name: &'static str, actions: &[Action]) -> Option<Vec<State>> {
    let mut states = model.init_states();
    states.truncate(1);
    for action in actions {
        let last = states.last()?;
        if found(model, name, last) {
            return Some(states);
        }
        let mut enabled = Vec::new();
        model.actions(last, &mut enabled);
        if !enabled.contains(action) {
            return None;
        }
        let next = model.next_state(last, action.clone())?;
        states.push(next);
    }
    states
        .last()
        .is_some_and(|last| found(model, name, last))
        .then_some(states)
}

/// A discovery for `name` with every fault, heal and restart it does not
/// need left out (breadth-first search finds a shortest path, but free
/// restarts ride along), one line per tick.
fn describe(model: &FailoverModel, name: &'static str, mut actions: Vec<Action>) -> String {
    let Some(mut states) = replay(model, name, &actions) else {
        return format!("(not replayable) {actions:?}");
    };
    let mut i = 0;
    while i < actions.len() {
        let optional = !matches!(
            actions[i],
            Action::Tick | Action::Proceed | Action::Step(_) | Action::Failover
        );
        let mut fewer = actions.clone();
        fewer.remove(i);
        match replay(model, name, &fewer).filter(|_| optional) {
            // An event may have been needed only by one removed since.
            Some(shorter) => (actions, states, i) = (fewer, shorter, 0),
            None => i += 1,
        }
    }
    let mut ticks: Vec<(Moment, Vec<String>)> = Vec::new();
    for (pair, action) in states.windows(2).zip(&actions) {
        let (before, after) = (&pair[0], &pair[1]);
        if let Some(step) = describe_step(before, action, after) {
            match ticks.last_mut() {
                Some((at, steps)) if *at == before.now => steps.push(step),
                _ => ticks.push((before.now, vec![step])),
            }
        }
    }
    let lines: Vec<String> = ticks
        .into_iter()
        .map(|(at, steps)| format!("t={}s: {}", at.as_secs(), steps.join(", ")))
        .collect();
    lines.join("\n  ")
}

/// Asserts that `model` violates `property`, and prints how.
fn assert_counterexample(label: &str, model: FailoverModel, property: &'static str) {
    let checker = check(label, model, Some(property));
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("{label}: no counterexample to `{property}`"));
    let steps = describe(checker.model(), property, path.into_actions());
    eprintln!("{label}: counterexample to `{property}`:\n  {steps}");
}

fn assert_safe_and_live(label: &str, model: FailoverModel) {
    let sync = model.sync;
    let checker = check(label, model, None);
    for property in [SPLIT_BRAIN, LOST_COMMIT] {
        if let Some(path) = checker.discovery(property) {
            let steps = describe(checker.model(), property, path.into_actions());
            panic!("{label}: `{property}` violated:\n  {steps}");
        }
    }
    let path = checker
        .discovery(FAILOVER)
        .unwrap_or_else(|| panic!("{label}: no failover after a crash is reachable"));
    let steps = describe(checker.model(), FAILOVER, path.into_actions());
    eprintln!("{label}: `{FAILOVER}`, for one:\n  {steps}");
    let path = checker
        .discovery(HANG_FAILOVER)
        .unwrap_or_else(|| panic!("{label}: no failover after a hang is reachable"));
    let steps = describe(checker.model(), HANG_FAILOVER, path.into_actions());
    eprintln!("{label}: `{HANG_FAILOVER}`, for one:\n  {steps}");
    if sync {
        assert!(
            checker.discovery(KEPT_COMMITS).is_some(),
            "{label}: no failover keeping the acknowledged commit is reachable"
        );
    }
}

#[test]
fn with_every_rule_synchronous_replication_is_safe_and_fails_over() {
    assert_safe_and_live("sync, all rules", FailoverModel::new(true));
}

#[test]
fn with_every_rule_asynchronous_replication_is_safe_and_fails_over() {
    assert_safe_and_live("async, all rules", FailoverModel::new(false));
}

/// A primary that still renews but lost its peers: the replicas confirm it
/// gone, and without the lease check a replica takes the lease while the
/// primary's last renewal still covers it.
#[test]
fn without_lease_expiry_a_renewing_primary_cut_off_from_its_peers_is_replaced() {
    let model = FailoverModel::new(false)
        .without(Rules {
            lease_expiry: false,
            ..Rules::ALL
        })
        .budget(2, 0);
    assert_counterexample("no lease_expiry", model, SPLIT_BRAIN);
}

/// A primary cut off from the API server keeps serving through its peers
/// (failsafe); its lease expires, and without confirmations a replica is
/// promoted beside it.
#[test]
fn without_confirmations_a_primary_serving_a_majority_is_replaced() {
    let model = FailoverModel::new(false)
        .without(Rules {
            confirmations: false,
            ..Rules::ALL
        })
        .budget(1, 0);
    assert_counterexample("no confirmations", model, SPLIT_BRAIN);
}

/// The primary shuts down cleanly, releasing the lease (so no confirmations
/// are awaited), and `pg-2`, the only standby holding the acknowledged
/// commit, cannot answer: without the sync quorum `pg-1` is promoted.
#[test]
fn without_the_sync_quorum_a_standby_missing_a_commit_is_promoted() {
    let model = FailoverModel::new(true)
        .without(Rules {
            sync_quorum: false,
            ..Rules::ALL
        })
        .budget(2, 0);
    assert_counterexample("no sync_quorum", model, LOST_COMMIT);
}

/// An isolated primary that does not fence goes on writing after its lease
/// expired and a replica was promoted.
#[test]
fn without_self_fencing_an_isolated_primary_keeps_writing() {
    let model = FailoverModel::new(false)
        .without(Rules {
            self_fence: false,
            ..Rules::ALL
        })
        .budget(1, 0);
    assert_counterexample("no self_fence", model, SPLIT_BRAIN);
}

/// An isolated primary fences, a replica is promoted, then a peer link
/// heals while the API server is still out of reach: the old primary counts
/// a majority again and, without a sticky fence, writes again.
#[test]
fn without_a_sticky_fence_a_primary_that_regains_its_peers_writes_again() {
    let model = FailoverModel::new(false)
        .without(Rules {
            sticky_fence: false,
            ..Rules::ALL
        })
        .budget(1, 1);
    assert_counterexample("no sticky_fence", model, SPLIT_BRAIN);
}

/// Both standbys answer once the primary stopped, and without
/// `most_advanced` the first listed, lagging one is promoted.
#[test]
fn without_most_advanced_a_lagging_standby_is_promoted() {
    let model = FailoverModel::new(true)
        .without(Rules {
            most_advanced: false,
            ..Rules::ALL
        })
        .budget(1, 0);
    assert_counterexample("no most_advanced", model, LOST_COMMIT);
}

/// A primary relying on its renewal for as long as the lease lasts is still
/// writing when observers see the lease expire (its fence check lags).
#[test]
fn a_fence_as_late_as_the_lease_lets_two_primaries_write() {
    let timing = Timing {
        renew_deadline: Timing::DEFAULT.lease,
        ..Timing::DEFAULT
    };
    assert!(!timing.is_safe());
    let model = FailoverModel::new(false).timing(timing).budget(1, 0);
    assert_counterexample("late fence", model, SPLIT_BRAIN);
}

/// Replicas confirming the primary gone while it still counts them reached,
/// the answer it counts having left them a request timeout earlier.
#[test]
fn replicas_confirming_inside_the_contact_window_let_two_primaries_write() {
    let timing = Timing {
        gone_after: Duration::from_secs(3),
        ..Timing::DEFAULT
    };
    assert!(!timing.is_safe());
    let model = FailoverModel::new(false).timing(timing).budget(2, 0);
    assert_counterexample("eager confirmations", model, SPLIT_BRAIN);
}

/// `Timing::is_safe` leaves out how long a failsafe verdict stays in force:
/// judged once a period instead of ten times, the default timing lets a
/// primary serve on an answer `contact_window` old, received
/// `request_timeout` after the replica sent it, for one more period, past
/// the moment the replica confirms it gone.
#[test]
fn a_fence_judged_once_a_period_outlives_the_replicas_patience() {
    let timing = Timing::DEFAULT;
    assert!(timing.contact_window + timing.request_timeout + timing.period > timing.gone_after);
    let model = FailoverModel {
        fence_lag: timing.period,
        ..FailoverModel::new(false).budget(2, 0)
    };
    assert_counterexample("fence once a period", model, SPLIT_BRAIN);
}

/// A guard kept across a restart is not fenced: a primary restarting with it,
/// unable to renew but reaching its peers, serves in failsafe beside the
/// replica promoted meanwhile. (`Guard::default()` starts fenced.)
#[test]
fn a_primary_restarting_with_a_stale_guard_serves_without_the_lease() {
    let model = FailoverModel {
        restart_guard: RestartGuard::Stale,
        ..FailoverModel::new(false).budget(2, 0)
    };
    assert_counterexample("stale guard on restart", model, SPLIT_BRAIN);
}

/// A released lease says nothing of who was primary last: without
/// `releaser_retakes`, the former primary, restarting after the replica
/// promoted in its place acknowledged a commit and shut down in turn, takes
/// the lease back and serves the old timeline without that commit.
#[test]
fn a_former_primary_taking_a_released_lease_back_loses_commits() {
    let model = FailoverModel::new(true)
        .without(Rules {
            releaser_retakes: false,
            ..Rules::ALL
        })
        .budget(2, 0);
    assert_counterexample("released lease taken back", model, LOST_COMMIT);
}

/// A primary whose PostgreSQL hangs goes on renewing its lease: without the
/// hang fence nothing replaces it, ever (the lease never expires, its peers
/// hear from its manager), and writes stall for as long as the hang lasts.
#[test]
fn without_the_hang_fence_a_hung_primary_is_never_replaced() {
    let rules = Rules {
        hang_fence: false,
        ..Rules::ALL
    };
    let model = FailoverModel::new(true).without(rules).budget(1, 0);
    let checker = check("no hang_fence", model, None);
    assert!(
        checker.discovery(HANG_FAILOVER).is_none(),
        "no hang_fence: a hung primary was replaced"
    );
    // With the rule, the same budget reaches it.
    let checker = check(
        "hang_fence",
        FailoverModel::new(true).budget(1, 0),
        Some(HANG_FAILOVER),
    );
    assert!(checker.discovery(HANG_FAILOVER).is_some());
}
