//! `tusk upgrade rollback`: the old data directory back in place of the new
//! one, before the new server ever started. Each step is recognised from
//! the directories, so a rerun after a crash completes it.

use std::path::Path;

use super::state::{self, Stage, State};
use super::{Error, version};

pub fn rollback(pgdata: &Path, old_major: Option<u32>) -> Result<String, Error> {
    let Some(current) = state::read(pgdata)? else {
        let data = version::data_major(pgdata)?;
        if let (Some(old), Some(data)) = (old_major, data)
            && old != data
        {
            return Err(Error::Refused(format!(
                "{} holds PostgreSQL {data} data and no upgrade is under way: the upgraded server has started and the old {old} data directory is gone, so a rollback is impossible",
                pgdata.display()
            )));
        }
        // A run that failed already put everything back; a run that never
        // happened leaves nothing to do either.
        return Ok(format!(
            "no upgrade of {} is under way: nothing to roll back",
            pgdata.display()
        ));
    };
    let State { from, to, stage } = current;
    if !state::rollback_allowed(stage) {
        return Err(Error::Refused(format!(
            "the upgraded PostgreSQL {to} server has already started on {}: its data files are shared with the old {from} directory (pg_upgrade --link), which is no longer safe to use, so a rollback is refused",
            pgdata.display()
        )));
    }
    let old = state::old_dir(pgdata, from);
    let new = state::new_dir(pgdata, to);
    let rejected = state::rejected_dir(pgdata, to);
    if stage != Stage::Preparing {
        state::write(
            pgdata,
            &State {
                from,
                to,
                stage: Stage::RollingBack,
            },
        )?;
    }
    if version::data_major(pgdata)? == Some(to) {
        if !old.exists() {
            return Err(Error::Refused(format!(
                "{} holds the new {to} cluster and the old one is not at {}: nothing to roll back to",
                pgdata.display(),
                old.display()
            )));
        }
        state::remove_new_cluster(&rejected, to)?;
        state::rename(pgdata, &rejected)?;
    }
    if !pgdata.exists() {
        if version::data_major(&old)? != Some(from) {
            return Err(Error::Refused(format!(
                "{} is missing and {} holds no PostgreSQL {from} data: cannot roll back",
                pgdata.display(),
                old.display()
            )));
        }
        state::rename(&old, pgdata)?;
    }
    if version::data_major(pgdata)? != Some(from) {
        return Err(Error::Refused(format!(
            "{} does not hold the PostgreSQL {from} data after the rollback",
            pgdata.display()
        )));
    }
    let restored = state::restore_pg_control(pgdata)?;
    // Never started, and its files are links to the old ones': removing it
    // frees nothing the old cluster needs.
    state::remove_new_cluster(&rejected, to)?;
    state::remove_new_cluster(&new, to)?;
    state::remove(pgdata)?;
    Ok(format!(
        "rolled back {}: the PostgreSQL {from} data directory is back in place{}; the new {to} cluster was removed",
        pgdata.display(),
        if restored {
            " (global/pg_control restored)"
        } else {
            ""
        }
    ))
}
