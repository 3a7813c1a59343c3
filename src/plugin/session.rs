//! The connection to the API server, chosen like kubectl chooses it:
//! `--kubeconfig`, else `KUBECONFIG`, else ~/.kube/config (else the
//! in-cluster account); `--context`; `-n`, else the context's namespace.

use kube::{Api, Client};

use crate::api::v1::Database;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};

use super::{Error, Global};

/// A client and the namespace the command works in.
#[derive(Clone)]
pub struct Session {
    pub client: Client,
    pub namespace: String,
}

impl Session {
    /// The Database `name` in this session's namespace, or a one-line
    /// NotFound.
    pub async fn database(&self, name: &str) -> Result<Database, Error> {
        let api: Api<Database> = Api::namespaced(self.client.clone(), &self.namespace);
        api.get_opt(name)
            .await
            .map_err(Error::kube(format!("reading Database {name}")))?
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "Database {name} not found in namespace {}",
                    self.namespace
                ))
            })
    }

    pub async fn connect(global: &Global) -> Result<Session, Error> {
        let options = KubeConfigOptions {
            context: global.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match &global.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .map_err(|err| Error::Kubeconfig(format!("{}: {err}", path.display())))?;
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|err| Error::Kubeconfig(err.to_string()))?
            }
            None if global.context.is_some() => Config::from_kubeconfig(&options)
                .await
                .map_err(|err| Error::Kubeconfig(err.to_string()))?,
            None => Config::infer()
                .await
                .map_err(|err| Error::Kubeconfig(err.to_string()))?,
        };
        let namespace = global
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config)
            .map_err(|err| Error::Kubeconfig(format!("cannot build a client: {err}")))?;
        Ok(Session { client, namespace })
    }
}
