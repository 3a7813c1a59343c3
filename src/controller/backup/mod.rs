//! The Backup controller: observe the Backup, its Database, the Database's
//! other Backups and instances → pure decision ([`next`] in [`decide`], the
//! status in [`status`]) → act (start the run on the chosen instance's
//! manager, or read where it is; [`shell`]) → status. The instance
//! manager takes the backup ([`crate::backup::take`]); this controller
//! chooses where, keeps one running per Database, and reports. A completed
//! Backup is then verified ([`crate::controller::verification`]).

pub mod decide;
pub mod shell;
pub mod status;

pub use decide::{Next, Source, next};
pub use shell::{CONTROLLER, reconcile, sample};
pub use status::{from_run, outcome, validated};
