//! Backup verification: once a Backup completes and its Database verifies
//! (`spec.backup.verify`, on by default with a schedule), a Job restores it in
//! a throwaway pod ([`crate::resources::verify_job`]); its outcome becomes the
//! Backup's `verified` status and `Verified` condition (with an Event), and the
//! Job goes. The decisions are pure ([`decide`]); [`step`] is the shell
//! ([`shell`]).

pub mod decide;
pub mod shell;

pub use decide::{
    VERIFICATION_FAILED, VERIFIED, VERIFYING, finished, last_verifications, running, source, wanted,
};
pub use shell::step;
