//! `livegate-loadtest` (`livegate loadtest`): drives a gateway with many sessions streaming speech
//! and prints the report's table.

use clap::Parser;
use livegate::latch::Latch;
use livegate_loadtest::LoadtestArgs;

// As in the gateway: many small, short-lived frame and JSON allocations from several threads.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Load-test a gateway: many sessions streaming real speech, with latency, errors, CPU and memory.
///
/// The gateway stores the load's sessions and their recordings like any others: a gateway
/// started with its defaults writes them into its ./data. Start it with `--session-store
/// memory: --artifact-store memory:` to keep nothing; the report names the sessions' user.
#[derive(Debug, Parser)]
#[command(name = "livegate-loadtest", version = livegate::BUILD)]
struct Cli {
    #[command(flatten)]
    args: LoadtestArgs,
}

/// Prints the table, fails when any session saw an error. A first Ctrl-C ends the run early with
/// a report of what ran; a second one quits at once.
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Cli::parse().args;
    init_logging();
    let stop = Latch::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            if tokio::signal::ctrl_c().await.is_err() {
                return;
            }
            eprintln!("loadtest: stopping; the turns under way finish (Ctrl-C again to quit now)");
            stop.fire();
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
    let report = livegate_loadtest::run_until(&args, stop).await?;
    println!("{}", report.table());
    if report.errors > 0 || report.unexpected_closes > 0 {
        anyhow::bail!(
            "{} errors, {} unexpected closes",
            report.errors,
            report.unexpected_closes
        );
    }
    Ok(())
}

/// Logs go to stderr (stdout carries the report), coloured only when stderr is a terminal.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
