//! `GET /metrics` of the instance manager: PostgreSQL as seen from inside its
//! pod, queried at scrape time.
//!
//! Every series is prefixed `tusk_pg_` and carries only the labels that tell
//! its own series apart (`role`, `state`, `standby`, `datname`). Which pod,
//! namespace and Database a scrape came from are target labels, set by the
//! PodMonitor (config/monitoring/podmonitor.yaml) from the pod's metadata.
//!
//! The endpoint answers 200 whatever PostgreSQL's state: `tusk_pg_up 0` is the
//! answer when it does not respond, so the target stays up and the alert can
//! say which of the two is down.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::{Registry, Unit};
use tokio::time::{Instant, timeout_at};
use tokio_postgres::Client;

use crate::telemetry::metrics::{Exposition, exposition};

use super::Shared;
use super::sql;
use crate::contract::Role;

/// The whole scrape, connection included, ends within this: well inside
/// Prometheus' default scrape timeout of 10 s, and a PostgreSQL that takes
/// longer to answer a handful of catalog queries is not healthy.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(3);

/// Connection states of client backends in `pg_stat_activity`; each is always
/// reported (0 included), so a state nobody is in reads 0 instead of vanishing.
const CONNECTION_STATES: [&str; 6] = [
    "active",
    "idle",
    "idle in transaction",
    "idle in transaction (aborted)",
    "fastpath function call",
    "disabled",
];

/// What one scrape found. `role` is `None` when PostgreSQL did not answer; the
/// other parts are empty when it did not answer them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub role: Option<Role>,
    pub max_connections: Option<i64>,
    /// Client connections by `pg_stat_activity.state`.
    pub connections: BTreeMap<String, i64>,
    /// `max(age(datfrozenxid))` over all databases.
    pub xid_age: Option<i64>,
    /// `pg_database_size` by database name (templates left out).
    pub database_sizes: BTreeMap<String, i64>,
    pub archiver: Option<Archiver>,
    /// On a replica: how far its replay is behind.
    pub replica_lag: Option<ReplicaLag>,
    /// On a primary: its standbys as `pg_stat_replication` shows them.
    pub standbys: Vec<Standby>,
}

/// `pg_stat_archiver`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Archiver {
    pub archived: i64,
    pub failed: i64,
    /// Unix seconds; `None` before the first success.
    pub last_archived: Option<f64>,
    /// Unix seconds; `None` before the first failure.
    pub last_failed: Option<f64>,
}

/// A replica's own view of its lag.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplicaLag {
    /// WAL received but not replayed yet.
    pub bytes: Option<i64>,
    /// Time since the last replayed transaction committed on the primary; 0
    /// while streaming with everything received replayed.
    pub seconds: Option<f64>,
}

/// One row of `pg_stat_replication` on a primary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Standby {
    /// `application_name`: the standby's instance name.
    pub name: String,
    /// The primary's current WAL position minus the standby's replay position.
    pub lag_bytes: Option<i64>,
    pub lag_seconds: Option<f64>,
}

