//! The `livegate` command: `serve` (the default) runs the gateway.

use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use livegate::gateway::config::LogFormat;
use livegate::gateway::{self, ServeArgs};
use tracing_subscriber::EnvFilter;

/// A bidirectional live-streaming gateway: browser voice and chat to live models, ADK-compatible.
#[derive(Debug, Parser)]
#[command(name = "livegate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway (the default when no command is given).
    Serve(ServeArgs),
}

/// How long shutdown waits for live runs to close and flush.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches)?;
    let (mut args, arg_matches) = match cli.command {
        Some(Command::Serve(args)) => (
            args,
            matches.subcommand_matches("serve").unwrap_or(&matches),
        ),
        None => (cli.serve, &matches),
    };
    args.apply_config_file(arg_matches)?;
    init_logging(args.log_format);
    let server = gateway::start(&args).await?;
    println!("livegate listening on http://{}", server.addr);
    shutdown_signal().await;
    tracing::info!("shutting down");
    server.shutdown(SHUTDOWN_GRACE).await;
    Ok(())
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "could not listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "could not listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}
