//! `kubectl tusk restore <source> --to <new> [--time T | --lsn L] [--wait]`:
//! creates a new Database that recovers from the source's backups and WAL
//! archive (`spec.bootstrap.recovery.source`), with the source's version,
//! instances, storage, resources, replication, parameters and object store.
//! Refused first, in one line: a `--to` that exists, a source that does not,
//! a time or LSN that does not parse or lies outside the recoverable window.
//! With `--wait`, follows the restore's stages until the new Database is
//! Ready and prints how long it took.
//!
//! The recoverable window runs from the end of the source's earliest
//! completed base backup (its `completedAt`, its `endLsn`) to now: before
//! it no backup can start the recovery; after it there is no WAL yet.

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, PostParams};

use super::act::{self, Step};
use super::term::{Progress, Terminal};
use super::{Error, Session, Wait};
use crate::api::status::BackupPhase;
use crate::api::v1::{Backup, BootstrapSpec, Database, RecoverySpec};
use crate::contract::Lsn;

/// Where to recover to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The end of the archive.
    Latest,
    Time(Timestamp),
    Lsn(Lsn),
}

/// What the restore needs from the command line.
pub struct Request<'a> {
    pub source: &'a str,
    pub to: &'a str,
    pub time: Option<&'a str>,
    pub lsn: Option<&'a str>,
    pub wait: Wait,
}

pub async fn run(session: &Session, request: Request<'_>) -> Result<(), Error> {
    let target = parse_target(request.time, request.lsn)?;
    let source = session.database(request.source).await?;
    let api: Api<Database> = Api::namespaced(session.client.clone(), &session.namespace);
    let existing = api
        .get_opt(request.to)
        .await
        .map_err(Error::kube(format!("reading Database {}", request.to)))?;
    if existing.is_some() {
        return Err(Error::Usage(format!(
            "Database {} already exists: --to names a new Database",
            request.to
        )));
    }
    let backups: Api<Backup> = Api::namespaced(session.client.clone(), &session.namespace);
    let listed = backups
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing Backups"))?;
    check_window(request.source, &listed.items, &target, Timestamp::now())?;
    let manifest = manifest(&source, request.to, &target);
    api.create(&PostParams::default(), &manifest)
        .await
        .map_err(Error::kube(format!("creating Database {}", request.to)))?;
    let started = Timestamp::now();
    if !request.wait.wait {
        println!(
            "Database {} created, restoring from {}",
            request.to, request.source
        );
        return Ok(());
    }
    let mut progress = Progress::start(Terminal::detect(), None);
    let what = format!("the restore of {} into {}", request.source, request.to);
    let result = act::watch_until(
        &api,
        request.to,
        request.wait.timeout,
        &what,
        &mut progress,
        judge,
    )
    .await;
    progress.finish();
    result?;
    let took = Timestamp::now().as_millisecond() - started.as_millisecond();
    println!(
        "{} restored from {} and Ready in {}",
        request.to,
        request.source,
        act::human_duration(took)
    );
    Ok(())
}

/// `--time` (RFC 3339) or `--lsn` (`X/Y`), checked before anything else.
pub fn parse_target(time: Option<&str>, lsn: Option<&str>) -> Result<Target, Error> {
    match (time, lsn) {
        (Some(_), Some(_)) => Err(Error::Usage("give --time or --lsn, not both".into())),
        (Some(time), None) => time.parse::<Timestamp>().map(Target::Time).map_err(|_| {
            Error::Usage(format!(
                "--time {time} is not an RFC 3339 time (for example 2026-11-26T10:00:00Z)"
            ))
        }),
        (None, Some(lsn)) => parse_lsn(lsn)
            .map(Target::Lsn)
            .ok_or_else(|| Error::Usage(format!("--lsn {lsn} is not a WAL position (X/Y, hex)"))),
        (None, None) => Ok(Target::Latest),
    }
}

