//! Rules beyond the schema. The same functions run in the validating webhook and
//! in the reconciler, so a Database admitted while webhooks were down still cannot
//! make Tusk do something unsafe. A Database that passes becomes the model the
//! builders take ([`validated`], [`super::model`]).

use super::model::{Defaults, ValidatedDatabase};
use super::quantity;
use super::status::AppliedSpec;
use super::store;
use super::v1::{self, ReplicationMode};
use crate::postgres::params;

/// Longest Database name: Tusk appends suffixes such as `-superuser` (10 characters)
/// and `-<serial>` and names must stay within 63.
pub const MAX_NAME_LEN: usize = 50;

pub use super::field::FieldError;

/// All problems, joined for a Condition message or an admission response.
pub fn summary(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

pub use super::version::PgVersion;

/// Parses a backup schedule the way the operator runs it
/// ([`crate::schedule`]: crontab's five fields, an optional leading
/// seconds field, `@daily` and the rest, in UTC).
pub fn parse_schedule(expr: &str) -> Result<crate::schedule::Schedule, String> {
    crate::schedule::Schedule::parse(expr).map_err(|e| e.to_string())
}

/// Parses a retention such as `7d`, `12h` or `4w` into seconds.
pub fn parse_retention(value: &str) -> Result<u64, String> {
    let bad = || format!("{value:?} is not a retention such as \"7d\", \"12h\" or \"4w\"");
    let unit = value.chars().last().ok_or_else(bad)?;
    let amount: u64 = value[..value.len() - unit.len_utf8()]
        .parse()
        .map_err(|_| bad())?;
    let seconds = match unit {
        'h' => 3600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        _ => return Err(bad()),
    };
    if amount == 0 {
        return Err(bad());
    }
    Ok(amount * seconds)
}

/// Checks a Database on its own (create, and every reconcile) with the
/// operator's default store folded in ([`store::with_default`]), and
/// resolves it for the builders: the errors of [`database`], or the model.
pub fn validated(
    db: &v1::Database,
    defaults: &Defaults<'_>,
) -> Result<ValidatedDatabase, Vec<FieldError>> {
    let db = store::with_default(db, defaults.store);
    let mut errors = database(&db);
    errors.extend(super::expose::node_port_errors(
        &db.spec.expose,
        defaults.node_ports,
    ));
    if !errors.is_empty() {
        return Err(errors);
    }
    // [`database`] refused a version that does not parse.
    let version = db
        .spec
        .version
        .parse::<PgVersion>()
        .map_err(|e| vec![FieldError::new("spec.version", e)])?;
    // [`database`] refused quantities that do not parse.
    let resources = super::resources::resolve(db.spec.resources.as_ref()).ok_or_else(|| {
        vec![FieldError::new(
            "spec.resources",
            "has a quantity that does not parse",
        )]
    })?;
    // [`database`] refused durations that do not parse.
    let tls = super::tls::TlsSettings::resolve_for(
        &db.spec.tls,
        db.metadata.name.as_deref().unwrap_or_default(),
    )
    .ok_or_else(|| {
        vec![FieldError::new(
            "spec.tls",
            "has a duration that does not parse",
        )]
    })?;
    Ok(ValidatedDatabase::new(
        &db, version, resources, tls, defaults,
    ))
}

/// Checks a Database on its own (create, and every reconcile), except what
/// depends on the operator's settings (the node-port range: [`validated`]).
pub fn database(db: &v1::Database) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = &db.spec;
    let name = db.metadata.name.as_deref().unwrap_or_default();
    if name.len() > MAX_NAME_LEN {
        errors.push(FieldError::new(
            "metadata.name",
            format!("must be at most {MAX_NAME_LEN} characters so that the names Tusk derives from it fit in 63"),
        ));
    }
    if let Err(e) = spec.version.parse::<PgVersion>() {
        errors.push(FieldError::new("spec.version", e));
    }
    if !(1..=16).contains(&spec.instances) {
        errors.push(FieldError::new(
            "spec.instances",
            "must be between 1 and 16",
        ));
    }
    match quantity::parse_bytes(&spec.storage.size) {
        Ok(0) => errors.push(FieldError::new(
            "spec.storage.size",
            "must be greater than zero",
        )),
        Ok(_) => {}
        Err(e) => errors.push(FieldError::new("spec.storage.size", e)),
    }
    if let Err(refusals) = super::autogrow::resolve(&spec.storage) {
        errors.extend(refusals);
    }
    if spec.replication.mode == ReplicationMode::Sync
        && spec.replication.min_sync_replicas >= spec.instances
    {
        errors.push(FieldError::new(
            "spec.replication.minSyncReplicas",
            format!(
                "is {} but sync replication with {} instances has at most {} standbys: lower it or add instances",
                spec.replication.min_sync_replicas,
                spec.instances,
                spec.instances - 1
            ),
        ));
    }
    for (name, error) in params::check_all(&spec.postgresql.parameters) {
        errors.push(FieldError::new(
            format!("spec.postgresql.parameters.{name}"),
            error.to_string(),
        ));
    }
    if let Some(bootstrap) = &spec.bootstrap {
        errors.extend(bootstrap_errors(bootstrap));
    }
    if let Some(backup) = &spec.backup {
        errors.extend(backup_errors(backup));
    }
    if let Some(migrations) = &spec.migrations {
        errors.extend(migrations_errors(migrations));
    }
    if let Some(primary) = &spec.primary {
        errors.extend(primary_error(name, primary));
    }
    errors.extend(super::wal_storage::errors(spec));
    errors.extend(super::placement::errors(spec));
    errors.extend(super::resources::errors(spec.resources.as_ref()));
    errors.extend(super::tls::errors(&spec.tls));
    errors.extend(super::expose::errors(name, &spec.expose));
    errors
}

