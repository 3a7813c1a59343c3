//! Where a running base backup is, shared between the task that takes it,
//! the thread that writes its stream, and the manager's status endpoint.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// Where a running backup is, read by the manager's status endpoint while
/// the backup runs.
#[derive(Debug, Default)]
pub struct Progress {
    stage: AtomicU8,
    /// Bytes of the data directory to read, measured at the start.
    pub estimated_bytes: AtomicU64,
    /// Bytes of the tar stream so far (before compression).
    pub raw_bytes: AtomicU64,
    /// Bytes handed to the upload so far (after compression).
    pub stored_bytes: AtomicU64,
}

/// What a running backup is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Starting,
    /// Reading the data directory into the store.
    Streaming,
    /// The data is stored; waiting for the WAL the backup ends in to be
    /// archived (on a standby, the primary must switch to a new segment).
    WaitingForWal,
    Done,
}

impl Progress {
    pub fn stage(&self) -> Stage {
        match self.stage.load(Ordering::Relaxed) {
            0 => Stage::Starting,
            1 => Stage::Streaming,
            2 => Stage::WaitingForWal,
            _ => Stage::Done,
        }
    }

    pub(super) fn set_stage(&self, stage: Stage) {
        let value = match stage {
            Stage::Starting => 0,
            Stage::Streaming => 1,
            Stage::WaitingForWal => 2,
            Stage::Done => 3,
        };
        self.stage.store(value, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_is_read_back_as_set() {
        let progress = Progress::default();
        assert_eq!(progress.stage(), Stage::Starting);
        for stage in [
            Stage::Streaming,
            Stage::WaitingForWal,
            Stage::Done,
            Stage::Starting,
        ] {
            progress.set_stage(stage);
            assert_eq!(progress.stage(), stage);
        }
    }
}
