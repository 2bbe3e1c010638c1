//! The `livegate` command: `serve` (the default) runs the gateway; `mock-gemini` and `mock-openai`
//! run offline Gemini Live and OpenAI Realtime servers backed by the `sim` model.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use livegate::gateway::config::{sim_config, LogFormat, SimPacingArg};
use livegate::gateway::{self, ServeArgs};
use livegate::mockgemini::{self, MockGeminiConfig, TlsFiles};
use livegate::mockopenai::{self, MockOpenAiConfig};
use tracing_subscriber::EnvFilter;

/// A bidirectional live-streaming gateway: browser voice and chat to live models, ADK-compatible.
#[derive(Debug, Parser)]
#[command(name = "livegate", version = livegate::BUILD, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway (the default when no command is given).
    Serve(Box<ServeArgs>),
    /// Run an offline Gemini Live (BidiGenerateContent) server backed by the `sim` model.
    MockGemini(MockGeminiArgs),
    /// Run an offline OpenAI Realtime server backed by the `sim` model.
    MockOpenai(MockOpenAiArgs),
    /// Load-test a gateway: many sessions streaming real speech, with latency, errors, CPU and memory.
    ///
    /// The gateway stores the load's sessions and their recordings like any others: a gateway
    /// started with its defaults writes them into its ./data. Start it with `--session-store
    /// memory: --artifact-store memory:` to keep nothing; the report names the sessions' user.
    Loadtest(livegate::loadtest::LoadtestArgs),
    /// Mint a client token with `LIVEGATE_TOKEN_SECRET` and print it with the URL that opens the
    /// built-in page signed in.
    Token(TokenArgs),
}

/// Options of `livegate token`.
#[derive(Debug, Args)]
struct TokenArgs {
    /// The user the token speaks for.
    #[arg(long)]
    user: String,
    /// Bind the token to this one session.
    #[arg(long)]
    session: Option<String>,
    /// How long the token lives (`3600`, `90s`, `30m`, `1h`; at most 24h).
    #[arg(long, default_value = "1h", value_parser = gateway::auth::token::parse_ttl)]
    ttl: Duration,
    /// The gateway's address, for the printed URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
}

/// Options of `livegate mock-gemini`.
#[derive(Debug, Args)]
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
    #[arg(long, value_enum, default_value_t = SimPacingArg::Realtime)]
    sim_pacing: SimPacingArg,
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
        let sim = sim_config(self.sim_pacing, self.sim_reply_delay_ms, self.sim_chunk_ms);
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

/// Options of `livegate mock-openai`.
#[derive(Debug, Args)]
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
    #[arg(long, value_enum, default_value_t = SimPacingArg::Realtime)]
    sim_pacing: SimPacingArg,
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

// Many small, short-lived allocations on the audio paths (frames, events, JSON) from several
// threads: mimalloc serves them from per-thread pages, where glibc's malloc contends on its arenas
// (docs/PERFORMANCE.md, "Decisions").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches)?;
    let (mut args, arg_matches) = match cli.command {
        Some(Command::MockGemini(args)) => return mock_gemini(args).await,
        Some(Command::MockOpenai(args)) => return mock_openai(args).await,
        Some(Command::Loadtest(args)) => return loadtest(args).await,
        Some(Command::Token(args)) => return token(&args),
        Some(Command::Serve(args)) => (
            *args,
            matches.subcommand_matches("serve").unwrap_or(&matches),
        ),
        None => (cli.serve, &matches),
    };
    args.apply_config_file(arg_matches)?;
    args.secrets = gateway::auth::AuthSecrets::from_env();
    init_logging(args.log_format);
    let server = gateway::start(&args).await?;
    println!("livegate listening on {}://{}", server.scheme, server.addr);
    shutdown_signal().await;
    tracing::info!("shutting down");
    server
        .shutdown(Duration::from_secs(args.drain_timeout))
        .await;
    Ok(())
}

/// Prints a client token and the URL opening the built-in page with it (in the fragment, which
/// browsers never send to the server).
fn token(args: &TokenArgs) -> anyhow::Result<()> {
    use gateway::auth::{AuthSecrets, Minter, TOKEN_SECRET_ENV};
    let secret = AuthSecrets::from_env()
        .token_secret
        .ok_or_else(|| anyhow::anyhow!("set {TOKEN_SECRET_ENV} to the gateway's token secret"))?;
    let minter = Minter::new(&secret).map_err(anyhow::Error::msg)?;
    let minted = minter.mint(&args.user, args.session.as_deref(), Some(args.ttl))?;
    let base = args.url.trim_end_matches('/');
    println!("{}", minted.token);
    println!("{base}/?user={}#token={}", args.user, minted.token);
    Ok(())
}

async fn mock_gemini(args: MockGeminiArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let config = args.config();
    let scheme = if config.tls.is_some() { "wss" } else { "ws" };
    let bind = SocketAddr::new(args.bind, args.port);
    let server = mockgemini::start(bind, config)
        .await
        .map_err(|error| anyhow::anyhow!("mock-gemini could not start on {bind}: {error}"))?;
    println!("mock-gemini listening on {scheme}://{}", server.addr);
    shutdown_signal().await;
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

async fn mock_openai(args: MockOpenAiArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let config = MockOpenAiConfig {
        sim: sim_config(args.sim_pacing, args.sim_reply_delay_ms, args.sim_chunk_ms),
        api_key: args.api_key.clone(),
        fail_after: args.fail_after,
        close_mid_answer: args.close_mid_answer,
    };
    let bind = SocketAddr::new(args.bind, args.port);
    let server = mockopenai::start(bind, config)
        .await
        .map_err(|error| anyhow::anyhow!("mock-openai could not start on {bind}: {error}"))?;
    println!("mock-openai listening on ws://{}", server.addr);
    shutdown_signal().await;
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

/// Runs `livegate loadtest`: prints the table, fails when any session saw an error. A first
/// Ctrl-C ends the run early with a report of what ran; a second one quits at once.
async fn loadtest(args: livegate::loadtest::LoadtestArgs) -> anyhow::Result<()> {
    init_logging(LogFormat::Text);
    let stop = livegate::signal::Signal::new();
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
    let report = livegate::loadtest::run_until(&args, stop).await?;
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

/// Logs go to stderr (stdout carries the listening address and reports), coloured only when
/// stderr is a terminal, so a log file or a pipe gets no escape codes.
fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
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
