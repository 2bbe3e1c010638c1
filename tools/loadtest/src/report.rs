//! What a load test measured: percentiles, counts and rates, the server's CPU and memory, the
//! table printed at the end, the JSON report and the SVG plot.

use serde::Serialize;

use super::procfs::{CpuWait, Machine, MachineLoad, ServerStats};
use super::scrape::{BucketQuantiles, GatewayView};

/// Busy share of the machine's CPU from which a run counts as saturated.
const SATURATED: f64 = 0.95;

/// Percentiles of a set of samples, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// How many samples.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

impl Percentiles {
    /// Percentiles of `samples` (nearest rank); all zero when there are none.
    pub fn of(samples: &[f64]) -> Self {
        if samples.is_empty() {
            return Percentiles::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let index = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
            sorted[index.clamp(1, sorted.len()) - 1]
        };
        Percentiles {
            count: sorted.len(),
            p50: rank(50.0),
            p95: rank(95.0),
            p99: rank(99.0),
            max: sorted[sorted.len() - 1],
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
        }
    }
}

/// Traffic in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Traffic {
    /// WebSocket messages.
    pub frames: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// Messages per second over the run.
    pub frames_per_second: f64,
    /// Bytes per second over the run.
    pub bytes_per_second: f64,
}

/// What one session saw (`--session-report`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionRecord {
    /// The session id (`s0`, `s1`, …).
    pub session: String,
    /// Answers completed on each of the session's connections, in order: a session moved by a
    /// restart has more than one.
    pub turns_per_connection: Vec<u64>,
    /// Ids of the events it received that the gateway had committed before sending them
    /// (neither partial nor carrying inline audio), in arrival order.
    pub committed_event_ids: Vec<String>,
}

