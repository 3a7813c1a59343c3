//! Cron schedules in UTC, parsed and searched: when a scheduled run is due.
//! `spec.backup.schedule` is one; validation (`api::validate`) parses it
//! with the same code that decides when it is due.
//!
//! A leaf: it names nothing else of the crate, so the bottom layer (`api`)
//! and the planner (`lifecycle`) may both use it. Pure: the
//! caller gives the times.
//!
//! Expressions are cron, always in UTC: five fields (`0 2 * * *`), the same
//! with a leading seconds field and optionally a trailing year (the `cron`
//! crate's native form), or a shorthand such as `@daily`. The crate parses the
//! fields; the times are searched for here, on `jiff`'s civil time, for two
//! reasons: the crate answers in `chrono` types, which this crate does not
//! otherwise use, and [`Schedule::due`] must find the latest missed time after
//! a long downtime without walking every missed one (a year of `* * * * *` is
//! half a million runs). The search descends field by field from the bound,
//! so it costs a handful of steps for any schedule that matches at all, and at
//! worst a scan of the days of the years in between for one that hardly does.
//!
//! The day fields are read as crontab(5) and Kubernetes CronJobs read them,
//! not as the crate does, in every form: day of week 0 (or 7) is Sunday where
//! the crate has 1 = Sunday, so `0 2 * * 1-5` is Monday to Friday; and when
//! both day of month and day of week are restricted, a day matching either
//! runs, where the crate wants both.

use std::str::FromStr;

use cron::TimeUnitSpec;
use jiff::Timestamp;
use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;

/// Why a schedule expression is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("the schedule is empty: expected cron fields such as \"0 2 * * *\", or @daily")]
    Empty,
    #[error(
        "{expr:?} has {fields} fields: expected 5 (minute hour day-of-month month day-of-week), 6 with a leading seconds field, 7 with a trailing year, or one of {SHORTHANDS}"
    )]
    FieldCount { expr: String, fields: usize },
    #[error("{expr:?} is not a known shorthand: expected one of {SHORTHANDS}")]
    Shorthand { expr: String },
    #[error(
        "{expr:?}: day of week {item:?} is not 0-7 (0 and 7 are Sunday), a name such as MON, or a range or step of those"
    )]
    DayOfWeek { expr: String, item: String },
    #[error("{expr:?} is not a valid cron schedule: {reason}")]
    Invalid { expr: String, reason: String },
    #[error("{expr:?} never matches a time between 1970 and 2100")]
    Never { expr: String },
}

const SHORTHANDS: &str = "@yearly, @annually, @monthly, @weekly, @daily, @hourly";

/// The latest year the `cron` crate has ordinals for; nothing matches after.
const LAST_YEAR: u32 = 2100;
/// The earliest, likewise.
const FIRST_YEAR: u32 = 1970;

/// A parsed backup schedule.
#[derive(Clone, Debug)]
pub struct Schedule {
    source: String,
    fields: cron::Schedule,
    /// crontab(5): both day fields restricted means either may match.
    either_day: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Toward {
    Earlier,
    Later,
}

impl Schedule {
    /// Parses `expr`; see the module documentation for the forms accepted.
    pub fn parse(expr: &str) -> Result<Self, ScheduleError> {
        let fields: Vec<&str> = expr.split_whitespace().collect();
        // The fields as the crate gets them, and as the user wrote them (with
        // the seconds added), to name the culprit in a refusal.
        let (normalised, given, either_day) = match fields.as_slice() {
            [] => return Err(ScheduleError::Empty),
            [shorthand] if shorthand.starts_with('@') => {
                let expanded = expand(shorthand).ok_or_else(|| ScheduleError::Shorthand {
                    expr: expr.to_owned(),
                })?;
                let fields: Vec<String> = expanded.split(' ').map(str::to_owned).collect();
                (fields.clone(), fields, false)
            }
            _ if (5..=7).contains(&fields.len()) => {
                let mut given: Vec<String> = fields.iter().map(|f| (*f).to_owned()).collect();
                if given.len() == 5 {
                    given.insert(0, "0".to_owned());
                }
                let either_day = restricted(&given[3]) && restricted(&given[5]);
                let mut normalised = given.clone();
                normalised[5] =
                    crate_days_of_week(&given[5]).map_err(|item| ScheduleError::DayOfWeek {
                        expr: expr.to_owned(),
                        item,
                    })?;
                (normalised, given, either_day)
            }
            _ => {
                return Err(ScheduleError::FieldCount {
                    expr: expr.to_owned(),
                    fields: fields.len(),
                });
            }
        };
        let parsed = cron::Schedule::from_str(&normalised.join(" ")).map_err(|e| {
            ScheduleError::Invalid {
                expr: expr.to_owned(),
                reason: explain(&e.to_string(), &normalised, &given),
            }
        })?;
        let schedule = Self {
            source: fields.join(" "),
            fields: parsed,
            either_day,
        };
        // A schedule that never fires would silently mean no backups at all.
        let epoch = jiff::civil::date(1970, 1, 1).at(0, 0, 0, 0);
        if schedule.find(epoch, Toward::Later, LAST_YEAR).is_none() {
            return Err(ScheduleError::Never {
                expr: expr.to_owned(),
            });
        }
        Ok(schedule)
    }

