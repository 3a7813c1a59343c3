//! Running the PostgreSQL programs an upgrade needs.

use std::process::Stdio;

use tokio::process::Command;

use super::Error;

/// What a finished program printed.
pub struct Output {
    pub success: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `command` (built by [`super::child::async_command`], so without the
/// pod's secrets in its environment) to completion with its output captured.
pub async fn output(mut command: Command, program: &str) -> Result<Output, Error> {
    tracing::info!(%program, "running");
    let output = command
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|source| Error::Spawn {
            program: program.to_owned(),
            source,
        })?;
    Ok(Output {
        success: output.status.success(),
        status: output.status.to_string(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// [`output`], an error naming the program with the tail of its output
/// unless it succeeded.
pub async fn run(command: Command, program: &str) -> Result<Output, Error> {
    let output = output(command, program).await?;
    if output.success {
        return Ok(output);
    }
    let both = format!("{}\n{}", output.stdout.trim(), output.stderr.trim());
    Err(Error::Command {
        program: program.to_owned(),
        status: output.status,
        output: super::report::tail(both.trim(), 1500).to_owned(),
    })
}