/// `spec.bootstrap`: exactly one way, and a recovery that names one source
/// and at most one target.
fn bootstrap_errors(bootstrap: &v1::BootstrapSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    match (&bootstrap.initdb, &bootstrap.recovery) {
        (Some(_), Some(_)) | (None, None) => errors.push(FieldError::new(
            "spec.bootstrap",
            "must set exactly one of initdb or recovery",
        )),
        (_, Some(recovery)) => {
            if let Some(time) = &recovery.target_time
                && time.parse::<k8s_openapi::jiff::Timestamp>().is_err()
            {
                errors.push(FieldError::new(
                    "spec.bootstrap.recovery.targetTime",
                    format!("{time:?} is not an RFC 3339 time such as 2026-11-22T10:00:00Z"),
                ));
            }
            let named = [
                recovery.backup.is_some(),
                recovery.source.is_some(),
                recovery.source_name.is_some(),
            ];
            if named.iter().filter(|n| **n).count() != 1 {
                errors.push(FieldError::new(
                    "spec.bootstrap.recovery",
                    "must name exactly one of backup, source or sourceName",
                ));
            }
            if recovery.source.is_some() && recovery.object_store.is_some() {
                errors.push(FieldError::new(
                    "spec.bootstrap.recovery.objectStore",
                    "is not used with source: the source Database's store is read",
                ));
            }
            if recovery.target_time.is_some() && recovery.target_lsn.is_some() {
                errors.push(FieldError::new(
                    "spec.bootstrap.recovery",
                    "may set targetTime or targetLsn, not both",
                ));
            }
        }
        (Some(_), None) => {}
    }
    errors
}

/// `spec.backup`: a schedule and a retention that parse, and a store for them.
fn backup_errors(backup: &v1::BackupConfig) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(schedule) = &backup.schedule
        && let Err(e) = parse_schedule(schedule)
    {
        errors.push(FieldError::new("spec.backup.schedule", e));
    }
    if let Some(retention) = &backup.retention
        && let Err(e) = parse_retention(retention)
    {
        errors.push(FieldError::new("spec.backup.retention", e));
    }
    if (backup.schedule.is_some() || backup.retention.is_some()) && backup.object_store.is_none() {
        errors.push(FieldError::new(
            "spec.backup.objectStore",
            "is required when spec.backup.schedule or spec.backup.retention is set: \
             set spec.backup.objectStore, or install the operator with a default object store \
             (Helm value defaultObjectStore; TUSK_DEFAULT_OBJECTSTORE_BUCKET in the Subscription's config.env)",
        ));
    }
    errors
}

