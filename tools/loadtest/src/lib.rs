//! `livegate loadtest`: many simulated users streaming real speech to a gateway at once, and what
//! it cost: latency to the first answer audio, audio gaps, errors, traffic, and the server's CPU
//! and memory (from `/proc` given its pid, else from its `/metrics`). Knows the gateway by its
//! WebSocket protocol, and reads its `/metrics` when it serves them.

mod arrival;
mod auth;
mod backlog;
mod calls;
mod endpoints;
mod error;
pub mod phone;
mod procfs;
pub mod report;
pub mod scrape;
mod session;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use error::{BadArgument, LoadtestError, SessionFailure};
pub use procfs::ServerStats;
pub use report::{Percentiles, Report, Traffic};
use session::{Live, Outcome, Plan};

use livegate::latch::Latch;

/// The clips used when no `--audio` is given (from `tests/fixtures`), cycled across turns.
const DEFAULT_CLIPS: [(&str, &[u8]); 3] = [
    (
        "hello.wav",
        include_bytes!("../../../tests/fixtures/hello.wav"),
    ),
    (
        "weather.wav",
        include_bytes!("../../../tests/fixtures/weather.wav"),
    ),
    (
        "count.wav",
        include_bytes!("../../../tests/fixtures/count.wav"),
    ),
];

/// What the sessions speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Protocol {
    /// livegate's own WebSocket protocol (`/ws/{user}/{session}`).
    #[default]
    Ws,
    /// Phone calls: Twilio's voice webhook and Media Streams (`/telephony/twilio/…`).
    Twilio,
}

/// Options of `livegate loadtest`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadtestArgs {
    /// The gateway's WebSocket base URL (sessions connect to `{url}/{user}/{session}`). Repeat it
    /// for several nodes: sessions are spread over them round-robin, and a session closed for a
    /// restart (1012, 1001) reconnects to the next node that answers.
    #[arg(long, default_value = "ws://127.0.0.1:8080/ws")]
    pub url: Vec<String>,
    /// Concurrent sessions.
    #[arg(long, default_value_t = 10)]
    pub sessions: usize,
    /// How long the run lasts (`60`, `60s`, `2m`, `500ms`).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Sessions opened per second while ramping up.
    #[arg(long, default_value_t = 100.0)]
    pub ramp: f64,
    /// 16 kHz mono PCM16 WAV files to speak, cycled (default: the built-in speech clips).
    #[arg(long)]
    pub audio: Vec<PathBuf>,
    /// Recorded calls to speak instead (`livegate replay export`'s bundles: a bundle's folder or
    /// a folder of them): session `i` speaks bundle `i mod n`'s input recordings in order, each
    /// a turn, its pauses included, cycled; sessions start at jittered times. Typed messages of
    /// the calls are not sent.
    #[arg(long, conflicts_with = "audio")]
    pub replay: Option<PathBuf>,
    /// Turns per session (0: as many as fit in the duration).
    #[arg(long, default_value_t = 0)]
    pub turns: u32,
    /// Sessions connect and stay silent (to measure idle memory).
    #[arg(long)]
    pub idle: bool,
    /// Every session's 20 ms frame clock on the same phase, so all sessions' frames go out
    /// together (worst-case bursts). By default phases are spread over the frame period, as
    /// independent microphones are.
    #[arg(long)]
    pub in_phase: bool,
    /// Length of each audio frame a session sends, in milliseconds (a multiple of 20): longer
    /// frames cost the gateway (and the generator) less per second of speech, for a large load
    /// on a small machine.
    #[arg(long, default_value_t = 20, value_parser = parse_frame_ms)]
    pub frame_ms: u32,
    /// Extra query string for each connection, e.g. `audio=base64`.
    #[arg(long, default_value = "")]
    pub query: String,
    /// The model's own delay from the end of speech to its answer, not counted as
    /// gateway-added: gateway-added latency is timed from the frame that ends it. By default the
    /// gateway's own figure from its /metrics (`livegate_model_delay_seconds`, served with the
    /// sim), else the sim's with its defaults: 500 ms of end-of-speech silence plus its 150 ms
    /// reply delay.
    #[arg(long)]
    pub model_delay_ms: Option<f64>,
    /// The gateway's process id: sample its CPU time and memory from /proc, with how long its
    /// threads waited for a CPU and what its sockets left unread. Without it, CPU time and memory
    /// come from the gateway's /metrics (`process_*`) every 2 s.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// The gateway's metrics endpoint, read before and after the run (default: `metrics` beside
    /// the WebSocket path, e.g. `http://127.0.0.1:8080/metrics` for `ws://127.0.0.1:8080/ws`).
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// Write the JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write an SVG plot (latency distribution, sessions over time) here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// No progress line.
    #[arg(long)]
    pub quiet: bool,
    /// Add each session's own record to the JSON report: turns per connection and the ids of
    /// the events it received that the gateway committed (neither partial nor inline audio),
    /// to check a deployment's store against what clients saw.
    #[arg(long)]
    pub session_report: bool,
    /// An operator API key: each session gets its own token from the gateway's `/api/tokens`.
    #[arg(long, env = "LIVEGATE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// A client token every session presents; its subject is every session's user.
    #[arg(long, env = "LIVEGATE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// What each session is: a WebSocket client of livegate's protocol, or a phone call on
    /// Twilio's Media Streams (its webhook posted to the gateway beside `--url`).
    #[arg(long, value_enum, default_value_t = Protocol::Ws)]
    pub protocol: Protocol,
    /// With `--protocol twilio`: sign each call's webhook with this auth token, as Twilio does.
    #[arg(long, env = "TWILIO_AUTH_TOKEN", hide_env_values = true)]
    pub twilio_auth_token: Option<String>,
}

