//! The `tusk` command line: one binary, one subcommand per role.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::api::crd::{self, WebhookService};
use crate::operator::{self, OperatorConfig};

/// Every way a `tusk` command can fail: the one crate-wide error, at the
/// binary's edge; each module below has its own.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Operator(#[from] operator::Error),

    #[error("instance manager: {0}")]
    Instance(#[from] crate::instance::Error),

    #[error(transparent)]
    Wal(#[from] crate::wal::Error),

    #[error("upgrade: {0}")]
    Upgrade(#[from] crate::upgrade::Error),

    #[error("drill probe: {0}")]
    Probe(#[from] crate::probe::Error),

    #[error("cannot merge the CRD versions: {0}")]
    Crd(#[source] kube::core::crd::MergeError),

    #[error("cannot render YAML: {0}")]
    Yaml(#[source] serde_yaml::Error),

    #[error("cannot write to stdout: {0}")]
    Stdout(#[source] std::io::Error),
}

#[derive(Parser, Debug)]
#[command(name = "tusk", version, about = "A PostgreSQL operator for Kubernetes")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the operator: controllers for Database and Backup, health and metrics.
    Operator(Box<OperatorConfig>),
    /// Run the instance manager: PID 1 of every Postgres pod.
    Instance(Box<crate::instance::InstanceConfig>),
    /// Restore one base backup into this pod's own volume, replay to its end,
    /// check that PostgreSQL is consistent and answers (and amcheck where
    /// available), and write the outcome as JSON to the termination log (the
    /// operator's backup verification Job).
    VerifyBackup {
        #[command(flatten)]
        config: Box<crate::instance::InstanceConfig>,
        /// Where the outcome goes.
        #[arg(long, default_value = crate::instance::TERMINATION_LOG)]
        termination_log: PathBuf,
    },
    /// A major upgrade's steps, run by the operator's Jobs on the primary's
    /// volume (each writes its outcome as JSON to the termination log).
    #[command(subcommand)]
    Upgrade(crate::upgrade::Step),
    /// The drill probe: write through a Database's `-rw` Service like an
    /// application, one connection per row, and serve what was acknowledged
    /// (the pod of a Drill runs it).
    Probe(crate::probe::ProbeConfig),
    /// Copy this executable to a path with mode 0755 (for the init container that
    /// brings tusk into a stock Postgres image, which has no shell).
    CopyBinary { destination: PathBuf },
    /// PostgreSQL's `archive_command` (`tusk wal-archive %p`): compress and
    /// upload one WAL file to the object store, and the next ready ones with it.
    WalArchive {
        /// The file, relative to the data directory (`%p`).
        path: PathBuf,
        #[command(flatten)]
        wal: WalArgs,
    },
    /// PostgreSQL's `restore_command` (`tusk wal-restore %f %p`): fetch one
    /// WAL file from the object store (and the next segments ahead of need).
    WalRestore {
        /// The WAL file name (`%f`).
        name: String,
        /// Where PostgreSQL wants it, relative to the data directory (`%p`).
        destination: PathBuf,
        #[command(flatten)]
        wal: WalArgs,
    },
    /// Print the CustomResourceDefinitions (both kinds, both versions) as YAML.
    Crd {
        /// Namespace of the Service that serves the conversion webhook.
        #[arg(long, default_value = "tusk-system")]
        webhook_namespace: String,
        /// Name of the Service that serves the conversion webhook.
        #[arg(long, default_value = "tusk-webhook")]
        webhook_service: String,
    },
}

/// What both WAL commands read from the pod's environment (which PostgreSQL
/// passes on to them).
#[derive(clap::Args, Debug)]
pub struct WalArgs {
    /// The data directory; PostgreSQL runs the commands in it.
    #[arg(long, env = crate::contract::env::PGDATA)]
    pgdata: Option<PathBuf>,
    /// The Database's name, in the store's key layout.
    #[arg(long, env = crate::contract::env::DATABASE)]
    database: String,
    /// Files moved at once (asked one included).
    #[arg(long, env = crate::contract::env::WAL_PARALLEL, default_value_t = 4)]
    parallel: usize,
    /// Restore from the restore bootstrap's source (`TUSK_RESTORE_SOURCE` in
    /// the store the `TUSK_RESTORE_*` variables describe), not this
    /// Database's own archive.
    #[arg(long)]
    source: bool,
}

impl WalArgs {
    /// The data directory: the argument, else where PostgreSQL runs us.
    fn data_directory(&self) -> Result<PathBuf, crate::wal::Error> {
        match &self.pgdata {
            Some(dir) => Ok(dir.clone()),
            None => std::env::current_dir().map_err(|source| crate::wal::Error::Io {
                what: "finding",
                path: PathBuf::from("."),
                source,
            }),
        }
    }

    fn archive(self) -> Result<crate::wal::Archive, crate::wal::Error> {
        use crate::objectstore::{Configured, Layout, Store};
        let pgdata = self.data_directory()?;
        use crate::contract::env;
        let (configured, database) = if self.source {
            let configured = Configured::from_env(|name| std::env::var(env::restore(name)).ok())?;
            let source = std::env::var(env::RESTORE_SOURCE)
                .ok()
                .filter(|s| !s.is_empty())
                .ok_or(crate::objectstore::ConfigError::Missing(
                    env::RESTORE_SOURCE,
                ))?;
            (configured, source)
        } else {
            let mut configured = Configured::from_env(|name| std::env::var(name).ok())?;
            // A drill's store outage: the real client meets an unreachable store.
            configured.store =
                crate::wal::outage::apply(&pgdata, configured.store, std::time::SystemTime::now());
            (configured, self.database)
        };
        let system = crate::wal::system_identifier(&pgdata)?;
        Ok(crate::wal::Archive {
            spool: if self.source {
                crate::wal::source_spool(&pgdata)
            } else {
                crate::wal::default_spool(&pgdata)
            },
            store: Store::new(&configured.store)?,
            layout: Layout::new(configured.path.as_deref(), &database, system),
            parallel: self.parallel.max(1),
            pgdata,
        })
    }
}

pub async fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::WalArchive { path, wal } => {
            let pgdata = wal.data_directory()?;
            // A store that cannot even be set up (credentials not there yet)
            // is a failed archiving too: the manager reports its reason.
            let archive = wal
                .archive()
                .inspect_err(|error| crate::wal::record_archive_error(&pgdata, error))?;
            archive.archive(&path).await?;
            Ok(())
        }
        Command::WalRestore {
            name,
            destination,
            wal,
        } => Ok(wal.archive()?.restore(&name, &destination).await?),
        Command::Operator(config) => Ok(operator::run(*config).await?),
        Command::Instance(config) => Ok(crate::instance::run(*config).await?),
        Command::VerifyBackup {
            config,
            termination_log,
        } => Ok(crate::instance::verify_backup(*config, &termination_log).await?),
        Command::Upgrade(step) => Ok(crate::upgrade::run(step).await?),
        Command::Probe(config) => Ok(crate::probe::run(config).await?),
        Command::CopyBinary { destination } => Ok(crate::instance::copy_binary(&destination)?),
        Command::Crd {
            webhook_namespace,
            webhook_service,
        } => {
            let webhook = WebhookService {
                namespace: webhook_namespace,
                name: webhook_service,
                ..WebhookService::default()
            };
            let crds = crd::all(&webhook).map_err(Error::Crd)?;
            let yaml = crd::to_yaml(&crds).map_err(Error::Yaml)?;
            std::io::stdout()
                .write_all(yaml.as_bytes())
                .map_err(Error::Stdout)
        }
    }
}