/// `spec.migrations`: an image and a version.
fn migrations_errors(migrations: &v1::MigrationsSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if migrations.image.trim().is_empty() {
        errors.push(FieldError::new(
            "spec.migrations.image",
            "is required: the container image that runs the migrations",
        ));
    }
    if migrations.version.trim().is_empty() || migrations.version.len() > 63 {
        errors.push(FieldError::new(
            "spec.migrations.version",
            "must be 1 to 63 characters, for example the application's release",
        ));
    }
    errors
}

/// `spec.primary`: one of this Database's instances (`<name>-<serial>`).
fn primary_error(name: &str, primary: &str) -> Option<FieldError> {
    let serial = primary
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix('-'));
    let named = serial.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
    (!named).then(|| {
        FieldError::new(
            "spec.primary",
            format!("{primary:?} is not an instance of this database (expected {name}-<number>)"),
        )
    })
}

/// Checks a change from `old` to `new`: everything [`database`] checks, plus the
/// transitions that would lose data or cannot be carried out.
pub fn database_update(old: &v1::Database, new: &v1::Database) -> Vec<FieldError> {
    let mut errors = database(new);
    let applied = old.status.as_ref().and_then(|s| s.applied.as_ref());
    errors.extend(no_step_back(
        &old.spec.version,
        &old.spec.storage.size,
        applied.map(|a| a.version.as_str()),
        &new.spec,
    ));
    errors.extend(image_follows_major(&old.spec, &new.spec));
    if old.spec.storage.storage_class_name != new.spec.storage.storage_class_name {
        errors.push(FieldError::new(
            "spec.storage.storageClassName",
            "is immutable",
        ));
    }
    if old.spec.bootstrap != new.spec.bootstrap {
        errors.push(FieldError::new(
            "spec.bootstrap",
            "is immutable: it only applies when the database is first created",
        ));
    }
    errors.extend(super::wal_storage::update_errors(&old.spec, &new.spec));
    errors
}

/// `spec.walStorage`'s problems ([`super::wal_storage`]) as field errors.
/// Checks `spec` against what Tusk last accepted (recorded in status): the same
/// downgrade and shrink rules as [`database_update`], for the reconciler, which
/// has no old object but must not act on a spec that slipped past the webhook.
pub fn against_applied(spec: &v1::DatabaseSpec, applied: &AppliedSpec) -> Vec<FieldError> {
    no_step_back(
        &applied.version,
        &applied.storage_size,
        Some(&applied.version),
        spec,
    )
}

/// Refuses a lower PostgreSQL version or a smaller volume than before.
///
/// The version rule, with `applied` what the primary was last seen running
/// (`status.applied.version`) and `old_version` the previous spec's:
/// - never below `applied`: not a lower major, nor a lower minor of the same
///   major when both name one (that server already runs, its data is newer);
/// - never below `old_version`, unless the new version is `applied`'s major:
///   that is the way back while a major upgrade has not completed (the old
///   server's data is still there, and what runs is still the old major).
///   Once the upgraded server runs, `applied` is the new major and the way
///   back is closed by the first rule.
///
/// Going up, by any number of majors (15 → 17), is always allowed.
fn no_step_back(
    old_version: &str,
    old_size: &str,
    applied: Option<&str>,
    new: &v1::DatabaseSpec,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let after = new.version.parse::<PgVersion>().ok();
    let running = applied.and_then(|a| Some((a, a.parse::<PgVersion>().ok()?)));
    if let (Some(after), Some((text, running))) = (after, running)
        && let Some(message) = below(text, running, &new.version, after)
    {
        errors.push(FieldError::new(
            "spec.version",
            format!("{message}: PostgreSQL {text} already runs (status.applied.version)"),
        ));
        return errors_with_size(errors, old_size, new);
    }
    let returns_to_applied = matches!((after, running), (Some(after), Some((_, running))) if after.major == running.major);
    if let (Ok(before), Some(after)) = (old_version.parse::<PgVersion>(), after)
        && !returns_to_applied
        && let Some(message) = below(old_version, before, &new.version, after)
    {
        let message = match running {
            Some((text, running)) if running.major < before.major => format!(
                "{message}; until the upgrade completes, only going back to {text} (what still runs) is possible"
            ),
            _ => format!("{message}: downgrades are not supported"),
        };
        errors.push(FieldError::new("spec.version", message));
    }
    errors_with_size(errors, old_size, new)
}

