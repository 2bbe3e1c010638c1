//! The `livegate` command: `serve` (the default) runs the gateway and `token` mints a client
//! token; `loadtest`, `replay`, `mock-gemini` and `mock-openai` run the tools built beside it
//! (`livegate-loadtest`, `livegate-replay`, `livegate-mock-gemini`, `livegate-mock-openai`), which
//! are crates of their own so that this binary carries neither them nor their test audio.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use livegate::cli::{init_logging, init_logging_with, shutdown_signal};
use livegate::gateway::{self, ServeArgs};

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
    /// Run an offline Gemini Live (BidiGenerateContent) server backed by the `sim` model
    /// (`livegate-mock-gemini`; `livegate mock-gemini --help` for its options).
    #[command(disable_help_flag = true)]
    MockGemini(ToolArgs),
    /// Run an offline OpenAI Realtime server backed by the `sim` model
    /// (`livegate-mock-openai`; `livegate mock-openai --help` for its options).
    #[command(disable_help_flag = true)]
    MockOpenai(ToolArgs),
    /// Load-test a gateway: many sessions streaming real speech, with latency, errors, CPU and
    /// memory (`livegate-loadtest`; `livegate loadtest --help` for its options).
    #[command(disable_help_flag = true)]
    Loadtest(ToolArgs),
    /// Replay recorded calls against a gateway and compare what the agent does, turn by turn;
    /// `replay export` fetches them as bundles (`livegate-replay`; `livegate replay --help`).
    #[command(disable_help_flag = true)]
    Replay(ToolArgs),
    /// Mint a client token with `LIVEGATE_TOKEN_SECRET` and print it with the URL that opens the
    /// built-in page signed in.
    Token(TokenArgs),
}

/// A tool's arguments, handed to its binary as they are (`--help` included).
#[derive(Debug, Args)]
struct ToolArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
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

// Many small, short-lived allocations on the audio paths (frames, events, JSON) from several
// threads: mimalloc serves them from per-thread pages, where glibc's malloc contends on its arenas
// (docs/PERFORMANCE.md, "Decisions").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs the command; an error is one line on stderr, naming what to change, and exit status 1.
/// No backtrace for these: they are the user's to fix, and `RUST_BACKTRACE` is often set in a
/// shell for other programs.
#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("livegate: {}", one_line(&error));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes in one line, each cause once: most of our errors already say their
/// cause in their own message.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    if let Some(hint) = error
        .downcast_ref::<gateway::StartError>()
        .and_then(gateway::StartError::hint)
    {
        line.push_str(" (");
        line.push_str(&hint);
        line.push(')');
    }
    line
}

async fn run() -> anyhow::Result<()> {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches)?;
    let (mut args, arg_matches) = match cli.command {
        Some(Command::MockGemini(tool)) => return run_tool("mock-gemini", "livegate-mock", tool),
        Some(Command::MockOpenai(tool)) => return run_tool("mock-openai", "livegate-mock", tool),
        Some(Command::Loadtest(tool)) => return run_tool("loadtest", "livegate-loadtest", tool),
        Some(Command::Replay(tool)) => return run_tool("replay", "livegate-replay", tool),
        Some(Command::Token(args)) => return token(&args),
        Some(Command::Serve(args)) => (
            *args,
            matches.subcommand_matches("serve").unwrap_or(&matches),
        ),
        None => (cli.serve, &matches),
    };
    args.prepare(arg_matches)?;
    let tracing = if args.otel {
        let (layer, tracing) = gateway::telemetry::otel::start()?;
        init_logging_with(args.log_format, Some(layer));
        Some(tracing)
    } else {
        init_logging(args.log_format);
        None
    };
    let server = gateway::start(&args).await?;
    println!("livegate listening on {}://{}", server.scheme, server.addr);
    shutdown_signal().await;
    tracing::info!("shutting down");
    server
        .shutdown(Duration::from_secs(args.drain_timeout))
        .await;
    if let Some(tracing) = tracing {
        // The last spans go out (bounded by the export timeout) off the runtime's workers.
        let _ = tokio::task::spawn_blocking(move || tracing.shutdown()).await;
    }
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

/// Runs `livegate-{command}` with the tool's arguments in this process's place: the binary next
/// to this one (a build's `target/debug` or `target/release`, an installation's `bin`), else the
/// first on `PATH`, as `cargo foo` runs `cargo-foo`. `package` is the crate that builds it.
fn run_tool(command: &str, package: &str, tool: ToolArgs) -> anyhow::Result<()> {
    let name = format!("livegate-{command}{}", std::env::consts::EXE_SUFFIX);
    let here = std::env::current_exe().ok();
    let beside = here
        .as_deref()
        .and_then(Path::parent)
        .map(|dir| dir.join(&name));
    let Some(program) = beside
        .filter(|path| path.is_file())
        .or_else(|| on_path(&name))
    else {
        let here = here.map_or_else(|| "livegate".into(), |path| path.display().to_string());
        anyhow::bail!(
            "`livegate {command}` runs `{name}`, which is neither next to {here} nor on PATH: \
             build it with `cargo build -p {package}` (`--release` for target/release), or build \
             every binary with `cargo build` at the repository's root"
        );
    };
    let mut child = std::process::Command::new(&program);
    child.args(tool.args);
    #[cfg(unix)]
    {
        // Replaced, not spawned: signals (Ctrl-C, a test's kill) and the exit status are the
        // tool's own, and its pid is the one the caller started.
        use std::os::unix::process::CommandExt;
        let error = child.exec();
        anyhow::bail!("could not run {}: {error}", program.display())
    }
    #[cfg(not(unix))]
    {
        let status = child
            .status()
            .map_err(|error| anyhow::anyhow!("could not run {}: {error}", program.display()))?;
        std::process::exit(status.code().unwrap_or(1))
    }
}

/// The first file called `name` in a folder of `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}
