//! Tusk: a PostgreSQL operator for Kubernetes.

pub mod api;
pub mod backup;
pub mod cli;
pub mod contract;
pub mod controller;
pub mod drill;
pub mod error;
pub mod failover;
pub mod instance;
pub mod lifecycle;
pub mod objectstore;
pub mod operator;
pub mod plugin;
pub mod postgres;
pub mod probe;
pub mod resources;
pub mod schedule;
pub mod telemetry;
pub mod tls;
pub mod upgrade;
pub mod wal;
pub mod webhook;
