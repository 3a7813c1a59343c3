//! `kubectl tusk`: the operator's command line for the people who run
//! databases. The `tusk` binary becomes this tool when it is invoked as
//! `kubectl-tusk` (a copy or a link under that name on `PATH`, which is how
//! kubectl finds plugins), so the plugin and the operator can never disagree
//! on the API types or on the planner `plan` runs.
//!
//! Each command lives in a module of its own; this one holds the command line
//! and the dispatch. Rendering is pure (a status in, text out) so that it is
//! tested on fixed statuses; talking to the API server lives in [`session`].

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

pub mod act;
pub mod backup;
pub mod connect;
pub mod drill;
pub mod error;
pub mod history;
pub mod logs;
pub mod plan;
pub mod plan_observe;
pub mod psql;
pub mod render;
#[cfg(test)]
mod render_golden;
pub mod report;
pub mod restart;
pub mod restore;
pub mod session;
pub mod simulate;
pub mod status;
pub mod switchover;
pub mod term;
pub mod why;

pub use error::Error;
pub use session::Session;

/// The name kubectl looks for on `PATH`.
pub const PLUGIN_BINARY: &str = "kubectl-tusk";

/// Whether this process was started under the plugin's name (argv[0]).
pub fn invoked_as_plugin(argv0: Option<&OsString>) -> bool {
    argv0
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|name| name == PLUGIN_BINARY || name.starts_with("kubectl-tusk."))
}

#[derive(Parser, Debug)]
#[command(
    name = "kubectl tusk",
    bin_name = "kubectl tusk",
    version,
    about = "Operate PostgreSQL databases run by Tusk",
    long_about = "Operate PostgreSQL databases run by Tusk: read their state, see what a change \
                  will do before applying it, and run switchovers, backups and restores that \
                  wait and report what they measured.",
    after_help = "Examples:\n  kubectl tusk status pg\n  kubectl tusk why pg -n prod\n  \
                  kubectl tusk plan pg -f pg.yaml\n  kubectl tusk switchover pg --wait\n  \
                  kubectl tusk backup pg --wait\n  kubectl tusk psql pg --replica"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// The options every command takes, spelled like kubectl's.
#[derive(Args, Debug, Clone, Default)]
pub struct Global {
    /// The namespace (default: the kubeconfig context's, else `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context to use (default: the current one).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The kubeconfig file (default: `KUBECONFIG`, else ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
}

/// How `status`, `plan` and `history` print.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Output {
    /// One screen for a person.
    #[default]
    Text,
    Json,
    Yaml,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// One screen on a Database: phase, instances, replication, backups,
    /// the last failover, what is not well, recent warnings.
    #[command(
        after_help = "Examples:\n  kubectl tusk status pg\n  kubectl tusk status pg -o yaml\n  \
                            kubectl tusk status pg --watch"
    )]
    Status {
        database: String,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
        /// Print again whenever the Database changes.
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// Why a Database is not Ready: the chain of causes, what to look at and
    /// what to do.
    #[command(after_help = "Example:\n  kubectl tusk why pg")]
    Why { database: String },
    /// What Tusk will do if a spec is applied, computed by the operator's own
    /// planner from the Database's current state. Changes nothing.
    #[command(after_help = "Examples:\n  kubectl tusk plan pg -f pg.yaml\n  \
                            kubectl tusk plan pg --patch '{\"spec\":{\"version\":\"17.12\"}}' -o json")]
    Plan {
        database: String,
        /// The Database manifest that would be applied.
        #[arg(
            short = 'f',
            long,
            conflicts_with = "patch",
            required_unless_present = "patch"
        )]
        file: Option<PathBuf>,
        /// A JSON merge patch over the current spec.
        #[arg(long)]
        patch: Option<String>,
        /// `json` and `yaml` list the steps with their kinds and targets.
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Hand the primary role to a replica (the most advanced healthy one
    /// unless `--to` names it).
    #[command(after_help = "Examples:\n  kubectl tusk switchover pg --wait\n  \
                            kubectl tusk switchover pg --to pg-2 --wait")]
    Switchover {
        database: String,
        /// The instance to promote.
        #[arg(long)]
        to: Option<String>,
        #[command(flatten)]
        wait: Wait,
    },
    /// Restart every instance, replicas first, then the primary after a
    /// switchover.
    #[command(after_help = "Example:\n  kubectl tusk restart pg --wait")]
    Restart {
        database: String,
        #[command(flatten)]
        wait: Wait,
    },
    /// Take a base backup now.
    #[command(after_help = "Example:\n  kubectl tusk backup pg --wait")]
    Backup {
        database: String,
        /// The Backup's name (default: `<database>-<time>`).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        wait: Wait,
    },
    /// Create a new Database from another's backups, to its latest state or
    /// to a point in time.
    #[command(
        after_help = "Examples:\n  kubectl tusk restore pg --to pg-copy --wait\n  \
                            kubectl tusk restore pg --to pg-before --time 2026-11-26T10:00:00Z --wait"
    )]
    Restore {
        /// The Database whose backups are restored.
        source: String,
        /// The new Database.
        #[arg(long)]
        to: String,
        /// Recover to this time (RFC 3339).
        #[arg(long, conflicts_with = "lsn")]
        time: Option<String>,
        /// Recover to this WAL position (`X/Y`).
        #[arg(long)]
        lsn: Option<String>,
        #[command(flatten)]
        wait: Wait,
    },
    /// Open psql on the primary (or a replica, or a named instance).
    #[command(
        after_help = "Examples:\n  kubectl tusk psql pg\n  kubectl tusk psql pg --replica\n  \
                            kubectl tusk psql pg --instance 2 -- -c 'select 1'"
    )]
    Psql {
        database: String,
        /// A ready replica instead of the primary.
        #[arg(long, conflicts_with = "instance")]
        replica: bool,
        /// The instance, by name (`pg-2`) or number (`2`).
        #[arg(long)]
        instance: Option<String>,
        /// Passed to psql.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// How applications connect: URIs, published endpoints and the CA.
    #[command(after_help = "Examples:\n  kubectl tusk connect pg\n  \
                            kubectl tusk connect pg --ca-file ca.crt")]
    Connect {
        database: String,
        /// Print passwords and password-bearing URIs in full.
        #[arg(long)]
        show_secrets: bool,
        /// Write the CA certificate clients verify the server with here.
        #[arg(long)]
        ca_file: Option<PathBuf>,
    },
    /// The instances' logs merged by time (and the operator's with
    /// `--operator`).
    #[command(
        after_help = "Examples:\n  kubectl tusk logs pg\n  kubectl tusk logs pg --operator --since 10m"
    )]
    Logs {
        database: String,
        /// Include the operator's lines about this Database.
        #[arg(long)]
        operator: bool,
        /// Only lines newer than this (`30s`, `10m`, `2h`).
        #[arg(long)]
        since: Option<String>,
    },
    /// A support bundle: specs, statuses, Events, logs and operator metrics,
    /// with every secret value left out.
    #[command(after_help = "Example:\n  kubectl tusk report pg --output pg-report.tar.zst")]
    Report {
        database: String,
        /// Where the bundle goes, a zstd-compressed tar (default:
        /// `<database>-report-<time>.tar.zst`).
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Failovers, switchovers, backups and upgrades, with their figures.
    #[command(after_help = "Example:\n  kubectl tusk history pg")]
    History {
        database: String,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Failure drills: run one now, list them, show one's figures.
    #[command(
        subcommand,
        after_help = "Examples:\n  kubectl tusk drill run pg switchover --wait\n  \
                      kubectl tusk drill list pg\n  kubectl tusk drill show pg-switchover-1795687200"
    )]
    Drill(drill::DrillCommand),
    /// Print a shell completion script.
    #[command(
        after_help = "Example:\n  kubectl tusk completion bash > /etc/bash_completion.d/kubectl-tusk"
    )]
    Completion { shell: clap_complete::Shell },
}

