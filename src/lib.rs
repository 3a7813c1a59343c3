//! Tusk: a PostgreSQL operator for Kubernetes.

pub mod api;
pub mod cli;
pub mod controller;
pub mod error;
pub mod operator;
pub mod resources;
pub mod telemetry;
pub mod webhook;