/// Everything one run measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// The gateway WebSocket URL (the nodes', space-separated, with several).
    pub url: String,
    /// Every node's WebSocket URL, in `--url` order.
    pub urls: Vec<String>,
    /// WebSocket connections opened to each node (in `urls` order), reconnects included.
    pub connects_per_url: Vec<u64>,
    /// Connections opened again after a node closed one for a restart (1012 or 1001).
    pub reconnects: u64,
    /// From such a close to the session's new connection being open (backoff included).
    pub reconnect_ms: Percentiles,
    /// This run's id: its sessions are user `load-{run_id}`, sessions `s0`, `s1`, ….
    pub run_id: String,
    /// Each session's own record (with `--session-report`), by session id.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub session_records: Vec<SessionRecord>,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// The generator's build (`livegate 0.1.0 (4a584fd)`).
    pub generator: String,
    /// The machine the generator ran on (the gateway's too, unless it was elsewhere).
    pub machine: Machine,
    /// Sessions asked for.
    pub sessions: usize,
    /// Planned duration, seconds.
    pub duration_seconds: f64,
    /// Sessions opened per second.
    pub ramp_per_second: f64,
    /// Every session's frame clock on one phase (`--in-phase`) rather than spread.
    pub in_phase: bool,
    /// Sessions only connect and wait (no audio).
    pub idle: bool,
    /// Seconds the run really took.
    pub elapsed_seconds: f64,
    /// The run was stopped before its duration (Ctrl-C): it covers the turns that ran.
    pub stopped_early: bool,
    /// Time to open each WebSocket.
    pub connect_ms: Percentiles,
    /// End of an utterance (last speech frame sent) to the first byte of answer audio.
    pub latency_ms: Percentiles,
    /// What the gateway adds: from sending the frame that ends the model's own delay
    /// (`--model-delay-ms` after the last speech frame) to the first byte of answer audio. Timed
    /// from when that frame really went out, so a generator behind schedule does not count.
    pub gateway_latency_ms: Percentiles,
    /// End of an utterance to the first text of an answer in text (`--query modality=TEXT`),
    /// for turns answered in text.
    pub text_latency_ms: Percentiles,
    /// What the gateway adds to those, timed as `gateway_latency_ms`.
    pub text_gateway_latency_ms: Percentiles,
    /// The model's own delay after the end of speech.
    pub model_delay_ms: f64,
    /// Playback underruns inside an answer: audio that arrived after the previous audio finished.
    pub audio_gaps_ms: Percentiles,
    /// From an answer's last audio (or text) to its `turnComplete`: what the gateway does at a
    /// turn's end, saving the turn's recordings among it (the next utterance waits for it here).
    pub turn_end_ms: Percentiles,
    /// Answers that completed (`turnComplete`).
    pub turns_completed: u64,
    /// `interrupted` events (none expected: sessions wait for each answer).
    pub interrupted: u64,
    /// Client to gateway.
    pub sent: Traffic,
    /// Gateway to client.
    pub received: Traffic,
    /// Bytes of speech and silence PCM sent.
    pub audio_bytes_sent: u64,
    /// Bytes of answer audio received.
    pub audio_bytes_received: u64,
    /// Errors: failed connects, error events, protocol surprises.
    pub errors: u64,
    /// The first few error messages.
    pub error_samples: Vec<String>,
    /// Errors where a turn timed out while bytes from the gateway were still unread at the
    /// generator: it had fallen behind reading, so the answer may well have been there.
    pub timeouts_with_unread: u64,
    /// Sockets the server closed before the session was done.
    pub unexpected_closes: u64,
    /// How late the generator sent its frames against each session's fixed clock.
    pub schedule_lag_ms: Percentiles,
    /// Connected sessions over time: `(seconds, sessions)`.
    pub sessions_over_time: Vec<(f64, usize)>,
    /// The server process, with `--server-pid`.
    pub server: Option<ServerStats>,
    /// Cores the generator itself kept busy: with the server on the same machine, server plus
    /// generator near the machine's core count means latencies include waiting for a CPU.
    pub generator_cpu_cores: Option<f64>,
    /// Of those, the cores the generator kept busy in the kernel: on loopback its sends also
    /// deliver each frame into the server's socket.
    pub generator_cpu_system_cores: Option<f64>,
    /// Cores the generator kept busy while the most sessions were connected.
    pub generator_cpu_cores_at_peak: Option<f64>,
    /// Share of all the machine's CPU time that was busy during the run (0 to 1): near 1, every
    /// latency includes waiting for a CPU.
    pub machine_cpu_busy: Option<f64>,
    /// The machine's CPU while the most sessions were connected (busy and steal, 0 to 1): the
    /// run's average above also covers the ramp and the drain, and hides a machine saturated in
    /// between.
    pub machine_cpu_at_peak: Option<MachineLoad>,
    /// How long the generator's threads waited for a CPU while the most sessions were connected.
    pub generator_cpu_wait_at_peak: Option<CpuWait>,
    /// The gateway's own counts over the run, from its `/metrics` (all its clients, not only
    /// this run's), when it serves them.
    pub gateway: Option<GatewayView>,
}

/// `, 45% of it in the kernel` for `system` of `total` CPU seconds (or cores).
fn in_kernel(system: f64, total: f64) -> String {
    if total > 0.0 {
        format!(", {:.0}% of it in the kernel", system / total * 100.0)
    } else {
        String::new()
    }
}

fn row(name: &str, p: &Percentiles) -> String {
    if p.count == 0 {
        // Nothing measured has no quantiles; zeros would read as instant.
        return format!(
            "{name:<24} {:>8} {:>9} {:>9} {:>9} {:>9}\n",
            0, "–", "–", "–", "–"
        );
    }
    format!(
        "{name:<24} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>9.2}\n",
        p.count, p.p50, p.p95, p.p99, p.max
    )
}

impl Report {
    /// The summary table printed at the end of a run: the run, the client's latencies, its
    /// counts, the CPU it took, and the gateway's own view.
    pub fn table(&self) -> String {
        let mut out = String::new();
        self.write_heading(&mut out);
        self.write_latencies(&mut out);
        self.write_counts(&mut out);
        let connected = self.connected_at_peak();
        self.write_cpu(&mut out, connected);
        self.write_waits(&mut out, connected);
        self.write_gateway_view(&mut out);
        self.write_errors(&mut out);
        out
    }

