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
    /// Copy this executable to a path with mode 0755 (for the init container that
    /// brings tusk into a stock Postgres image, which has no shell).
    CopyBinary { destination: PathBuf },
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

pub async fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Operator(config) => Ok(operator::run(*config).await?),
        Command::Instance(config) => Ok(crate::instance::run(*config).await?),
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