/// `--wait` and how long to wait.
#[derive(Args, Debug, Clone, Copy)]
pub struct Wait {
    /// Wait until it is done and report what was measured.
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this many seconds (exit code 1).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
}

/// Parse the arguments and run; the exit code scripts see.
pub async fn main(args: Vec<OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => {
            // clap prints help and version on stdout with exit 0, and usage
            // errors on stderr with exit 2.
            let _ = err.print();
            return ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2));
        }
    };
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}

async fn run(cli: Cli) -> Result<(), Error> {
    if let Command::Completion { shell } = cli.command {
        return completion(shell);
    }
    let session = Session::connect(&cli.global).await?;
    dispatch(&session, &cli.global, cli.command).await
}

async fn dispatch(session: &Session, global: &Global, command: Command) -> Result<(), Error> {
    match command {
        Command::Status {
            database,
            output,
            watch,
        } => status::run(session, &database, output, watch).await,
        Command::Why { database } => why::run(session, &database).await,
        Command::History { database, output } => history::run(session, &database, output).await,
        Command::Connect {
            database,
            show_secrets,
            ca_file,
        } => connect::run(session, &database, show_secrets, ca_file.as_deref()).await,
        Command::Logs {
            database,
            operator,
            since,
        } => logs::run(session, &database, operator, since.as_deref()).await,
        Command::Report { database, output } => {
            report::run(session, &database, output.as_deref()).await
        }
        Command::Plan {
            database,
            file,
            patch,
            output,
        } => {
            plan::run(
                session,
                &database,
                file.as_deref(),
                patch.as_deref(),
                output,
            )
            .await
        }
        Command::Backup {
            database,
            name,
            wait,
        } => backup::run(session, &database, name.as_deref(), wait).await,
        Command::Psql {
            database,
            replica,
            instance,
            args,
        } => {
            let choice = match (replica, instance) {
                (true, _) => psql::Choice::Replica,
                (false, Some(instance)) => psql::Choice::Instance(instance),
                (false, None) => psql::Choice::Primary,
            };
            psql::run(session, global, &database, choice, &args).await
        }
        Command::Restart { database, wait } => restart::run(session, &database, wait).await,
        Command::Restore {
            source,
            to,
            time,
            lsn,
            wait,
        } => {
            let request = restore::Request {
                source: &source,
                to: &to,
                time: time.as_deref(),
                lsn: lsn.as_deref(),
                wait,
            };
            restore::run(session, request).await
        }
        Command::Switchover { database, to, wait } => {
            switchover::run(session, &database, to.as_deref(), wait).await
        }
        Command::Drill(command) => drill::dispatch(session, command).await,
        Command::Completion { shell } => completion(shell),
    }
}

/// The shell completion script: no cluster needed.
fn completion(shell: clap_complete::Shell) -> Result<(), Error> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, PLUGIN_BINARY, &mut std::io::stdout());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_plugin_name_is_recognised_from_argv0() {
        let yes = |s: &str| invoked_as_plugin(Some(&OsString::from(s)));
        assert!(yes("kubectl-tusk"));
        assert!(yes("/usr/local/bin/kubectl-tusk"));
        assert!(yes("kubectl-tusk.exe"));
        assert!(!yes("tusk"));
        assert!(!yes("/usr/local/bin/tusk"));
        assert!(!invoked_as_plugin(None));
    }
}