    /// What ran, against what, for how long, on what.
    fn write_heading(&self, out: &mut String) {
        out.push_str(&format!(
            "livegate loadtest: {} sessions{} against {} for {:.1} s{}\n{}, {}, on {}\n\n",
            self.sessions,
            if self.idle { " (idle)" } else { "" },
            self.url,
            self.elapsed_seconds,
            if self.stopped_early {
                format!(", stopped early (of {:.0} s)", self.duration_seconds)
            } else {
                String::new()
            },
            self.started_at,
            self.generator,
            self.machine.describe(),
        ));
    }

    /// The client's latency quantiles, one row each.
    fn write_latencies(&self, out: &mut String) {
        out.push_str(&format!(
            "{:<24} {:>8} {:>9} {:>9} {:>9} {:>9}\n",
            "ms", "n", "p50", "p95", "p99", "max"
        ));
        out.push_str(&row("connect", &self.connect_ms));
        if self.reconnects > 0 {
            out.push_str(&row("reconnect", &self.reconnect_ms));
        }
        out.push_str(&row("first audio", &self.latency_ms));
        out.push_str(&row("gateway-added", &self.gateway_latency_ms));
        // Only answers in text have these; an audio run's table stays as it was.
        if self.text_latency_ms.count > 0 {
            out.push_str(&row("first text", &self.text_latency_ms));
            out.push_str(&row("gateway-added (text)", &self.text_gateway_latency_ms));
        }
        out.push_str(&row("audio gaps", &self.audio_gaps_ms));
        out.push_str(&row("turn end", &self.turn_end_ms));
        out.push_str(&row("generator lag", &self.schedule_lag_ms));
        if !self.idle {
            out.push_str(&format!(
                "gateway-added: first answer less the model's own {:.0} ms after the end of speech (--model-delay-ms)\n",
                self.model_delay_ms
            ));
        }
    }

    /// Turns, errors, reconnects and the frames each way.
    fn write_counts(&self, out: &mut String) {
        out.push_str(&format!(
            "\nturns {}  interrupted {}  errors {}  unexpected closes {}\n",
            self.turns_completed, self.interrupted, self.errors, self.unexpected_closes
        ));
        if self.urls.len() > 1 || self.reconnects > 0 {
            let per_node: Vec<String> = self
                .urls
                .iter()
                .zip(&self.connects_per_url)
                .map(|(url, n)| format!("{url} {n}"))
                .collect();
            out.push_str(&format!(
                "reconnects after 1012/1001: {}  connections per node: {}\n",
                self.reconnects,
                per_node.join(", ")
            ));
        }
        if self.timeouts_with_unread > 0 {
            out.push_str(&format!(
                "  {} of the errors: turns that timed out with the gateway's bytes still unread (the generator fell behind reading)\n",
                self.timeouts_with_unread
            ));
        }
        out.push_str(&format!(
            "sent {} frames ({:.0}/s, {:.1} MB/s)  received {} frames ({:.0}/s, {:.1} MB/s)\n",
            self.sent.frames,
            self.sent.frames_per_second,
            self.sent.bytes_per_second / 1e6,
            self.received.frames,
            self.received.frames_per_second,
            self.received.bytes_per_second / 1e6
        ));
    }

    /// The most sessions connected at once (the load the targets are set at).
    fn connected_at_peak(&self) -> usize {
        self.sessions_over_time
            .iter()
            .map(|s| s.1)
            .max()
            .unwrap_or(0)
    }

