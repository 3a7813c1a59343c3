//! `kubectl tusk report <db>`: a support bundle, a zstd-compressed tar (the
//! `tar` and `zstd` crates the operator already uses; no gzip crate is in
//! the tree): the Database, its Backups, the namespace's Events, the
//! instance pods, PVCs and Services as YAML, each instance's log, the
//! operator's lines about the Database and its metrics. Secrets appear only
//! as metadata and key names with sizes; and before anything is written,
//! every value of every Secret of the namespace that could be read is
//! replaced wherever it occurs in any file ([`Redactor`]). What could not be
//! collected (a permission the user lacks) is recorded in `errors.txt`
//! instead of failing the report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde::Serialize;

use super::logs;
use super::{Error, Session};
use crate::resources::labels;

/// Secret values shorter than this are redacted only when their key says
/// they are secret: a username (`postgres`), a port or an `sslmode` would
/// otherwise blank out every mention of a container or a setting.
const SHORTEST_REDACTED: usize = 16;
/// Keys whose values are secret however short.
const SECRET_KEY_WORDS: [&str; 5] = ["password", "token", "key", "uri", "secret"];
/// The operator's metrics port (the chart's `metrics.port` default).
const OPERATOR_METRICS_PORT: u16 = 8080;

/// Every `K` in the session's namespace that `params` selects.
async fn list<K>(session: &Session, params: &ListParams, what: &str) -> Result<Vec<K>, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::namespaced(session.client.clone(), &session.namespace)
        .list(params)
        .await
        .map(|l| l.items)
        .map_err(Error::kube(format!("listing {what}")))
}