/// `X/Y` with 1 to 8 hex digits each, as PostgreSQL prints a position.
fn parse_lsn(text: &str) -> Option<Lsn> {
    text.parse().ok()
}

/// The source's earliest completed base backup: its end time and LSN.
fn earliest(source: &str, backups: &[Backup]) -> Option<(Timestamp, Option<Lsn>)> {
    backups
        .iter()
        .filter(|b| b.spec.database == source)
        .filter_map(|b| {
            let status = b.status.as_ref()?;
            (status.phase == Some(BackupPhase::Completed)).then_some(())?;
            let end = status.completed_at.as_ref()?.0;
            Some((end, status.end_lsn.as_deref().and_then(parse_lsn)))
        })
        .min_by_key(|(end, _)| *end)
}

/// Refuses a target outside the recoverable window (see the module).
pub fn check_window(
    source: &str,
    backups: &[Backup],
    target: &Target,
    now: Timestamp,
) -> Result<(), Error> {
    let Some((start, start_lsn)) = earliest(source, backups) else {
        return Err(Error::Failed(format!(
            "Database {source} has no completed Backup to restore from"
        )));
    };
    match target {
        Target::Latest => Ok(()),
        Target::Time(time) if *time < start => Err(Error::Usage(format!(
            "--time {time} is before {source}'s earliest completed backup ended ({start}): \
             the recoverable window is {start} to now"
        ))),
        Target::Time(time) if *time > now => Err(Error::Usage(format!(
            "--time {time} is in the future: the recoverable window is {start} to now"
        ))),
        Target::Lsn(lsn) => match start_lsn {
            Some(first) if *lsn < first => Err(Error::Usage(format!(
                "--lsn {lsn} is before the end of {source}'s earliest completed backup ({first})"
            ))),
            _ => Ok(()),
        },
        Target::Time(_) => Ok(()),
    }
}

/// The new Database: the source's settings, recovering from the source.
/// What belongs to the source alone stays out: its primary, migrations,
/// published endpoints, certificates and backup schedule.
pub fn manifest(source: &Database, to: &str, target: &Target) -> Database {
    let mut spec = source.spec.clone();
    spec.primary = None;
    spec.migrations = None;
    spec.expose = Vec::new();
    spec.tls = Default::default();
    if let Some(backup) = spec.backup.as_mut() {
        backup.schedule = None;
        backup.verify = None;
    }
    spec.bootstrap = Some(BootstrapSpec {
        initdb: None,
        recovery: Some(RecoverySpec {
            source: source.metadata.name.clone(),
            target_time: match target {
                Target::Time(t) => Some(t.to_string()),
                _ => None,
            },
            target_lsn: match target {
                Target::Lsn(l) => Some(l.to_string()),
                _ => None,
            },
            ..RecoverySpec::default()
        }),
    });
    Database::new(to, spec)
}

