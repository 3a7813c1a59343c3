//! What pg_upgrade said, quoted for a person: the lines of its output that
//! explain a failure, and the beginning of the report files it names (e.g.
//! `tables_using_reg.txt`) or, of the logs it points to, their last error
//! and what follows (else their end), bounded to fit a termination message.

use std::path::Path;

/// The quote's budget, below the 4 KiB termination message to leave room
/// for the JSON around it and its escapes.
pub const QUOTE_LIMIT: usize = 3000;
/// Lines quoted from each report file.
const REPORT_LINES: usize = 8;
/// Lines quoted from the end of each log file named (twice as many from
/// its last error on).
const LOG_LINES: usize = 6;
/// pg_upgrade's output after its first failing check, at most this many lines.
const OUTPUT_LINES: usize = 25;

/// The largest index `<= at` on a character boundary of `text`.
pub fn floor_char_boundary(text: &str, at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    (0..=at)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0)
}

/// The last `max` bytes of `text` (on a character boundary).
pub fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The lines of pg_upgrade's `stdout` that tell why it failed: from the
/// first line that is not a passing step or a banner, on, without the
/// passing steps and banners after it (a failure in the upgrade proper
/// follows some twenty steps that passed); all of it when no line stands
/// out.
pub fn failure_lines(stdout: &str) -> Vec<&str> {
    let lines: Vec<&str> = stdout.lines().collect();
    let telling = |line: &&str| {
        let l = line.trim();
        !l.is_empty()
            && !l.ends_with(" ok")
            && !BANNERS.iter().any(|b| l.starts_with(b))
            && !l.chars().all(|c| c == '-')
    };
    let Some(first) = lines.iter().position(telling) else {
        return lines
            .into_iter()
            .filter(|l| !l.trim().is_empty())
            .take(OUTPUT_LINES)
            .collect();
    };
    lines[first..]
        .iter()
        .copied()
        .filter(telling)
        .map(str::trim_end)
        .take(OUTPUT_LINES)
        .collect()
}

/// pg_upgrade's headings and warnings that come with every run, failed or not.
const BANNERS: &[&str] = &[
    "Performing Consistency Checks",
    "Performing Upgrade",
    "If pg_upgrade fails after this point",
    "new cluster before continuing",
];

/// What to quote of a log pg_upgrade points to: from its last error line
/// (pg_restore's `error:`, the server's `ERROR:`), which the statement that
/// failed follows, else its last lines.
fn log_excerpt<'a>(all: &[&'a str]) -> Vec<&'a str> {
    let error = all
        .iter()
        .rposition(|l| l.contains("error:") || l.contains("ERROR:") || l.contains("FATAL:"));
    let from = match error {
        Some(at) => at,
        None => all.len().saturating_sub(LOG_LINES),
    };
    all[from..].iter().copied().take(LOG_LINES * 2).collect()
}

/// Absolute paths of files named in `lines` (pg_upgrade puts each on a line
/// of its own, or in quotes after "Consult the last few lines of").
pub fn named_files(lines: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    for line in lines {
        for word in line.split_whitespace() {
            let word = word.trim_matches(|c| c == '"' || c == '\'' || c == ',');
            let word = word
                .strip_suffix('.')
                .filter(|w| w.contains('.'))
                .unwrap_or(word);
            if word.starts_with('/')
                && (word.ends_with(".txt") || word.ends_with(".log"))
                && !files.iter().any(|f| f == word)
            {
                files.push(word.to_owned());
            }
        }
    }
    files
}

/// The quote: `context` (what was being done), pg_upgrade's failure lines,
/// then for each file they name its first lines (reports) or last lines
/// (logs) as read by `read`; cut to [`QUOTE_LIMIT`].
pub fn quote(
    context: &str,
    stdout: &str,
    stderr: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> String {
    let lines = failure_lines(stdout);
    let mut out = format!("{context}:\n{}", lines.join("\n"));
    let stderr = stderr.trim();
    if !stderr.is_empty() {
        out.push('\n');
        out.push_str(tail(stderr, 500));
    }
    for file in named_files(&lines) {
        let Some(text) = read(Path::new(&file)) else {
            continue;
        };
        let name = Path::new(&file)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| file.clone());
        let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let excerpt: Vec<&str> = if file.ends_with(".log") {
            log_excerpt(&all)
        } else {
            all.iter().copied().take(REPORT_LINES).collect()
        };
        out.push_str(&format!("\n{name}:\n  {}", excerpt.join("\n  ")));
        if !file.ends_with(".log") && all.len() > REPORT_LINES {
            out.push_str(&format!("\n  … {} more lines", all.len() - REPORT_LINES));
        }
    }
    if out.len() > QUOTE_LIMIT {
        let cut = floor_char_boundary(&out, QUOTE_LIMIT);
        out.truncate(cut);
        out.push_str(" […]");
    }
    out
}