    /// The expression as given, with its whitespace collapsed.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The latest scheduled time `t` with `since < t <= now`, if any.
    ///
    /// `since` is the scheduled time of the last run taken (or when the
    /// Database was created): after a downtime that missed several runs,
    /// only the latest is returned, so one backup is taken, not a burst.
    pub fn due(&self, since: Timestamp, now: Timestamp) -> Option<Timestamp> {
        if now <= since {
            return None;
        }
        // Scheduled times are whole seconds, so comparing `now`'s civil
        // fields (its floor) loses nothing.
        let from = TimeZone::UTC.to_datetime(now);
        let since_year = TimeZone::UTC.to_datetime(since).year();
        let floor = u32::try_from(since_year).unwrap_or(0).max(FIRST_YEAR);
        let latest = self.find(from, Toward::Earlier, floor)?;
        let latest = TimeZone::UTC.to_timestamp(latest).ok()?;
        (latest > since).then_some(latest)
    }

    /// The first scheduled time strictly after `now`: when to look again.
    pub fn next_after(&self, now: Timestamp) -> Option<Timestamp> {
        // One second on, then the floor: the first whole second after `now`.
        let from = now.checked_add(std::time::Duration::from_secs(1)).ok()?;
        let next = self.find(TimeZone::UTC.to_datetime(from), Toward::Later, LAST_YEAR)?;
        TimeZone::UTC.to_timestamp(next).ok()
    }

    /// Whether the whole second of `at` is a scheduled time.
    #[cfg(test)]
    fn matches(&self, at: DateTime) -> bool {
        let ordinal = |v: i8| u32::try_from(v).unwrap_or(u32::MAX);
        u32::try_from(at.year()).is_ok_and(|y| self.fields.years().includes(y))
            && self.fields.months().includes(ordinal(at.month()))
            && self.day_matches(at.date())
            && self.fields.hours().includes(ordinal(at.hour()))
            && self.fields.minutes().includes(ordinal(at.minute()))
            && self.fields.seconds().includes(ordinal(at.second()))
    }

    fn day_matches(&self, date: Date) -> bool {
        let day_of_month =
            u32::try_from(date.day()).is_ok_and(|d| self.fields.days_of_month().includes(d));
        let day_of_week = u32::try_from(date.weekday().to_sunday_one_offset())
            .is_ok_and(|d| self.fields.days_of_week().includes(d));
        if self.either_day {
            day_of_month || day_of_week
        } else {
            day_of_month && day_of_week
        }
    }