/// Done once Ready; failed when the operator says it cannot go on.
fn judge(db: &Database) -> Step<()> {
    let generation = db.metadata.generation.unwrap_or(1);
    let status = db.status.clone().unwrap_or_default();
    if act::ready_at(db, generation) {
        return Step::Done(());
    }
    use crate::api::status::DatabasePhase::{Blocked, Failed};
    if matches!(status.phase, Some(Blocked | Failed)) {
        let message = act::condition(&status, "Ready")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        return Step::Failed(Error::Failed(format!("the restore stopped: {message}")));
    }
    Step::Waiting(act::phase_line(db), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::BackupStatus;
    use crate::api::v1::BackupSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("time")
    }

    fn completed(name: &str, database: &str, end: &str, lsn: &str) -> Backup {
        let mut backup = Backup::new(
            name,
            BackupSpec {
                database: database.into(),
                target: Default::default(),
            },
        );
        backup.status = Some(BackupStatus {
            phase: Some(BackupPhase::Completed),
            completed_at: Some(Time(at(end))),
            end_lsn: Some(lsn.into()),
            ..BackupStatus::default()
        });
        backup
    }

    #[test]
    fn targets_are_checked_before_anything() {
        assert_eq!(parse_target(None, None).expect("latest"), Target::Latest);
        assert_eq!(
            parse_target(Some("2026-11-26T10:00:00Z"), None).expect("time"),
            Target::Time(at("2026-11-26T10:00:00Z"))
        );
        assert_eq!(
            parse_target(None, Some("1/3000148")).expect("lsn"),
            Target::Lsn(Lsn((1 << 32) | 0x300_0148))
        );
        for (time, lsn) in [
            (Some("yesterday"), None),
            (None, Some("3000148")),
            (None, Some("0/xyz")),
            (None, Some("123456789/0")),
        ] {
            let error = parse_target(time, lsn).expect_err("refused");
            assert_eq!(error.exit_code(), 2, "{error}");
        }
    }

    #[test]
    fn the_window_runs_from_the_earliest_backup_end_to_now() {
        let backups = [
            completed("b2", "pg", "2026-11-26T11:00:00Z", "0/5000000"),
            completed("b1", "pg", "2026-11-26T10:00:00Z", "0/3000000"),
            completed("other", "qq", "2026-11-26T09:00:00Z", "0/1000000"),
        ];
        let now = at("2026-11-26T12:00:00Z");
        let check = |target: Target| check_window("pg", &backups, &target, now);
        assert!(check(Target::Latest).is_ok());
        assert!(check(Target::Time(at("2026-11-26T10:30:00Z"))).is_ok());
        let before = check(Target::Time(at("2026-11-26T09:30:00Z"))).expect_err("before");
        assert_eq!(before.exit_code(), 2);
        assert!(
            before.to_string().starts_with(
                "--time 2026-11-26T09:30:00Z is before pg's earliest completed backup"
            ),
            "{before}"
        );
        assert!(check(Target::Time(at("2026-11-26T13:00:00Z"))).is_err());
        assert!(check(Target::Lsn(Lsn(0x300_0000))).is_ok());
        assert!(check(Target::Lsn(Lsn(0x200_0000))).is_err());
        let none = check_window("zz", &backups, &Target::Latest, now).expect_err("none");
        assert_eq!(
            none.to_string(),
            "Database zz has no completed Backup to restore from"
        );
    }

    #[test]
    fn the_new_database_copies_the_source_and_recovers_from_it() {
        let mut source = crate::api::arbitrary::sample_database();
        source.spec.primary = Some("orders-2".into());
        source.spec.instances = 3;
        let target = Target::Time(at("2026-11-26T10:30:00Z"));
        let new = manifest(&source, "orders-copy", &target);
        assert_eq!(new.metadata.name.as_deref(), Some("orders-copy"));
        assert_eq!(new.spec.instances, 3);
        assert_eq!(new.spec.version, source.spec.version);
        assert_eq!(new.spec.storage, source.spec.storage);
        assert_eq!(new.spec.primary, None);
        let recovery = new
            .spec
            .bootstrap
            .and_then(|b| b.recovery)
            .expect("recovery");
        assert_eq!(recovery.source.as_deref(), Some("orders"));
        assert_eq!(
            recovery.target_time.as_deref(),
            Some("2026-11-26T10:30:00Z")
        );
        assert_eq!(recovery.target_lsn, None);
        let by_lsn = manifest(&source, "x", &Target::Lsn(Lsn(0x300_0148)));
        let recovery = by_lsn
            .spec
            .bootstrap
            .and_then(|b| b.recovery)
            .expect("recovery");
        assert_eq!(recovery.target_lsn.as_deref(), Some("0/3000148"));
        // The new spec passes the webhook's rules.
        let mut valid = manifest(&source, "orders-copy", &Target::Latest);
        valid.metadata.namespace = Some("shop".into());
        assert_eq!(
            crate::api::validate::database(&valid),
            Vec::new(),
            "the restore manifest is valid"
        );
    }
}
