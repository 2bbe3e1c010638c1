//! The gateway's Prometheus metrics, served at `/metrics`: connections, client frames and bytes
//! each way, slow clients cut off, and how long the gateway takes to forward an answer's audio.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::event::now_timestamp;

/// Name of the answer forward latency histogram (the load generator reads it by this name).
pub const ANSWER_FORWARD_LATENCY: &str = "livegate_answer_forward_latency_seconds";

/// Upper bounds of the latency buckets, in seconds: fine around the 5 ms target, coarse beyond.
const LATENCY_BUCKETS: [f64; 20] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.003, 0.004, 0.005, 0.007_5, 0.01, 0.015, 0.02,
    0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5,
];

type Labels = [(&'static str, &'static str); 2];

/// Every metric of one gateway, and the registry that renders them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    connections: Gauge,
    meter: Meter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("livegate");
        let connections = Gauge::default();
        registry.register(
            "connections",
            "Client WebSocket connections open",
            connections.clone(),
        );
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
        let answer_forward = Histogram::new(LATENCY_BUCKETS);
        registry.register(
            "answer_forward_latency_seconds",
            "From the model producing the first audio of an answer to the gateway writing it to the client socket",
            answer_forward.clone(),
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
        let meter = Meter {
            inbound: way("in"),
            outbound: way("out"),
            stalled,
            answer_forward,
        };
        Metrics {
            registry,
            connections,
            meter,
        }
    }
}

impl Metrics {
    /// The metrics in the Prometheus (OpenMetrics) text format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }

    /// Counts an open connection until the returned guard is dropped.
    pub fn connection(&self) -> ConnectionGuard {
        self.connections.inc();
        ConnectionGuard(self.connections.clone())
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

/// What one connection's reader and writer count. The default counts into metrics nobody
/// reads (for writers run outside a gateway, as in tests).
#[derive(Debug, Clone)]
pub struct Meter {
    inbound: Way,
    outbound: Way,
    stalled: Counter,
    answer_forward: Histogram,
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
    }

    /// A message to the client.
    pub fn sent(&self, binary: bool, bytes: usize) {
        self.outbound.count(binary, bytes);
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
        let text = metrics.render();
        for line in [
            "livegate_connections 1",
            r#"livegate_frames_total{direction="in",kind="audio"} 2"#,
            r#"livegate_frames_total{direction="in",kind="text"} 1"#,
            r#"livegate_bytes_total{direction="in"} 1300"#,
            r#"livegate_bytes_total{direction="out"} 9600"#,
            "livegate_answer_forward_latency_seconds_count 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing in:\n{text}"
            );
        }
        drop(guard);
        assert!(metrics
            .render()
            .lines()
            .any(|l| l == "livegate_connections 0"));
    }
}
