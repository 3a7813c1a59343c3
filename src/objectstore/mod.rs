//! S3-compatible object storage, where base backups and WAL go: the key
//! layout and what a listing returns ([`layout`], pure) and one bucket's
//! client ([`Store`]).

pub mod layout;
mod store;

pub use layout::{Layout, Listed, NotAWalFile, WalFile, WalKind};
pub use store::{Error, PART_SIZE, Store, StoreConfig};

use crate::contract::env;

/// Why the pod's environment does not describe a store.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0} is not set: no object store is configured for this instance")]
    Missing(&'static str),
    #[error(
        "key {key} of Secret {secret} is not there: the Secret does not exist in this \
         namespace or lacks the key (the store needs {} and {})",
        env::ACCESS_KEY_ID,
        env::SECRET_ACCESS_KEY
    )]
    CredentialMissing { key: &'static str, secret: String },
    #[error("cannot read {path} (key {key} of Secret {secret}): {source}")]
    CredentialFile {
        key: &'static str,
        secret: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the CA bundle {path}: {source}")]
    CaFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The store and the key prefix the pod builder put in the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Configured {
    pub store: StoreConfig,
    /// `spec.backup.objectStore.path`.
    pub path: Option<String>,
}

impl Configured {
    /// From the variables the pod builder sets ([`env::OBJECTSTORE_BUCKET`]
    /// and the rest); `lookup` is `std::env::var` but for tests.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let need = |name: &'static str| {
            lookup(name)
                .filter(|v| !v.is_empty())
                .ok_or(ConfigError::Missing(name))
        };
        let ca_bundle = match lookup(env::OBJECTSTORE_CA_FILE).filter(|p| !p.is_empty()) {
            Some(path) => {
                Some(std::fs::read(&path).map_err(|source| ConfigError::CaFile { path, source })?)
            }
            None => None,
        };
        Ok(Self {
            store: StoreConfig {
                endpoint: lookup(env::OBJECTSTORE_ENDPOINT).filter(|v| !v.is_empty()),
                region: lookup(env::OBJECTSTORE_REGION)
                    .filter(|v| !v.is_empty())
                    .unwrap_or_else(|| DEFAULT_REGION.to_owned()),
                bucket: need(env::OBJECTSTORE_BUCKET)?,
                access_key_id: credential(&lookup, env::ACCESS_KEY_ID)?,
                secret_access_key: credential(&lookup, env::SECRET_ACCESS_KEY)?,
                ca_bundle,
            },
            path: lookup(env::OBJECTSTORE_PATH).filter(|v| !v.is_empty()),
        })
    }
}

/// One key of the store's credentials: its variable when set, else its file
/// in [`env::OBJECTSTORE_CREDENTIALS_DIR`], read now (the kubelet keeps the
/// mounted Secret current, so a key added after the pod started is found).
fn credential(
    lookup: &impl Fn(&str) -> Option<String>,
    key: &'static str,
) -> Result<String, ConfigError> {
    if let Some(value) = lookup(key).filter(|v| !v.is_empty()) {
        return Ok(value);
    }
    let Some(dir) = lookup(env::OBJECTSTORE_CREDENTIALS_DIR).filter(|d| !d.is_empty()) else {
        return Err(ConfigError::Missing(key));
    };
    let secret = lookup(env::OBJECTSTORE_CREDENTIALS_SECRET)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "(unnamed)".to_owned());
    let path = std::path::Path::new(&dir).join(key);
    match std::fs::read_to_string(&path) {
        Ok(value) if !value.trim().is_empty() => Ok(value),
        Ok(_) => Err(ConfigError::CredentialMissing { key, secret }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(ConfigError::CredentialMissing { key, secret })
        }
        Err(source) => Err(ConfigError::CredentialFile {
            key,
            secret,
            path: path.display().to_string(),
            source,
        }),
    }
}

/// The region when none is given: self-hosted stores accept any.
pub const DEFAULT_REGION: &str = "us-east-1";

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_environment_describes_the_store() {
        let vars: HashMap<&str, &str> = HashMap::from([
            (env::OBJECTSTORE_BUCKET, "backups"),
            (env::OBJECTSTORE_ENDPOINT, "http://s3.objectstore.svc:7070"),
            (env::OBJECTSTORE_PATH, "team"),
            (env::ACCESS_KEY_ID, "id"),
            (env::SECRET_ACCESS_KEY, "secret"),
        ]);
        let configured =
            Configured::from_env(|k| vars.get(k).map(|v| (*v).to_owned())).expect("configured");
        assert_eq!(configured.store.region, DEFAULT_REGION);
        assert_eq!(configured.store.bucket, "backups");
        assert_eq!(configured.path.as_deref(), Some("team"));
        let missing = Configured::from_env(|k| {
            (k != env::SECRET_ACCESS_KEY)
                .then(|| vars.get(k).map(|v| (*v).to_owned()))
                .flatten()
        });
        assert!(
            matches!(missing, Err(ConfigError::Missing(name)) if name == env::SECRET_ACCESS_KEY)
        );
    }

    #[test]
    fn credentials_are_read_from_the_mounted_secret_at_each_use() {
        let dir = std::env::temp_dir().join(format!("tusk-credentials-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let vars: HashMap<&str, String> = HashMap::from([
            (env::OBJECTSTORE_BUCKET, "backups".to_owned()),
            (env::OBJECTSTORE_CREDENTIALS_DIR, dir.display().to_string()),
            (env::OBJECTSTORE_CREDENTIALS_SECRET, "s3-creds".to_owned()),
        ]);
        let configured = || Configured::from_env(|k| vars.get(k).cloned());
        // The Secret is not there yet: the message names it and the key.
        let message = configured().expect_err("no credentials yet").to_string();
        assert!(
            message.starts_with(
                "key AWS_ACCESS_KEY_ID of Secret s3-creds is not there: the Secret does not exist"
            ),
            "{message}"
        );
        std::fs::write(dir.join(env::ACCESS_KEY_ID), "id").expect("write");
        let message = configured().expect_err("one key only").to_string();
        assert!(
            message.starts_with("key AWS_SECRET_ACCESS_KEY of Secret s3-creds"),
            "{message}"
        );
        // Once the kubelet has written both keys, the next use has them.
        std::fs::write(dir.join(env::SECRET_ACCESS_KEY), "secret").expect("write");
        let store = configured().expect("configured").store;
        assert_eq!(
            (
                store.access_key_id.as_str(),
                store.secret_access_key.as_str()
            ),
            ("id", "secret")
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
