//! The SQL side of a base backup: one session to the local server that starts
//! a non-exclusive backup (`pg_backup_start`) and, once the data directory is
//! read, stops it (`pg_backup_stop`) and returns the label PostgreSQL wrote.
//! The backup lives and dies with the session: closing it ends the backup in
//! PostgreSQL too.

use tokio_postgres::Client;

use crate::contract::Lsn;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Sql {
        context: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("PostgreSQL's backup label does not say {0}")]
    Label(&'static str),
}

impl Error {
    fn sql(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> Self {
        move |source| Self::Sql { context, source }
    }
}

/// What `pg_backup_start` and the server say before the data is read.
pub struct Started {
    pub begin_lsn: Lsn,
    pub standby: bool,
    pub version: u32,
    pub system_identifier: u64,
    pub segment_size: u64,
}

/// Reads the server's identity and starts the backup labelled `label`.
pub async fn start(client: &Client, label: &str) -> Result<Started, Error> {
    let row = client
        .query_one(
            "SELECT pg_is_in_recovery(), current_setting('server_version_num')::int, \
                    (SELECT system_identifier::text FROM pg_control_system()), \
                    (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size')",
            &[],
        )
        .await
        .map_err(Error::sql("reading the server's identity"))?;
    let standby: bool = row.get(0);
    let version: i32 = row.get(1);
    let system: String = row.get(2);
    let segment_size: i64 = row.get(3);
    // fast => true: an immediate checkpoint, as a backup someone asked for
    // now should not wait for the next scheduled one.
    let begin: String = client
        .query_one("SELECT pg_backup_start($1, true)::text", &[&label])
        .await
        .map_err(Error::sql("pg_backup_start"))?
        .get(0);
    Ok(Started {
        begin_lsn: begin.parse().map_err(|_| Error::Label("where it starts"))?,
        standby,
        version: u32::try_from(version).unwrap_or_default(),
        system_identifier: system
            .parse()
            .map_err(|_| Error::Label("the system identifier"))?,
        segment_size: u64::try_from(segment_size).unwrap_or_default(),
    })
}

/// What `pg_backup_stop` returns.
#[derive(Clone, Debug)]
pub struct Labels {
    pub end_lsn: Lsn,
    /// The `backup_label` file's content.
    pub label: String,
    /// The `tablespace_map` file's content; empty without tablespaces.
    pub tablespace_map: String,
}

impl Labels {
    fn field(&self, name: &str) -> Option<&str> {
        self.label
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
    }

    pub fn timeline(&self) -> Result<u32, Error> {
        self.field("START TIMELINE")
            .and_then(|t| t.trim().parse().ok())
            .ok_or(Error::Label("START TIMELINE"))
    }

    /// `START WAL LOCATION: 0/2000028 (file 000000010000000000000002)`.
    pub fn begin_wal(&self) -> Result<String, Error> {
        self.field("START WAL LOCATION")
            .and_then(|v| v.split_once("(file ")?.1.strip_suffix(')'))
            .map(str::to_owned)
            .ok_or(Error::Label("START WAL LOCATION"))
    }
}

/// Stops the backup started on this session; on a primary, also ends the WAL
/// segment the backup ends in.
pub async fn stop(client: &Client, standby: bool) -> Result<Labels, Error> {
    // Not waiting for the archive here: on a standby PostgreSQL could not
    // (archive_mode=on archives on the primary only), and on a primary it
    // would wait forever while the store is down. The caller bounds the wait.
    let row = client
        .query_one(
            "SELECT lsn::text, labelfile, coalesce(spcmapfile, '') FROM pg_backup_stop(false)",
            &[],
        )
        .await
        .map_err(Error::sql("pg_backup_stop"))?;
    let end: String = row.get(0);
    let labels = Labels {
        end_lsn: end.parse().map_err(|_| Error::Label("where it ends"))?,
        label: row.get(1),
        tablespace_map: row.get(2),
    };
    if !standby {
        // The segment the backup ends in is complete only when the server
        // moves on; archive it now rather than at archive_timeout.
        client
            .execute("SELECT pg_switch_wal()", &[])
            .await
            .map_err(Error::sql("pg_switch_wal"))?;
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_names_the_start_wal_and_timeline() {
        let labels = Labels {
            end_lsn: Lsn(0x3000120),
            label: "START WAL LOCATION: 0/3000028 (file 000000010000000000000003)\n\
                    CHECKPOINT LOCATION: 0/3000060\n\
                    BACKUP METHOD: streamed\n\
                    BACKUP FROM: standby\n\
                    START TIME: 2026-11-24 10:15:00 UTC\n\
                    LABEL: tusk b 20261124T101500Z\n\
                    START TIMELINE: 2\n"
                .into(),
            tablespace_map: String::new(),
        };
        assert_eq!(labels.timeline().expect("timeline"), 2);
        assert_eq!(
            labels.begin_wal().expect("begin"),
            "000000010000000000000003"
        );
        let empty = Labels {
            label: String::new(),
            ..labels
        };
        assert!(matches!(empty.timeline(), Err(Error::Label(_))));
    }
}