pub async fn run(session: &Session, name: &str, output: Option<&Path>) -> Result<(), Error> {
    let db = session.database(name).await?;
    let mut bundle = Bundle::default();
    bundle.yaml("database.yaml", &db);
    let backups = super::status::backups_of(session, name).await;
    bundle.result("backups.yaml", backups);
    let selector = labels::any_instance_selector(name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let by_label = ListParams::default().labels(&selector);
    let events = list::<Event>(session, &ListParams::default(), "Events").await;
    bundle.result("events.yaml", events);
    let pods = list::<Pod>(session, &by_label, "the instance pods").await;
    bundle.result("pods.yaml", pods);
    let pvcs = list::<PersistentVolumeClaim>(session, &ListParams::default(), "PVCs").await;
    bundle.result("pvcs.yaml", pvcs);
    let services = list::<Service>(session, &ListParams::default(), "Services").await;
    bundle.result("services.yaml", services);
    let secrets = list::<Secret>(
        session,
        &ListParams::default(),
        "Secrets (their values are needed to redact them)",
    )
    .await;
    let redactor = match &secrets {
        Ok(secrets) => {
            bundle.yaml(
                "secrets.yaml",
                &secrets.iter().map(redacted_secret).collect::<Vec<_>>(),
            );
            Redactor::new(secrets)
        }
        Err(err) => {
            bundle.error(&format!("{err}; no Secret value could be redacted"));
            Redactor::default()
        }
    };
    match logs::instance_logs(session, name, None).await {
        Ok(sources) => {
            for lines in sources {
                if let Some(first) = lines.first() {
                    let path = format!("logs/{}.log", first.source);
                    bundle.file(
                        &path,
                        lines
                            .iter()
                            .map(logs::format_line)
                            .collect::<Vec<_>>()
                            .join("\n"),
                    );
                }
            }
        }
        Err(err) => bundle.error(&err.to_string()),
    }
    match logs::operator_logs(session, name, None).await {
        Ok(lines) => bundle.file(
            "logs/operator.log",
            lines
                .iter()
                .map(logs::format_line)
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        Err(err) => bundle.error(&err.to_string()),
    }
    match operator_metrics(session).await {
        Ok(text) => bundle.file("operator-metrics.txt", text),
        Err(err) => bundle.error(&err.to_string()),
    }
    let now = Timestamp::now();
    let path = output.map(Path::to_path_buf).unwrap_or_else(|| {
        PathBuf::from(format!(
            "{name}-report-{}.tar.zst",
            now.strftime("%Y%m%dT%H%M%SZ")
        ))
    });
    let files = bundle.finish(&redactor);
    write(&path, &files)?;
    println!("wrote {}", path.display());
    for (file, content) in &files {
        println!("  {file:<28} {} bytes", content.len());
    }
    println!(
        "{} Secret values redacted wherever they occurred{}",
        redactor.values.len(),
        if files.contains_key("errors.txt") {
            "; some parts could not be collected: see errors.txt"
        } else {
            ""
        }
    );
    Ok(())
}

/// The operator's `/metrics`, through the API server's pod proxy.
async fn operator_metrics(session: &Session) -> Result<String, Error> {
    let all: Api<Pod> = Api::all(session.client.clone());
    let pods = all
        .list(&ListParams::default().labels(logs::OPERATOR_SELECTOR))
        .await
        .map_err(Error::kube("listing the operator's pods"))?;
    let mut out = String::new();
    for pod in pods.items {
        let ns = pod.namespace().unwrap_or_default();
        let path = format!(
            "/api/v1/namespaces/{ns}/pods/{}:{OPERATOR_METRICS_PORT}/proxy/metrics",
            pod.name_any()
        );
        let request = http::Request::get(&path)
            .body(Vec::new())
            .map_err(|e| Error::Failed(format!("building the request for {path}: {e}")))?;
        let text = session
            .client
            .request_text(request)
            .await
            .map_err(Error::kube(format!("reading {path}")))?;
        let _ = writeln!(out, "# {ns}/{}\n{text}", pod.name_any());
    }
    Ok(out)
}

/// A Secret with its values replaced by their size.
#[derive(Serialize)]
struct RedactedSecret {
    metadata: RedactedMeta,
    #[serde(rename = "type")]
    type_: Option<String>,
    data: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct RedactedMeta {
    name: String,
    namespace: Option<String>,
    labels: BTreeMap<String, String>,
    #[serde(rename = "creationTimestamp")]
    creation_timestamp: Option<String>,
}

fn redacted_secret(secret: &Secret) -> RedactedSecret {
    RedactedSecret {
        metadata: RedactedMeta {
            name: secret.name_any(),
            namespace: secret.namespace(),
            labels: secret.labels().clone(),
            creation_timestamp: secret
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string()),
        },
        type_: secret.type_.clone(),
        data: values(secret)
            .into_iter()
            .map(|(k, v)| (k, format!("<redacted, {} bytes>", v.len())))
            .collect(),
    }
}

/// A Secret's values, `data` and `stringData`.
fn values(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut all: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in secret.string_data.iter().flatten() {
        all.insert(k.clone(), v.clone().into_bytes());
    }
    all
}

/// Replaces every Secret value wherever it occurs (pure).
#[derive(Default, Debug)]
pub struct Redactor {
    /// Longest first, so a URI holding a password goes before the password.
    values: Vec<String>,
}

impl Redactor {
    pub fn new(secrets: &[Secret]) -> Redactor {
        let mut values: Vec<String> = Vec::new();
        for secret in secrets {
            for (key, value) in values_of(secret) {
                let Ok(text) = String::from_utf8(value) else {
                    continue;
                };
                let secret_key = SECRET_KEY_WORDS
                    .iter()
                    .any(|word| key.to_lowercase().contains(word));
                // A multi-line value (a PEM key) also leaks line by line.
                let mut pieces = vec![text.clone()];
                pieces.extend(text.lines().map(str::to_owned));
                for piece in pieces {
                    let piece = piece.trim().to_owned();
                    let long = piece.len() >= SHORTEST_REDACTED;
                    if (long || (secret_key && !piece.is_empty())) && !is_pem_fence(&piece) {
                        values.push(piece);
                    }
                }
            }
        }
        values.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        values.dedup();
        Redactor { values }
    }

    pub fn redact(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for value in &self.values {
            if text.contains(value.as_str()) {
                text = text.replace(value.as_str(), "<redacted>");
            }
        }
        text
    }
}

fn values_of(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    values(secret)
}

/// `-----BEGIN PRIVATE KEY-----` says nothing secret, and redacting it would
/// hide which kind of object a file holds.
fn is_pem_fence(line: &str) -> bool {
    line.starts_with("-----") && line.ends_with("-----")
}

/// The files of the bundle, before redaction.
#[derive(Default)]
struct Bundle {
    files: BTreeMap<String, String>,
    errors: Vec<String>,
}

impl Bundle {
    fn file(&mut self, path: &str, content: String) {
        self.files.insert(path.to_owned(), content);
    }

    fn yaml<T: Serialize>(&mut self, path: &str, value: &T) {
        match serde_yaml::to_string(value) {
            Ok(text) => self.file(path, text),
            Err(err) => self.error(&format!("{path}: {err}")),
        }
    }

    fn result<T: Serialize>(&mut self, path: &str, value: Result<T, Error>) {
        match value {
            Ok(value) => self.yaml(path, &value),
            Err(err) => self.error(&err.to_string()),
        }
    }

    fn error(&mut self, message: &str) {
        self.errors.push(message.to_owned());
    }

    /// Every file redacted, with `errors.txt` when something was missing.
    fn finish(mut self, redactor: &Redactor) -> BTreeMap<String, String> {
        if !self.errors.is_empty() {
            let text = self.errors.join("\n") + "\n";
            self.files.insert("errors.txt".to_owned(), text);
        }
        self.files
            .into_iter()
            .map(|(path, content)| (path, redactor.redact(&content)))
            .collect()
    }
}

/// The files as a zstd-compressed tar.
fn write(path: &Path, files: &BTreeMap<String, String>) -> Result<(), Error> {
    let file =
        std::fs::File::create(path).map_err(Error::io(format!("creating {}", path.display())))?;
    let encoder = zstd::Encoder::new(file, 3)
        .map_err(Error::io(format!("compressing {}", path.display())))?;
    let mut tar = tar::Builder::new(encoder);
    let mtime = u64::try_from(Timestamp::now().as_second()).unwrap_or(0);
    for (name, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(mtime);
        header.set_cksum();
        tar.append_data(&mut header, format!("report/{name}"), content.as_bytes())
            .map_err(Error::io(format!("writing {name} into {}", path.display())))?;
    }
    let encoder = tar
        .into_inner()
        .map_err(Error::io(format!("writing {}", path.display())))?;
    encoder
        .finish()
        .map_err(Error::io(format!("writing {}", path.display())))?;
    Ok(())
}

/// The files of a bundle [`write`] wrote, by path inside it (for tests
/// and for tools that check a bundle).
pub fn read(path: &Path) -> Result<BTreeMap<String, String>, Error> {
    use std::io::Read as _;
    let what = || format!("reading {}", path.display());
    let file = std::fs::File::open(path).map_err(Error::io(what()))?;
    let decoder = zstd::Decoder::new(file).map_err(Error::io(what()))?;
    let mut archive = tar::Archive::new(decoder);
    let mut files = BTreeMap::new();
    for entry in archive.entries().map_err(Error::io(what()))? {
        let mut entry = entry.map_err(Error::io(what()))?;
        let name = entry
            .path()
            .map_err(Error::io(what()))?
            .display()
            .to_string();
        let mut content = String::new();
        entry
            .read_to_string(&mut content)
            .map_err(Error::io(what()))?;
        files.insert(name, content);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;

    use super::*;

    fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    fn secrets() -> Vec<Secret> {
        vec![
            secret(
                "pg-app",
                &[
                    ("username", "postgres"),
                    ("password", "Zq8pw"),
                    ("uri", "postgresql://app:Zq8pw@pg-rw:5432/app"),
                    ("port", "5432"),
                ],
            ),
            secret(
                "pg-ca",
                &[(
                    "ca.key",
                    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n",
                )],
            ),
        ]
    }

    #[test]
    fn no_secret_value_survives_in_any_file() {
        let redactor = Redactor::new(&secrets());
        let mut bundle = Bundle::default();
        bundle.file(
            "logs/pg-1.log",
            "12:00:00 pg-1 connection string postgresql://app:Zq8pw@pg-rw:5432/app\n\
             12:00:01 pg-1 password was Zq8pw\n\
             12:00:02 pg-1 MIIEvQIBADANBgkqhkiG9w0BAQEFAASC leaked\n"
                .to_owned(),
        );
        bundle.yaml(
            "secrets.yaml",
            &secrets().iter().map(redacted_secret).collect::<Vec<_>>(),
        );
        let files = bundle.finish(&redactor);
        for (path, content) in &files {
            for value in [
                "Zq8pw",
                "postgresql://app:Zq8pw",
                "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
                "BKcwggSjAgEAAoIBAQC7",
            ] {
                assert!(!content.contains(value), "{path} holds {value}:\n{content}");
            }
        }
        let secrets_yaml = &files["secrets.yaml"];
        assert!(
            secrets_yaml.contains("password: <redacted, 5 bytes>"),
            "{secrets_yaml}"
        );
        assert!(files["logs/pg-1.log"].contains("password was <redacted>"));
        assert!(files["logs/pg-1.log"].contains("12:00:00 pg-1 connection string <redacted>"));
        // Short values whose key is not secret stay readable.
        let redacted = redactor.redact("container postgres on port 5432 as app");
        assert_eq!(redacted, "container postgres on port 5432 as app");
    }

    #[test]
    fn the_bundle_is_a_readable_zstd_tar() {
        let dir = std::env::temp_dir().join(format!("tusk-report-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let path = dir.join("r.tar.zst");
        let files = BTreeMap::from([("database.yaml".to_owned(), "kind: Database\n".to_owned())]);
        write(&path, &files).expect("written");
        let read = read(&path).expect("read back");
        let expected = BTreeMap::from([(
            "report/database.yaml".to_owned(),
            "kind: Database\n".to_owned(),
        )]);
        assert_eq!(read, expected);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
