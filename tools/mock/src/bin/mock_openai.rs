//! `livegate-mock-openai` (`livegate mock-openai`): an offline OpenAI Realtime server backed by
//! the `sim` model.

use std::net::{IpAddr, SocketAddr};

use clap::Parser;
use livegate::cli::{init_logging, shutdown_signal, LogFormat};
use livegate::model::sim::{Pacing, SimConfig};
use livegate_mock::openai::{self, MockOpenAiConfig};

// As in the gateway: many small, short-lived audio and JSON allocations from several threads.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Run an offline OpenAI Realtime server backed by the `sim` model.
#[derive(Debug, Parser)]
#[command(name = "livegate-mock-openai", version = livegate::BUILD)]
struct MockOpenAiArgs {
    /// Port to listen on (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 9400)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// API key connections must present (`Authorization: Bearer`, `api-key`); any if unset.
    #[arg(long, env = "MOCK_OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Send a `server_error` and close with 1011 after this many server events (fault injection).
    #[arg(long)]
    fail_after: Option<u64>,
    /// Drop the connection, without a close frame, in the middle of the first answer.
    #[arg(long)]
    close_mid_answer: bool,
    /// Pace answers like a speaking voice (`realtime`) or send them at once (`burst`).
    #[arg(long, value_enum, default_value_t = Pacing::RealTime)]
    sim_pacing: Pacing,
    /// Delay before each answer starts, in milliseconds.
    #[arg(long)]
    sim_reply_delay_ms: Option<u64>,
    /// Length of each answer audio chunk, in milliseconds (default 40).
    #[arg(long)]
    sim_chunk_ms: Option<u32>,
    /// Log output.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    mock_openai(MockOpenAiArgs::parse()).await
}

async fn mock_openai(args: MockOpenAiArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let config = MockOpenAiConfig {
        sim: SimConfig::from_options(args.sim_pacing, args.sim_reply_delay_ms, args.sim_chunk_ms),
        api_key: args.api_key.clone(),
        fail_after: args.fail_after,
        close_mid_answer: args.close_mid_answer,
    };
    let bind = SocketAddr::new(args.bind, args.port);
    let server = openai::start(bind, config)
        .await
        .map_err(|error| anyhow::anyhow!("mock-openai could not start on {bind}: {error}"))?;
    println!("mock-openai listening on ws://{}", server.addr);
    shutdown_signal().await;
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}