    /// The CPU the server, the generator and the machine took.
    fn write_cpu(&self, out: &mut String, connected: usize) {
        // `; 0.88 with 1000 sessions connected`: the load the targets are set at.
        let at_peak = |cores: Option<f64>| {
            cores
                .map(|cores| format!("; {cores:.2} with {connected} sessions connected"))
                .unwrap_or_default()
        };
        if let Some(server) = &self.server {
            let whose = match server.pid {
                Some(pid) => format!("server pid {pid}"),
                None => "server (its /metrics)".to_owned(),
            };
            let kernel = server
                .cpu_system_seconds
                .map(|system| in_kernel(system, server.cpu_seconds))
                .unwrap_or_default();
            out.push_str(&format!(
                "{whose}: CPU {:.1} s ({:.2} cores over the run{kernel}{}), RSS {:.1} MiB at start, peak {:.1} MiB, {:.1} KiB per session\n",
                server.cpu_seconds,
                server.cpu_cores,
                at_peak(server.cpu_cores_at_peak),
                server.baseline_rss_kib as f64 / 1024.0,
                server.peak_rss_kib as f64 / 1024.0,
                server.rss_kib_per_session
            ));
        }
        if let Some(cores) = self.generator_cpu_cores {
            let kernel = self
                .generator_cpu_system_cores
                .map(|system| in_kernel(system, cores))
                .unwrap_or_default();
            out.push_str(&format!(
                "generator CPU {cores:.2} cores over the run{kernel}{}\n",
                at_peak(self.generator_cpu_cores_at_peak)
            ));
        }
        if let Some(busy) = self.machine_cpu_busy {
            out.push_str(&format!(
                "machine CPU {:.0}% busy over the run",
                busy * 100.0
            ));
            if let Some(peak) = self.machine_cpu_at_peak {
                out.push_str(&format!(
                    ", {:.0}% with {} sessions connected (kernel {:.0}%, steal {:.0}%)",
                    peak.busy * 100.0,
                    connected,
                    peak.kernel * 100.0,
                    peak.steal * 100.0
                ));
                if peak.busy >= SATURATED {
                    out.push_str(
                        "\n  saturated: latencies, the gateway's own included, contain waiting for a CPU",
                    );
                }
            }
            out.push('\n');
        }
    }

    /// Waiting for a CPU, and bytes left unread in the server's sockets, at the peak.
    fn write_waits(&self, out: &mut String, connected: usize) {
        let server_wait = self.server.as_ref().and_then(|s| s.cpu_wait_at_peak);
        if server_wait.is_some() || self.generator_cpu_wait_at_peak.is_some() {
            let wait = |w: Option<CpuWait>| {
                w.map_or("–".to_owned(), |w| {
                    format!(
                        "{:.0} µs per wake-up, {:.2} threads waiting",
                        w.per_wakeup_us, w.threads_waiting
                    )
                })
            };
            out.push_str(&format!(
                "waiting for a CPU with {connected} sessions connected: server {}; generator {}\n",
                wait(server_wait),
                wait(self.generator_cpu_wait_at_peak)
            ));
        }
        if let Some(backlog) = self.server.as_ref().and_then(|s| s.socket_backlog_at_peak) {
            out.push_str(&format!(
                "unread in the server's {} sockets with {connected} sessions connected: {:.1} KiB on average, in {:.0}% of them, at most {:.1} KiB in one",
                backlog.sockets,
                backlog.mean_unread_bytes / 1024.0,
                backlog.share_with_unread * 100.0,
                backlog.largest_unread_bytes as f64 / 1024.0
            ));
            if let Some(wait) = backlog.mean_wait_ms {
                out.push_str(&format!(
                    "\n  a frame waited {wait:.2} ms on average before the server read it (not in its own view below)"
                ));
            }
            out.push('\n');
        }
    }

