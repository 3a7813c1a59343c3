//! Carrying out a retention pass against the store: list the system's root
//! once, read the manifests found, let [`retention::decide`], delete.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::manifest::Manifest;
use super::retention::{self, Inventory, Pruning};
use crate::objectstore::{Layout, Store};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] crate::objectstore::Error),
    /// A manifest that cannot be read leaves the pass undone: left out, its
    /// backup would anchor nothing and its WAL could go.
    #[error("manifest {key} is unreadable: {source}")]
    Manifest {
        key: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Prunes `layout`'s root (system `system_identifier`) to the recovery
/// `window` ending `now`; returns what was decided, all of it carried out.
pub async fn prune(
    store: &Store,
    layout: &Layout,
    system_identifier: u64,
    window: Duration,
    now: Timestamp,
) -> Result<Pruning, Error> {
    let listed = store.list(&format!("{}/", layout.root())).await?;
    let mut manifests = BTreeMap::new();
    for (id, key) in retention::manifest_keys(layout, &listed) {
        // Gone between the listing and now: a pass running beside this one.
        let Some(bytes) = store.get(&key).await? else {
            continue;
        };
        let manifest =
            Manifest::from_json(&bytes).map_err(|source| Error::Manifest { key, source })?;
        manifests.insert(id, manifest);
    }
    let inventory = Inventory {
        layout,
        system_identifier,
        listed: &listed,
        manifests: &manifests,
    };
    let pruning = retention::decide(window, now, &inventory);
    store.delete(&pruning.delete).await?;
    Ok(pruning)
}
