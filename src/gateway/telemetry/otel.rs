//! Traces over OTLP/HTTP (protobuf): the tracer provider, the bounded export queue, and the
//! `tracing` layer that turns the gateway's trace spans into OpenTelemetry spans.
//!
//! Off unless `--otel`: then no layer is installed at all, and the trace spans (target
//! [`TRACE_TARGET`]) are disabled at their call sites. On, everything is configured the standard
//! way, by the `OTEL_*` variables: the endpoint and headers (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `…_HEADERS`, `…_TIMEOUT`), the sampler
//! (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`), the resource (`OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`) and the batch queue (`OTEL_BSP_MAX_QUEUE_SIZE`,
//! `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_EXPORT_TIMEOUT`).
//!
//! The SDK's own batch processor drops spans when its queue is full without saying how many, so
//! the queue here is ours: a span that ends takes a `try_send` into a bounded channel (never a
//! wait, whatever the collector does), a full queue drops it and counts it in `/metrics`, and one
//! thread of its own batches and exports them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::resource::{EnvResourceDetector, TelemetryResourceDetector};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{mpsc, oneshot};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::{Layer, Registry};

/// The `tracing` target of every span exported as a trace span (the connection's, which is also
/// the log span, and the `run` request's).
pub const TRACE_TARGET: &str = crate::trace_context::TRACE_TARGET;

/// What the export queue counted, for `/metrics` (one queue per process).
#[derive(Debug, Clone, Default)]
pub struct ExportCounters {
    /// Spans handed to the collector.
    pub exported: Counter,
    /// Spans dropped: the queue was full, or their export failed.
    pub dropped: Counter,
    /// Exports that failed (collector down, refused, timed out).
    pub failed_exports: Counter,
}

/// The process's export counters (zero while tracing is off).
pub static COUNTERS: LazyLock<ExportCounters> = LazyLock::new(ExportCounters::default);

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    /// The exporter's configuration (endpoint, headers, …) is invalid.
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    /// The export thread could not be started.
    #[error("OTLP export thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// The running tracer: flushes and stops the export on [`Tracing::shutdown`].
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Exports what is queued (bounded by the export timeout) and stops the export thread.
    pub fn shutdown(self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "traces: the last export did not complete");
        }
    }
}

/// The batch queue's settings, from the standard `OTEL_BSP_*` variables.
#[derive(Debug, Clone, Copy)]
struct QueueSettings {
    max_queue: usize,
    max_batch: usize,
    delay: Duration,
    timeout: Duration,
}

impl QueueSettings {
    fn from_env() -> Self {
        let number = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|n| *n > 0)
                .unwrap_or(default)
        };
        let millis =
            |name: &str, default: u64| Duration::from_millis(number(name, default as usize) as u64);
        let max_queue = number("OTEL_BSP_MAX_QUEUE_SIZE", 2048);
        QueueSettings {
            max_queue,
            max_batch: number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512).min(max_queue),
            delay: millis("OTEL_BSP_SCHEDULE_DELAY", 5000),
            timeout: millis("OTEL_BSP_EXPORT_TIMEOUT", 30_000),
        }
    }
}

/// Starts the tracer and returns the layer that feeds it, for the process's subscriber.
pub fn start() -> Result<(Box<dyn Layer<Registry> + Send + Sync>, Tracing), OtelError> {
    let resource = resource();
    let client = ReqwestClient(
        reqwest::Client::builder()
            .build()
            .map_err(|e| OtelError::Exporter(e.to_string()))?,
    );
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_http_client(client)
        .build()
        .map_err(|e| OtelError::Exporter(e.to_string()))?;
    exporter.set_resource(&resource);
    let processor = QueueProcessor::start(exporter, QueueSettings::from_env())?;
    // The sampler comes from `OTEL_TRACES_SAMPLER` (the SDK's default config reads it).
    let provider = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_span_processor(processor)
        .build();
    let tracer = provider.tracer("livegate");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_target(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(filter_fn(|meta| meta.target().starts_with(TRACE_TARGET)));
    Ok((Box::new(layer), Tracing { provider }))
}

/// `service.name` is `livegate` unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` says
/// otherwise; the SDK's attributes and `service.version` beside it.
fn resource() -> Resource {
    let mut builder = Resource::builder_empty()
        .with_service_name("livegate")
        .with_attribute(KeyValue::new("service.version", crate::BUILD))
        .with_detectors(&[
            Box::new(TelemetryResourceDetector),
            Box::new(EnvResourceDetector::new()),
        ]);
    if let Some(name) = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|n| !n.trim().is_empty())
    {
        builder = builder.with_service_name(name);
    }
    builder.build()
}

/// The exporter's HTTP client: the gateway's reqwest (and its rustls), on the export thread's
/// runtime.
#[derive(Debug)]
struct ReqwestClient(reqwest::Client);