    /// The gateway's own view, from its `/metrics`.
    fn write_gateway_view(&self, out: &mut String) {
        if let Some(gateway) = &self.gateway {
            // An empty histogram has no quantiles; zeros would read as instant answers.
            let line = |what: &str, q: &BucketQuantiles| match q.count {
                0 => format!("  {what}: none\n"),
                n => format!(
                    "  {what} p50 {:.2} / p95 {:.2} / p99 {:.2} ms (mean {:.2}, {n} answers)\n",
                    q.p50, q.p95, q.p99, q.mean
                ),
            };
            let build = gateway
                .build
                .as_ref()
                .map(|build| format!(" (livegate {build})"))
                .unwrap_or_default();
            out.push_str(&format!(
                "gateway's own view{build}: {} audio frames received, {} turnComplete events sent\n",
                gateway.audio_frames_received, gateway.turn_complete_events
            ));
            // The gateway times from the frame its model heard end the utterance, so the model's
            // own reply delay (the sim's 150 ms by default) is inside these.
            out.push_str(&line(
                "gateway-added (utterance end read -> first audio written, the model's reply delay included)",
                &gateway.first_audio_ms,
            ));
            if gateway.first_text_ms.count > 0 {
                out.push_str(&line(
                    "gateway-added, text (utterance end read -> first text written, the model's reply delay included)",
                    &gateway.first_text_ms,
                ));
            }
            out.push_str(&line(
                "of which downstream (model's first audio or text -> written)",
                &gateway.answer_forward_ms,
            ));
            out.push_str(&line(
                "turn end (last audio or text written -> turnComplete written)",
                &gateway.turn_end_ms,
            ));
        }
    }

    /// Sampled errors and where the run's sessions are kept.
    fn write_errors(&self, out: &mut String) {
        for error in &self.error_samples {
            out.push_str(&format!("error: {error}\n"));
        }
        if !self.run_id.is_empty() {
            out.push_str(&format!(
                "the gateway keeps these sessions and their recordings like any others, as user load-{} (with its defaults, in its ./data)\n",
                self.run_id
            ));
        }
    }

    /// An SVG with the latency distribution (left) and connected sessions over time (right):
    /// first audio, or first text when no answer had audio.
    pub fn svg(&self, audio: &[f64], text: &[f64]) -> String {
        let (what, latencies, summary) = if audio.is_empty() && !text.is_empty() {
            ("first-text", text, &self.text_latency_ms)
        } else {
            ("first-audio", audio, &self.latency_ms)
        };
        let (w, h) = (960.0, 380.0);
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        );
        // Left: histogram of the latency.
        let max = latencies.iter().copied().fold(0.0, f64::max).max(1.0);
        let x_axis = Axis::up_to(max);
        let buckets = 40usize;
        let mut counts = vec![0usize; buckets];
        for &l in latencies {
            let i = (l.max(0.0) / x_axis.max * buckets as f64) as usize;
            counts[i.min(buckets - 1)] += 1;
        }
        let y_axis = Axis::up_to(counts.iter().copied().max().unwrap_or(0).max(1) as f64);
        let left = Frame {
            x: 70.0,
            y: 40.0,
            w: w / 2.0 - 100.0,
            h: h - 100.0,
        };
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"20\">{what} latency: n={} p50={:.1} ms p99={:.1} ms</text>\n",
            left.x, summary.count, summary.p50, summary.p99
        ));
        let bar = left.w / buckets as f64;
        for (i, &c) in counts.iter().enumerate() {
            let bh = left.h * c as f64 / y_axis.max;
            svg.push_str(&format!(
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#3b6ea8\"/>\n",
                left.x + i as f64 * bar,
                left.y + left.h - bh,
                (bar - 1.0).max(1.0),
                bh
            ));
        }
        left.axes(
            &mut svg,
            &x_axis,
            &y_axis,
            &format!("{what} latency (ms)"),
            "turns",
        );

        // Right: connected sessions over time.
        let t_axis = Axis::up_to(
            self.sessions_over_time
                .last()
                .map_or(1.0, |(t, _)| t.max(1.0)),
        );
        let s_axis = Axis::up_to(self.sessions.max(1) as f64);
        let right = Frame {
            x: w / 2.0 + 70.0,
            ..left
        };
        let points: Vec<String> = self
            .sessions_over_time
            .iter()
            .map(|(t, s)| {
                format!(
                    "{:.1},{:.1}",
                    right.x + (t / t_axis.max) * right.w,
                    right.y + right.h - (*s as f64 / s_axis.max) * right.h
                )
            })
            .collect();
        svg.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"#c0392b\" stroke-width=\"2\" points=\"{}\"/>\n<text x=\"{}\" y=\"20\">connected sessions (of {})</text>\n",
            points.join(" "),
            right.x,
            self.sessions
        ));
        right.axes(
            &mut svg,
            &t_axis,
            &s_axis,
            "time since start (s)",
            "sessions",
        );
        svg.push_str("</svg>\n");
        svg
    }
}

