//! `kubectl tusk psql <db> [--replica | --instance n] [-- args]`: psql in
//! an instance's `postgres` container, as the superuser over the local
//! socket (the way the instance manager connects: peer authentication, no
//! password leaves the pod), through `kubectl exec`. The kubectl that
//! called the plugin runs it (`KUBECTL_PLUGINS_CALLER`, else `kubectl` on
//! `PATH`) with the same `--context`, `--kubeconfig` and namespace. A TTY
//! is asked for only when standard input is a terminal, so
//! `echo 'select 1' | kubectl tusk psql pg` works.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;

use super::act;
use super::{Error, Global, Session};
use crate::api::status::DatabaseStatus;
use crate::postgres::SUPERUSER;
use crate::resources::POSTGRES_CONTAINER;

/// Where the instance's PostgreSQL listens locally (the run volume).
const SOCKET_DIR: &str = "/var/run/postgresql";
const PORT: &str = "5432";

/// Which instance to open psql on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    Primary,
    Replica,
    Instance(String),
}

pub async fn run(
    session: &Session,
    global: &Global,
    database: &str,
    choice: Choice,
    args: &[String],
) -> Result<(), Error> {
    let db = session.database(database).await?;
    let pod = choose(database, &db.status.clone().unwrap_or_default(), &choice)?;
    let kubectl = std::env::var_os("KUBECTL_PLUGINS_CALLER")
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| OsString::from("kubectl"));
    let argv = exec_args(
        global,
        &session.namespace,
        &pod,
        std::io::stdin().is_terminal(),
        args,
    );
    let status = tokio::process::Command::new(&kubectl)
        .args(&argv)
        .status()
        .await
        .map_err(Error::io(format!(
            "running {}",
            PathBuf::from(&kubectl).display()
        )))?;
    match status.code() {
        Some(0) => Ok(()),
        code => Err(Error::Failed(format!(
            "psql on {pod} ended with exit code {}",
            code.map_or("none (killed)".to_owned(), |c| c.to_string())
        ))),
    }
}

/// The pod: the primary, the least behind ready replica, or the instance
/// named (by name or number), as the status knows them.
pub fn choose(database: &str, status: &DatabaseStatus, choice: &Choice) -> Result<String, Error> {
    match choice {
        Choice::Primary => status
            .current_primary
            .clone()
            .ok_or_else(|| Error::Failed(format!("{database} has no primary yet"))),
        Choice::Replica => act::ready_replicas(status)
            .first()
            .map(|i| i.name.clone())
            .ok_or_else(|| Error::Failed(format!("{database} has no ready replica"))),
        Choice::Instance(given) => {
            let name = act::instance_name(database, given);
            if status.instances.iter().any(|i| i.name == name) {
                Ok(name)
            } else {
                Err(Error::NotFound(format!(
                    "{name} is not an instance of Database {database}"
                )))
            }
        }
    }
}

/// The arguments of `kubectl exec` that run psql in `pod`.
pub fn exec_args(
    global: &Global,
    namespace: &str,
    pod: &str,
    tty: bool,
    psql: &[String],
) -> Vec<String> {
    let mut argv = Vec::new();
    if let Some(kubeconfig) = &global.kubeconfig {
        argv.push(format!("--kubeconfig={}", kubeconfig.display()));
    }
    if let Some(context) = &global.context {
        argv.push(format!("--context={context}"));
    }
    argv.extend([
        "exec".to_owned(),
        "-n".to_owned(),
        namespace.to_owned(),
        if tty { "-it" } else { "-i" }.to_owned(),
        pod.to_owned(),
        "-c".to_owned(),
        POSTGRES_CONTAINER.to_owned(),
        "--".to_owned(),
        "psql".to_owned(),
        "-h".to_owned(),
        SOCKET_DIR.to_owned(),
        "-p".to_owned(),
        PORT.to_owned(),
        "-U".to_owned(),
        SUPERUSER.to_owned(),
    ]);
    argv.extend(psql.iter().cloned());
    argv
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::{InstanceRole, InstanceStatus};

    fn status(replica_ready: bool) -> DatabaseStatus {
        DatabaseStatus {
            current_primary: Some("pg-1".into()),
            instances: vec![
                InstanceStatus {
                    name: "pg-1".into(),
                    role: Some(InstanceRole::Primary),
                    ready: true,
                    ..InstanceStatus::default()
                },
                InstanceStatus {
                    name: "pg-2".into(),
                    role: Some(InstanceRole::Replica),
                    ready: replica_ready,
                    ..InstanceStatus::default()
                },
            ],
            ..DatabaseStatus::default()
        }
    }

    #[test]
    fn the_instance_is_the_primary_a_ready_replica_or_the_one_named() {
        assert_eq!(
            choose("pg", &status(true), &Choice::Primary).expect("p"),
            "pg-1"
        );
        assert_eq!(
            choose("pg", &status(true), &Choice::Replica).expect("r"),
            "pg-2"
        );
        let none = choose("pg", &status(false), &Choice::Replica).expect_err("none");
        assert_eq!(none.to_string(), "pg has no ready replica");
        assert_eq!(
            choose("pg", &status(true), &Choice::Instance("2".into())).expect("n"),
            "pg-2"
        );
        let missing = choose("pg", &status(true), &Choice::Instance("7".into())).expect_err("7");
        assert_eq!(missing.exit_code(), 3);
        assert_eq!(
            missing.to_string(),
            "pg-7 is not an instance of Database pg"
        );
    }

    #[test]
    fn exec_passes_the_connection_through_and_asks_a_tty_only_on_one() {
        let global = Global {
            namespace: Some("shop".into()),
            context: Some("prod".into()),
            kubeconfig: Some("/k/config".into()),
        };
        let args = exec_args(
            &global,
            "shop",
            "pg-2",
            false,
            &["-c".into(), "select 1".into()],
        );
        assert_eq!(
            args.join(" "),
            "--kubeconfig=/k/config --context=prod exec -n shop -i pg-2 -c postgres -- \
             psql -h /var/run/postgresql -p 5432 -U postgres -c select 1"
        );
        let tty = exec_args(&Global::default(), "default", "pg-1", true, &[]);
        assert!(tty.contains(&"-it".to_owned()), "{tty:?}");
        assert!(!tty.iter().any(|a| a.starts_with("--context")), "{tty:?}");
    }
}
