//! When a scheduled drill runs: its cron ticks (UTC, parsed by
//! [`crate::schedule`], the code validation uses) and the window after a
//! tick in which a run whose guards do not hold is retried.

use jiff::{SignedDuration, Timestamp};

use crate::api::drill::{DrillSpec, defaults};
use crate::schedule::Schedule;

/// Where a scheduled drill stands at `now`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tick {
    /// The next tick is at this time.
    Waiting(Timestamp),
    /// A tick passed and its window is still open: a run may start.
    Due,
    /// The window of the tick closed without a run; the next tick is at
    /// this time.
    Missed(Timestamp),
}

/// Why a scheduled drill cannot run at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("spec.schedule: {0}")]
pub struct ScheduleRefused(String);

/// The first tick of `expr` strictly after `now`.
pub fn next_tick(expr: &str, now: Timestamp) -> Result<Timestamp, ScheduleRefused> {
    let schedule = Schedule::parse(expr).map_err(|e| ScheduleRefused(e.to_string()))?;
    schedule
        .next_after(now)
        .ok_or_else(|| ScheduleRefused(format!("{expr:?} never runs after {now}")))
}

/// Where `spec`'s schedule stands at `now`, the pending tick being
/// `next_run_at`.
pub fn tick(
    spec: &DrillSpec,
    expr: &str,
    next_run_at: Timestamp,
    now: Timestamp,
) -> Result<Tick, ScheduleRefused> {
    if now < next_run_at {
        return Ok(Tick::Waiting(next_run_at));
    }
    if now <= window_end(spec, next_run_at) {
        return Ok(Tick::Due);
    }
    next_tick(expr, now).map(Tick::Missed)
}

/// When the window of the tick at `at` closes.
pub fn window_end(spec: &DrillSpec, at: Timestamp) -> Timestamp {
    let minutes = spec.window_minutes.unwrap_or(defaults::WINDOW_MINUTES);
    at.checked_add(SignedDuration::from_mins(i64::from(minutes)))
        .unwrap_or(at)
}