/// The sim's own delay with its default settings: the silence that ends an utterance, then its
/// reply delay.
pub fn sim_model_delay_ms() -> f64 {
    livegate::model::sim::SimConfig::default()
        .answer_delay()
        .as_secs_f64()
        * 1000.0
}

/// Parses a frame length: a positive multiple of 20 ms, at most a second.
fn parse_frame_ms(text: &str) -> Result<u32, BadArgument> {
    match text.trim().parse::<u32>() {
        Ok(ms) if ms > 0 && ms <= 1000 && ms % 20 == 0 => Ok(ms),
        _ => Err(BadArgument::FrameMs(text.to_owned())),
    }
}

/// Parses `60`, `60s`, `2m` or `500ms`.
pub fn parse_duration(text: &str) -> Result<Duration, BadArgument> {
    let text = text.trim();
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((text, "s"), |i| text.split_at(i));
    let value: f64 = number
        .parse()
        .map_err(|_| BadArgument::Duration(text.to_owned()))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return Err(BadArgument::DurationUnit(text.to_owned())),
    };
    // Checked: a number too large for a duration is an error, not a panic.
    Duration::try_from_secs_f64(seconds).map_err(|_| BadArgument::Duration(text.to_owned()))
}

/// Reads a 16 kHz mono PCM16 WAV into raw PCM.
pub fn load_clip(name: &str, wav: &[u8]) -> Result<Bytes, LoadtestError> {
    let bad = |reason: String| LoadtestError::Audio {
        name: name.to_owned(),
        reason,
    };
    let mut reader =
        hound::WavReader::new(std::io::Cursor::new(wav)).map_err(|e| bad(e.to_string()))?;
    let spec = reader.spec();
    if (spec.sample_rate, spec.channels, spec.bits_per_sample) != (16_000, 1, 16)
        || spec.sample_format != hound::SampleFormat::Int
    {
        return Err(bad(format!(
            "need 16 kHz mono 16-bit PCM, got {} Hz, {} channel(s), {} bits",
            spec.sample_rate, spec.channels, spec.bits_per_sample
        )));
    }
    let mut pcm = Vec::with_capacity(reader.len() as usize * 2);
    for sample in reader.samples::<i16>() {
        pcm.extend_from_slice(&sample.map_err(|e| bad(e.to_string()))?.to_le_bytes());
    }
    if pcm.is_empty() {
        return Err(bad("no samples".into()));
    }
    // Whole 20 ms frames only, so every frame the model sees lines up with the generator's.
    pcm.resize(pcm.len().next_multiple_of(session::FRAME_BYTES), 0);
    Ok(Bytes::from(pcm))
}

/// Frames at or above this level (RMS, dBFS) are speech: the `sim`'s default VAD threshold.
const SPEECH_DBFS: f64 = -40.0;

/// The byte offset just past the last 20 ms frame of `pcm` that holds speech.
pub fn speech_end(pcm: &[u8]) -> usize {
    let threshold = 32768.0 * 10f64.powf(SPEECH_DBFS / 20.0);
    let mut end = 0;
    for (i, frame) in pcm.chunks(session::FRAME_BYTES).enumerate() {
        let samples = frame
            .chunks_exact(2)
            .map(|b| f64::from(i16::from_le_bytes([b[0], b[1]])));
        let (sum, n) = samples.fold((0.0, 0usize), |(s, n), x| (s + x * x, n + 1));
        if n > 0 && (sum / n as f64).sqrt() >= threshold {
            end = i * session::FRAME_BYTES + frame.len();
        }
    }
    end.max(session::FRAME_BYTES.min(pcm.len()))
}

