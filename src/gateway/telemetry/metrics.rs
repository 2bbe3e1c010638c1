//! The gateway's Prometheus metrics, served at `/metrics`: connections and live runs, client
//! frames and bytes each way, the runs' events by kind, errors by code, artifacts saved, upstream
//! reconnects, slow clients cut off, and how long the gateway takes to forward an answer's audio;
//! beside them the process's own CPU time and memory (`process_*`, see [`crate::gateway::telemetry::process`]).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::event::{now_timestamp, Event};
use crate::live::OnReconnect;

/// Name of the answer forward latency histogram (the load generator reads it by this name).
pub const ANSWER_FORWARD_LATENCY: &str = "livegate_answer_forward_latency_seconds";
/// Name of the first-audio latency histogram (the load generator reads it by this name).
pub const FIRST_AUDIO_LATENCY: &str = "livegate_first_audio_latency_seconds";
/// Name of the first-text latency histogram (the same for answers in text).
pub const FIRST_TEXT_LATENCY: &str = "livegate_first_text_latency_seconds";
/// Name of the build info metric; its `build` label is [`crate::BUILD`].
pub const BUILD_INFO: &str = "livegate_build_info";
/// The histogram of the time from an answer's last audio or text to the event ending its turn.
pub const TURN_END_LATENCY: &str = "livegate_turn_end_seconds";

/// Upper bounds of the latency buckets, in seconds: fine around the 5 ms target, coarse beyond.
const LATENCY_BUCKETS: [f64; 20] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.003, 0.004, 0.005, 0.007_5, 0.01, 0.015, 0.02,
    0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Buckets for the end of a turn, which waits for the turn's recordings to reach the disk: from
/// nothing (the save done while the answer played: tens of µs, which a first bucket of 1 ms
/// turned into a median of 0.5 ms) to the seconds of a disk that is behind.
const TURN_END_BUCKETS: [f64; 17] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 20.0, 30.0,
];

type Labels = [(&'static str, &'static str); 2];

/// What an event counts as in `livegate_events_total{kind}`: the first of these that it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventKind {
    Error,
    Interrupted,
    TurnComplete,
    ToolCall,
    ToolResponse,
    FileData,
    Audio,
    Text,
    InputTranscription,
    OutputTranscription,
    Other,
}

impl EventKind {
    const ALL: [EventKind; 11] = [
        EventKind::Error,
        EventKind::Interrupted,
        EventKind::TurnComplete,
        EventKind::ToolCall,
        EventKind::ToolResponse,
        EventKind::FileData,
        EventKind::Audio,
        EventKind::Text,
        EventKind::InputTranscription,
        EventKind::OutputTranscription,
        EventKind::Other,
    ];

    fn label(self) -> &'static str {
        match self {
            EventKind::Error => "error",
            EventKind::Interrupted => "interrupted",
            EventKind::TurnComplete => "turn_complete",
            EventKind::ToolCall => "tool_call",
            EventKind::ToolResponse => "tool_response",
            EventKind::FileData => "file_data",
            EventKind::Audio => "audio",
            EventKind::Text => "text",
            EventKind::InputTranscription => "input_transcription",
            EventKind::OutputTranscription => "output_transcription",
            EventKind::Other => "other",
        }
    }

    fn of(event: &Event) -> EventKind {
        if event.error_code.is_some() {
            return EventKind::Error;
        }
        if event.interrupted == Some(true) {
            return EventKind::Interrupted;
        }
        if event.turn_complete == Some(true) {
            return EventKind::TurnComplete;
        }
        let parts = || event.content.iter().flat_map(|c| &c.parts);
        if parts().any(|p| p.function_call.is_some()) {
            EventKind::ToolCall
        } else if parts().any(|p| p.function_response.is_some()) {
            EventKind::ToolResponse
        } else if parts().any(|p| p.file_data.is_some()) {
            EventKind::FileData
        } else if parts().any(|p| p.inline_data.is_some()) {
            EventKind::Audio
        } else if parts().any(|p| p.text.is_some()) {
            EventKind::Text
        } else if event.input_transcription.is_some() {
            EventKind::InputTranscription
        } else if event.output_transcription.is_some() {
            EventKind::OutputTranscription
        } else {
            EventKind::Other
        }
    }
}

