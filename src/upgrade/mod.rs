//! `tusk upgrade`: the in-pod half of a major upgrade, run by the operator's
//! Jobs on the primary's volume.
//!
//! - `stage-old` runs in the OLD image (an init container) and copies that
//!   image's PostgreSQL (programs, modules, share files and the shared
//!   libraries they need beyond glibc) into a directory the Job's main
//!   container, in the NEW image, runs them from ([`stage`]).
//! - `check` runs `pg_upgrade --check` while the old primary keeps serving
//!   in its own pod ([`check`]).
//! - `run` upgrades the stopped primary's data with `pg_upgrade --link`,
//!   keeping the old data directory beside the new one ([`link`]).
//! - `rollback` puts the old data directory back before the new server ever
//!   started ([`rollback`]).
//!
//! Every step writes a one-line JSON [`UpgradeOutcome`] to the termination
//! log. The progress of `run` and `rollback` is a state file beside PGDATA
//! ([`state`]), so a Job pod restarted at any point resumes or refuses
//! clearly, and the instance manager knows when the new server first
//! answers (then the old directory goes).

mod check;
pub mod child;
mod command;
mod forward;
mod link;
pub mod report;
mod rollback;
pub mod settings;
mod stage;
pub mod state;
pub mod version;

use std::path::{Path, PathBuf};

use crate::contract::{UpgradeOutcome, env};

pub use stage::stage_old;

/// Where Kubernetes reads a container's termination message.
pub const TERMINATION_LOG: &str = "/dev/termination-log";
/// Kubernetes keeps at most this many bytes of a termination message.
pub const TERMINATION_MESSAGE_LIMIT: usize = 4096;

/// The one database superuser Tusk creates, whom pg_upgrade must run as
/// (it insists on the install user).
const SUPERUSER: &str = crate::postgres::SUPERUSER;

/// What can go wrong in an upgrade step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{program} failed ({status}): {output}")]
    Command {
        program: String,
        status: String,
        output: String,
    },

    /// pg_upgrade refused or failed; `report` quotes what it said.
    #[error("{0}")]
    PgUpgrade(String),

    #[error("SQL failed while {context}: {detail}")]
    Sql {
        context: &'static str,
        /// The server's own message when it sent one (tokio-postgres'
        /// display of a server error is only "db error").
        detail: String,
    },

    #[error("cannot understand {what}: {detail}")]
    Parse { what: &'static str, detail: String },

    /// The data directory is not in a state this step may act on.
    #[error("{0}")]
    Refused(String),

    #[error("the state file {}: {detail}", path.display())]
    State { path: PathBuf, detail: String },

    #[error("{context}: {source}")]
    Tls {
        context: &'static str,
        #[source]
        source: crate::tls::Error,
    },
}

impl Error {
    pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.to_owned();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    }

    fn sql(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> Error {
        move |source| {
            let detail = match source.as_db_error() {
                Some(db) => format!("{}: {}", db.severity(), db.message()),
                None => match std::error::Error::source(&source) {
                    Some(cause) => format!("{source}: {cause}"),
                    None => source.to_string(),
                },
            };
            Error::Sql { context, detail }
        }
    }
}

