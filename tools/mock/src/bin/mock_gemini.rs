//! `livegate-mock-gemini` (`livegate mock-gemini`): an offline Gemini Live server backed by the
//! `sim` model.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::Parser;
use livegate::cli::{init_logging, shutdown_signal, LogFormat};
use livegate::model::sim::{Pacing, SimConfig};
use livegate_mock::gemini::{self, MockGeminiConfig, TlsFiles};

// As in the gateway: many small, short-lived audio and JSON allocations from several threads.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Run an offline Gemini Live (BidiGenerateContent) server backed by the `sim` model.
#[derive(Debug, Parser)]
#[command(name = "livegate-mock-gemini", version = livegate::BUILD)]
struct MockGeminiArgs {
    /// Port to listen on (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 9300)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// API key connections must present (`?key=`, `x-goog-api-key`, `Authorization`); any if unset.
    #[arg(long, env = "MOCK_GEMINI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Close connections with 1011 after this many server messages (fault injection).
    #[arg(long)]
    fail_after: Option<u64>,
    /// Send `goAway` after this many server messages, then close with 1000 a second later.
    #[arg(long)]
    go_away_after: Option<u64>,
    /// Go silent after this many server messages: hold the connection, answer nothing, not even
    /// pings (a blackholed upstream).
    #[arg(long)]
    silent_after: Option<u64>,
    /// Send server JSON in text frames (Gemini sends binary ones).
    #[arg(long)]
    text_frames: bool,
    /// Serve wss:// with this PEM certificate chain (python-genai always dials wss:// with a key).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Pace answers like a speaking voice (`realtime`) or send them at once (`burst`).
    #[arg(long, value_enum, default_value_t = Pacing::RealTime)]
    sim_pacing: Pacing,
    /// Delay before each answer starts, in milliseconds (default 150).
    #[arg(long)]
    sim_reply_delay_ms: Option<u64>,
    /// Length of each answer audio chunk, in milliseconds (default 40).
    #[arg(long)]
    sim_chunk_ms: Option<u32>,
    /// Log output.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

impl MockGeminiArgs {
    fn config(&self) -> MockGeminiConfig {
        let sim =
            SimConfig::from_options(self.sim_pacing, self.sim_reply_delay_ms, self.sim_chunk_ms);
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        };
        MockGeminiConfig {
            sim,
            api_key: self.api_key.clone(),
            fail_after: self.fail_after,
            go_away_after: self.go_away_after,
            silent_after: self.silent_after,
            text_frames: self.text_frames,
            tls,
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    mock_gemini(MockGeminiArgs::parse()).await
}

async fn mock_gemini(args: MockGeminiArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let config = args.config();
    let scheme = if config.tls.is_some() { "wss" } else { "ws" };
    let bind = SocketAddr::new(args.bind, args.port);
    let server = gemini::start(bind, config)
        .await
        .map_err(|error| anyhow::anyhow!("mock-gemini could not start on {bind}: {error}"))?;
    println!("mock-gemini listening on {scheme}://{}", server.addr);
    shutdown_signal().await;
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}