/// The label an event's error code is counted under: the code if it looks like one (ADK's and
/// gRPC's are `UPPER_SNAKE`), `OTHER` otherwise, so an odd upstream cannot grow the label set
/// with free text.
fn error_label(code: &str) -> &str {
    let plausible = !code.is_empty()
        && code.len() <= 40
        && code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if plausible {
        code
    } else {
        "OTHER"
    }
}

/// Every metric of one gateway, and the registry that renders them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    connections: Gauge,
    reconnects: Counter,
    meter: Meter,
    /// What the connection limits refused.
    pub limits: crate::gateway::server::limits::LimitCounters,
    auth_failures: Family<[(&'static str, &'static str); 1], Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut root = Registry::default();
        // Prometheus's standard names, without the gateway's prefix.
        root.register_collector(Box::new(
            crate::gateway::telemetry::process::ProcessCollector,
        ));
        let registry = root.sub_registry_with_prefix("livegate");
        // Which code serves these numbers: a load test's report names the gateway's build.
        registry.register(
            "build",
            "This gateway's build: version and git commit",
            prometheus_client::metrics::info::Info::new([("build", crate::BUILD)]),
        );
        let connections = Gauge::default();
        registry.register(
            "connections",
            "Client WebSocket connections open",
            connections.clone(),
        );
        let (inbound, outbound, stalled) = register_traffic(registry);
        let events = EventCounters::register(registry);
        let reconnects = Counter::default();
        registry.register(
            "upstream_reconnects",
            "Attempts of live runs to connect to the model again (goAway, dropped connection, restart)",
            reconnects.clone(),
        );
        let answer_forward = Histogram::new(LATENCY_BUCKETS);
        registry.register(
            "answer_forward_latency_seconds",
            "From the model producing the first audio (or, for an answer in text, text) of an answer to the gateway writing it to the client socket",
            answer_forward.clone(),
        );
        let first_audio = Histogram::new(LATENCY_BUCKETS);
        registry.register(
            "first_audio_latency_seconds",
            "From reading the client audio that ended an utterance off its socket to writing the first audio of its answer to the client socket (models that say which input they answer: sim)",
            first_audio.clone(),
        );
        let first_text = Histogram::new(LATENCY_BUCKETS);
        registry.register(
            "first_text_latency_seconds",
            "From reading the client audio that ended an utterance off its socket to writing the first text of its answer to the client socket, for answers in text (models that say which input they answer: sim)",
            first_text.clone(),
        );
        let turn_end = Histogram::new(TURN_END_BUCKETS);
        registry.register(
            "turn_end_seconds",
            "From writing the last audio or text of an answer to writing the event that ends its turn (turnComplete or interrupted); the turn's recordings are saved in between",
            turn_end.clone(),
        );
        let auth_failures = Family::<[(&'static str, &'static str); 1], Counter>::default();
        registry.register(
            "auth_failures",
            "Requests refused by authentication, authorization or origin checks, by reason",
            auth_failures.clone(),
        );
        let meter = Meter {
            inbound,
            outbound,
            stalled,
            answer_forward,
            first_audio,
            first_text,
            turn_end,
            events: Arc::new(events),
        };
        let limits = crate::gateway::server::limits::LimitCounters::register(registry);
        register_trace_export(registry);
        Metrics {
            registry: root,
            connections,
            reconnects,
            meter,
            limits,
            auth_failures,
        }
    }
}