/// Why `after` is below `before`, if it is: a lower major, or a lower minor of
/// the same major when both name a minor.
fn below(
    before_text: &str,
    before: PgVersion,
    after_text: &str,
    after: PgVersion,
) -> Option<String> {
    if after.major < before.major {
        return Some(format!(
            "cannot go down from major version {} to {}",
            before.major, after.major
        ));
    }
    let minor_down = after.major == before.major
        && matches!((before.minor, after.minor), (Some(from), Some(to)) if to < from);
    minor_down.then(|| format!("cannot go down from {before_text} to {after_text}"))
}

fn errors_with_size(
    mut errors: Vec<FieldError>,
    old_size: &str,
    new: &v1::DatabaseSpec,
) -> Vec<FieldError> {
    if let (Ok(before), Ok(after)) = (
        quantity::parse_bytes(old_size),
        quantity::parse_bytes(&new.storage.size),
    ) && after < before
    {
        errors.push(FieldError::new(
            "spec.storage.size",
            format!(
                "cannot shrink from {old_size} to {}: volumes may only grow",
                new.storage.size
            ),
        ));
    }
    errors
}

/// Refuses a change of major version that keeps the same `spec.image`: that
/// image is still the old major's, so the spec would ask for a version no
/// image provides.
fn image_follows_major(old: &v1::DatabaseSpec, new: &v1::DatabaseSpec) -> Option<FieldError> {
    let image = new.image.as_deref()?;
    let before = old.version.parse::<PgVersion>().ok()?;
    let after = new.version.parse::<PgVersion>().ok()?;
    (before.major != after.major && old.image.as_deref() == Some(image)).then(|| {
        FieldError::new(
            "spec.image",
            format!(
                "is still {image} while spec.version goes from major {} to {}: set spec.image to \
                 an image of PostgreSQL {}, or remove it to use the default image",
                before.major, after.major, after.major
            ),
        )
    })
}

