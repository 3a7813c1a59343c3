//! The command of a program the pod runs as a child (PostgreSQL's programs,
//! `tusk` itself), without the pod's secrets in its environment: the one
//! place the instance manager and the upgrade steps build one. A password a
//! child needs is set on the command afterwards (`PGPASSWORD`), by name.

use std::ffi::OsStr;

use crate::contract::env::SECRETS;

/// `program`'s command, the pod's secret variables removed from what it
/// inherits.
pub fn command(program: impl AsRef<OsStr>) -> std::process::Command {
    let mut command = std::process::Command::new(program);
    for name in SECRETS {
        command.env_remove(name);
    }
    command
}

/// [`command`], for a child that `tokio` waits for.
pub fn async_command(program: impl AsRef<OsStr>) -> tokio::process::Command {
    tokio::process::Command::from(command(program))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_inherits_none_of_the_secrets() {
        let command = command("true");
        let removed: Vec<&OsStr> = command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name)
            .collect();
        for name in SECRETS {
            assert!(removed.contains(&OsStr::new(name)), "{name} is inherited");
        }
    }
}