/// Registers the trace export's counters (the process's one queue; zero while tracing is off).
fn register_trace_export(registry: &mut Registry) {
    let counters = &*crate::gateway::telemetry::otel::COUNTERS;
    registry.register(
        "trace_spans_exported",
        "Trace spans handed to the OTLP collector",
        counters.exported.clone(),
    );
    registry.register(
        "trace_spans_dropped",
        "Trace spans dropped: the export queue was full (a slow or absent collector) or their export failed",
        counters.dropped.clone(),
    );
    registry.register(
        "trace_export_failures",
        "OTLP exports that failed (collector down, refused, timed out)",
        counters.failed_exports.clone(),
    );
}

/// Registers the counters of client messages and bytes each way, and of slow clients cut off:
/// the inbound and outbound counters, and the slow-client one.
fn register_traffic(registry: &mut Registry) -> (Way, Way, Counter) {
    let frames = Family::<Labels, Counter>::default();
    registry.register(
        "frames",
        "WebSocket messages by direction (in: from clients) and kind",
        frames.clone(),
    );
    let bytes = Family::<[(&'static str, &'static str); 1], Counter>::default();
    registry.register(
        "bytes",
        "WebSocket message payload bytes by direction",
        bytes.clone(),
    );
    let stalled = Counter::default();
    registry.register(
        "slow_client_disconnects",
        "Clients cut off because they stopped reading",
        stalled.clone(),
    );
    // Each counter is fetched in its own call: `get_or_create` hands out a read guard, and a
    // second call in the same expression, which may need the write lock, would wait forever.
    let frame = |direction, kind| {
        frames
            .get_or_create(&[("direction", direction), ("kind", kind)])
            .clone()
    };
    let byte = |direction| bytes.get_or_create(&[("direction", direction)]).clone();
    let way = |direction| {
        let audio = frame(direction, "audio");
        let text = frame(direction, "text");
        let bytes = byte(direction);
        Way { audio, text, bytes }
    };
    (way("in"), way("out"), stalled)
}

