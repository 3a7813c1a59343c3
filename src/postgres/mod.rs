//! The pure PostgreSQL domain: what Tusk writes into `postgresql.conf` and
//! `pg_hba.conf`, how it quotes names and values, and which parameter changes
//! need a restart. Nothing here does I/O, so all of it is unit-tested.

pub mod config;
pub mod hba;
pub mod identifiers;
pub mod memory;
pub mod params;

/// The role that replicas (and `pg_basebackup`) use to stream WAL from the primary.
pub const REPLICATION_USER: &str = "tusk_replication";

/// The bootstrap superuser created by `initdb -U`.
pub const SUPERUSER: &str = "postgres";