/// `tusk upgrade <step>`.
#[derive(clap::Subcommand, Debug)]
pub enum Step {
    /// In the OLD image: copy its PostgreSQL major (programs, modules, share
    /// files, and the non-glibc shared libraries they need) into `--dest`,
    /// runnable from there in another image; the old bindir to pass to
    /// `check` and `run` is `<dest>/bin`.
    StageOld {
        /// The directory to fill (an emptyDir shared with the main container).
        #[arg(long)]
        dest: PathBuf,
        /// The image's PostgreSQL programs; found through PATH or
        /// `pg_config` when unset.
        #[arg(long, env = env::BINDIR)]
        bindir: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// `pg_upgrade --check` against the old primary while it runs.
    Check {
        #[command(flatten)]
        dirs: Dirs,
        /// Reach the old primary over TCP at this host (its pod's address):
        /// pg_upgrade's connections go through a local socket forwarded
        /// there. Unset: through the socket directory its postmaster.pid
        /// names (the old server runs beside this process).
        #[arg(long)]
        primary_host: Option<String>,
        /// The old primary's port with `--primary-host`.
        #[arg(long, default_value_t = 5432)]
        port: u16,
        /// The superuser's password for the TCP connections.
        #[arg(long, env = env::SUPERUSER_PASSWORD, hide_env_values = true)]
        superuser_password: Option<String>,
        /// With `--primary-host`: start TLS on every relayed connection and
        /// require the old primary's certificate to carry this name (a
        /// primary that serves TLS accepts no plaintext TCP, and pg_upgrade
        /// speaks plaintext to the local socket). Unset: plaintext TCP.
        #[arg(long, requires_all = ["primary_host", "primary_ca"])]
        primary_name: Option<String>,
        /// The PEM file of the CAs that verify the old primary's certificate
        /// (with `--primary-name`).
        #[arg(long, requires = "primary_name")]
        primary_ca: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// Upgrade the stopped old primary's data with `pg_upgrade --link`; the
    /// old data directory is kept beside PGDATA until the new server answers.
    Run {
        #[command(flatten)]
        dirs: Dirs,
        #[command(flatten)]
        common: Common,
    },
    /// Before the new server ever started: put the old data directory back.
    Rollback {
        /// The data directory (the new one after `run`).
        #[arg(long, env = env::PGDATA)]
        pgdata: PathBuf,
        /// The major to return to: when no upgrade is under way and PGDATA
        /// holds another major, the rollback fails (the new server started
        /// and the old data is gone) instead of reporting nothing to do.
        #[arg(long)]
        old_major: Option<u32>,
        #[command(flatten)]
        common: Common,
    },
}

/// The programs and data of `check` and `run`.
#[derive(clap::Args, Debug, Clone)]
pub struct Dirs {
    /// The old major's programs (`<dest>/bin` of `stage-old`).
    #[arg(long)]
    pub old_bindir: PathBuf,
    /// The new major's programs; found through PATH or `pg_config` when unset.
    #[arg(long, env = env::BINDIR)]
    pub new_bindir: Option<PathBuf>,
    /// The old cluster's data directory.
    #[arg(long, env = env::PGDATA)]
    pub pgdata: PathBuf,
    /// The WAL directory on the instance's WAL volume (`spec.walStorage`):
    /// `run` puts the new cluster's WAL beside it (`<waldir>.<major>`), so
    /// the old cluster's stays as it was for a rollback.
    #[arg(long, env = env::WALDIR)]
    pub waldir: Option<PathBuf>,
}

/// The new major's programs: `--new-bindir`, else the image's.
fn new_bindir(dirs: &Dirs) -> Result<PathBuf, Error> {
    if let Some(dir) = &dirs.new_bindir {
        return Ok(dir.clone());
    }
    stage::find_bindir().ok_or_else(|| {
        Error::Refused(
            "cannot find the new PostgreSQL programs: no --new-bindir, no postgres on PATH, no pg_config"
                .into(),
        )
    })
}

/// Removes `dir` (scratch space of an earlier attempt) and creates it empty,
/// private to this user as PostgreSQL wants its directories.
fn fresh_dir(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(Error::io("remove", dir))?;
    }
    std::fs::create_dir_all(dir).map_err(Error::io("create", dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(Error::io("set the mode of", dir))
}

/// Options every step has.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Where the outcome goes.
    #[arg(long, default_value = TERMINATION_LOG)]
    pub termination_log: PathBuf,
    /// Scratch space (pg_upgrade's working directory and sockets, the
    /// check's throwaway cluster); emptied first.
    #[arg(long, default_value = "/tmp/tusk-upgrade")]
    pub work_dir: PathBuf,
}

/// Runs `step`, writes its outcome to the termination log (and stdout), and
/// returns an error when it failed, so the container exits non-zero.
pub async fn run(step: Step) -> Result<(), Error> {
    if let Err(err) = crate::telemetry::init_logging() {
        eprintln!("tusk upgrade: {err}");
    }
    let (name, common) = match &step {
        Step::StageOld { common, .. } => ("stage-old", common.clone()),
        Step::Check { common, .. } => ("check", common.clone()),
        Step::Run { common, .. } => ("run", common.clone()),
        Step::Rollback { common, .. } => ("rollback", common.clone()),
    };
    let result = match step {
        Step::StageOld { dest, bindir, .. } => stage::stage_old(bindir.as_deref(), &dest).await,
        Step::Check {
            dirs,
            primary_host,
            port,
            superuser_password,
            primary_name,
            primary_ca,
            common,
        } => {
            let target = match primary_host {
                Some(host) => check::Target::Tcp {
                    host,
                    port,
                    password: superuser_password,
                    // clap requires both or neither.
                    tls: primary_name
                        .zip(primary_ca)
                        .map(|(name, ca_file)| check::PrimaryTls { name, ca_file }),
                },
                None => check::Target::Local,
            };
            check::check(&dirs, &target, &common.work_dir).await
        }
        Step::Run { dirs, common } => link::run(&dirs, &common.work_dir).await,
        Step::Rollback {
            pgdata, old_major, ..
        } => rollback::rollback(&pgdata, old_major),
    };
    let outcome = match &result {
        Ok(message) => UpgradeOutcome {
            ok: true,
            message: message.clone(),
        },
        Err(error) => UpgradeOutcome {
            ok: false,
            message: error.to_string(),
        },
    };
    tracing::info!(step = name, ok = outcome.ok, message = %outcome.message, "upgrade step done");
    let line = outcome_line(&outcome);
    if let Err(error) = std::fs::write(&common.termination_log, &line) {
        tracing::warn!(%error, path = %common.termination_log.display(), "cannot write the termination log");
    }
    println!("{line}");
    result.map(|_| ())
}

/// `outcome` as one JSON line that fits a termination message: the message
/// is cut (on a character boundary, marked) until the escaped line fits.
pub fn outcome_line(outcome: &UpgradeOutcome) -> String {
    let mut outcome = outcome.clone();
    loop {
        let line = serde_json::to_string(&outcome).unwrap_or_default();
        if line.len() <= TERMINATION_MESSAGE_LIMIT || outcome.message.is_empty() {
            return line;
        }
        let excess = line.len() - TERMINATION_MESSAGE_LIMIT;
        let keep = outcome.message.len().saturating_sub(excess + 16);
        let cut = report::floor_char_boundary(&outcome.message, keep);
        outcome.message = format!("{} […]", &outcome.message[..cut]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        step: Step,
    }

    #[test]
    fn tls_to_the_primary_takes_a_name_a_ca_and_a_host_together() {
        use clap::Parser;
        let base = ["tusk", "check", "--old-bindir", "/old", "--pgdata", "/data"];
        let parse = |extra: &[&str]| {
            Cli::try_parse_from(base.iter().chain(extra)).map(|cli| match cli.step {
                Step::Check {
                    primary_name,
                    primary_ca,
                    ..
                } => (primary_name, primary_ca),
                other => panic!("{other:?}"),
            })
        };
        let tls = [
            "--primary-host",
            "10.0.0.7",
            "--primary-name",
            "orders-rw",
            "--primary-ca",
            "/ca.crt",
        ];
        assert_eq!(
            parse(&tls).unwrap(),
            (Some("orders-rw".to_owned()), Some(PathBuf::from("/ca.crt")))
        );
        assert_eq!(
            parse(&tls[..2]).unwrap(),
            (None, None),
            "plaintext as before"
        );
        assert!(parse(&tls[..4]).is_err(), "a name without a CA");
        assert!(parse(&tls[2..]).is_err(), "TLS without a host");
        assert!(parse(&["--primary-host", "10.0.0.7", "--primary-ca", "/ca.crt"]).is_err());
    }

    #[test]
    fn an_outcome_line_always_fits_a_termination_message() {
        let long = UpgradeOutcome {
            ok: false,
            message: "\"é\n".repeat(3000),
        };
        let line = outcome_line(&long);
        assert!(line.len() <= TERMINATION_MESSAGE_LIMIT, "{}", line.len());
        let back: UpgradeOutcome = serde_json::from_str(&line).expect("still JSON");
        assert!(!back.ok);
        assert!(back.message.ends_with("[…]"));
        let short = UpgradeOutcome {
            ok: true,
            message: "upgraded".into(),
        };
        assert_eq!(outcome_line(&short), r#"{"ok":true,"message":"upgraded"}"#);
    }
}