/// Utterances, each with the byte offset where its speech ends.
type Clips = Vec<(Bytes, usize)>;

/// The input recordings of the bundles under `dir`, every bundle's in order, and each bundle's
/// range of them.
fn replay_clips(
    dir: &std::path::Path,
) -> Result<(Clips, Vec<std::ops::Range<usize>>), LoadtestError> {
    let bundles = livegate_replay::open_all(&[dir]).map_err(|e| LoadtestError::Audio {
        name: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    let mut clips = Vec::new();
    let mut calls = Vec::new();
    for bundle in &bundles {
        let first = clips.len();
        for recording in &bundle.recordings {
            // Only what the microphone sent at the protocol's binary rate.
            if recording.side == "input" && recording.rate == 16_000 && !recording.pcm.is_empty() {
                let pcm = recording.pcm.clone();
                let end = speech_end(&pcm);
                clips.push((pcm, end));
            }
        }
        if clips.len() > first {
            calls.push(first..clips.len());
        }
    }
    if calls.is_empty() {
        return Err(LoadtestError::Audio {
            name: dir.display().to_string(),
            reason: "no bundle there holds an input recording at 16 kHz".into(),
        });
    }
    Ok((clips, calls))
}

fn clips(args: &LoadtestArgs) -> Result<Clips, LoadtestError> {
    let with_end = |pcm: Bytes| {
        let end = speech_end(&pcm);
        (pcm, end)
    };
    if args.audio.is_empty() {
        return DEFAULT_CLIPS
            .iter()
            .map(|(name, wav)| load_clip(name, wav).map(with_end))
            .collect();
    }
    args.audio
        .iter()
        .map(|path| {
            let name = path.display().to_string();
            let wav = std::fs::read(path).map_err(|e| LoadtestError::Audio {
                name: name.clone(),
                reason: e.to_string(),
            })?;
            load_clip(&name, &wav).map(with_end)
        })
        .collect()
}

/// A recorded call's session starts up to one ramp gap late (spread by the golden ratio, so
/// repeatable): recorded calls do not begin on a clock.
fn jitter(args: &LoadtestArgs, index: usize, gap: Duration) -> Duration {
    if args.replay.is_none() {
        return Duration::ZERO;
    }
    gap.mul_f64((index as f64 * 0.618_033_988_749_895).fract())
}

/// Runs a load test and returns its report (also written to `--report` / `--plot`).
pub async fn run(args: &LoadtestArgs) -> Result<Report, LoadtestError> {
    run_until(args, Latch::new()).await
}

/// Runs a load test that `stop` can end early: no session opens or starts a turn once it has
/// fired, the turns under way finish, and the report covers what ran.
pub async fn run_until(args: &LoadtestArgs, stop: Latch) -> Result<Report, LoadtestError> {
    let base_urls = base_urls(args)?;
    raise_open_file_limit();
    let http = reqwest::Client::new();
    // Beside the only node: with several, the gateway's counts are one node's only if asked for.
    let metrics_url = args.metrics_url.clone().or_else(|| match &base_urls[..] {
        [only] => endpoints::metrics_url(only),
        _ => None,
    });
    let metrics_before = match &metrics_url {
        Some(url) => scrape::scrape(&http, url).await,
        None => None,
    };
    let model_delay_ms = args
        .model_delay_ms
        .or_else(|| {
            metrics_before
                .as_ref()
                .and_then(scrape::Scrape::model_delay_ms)
        })
        .unwrap_or_else(sim_model_delay_ms);
    let start = Instant::now();
    // Whole seconds: a report's date, not a measurement.
    let now = jiff::Timestamp::now();
    let started_at = now.round(jiff::Unit::Second).unwrap_or(now).to_string();
    let credentials = auth::Credentials::new(
        args.token.as_deref(),
        args.api_key.as_deref(),
        &base_urls[0],
    )?;
    let plan = Arc::new(plan(
        args,
        base_urls,
        credentials,
        start,
        stop.clone(),
        model_delay_ms,
    )?);
    let machine_before = procfs::machine_cpu();
    let live = Arc::new(Live::default());
    let sampler = procfs::Sampler::start(
        args.server_pid,
        plan.base_urls[0]
            .parse::<tokio_tungstenite::tungstenite::http::Uri>()
            .ok()
            .map(|uri| session::port_of(&uri)),
        live.clone(),
        start,
        !args.quiet,
    );

    // A gateway whose /proc is out of reach still reports its own CPU time and memory.
    let follower = match (&metrics_url, &metrics_before, args.server_pid) {
        (Some(url), Some(before), None) => {
            scrape::Follower::start(&http, url, before, live.clone(), start)
        }
        _ => None,
    };

    let mut outcomes = run_sessions(args, &plan, &live, &stop, start).await;
    let elapsed = start.elapsed().as_secs_f64();
    let mut sampled = sampler.finish().await;
    let machine_after = procfs::machine_cpu();
    let metrics_after = match (&metrics_url, &metrics_before) {
        (Some(url), Some(_)) => scrape::scrape(&http, url).await,
        _ => None,
    };
    if let Some(follower) = follower {
        let peak = sampled.peak();
        sampled.server = follower.finish(metrics_after.as_ref(), peak, elapsed).await;
    }
    let mut report = summarize(args, &outcomes, elapsed, sampled);
    if args.session_report {
        report.session_records = session_records(&mut outcomes);
    }
    report.model_delay_ms = model_delay_ms;
    report.run_id = plan.run_id.clone();
    report.started_at = started_at;
    report.stopped_early = stop.is_fired();
    report.machine_cpu_busy = machine_before
        .zip(machine_after)
        .map(|(before, after)| before.until(&after).busy);
    report.gateway = metrics_before
        .zip(metrics_after)
        .map(|(before, after)| scrape::between(&before, &after));
    write_outputs(args, &report, &outcomes)?;
    Ok(report)
}

/// The gateways' WebSocket URLs, checked along with the ramp.
fn base_urls(args: &LoadtestArgs) -> Result<Vec<String>, LoadtestError> {
    if args.sessions == 0 || args.ramp <= 0.0 {
        return Err(LoadtestError::Invalid(
            "--sessions and --ramp must be positive".into(),
        ));
    }
    let base_urls: Vec<String> = args
        .url
        .iter()
        .map(|url| url.trim_end_matches('/').to_owned())
        .collect();
    if base_urls.is_empty() {
        return Err(LoadtestError::Invalid("--url is required".into()));
    }
    if let Some(bad) = base_urls
        .iter()
        .find(|url| !url.starts_with("ws://") && !url.starts_with("wss://"))
    {
        return Err(LoadtestError::Invalid(format!(
            "--url must be ws:// or wss://, not {bad:?}"
        )));
    }
    Ok(base_urls)
}

/// What every session shares: where to connect, what to say, and when to stop.
fn plan(
    args: &LoadtestArgs,
    base_urls: Vec<String>,
    credentials: auth::Credentials,
    start: Instant,
    stop: Latch,
    model_delay_ms: f64,
) -> Result<Plan, LoadtestError> {
    let (clips, calls) = match &args.replay {
        Some(dir) => replay_clips(dir)?,
        None => (clips(args)?, Vec::new()),
    };
    Ok(Plan {
        base_urls,
        query: args.query.trim_start_matches('?').to_owned(),
        clips,
        calls,
        deadline: start + args.duration,
        stop,
        turns: args.turns,
        idle: args.idle,
        epoch: start,
        in_phase: args.in_phase,
        run_id: uuid::Uuid::new_v4().simple().to_string()[..8].to_owned(),
        model_delay_frames: (model_delay_ms.max(0.0) / f64::from(args.frame_ms)).round() as u32,
        frame: Duration::from_millis(u64::from(args.frame_ms)),
        frame_bytes: session::FRAME_BYTES * (args.frame_ms / 20) as usize,
        credentials,
        session_records: args.session_report,
    })
}

/// Opens the sessions along the ramp (until `stop`) and waits for each to end.
async fn run_sessions(
    args: &LoadtestArgs,
    plan: &Arc<Plan>,
    live: &Arc<Live>,
    stop: &Latch,
    start: Instant,
) -> Vec<Outcome> {
    let mut sessions = JoinSet::new();
    let gap = Duration::from_secs_f64(1.0 / args.ramp);
    let calls = (args.protocol == Protocol::Twilio).then(|| Arc::new(call_plan(args, plan)));
    for index in 0..args.sessions {
        tokio::select! {
            biased;
            () = stop.fired() => break,
            () = tokio::time::sleep_until(start + gap * index as u32 + jitter(args, index, gap)) => {}
        }
        match &calls {
            Some(calls) => {
                sessions.spawn(calls::run(index, plan.clone(), calls.clone(), live.clone()))
            }
            None => sessions.spawn(session::run(index, plan.clone(), live.clone())),
        };
    }
    let mut outcomes = Vec::with_capacity(args.sessions);
    while let Some(done) = sessions.join_next().await {
        match done {
            Ok(outcome) => outcomes.push(outcome),
            Err(error) => outcomes.push(Outcome {
                errors: vec![format!("session task failed: {error}")],
                ..Outcome::default()
            }),
        }
    }
    outcomes
}

/// Each session's own record, by session id.
fn session_records(outcomes: &mut [Outcome]) -> Vec<report::SessionRecord> {
    let mut records: Vec<report::SessionRecord> = outcomes
        .iter_mut()
        .map(|o| report::SessionRecord {
            session: std::mem::take(&mut o.session_id),
            turns_per_connection: std::mem::take(&mut o.turns_per_connection),
            committed_event_ids: std::mem::take(&mut o.committed_event_ids),
        })
        .collect();
    records.sort_by(|a, b| a.session.cmp(&b.session));
    records
}

/// The report as JSON (`--report`) and its plot (`--plot`).
fn write_outputs(
    args: &LoadtestArgs,
    report: &Report,
    outcomes: &[Outcome],
) -> Result<(), LoadtestError> {
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(report).unwrap_or_default();
        write(path, json.as_bytes())?;
    }
    if let Some(path) = &args.plot {
        let svg = report.svg(
            &all(outcomes, |o| &o.latencies_ms),
            &all(outcomes, |o| &o.text_latencies_ms),
        );
        write(path, svg.as_bytes())?;
    }
    Ok(())
}

/// What the calls of `--protocol twilio` share: the webhook's base beside the first `--url`,
/// and the clips as μ-law utterances.
fn call_plan(args: &LoadtestArgs, plan: &Plan) -> calls::CallPlan {
    let ws = &plan.base_urls[0];
    let http = ws
        .replacen("ws://", "http://", 1)
        .replacen("wss://", "https://", 1);
    let http_base = match http
        .find("://")
        .and_then(|i| http[i + 3..].find('/').map(|j| i + 3 + j))
    {
        Some(path) => http[..path].to_owned(),
        None => http,
    };
    calls::CallPlan {
        http_base,
        carrier: "twilio".into(),
        auth_token: args.twilio_auth_token.clone(),
        utterances: plan
            .clips
            .iter()
            .map(|(pcm, end)| phone::Utterance::from_pcm16k(pcm, *end))
            .collect(),
        http: reqwest::Client::new(),
    }
}

/// Lifts the soft limit on open files to the hard one (best effort): each session holds two
/// descriptors (its socket, and a second one to ask what it left unread at a timeout), more than
/// the usual default of 1,024 allows at a thousand sessions.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(error) = setrlimit(Resource::Nofile, raised) {
            eprintln!(
                "loadtest: could not raise the open-file limit ({error}); it stays at {:?}",
                limit.current
            );
        }
    }
}

