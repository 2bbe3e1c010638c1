//! What the command-line programs share (`livegate` and the mock servers): the `--log-format`
//! value, logging, and waiting for Ctrl-C or SIGTERM. The `--sim-pacing` value is the sim's own
//! `Pacing`.

use clap::ValueEnum;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// A clap options struct with every option at its declared default, as with no flags and no
/// environment: the defaults are written once, in the options' declarations.
pub fn defaults_of<T: clap::Args + clap::FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults").no_binary_name(true))
        .mut_args(|arg| arg.env(None));
    // No arguments to refuse, and each default goes through its option's parser: a default that
    // did not parse is a bug in a declaration, which the config tests catch.
    #[allow(clippy::expect_used)]
    command
        .try_get_matches_from(std::iter::empty::<&str>())
        .and_then(|matches| T::from_arg_matches(&matches))
        .expect("every declared default parses")
}

/// Logs go to stderr (stdout carries the listening address and reports), coloured only when
/// stderr is a terminal, so a log file or a pipe gets no escape codes.
pub fn init_logging(format: LogFormat) {
    init_logging_with(format, None);
}

/// Like [`init_logging`], with a layer for the trace spans beside the log lines (the gateway's
/// OTLP export). Without one, none is installed: the trace-only spans
/// ([`crate::trace_context::SPAN_TARGET`]) are off for the log filter whatever `RUST_LOG` says,
/// so they are disabled where they are made.
pub fn init_logging_with(
    format: LogFormat,
    traces: Option<Box<dyn Layer<Registry> + Send + Sync>>,
) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info"))
        .add_directive(trace_spans_off());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    match traces {
        // One global filter: a span or event it turns off is disabled where it is made, and
        // entering an enabled span costs no per-layer filter lookup (a per-layer filter looks
        // the span up in the registry on every enter and exit, that is on every poll of an
        // instrumented connection).
        None => tracing_subscriber::registry()
            .with(filter)
            .with(log_layer(format, ansi))
            .init(),
        Some(traces) => tracing_subscriber::registry()
            .with(traces)
            .with(log_layer(format, ansi).with_filter(filter))
            .init(),
    }
}

/// The log filter's directive that keeps the trace-only spans out of the log lines.
fn trace_spans_off() -> tracing_subscriber::filter::Directive {
    // A constant directive: parsing it cannot fail, and a test covers it.
    #[allow(clippy::expect_used)]
    format!("{}=off", crate::trace_context::SPAN_TARGET)
        .parse()
        .expect("a valid directive")
}

/// The log lines' layer: text or JSON, on stderr.
fn log_layer<S>(format: LogFormat, ansi: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => layer.boxed(),
        LogFormat::Json => layer.json().boxed(),
    }
}

/// Waits for Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
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