/// A report file pg_upgrade named, if it can be read.
pub fn read_file(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REG: &str = "\
Performing Consistency Checks on Old Live Server
------------------------------------------------
Checking cluster versions                                     ok
Checking database user is the install user                    ok
Checking data type usage                                      failed check: Checking for reg* data types in user tables

Data type checks failed: 
Your installation contains one of the reg* data types in user tables.
These data types reference system OIDs that are not preserved by
pg_upgrade, so this cluster cannot currently be upgraded.  You can
drop the problem columns and restart the upgrade.

A list of the problem columns is in the file:
    /data/new/pg_upgrade_output.d/20261124T225301.769/tables_using_reg.txt

Failure, exiting
";

    #[test]
    fn a_failed_check_is_quoted_with_its_report_file() {
        let quoted = quote("pg_upgrade --check failed", REG, "", |path| {
            path.ends_with("tables_using_reg.txt")
                .then(|| "In database: app\n  public.t.f\n".to_owned())
        });
        assert!(
            quoted.starts_with("pg_upgrade --check failed:\nChecking data type usage"),
            "{quoted}"
        );
        assert!(!quoted.contains("install user"), "{quoted}");
        assert!(quoted.contains("reg* data types in user tables"));
        assert!(
            quoted.contains("tables_using_reg.txt:\n  In database: app\n    public.t.f"),
            "{quoted}"
        );
        assert!(quoted.len() <= QUOTE_LIMIT + 8);
    }

    #[test]
    fn a_log_is_quoted_by_its_last_lines_and_everything_is_bounded() {
        let stdout = "Restoring database schemas in the new cluster\n\
            *failure*\n\
            Consult the last few lines of \"/new/pg_upgrade_output.d/x/log/pg_upgrade_dump_5.log\" for\n\
            the probable cause of the failure.\n";
        let log = (1..=50)
            .map(|i| format!("line {i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let quoted = quote("pg_upgrade failed", stdout, "", |_| Some(log.clone()));
        assert!(
            quoted.contains("pg_upgrade_dump_5.log:\n  line 45"),
            "{quoted}"
        );
        assert!(!quoted.contains("line 44\n"), "{quoted}");

        let huge = "x".repeat(10_000);
        let quoted = quote("pg_upgrade failed", &huge, "", |_| None);
        assert!(quoted.len() <= QUOTE_LIMIT + 8);
        assert!(quoted.ends_with("[…]"));
    }

    /// A schema restore that failed (a view on a column the new major
    /// removed): the step that failed and the server's error are quoted,
    /// not the steps that passed nor the end of the log alone.
    #[test]
    fn a_failed_schema_restore_is_quoted_by_its_error() {
        let stdout = "\
Performing Consistency Checks
-----------------------------
Checking cluster versions                                     ok
Checking database user is the install user                    ok

If pg_upgrade fails after this point, you must re-initdb the
new cluster before continuing.

Performing Upgrade
------------------
Setting locale and encoding for new cluster                   ok
Restoring global objects in the new cluster                   ok
Restoring database schemas in the new cluster                 
*failure*

Consult the last few lines of \"/new/pg_upgrade_output.d/x/log/pg_upgrade_dump_16386.log\" for
the probable cause of the failure.
Failure, exiting
";
        let log = "\
pg_restore: creating VIEW \"public.checkpoints\"
pg_restore: while PROCESSING TOC:
pg_restore: from TOC entry 215; 1259 16392 VIEW checkpoints app
pg_restore: error: could not execute query: ERROR:  column pg_stat_bgwriter.checkpoints_timed does not exist
LINE 2:    SELECT \"pg_stat_bgwriter\".\"checkpoints_timed\"
Command was:
-- For binary upgrade, must preserve pg_type oid
SELECT pg_catalog.binary_upgrade_set_next_pg_type_oid('16394'::pg_catalog.oid);
-- For binary upgrade, must preserve pg_class oids and relfilenodes
SELECT pg_catalog.binary_upgrade_set_next_heap_pg_class_oid('16392'::pg_catalog.oid);
CREATE VIEW \"public\".\"checkpoints\" AS
 SELECT \"pg_stat_bgwriter\".\"checkpoints_timed\"
   FROM \"pg_stat_bgwriter\";
";
        let quoted = quote("pg_upgrade --link failed", stdout, "", |_| {
            Some(log.to_owned())
        });
        assert!(
            quoted.starts_with(
                "pg_upgrade --link failed:\nRestoring database schemas in the new cluster\n*failure*"
            ),
            "{quoted}"
        );
        for noise in [" ok", "re-initdb", "Performing Upgrade"] {
            assert!(!quoted.contains(noise), "{noise:?} in {quoted}");
        }
        assert!(
            quoted.contains("ERROR:  column pg_stat_bgwriter.checkpoints_timed does not exist"),
            "{quoted}"
        );
        assert!(quoted.contains("CREATE VIEW"), "{quoted}");
    }

    #[test]
    fn tails_and_boundaries_respect_characters() {
        assert_eq!(tail("héllo", 4), "llo");
        assert_eq!(floor_char_boundary("hé", 2), 1);
        assert_eq!(floor_char_boundary("hé", 10), 3);
    }
}
