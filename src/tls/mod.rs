//! The TLS core shared by the operator, the instance manager and the instance
//! API (issue #27): a CA that issues short-lived leaves with precise times
//! ([`authority`]), reading certificates back ([`inspect`]), the names a
//! PostgreSQL server certificate must carry ([`names`]), rustls configurations
//! that verify a peer by the name the caller meant rather than the address it
//! dialled ([`rustls_config`]), a handshake that proves which certificate a
//! PostgreSQL server presents ([`probe`]), checks of user-provided Secrets
//! ([`user_secret`]) and the decision to reissue a leaf ([`renewal`]).
//!
//! Everything here is pure (no clock, no kube client) except [`probe`], which
//! opens a TCP connection, and the key generation in [`authority`], which
//! draws randomness. Times come in as arguments.

pub mod authority;
mod ca_key;
mod error;
pub mod inspect;
pub mod names;
mod pem;
pub mod postgres;
pub mod probe;
pub mod renewal;
pub mod rustls_config;
#[cfg(test)]
pub(crate) mod test_support;
pub mod user_secret;

pub use authority::{Authority, Leaf};
pub use error::Error;
pub use inspect::{CertInfo, key_matches};
