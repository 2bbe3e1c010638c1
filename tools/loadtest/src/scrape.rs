//! The gateway's own view of a run, from its `/metrics` before and after: client frames it
//! received, and its latency histograms (free of the generator's delays); and, for a gateway
//! whose `/proc` the generator cannot read, its CPU time and memory every 2 s.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::procfs::{ServerSample, ServerStats};
use super::session::Live;

// The gateway's metric names, as docs/METRICS.md publishes them: the generator reads the gateway
// by its protocol, never by its code.
/// From reading the audio that ended an utterance to writing its answer's first audio.
const FIRST_AUDIO_LATENCY: &str = "livegate_first_audio_latency_seconds";
/// The same to an answer's first text.
const FIRST_TEXT_LATENCY: &str = "livegate_first_text_latency_seconds";
/// From the model's first audio or text of an answer to writing it to the socket.
const ANSWER_FORWARD_LATENCY: &str = "livegate_answer_forward_latency_seconds";
/// From an answer's last audio or text to the event ending its turn.
const TURN_END_LATENCY: &str = "livegate_turn_end_seconds";
/// The gateway's build, in its `build` label.
const BUILD_INFO: &str = "livegate_build_info";
/// The sim's own delay from the end of speech to its answer.
const MODEL_DELAY: &str = "livegate_model_delay_seconds";

/// What the gateway's metrics say happened during the run (all its clients, not only ours).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GatewayView {
    /// The gateway's build (`livegate_build_info`), when it says.
    pub build: Option<String>,
    /// Binary (audio) messages the gateway received from clients.
    pub audio_frames_received: u64,
    /// Text messages the gateway received from clients.
    pub text_frames_received: u64,
    /// `turnComplete` events the gateway handed to its clients' writers: against the generator's
    /// completed turns, whether answers were sent that the generator did not read in time.
    pub turn_complete_events: u64,
    /// From reading the client audio that ended an utterance to writing the first audio of its
    /// answer to the socket: the gateway-added latency as the gateway sees it, without the time
    /// the audio waited unread in its socket (with the sim, which says which input it answers;
    /// its reply delay is included).
    pub first_audio_ms: BucketQuantiles,
    /// The same to the first text of an answer in text.
    pub first_text_ms: BucketQuantiles,
    /// From the model producing an answer's first audio (or text) to the gateway writing it to
    /// the socket (the downstream half of the above).
    pub answer_forward_ms: BucketQuantiles,
    /// From writing an answer's last audio (or text) to writing the event that ends its turn
    /// (the turn's recordings are saved in between).
    pub turn_end_ms: BucketQuantiles,
}

/// Quantiles read off a Prometheus histogram (linear within a bucket, as `histogram_quantile`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BucketQuantiles {
    /// Observations.
    pub count: u64,
    /// Mean (exact: from the histogram's sum).
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// One scrape: the counters and histograms this module reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    audio_in: f64,
    text_in: f64,
    turn_complete: f64,
    first_audio: Histo,
    first_text: Histo,
    answer_forward: Histo,
    turn_end: Histo,
    /// `process_cpu_seconds_total`.
    cpu_seconds: Option<f64>,
    /// `process_resident_memory_bytes`.
    rss_bytes: Option<f64>,
    /// The `build` label of `livegate_build_info`.
    build: Option<String>,
    /// `livegate_model_delay_seconds`, from a gateway whose model's delay is known (the sim).
    model_delay_seconds: Option<f64>,
}

impl Scrape {
    /// The model's own delay after the end of speech, in milliseconds, if the gateway says.
    pub fn model_delay_ms(&self) -> Option<f64> {
        self.model_delay_seconds
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| s * 1000.0)
    }

    /// The gateway's CPU seconds and resident KiB, if it reports them.
    pub fn process(&self) -> Option<(f64, u64)> {
        Some((self.cpu_seconds?, (self.rss_bytes? / 1024.0) as u64))
    }
}

/// One histogram of a scrape.
#[derive(Debug, Clone, Default, PartialEq)]
struct Histo {
    /// Cumulative `(upper bound in seconds, count)`, in the order given (ascending, `+Inf` last).
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Histo {
    /// Takes the line if it is one of the histogram `name`'s samples.
    fn read(&mut self, name: &str, line: &str, value: f64) -> bool {
        let Some(rest) = line.strip_prefix(name) else {
            return false;
        };
        match rest {
            "_sum" => self.sum = value,
            "_count" => self.count = value,
            _ => {
                let Some(le) = rest
                    .strip_prefix("_bucket{le=\"")
                    .and_then(|r| r.strip_suffix("\"}"))
                else {
                    return false;
                };
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    match le.parse() {
                        Ok(bound) => bound,
                        Err(_) => return false,
                    }
                };
                self.buckets.push((bound, value));
            }
        }
        true
    }

