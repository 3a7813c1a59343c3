//! `kubectl tusk logs <db>`: every instance's `postgres` container log, the
//! lines merged in time order (the API server's `timestamps=true` prefix,
//! shortened to a time column), each after its instance's name; with
//! `--operator`, also the operator's lines about this Database (its JSON
//! lines carry the reconcile span's `database` and `namespace`).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams};
use kube::{Api, ResourceExt};

use super::render;
use super::{Error, Session};
use crate::resources::labels;

/// The operator's pods, as the Helm chart labels them.
pub const OPERATOR_SELECTOR: &str =
    "app.kubernetes.io/name=tusk,app.kubernetes.io/component=operator";

/// One line, from one source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub time: Option<Timestamp>,
    /// The instance name, or `operator`.
    pub source: String,
    pub text: String,
}

pub async fn run(
    session: &Session,
    name: &str,
    operator: bool,
    since: Option<&str>,
) -> Result<(), Error> {
    session.database(name).await?;
    let since = since.map(parse_since).transpose()?;
    let mut sources = instance_logs(session, name, since).await?;
    if operator {
        match operator_logs(session, name, since).await {
            Ok(lines) => sources.push(lines),
            Err(err) => eprintln!("warning: no operator lines: {err}"),
        }
    }
    for line in merge(sources) {
        println!("{}", format_line(&line));
    }
    Ok(())
}

/// `30s`, `10m`, `2h`, `1d` in seconds.
pub fn parse_since(text: &str) -> Result<i64, Error> {
    let bad = || {
        Error::Usage(format!(
            "--since {text}: expected a number and s, m, h or d (10m)"
        ))
    };
    let (number, unit) = text.split_at(text.len().saturating_sub(1));
    let n: i64 = number.parse().map_err(|_| bad())?;
    let factor = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    Ok(n.saturating_mul(factor))
}

/// Each instance pod's postgres log, one list of lines per pod.
pub async fn instance_logs(
    session: &Session,
    name: &str,
    since: Option<i64>,
) -> Result<Vec<Vec<Line>>, Error> {
    let api: Api<Pod> = Api::namespaced(session.client.clone(), &session.namespace);
    let selector = selector(&labels::any_instance_selector(name));
    let pods = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(Error::kube(format!("listing the pods of Database {name}")))?;
    let mut sources = Vec::new();
    for pod in pods.items {
        let pod_name = pod.name_any();
        let params = LogParams {
            container: Some("postgres".to_owned()),
            timestamps: true,
            since_seconds: since,
            ..LogParams::default()
        };
        match api.logs(&pod_name, &params).await {
            Ok(text) => sources.push(parse(&pod_name, &text)),
            Err(err) => eprintln!("warning: no log of {pod_name}: {err}"),
        }
    }
    Ok(sources)
}

/// The operator pods' lines about Database `name` (pods found in any
/// namespace by the chart's labels).
pub async fn operator_logs(
    session: &Session,
    name: &str,
    since: Option<i64>,
) -> Result<Vec<Line>, Error> {
    let all: Api<Pod> = Api::all(session.client.clone());
    let pods = all
        .list(&ListParams::default().labels(OPERATOR_SELECTOR))
        .await
        .map_err(Error::kube("listing the operator's pods"))?;
    let mut lines = Vec::new();
    for pod in pods.items {
        let namespace = pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(session.client.clone(), &namespace);
        let params = LogParams {
            timestamps: true,
            since_seconds: since,
            ..LogParams::default()
        };
        let text = api
            .logs(&pod.name_any(), &params)
            .await
            .map_err(Error::kube(format!(
                "reading the log of {namespace}/{}",
                pod.name_any()
            )))?;
        lines.extend(
            parse("operator", &text)
                .into_iter()
                .filter(|l| mentions(&l.text, name, &session.namespace))
                .map(|l| Line {
                    text: operator_text(&l.text),
                    ..l
                }),
        );
    }
    Ok(lines)
}