    /// The latest match at or before `from`'s second (`Earlier`), or the
    /// earliest at or after it (`Later`), not looking past `limit_year`.
    ///
    /// Each field's candidates are bounded by `from` only while every coarser
    /// field equals `from`'s; past that the whole range is open, so the first
    /// candidate at each level below a matching day is the answer.
    fn find(&self, from: DateTime, toward: Toward, limit_year: u32) -> Option<DateTime> {
        let part = |v: i8| u32::try_from(v).ok();
        let year = u32::try_from(from.year()).unwrap_or(0);
        let (month, day) = (part(from.month())?, part(from.day())?);
        let (hour, minute, second) = (
            part(from.hour())?,
            part(from.minute())?,
            part(from.second())?,
        );
        let span = |capped: bool, at: u32, min: u32, max: u32| match toward {
            Toward::Earlier => (min, if capped { at } else { max }),
            Toward::Later => (if capped { at } else { min }, max),
        };
        let years = match toward {
            Toward::Earlier => (limit_year, year),
            Toward::Later => (year, limit_year),
        };
        for y in ordinals(self.fields.years(), years, toward) {
            let on_year = y == year;
            let months = span(on_year, month, 1, 12);
            for m in ordinals(self.fields.months(), months, toward) {
                let on_month = on_year && m == month;
                for d in in_order(span(on_month, day, 1, 31), toward) {
                    let date = Date::new(
                        i16::try_from(y).ok()?,
                        i8::try_from(m).ok()?,
                        i8::try_from(d).ok()?,
                    );
                    // Days past the month's end (Feb 30) do not exist.
                    let Some(date) = date.ok().filter(|date| self.day_matches(*date)) else {
                        continue;
                    };
                    let on_day = on_month && d == day;
                    let hours = span(on_day, hour, 0, 23);
                    for h in ordinals(self.fields.hours(), hours, toward) {
                        let on_hour = on_day && h == hour;
                        let minutes = span(on_hour, minute, 0, 59);
                        for mi in ordinals(self.fields.minutes(), minutes, toward) {
                            let on_minute = on_hour && mi == minute;
                            let seconds = span(on_minute, second, 0, 59);
                            if let Some(&s) =
                                ordinals(self.fields.seconds(), seconds, toward).first()
                            {
                                let time = jiff::civil::Time::new(
                                    i8::try_from(h).ok()?,
                                    i8::try_from(mi).ok()?,
                                    i8::try_from(s).ok()?,
                                    0,
                                )
                                .ok()?;
                                return Some(date.to_datetime(time));
                            }
                        }
                    }
                }
            }
        }
        None
    }
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// The members of `spec` in `lo..=hi`, in the search's order.
fn ordinals<T: TimeUnitSpec + ?Sized>(spec: &T, (lo, hi): (u32, u32), toward: Toward) -> Vec<u32> {
    // The underlying BTreeSet::range panics on an inverted range.
    if lo > hi {
        return Vec::new();
    }
    let range = spec.range(lo..=hi);
    match toward {
        Toward::Earlier => range.rev().collect(),
        Toward::Later => range.collect(),
    }
}

fn in_order((lo, hi): (u32, u32), toward: Toward) -> Vec<u32> {
    match toward {
        Toward::Earlier => (lo..=hi).rev().collect(),
        Toward::Later => (lo..=hi).collect(),
    }
}

/// Each field of the six- or seven-field form: its name and what it takes.
const FIELDS: [(&str, &str); 7] = [
    ("second", "0-59"),
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT"),
    ("year", "1970-2100"),
];

/// The crate's refusal in the user's terms. The crate prints the expression it
/// was given (with our seconds field and day-of-week rewriting), a caret under
/// the field it refused, and sometimes a description whose ranges are off by
/// one; so the caret picks the field, and the description is ours.
fn explain(message: &str, normalised: &[String], given: &[String]) -> String {
    let caret = message
        .lines()
        .find_map(|line| (line.trim_start() == "^").then(|| line.len().saturating_sub(1)));
    let mut start = 0;
    for (index, field) in normalised.iter().enumerate() {
        let end = start + field.len();
        if caret.is_some_and(|column| column >= start && column <= end)
            && let (Some((name, takes)), Some(value)) = (FIELDS.get(index), given.get(index))
        {
            return format!(
                "the {name} field is {value:?}, where {takes}, or a list, range or step of those, is expected"
            );
        }
        start = end + 1;
    }
    let description = message
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty() && *line != "^" && *line != normalised.join(" "));
    description.unwrap_or("not understood").to_owned()
}

/// The six-field form of a shorthand (Unix cron's meanings; `@weekly` is
/// Sunday midnight).
fn expand(shorthand: &str) -> Option<&'static str> {
    Some(match shorthand {
        "@yearly" | "@annually" => "0 0 0 1 1 *",
        "@monthly" => "0 0 0 1 * *",
        "@weekly" => "0 0 0 * * SUN",
        "@daily" => "0 0 0 * * *",
        "@hourly" => "0 0 * * * *",
        _ => return None,
    })
}

