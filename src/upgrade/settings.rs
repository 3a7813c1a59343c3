//! The old cluster's settings that the new one must be created with: pg_upgrade
//! refuses (or worse, the peers' upgrades silently changed them) when data
//! checksums, the WAL segment size, or template0's encoding, collation,
//! character classification and locale provider differ. Also the `initdb`
//! that creates a new cluster with them (for `check` and `run` alike).

use std::path::Path;

use super::{Error, SUPERUSER, child, command};

/// What `pg_controldata` says about a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlData {
    /// `Data page checksum version` is not 0.
    pub checksums: bool,
    /// `Bytes per WAL segment`.
    pub wal_segment_bytes: u64,
    /// `Database cluster state`, e.g. `shut down` or `in production`.
    pub state: String,
}

/// Parses `pg_controldata` output (its English labels: the Job runs it with
/// `LC_ALL=C`).
pub fn parse_controldata(output: &str) -> Result<ControlData, Error> {
    let value = |label: &str| {
        output.lines().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            (name.trim() == label).then(|| value.trim().to_owned())
        })
    };
    let missing = |label: &str| Error::Parse {
        what: "pg_controldata output",
        detail: format!("no \"{label}\""),
    };
    let checksums =
        value("Data page checksum version").ok_or_else(|| missing("Data page checksum version"))?;
    let checksums = checksums.parse::<u32>().map_err(|_| Error::Parse {
        what: "the data page checksum version",
        detail: checksums.clone(),
    })? != 0;
    let segment = value("Bytes per WAL segment").ok_or_else(|| missing("Bytes per WAL segment"))?;
    let wal_segment_bytes = segment.parse().map_err(|_| Error::Parse {
        what: "the WAL segment size",
        detail: segment.clone(),
    })?;
    let state = value("Database cluster state").ok_or_else(|| missing("Database cluster state"))?;
    Ok(ControlData {
        checksums,
        wal_segment_bytes,
        state,
    })
}

/// Runs `pg_controldata` of `bindir` on `pgdata`.
pub async fn controldata(bindir: &Path, pgdata: &Path) -> Result<ControlData, Error> {
    let mut cmd = child::async_command(bindir.join("pg_controldata"));
    cmd.arg(pgdata).env("LC_ALL", "C");
    let output = command::run(cmd, "pg_controldata").await?;
    parse_controldata(&output.stdout)
}

/// template0's locale settings: pg_upgrade compares them between the
/// clusters, so `initdb` must reproduce them exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Locale {
    pub encoding: String,
    pub collate: String,
    pub ctype: String,
    /// `libc`, `icu` or `builtin`.
    pub provider: String,
    /// The ICU or builtin provider's locale.
    pub provider_locale: Option<String>,
    /// ICU collation rules (16 on).
    pub icu_rules: Option<String>,
}

/// The query for [`Locale`] on a server of `major`: the catalog's columns
/// were renamed over the releases.
pub fn locale_query(major: u32) -> String {
    let (provider_locale, rules) = match major {
        ..=14 => ("NULL::text", "NULL::text"),
        15 => ("daticulocale", "NULL::text"),
        16 => ("daticulocale", "daticurules"),
        _ => ("datlocale", "daticurules"),
    };
    let provider = if major >= 15 {
        "datlocprovider::text"
    } else {
        "'c'::text"
    };
    format!(
        "SELECT pg_encoding_to_char(encoding)::text, datcollate::text, datctype::text, \
         {provider}, {provider_locale}::text, {rules}::text \
         FROM pg_database WHERE datname = 'template0'"
    )
}

/// Reads [`Locale`] through `client`, connected to a server of `major`.
pub async fn locale(client: &tokio_postgres::Client, major: u32) -> Result<Locale, Error> {
    let row = client
        .query_one(&locale_query(major), &[])
        .await
        .map_err(Error::sql("reading template0's locale"))?;
    let provider: String = row.get(3);
    let provider = match provider.as_str() {
        "c" => "libc",
        "i" => "icu",
        "b" => "builtin",
        other => {
            return Err(Error::Parse {
                what: "template0's locale provider",
                detail: other.to_owned(),
            });
        }
    };
    Ok(Locale {
        encoding: row.get(0),
        collate: row.get(1),
        ctype: row.get(2),
        provider: provider.to_owned(),
        provider_locale: row.get::<_, Option<String>>(4).filter(|s| !s.is_empty()),
        icu_rules: row.get::<_, Option<String>>(5).filter(|s| !s.is_empty()),
    })
}

/// Everything the new cluster must share with the old one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSettings {
    pub control: ControlData,
    pub locale: Locale,
}

