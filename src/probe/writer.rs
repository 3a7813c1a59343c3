//! The writing loop: one new connection and one `INSERT` per id, a pause,
//! the next id. A write that fails or does not finish within
//! [`WRITE_TIMEOUT`] counts as failed: its outcome is unknown (it may have
//! committed), and only acknowledged writes must survive.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use super::TABLE;
use super::record::Record;
use super::target::Target;

/// How long one write (connect and commit) may take before it counts as
/// failed. A commit waiting for a synchronous standby that is being
/// replaced can take a while; longer than this is an outage anyway.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long to wait before trying to create the table again.
const RETRY: Duration = Duration::from_secs(1);

/// Writes until `stop` turns true; the write under way when it does is
/// finished (and recorded) first.
pub async fn write(
    target: Target,
    record: Arc<Mutex<Record>>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let Some(mut id) = prepare(&target, &mut stop).await else {
        return;
    };
    while !*stop.borrow() {
        let outcome = tokio::time::timeout(WRITE_TIMEOUT, insert(&target, id)).await;
        let at = unix_now();
        {
            let mut record = record.lock().unwrap_or_else(PoisonError::into_inner);
            match outcome {
                Ok(Ok(())) => record.acknowledged(id, at),
                Ok(Err(err)) => {
                    tracing::debug!(id, %err, "write failed");
                    record.failed();
                }
                Err(_) => {
                    tracing::debug!(id, "write timed out");
                    record.failed();
                }
            }
        }
        id += 1;
        tokio::select! {
            _ = stop.changed() => {}
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// Creates the table when it is missing; the first id to write (after any
/// a previous probe left). `None` when stopped first.
async fn prepare(target: &Target, stop: &mut watch::Receiver<bool>) -> Option<i64> {
    loop {
        match first_id(target).await {
            Ok(id) => return Some(id),
            Err(err) => tracing::warn!(%err, "cannot prepare the probe's table yet"),
        }
        tokio::select! {
            _ = stop.changed() => return None,
            () = tokio::time::sleep(RETRY) => {}
        }
    }
}

async fn first_id(target: &Target) -> Result<i64, tokio_postgres::Error> {
    let client = target.connect().await?;
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {TABLE} \
             (id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())"
        ))
        .await?;
    let row = client
        .query_one(&format!("SELECT coalesce(max(id), 0) FROM {TABLE}"), &[])
        .await?;
    Ok(row.get::<_, i64>(0) + 1)
}

async fn insert(target: &Target, id: i64) -> Result<(), tokio_postgres::Error> {
    let client = target.connect().await?;
    client
        .execute(&format!("INSERT INTO {TABLE} (id) VALUES ($1)"), &[&id])
        .await?;
    Ok(())
}

/// Every id in the table, then the table dropped (the drill is over).
pub async fn read_back(
    target: &Target,
) -> Result<std::collections::BTreeSet<i64>, tokio_postgres::Error> {
    let client = target.connect().await?;
    let present = client
        .query(&format!("SELECT id FROM {TABLE}"), &[])
        .await?
        .iter()
        .map(|row| row.get::<_, i64>(0))
        .collect();
    if let Err(err) = client.batch_execute(&format!("DROP TABLE {TABLE}")).await {
        tracing::warn!(%err, "cannot drop the probe's table");
    }
    Ok(present)
}

pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