fn write(path: &PathBuf, data: &[u8]) -> Result<(), LoadtestError> {
    std::fs::write(path, data).map_err(|source| LoadtestError::Write {
        path: path.display().to_string(),
        source,
    })
}

fn traffic(frames: u64, bytes: u64, elapsed: f64) -> Traffic {
    Traffic {
        frames,
        bytes,
        frames_per_second: frames as f64 / elapsed.max(1e-9),
        bytes_per_second: bytes as f64 / elapsed.max(1e-9),
    }
}

/// One measurement of every session, in one list.
fn all(outcomes: &[Outcome], f: fn(&Outcome) -> &Vec<f64>) -> Vec<f64> {
    outcomes.iter().flat_map(|o| f(o).iter().copied()).collect()
}

fn summarize(
    args: &LoadtestArgs,
    outcomes: &[Outcome],
    elapsed: f64,
    sampled: procfs::Sampled,
) -> Report {
    let all = |f: fn(&Outcome) -> &Vec<f64>| all(outcomes, f);
    let sum = |f: fn(&Outcome) -> u64| -> u64 { outcomes.iter().map(f).sum() };
    let latencies = all(|o| &o.latencies_ms);
    let gateway = all(|o| &o.gateway_ms);
    let connects: Vec<f64> = outcomes.iter().filter_map(|o| o.connect_ms).collect();
    let errors: u64 = outcomes.iter().map(|o| o.errors.len() as u64).sum();
    let mut connects_per_node = vec![0u64; args.url.len()];
    for outcome in outcomes {
        for (total, count) in connects_per_node.iter_mut().zip(&outcome.connects_per_node) {
            *total += count;
        }
    }
    Report {
        url: args.url.join(" "),
        urls: args.url.clone(),
        connects_per_url: connects_per_node,
        reconnects: sum(|o| o.reconnects),
        reconnect_ms: Percentiles::of(&all(|o| &o.reconnect_ms)),
        run_id: String::new(),
        session_records: Vec::new(),
        started_at: String::new(),
        generator: format!("livegate {}", livegate::BUILD),
        machine: procfs::Machine::this(),
        sessions: args.sessions,
        duration_seconds: args.duration.as_secs_f64(),
        ramp_per_second: args.ramp,
        in_phase: args.in_phase,
        idle: args.idle,
        elapsed_seconds: elapsed,
        stopped_early: false,
        connect_ms: Percentiles::of(&connects),
        latency_ms: Percentiles::of(&latencies),
        gateway_latency_ms: Percentiles::of(&gateway),
        text_latency_ms: Percentiles::of(&all(|o| &o.text_latencies_ms)),
        text_gateway_latency_ms: Percentiles::of(&all(|o| &o.text_gateway_ms)),
        model_delay_ms: 0.0,
        audio_gaps_ms: Percentiles::of(&all(|o| &o.gaps_ms)),
        turn_end_ms: Percentiles::of(&all(|o| &o.turn_ends_ms)),
        turns_completed: sum(|o| o.turns),
        interrupted: sum(|o| o.interrupted),
        sent: traffic(sum(|o| o.frames_sent), sum(|o| o.bytes_sent), elapsed),
        received: traffic(
            sum(|o| o.frames_received),
            sum(|o| o.bytes_received),
            elapsed,
        ),
        audio_bytes_sent: sum(|o| o.audio_bytes_sent),
        audio_bytes_received: sum(|o| o.audio_bytes_received),
        errors,
        error_samples: outcomes
            .iter()
            .flat_map(|o| o.errors.iter().cloned())
            .take(5)
            .collect(),
        timeouts_with_unread: sum(|o| o.timeouts_with_unread),
        unexpected_closes: outcomes.iter().filter(|o| o.unexpected_close).count() as u64,
        schedule_lag_ms: Percentiles::of(&all(|o| &o.lags_ms)),
        sessions_over_time: sampled.sessions,
        server: sampled.server,
        generator_cpu_cores: sampled.generator_cpu_cores,
        generator_cpu_system_cores: sampled.generator_cpu_system_cores,
        generator_cpu_cores_at_peak: sampled.generator_cpu_cores_at_peak,
        machine_cpu_busy: None,
        machine_cpu_at_peak: sampled.machine_at_peak,
        generator_cpu_wait_at_peak: sampled.generator_cpu_wait,
        gateway: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_one() {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

        let limit = getrlimit(Resource::Nofile);
        // One below the hard limit: a soft limit to raise that no other test can run into.
        if let Some(hard) = limit.maximum.filter(|&hard| hard > 1) {
            let lowered = Rlimit {
                current: Some(hard - 1),
                maximum: Some(hard),
            };
            setrlimit(Resource::Nofile, lowered).unwrap();
        }
        raise_open_file_limit();
        let raised = getrlimit(Resource::Nofile);
        assert_eq!(raised.current, raised.maximum);
    }

    #[test]
    fn durations_and_clips_parse() {
        assert_eq!(parse_duration("60").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("soon").is_err() && parse_duration("5h").is_err());
        for (name, wav) in DEFAULT_CLIPS {
            let pcm = load_clip(name, wav).unwrap();
            assert!(pcm.len() > 32_000, "{name}");
            let end = speech_end(&pcm);
            assert!(
                end > pcm.len() / 2 && end <= pcm.len(),
                "{name}: speech ends at {end} of {}",
                pcm.len()
            );
        }
        let mut pcm = vec![0u8; 6400];
        pcm[1001..1640]
            .iter_mut()
            .step_by(2)
            .for_each(|b| *b = 0x7f);
        assert_eq!(
            speech_end(&pcm),
            1920,
            "the end of the last frame holding loud samples"
        );
        let error = load_clip("x.wav", b"RIFF....").unwrap_err().to_string();
        assert!(error.contains("x.wav"), "{error}");
    }
}