/// Checks a Backup against the Database it names (`None`: no such Database in its namespace).
pub fn backup(backup: &v1::Backup, database: Option<&v1::Database>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    match database {
        None => errors.push(FieldError::new(
            "spec.database",
            format!("no Database {:?} in this namespace", backup.spec.database),
        )),
        Some(db)
            if db
                .spec
                .backup
                .as_ref()
                .and_then(|b| b.object_store.as_ref())
                .is_none() =>
        {
            errors.push(FieldError::new(
                "spec.database",
                format!(
                    "Database {:?} has no spec.backup.objectStore to back up to",
                    backup.spec.database
                ),
            ))
        }
        Some(_) => {}
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;

    fn paths(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn the_sample_is_valid() {
        assert_eq!(database(&sample_database()), []);
    }

    #[test]
    fn each_bad_field_is_named() {
        type Mutation = Box<dyn Fn(&mut v1::Database)>;
        let cases: Vec<(&str, Mutation)> = vec![
            (
                "metadata.name",
                Box::new(|db| db.metadata.name = Some("x".repeat(51))),
            ),
            ("spec.version", Box::new(|db| db.spec.version = "12".into())),
            ("spec.instances", Box::new(|db| db.spec.instances = 0)),
            (
                "spec.storage.size",
                Box::new(|db| db.spec.storage.size = "ten".into()),
            ),
            (
                "spec.storage.size",
                Box::new(|db| db.spec.storage.size = "0".into()),
            ),
            (
                "spec.replication.minSyncReplicas",
                Box::new(|db| {
                    db.spec.replication.mode = ReplicationMode::Sync;
                    db.spec.replication.min_sync_replicas = 3;
                }),
            ),
            (
                "spec.postgresql.parameters.archive_command",
                Box::new(|db| {
                    db.spec
                        .postgresql
                        .parameters
                        .insert("archive_command".into(), "true".into());
                }),
            ),
            (
                "spec.postgresql.parameters.Bad-Name",
                Box::new(|db| {
                    db.spec
                        .postgresql
                        .parameters
                        .insert("Bad-Name".into(), "1".into());
                }),
            ),
            (
                "spec.bootstrap",
                Box::new(|db| db.spec.bootstrap = Some(v1::BootstrapSpec::default())),
            ),
            (
                "spec.backup.schedule",
                Box::new(|db| {
                    db.spec.backup = Some(v1::BackupConfig {
                        schedule: Some("every day".into()),
                        object_store: Some(v1::ObjectStore {
                            bucket: "b".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                }),
            ),
            (
                "spec.backup.objectStore",
                Box::new(|db| {
                    db.spec.backup = Some(v1::BackupConfig {
                        schedule: Some("0 2 * * *".into()),
                        ..Default::default()
                    })
                }),
            ),
            (
                "spec.primary",
                Box::new(|db| db.spec.primary = Some("other-1".into())),
            ),
            (
                "spec.migrations.image",
                Box::new(|db| {
                    db.spec.migrations = Some(v1::MigrationsSpec {
                        version: "1".into(),
                        image: " ".into(),
                        ..Default::default()
                    })
                }),
            ),
            (
                "spec.migrations.version",
                Box::new(|db| {
                    db.spec.migrations = Some(v1::MigrationsSpec {
                        version: String::new(),
                        image: "app:1".into(),
                        ..Default::default()
                    })
                }),
            ),
        ];
        for (path, mutate) in cases {
            let mut db = sample_database();
            mutate(&mut db);
            assert_eq!(paths(&database(&db)), [path], "{db:?}");
        }
    }

    fn recovering(recovery: v1::RecoverySpec) -> v1::Database {
        let mut db = sample_database();
        db.spec.bootstrap = Some(v1::BootstrapSpec {
            initdb: None,
            recovery: Some(recovery),
        });
        db
    }

    /// The four recovery specs that are refused, each naming its field and
    /// why; the same shapes made right pass.
    #[test]
    fn each_recovery_refusal_names_its_field() {
        let store = v1::ObjectStore {
            bucket: "b".into(),
            ..Default::default()
        };
        let by_name = || v1::RecoverySpec {
            source_name: Some("orders".into()),
            ..Default::default()
        };
        let cases = [
            (
                v1::RecoverySpec {
                    target_time: Some("2026-11-22T10:00:00".into()),
                    ..by_name()
                },
                "spec.bootstrap.recovery.targetTime",
                "is not an RFC 3339 time",
            ),
            (
                v1::RecoverySpec {
                    target_time: Some("yesterday".into()),
                    ..by_name()
                },
                "spec.bootstrap.recovery.targetTime",
                "is not an RFC 3339 time",
            ),
            (
                v1::RecoverySpec::default(),
                "spec.bootstrap.recovery",
                "must name exactly one of backup, source or sourceName",
            ),
            (
                v1::RecoverySpec {
                    backup: Some("nightly".into()),
                    source: Some("orders".into()),
                    ..Default::default()
                },
                "spec.bootstrap.recovery",
                "must name exactly one of backup, source or sourceName",
            ),
            (
                v1::RecoverySpec {
                    source: Some("orders".into()),
                    object_store: Some(store.clone()),
                    ..Default::default()
                },
                "spec.bootstrap.recovery.objectStore",
                "is not used with source",
            ),
            (
                v1::RecoverySpec {
                    target_time: Some("2026-11-22T10:00:00Z".into()),
                    target_lsn: Some("0/3000000".into()),
                    ..by_name()
                },
                "spec.bootstrap.recovery",
                "may set targetTime or targetLsn, not both",
            ),
        ];
        // Every case is tried, so a broken rule shows with all the others.
        let wrong: Vec<String> = cases
            .into_iter()
            .filter_map(|(recovery, path, why)| {
                let errors = database(&recovering(recovery.clone()));
                let named = paths(&errors) == [path] && errors[0].message.contains(why);
                (!named).then(|| format!("{recovery:?} gave {errors:?}, not {path}: {why}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
        for fine in [
            v1::RecoverySpec {
                target_time: Some("2026-11-22T10:00:00+01:00".into()),
                object_store: Some(store),
                ..by_name()
            },
            v1::RecoverySpec {
                source: Some("orders".into()),
                target_lsn: Some("0/3000000".into()),
                ..Default::default()
            },
            v1::RecoverySpec {
                backup: Some("nightly".into()),
                ..Default::default()
            },
        ] {
            assert_eq!(database(&recovering(fine.clone())), [], "{fine:?}");
        }
    }

    #[test]
    fn schedules_in_five_or_six_fields_parse() {
        assert!(parse_schedule("0 2 * * *").is_ok());
        assert!(parse_schedule("30 0 2 * * *").is_ok());
        assert!(parse_schedule("@daily").is_ok());
        assert!(parse_schedule("61 * * * *").is_err());
        // As crontab and CronJobs read them: Sunday is 0 (and 7).
        assert!(parse_schedule("0 2 * * 0").is_ok());
        assert!(parse_schedule("@annually").is_ok());
    }

    #[test]
    fn retention_units() {
        assert_eq!(parse_retention("7d"), Ok(7 * 86_400));
        assert_eq!(parse_retention("12h"), Ok(12 * 3600));
        assert_eq!(parse_retention("2w"), Ok(14 * 86_400));
        assert!(parse_retention("0d").is_err());
        assert!(parse_retention("7y").is_err());
        assert!(parse_retention("").is_err());
    }

    #[test]
    fn updates_refuse_downgrades_shrinking_and_bootstrap_changes() {
        let old = sample_database();
        let mut new = old.clone();
        new.spec.version = "16".into();
        new.spec.storage.size = "512Mi".into();
        new.spec.bootstrap = Some(v1::BootstrapSpec {
            initdb: Some(v1::InitdbSpec::default()),
            recovery: None,
        });
        new.spec.storage.storage_class_name = Some("fast".into());
        assert_eq!(
            paths(&database_update(&old, &new)),
            [
                "spec.version",
                "spec.storage.size",
                "spec.storage.storageClassName",
                "spec.bootstrap"
            ]
        );
        let mut minor = old.clone();
        minor.spec.version = "17.4".into();
        let mut lower = old.clone();
        lower.spec.version = "17.2".into();
        assert_eq!(paths(&database_update(&minor, &lower)), ["spec.version"]);
    }

    #[test]
    fn the_reconciler_refuses_to_step_back_from_what_it_applied() {
        let applied = AppliedSpec {
            version: "17.4".into(),
            storage_size: "2Gi".into(),
            image: None,
        };
        let mut db = sample_database();
        db.spec.version = "17.2".into();
        assert_eq!(
            paths(&against_applied(&db.spec, &applied)),
            ["spec.version", "spec.storage.size"]
        );
        db.spec.version = "18".into();
        db.spec.storage.size = "2Gi".into();
        assert_eq!(against_applied(&db.spec, &applied), []);
    }

    fn with_applied(mut db: v1::Database, version: &str) -> v1::Database {
        db.status = Some(crate::api::status::DatabaseStatus {
            applied: Some(AppliedSpec {
                version: version.into(),
                storage_size: "1Gi".into(),
                image: None,
            }),
            ..Default::default()
        });
        db
    }

    fn versioned(version: &str) -> v1::Database {
        let mut db = sample_database();
        db.spec.version = version.into();
        db
    }

    #[test]
    fn going_back_to_what_still_runs_is_the_way_back_from_an_unfinished_upgrade() {
        // 15 runs, the spec asked for 17, the upgrade has not completed.
        let upgrading = with_applied(versioned("17"), "15.8");
        assert_eq!(database_update(&upgrading, &versioned("15")), []);
        assert_eq!(database_update(&upgrading, &versioned("15.8")), []);
        let errors = database_update(&upgrading, &versioned("16"));
        assert_eq!(paths(&errors), ["spec.version"]);
        assert!(
            errors[0].message.contains("only going back to 15.8"),
            "{}",
            errors[0].message
        );
        // Not below what runs, even on the way back.
        let errors = database_update(&upgrading, &versioned("15.2"));
        assert_eq!(paths(&errors), ["spec.version"]);
        assert!(
            errors[0].message.contains("15.8 already runs"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn once_the_upgraded_server_runs_there_is_no_way_back() {
        let upgraded = with_applied(versioned("17"), "17.2");
        let errors = database_update(&upgraded, &versioned("15"));
        assert_eq!(paths(&errors), ["spec.version"]);
        assert!(
            errors[0]
                .message
                .contains("cannot go down from major version 17 to 15"),
            "{}",
            errors[0].message
        );
        assert!(
            errors[0].message.contains("status.applied.version"),
            "{}",
            errors[0].message
        );
        // Without a status, the old spec is the floor, as before.
        assert_eq!(
            paths(&database_update(&versioned("17"), &versioned("15"))),
            ["spec.version"]
        );
    }

    #[test]
    fn skipping_majors_is_allowed() {
        let old = with_applied(versioned("15"), "15.8");
        assert_eq!(database_update(&old, &versioned("17")), []);
    }

    #[test]
    fn a_major_change_must_change_a_pinned_image() {
        let mut old = versioned("15");
        old.spec.image = Some("registry/postgres:15-custom".into());
        let mut same = versioned("17");
        same.spec.image = old.spec.image.clone();
        let errors = database_update(&old, &same);
        assert_eq!(paths(&errors), ["spec.image"]);
        assert!(
            errors[0].message.contains("registry/postgres:15-custom")
                && errors[0].message.contains("PostgreSQL 17"),
            "{}",
            errors[0].message
        );
        let mut changed = same.clone();
        changed.spec.image = Some("registry/postgres:17-custom".into());
        assert_eq!(database_update(&old, &changed), []);
        // Dropping the pin uses the default image of the new major.
        assert_eq!(database_update(&old, &versioned("17")), []);
        // A minor change keeps the image.
        let mut minor = old.clone();
        minor.spec.version = "15.9".into();
        assert_eq!(database_update(&old, &minor), []);
        // The way back needs the old image back too.
        let upgrading = with_applied(changed.clone(), "15.8");
        let mut back = old.clone();
        back.spec.image = changed.spec.image.clone();
        assert_eq!(paths(&database_update(&upgrading, &back)), ["spec.image"]);
        assert_eq!(database_update(&upgrading, &old), []);
    }

    #[test]
    fn growing_and_upgrading_are_allowed() {
        let old = sample_database();
        let mut new = old.clone();
        new.spec.version = "18".into();
        new.spec.storage.size = "2Gi".into();
        new.spec.instances = 5;
        assert_eq!(database_update(&old, &new), []);
    }

    #[test]
    fn a_backup_needs_its_database_and_a_store() {
        let db = sample_database();
        let bk = v1::Backup::new(
            "b1",
            v1::BackupSpec {
                database: "orders".into(),
                target: Default::default(),
            },
        );
        assert_eq!(paths(&backup(&bk, None)), ["spec.database"]);
        assert_eq!(paths(&backup(&bk, Some(&db))), ["spec.database"]);
        let mut with_store = db.clone();
        with_store.spec.backup = Some(v1::BackupConfig {
            object_store: Some(v1::ObjectStore {
                bucket: "b".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(backup(&bk, Some(&with_store)), []);
    }

    #[test]
    fn wal_storage_rules_run_on_create_and_update_naming_the_field() {
        let mut db = sample_database();
        db.spec.wal_storage = Some(v1::WalStorageSpec {
            size: "1Gi".into(),
            storage_class_name: None,
        });
        let paths = |errors: Vec<FieldError>| -> Vec<String> {
            errors.into_iter().map(|e| e.path).collect()
        };
        assert_eq!(paths(database(&db)), ["spec.walStorage.size"]);
        if let Some(wal) = &mut db.spec.wal_storage {
            wal.size = "2Gi".into();
        }
        assert_eq!(paths(database(&db)), Vec::<String>::new());
        assert_eq!(
            paths(database_update(&sample_database(), &db)),
            ["spec.walStorage"]
        );
    }
}