impl EventCounters {
    /// Registers the counters of live runs and their events.
    fn register(registry: &mut Registry) -> EventCounters {
        let runs = Gauge::default();
        registry.register("live_runs", "Live runs in progress", runs.clone());
        let kinds = Family::<[(&'static str, &'static str); 1], Counter>::default();
        registry.register(
            "events",
            "Events of live runs by kind (all of them, also after their client left)",
            kinds.clone(),
        );
        let errors = Family::<[(&'static str, String); 1], Counter>::default();
        registry.register(
            "errors",
            "Error events of live runs by error code",
            errors.clone(),
        );
        let recordings_dropped = Counter::default();
        registry.register(
                "recordings_dropped",
                "Times recording audio was dropped because it could not be saved and reached the memory cap",
                recordings_dropped.clone(),
            );
        let artifacts = Family::<[(&'static str, &'static str); 1], Counter>::default();
        registry.register(
                "artifacts_saved",
                "Artifact versions saved by live runs (recording: audio recordings; agent: tools and callbacks)",
                artifacts.clone(),
            );
        // Made once, like the frame counters: counting an event is then an index and an add.
        let saved = |source| artifacts.get_or_create(&[("source", source)]).clone();
        let recordings = saved("recording");
        let agent_artifacts = saved("agent");
        let tokens = Family::<[(&'static str, &'static str); 1], Counter>::default();
        registry.register(
            "model_tokens",
            "Model tokens by direction (input: prompt, output: answer), as the models report them",
            tokens.clone(),
        );
        let audio = Family::<[(&'static str, &'static str); 1], Counter<f64, AtomicU64>>::default();
        registry.register(
            "audio_seconds",
            "Seconds of audio by direction: in, clients' binary audio frames; out, the models' audio",
            audio.clone(),
        );
        EventCounters {
            tokens: ["input", "output"].map(|d| tokens.get_or_create(&[("direction", d)]).clone()),
            audio_seconds: ["in", "out"].map(|d| audio.get_or_create(&[("direction", d)]).clone()),
            runs,
            kinds: EventKind::ALL.map(|k| kinds.get_or_create(&[("kind", k.label())]).clone()),
            errors,
            recordings,
            agent_artifacts,
            recordings_dropped,
        }
    }
}

/// Reports how many events the session store has read back: with paged reads and a bounded
/// history it grows with what clients ask for, never with the length of a session.
#[derive(Debug)]
struct StoreReads(Arc<dyn crate::session::SessionService>);

impl prometheus_client::collector::Collector for StoreReads {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        let read = prometheus_client::metrics::counter::ConstCounter::new(self.0.events_read());
        read.encode(encoder.encode_descriptor(
            "livegate_session_events_read",
            "Events read back from the session store (pages, histories)",
            None,
            read.metric_type(),
        )?)
    }
}

/// Reports each toolset's (MCP server's) calls, failures by kind, reconnects and whether it is up,
/// read from the toolsets at each scrape.
#[derive(Debug)]
struct Toolsets(Vec<Arc<dyn crate::agent::Toolset>>);

impl prometheus_client::collector::Collector for Toolsets {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let stats: Vec<_> = self.0.iter().map(|t| (t.name(), t.stats())).collect();
        let mut counter =
            |name: &str,
             help: &str,
             value: &dyn Fn(&crate::agent::ToolsetStats) -> Vec<(&'static str, u64)>| {
                let mut family = encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    prometheus_client::metrics::MetricType::Counter,
                )?;
                for (server, s) in &stats {
                    for (kind, n) in value(s) {
                        let labels: Vec<(&str, &str)> = if kind.is_empty() {
                            vec![("server", server)]
                        } else {
                            vec![("server", server), ("kind", kind)]
                        };
                        ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
                    }
                }
                Ok::<(), std::fmt::Error>(())
            };
        counter(
            "livegate_mcp_calls",
            "Tool calls made to each MCP server",
            &|s| vec![("", s.calls)],
        )?;
        counter(
            "livegate_mcp_failures",
            "MCP tool calls that failed, by kind: timeout, unavailable (down or gone mid-call), protocol (an error or garbage instead of a result), tool (the tool's own isError)",
            &|s| {
                vec![
                    ("timeout", s.timeouts),
                    ("unavailable", s.unavailable),
                    ("protocol", s.protocol_errors),
                    ("tool", s.tool_errors),
                ]
            },
        )?;
        counter(
            "livegate_mcp_reconnects",
            "Times each MCP server was connected again after it was lost",
            &|s| vec![("", s.reconnects)],
        )?;
        let mut family = encoder.encode_descriptor(
            "livegate_mcp_up",
            "1 while the MCP server is connected",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (server, s) in &stats {
            ConstGauge::new(i64::from(s.up))
                .encode(family.encode_family(&[("server", *server)])?)?;
        }
        Ok(())
    }
}

/// The model's own delay from the end of speech to its answer (the sim's), for load tests.
pub const MODEL_DELAY: &str = "livegate_model_delay_seconds";

impl Metrics {
    /// Adds `livegate_session_events_read_total`, read from the session store at each scrape.
    pub fn with_store_reads(mut self, sessions: Arc<dyn crate::session::SessionService>) -> Self {
        self.registry
            .register_collector(Box::new(StoreReads(sessions)));
        self
    }

    /// Adds the toolsets' (MCP servers') `livegate_mcp_*` metrics, when the agent tree has any.
    pub fn with_toolsets(mut self, toolsets: Vec<Arc<dyn crate::agent::Toolset>>) -> Self {
        if !toolsets.is_empty() {
            self.registry
                .register_collector(Box::new(Toolsets(toolsets)));
        }
        self
    }

    /// Adds the model's own delay from the end of the user's speech to its answer, for a model
    /// that has a known one (the sim): a load test then does not count it as the gateway's.
    pub fn with_model_delay(mut self, delay: std::time::Duration) -> Self {
        let gauge = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        gauge.set(delay.as_secs_f64());
        self.registry.sub_registry_with_prefix("livegate").register(
            "model_delay_seconds",
            "The model's own delay from the end of the user's speech to its answer (sim: end-of-speech silence plus reply delay)",
            gauge,
        );
        self
    }

