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
                access_key_id: need(env::ACCESS_KEY_ID)?,
                secret_access_key: need(env::SECRET_ACCESS_KEY)?,
                ca_bundle,
            },
            path: lookup(env::OBJECTSTORE_PATH).filter(|v| !v.is_empty()),
        })
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
}
