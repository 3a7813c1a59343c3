use std::process::ExitCode;

use clap::Parser;
use tusk::cli::{Cli, Command};
use tusk::telemetry::{self, Telemetry};

#[tokio::main]
async fn main() -> ExitCode {
    // The same binary is `kubectl tusk` when called by that name.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if tusk::plugin::invoked_as_plugin(args.first()) {
        return tusk::plugin::main(args).await;
    }
    let cli = Cli::parse_from(args);
    let telemetry = start_telemetry(&cli.command);
    let result = tusk::cli::run(cli).await;
    // After the work and before the exit, so that a short-lived process (an
    // instance manager told to stop) still sends its last spans.
    if let Some(telemetry) = telemetry {
        telemetry.shutdown().await;
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tusk: {err}");
            let mut source = std::error::Error::source(&err);
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            ExitCode::FAILURE
        }
    }
}

/// Logging and span export for the long-running roles. The one-shot commands
/// (`crd` prints YAML on stdout) keep stdout to themselves.
fn start_telemetry(command: &Command) -> Option<Telemetry> {
    let service = match command {
        Command::Operator(_) => telemetry::OPERATOR_SERVICE,
        Command::Instance(_) => telemetry::INSTANCE_SERVICE,
        Command::Probe(_) => telemetry::PROBE_SERVICE,
        _ => return None,
    };
    match telemetry::init(service) {
        Ok(telemetry) => Some(telemetry),
        Err(err) => {
            // Logging is not worth refusing to run a database for.
            eprintln!("tusk: {err}");
            None
        }
    }
}
