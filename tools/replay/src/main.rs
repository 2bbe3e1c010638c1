//! `livegate-replay` (`livegate replay`): `export` fetches recorded calls from a gateway as
//! bundles; `run` replays bundles against a gateway and reports what changed, failing when a
//! rule fails.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use livegate_replay::{ExportArgs, RunArgs};

/// Replay recorded calls against a gateway and compare, turn by turn (docs/REPLAY.md).
#[derive(Debug, Parser)]
#[command(name = "livegate-replay", version = livegate::BUILD)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Fetch sessions from a gateway as replay bundles (one folder each).
    Export(ExportArgs),
    /// Replay bundles against a gateway; exit status 1 when a rule fails.
    Run(RunArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Export(args) => match livegate_replay::export(&args).await {
            Ok(written) => {
                for dir in written {
                    println!("{}", dir.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Command::Run(args) => match livegate_replay::run(&args).await {
            Ok(report) => {
                print!("{}", report.table());
                if report.passed() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => fail(&e),
        },
    }
}

/// A run that could not happen: one line, exit status 2 (a failed rule is 1).
fn fail(error: &livegate_replay::ReplayError) -> ExitCode {
    eprintln!("livegate replay: {error}");
    ExitCode::from(2)
}