/// A plot's area in the SVG.
#[derive(Debug, Clone, Copy)]
struct Frame {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

/// An axis from 0 to a round `max`, with ticks every `step`.
#[derive(Debug, Clone, Copy)]
struct Axis {
    max: f64,
    step: f64,
}

impl Axis {
    /// An axis covering `0..=value` in 4 to 10 steps of 1, 2 or 5 times a power of ten.
    fn up_to(value: f64) -> Axis {
        let value = if value.is_finite() && value > 0.0 {
            value
        } else {
            1.0
        };
        let raw = value / 5.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .into_iter()
            .map(|m| m * magnitude)
            .find(|s| *s >= raw)
            .unwrap_or(10.0 * magnitude);
        Axis {
            max: (value / step).ceil().max(1.0) * step,
            step,
        }
    }

    /// The tick values, from 0 to `max`.
    fn ticks(&self) -> impl Iterator<Item = f64> + '_ {
        let n = (self.max / self.step).round() as usize;
        (0..=n.min(20)).map(move |i| i as f64 * self.step)
    }
}

/// A tick label: no trailing zeros (`0.6`, not `0.6000000000000001` or `0.600`).
fn tick_label(v: f64) -> String {
    let text = format!("{v:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

impl Frame {
    /// Draws the x and y axes with ticks, grid lines, tick labels and axis titles.
    fn axes(&self, svg: &mut String, x: &Axis, y: &Axis, x_title: &str, y_title: &str) {
        let (left, bottom) = (self.x, self.y + self.h);
        for v in x.ticks() {
            let px = left + v / x.max * self.w;
            svg.push_str(&format!(
                "<line x1=\"{px:.1}\" y1=\"{bottom:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#444\"/>\n<text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
                bottom + 5.0,
                bottom + 18.0,
                tick_label(v)
            ));
        }
        for v in y.ticks() {
            let py = bottom - v / y.max * self.h;
            svg.push_str(&format!(
                "<line x1=\"{left:.1}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
                left + self.w,
                left - 6.0,
                py + 4.0,
                tick_label(v)
            ));
        }
        svg.push_str(&format!(
            "<line x1=\"{left:.1}\" y1=\"{bottom:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\" stroke=\"#444\"/>\n<line x1=\"{left:.1}\" y1=\"{:.1}\" x2=\"{left:.1}\" y2=\"{bottom:.1}\" stroke=\"#444\"/>\n",
            left + self.w,
            self.y
        ));
        svg.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{x_title}</text>\n<text transform=\"translate({:.1} {:.1}) rotate(-90)\" text-anchor=\"middle\">{y_title}</text>\n",
            left + self.w / 2.0,
            bottom + 38.0,
            left - 45.0,
            self.y + self.h / 2.0
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backlog::SocketBacklog;

    #[test]
    fn percentiles_use_nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Percentiles::of(&samples);
        assert_eq!(
            (p.count, p.p50, p.p95, p.p99, p.max),
            (100, 50.0, 95.0, 99.0, 100.0)
        );
        assert_eq!(Percentiles::of(&[]), Percentiles::default());
        assert_eq!(Percentiles::of(&[7.0]).p99, 7.0);
    }

    #[test]
    fn axes_end_on_round_numbers() {
        let axis = |v| {
            let a = Axis::up_to(v);
            (a.max, a.step)
        };
        assert_eq!(axis(730.0), (800.0, 200.0));
        assert_eq!(axis(1.0), (1.0, 0.2));
        assert_eq!(axis(20.0), (20.0, 5.0));
        assert_eq!(axis(0.0), (1.0, 0.2));
        assert_eq!(axis(f64::NAN), (1.0, 0.2));
    }

    #[test]
    fn the_table_and_plot_render() {
        let report = Report {
            sessions: 2,
            latency_ms: Percentiles::of(&[1.0, 2.0]),
            sessions_over_time: vec![(0.0, 0), (1.0, 2)],
            ..Report::default()
        };
        let table = report.table();
        assert!(table.contains("first audio"));
        assert!(
            table.contains("less the model's own 0 ms"),
            "says what the model's delay was: {table}"
        );
        assert!(
            !table.contains("first text"),
            "no text answers, no text rows"
        );
        let svg = report.svg(&[1.0, 2.0], &[]);
        assert!(svg.starts_with("<svg") && svg.contains("polyline"));
        assert!(svg.contains("first-audio latency: n=2"), "{svg}");
        // Both plots have axes with titles and a labelled scale.
        for title in [
            ">first-audio latency (ms)<",
            ">turns<",
            ">time since start (s)<",
            ">sessions<",
        ] {
            assert!(svg.contains(title), "{title} in {svg}");
        }
        for tick in [">0<", ">0.5<", ">2<"] {
            assert!(svg.contains(tick), "tick {tick} in {svg}");
        }
    }

    #[test]
    fn answers_in_text_get_their_own_rows_and_plot() {
        let report = Report {
            sessions: 2,
            text_latency_ms: Percentiles::of(&[600.0, 700.0]),
            text_gateway_latency_ms: Percentiles::of(&[1.5, 2.5]),
            gateway: Some(GatewayView {
                first_text_ms: BucketQuantiles {
                    count: 2,
                    mean: 0.9,
                    p50: 0.8,
                    p95: 1.0,
                    p99: 1.0,
                },
                ..GatewayView::default()
            }),
            ..Report::default()
        };
        let table = report.table();
        // The gateway timed no audio answer: its audio line says so rather than showing zeros.
        assert!(
            table.contains("(utterance end read -> first audio written, the model's reply delay included): none\n"),
            "{table}"
        );
        assert!(
            table.contains(
                "first text written, the model's reply delay included) p50 0.80 / p95 1.00 / p99 1.00 ms (mean 0.90, 2 answers)"
            ),
            "{table}"
        );
        let row_of = |name: &str| {
            table
                .lines()
                .find(|l| l.starts_with(name))
                .map(str::to_owned)
        };
        let text = row_of("first text ").expect("a first-text row");
        assert!(
            text.contains("600.00") && text.contains("700.00"),
            "{table}"
        );
        let added = row_of("gateway-added (text)").expect("its gateway-added row");
        assert!(added.contains("2.50"), "{table}");
        // No audio came: its row has no quantiles rather than zeros.
        let audio = row_of("first audio ").expect("the first-audio row");
        assert!(
            audio.contains(" 0 ") && audio.contains('–') && !audio.contains("0.00"),
            "{table}"
        );
        let svg = report.svg(&[], &[600.0, 700.0]);
        assert!(
            svg.contains("first-text latency: n=2 p50=600.0 ms")
                && svg.contains(">first-text latency (ms)<"),
            "{svg}"
        );
    }

    #[test]
    fn the_table_says_when_the_machine_was_saturated() {
        let mut report = Report {
            sessions: 1000,
            sessions_over_time: vec![(0.0, 0), (30.0, 1000), (70.0, 0)],
            machine_cpu_busy: Some(0.89),
            machine_cpu_at_peak: Some(MachineLoad {
                busy: 0.9,
                kernel: 0.45,
                steal: 0.07,
            }),
            ..Report::default()
        };
        let calm = report.table();
        assert!(
            calm.contains(
                "machine CPU 89% busy over the run, 90% with 1000 sessions connected (kernel 45%, steal 7%)"
            ),
            "{calm}"
        );
        assert!(!calm.contains("saturated"));
        report.machine_cpu_at_peak = Some(MachineLoad {
            busy: 0.995,
            kernel: 0.45,
            steal: 0.07,
        });
        assert!(report.table().contains("saturated"));
    }

    #[test]
    fn the_table_says_how_long_threads_waited_for_a_cpu() {
        let mut report = Report {
            sessions_over_time: vec![(0.0, 0), (30.0, 1000)],
            ..Report::default()
        };
        assert!(!report.table().contains("waiting for a CPU"));
        report.server = Some(ServerStats {
            cpu_wait_at_peak: Some(CpuWait {
                per_wakeup_us: 1302.4,
                threads_waiting: 1.314,
            }),
            ..ServerStats::default()
        });
        report.generator_cpu_wait_at_peak = Some(CpuWait {
            per_wakeup_us: 38.0,
            threads_waiting: 0.02,
        });
        let table = report.table();
        assert!(
            table.contains(
                "waiting for a CPU with 1000 sessions connected: server 1302 µs per wake-up, 1.31 threads waiting; generator 38 µs per wake-up, 0.02 threads waiting"
            ),
            "{table}"
        );
    }

    #[test]
    fn the_table_says_how_much_cpu_went_to_the_kernel_and_at_the_peak() {
        let mut report = Report {
            sessions_over_time: vec![(0.0, 0), (10.0, 1000), (60.0, 1000), (61.0, 0)],
            server: Some(ServerStats {
                pid: Some(42),
                cpu_seconds: 60.0,
                cpu_cores: 0.85,
                cpu_cores_at_peak: Some(0.97),
                cpu_system_seconds: Some(27.0),
                ..ServerStats::default()
            }),
            generator_cpu_cores: Some(0.6),
            generator_cpu_system_cores: Some(0.42),
            generator_cpu_cores_at_peak: Some(0.66),
            ..Report::default()
        };
        let table = report.table();
        assert!(
            table.contains("server pid 42: CPU 60.0 s (0.85 cores over the run, 45% of it in the kernel; 0.97 with 1000 sessions connected), "),
            "{table}"
        );
        assert!(
            table.contains("generator CPU 0.60 cores over the run, 70% of it in the kernel; 0.66 with 1000 sessions connected\n"),
            "{table}"
        );
        // Read from the gateway's /metrics, the split is unknown and not made up; a run too
        // short to sample twice at its peak has no rate there.
        if let Some(server) = &mut report.server {
            server.pid = None;
            server.cpu_system_seconds = None;
        }
        report.generator_cpu_system_cores = None;
        report.generator_cpu_cores_at_peak = None;
        let table = report.table();
        assert!(
            table.contains("server (its /metrics): CPU 60.0 s (0.85 cores over the run; 0.97 with 1000 sessions connected), "),
            "{table}"
        );
        assert!(
            table.contains("generator CPU 0.60 cores over the run\n"),
            "{table}"
        );
    }

    #[test]
    fn the_table_says_how_long_frames_waited_unread() {
        let mut report = Report {
            sessions_over_time: vec![(0.0, 0), (30.0, 1000)],
            ..Report::default()
        };
        report.server = Some(ServerStats::default());
        assert!(!report.table().contains("unread in the server's"));
        report.server = Some(ServerStats {
            socket_backlog_at_peak: Some(SocketBacklog {
                sockets: 1000,
                mean_unread_bytes: 1_536_000.0,
                share_with_unread: 0.482,
                largest_unread_bytes: 9072,
                mean_wait_ms: Some(37.04),
            }),
            ..ServerStats::default()
        });
        let table = report.table();
        assert!(
            table.contains(
                "unread in the server's 1000 sockets with 1000 sessions connected: 1500.0 KiB on average, in 48% of them, at most 8.9 KiB in one\n  a frame waited 37.04 ms on average before the server read it"
            ),
            "{table}"
        );
    }

    #[test]
    fn the_table_counts_timeouts_the_generator_caused() {
        let mut report = Report {
            errors: 3,
            ..Report::default()
        };
        assert!(!report.table().contains("still unread"));
        report.timeouts_with_unread = 2;
        assert!(report.table().contains(
            "2 of the errors: turns that timed out with the gateway's bytes still unread"
        ));
    }
}