/// crontab(5) calls a day field unrestricted when it starts with `*`, even
/// with a step (`*/2`); `?` is the crate's spelling of the same.
fn restricted(field: &str) -> bool {
    !(field.starts_with('*') || field == "?")
}

/// Rewrites a crontab(5) day-of-week field (0-7, 0 and 7 Sunday) as the
/// crate's (1-7, 1 Sunday): an explicit list, so ranges and steps keep their
/// crontab meaning. The error is the item that is not understood.
fn crate_days_of_week(field: &str) -> Result<String, String> {
    if field == "*" || field == "?" {
        return Ok(field.to_owned());
    }
    let mut days = [false; 7];
    for item in field.split(',') {
        let bad = || item.to_owned();
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step = step.parse::<u8>().ok().filter(|s| *s > 0);
                (range, Some(step.ok_or_else(bad)?))
            }
            None => (item, None),
        };
        let (first, last) = match (range, range.split_once('-')) {
            ("*", _) => (0, 7),
            (_, Some((first, last))) => (
                weekday(first).ok_or_else(bad)?,
                weekday(last).ok_or_else(bad)?,
            ),
            // `n/step` runs from n to the end of the week, as elsewhere.
            (day, None) => {
                let day = weekday(day).ok_or_else(bad)?;
                (day, if step.is_some() { 7 } else { day })
            }
        };
        if first > last {
            return Err(bad());
        }
        for day in (first..=last).step_by(step.unwrap_or(1).into()) {
            days[usize::from(day % 7)] = true;
        }
    }
    let list: Vec<String> = (1..=7)
        .zip(days)
        .filter(|(_, on)| *on)
        .map(|(ordinal, _)| ordinal.to_string())
        .collect();
    Ok(list.join(","))
}