fn selector(labels: &std::collections::BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The lines of a log read with `timestamps=true` (pure): a line without a
/// time (never, from the API server) keeps the previous line's.
pub fn parse(source: &str, text: &str) -> Vec<Line> {
    let mut last = None;
    text.lines()
        .map(|raw| {
            let (time, rest) = match raw.split_once(' ') {
                Some((stamp, rest)) => match stamp.parse::<Timestamp>() {
                    Ok(t) => (Some(t), rest),
                    Err(_) => (last, raw),
                },
                None => match raw.parse::<Timestamp>() {
                    Ok(t) => (Some(t), ""),
                    Err(_) => (last, raw),
                },
            };
            last = time;
            Line {
                time,
                source: source.to_owned(),
                text: rest.to_owned(),
            }
        })
        .collect()
}

/// All sources' lines in time order; lines of the same time keep their
/// source's order, and each source's own order is never changed (pure).
pub fn merge(sources: Vec<Vec<Line>>) -> Vec<Line> {
    let mut all: Vec<(usize, usize, Line)> = sources
        .into_iter()
        .enumerate()
        .flat_map(|(s, lines)| lines.into_iter().enumerate().map(move |(i, l)| (s, i, l)))
        .collect();
    // A stable sort on time alone keeps each source's own order for equal
    // times; lines without a time sort first.
    all.sort_by_key(|(_, _, l)| l.time);
    all.into_iter().map(|(_, _, l)| l).collect()
}

/// `12:00:01.234 pg-1      text`.
pub fn format_line(line: &Line) -> String {
    let time = line.time.map_or_else(
        || "            ".to_owned(),
        |t| format!("{}.{:03}", render::clock(t), t.subsec_millisecond()),
    );
    format!("{time} {:<10} {}", line.source, line.text)
}

/// Whether an operator log line is about Database `name` in `namespace`.
pub fn mentions(text: &str, name: &str, namespace: &str) -> bool {
    let database = text.contains(&format!("\"database\":\"{name}\""));
    let in_namespace = text.contains(&format!("\"namespace\":\"{namespace}\""));
    (database && in_namespace) || text.contains(&format!("{namespace}/{name}\""))
}

/// An operator JSON line as `LEVEL message (error)`; other lines as they are.
fn operator_text(text: &str) -> String {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return text.to_owned();
    };
    let level = value["level"].as_str().unwrap_or("");
    let message = value["fields"]["message"].as_str().unwrap_or(text);
    match value["fields"]["error"].as_str() {
        Some(error) => format!("{level} {message}: {error}"),
        None => format!("{level} {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_every_instance_merge_in_time_order() {
        let one = parse(
            "pg-1",
            "2026-11-26T12:00:01.000000000Z LOG:  checkpoint starting\n\
             2026-11-26T12:00:03.500000000Z LOG:  checkpoint complete\n",
        );
        let two = parse(
            "pg-2",
            "2026-11-26T12:00:02.250000000Z LOG:  restartpoint starting\n\
             2026-11-26T12:00:03.500000000Z LOG:  same instant\n",
        );
        let merged: Vec<String> = merge(vec![one, two]).iter().map(format_line).collect();
        assert_eq!(
            merged,
            [
                "12:00:01.000 pg-1       LOG:  checkpoint starting",
                "12:00:02.250 pg-2       LOG:  restartpoint starting",
                "12:00:03.500 pg-1       LOG:  checkpoint complete",
                "12:00:03.500 pg-2       LOG:  same instant",
            ]
        );
    }

    #[test]
    fn a_line_without_a_time_stays_after_its_predecessor() {
        let lines = parse("pg-1", "2026-11-26T12:00:01Z first\ncontinued\n");
        assert_eq!(lines[1].time, lines[0].time);
        assert_eq!(lines[1].text, "continued");
    }

    #[test]
    fn operator_lines_are_those_about_the_database() {
        let about = r#"{"level":"INFO","fields":{"message":"applied"},"span":{"database":"pg","namespace":"shop"}}"#;
        let other = r#"{"level":"INFO","fields":{"message":"applied"},"span":{"database":"pg","namespace":"prod"}}"#;
        assert!(mentions(about, "pg", "shop"));
        assert!(!mentions(other, "pg", "shop"));
        assert!(!mentions(about, "pg2", "shop"));
        assert_eq!(operator_text(about), "INFO applied");
    }

    #[test]
    fn since_reads_like_kubectl_s() {
        assert_eq!(parse_since("10m").ok(), Some(600));
        assert_eq!(parse_since("2h").ok(), Some(7200));
        assert!(parse_since("ten").is_err());
        assert!(parse_since("").is_err());
    }
}
