//! The instance's TLS material: what its Secret holds (see
//! [`crate::contract::tls`]), read as one set so that a certificate is never
//! paired with another generation's key.

mod material;

pub use material::Material;
