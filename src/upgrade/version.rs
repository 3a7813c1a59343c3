//! Which PostgreSQL major a data directory holds and which one a set of
//! programs runs.

use std::path::Path;

use super::Error;

/// The major of `postgres --version` output, e.g. `postgres (PostgreSQL)
/// 17.2 (Debian 17.2-1.pgdg120+1)` → 17. Only majors from 10 on (one
/// number) are understood; older ones cannot be upgraded by Tusk anyway.
pub fn parse_server_version(output: &str) -> Option<u32> {
    let rest = output.trim().split_once("(PostgreSQL)")?.1.trim_start();
    let number: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    number.parse().ok().filter(|major| *major >= 10)
}

/// The major of the data directory `pgdata` (its `PG_VERSION`); `None`
/// when it has none.
pub fn data_major(pgdata: &Path) -> Result<Option<u32>, Error> {
    let path = pgdata.join("PG_VERSION");
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| Error::Parse {
            what: "PG_VERSION",
            detail: format!("{}: {:?}", path.display(), text.trim()),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(Error::io("read", &path)(error)),
    }
}

/// The major the `postgres` in `bindir` runs. Blocking (a short child);
/// callers run it before anything else waits on children.
pub fn bindir_major(bindir: &Path) -> Result<u32, Error> {
    let program = bindir.join("postgres");
    let output = std::process::Command::new(&program)
        .arg("--version")
        .output()
        .map_err(|source| Error::Spawn {
            program: program.display().to_string(),
            source,
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(Error::Command {
            program: format!("{} --version", program.display()),
            status: output.status.to_string(),
            output: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    parse_server_version(&text).ok_or_else(|| Error::Parse {
        what: "postgres --version",
        detail: text.trim().to_owned(),
    })
}

/// What `data_major` found, for a message.
pub fn describe(major: Option<u32>) -> String {
    match major {
        Some(major) => format!("PostgreSQL {major} data"),
        None => "no PostgreSQL data".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majors_from_version_output() {
        assert_eq!(
            parse_server_version("postgres (PostgreSQL) 17.2 (Debian 17.2-1.pgdg120+1)\n"),
            Some(17)
        );
        assert_eq!(
            parse_server_version("postgres (PostgreSQL) 15.18"),
            Some(15)
        );
        assert_eq!(
            parse_server_version("postgres (PostgreSQL) 18beta1"),
            Some(18)
        );
        assert_eq!(parse_server_version("postgres (PostgreSQL) 9.6.24"), None);
        assert_eq!(parse_server_version("bash: postgres: not found"), None);
    }
}