    /// Quantiles of the observations made after `before`, in milliseconds.
    fn since(&self, before: &Histo) -> BucketQuantiles {
        let count = (self.count - before.count).max(0.0);
        let buckets: Vec<(f64, f64)> = self
            .buckets
            .iter()
            .map(|&(bound, n)| {
                let earlier = before
                    .buckets
                    .iter()
                    .find(|(b, _)| *b == bound)
                    .map_or(0.0, |(_, n)| *n);
                (bound, (n - earlier).max(0.0))
            })
            .collect();
        let ms = |q| quantile(&buckets, count, q) * 1000.0;
        BucketQuantiles {
            count: count as u64,
            mean: if count > 0.0 {
                (self.sum - before.sum) / count * 1000.0
            } else {
                0.0
            },
            p50: ms(0.50),
            p95: ms(0.95),
            p99: ms(0.99),
        }
    }
}

/// Fetches and parses the metrics; `None` if the gateway does not serve them.
pub async fn scrape(client: &reqwest::Client, url: &str) -> Option<Scrape> {
    let response = client
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    Some(parse(&response.text().await.ok()?))
}

/// Parses the lines of a metrics text this module reads.
pub fn parse(text: &str) -> Scrape {
    let mut scrape = Scrape::default();
    for line in text.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        match name {
            r#"livegate_frames_total{direction="in",kind="audio"}"# => scrape.audio_in = value,
            r#"livegate_frames_total{direction="in",kind="text"}"# => scrape.text_in = value,
            r#"livegate_events_total{kind="turn_complete"}"# => scrape.turn_complete = value,
            "process_cpu_seconds_total" => scrape.cpu_seconds = Some(value),
            "process_resident_memory_bytes" => scrape.rss_bytes = Some(value),
            MODEL_DELAY => scrape.model_delay_seconds = Some(value),
            _ if name.starts_with(BUILD_INFO) => {
                scrape.build = name
                    .strip_prefix(BUILD_INFO)
                    .and_then(|labels| labels.strip_prefix("{build=\""))
                    .and_then(|labels| labels.strip_suffix("\"}"))
                    .map(str::to_owned);
            }
            _ => {
                let _ = scrape.first_audio.read(FIRST_AUDIO_LATENCY, name, value)
                    || scrape.first_text.read(FIRST_TEXT_LATENCY, name, value)
                    || scrape
                        .answer_forward
                        .read(ANSWER_FORWARD_LATENCY, name, value)
                    || scrape.turn_end.read(TURN_END_LATENCY, name, value);
            }
        }
    }
    scrape
}

/// How often [`follow`] reads the gateway's `/metrics`.
const FOLLOW_EVERY: Duration = Duration::from_secs(2);

/// The gateway's CPU time and memory followed through its `/metrics`, for a gateway whose
/// `/proc` is out of reach (no pid: perhaps on another machine).
pub struct Follower {
    stop: oneshot::Sender<()>,
    samples: JoinHandle<Vec<ServerSample>>,
    /// CPU seconds and resident KiB before the run.
    first: (f64, u64),
}

impl Follower {
    /// Starts reading `url` every 2 s from `start`; `None` if `before` has no `process_*`.
    pub fn start(
        client: &reqwest::Client,
        url: &str,
        before: &Scrape,
        live: Arc<Live>,
        start: Instant,
    ) -> Option<Follower> {
        let first = before.process()?;
        let (stop, stopped) = oneshot::channel();
        let samples = tokio::spawn(follow(
            client.clone(),
            url.to_owned(),
            first.0,
            live,
            start,
            stopped,
        ));
        Some(Follower {
            stop,
            samples,
            first,
        })
    }

    /// Stops following and sums up a run of `elapsed` seconds that ended with `after`, with at
    /// most `peak` sessions connected.
    pub async fn finish(
        self,
        after: Option<&Scrape>,
        peak: usize,
        elapsed: f64,
    ) -> Option<ServerStats> {
        let _ = self.stop.send(());
        let samples = self.samples.await.ok()?;
        let (cpu, _) = after?.process()?;
        let (cpu0, rss0) = self.first;
        // A gateway restarted mid-run counts from zero again, not below it.
        let cpu_seconds = (cpu - cpu0).max(0.0);
        Some(ServerStats::of(
            None,
            cpu_seconds,
            rss0,
            samples,
            peak,
            elapsed,
        ))
    }
}

/// Samples the gateway's CPU time and memory every 2 s from `start` until `stop` fires, CPU
/// counted from `cpu0`.
async fn follow(
    client: reqwest::Client,
    url: String,
    cpu0: f64,
    live: Arc<Live>,
    start: Instant,
    mut stop: oneshot::Receiver<()>,
) -> Vec<ServerSample> {
    let mut samples = Vec::new();
    let mut ticks = tokio::time::interval_at(start, FOLLOW_EVERY);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let tick = tokio::select! {
            _ = &mut stop => break,
            tick = ticks.tick() => tick,
        };
        let sessions = live.connected.load(Ordering::Relaxed);
        if let Some((cpu, rss_kib)) = scrape(&client, &url).await.and_then(|s| s.process()) {
            samples.push(ServerSample {
                t: tick.duration_since(start).as_secs_f64(),
                sessions,
                rss_kib,
                cpu_seconds: (cpu - cpu0).max(0.0),
            });
        }
    }
    samples
}

