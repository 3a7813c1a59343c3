//! Base backups: what one is ([`manifest`]), when the next is due
//! ([`schedule`]), which ones and which WAL may go ([`retention`]), and taking
//! one from a running PostgreSQL ([`take`]).
//!
//! Everything but `take` is pure; `take` is the in-pod side the instance
//! manager runs.

pub mod manifest;
pub mod retention;
pub mod schedule;
pub mod take;