    /// The metrics in the Prometheus (OpenMetrics) text format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }

    /// Counts a request refused by the auth checks; `reason` is one of a fixed set of labels.
    pub fn auth_failure(&self, reason: &'static str) {
        self.auth_failures
            .get_or_create(&[("reason", reason)])
            .inc();
    }

    /// Counts an open connection until the returned guard is dropped.
    pub fn connection(&self) -> ConnectionGuard {
        self.connections.inc();
        ConnectionGuard(self.connections.clone())
    }

    /// A run config hook that counts the run's upstream reconnects.
    pub fn on_reconnect(&self) -> OnReconnect {
        let reconnects = self.reconnects.clone();
        OnReconnect::new(move || {
            reconnects.inc();
        })
    }

    /// Handles a connection's reader and writer update (cheap clones of shared counters).
    pub fn meter(&self) -> Meter {
        self.meter.clone()
    }
}

/// Keeps a connection counted as open.
#[derive(Debug)]
pub struct ConnectionGuard(Gauge);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Counts a live run as in progress while it is alive, and the run's events.
///
/// One pointer, because the connection's writer task holds it for the whole run: a task's future
/// can sit a few bytes under an allocator size class, and a whole [`Meter`] took one over.
#[derive(Debug)]
pub struct RunMeter(Arc<EventCounters>);

impl RunMeter {
    /// Counts an event (see [`Meter::counted`]) and hands it back.
    pub fn counted(&self, event: Event) -> Event {
        self.0.counted(event)
    }
}

impl Drop for RunMeter {
    fn drop(&mut self) {
        self.0.runs.dec();
    }
}

