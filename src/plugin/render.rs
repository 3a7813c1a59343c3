//! Small pieces every read-only command prints with (pure): tables, sizes,
//! durations, times and ages, and which conditions are in their good state.

use comfy_table::{ContentArrangement, Table, presets};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A table without borders, columns as wide as their widest cell, no
/// trailing blanks (golden files compare exactly).
pub fn table<S: AsRef<str>>(header: &[&str], rows: &[Vec<S>]) -> String {
    let mut table = Table::new();
    table
        .load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    for row in rows {
        table.add_row(row.iter().map(|c| c.as_ref().to_owned()));
    }
    let mut out = String::new();
    for line in table.to_string().lines() {
        // The preset pads each cell with one blank on both sides.
        let line = line.strip_prefix(' ').unwrap_or(line).trim_end();
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `1.5 GiB`, `300 B`.
pub fn bytes(value: i64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if value.abs() < 1024 {
        return format!("{value} B");
    }
    let mut scaled = value as f64 / 1024.0;
    let mut unit = 0;
    while scaled.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        scaled /= 1024.0;
        unit += 1;
    }
    if scaled.abs() < 10.0 {
        format!("{scaled:.1} {}", UNITS[unit])
    } else {
        format!("{scaled:.0} {}", UNITS[unit])
    }
}

/// `850 ms`, `12.3 s`, `4m05s`, `2h03m`, `3d04h`.
pub fn milliseconds(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        return format!("{ms} ms");
    }
    if ms < 60_000 {
        return format!("{:.1} s", ms as f64 / 1000.0);
    }
    let seconds = ms / 1000;
    let (minutes, hours, days) = (seconds / 60, seconds / 3600, seconds / 86_400);
    if hours == 0 {
        format!("{minutes}m{:02}s", seconds % 60)
    } else if days == 0 {
        format!("{hours}h{:02}m", minutes % 60)
    } else {
        format!("{days}d{:02}h", hours % 24)
    }
}

/// How long from `then` to `now`, in the units of [`milliseconds`], rounded
/// to whole seconds once above a minute.
pub fn span(then: Timestamp, now: Timestamp) -> String {
    let elapsed: SignedDuration = now.duration_since(then);
    let ms = i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX);
    if ms >= 60_000 {
        milliseconds(ms - ms % 1000)
    } else {
        format!("{}s", ms.max(0) / 1000)
    }
}

/// `2026-11-26 10:00:05Z (5m00s ago)`.
pub fn when(time: &Time, now: Timestamp) -> String {
    format!("{} ({} ago)", stamp(time.0), span(time.0, now))
}

/// A time to the second, UTC.
pub fn stamp(time: Timestamp) -> String {
    time.strftime("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// `17:04:05`: a log line's or an Event's time of day, UTC.
pub fn clock(time: Timestamp) -> String {
    time.strftime("%H:%M:%S").to_string()
}

/// The condition of that type.
pub fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether a condition is where a healthy Database has it: Ready and
/// BackupHealthy True, Progressing and Degraded False (any other type: True).
pub fn is_good(condition: &Condition) -> bool {
    match condition.type_.as_str() {
        "Progressing" | "Degraded" => condition.status == "False",
        _ => condition.status == "True",
    }
}

/// `-` for what is not known.
pub fn or_dash(value: Option<String>) -> String {
    value.unwrap_or_else(|| "-".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_at_a_glance() {
        assert_eq!(bytes(300), "300 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(50 << 20), "50 MiB");
        assert_eq!(milliseconds(850), "850 ms");
        assert_eq!(milliseconds(12_345), "12.3 s");
        assert_eq!(milliseconds(245_000), "4m05s");
        assert_eq!(milliseconds(7_380_000), "2h03m");
        assert_eq!(milliseconds(273_600_000), "3d04h");
    }

    #[test]
    fn tables_have_no_borders_and_no_trailing_blanks() {
        let text = table(&["A", "LONGER"], &[vec!["x", "y"], vec!["wide cell", ""]]);
        assert_eq!(text, "A          LONGER\nx          y\nwide cell\n");
    }
}
