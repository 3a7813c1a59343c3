//! Base backups: what one is ([`manifest`]), which ones and
//! which WAL may go ([`retention`]), taking one from a running PostgreSQL
//! ([`take`]; its parts are the SQL session, `session`, the walk of the
//! data directory into a tar, `tar_walk`, the pipe from that blocking writer
//! to the upload, `pipe`, and the `progress` shown while it runs), pruning
//! the store ([`prune`]), and which backup a recovery starts from
//! ([`select`]) and unpacking it ([`restore`]).
//!
//! `manifest`, `retention`, `select` and `progress` are pure; `take` (with
//! its parts), `prune` and `restore` are the in-pod side the instance
//! manager runs.

pub mod manifest;
mod pipe;
mod progress;
pub mod prune;
pub mod restore;
pub mod retention;
pub mod select;
mod session;
pub mod take;
mod tar_walk;