/// The counters a run's events go to.
#[derive(Debug)]
struct EventCounters {
    /// Live runs in progress.
    runs: Gauge,
    /// By kind, in [`EventKind::ALL`]'s order.
    kinds: [Counter; EventKind::ALL.len()],
    errors: Family<[(&'static str, String); 1], Counter>,
    recordings: Counter,
    agent_artifacts: Counter,
    recordings_dropped: Counter,
    /// The models' tokens, input and output, as they report them.
    tokens: [Counter; 2],
    /// Seconds of audio from clients (binary frames) and from the models.
    audio_seconds: [Counter<f64, AtomicU64>; 2],
}

impl EventCounters {
    /// Counts an event and hands it back (by value: see [`Meter::counted`]).
    fn counted(&self, event: Event) -> Event {
        self.count(&event);
        event
    }

    /// Counts an event: its kind, its error code, the artifacts it reports saved.
    fn count(&self, event: &Event) {
        let kind = EventKind::of(event);
        // `ALL` lists the kinds in declaration order, so a kind's discriminant is its index.
        self.kinds[kind as usize].inc();
        if let Some(code) = &event.error_code {
            self.errors
                .get_or_create(&[("code", error_label(code).to_owned())])
                .inc();
            if code == crate::live::flow::RECORDING_DROPPED {
                self.recordings_dropped.inc();
            }
        }
        // Recordings are announced as `fileData` parts pointing at artifacts; tools and callbacks
        // report what they saved in the artifact delta.
        let recordings = event
            .content
            .iter()
            .flat_map(|c| &c.parts)
            .filter_map(|p| p.file_data.as_ref())
            .filter(|f| f.file_uri.starts_with("artifact://"))
            .count();
        self.recordings.inc_by(recordings as u64);
        self.agent_artifacts
            .inc_by(event.actions.artifact_delta.len() as u64);
        if let Some(usage) = &event.usage_metadata {
            self.tokens[0].inc_by(usage.prompt_token_count.unwrap_or(0));
            self.tokens[1].inc_by(usage.candidates_token_count.unwrap_or(0));
        }
        let audio = event
            .content
            .iter()
            .flat_map(|c| &c.parts)
            .filter_map(|p| p.inline_data.as_ref())
            .filter(|b| b.is_pcm());
        for blob in audio {
            let rate = f64::from(blob.sample_rate().unwrap_or(24_000).max(1));
            self.audio_seconds[1].inc_by(blob.data.len() as f64 / (2.0 * rate));
        }
    }
}

/// What one connection's reader and writer count. The default counts into metrics nobody
/// reads (for writers run outside a gateway, as in tests).
#[derive(Debug, Clone)]
pub struct Meter {
    inbound: Way,
    outbound: Way,
    stalled: Counter,
    answer_forward: Histogram,
    first_audio: Histogram,
    first_text: Histogram,
    turn_end: Histogram,
    events: Arc<EventCounters>,
}

impl Default for Meter {
    fn default() -> Self {
        Metrics::default().meter
    }
}

/// The counters of one direction: binary (audio) and text messages, and their payload bytes.
#[derive(Debug, Clone)]
struct Way {
    audio: Counter,
    text: Counter,
    bytes: Counter,
}

impl Way {
    fn count(&self, binary: bool, bytes: usize) {
        if binary { &self.audio } else { &self.text }.inc();
        self.bytes.inc_by(bytes as u64);
    }
}

impl Meter {
    /// A message from the client: binary (audio) or text, with its payload size.
    pub fn received(&self, binary: bool, bytes: usize) {
        self.inbound.count(binary, bytes);
        if binary {
            // Binary frames are PCM16 mono at 16 kHz (docs/PROTOCOL.md).
            self.events.audio_seconds[0].inc_by(bytes as f64 / 32_000.0);
        }
    }

    /// A message to the client.
    pub fn sent(&self, binary: bool, bytes: usize) {
        self.outbound.count(binary, bytes);
    }

    /// The first audio (or, for an answer in text, the first text) of an answer is being
    /// written to the socket `latency` after the gateway received the client audio that
    /// prompted it.
    pub fn first_answer(&self, audio: bool, latency: std::time::Duration) {
        let histogram = if audio {
            &self.first_audio
        } else {
            &self.first_text
        };
        histogram.observe(latency.as_secs_f64());
    }

    /// The event ending a turn is being written `latency` after the turn's last audio or text
    /// was.
    pub fn turn_end(&self, latency: std::time::Duration) {
        self.turn_end.observe(latency.as_secs_f64());
    }

    /// Counts an event (see [`Meter::event`]) and hands it back.
    ///
    /// Async code should count this way: a local that is borrowed, even briefly, keeps its place
    /// in the future across every later `.await` in its scope (rustc lays out futures that way),
    /// and an `Event` is 736 bytes of every connection's future.
    pub fn counted(&self, event: Event) -> Event {
        self.events.counted(event)
    }

    /// An event of the connection's run: its kind, its error code, the artifacts it reports saved.
    pub fn event(&self, event: &Event) {
        self.events.count(event);
    }

    /// Counts a live run as in progress until the returned meter, which counts its events, is
    /// dropped.
    pub fn run(&self) -> RunMeter {
        self.events.runs.inc();
        RunMeter(Arc::clone(&self.events))
    }

    /// A client was cut off for not reading.
    pub fn stalled(&self) {
        self.stalled.inc();
    }

    /// The first audio of an answer, made by the model at `created` (Unix seconds), is being
    /// written to the socket now.
    pub fn answer_forwarded(&self, created: f64) {
        // A wall clock stepped back gives a negative span: count it as no delay at all.
        self.answer_forward
            .observe((now_timestamp() - created).max(0.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_what_connections_count() {
        let metrics = Metrics::default();
        let guard = metrics.connection();
        let meter = metrics.meter();
        meter.received(true, 640);
        meter.received(true, 640);
        meter.received(false, 20);
        meter.sent(true, 9600);
        meter.answer_forwarded(now_timestamp());
        meter.turn_end(std::time::Duration::from_micros(40));
        assert_rendered(
            &metrics,
            &[
                "livegate_connections 1",
                // A turn end saved while the answer played is told apart from 1 ms.
                r#"livegate_turn_end_seconds_bucket{le="0.0001"} 1"#,
                r#"livegate_frames_total{direction="in",kind="audio"} 2"#,
                r#"livegate_frames_total{direction="in",kind="text"} 1"#,
                r#"livegate_bytes_total{direction="in"} 1300"#,
                r#"livegate_bytes_total{direction="out"} 9600"#,
                "livegate_answer_forward_latency_seconds_count 1",
                &format!(r#"{BUILD_INFO}{{build="{}"}} 1"#, crate::BUILD),
            ],
        );
        drop(guard);
        assert_rendered(&metrics, &["livegate_connections 0"]);
        assert!(
            !metrics.render().contains(MODEL_DELAY),
            "no delay unless known"
        );
        let sim = Metrics::default().with_model_delay(std::time::Duration::from_millis(650));
        assert_rendered(&sim, &[&format!("{MODEL_DELAY} 0.65")]);
    }

    /// Asserts that each of `lines` is a line of the metrics' text.
    fn assert_rendered(metrics: &Metrics, lines: &[&str]) {
        let text = metrics.render();
        for line in lines {
            assert!(
                text.lines().any(|l| l == *line),
                "{line} missing in:\n{text}"
            );
        }
    }

    #[test]
    fn event_kinds_are_indexed_in_declaration_order() {
        for (i, kind) in EventKind::ALL.iter().enumerate() {
            assert_eq!(*kind as usize, i, "{kind:?}");
        }
    }

    #[test]
    fn events_count_by_kind_error_code_and_artifacts_saved() {
        use crate::event::{Blob, Content, FileData, Part};

        let metrics = Metrics::default();
        let meter = metrics.meter();
        let run = meter.run();
        let mut turn = Event::new("e-1", "agent");
        turn.turn_complete = Some(true);
        meter.event(&turn);
        let audio = Event {
            content: Some(Content::blob(
                "model",
                Blob::new(vec![0; 4].into(), "audio/pcm"),
            )),
            ..Event::new("e-1", "agent")
        };
        meter.event(&audio);
        let mut recording = Event::new("e-1", "user");
        recording.content = Some(Content {
            parts: vec![Part {
                file_data: Some(FileData {
                    display_name: None,
                    file_uri: "artifact://app/u/s/_adk_live/in.pcm#0".into(),
                    mime_type: None,
                }),
                ..Part::default()
            }],
            role: Some("user".into()),
        });
        meter.event(&recording);
        let mut tool = Event::new("e-1", "agent");
        tool.actions
            .artifact_delta
            .insert("note.txt".into(), serde_json::json!(0));
        meter.event(&tool);
        meter.event(&Event::error("e-1", "agent", "INVALID_ARGUMENT", "bad"));
        meter.event(&Event::error("e-1", "agent", "no such thing: \"x\"", "odd"));
        metrics.on_reconnect().reconnected();
        assert_rendered(
            &metrics,
            &[
                "livegate_live_runs 1",
                r#"livegate_events_total{kind="turn_complete"} 1"#,
                r#"livegate_events_total{kind="audio"} 1"#,
                r#"livegate_events_total{kind="file_data"} 1"#,
                r#"livegate_events_total{kind="other"} 1"#,
                r#"livegate_events_total{kind="error"} 2"#,
                r#"livegate_events_total{kind="text"} 0"#,
                r#"livegate_errors_total{code="INVALID_ARGUMENT"} 1"#,
                r#"livegate_errors_total{code="OTHER"} 1"#,
                r#"livegate_artifacts_saved_total{source="recording"} 1"#,
                r#"livegate_artifacts_saved_total{source="agent"} 1"#,
                "livegate_upstream_reconnects_total 1",
            ],
        );
        drop(run);
        assert_rendered(&metrics, &["livegate_live_runs 0"]);
    }
}