/// `initdb`'s arguments (after `--pgdata`) creating a cluster of
/// `new_major` with `settings`. Local connections by the OS user only and
/// no TCP at all: the instance manager renders its own `pg_hba.conf` before
/// the first real start.
pub fn initdb_args(settings: &ClusterSettings, new_major: u32) -> Result<Vec<String>, Error> {
    let bytes = settings.control.wal_segment_bytes;
    if bytes == 0 || !bytes.is_multiple_of(1024 * 1024) {
        return Err(Error::Parse {
            what: "the WAL segment size",
            detail: format!("{bytes} bytes is not a whole number of MB"),
        });
    }
    let locale = &settings.locale;
    let mut args = vec![
        format!("--username={SUPERUSER}"),
        "--auth-local=peer".to_owned(),
        "--auth-host=reject".to_owned(),
        format!("--wal-segsize={}", bytes / (1024 * 1024)),
        format!("--encoding={}", locale.encoding),
        format!("--lc-collate={}", locale.collate),
        format!("--lc-ctype={}", locale.ctype),
        format!("--locale-provider={}", locale.provider),
        "--no-instructions".to_owned(),
    ];
    if settings.control.checksums {
        args.push("--data-checksums".to_owned());
    } else if new_major >= 18 {
        // 18 turned checksums on by default.
        args.push("--no-data-checksums".to_owned());
    }
    match (locale.provider.as_str(), &locale.provider_locale) {
        ("icu", Some(l)) => args.push(format!("--icu-locale={l}")),
        ("builtin", Some(l)) => args.push(format!("--builtin-locale={l}")),
        _ => {}
    }
    if let Some(rules) = &locale.icu_rules {
        args.push(format!("--icu-rules={rules}"));
    }
    Ok(args)
}

/// The settings a new cluster copies, for a message.
pub fn describe(settings: &ClusterSettings) -> String {
    let l = &settings.locale;
    format!(
        "checksums {}, WAL segments of {} MB, encoding {}, collate {}, ctype {}, provider {}{}",
        if settings.control.checksums {
            "on"
        } else {
            "off"
        },
        settings.control.wal_segment_bytes / (1024 * 1024),
        l.encoding,
        l.collate,
        l.ctype,
        l.provider,
        l.provider_locale
            .as_deref()
            .map(|p| format!(" ({p})"))
            .unwrap_or_default()
    )
}

/// `initdb` of `major` into `dir` with `settings`.
pub async fn initdb(
    bindir: &Path,
    dir: &Path,
    waldir: Option<&Path>,
    settings: &ClusterSettings,
    major: u32,
) -> Result<(), Error> {
    let mut cmd = child::async_command(bindir.join("initdb"));
    cmd.arg("--pgdata")
        .arg(dir)
        .args(initdb_args(settings, major)?)
        .env("LC_MESSAGES", "C");
    if let Some(waldir) = waldir {
        cmd.arg("--waldir").arg(waldir);
    }
    command::run(cmd, "initdb").await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTROLDATA: &str = "\
pg_control version number:            1300
Catalog version number:               202209061
Database system identifier:           7441234567890123456
Database cluster state:               shut down
Maximum data alignment:               8
Database block size:                  8192
Bytes per WAL segment:                33554432
Data page checksum version:           1
Mock authentication nonce:            53a2
";

    #[test]
    fn control_data_gives_checksums_segment_size_and_state() {
        let parsed = parse_controldata(CONTROLDATA).expect("parses");
        assert_eq!(
            parsed,
            ControlData {
                checksums: true,
                wal_segment_bytes: 32 * 1024 * 1024,
                state: "shut down".into()
            }
        );
        let off = CONTROLDATA.replace("version:           1", "version:           0");
        assert!(!parse_controldata(&off).expect("parses").checksums);
        let err =
            parse_controldata("Database cluster state: in production").expect_err("incomplete");
        assert!(
            err.to_string().contains("Data page checksum version"),
            "{err}"
        );
    }

    fn settings(provider: &str, provider_locale: Option<&str>, checksums: bool) -> ClusterSettings {
        ClusterSettings {
            control: ControlData {
                checksums,
                wal_segment_bytes: 64 * 1024 * 1024,
                state: "shut down".into(),
            },
            locale: Locale {
                encoding: "UTF8".into(),
                collate: "C.UTF-8".into(),
                ctype: "C.UTF-8".into(),
                provider: provider.into(),
                provider_locale: provider_locale.map(str::to_owned),
                icu_rules: None,
            },
        }
    }

    #[test]
    fn initdb_reproduces_every_setting() {
        let args = initdb_args(&settings("libc", None, true), 17).expect("args");
        for expected in [
            "--wal-segsize=64",
            "--encoding=UTF8",
            "--lc-collate=C.UTF-8",
            "--lc-ctype=C.UTF-8",
            "--locale-provider=libc",
            "--data-checksums",
            "--username=postgres",
        ] {
            assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
        }
        let args = initdb_args(&settings("icu", Some("de-DE"), false), 18).expect("args");
        assert!(args.iter().any(|a| a == "--icu-locale=de-DE"), "{args:?}");
        assert!(args.iter().any(|a| a == "--no-data-checksums"), "{args:?}");
        assert!(!args.iter().any(|a| a == "--data-checksums"), "{args:?}");
        let args = initdb_args(&settings("libc", None, false), 17).expect("args");
        assert!(!args.iter().any(|a| a.contains("checksums")), "{args:?}");
        let mut odd = settings("libc", None, true);
        odd.control.wal_segment_bytes = 1000;
        assert!(initdb_args(&odd, 17).is_err());
    }

    #[test]
    fn the_locale_query_follows_the_catalog_of_each_major() {
        assert!(locale_query(15).contains("daticulocale"));
        assert!(!locale_query(15).contains("daticurules"));
        assert!(locale_query(16).contains("daticurules"));
        assert!(locale_query(17).contains("datlocale"));
        assert!(locale_query(14).contains("'c'::text"));
    }
}