/// A crontab day of week: 0-7 with 0 and 7 Sunday, or a name.
fn weekday(text: &str) -> Option<u8> {
    if let Ok(number) = text.parse::<u8>() {
        return (number <= 7).then_some(number);
    }
    Some(match text.to_ascii_lowercase().as_str() {
        "sun" | "sunday" => 0,
        "mon" | "monday" => 1,
        "tue" | "tues" | "tuesday" => 2,
        "wed" | "wednesday" => 3,
        "thu" | "thurs" | "thursday" => 4,
        "fri" | "friday" => 5,
        "sat" | "saturday" => 6,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    fn schedule(expr: &str) -> Schedule {
        Schedule::parse(expr).expect(expr)
    }

    fn due(expr: &str, since: &str, now: &str) -> Option<String> {
        schedule(expr)
            .due(at(since), at(now))
            .map(|t| t.to_string())
    }

    fn next(expr: &str, now: &str) -> Option<String> {
        schedule(expr).next_after(at(now)).map(|t| t.to_string())
    }

    #[test]
    fn every_minute_is_due_at_the_latest_whole_minute() {
        let every = "* * * * *";
        assert_eq!(
            due(every, "2026-11-24T10:00:00Z", "2026-11-24T10:03:42.5Z").as_deref(),
            Some("2026-11-24T10:03:00Z")
        );
        assert_eq!(
            due(every, "2026-11-24T10:00:00Z", "2026-11-24T10:00:59.999Z"),
            None
        );
        assert_eq!(
            next(every, "2026-11-24T10:03:00Z").as_deref(),
            Some("2026-11-24T10:04:00Z")
        );
        assert_eq!(
            next(every, "2026-12-31T23:59:30Z").as_deref(),
            Some("2027-01-01T00:00:00Z")
        );
    }

    #[test]
    fn daily_at_two_is_due_once_two_has_passed() {
        let daily = "0 2 * * *";
        assert_eq!(
            due(daily, "2026-11-23T02:00:00Z", "2026-11-24T01:59:59Z"),
            None
        );
        assert_eq!(
            due(daily, "2026-11-23T02:00:00Z", "2026-11-24T02:00:00Z").as_deref(),
            Some("2026-11-24T02:00:00Z")
        );
        assert_eq!(
            due(daily, "2026-11-23T02:00:00Z", "2026-11-24T13:00:00Z").as_deref(),
            Some("2026-11-24T02:00:00Z")
        );
        assert_eq!(
            next(daily, "2026-11-24T02:00:00Z").as_deref(),
            Some("2026-11-25T02:00:00Z")
        );
        assert_eq!(
            next(daily, "2026-11-24T01:59:59.9Z").as_deref(),
            Some("2026-11-24T02:00:00Z")
        );
    }

    #[test]
    fn hourly_runs_on_the_hour() {
        assert_eq!(
            due("@hourly", "2026-11-24T09:00:00Z", "2026-11-24T10:59:00Z").as_deref(),
            Some("2026-11-24T10:00:00Z")
        );
        assert_eq!(
            next("@hourly", "2026-11-24T10:00:00Z").as_deref(),
            Some("2026-11-24T11:00:00Z")
        );
    }

    #[test]
    fn after_a_downtime_only_the_latest_missed_run_is_due() {
        // Three nightly runs missed: one backup, for the last of them.
        assert_eq!(
            due("0 2 * * *", "2026-11-20T02:00:00Z", "2026-11-23T09:00:00Z").as_deref(),
            Some("2026-11-23T02:00:00Z")
        );
        // A year of an every-minute schedule missed: the latest minute, not
        // the first. (The search descends from the bound rather than walking
        // the half a million runs; a speed is not a test's to assert.)
        assert_eq!(
            due("* * * * *", "2025-11-24T10:00:00Z", "2026-11-24T10:00:30Z").as_deref(),
            Some("2026-11-24T10:00:00Z")
        );
    }

    #[test]
    fn nothing_is_due_before_the_first_run() {
        assert_eq!(
            due("0 2 * * *", "2026-11-24T02:30:00Z", "2026-11-25T01:00:00Z"),
            None
        );
        assert_eq!(
            due("0 2 * * *", "2026-11-24T02:30:00Z", "2026-11-24T02:30:00Z"),
            None
        );
        // A clock that went backwards is not a reason to run.
        assert_eq!(
            due("* * * * *", "2026-11-24T02:30:00Z", "2026-11-24T01:00:00Z"),
            None
        );
    }

    #[test]
    fn the_run_taken_at_since_is_not_due_again() {
        let daily = "0 2 * * *";
        assert_eq!(
            due(daily, "2026-11-24T02:00:00Z", "2026-11-24T02:00:00Z"),
            None
        );
        assert_eq!(
            due(daily, "2026-11-24T02:00:00Z", "2026-11-24T23:59:59Z"),
            None
        );
    }

    #[test]
    fn times_are_utc_so_daylight_saving_changes_nothing() {
        // Europe changed clocks on 2026-03-29, the US on 2026-03-08: a UTC
        // schedule neither skips nor repeats around either.
        let daily = schedule("30 2 * * *");
        for (since, expected) in [
            ("2026-03-28T02:30:00Z", "2026-03-29T02:30:00Z"),
            ("2026-03-07T02:30:00Z", "2026-03-08T02:30:00Z"),
            ("2026-10-24T02:30:00Z", "2026-10-25T02:30:00Z"),
        ] {
            let since = at(since);
            let next = daily.next_after(since).expect("a next run");
            assert_eq!(next.to_string(), expected);
            assert_eq!(next.duration_since(since).as_secs(), 86_400);
            assert_eq!(daily.due(since, next), Some(next));
        }
    }

    #[test]
    fn a_leading_seconds_field_and_a_trailing_year_are_accepted() {
        assert_eq!(
            due(
                "30 0 2 * * *",
                "2026-11-23T02:00:30Z",
                "2026-11-24T02:00:29Z"
            ),
            None
        );
        assert_eq!(
            due(
                "30 0 2 * * *",
                "2026-11-23T02:00:30Z",
                "2026-11-24T02:00:30Z"
            )
            .as_deref(),
            Some("2026-11-24T02:00:30Z")
        );
        assert_eq!(
            next("*/15 * * * * *", "2026-11-24T02:00:30Z").as_deref(),
            Some("2026-11-24T02:00:45Z")
        );
        assert_eq!(
            next("0 0 2 1 1 * 2030", "2026-11-24T00:00:00Z").as_deref(),
            Some("2030-01-01T02:00:00Z")
        );
        assert_eq!(next("0 0 2 1 1 * 2030", "2030-01-01T02:00:00Z"), None);
    }

    #[test]
    fn every_shorthand_means_what_unix_cron_means() {
        // 2026-11-24 is a Tuesday.
        let now = "2026-11-24T10:30:00Z";
        for (expr, next_run) in [
            ("@yearly", "2027-01-01T00:00:00Z"),
            ("@annually", "2027-01-01T00:00:00Z"),
            ("@monthly", "2026-12-01T00:00:00Z"),
            ("@weekly", "2026-11-29T00:00:00Z"),
            ("@daily", "2026-11-25T00:00:00Z"),
            ("@hourly", "2026-11-24T11:00:00Z"),
        ] {
            assert_eq!(next(expr, now).as_deref(), Some(next_run), "{expr}");
        }
    }

    #[test]
    fn days_of_week_count_from_sunday_zero_as_in_crontab() {
        // From Tuesday 2026-11-24: Sunday is the 29th, Monday the 30th.
        let now = "2026-11-24T10:30:00Z";
        for (expr, next_run) in [
            ("0 2 * * 0", "2026-11-29T02:00:00Z"),
            ("0 2 * * 7", "2026-11-29T02:00:00Z"),
            ("0 2 * * SUN", "2026-11-29T02:00:00Z"),
            ("0 2 * * 1", "2026-11-30T02:00:00Z"),
            ("0 2 * * mon", "2026-11-30T02:00:00Z"),
            ("0 2 * * 6", "2026-11-28T02:00:00Z"),
            ("0 2 * * 1-5", "2026-11-25T02:00:00Z"),
            ("0 2 * * 5-7", "2026-11-27T02:00:00Z"),
            ("0 2 * * */3", "2026-11-25T02:00:00Z"),
            ("0 2 * * 4/7", "2026-11-26T02:00:00Z"),
            ("0 0 2 * * 0", "2026-11-29T02:00:00Z"),
        ] {
            assert_eq!(next(expr, now).as_deref(), Some(next_run), "{expr}");
        }
        // The Monday-to-Friday schedule skips the weekend.
        assert_eq!(
            next("0 2 * * MON-FRI", "2026-11-27T03:00:00Z").as_deref(),
            Some("2026-11-30T02:00:00Z")
        );
    }

    #[test]
    fn both_day_fields_restricted_means_either_day() {
        // The 13th, or any Friday: Friday the 27th comes before December 13th.
        let either = "0 0 13 * 5";
        assert_eq!(
            next(either, "2026-11-24T00:00:00Z").as_deref(),
            Some("2026-11-27T00:00:00Z")
        );
        assert_eq!(
            next(either, "2026-12-12T00:00:00Z").as_deref(),
            Some("2026-12-13T00:00:00Z")
        );
        // A field starting with a star, even with a step, makes both apply:
        // an odd day that is a Friday.
        assert_eq!(
            next("0 0 */2 * 5", "2026-11-24T00:00:00Z").as_deref(),
            Some("2026-11-27T00:00:00Z")
        );
        assert_eq!(
            next("0 0 */2 * 5", "2026-11-28T00:00:00Z").as_deref(),
            Some("2026-12-11T00:00:00Z")
        );
        assert_eq!(
            next("0 0 1 * *", "2026-11-24T00:00:00Z").as_deref(),
            Some("2026-12-01T00:00:00Z")
        );
    }

    #[test]
    fn leap_days_and_month_ends_are_found() {
        assert_eq!(
            next("0 0 29 2 *", "2026-11-24T00:00:00Z").as_deref(),
            Some("2028-02-29T00:00:00Z")
        );
        assert_eq!(
            due("0 0 29 2 *", "2020-01-01T00:00:00Z", "2026-11-24T00:00:00Z").as_deref(),
            Some("2024-02-29T00:00:00Z")
        );
        assert_eq!(
            next("0 0 31 * *", "2026-11-24T00:00:00Z").as_deref(),
            Some("2026-12-31T00:00:00Z")
        );
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        let error = |expr: &str| Schedule::parse(expr).expect_err(expr);
        assert_eq!(error("  "), ScheduleError::Empty);
        assert!(matches!(
            error("0 2 * *"),
            ScheduleError::FieldCount { fields: 4, .. }
        ));
        assert!(matches!(
            error("* * * * * * * *"),
            ScheduleError::FieldCount { fields: 8, .. }
        ));
        assert!(matches!(
            error("@fortnightly"),
            ScheduleError::Shorthand { .. }
        ));
        assert!(matches!(
            error("@daily 2"),
            ScheduleError::FieldCount { .. }
        ));
        for bad in [
            "0 2 * * 8",
            "0 2 * * FRI-MON",
            "0 2 * * 1,,2",
            "0 2 * * */0",
            "0 2 * * x",
        ] {
            assert!(
                matches!(error(bad), ScheduleError::DayOfWeek { .. }),
                "{bad}"
            );
        }
        for bad in [
            "61 * * * *",
            "0 24 * * *",
            "0 2 32 * *",
            "0 2 * 13 *",
            "a b c d *",
        ] {
            assert!(matches!(error(bad), ScheduleError::Invalid { .. }), "{bad}");
        }
        assert!(matches!(error("0 0 30 2 *"), ScheduleError::Never { .. }));
        let message = error("61 * * * *").to_string();
        assert!(
            message.starts_with("\"61 * * * *\" is not a valid cron schedule"),
            "{message}"
        );
        for (bad, field) in [
            ("61 * * * *", "the minute field is \"61\", where 0-59"),
            (
                "0 2 * 13 *",
                "the month field is \"13\", where 1-12 or JAN-DEC",
            ),
            ("a b c d *", "the minute field is \"a\""),
            (
                "0 0 0 1 1 * 1969",
                "the year field is \"1969\", where 1970-2100",
            ),
            ("60 0 2 * * *", "the second field is \"60\""),
            ("0 2 x * *", "the day-of-month field is \"x\""),
        ] {
            let message = error(bad).to_string();
            assert!(message.contains(field), "{bad}: {message}");
            assert!(!message.contains('\n'), "{bad}: {message}");
        }
        let message = error("0 2 * *").to_string();
        assert!(message.contains("has 4 fields"), "{message}");
    }

    #[test]
    fn the_source_is_kept_with_whitespace_collapsed() {
        assert_eq!(schedule("  0  2 * * *\n").source(), "0 2 * * *");
        assert_eq!(
            "@daily".parse::<Schedule>().map(|s| s.source().to_owned()),
            Ok("@daily".into())
        );
    }

    const EXPRESSIONS: &[&str] = &[
        "* * * * *",
        "0 2 * * *",
        "*/7 * * * *",
        "15,45 */3 * * *",
        "0 0 13 * 5",
        "30 1 * * 1-5",
        "0 12 1,15 * *",
        "@hourly",
        "@daily",
        "20 4 * * 0",
        "5 23 28-31 * *",
        "0 0 * * SAT,SUN",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Against a minute-by-minute walk: `due` is the latest match in
        /// (since, now], and `next_after` the first match after `now`.
        #[test]
        fn due_and_next_agree_with_walking_every_minute(
            expr in prop::sample::select(EXPRESSIONS),
            now in 1_700_000_000_i64..1_900_000_000,
            back in 0_i64..(2 * 86_400),
            ahead in 0_i64..(2 * 86_400),
        ) {
            let schedule = schedule(expr);
            let now_at = Timestamp::from_second(now).expect("in range");
            let since = Timestamp::from_second(now - back).expect("in range");
            let minute = |t: i64| t.div_euclid(60) * 60;
            let matches = |t: i64| {
                let at = Timestamp::from_second(t).expect("in range");
                schedule.matches(TimeZone::UTC.to_datetime(at))
            };
            let walked = (minute(now - back)..=minute(now))
                .rev()
                .step_by(60)
                .take_while(|t| *t > now - back)
                .find(|t| matches(*t))
                .map(|t| Timestamp::from_second(t).expect("in range"));
            prop_assert_eq!(schedule.due(since, now_at), walked);

            let limit = now + ahead;
            let walked = (minute(now) + 60..=limit)
                .step_by(60)
                .find(|t| matches(*t))
                .map(|t| Timestamp::from_second(t).expect("in range"));
            let next = schedule.next_after(now_at);
            match walked {
                Some(expected) => prop_assert_eq!(next, Some(expected)),
                None => prop_assert!(next.is_some_and(|n| n.as_second() > limit)),
            }
        }
    }
}