#[derive(Debug, thiserror::Error)]
enum ScrapeError {
    #[error("{0} did not finish within the scrape timeout")]
    Timeout(&'static str),
    #[error("{context} failed: {source}")]
    Sql {
        context: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
}

/// Runs `query` unless `deadline` passes first.
async fn within<T>(
    deadline: Instant,
    context: &'static str,
    query: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, ScrapeError> {
    match timeout_at(deadline, query).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(ScrapeError::Sql { context, source }),
        Err(_) => Err(ScrapeError::Timeout(context)),
    }
}

/// How long one sample answers every scrape. `/metrics` needs no credentials,
/// so without this each request would open a superuser connection: a burst
/// could take the connection slots applications and the manager need.
const SAMPLE_REUSE: Duration = Duration::from_secs(1);

/// One scrape of PostgreSQL at a time, its result reused for [`SAMPLE_REUSE`].
#[derive(Default)]
pub struct SampleCache(tokio::sync::Mutex<Option<(Instant, Sample)>>);

impl SampleCache {
    /// The cached sample when fresh, else a new one from `take` (callers
    /// arriving meanwhile wait for it instead of connecting too).
    pub async fn get_or_take<F>(&self, take: impl FnOnce() -> F) -> Sample
    where
        F: Future<Output = Sample>,
    {
        let mut cached = self.0.lock().await;
        if let Some((at, sample)) = cached.as_ref()
            && at.elapsed() < SAMPLE_REUSE
        {
            return sample.clone();
        }
        let sample = take().await;
        *cached = Some((Instant::now(), sample.clone()));
        sample
    }
}

/// The `/metrics` handler.
pub(crate) async fn serve(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let sample = shared
        .metrics
        .get_or_take(|| scrape(&shared.config.socket_dir, shared.config.port))
        .await;
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    match encode(&sample, accept) {
        Ok(Exposition { content_type, body }) => {
            (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {err}"),
        )
            .into_response(),
    }
}

/// Queries the local PostgreSQL. Never fails: what could not be learnt is left
/// out of the sample (and logged), and no answer at all is `role: None`.
pub async fn scrape(socket_dir: &Path, port: u16) -> Sample {
    let deadline = Instant::now() + SCRAPE_TIMEOUT;
    let mut sample = Sample::default();
    let client = match within(deadline, "connecting", sql::connect_local(socket_dir, port)).await {
        Ok(client) => client,
        Err(err) => {
            // Expected while PostgreSQL starts, stops or clones: not a warning.
            tracing::debug!(error = %err, "metrics: PostgreSQL does not answer");
            return sample;
        }
    };
    if let Err(err) = collect(&client, deadline, &mut sample).await {
        if sample.role.is_some() {
            tracing::warn!(error = %err, "metrics: part of the scrape failed");
        } else {
            tracing::debug!(error = %err, "metrics: PostgreSQL does not answer");
        }
    }
    sample
}

async fn collect(
    client: &Client,
    deadline: Instant,
    sample: &mut Sample,
) -> Result<(), ScrapeError> {
    // The statement timeout ends the backend's work when the scrape gives up:
    // dropping a query future does not cancel the query on the server.
    let row = within(
        deadline,
        "the first query",
        client.query_one(
            "SELECT set_config('statement_timeout', '3s', false), \
                    pg_is_in_recovery(), \
                    current_setting('max_connections')::bigint",
            &[],
        ),
    )
    .await?;
    let in_recovery: bool = row.try_get(1).map_err(sql("the first query"))?;
    sample.role = Some(if in_recovery {
        Role::Replica
    } else {
        Role::Primary
    });
    sample.max_connections = Some(row.try_get(2).map_err(sql("the first query"))?);

    // Client backends only (walsenders have their own limit), and not this
    // scrape's own session.
    let rows = within(
        deadline,
        "counting connections",
        client.query(
            "SELECT COALESCE(state, 'unknown'), count(*) FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() \
             GROUP BY 1",
            &[],
        ),
    )
    .await?;
    let mut connections: BTreeMap<String, i64> = CONNECTION_STATES
        .iter()
        .map(|state| ((*state).to_owned(), 0))
        .collect();
    for row in rows {
        let state: String = row.try_get(0).map_err(sql("counting connections"))?;
        connections.insert(state, row.try_get(1).map_err(sql("counting connections"))?);
    }
    sample.connections = connections;

    collect_storage(client, deadline, sample).await?;
    collect_replication(client, deadline, in_recovery, sample).await
}

/// Transaction ID age, database sizes and the WAL archiver.
async fn collect_storage(
    client: &Client,
    deadline: Instant,
    sample: &mut Sample,
) -> Result<(), ScrapeError> {
    let row = within(
        deadline,
        "reading transaction ID age",
        client.query_one(
            "SELECT max(age(datfrozenxid))::bigint FROM pg_database",
            &[],
        ),
    )
    .await?;
    sample.xid_age = row.try_get(0).map_err(sql("reading transaction ID age"))?;

    let rows = within(
        deadline,
        "reading database sizes",
        client.query(
            "SELECT datname::text, pg_database_size(oid) FROM pg_database \
             WHERE NOT datistemplate",
            &[],
        ),
    )
    .await?;
    for row in rows {
        sample.database_sizes.insert(
            row.try_get(0).map_err(sql("reading database sizes"))?,
            row.try_get(1).map_err(sql("reading database sizes"))?,
        );
    }

    let row = within(
        deadline,
        "reading pg_stat_archiver",
        client.query_one(
            "SELECT archived_count, failed_count, \
                    EXTRACT(EPOCH FROM last_archived_time)::float8, \
                    EXTRACT(EPOCH FROM last_failed_time)::float8 \
             FROM pg_stat_archiver",
            &[],
        ),
    )
    .await?;
    sample.archiver = Some(Archiver {
        archived: row.try_get(0).map_err(sql("reading pg_stat_archiver"))?,
        failed: row.try_get(1).map_err(sql("reading pg_stat_archiver"))?,
        last_archived: row.try_get(2).map_err(sql("reading pg_stat_archiver"))?,
        last_failed: row.try_get(3).map_err(sql("reading pg_stat_archiver"))?,
    });
    Ok(())
}

/// A replica's lag, or a primary's standbys.
async fn collect_replication(
    client: &Client,
    deadline: Instant,
    in_recovery: bool,
    sample: &mut Sample,
) -> Result<(), ScrapeError> {
    if in_recovery {
        // now() - pg_last_xact_replay_timestamp() alone grows without bound
        // while the primary is idle; a replica that streams and has replayed
        // all it received is not behind. One that does not stream is behind by
        // at least the time since its last replayed commit.
        let row = within(
            deadline,
            "reading the replica's lag",
            client.query_one(
                // GREATEST skips NULLs: without the CASE, a replica that has
                // received nothing yet would report no lag at all.
                "SELECT CASE WHEN pg_last_wal_receive_lsn() IS NULL THEN NULL \
                             ELSE GREATEST(pg_wal_lsn_diff(pg_last_wal_receive_lsn(), \
                                                           pg_last_wal_replay_lsn()), 0)::bigint \
                        END, \
                        CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() \
                                  AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver \
                                              WHERE status = 'streaming') \
                             THEN 0 \
                             ELSE EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())::float8 \
                        END",
                &[],
            ),
        )
        .await?;
        sample.replica_lag = Some(ReplicaLag {
            bytes: row.try_get(0).map_err(sql("reading the replica's lag"))?,
            seconds: row.try_get(1).map_err(sql("reading the replica's lag"))?,
        });
    } else {
        // `replay_lag` turns NULL once a standby has caught up and the primary
        // is idle: that is a lag of 0, when its replay position says so.
        // pg_basebackup's walsenders (state `backup`) are not standbys.
        let rows = within(
            deadline,
            "reading pg_stat_replication",
            client.query(
                "SELECT application_name, \
                        pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint, \
                        CASE WHEN replay_lag IS NOT NULL THEN EXTRACT(EPOCH FROM replay_lag)::float8 \
                             WHEN replay_lsn = pg_current_wal_lsn() THEN 0 \
                        END \
                 FROM pg_stat_replication WHERE state <> 'backup' ORDER BY 1",
                &[],
            ),
        )
        .await?;
        for row in rows {
            sample.standbys.push(Standby {
                name: row.try_get(0).map_err(sql("reading pg_stat_replication"))?,
                lag_bytes: row.try_get(1).map_err(sql("reading pg_stat_replication"))?,
                lag_seconds: row.try_get(2).map_err(sql("reading pg_stat_replication"))?,
            });
        }
    }
    Ok(())
}

fn sql(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> ScrapeError {
    move |source| ScrapeError::Sql { context, source }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabels {
    role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StandbyLabels {
    standby: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DatabaseLabels {
    datname: String,
}

type GaugeF64 = Gauge<f64, AtomicU64>;

/// Encodes `sample` as the client's `Accept` header asks (see
/// [`crate::telemetry::metrics::exposition`]). A series is only present when
/// its value is known: a counter that went missing for one scrape would read
/// as a reset.
pub fn encode(sample: &Sample, accept: Option<&str>) -> Result<Exposition, std::fmt::Error> {
    let mut registry = Registry::with_prefix("tusk_pg");
    registry.register(
        "up",
        "1 when PostgreSQL answers a query",
        ConstGauge::new(i64::from(sample.role.is_some())),
    );
    let roles = Family::<RoleLabels, Gauge>::default();
    for (role, name) in [(Role::Primary, "primary"), (Role::Replica, "replica")] {
        roles
            .get_or_create(&RoleLabels { role: name })
            .set(i64::from(sample.role == Some(role)));
    }
    registry.register(
        "role",
        "1 for the role PostgreSQL runs in (primary or replica); both 0 when it does not answer",
        roles,
    );

    register_replication(&mut registry, sample);
    register_archiver(&mut registry, sample);
    register_activity(&mut registry, sample);
    exposition(&registry, accept)
}

/// A replica's lag, or a primary's standbys' lag.
fn register_replication(registry: &mut Registry, sample: &Sample) {
    if let Some(lag) = &sample.replica_lag {
        if let Some(bytes) = lag.bytes {
            registry.register_with_unit(
                "replication_lag",
                "On a replica: WAL received but not yet replayed",
                Unit::Bytes,
                ConstGauge::new(bytes),
            );
        }
        if let Some(seconds) = lag.seconds {
            registry.register_with_unit(
                "replication_lag",
                "On a replica: time since the last replayed transaction committed on the primary; 0 while streaming with all received WAL replayed",
                Unit::Seconds,
                ConstGauge::new(seconds),
            );
        }
    }
    if !sample.standbys.is_empty() {
        let bytes = Family::<StandbyLabels, Gauge>::default();
        let seconds = Family::<StandbyLabels, GaugeF64>::default();
        for standby in &sample.standbys {
            let labels = StandbyLabels {
                standby: standby.name.clone(),
            };
            if let Some(lag) = standby.lag_bytes {
                bytes.get_or_create(&labels).set(lag);
            }
            if let Some(lag) = standby.lag_seconds {
                seconds.get_or_create(&labels).set(lag);
            }
        }
        registry.register_with_unit(
            "standby_replay_lag",
            "On a primary: WAL written here and not yet replayed by each standby (application_name)",
            Unit::Bytes,
            bytes,
        );
        registry.register_with_unit(
            "standby_replay_lag",
            "On a primary: replay lag of each standby (application_name) as pg_stat_replication measures it",
            Unit::Seconds,
            seconds,
        );
    }
}

/// `pg_stat_archiver`.
fn register_archiver(registry: &mut Registry, sample: &Sample) {
    if let Some(archiver) = &sample.archiver {
        registry.register(
            "wal_archived",
            "WAL files archived (pg_stat_archiver.archived_count)",
            ConstCounter::new(u64::try_from(archiver.archived).unwrap_or(0)),
        );
        registry.register(
            "wal_archive_failures",
            "Failed attempts to archive a WAL file (pg_stat_archiver.failed_count)",
            ConstCounter::new(u64::try_from(archiver.failed).unwrap_or(0)),
        );
        registry.register_with_unit(
            "wal_archive_last_success_timestamp",
            "When a WAL file was last archived, in Unix seconds; 0 when none has been",
            Unit::Seconds,
            ConstGauge::new(archiver.last_archived.unwrap_or(0.0)),
        );
        registry.register_with_unit(
            "wal_archive_last_failure_timestamp",
            "When archiving a WAL file last failed, in Unix seconds; 0 when it never has",
            Unit::Seconds,
            ConstGauge::new(archiver.last_failed.unwrap_or(0.0)),
        );
    }
}

/// Connections, their limit, transaction ID age and database sizes.
fn register_activity(registry: &mut Registry, sample: &Sample) {
    if !sample.connections.is_empty() {
        let connections = Family::<StateLabels, Gauge>::default();
        for (state, count) in &sample.connections {
            connections
                .get_or_create(&StateLabels {
                    state: state.clone(),
                })
                .set(*count);
        }
        registry.register(
            "connections",
            "Client connections by state (pg_stat_activity), this scrape's own excluded",
            connections,
        );
    }
    if let Some(max) = sample.max_connections {
        registry.register(
            "max_connections",
            "The max_connections setting",
            ConstGauge::new(max),
        );
    }
    if let Some(age) = sample.xid_age {
        registry.register(
            "xid_age",
            "Transactions since the oldest unfrozen transaction ID of any database, max(age(datfrozenxid)); writes stop near 2^31",
            ConstGauge::new(age),
        );
    }
    if !sample.database_sizes.is_empty() {
        let sizes = Family::<DatabaseLabels, Gauge>::default();
        for (datname, size) in &sample.database_sizes {
            sizes
                .get_or_create(&DatabaseLabels {
                    datname: datname.clone(),
                })
                .set(*size);
        }
        registry.register_with_unit(
            "database_size",
            "Size of each database (pg_database_size), templates left out",
            Unit::Bytes,
            sizes,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn primary() -> Sample {
        Sample {
            role: Some(Role::Primary),
            max_connections: Some(100),
            connections: BTreeMap::from([("active".into(), 2), ("idle".into(), 0)]),
            xid_age: Some(1234),
            database_sizes: BTreeMap::from([("app".into(), 7_500_000)]),
            archiver: Some(Archiver {
                archived: 5,
                failed: 1,
                last_archived: Some(1_700_000_100.25),
                last_failed: None,
            }),
            replica_lag: None,
            standbys: vec![Standby {
                name: "orders-2".into(),
                lag_bytes: Some(0),
                lag_seconds: None,
            }],
        }
    }

    fn text(sample: &Sample) -> String {
        encode(sample, None).expect("encodes").body
    }

    #[test]
    fn a_primary_reports_role_standbys_archiving_connections_and_sizes() {
        let body = text(&primary());
        for line in [
            "tusk_pg_up 1\n",
            "tusk_pg_role{role=\"primary\"} 1\n",
            "tusk_pg_role{role=\"replica\"} 0\n",
            "tusk_pg_standby_replay_lag_bytes{standby=\"orders-2\"} 0\n",
            "tusk_pg_wal_archived_total 5\n",
            "tusk_pg_wal_archive_failures_total 1\n",
            "tusk_pg_wal_archive_last_success_timestamp_seconds 1700000100.25\n",
            "tusk_pg_wal_archive_last_failure_timestamp_seconds 0.0\n",
            "tusk_pg_connections{state=\"active\"} 2\n",
            "tusk_pg_connections{state=\"idle\"} 0\n",
            "tusk_pg_max_connections 100\n",
            "tusk_pg_xid_age 1234\n",
            "tusk_pg_database_size_bytes{datname=\"app\"} 7500000\n",
            "# TYPE tusk_pg_wal_archived_total counter\n",
        ] {
            assert!(body.contains(line), "missing {line:?} in\n{body}");
        }
        // A standby whose replay lag is unknown has no seconds series, and a
        // primary has no replica-side lag.
        assert!(
            !body.contains("tusk_pg_standby_replay_lag_seconds{"),
            "{body}"
        );
        assert!(!body.contains("tusk_pg_replication_lag"), "{body}");
    }

    #[test]
    fn a_replica_reports_its_own_lag() {
        let sample = Sample {
            role: Some(Role::Replica),
            replica_lag: Some(ReplicaLag {
                bytes: Some(4096),
                seconds: Some(1.5),
            }),
            standbys: Vec::new(),
            ..primary()
        };
        let body = text(&sample);
        assert!(
            body.contains("tusk_pg_role{role=\"replica\"} 1\n"),
            "{body}"
        );
        assert!(
            body.contains("tusk_pg_replication_lag_bytes 4096\n"),
            "{body}"
        );
        assert!(
            body.contains("tusk_pg_replication_lag_seconds 1.5\n"),
            "{body}"
        );
        assert!(!body.contains("tusk_pg_standby_replay_lag"), "{body}");
    }

    #[test]
    fn a_postgres_that_does_not_answer_is_up_0_with_no_guessed_values() {
        let body = text(&Sample::default());
        assert!(body.contains("tusk_pg_up 0\n"), "{body}");
        assert!(
            body.contains("tusk_pg_role{role=\"primary\"} 0\n"),
            "{body}"
        );
        assert!(
            body.contains("tusk_pg_role{role=\"replica\"} 0\n"),
            "{body}"
        );
        // Counters absent rather than 0: a 0 would read as a reset.
        for absent in ["wal_archived", "connections", "xid_age", "database_size"] {
            assert!(!body.contains(absent), "{absent} in\n{body}");
        }
    }

    #[test]
    fn prometheus_asks_for_and_gets_openmetrics() {
        let om = encode(
            &primary(),
            Some("application/openmetrics-text;version=1.0.0"),
        )
        .expect("encodes");
        assert!(om.content_type.starts_with("application/openmetrics-text"));
        assert!(
            om.body
                .contains("# UNIT tusk_pg_database_size_bytes bytes\n")
        );
        assert!(om.body.ends_with("# EOF\n"));
    }

    #[tokio::test]
    async fn scraping_a_socket_nobody_listens_on_is_up_0() {
        let dir = std::env::temp_dir().join(format!("tusk-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let sample = scrape(&dir, 1).await;
        assert_eq!(sample, Sample::default());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[tokio::test]
    async fn scrapes_in_a_burst_share_one_sample() {
        let cache = SampleCache::default();
        let taken = std::sync::atomic::AtomicUsize::new(0);
        let take = || async {
            taken.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Sample::default()
        };
        let samples = futures::future::join_all((0..20).map(|_| cache.get_or_take(take))).await;
        assert_eq!(samples.len(), 20);
        assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 1);
        tokio::time::sleep(SAMPLE_REUSE).await;
        cache.get_or_take(take).await;
        assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