#[async_trait::async_trait]
impl HttpClient for ReqwestClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let mut outgoing = self
            .0
            .request(parts.method, parts.uri.to_string())
            .body(body);
        for (name, value) in &parts.headers {
            outgoing = outgoing.header(name, value);
        }
        let response = outgoing.send().await?;
        let status = response.status();
        // A collector's answer is a small protobuf; more is not read.
        let body = response.bytes().await?;
        let mut answer = Response::new(body.slice(..body.len().min(64 * 1024)));
        *answer.status_mut() = status;
        Ok(answer)
    }
}

/// What the export thread is told.
enum Command {
    Span(Box<SpanData>),
    Flush(oneshot::Sender<()>),
}

/// The span processor: ended spans into a bounded queue, a thread exporting them in batches.
#[derive(Debug)]
struct QueueProcessor {
    queue: mpsc::Sender<Command>,
    /// Flushes and the shutdown wait for room rather than being dropped.
    control: mpsc::Sender<Command>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    stopped: AtomicBool,
    timeout: Duration,
}

impl QueueProcessor {
    fn start(
        exporter: opentelemetry_otlp::SpanExporter,
        settings: QueueSettings,
    ) -> Result<Self, OtelError> {
        let (queue, spans) = mpsc::channel(settings.max_queue);
        let (control, commands) = mpsc::channel(4);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(OtelError::Thread)?;
        let worker = ExportWorker {
            exporter,
            settings,
            batch: Vec::with_capacity(settings.max_batch),
        };
        let thread = std::thread::Builder::new()
            .name("otel-export".into())
            .spawn(move || runtime.block_on(worker.run(spans, commands)))
            .map_err(OtelError::Thread)?;
        Ok(QueueProcessor {
            queue,
            control,
            thread: Mutex::new(Some(thread)),
            stopped: AtomicBool::new(false),
            timeout: settings.timeout,
        })
    }

    /// Asks the thread to export what it has, and waits (bounded) until it has.
    fn flush_within(&self, timeout: Duration) -> OTelSdkResult {
        let (done, wait) = oneshot::channel();
        self.control
            .try_send(Command::Flush(done))
            .map_err(|_| OTelSdkError::InternalFailure("the export thread is busy".into()))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(wait.blocking_recv().is_ok());
        });
        match rx.recv_timeout(timeout) {
            Ok(true) => Ok(()),
            Ok(false) => Err(OTelSdkError::AlreadyShutdown),
            Err(_) => Err(OTelSdkError::Timeout(timeout)),
        }
    }
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        // Never waits: a slow or absent collector costs spans, not audio.
        if self.queue.try_send(Command::Span(Box::new(span))).is_err() {
            COUNTERS.dropped.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.flush_within(self.timeout)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        let flushed = self.flush_within(timeout.min(self.timeout));
        // The thread ends once every sender is gone; the processor's go with the provider.
        if let Ok(mut thread) = self.thread.lock() {
            thread.take();
        }
        flushed
    }
}

/// The export thread's state: the batch being gathered and the exporter.
struct ExportWorker {
    exporter: opentelemetry_otlp::SpanExporter,
    settings: QueueSettings,
    batch: Vec<SpanData>,
}

impl ExportWorker {
    /// Gathers spans until a batch is full or the schedule delay passes, then exports; a flush
    /// exports at once. Ends when both channels close.
    async fn run(
        mut self,
        mut spans: mpsc::Receiver<Command>,
        mut commands: mpsc::Receiver<Command>,
    ) {
        let mut tick = tokio::time::interval(self.settings.delay);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let command = tokio::select! {
                command = spans.recv() => command,
                command = commands.recv() => command,
                _ = tick.tick() => {
                    self.export().await;
                    continue;
                }
            };
            match command {
                Some(Command::Span(span)) => {
                    self.batch.push(*span);
                    if self.batch.len() >= self.settings.max_batch {
                        self.export().await;
                    }
                }
                Some(Command::Flush(done)) => {
                    while let Ok(Command::Span(span)) = spans.try_recv() {
                        self.batch.push(*span);
                        if self.batch.len() >= self.settings.max_batch {
                            self.export().await;
                        }
                    }
                    self.export().await;
                    let _ = done.send(());
                }
                None => break,
            }
        }
        self.export().await;
    }

    /// Exports the batch, bounded by the export timeout; a failed batch is dropped and counted.
    async fn export(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let count = batch.len() as u64;
        let exported =
            tokio::time::timeout(self.settings.timeout, self.exporter.export(batch)).await;
        match exported {
            Ok(Ok(())) => {
                COUNTERS.exported.inc_by(count);
            }
            Ok(Err(error)) => self.failed(count, &error.to_string()),
            Err(_) => self.failed(count, "timed out"),
        }
        self.batch = Vec::with_capacity(self.settings.max_batch);
    }

    fn failed(&self, count: u64, error: &str) {
        COUNTERS.failed_exports.inc();
        COUNTERS.dropped.inc_by(count);
        // Said at debug only: logged at every batch, a collector that is down would fill the
        // log (the counters say it).
        tracing::debug!(error, spans = count, "traces: export failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_settings_fall_back_to_the_standard_defaults() {
        let settings = QueueSettings::from_env();
        assert!(settings.max_batch <= settings.max_queue);
        assert!(!settings.delay.is_zero());
    }
}
