//! Backups: a seat for WAL archiving, base backups and retention. Today
//! `spec.backup` is refused as a request (see `requests`).

use super::context::Context;
use super::verdict::Verdict;

pub(super) fn plan(_ctx: &Context) -> Vec<Verdict> {
    Vec::new()
}