/// What happened between two scrapes.
pub fn between(before: &Scrape, after: &Scrape) -> GatewayView {
    GatewayView {
        build: after.build.clone(),
        audio_frames_received: (after.audio_in - before.audio_in).max(0.0) as u64,
        text_frames_received: (after.text_in - before.text_in).max(0.0) as u64,
        turn_complete_events: (after.turn_complete - before.turn_complete).max(0.0) as u64,
        first_audio_ms: after.first_audio.since(&before.first_audio),
        first_text_ms: after.first_text.since(&before.first_text),
        answer_forward_ms: after.answer_forward.since(&before.answer_forward),
        turn_end_ms: after.turn_end.since(&before.turn_end),
    }
}

/// The `q` quantile (seconds) of cumulative buckets holding `count` observations; past the last
/// finite bound it is that bound (the histogram knows no more).
fn quantile(buckets: &[(f64, f64)], count: f64, q: f64) -> f64 {
    if count <= 0.0 {
        return 0.0;
    }
    let rank = q * count;
    let mut lower = (0.0, 0.0);
    for &(bound, cumulative) in buckets {
        if cumulative >= rank {
            if bound.is_infinite() {
                return lower.0;
            }
            let within = cumulative - lower.1;
            let share = if within > 0.0 {
                (rank - lower.1) / within
            } else {
                1.0
            };
            return lower.0 + (bound - lower.0) * share;
        }
        lower = (bound, cumulative);
    }
    lower.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_buckets_between_two_scrapes() {
        let text = |below_1ms: u32, below_2ms: u32, all: u32, sum: f64| {
            format!(
                "# HELP x\n\
                 livegate_build_info{{build=\"0.1.0 (4a584fd, modified)\"}} 1\n\
                 livegate_frames_total{{direction=\"in\",kind=\"audio\"}} {all}\n\
                 livegate_events_total{{kind=\"turn_complete\"}} {below_1ms}\n\
                 {ANSWER_FORWARD_LATENCY}_sum {sum}\n\
                 {ANSWER_FORWARD_LATENCY}_count {all}\n\
                 {ANSWER_FORWARD_LATENCY}_bucket{{le=\"0.001\"}} {below_1ms}\n\
                 {ANSWER_FORWARD_LATENCY}_bucket{{le=\"0.002\"}} {below_2ms}\n\
                 {ANSWER_FORWARD_LATENCY}_bucket{{le=\"+Inf\"}} {all}\n\
                 {FIRST_AUDIO_LATENCY}_sum {sum}\n\
                 {FIRST_AUDIO_LATENCY}_count {all}\n\
                 {FIRST_AUDIO_LATENCY}_bucket{{le=\"0.002\"}} {below_2ms}\n\
                 {FIRST_AUDIO_LATENCY}_bucket{{le=\"+Inf\"}} {all}\n\
                 {FIRST_TEXT_LATENCY}_sum {sum}\n\
                 {FIRST_TEXT_LATENCY}_count {below_1ms}\n\
                 {FIRST_TEXT_LATENCY}_bucket{{le=\"0.002\"}} {below_1ms}\n\
                 {FIRST_TEXT_LATENCY}_bucket{{le=\"+Inf\"}} {below_1ms}\n"
            )
        };
        let before = parse(&text(10, 10, 10, 0.005));
        // Then 100 more: 50 under 1 ms, 49 between 1 and 2 ms, 1 slower than any bound.
        let after = parse(&text(60, 109, 110, 0.105));
        let view = between(&before, &after);
        assert_eq!(view.build.as_deref(), Some("0.1.0 (4a584fd, modified)"));
        assert_eq!(view.audio_frames_received, 100);
        assert_eq!(view.turn_complete_events, 50);
        let q = &view.answer_forward_ms;
        assert_eq!(q.count, 100);
        assert!((q.mean - 1.0).abs() < 1e-9, "{q:?}");
        assert!((q.p50 - 1.0).abs() < 1e-9, "{q:?}");
        assert!(q.p95 > 1.8 && q.p95 < 2.0, "{q:?}");
        assert!((q.p99 - 2.0).abs() < 1e-9, "{q:?}");
        // The other histogram is read on its own: 99 under 2 ms, one slower.
        let q = &view.first_audio_ms;
        assert_eq!(q.count, 100);
        assert!((q.p50 - 1.0101).abs() < 1e-3, "{q:?}");
        assert!((q.p99 - 2.0).abs() < 1e-9, "{q:?}");
        // And the first text's: 50 more, all under 2 ms.
        let q = &view.first_text_ms;
        assert_eq!(q.count, 50);
        assert!(q.p99 <= 2.0, "{q:?}");
    }
}
