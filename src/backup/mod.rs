//! Base backups: what one is ([`manifest`]), what a scheduled one is called
//! ([`schedule`]; when it is due is [`crate::schedule`]'s), which ones and
//! which WAL may go ([`retention`]), taking one from a running PostgreSQL
//! ([`take`]), pruning the store ([`prune`]), and which backup a recovery
//! starts from ([`select`]) and unpacking it ([`restore`]).
//!
//! `manifest`, `schedule`, `retention` and `select` are pure; `take`,
//! `prune` and `restore` are the in-pod side the instance manager runs.

pub mod manifest;
pub mod prune;
pub mod restore;
pub mod retention;
pub mod schedule;
pub mod select;
pub mod take;
