//! The Tusk API (group `tusk.dev`): `v1` is stored, `v1alpha1` is served and
//! converted losslessly.

pub mod autogrow;
pub mod conversion;
pub mod crd;
pub mod drill;
pub mod expose;
pub mod field;
pub mod model;
pub mod placement;
pub mod quantity;
pub mod resources;
pub mod status;
pub mod store;
pub mod tls;
pub mod tls_cert_manager;
pub mod v1;
pub mod v1alpha1;
pub mod validate;
pub mod validate_drill;
pub mod version;
pub mod wal_storage;

#[cfg(test)]
pub(crate) mod arbitrary;
#[cfg(test)]
mod schema_tests;

pub use v1::{Backup, Database, Drill};
