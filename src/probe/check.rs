//! `tusk probe check`: the second half of a `restore` drill. A short-lived
//! pod runs it against the throwaway Database the drill restored: it reads
//! which of the ids it is given (the probe's writes acknowledged by the
//! recovery point) are in [`TABLE`](super::TABLE), writes a [`CheckReport`]
//! to its termination message and exits; the operator reads the report from
//! the pod's status, so no port is opened and no password passes through
//! the operator.
//!
//! The ids travel as ranges (`1-40,42-57`): the probe's writes are
//! consecutive but for the few that failed, so the list stays short however
//! long the probe wrote.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::target::Target;
use super::{Error, TABLE};

/// Where Kubernetes reads a container's termination message by default.
pub const TERMINATION_LOG: &str = "/dev/termination-log";

/// How many missing ids a report names: a termination message holds 4 KiB.
pub const FIRST_MISSING: usize = 10;

/// `tusk probe check`.
#[derive(clap::Args, Debug, Clone)]
pub struct CheckConfig {
    /// The ids that must be present, as ranges: `1-40,42,44-57`.
    #[arg(long)]
    pub ids: String,
    /// The database to read, instead of the credentials' `dbname` (the
    /// probe's table lives in the source's application database).
    #[arg(long)]
    pub dbname: Option<String>,
    /// Where the JSON report is written.
    #[arg(long, default_value = TERMINATION_LOG)]
    pub report: PathBuf,
    /// How long to keep trying to read while the Database settles, in
    /// seconds.
    #[arg(long, default_value_t = 60)]
    pub wait_seconds: u64,
}

/// What a check found, as its pod's termination message.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    /// How many ids were looked for.
    pub compared: i64,
    /// How many of them are missing.
    pub missing: i64,
    /// The first missing ids, at most [`FIRST_MISSING`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_missing: Vec<i64>,
    /// Why nothing could be compared, when so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CheckReport {
    /// The report of `wanted` against the ids `present`.
    pub fn of(wanted: &[i64], present: &BTreeSet<i64>) -> Self {
        let missing: Vec<i64> = wanted
            .iter()
            .copied()
            .filter(|id| !present.contains(id))
            .collect();
        CheckReport {
            compared: i64::try_from(wanted.len()).unwrap_or(i64::MAX),
            missing: i64::try_from(missing.len()).unwrap_or(i64::MAX),
            first_missing: missing.into_iter().take(FIRST_MISSING).collect(),
            error: None,
        }
    }
}

/// Why the ids argument does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--ids: {0:?} is not a list of ids and ranges such as 1-40,42")]
pub struct BadIds(String);

/// `ids` (sorted or not, duplicates ignored) as ranges: `1-3,5`.
pub fn encode_ids(ids: &[i64]) -> String {
    let sorted: BTreeSet<i64> = ids.iter().copied().collect();
    let mut ranges: Vec<(i64, i64)> = Vec::new();
    for id in sorted {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == id => *end = id,
            _ => ranges.push((id, id)),
        }
    }
    ranges
        .iter()
        .map(|(start, end)| {
            if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The ids [`encode_ids`] wrote, in order.
pub fn decode_ids(text: &str) -> Result<Vec<i64>, BadIds> {
    let bad = || BadIds(text.to_owned());
    let mut ids = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (start, end) = match part.split_once('-') {
            Some((start, end)) => (start, end),
            None => (part, part),
        };
        let start: i64 = start.parse().map_err(|_| bad())?;
        let end: i64 = end.parse().map_err(|_| bad())?;
        if end < start || end - start > 10_000_000 {
            return Err(bad());
        }
        ids.extend(start..=end);
    }
    Ok(ids)
}

/// Runs the check and writes its report; an error is reported too (and
/// fails the process).
pub async fn run(target: Target, config: CheckConfig) -> Result<(), Error> {
    let report = match decode_ids(&config.ids) {
        Ok(wanted) => check(&target, &wanted, Duration::from_secs(config.wait_seconds)).await,
        Err(bad) => CheckReport {
            error: Some(bad.to_string()),
            ..CheckReport::default()
        },
    };
    let text = serde_json::to_string(&report).unwrap_or_default();
    println!("{text}");
    std::fs::write(&config.report, &text).map_err(|source| Error::Read {
        path: config.report.clone(),
        source,
    })?;
    match report.error {
        Some(why) => Err(Error::Check(why)),
        None => Ok(()),
    }
}

/// Reads `wanted` back, retrying until `wait` passed.
async fn check(target: &Target, wanted: &[i64], wait: Duration) -> CheckReport {
    let deadline = Instant::now() + wait;
    loop {
        match present(target, wanted).await {
            Ok(present) => return CheckReport::of(wanted, &present),
            Err(err) if Instant::now() < deadline => {
                tracing::warn!(%err, "cannot read the restored copy yet");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(err) => {
                return CheckReport {
                    compared: 0,
                    error: Some(format!("reading {TABLE} from the restored copy: {err}")),
                    ..CheckReport::default()
                };
            }
        }
    }
}

/// The ids of `wanted` in the table; none when the table is not there (it
/// was created after the recovery point, or lost).
async fn present(target: &Target, wanted: &[i64]) -> Result<BTreeSet<i64>, tokio_postgres::Error> {
    let client = target.connect().await?;
    let rows = client
        .query(
            &format!("SELECT id FROM {TABLE} WHERE id = ANY($1)"),
            &[&wanted],
        )
        .await;
    match rows {
        Ok(rows) => Ok(rows.iter().map(|row| row.get::<_, i64>(0)).collect()),
        Err(err) if err.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => {
            Ok(BTreeSet::new())
        }
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        probe: super::super::ProbeConfig,
    }

    #[test]
    fn the_check_is_a_subcommand_of_the_probe_taking_its_connection_flags() {
        use clap::Parser;
        let cli = Cli::try_parse_from([
            "probe",
            "--address",
            "10.96.0.40",
            "check",
            "--ids",
            "1-5",
            "--dbname",
            "shop",
        ])
        .unwrap();
        assert_eq!(cli.probe.address, Some("10.96.0.40".parse().unwrap()));
        let Some(super::super::ProbeCommand::Check(check)) = cli.probe.command else {
            panic!("no check");
        };
        assert_eq!(check.ids, "1-5");
        assert_eq!(check.dbname.as_deref(), Some("shop"));
        assert_eq!(check.report, PathBuf::from(TERMINATION_LOG));
        let writer = Cli::try_parse_from(["probe"]).unwrap();
        assert!(writer.probe.command.is_none());
    }

    #[test]
    fn ids_travel_as_ranges_and_come_back_whole() {
        let ids = [5, 1, 2, 3, 7, 8, 3, 10];
        let text = encode_ids(&ids);
        assert_eq!(text, "1-3,5,7-8,10");
        assert_eq!(decode_ids(&text).unwrap(), vec![1, 2, 3, 5, 7, 8, 10]);
        assert_eq!(encode_ids(&[]), "");
        assert_eq!(decode_ids("").unwrap(), Vec::<i64>::new());
    }

    #[test]
    fn bad_ids_are_refused_naming_the_flag() {
        for bad in ["x", "3-1", "1-", "1-99999999999"] {
            let err = decode_ids(bad).unwrap_err();
            assert!(err.to_string().starts_with("--ids:"), "{err}");
        }
    }

    #[test]
    fn a_report_counts_the_missing_and_names_the_first_few() {
        let wanted: Vec<i64> = (1..=30).collect();
        let present: BTreeSet<i64> = (1..=30).filter(|id| id % 2 == 0).collect();
        let report = CheckReport::of(&wanted, &present);
        assert_eq!((report.compared, report.missing), (30, 15));
        assert_eq!(
            report.first_missing,
            vec![1, 3, 5, 7, 9, 11, 13, 15, 17, 19]
        );
        let whole = CheckReport::of(&wanted, &wanted.iter().copied().collect());
        assert_eq!((whole.missing, whole.first_missing.len()), (0, 0));
        let text = serde_json::to_string(&whole).unwrap();
        assert_eq!(text, r#"{"compared":30,"missing":0}"#);
    }
}
