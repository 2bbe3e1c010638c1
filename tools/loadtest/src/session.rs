//! One simulated user: connects, speaks an utterance in real time (20 ms binary frames on a fixed
//! clock), keeps the microphone open with silence until the answer's `turnComplete`, and repeats.
//! The reader side times the first answer audio (or, for an answer in text, its first text) and
//! playback underruns.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::SplitStream;
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::{sleep_until, timeout, Instant};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::arrival::{Arrivals, StampedTcp};
use super::error::SessionFailure;
use livegate::latch::Latch;
use livegate::lock::Recover;

/// 20 ms of 16 kHz PCM16.
pub const FRAME_BYTES: usize = 640;
/// Answer audio rate assumed when an event names none.
const OUTPUT_RATE: f64 = 24_000.0;
/// Longest wait for an answer before the turn counts as an error.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest wait for a WebSocket to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a session closed by a restarting node (1012, 1001) keeps trying the nodes before it
/// counts as failed.
const RECONNECT_WINDOW: Duration = Duration::from_secs(30);
/// The first wait before a reconnect; it doubles each try, up to `RECONNECT_BACKOFF_MAX`.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(50);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Close codes after which a session reconnects: service restart, going away.
const RESTART_CODES: [u16; 2] = [1012, 1001];

type Socket = WebSocketStream<MaybeTlsStream<StampedTcp>>;

/// What every session shares.
#[derive(Debug)]
pub struct Plan {
    /// The nodes' `ws://host:port/ws` (the user and session ids are appended); session `i`
    /// starts on node `i % len`, and moves on to the next one when closed for a restart.
    pub base_urls: Vec<String>,
    /// Query string for each connection (may be empty).
    pub query: String,
    /// Utterances (PCM16 16 kHz mono), cycled, each with the byte offset where its speech ends.
    pub clips: Vec<(Bytes, usize)>,
    /// With `--replay`, each recorded call's range of `clips`: session `i` speaks call
    /// `i mod len`'s, in order. Empty: session `i`'s turn `t` speaks clip `i + t`.
    pub calls: Vec<std::ops::Range<usize>>,
    /// Stop starting turns after this instant.
    pub deadline: Instant,
    /// Fires when the run is stopped early (Ctrl-C): no session starts another turn, and idle
    /// sessions leave.
    pub stop: Latch,
    /// Most turns per session (0: as many as fit).
    pub turns: u32,
    /// Connect and wait only.
    pub idle: bool,
    /// The run's start: frame clocks are phased against it.
    pub epoch: Instant,
    /// All frame clocks on one phase instead of spread over the frame period.
    pub in_phase: bool,
    /// Run id, so repeated runs never reuse sessions.
    pub run_id: String,
    /// Frames after the last speech frame that the model waits before answering (its
    /// end-of-speech silence): sending the last of them is when the model can answer.
    pub model_delay_frames: u32,
    /// What each session authenticates with.
    pub credentials: super::auth::Credentials,
    /// Keep each session's record: turns per connection, ids of committed events.
    pub session_records: bool,
    /// The frame period (20 ms unless `--frame-ms` says otherwise).
    pub frame: Duration,
    /// Bytes of PCM in each frame.
    pub frame_bytes: usize,
}

/// The golden ratio's fraction: its multiples modulo 1 spread evenly over [0, 1) for any count.
const GOLDEN_FRACTION: f64 = 0.618_033_988_749_895;

impl Plan {
    /// The clip session `index` speaks in its turn `turn`.
    pub fn clip_index(&self, index: usize, turn: u32) -> usize {
        match self.calls.get(index % self.calls.len().max(1)) {
            Some(call) if !call.is_empty() => call.start + turn as usize % call.len(),
            _ => (index + turn as usize) % self.clips.len(),
        }
    }

    /// When session `index`'s frame clock starts: the first instant from `now` on at the
    /// session's phase of the 20 ms frame period.
    ///
    /// Phases are spread evenly over the period whatever the ramp: a session started each
    /// 10 ms (`--ramp 100`) would otherwise put every frame of the run on two phases, 500
    /// frames landing together each 10 ms, a burst no set of independent microphones makes.
    pub fn clock_start(&self, index: usize, now: Instant) -> Instant {
        let phase = if self.in_phase {
            0.0
        } else {
            (index as f64 * GOLDEN_FRACTION).fract()
        };
        let offset = self.frame.mul_f64(phase);
        // Below a frame, so the cast keeps it whole.
        let into_period = Duration::from_nanos(
            (now.saturating_duration_since(self.epoch).as_nanos() % self.frame.as_nanos()) as u64,
        );
        let at = now - into_period + offset;
        if offset < into_period {
            at + self.frame
        } else {
            at
        }
    }
}

/// Counters the progress line reads while the run goes on.
#[derive(Debug, Default)]
pub struct Live {
    /// Sessions connected now.
    pub connected: AtomicUsize,
    /// Answers completed.
    pub turns: AtomicU64,
    /// Errors so far.
    pub errors: AtomicU64,
    /// Frames sent so far.
    pub frames_sent: AtomicU64,
}

/// What one session measured.
#[derive(Debug, Default)]
pub struct Outcome {
    pub connect_ms: Option<f64>,
    pub latencies_ms: Vec<f64>,
    pub gateway_ms: Vec<f64>,
    pub text_latencies_ms: Vec<f64>,
    pub text_gateway_ms: Vec<f64>,
    pub gaps_ms: Vec<f64>,
    pub turn_ends_ms: Vec<f64>,
    pub lags_ms: Vec<f64>,
    pub turns: u64,
    pub interrupted: u64,
    pub frames_sent: u64,
    pub bytes_sent: u64,
    pub audio_bytes_sent: u64,
    pub frames_received: u64,
    pub bytes_received: u64,
    pub audio_bytes_received: u64,
    pub errors: Vec<String>,
    /// Turns that timed out with bytes from the gateway still unread.
    pub timeouts_with_unread: u64,
    pub unexpected_close: bool,
    /// Connections opened again after a node closed with 1012 or 1001.
    pub reconnects: u64,
    /// From each such close to the new connection being open.
    pub reconnect_ms: Vec<f64>,
    /// Connections opened to each node (by `Plan::base_urls` index).
    pub connects_per_node: Vec<u64>,
    /// The session's id.
    pub session_id: String,
    /// Answers completed on each connection, in order.
    pub turns_per_connection: Vec<u64>,
    /// Ids of the committed events received (with `Plan::session_records`).
    pub committed_event_ids: Vec<String>,
}

/// The turn in progress, shared by the writer and the reader.
#[derive(Debug, Default)]
struct Turn {
    /// When the last speech frame went out (None while speaking).
    speech_end: Option<Instant>,
    /// When the frame that completes the model's delay went out: the model can answer from
    /// then on, so what comes after is the gateway's (and the generator's reading) time.
    answerable: Option<Instant>,
    /// The first answer audio of this turn was seen.
    answered: bool,
    /// The first answer text of this turn was seen.
    text_answered: bool,
    /// An input transcription came during this turn.
    transcribed: bool,
    /// When the audio received so far would finish playing.
    playback_end: Option<Instant>,
    /// When this turn's last answer audio or text arrived.
    last_answer: Option<Instant>,
    /// End of speech to the first answer audio, per turn answered with audio.
    latencies_ms: Vec<f64>,
    /// From when the model could answer to the first answer audio.
    gateway_ms: Vec<f64>,
    /// The same two for the first answer text, per turn answered with text.
    text_latencies_ms: Vec<f64>,
    text_gateway_ms: Vec<f64>,
    gaps_ms: Vec<f64>,
    /// Last answer audio or text to `turnComplete`, per answered turn.
    turn_ends_ms: Vec<f64>,
}

impl Turn {
    /// How far the answer got, to tell a model that never heard the utterance from a lost end.
    fn stage(&self) -> &'static str {
        match (self.transcribed, self.answered, self.text_answered) {
            (_, true, _) => "answer audio came, its turnComplete did not",
            (_, false, true) => "answer text came, its turnComplete did not",
            (true, false, false) => "an input transcription came, no answer",
            (false, false, false) => "neither an input transcription nor an answer came",
        }
    }

    /// Answer audio (or text, with `text`) arrived at `now`: the turn's first of its kind is
    /// timed from the end of speech and from when the model could answer.
    fn answer_arrived(&mut self, text: bool, now: Instant) {
        self.last_answer = Some(now);
        // Nothing is timed while the utterance is still going out.
        let Some(end) = self.speech_end else {
            return;
        };
        let answerable = self.answerable;
        let (seen, latencies, added) = if text {
            (
                &mut self.text_answered,
                &mut self.text_latencies_ms,
                &mut self.text_gateway_ms,
            )
        } else {
            (
                &mut self.answered,
                &mut self.latencies_ms,
                &mut self.gateway_ms,
            )
        };
        if std::mem::replace(seen, true) {
            return;
        }
        latencies.push(now.saturating_duration_since(end).as_secs_f64() * 1000.0);
        // From when the model could answer; an answer before that (a model quicker than
        // `--model-delay-ms`) counts as nothing added.
        added.push(answerable.map_or(0.0, |at| {
            now.saturating_duration_since(at).as_secs_f64() * 1000.0
        }));
    }
}

/// What the writer and reader of one connection share.
#[derive(Default)]
struct Shared {
    turn: Mutex<Turn>,
    turn_done: Notify,
    /// The writer is closing: a close from now on is expected.
    closing: std::sync::atomic::AtomicBool,
    /// The node closed the connection for a restart (1012, 1001): the session moves on.
    restarting: std::sync::atomic::AtomicBool,
    /// Wakes the writer when `restarting` is set.
    restart: Notify,
    /// Keep the ids of committed events.
    record_ids: bool,
}

impl Shared {
    fn turn(&self) -> MutexGuard<'_, Turn> {
        self.turn.lock_or_recover()
    }
}

/// Runs session `index` of the plan to its end, on node `index % nodes`; when a node closes it
/// for a restart (1012, 1001), the session reconnects, with backoff, to whichever node answers
/// first (the next one tried first) and goes on with the same session id.
pub async fn run(index: usize, plan: Arc<Plan>, live: Arc<Live>) -> Outcome {
    let nodes = plan.base_urls.len().max(1);
    let mut outcome = Outcome {
        connects_per_node: vec![0; nodes],
        ..Outcome::default()
    };
    let user = plan
        .credentials
        .user()
        .map_or_else(|| format!("load-{}", plan.run_id), str::to_owned);
    let session_id = format!("s{index}");
    outcome.session_id.clone_from(&session_id);
    // Minted once, before the clock starts: connecting is what is timed, and a reconnect to
    // another node presents the same token.
    let bearer = match plan.credentials.bearer(&user, &session_id).await {
        Ok(bearer) => bearer,
        Err(error) => {
            outcome.errors.push(error.to_string());
            live.errors.fetch_add(1, Ordering::Relaxed);
            return outcome;
        }
    };
    let path = format!(
        "/{user}/{session_id}{}",
        if plan.query.is_empty() {
            String::new()
        } else {
            format!("?{}", plan.query)
        }
    );
    let mut node = index % nodes;
    // Turns answered so far, across connections.
    let mut turn: u32 = 0;
    // When the last connection was closed for a restart.
    let mut closed_for_restart: Option<Instant> = None;
    loop {
        let started = Instant::now();
        let arrivals = Arrivals::new();
        let connected = match closed_for_restart {
            None => match timeout(
                CONNECT_TIMEOUT,
                connect(
                    &url(&plan, node, &path),
                    bearer.as_deref(),
                    arrivals.clone(),
                ),
            )
            .await
            {
                Ok(Ok(connected)) => Ok(connected),
                Ok(Err(error)) => Err(SessionFailure::Connect(Box::new(error))),
                Err(_) => Err(SessionFailure::ConnectTimeout),
            },
            Some(_) => {
                reconnect(index, &plan, &path, bearer.as_deref(), &mut node, &arrivals).await
            }
        };
        let (socket, probe) = match connected {
            Ok(connected) => connected,
            Err(error) => {
                outcome.errors.push(error.to_string());
                live.errors.fetch_add(1, Ordering::Relaxed);
                break;
            }
        };
        outcome.connects_per_node[node] += 1;
        match closed_for_restart {
            None => outcome.connect_ms = Some(started.elapsed().as_secs_f64() * 1000.0),
            Some(closed) => {
                outcome.reconnects += 1;
                outcome
                    .reconnect_ms
                    .push(closed.elapsed().as_secs_f64() * 1000.0);
            }
        }
        live.connected.fetch_add(1, Ordering::Relaxed);
        let restarted = run_connection(
            index,
            &plan,
            &live,
            socket,
            &probe,
            arrivals,
            &mut turn,
            &mut outcome,
        )
        .await;
        live.connected.fetch_sub(1, Ordering::Relaxed);
        match restarted {
            Some(closed) if Instant::now() < plan.deadline && !plan.stop.is_fired() => {
                closed_for_restart = Some(closed);
            }
            _ => break,
        }
    }
    outcome
}

/// Session path `path` on node `node`.
fn url(plan: &Plan, node: usize, path: &str) -> String {
    format!("{}{path}", plan.base_urls[node % plan.base_urls.len()])
}

/// Connects again after a restart close: tries the nodes in turn from the one after `node`,
/// waiting a growing backoff (spread per session, so the sessions of a restarting node do not
/// all arrive at once) before each try, for up to `RECONNECT_WINDOW`. `node` ends on the node
/// that answered.
async fn reconnect(
    index: usize,
    plan: &Plan,
    path: &str,
    bearer: Option<&str>,
    node: &mut usize,
    arrivals: &Arc<Arrivals>,
) -> Result<(Socket, OwnedFd), SessionFailure> {
    let give_up = Instant::now() + RECONNECT_WINDOW;
    let mut backoff = RECONNECT_BACKOFF;
    let mut tries = 0u32;
    loop {
        tries += 1;
        *node = (*node + 1) % plan.base_urls.len().max(1);
        let spread = 0.5 + (index as f64 * GOLDEN_FRACTION + f64::from(tries) * 0.37).fract();
        tokio::select! {
            () = tokio::time::sleep(backoff.mul_f64(spread)) => {}
            () = plan.stop.fired() => return Err(SessionFailure::Stopped),
        }
        let error = match timeout(
            CONNECT_TIMEOUT,
            connect(&url(plan, *node, path), bearer, arrivals.clone()),
        )
        .await
        {
            Ok(Ok(connected)) => return Ok(connected),
            Ok(Err(error)) => error,
            Err(_) => SessionFailure::ConnectTimeout,
        };
        if Instant::now() >= give_up {
            return Err(SessionFailure::Reconnect {
                tries,
                last: Box::new(error),
            });
        }
        backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
    }
}

/// Drives one connection of a session: speaks (or idles) until the deadline, a failure, or a
/// restart close, whose arrival it returns. What the connection measured goes into `outcome`.
#[allow(clippy::too_many_arguments)]
async fn run_connection(
    index: usize,
    plan: &Plan,
    live: &Arc<Live>,
    socket: Socket,
    probe: &OwnedFd,
    arrivals: Arc<Arrivals>,
    turn: &mut u32,
    outcome: &mut Outcome,
) -> Option<Instant> {
    let (mut sink, stream) = socket.split();
    let shared = Arc::new(Shared {
        record_ids: plan.session_records,
        ..Shared::default()
    });
    let reader = tokio::spawn(read(stream, shared.clone(), live.clone(), arrivals));
    // A send that failed: an error unless the node closed the connection for a restart.
    let mut send_failed = None;

    if plan.idle {
        tokio::select! {
            () = sleep_until(plan.deadline) => {}
            () = plan.stop.fired() => {}
            () = shared.restart.notified() => {}
        }
    } else if let Err(stop) = speak(index, plan, &shared, live, &mut sink, outcome, turn).await {
        let error = match stop {
            // A failed send after a restart close is that close, not an error.
            _ if shared.restarting.load(Ordering::Relaxed) => None,
            Stop::Restart => None,
            // Or before the reader has read that close: decided once the reader is done.
            Stop::Failed(error) => {
                send_failed = Some(error);
                None
            }
            Stop::Timeout(stage) => {
                // Was the answer there, unread by a generator too far behind?
                let unread = unread_bytes(probe).unwrap_or(0);
                if unread > 0 {
                    outcome.timeouts_with_unread += 1;
                }
                Some(timeout_error(stage, unread))
            }
        };
        if let Some(error) = error {
            outcome.errors.push(error);
            live.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    shared.closing.store(true, Ordering::Relaxed);
    let _ = timeout(Duration::from_secs(5), sink.close()).await;
    let mut restarted = None;
    match timeout(Duration::from_secs(10), reader).await {
        Ok(Ok(read)) => {
            outcome.frames_received += read.frames;
            outcome.bytes_received += read.bytes;
            outcome.audio_bytes_received += read.audio_bytes;
            outcome.turns += read.turns;
            outcome.turns_per_connection.push(read.turns);
            outcome.committed_event_ids.extend(read.committed);
            outcome.interrupted += read.interrupted;
            outcome.unexpected_close |= read.unexpected_close;
            outcome.errors.extend(read.errors);
            restarted = read.restart_close;
        }
        _ => outcome.errors.push("the reader did not finish".into()),
    }
    if let Some(error) = send_failed.filter(|_| restarted.is_none()) {
        outcome.errors.push(error.to_string());
        live.errors.fetch_add(1, Ordering::Relaxed);
    }
    let measured = std::mem::take(&mut *shared.turn());
    outcome.latencies_ms.extend(measured.latencies_ms);
    outcome.gateway_ms.extend(measured.gateway_ms);
    outcome.text_latencies_ms.extend(measured.text_latencies_ms);
    outcome.text_gateway_ms.extend(measured.text_gateway_ms);
    outcome.gaps_ms.extend(measured.gaps_ms);
    outcome.turn_ends_ms.extend(measured.turn_ends_ms);
    restarted
}

/// Opens the WebSocket over a TCP stream whose reads are stamped with their arrival; also returns
/// a second descriptor of the socket, to ask how much the reader has left unread.
async fn connect(
    url: &str,
    bearer: Option<&str>,
    arrivals: Arc<Arrivals>,
) -> Result<(Socket, OwnedFd), SessionFailure> {
    let config = WebSocketConfig::default()
        .read_buffer_size(16 * 1024)
        .write_buffer_size(0);
    let request = livegate_replay::client::request(url, bearer)?;
    let uri = request.uri();
    let host = uri.host().ok_or(SessionFailure::NoHost)?;
    // An IPv6 literal comes bracketed in a URI, not in a socket address.
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = port_of(uri);
    let tcp = TcpStream::connect((host.as_str(), port)).await?;
    // No Nagle: each 20 ms frame must leave when it is due.
    tcp.set_nodelay(true)?;
    let probe = tcp.as_fd().try_clone_to_owned()?;
    let stream = StampedTcp::new(tcp, arrivals);
    let (socket, _) =
        tokio_tungstenite::client_async_tls_with_config(request, stream, Some(config), None)
            .await
            .map_err(SessionFailure::Handshake)?;
    Ok((socket, probe))
}

/// The port a WebSocket URI names, or its scheme's (443 for `wss`, 80 otherwise).
pub fn port_of(uri: &tokio_tungstenite::tungstenite::http::Uri) -> u16 {
    uri.port_u16()
        .unwrap_or(if uri.scheme_str() == Some("wss") {
            443
        } else {
            80
        })
}

/// Bytes the kernel holds on the socket that the reader has not taken yet.
fn unread_bytes(socket: &OwnedFd) -> Option<u64> {
    rustix::io::ioctl_fionread(socket).ok()
}

/// Why a session's writer stopped before its deadline.
#[derive(Debug)]
enum Stop {
    /// No `turnComplete` within `ANSWER_TIMEOUT`; how far the answer got.
    Timeout(&'static str),
    /// Sending failed.
    Failed(SessionFailure),
    /// The node closed the connection for a restart.
    Restart,
}

/// A turn's timeout error. With bytes from the gateway still unread, the generator fell behind
/// reading: what it waited for may well have been among them.
fn timeout_error(stage: &str, unread: u64) -> String {
    let error = format!("no turnComplete within {ANSWER_TIMEOUT:?}: {stage}");
    if unread == 0 {
        error
    } else {
        format!("{error}, with {unread} bytes from the gateway still unread (the generator fell behind reading)")
    }
}

/// The writer: utterance, then silence until the answer is complete, until the deadline.
async fn speak(
    index: usize,
    plan: &Plan,
    shared: &Shared,
    live: &Live,
    sink: &mut futures::stream::SplitSink<Socket, Message>,
    outcome: &mut Outcome,
    turn: &mut u32,
) -> Result<(), Stop> {
    let frame_bytes = plan.frame_bytes;
    let silence = Bytes::from(vec![0u8; frame_bytes]);
    let start = plan.clock_start(index, Instant::now());
    let mut n: u32 = 0;
    let restart = shared.restart.notified();
    tokio::pin!(restart);
    while Instant::now() < plan.deadline
        && !plan.stop.is_fired()
        && (plan.turns == 0 || *turn < plan.turns)
    {
        let (clip, speech_end) = &plan.clips[plan.clip_index(index, *turn)];
        {
            // A fresh turn that keeps what the session measured so far: a mark added to `Turn`
            // later starts each turn unset without being listed here.
            let mut t = shared.turn();
            *t = Turn {
                latencies_ms: std::mem::take(&mut t.latencies_ms),
                gateway_ms: std::mem::take(&mut t.gateway_ms),
                text_latencies_ms: std::mem::take(&mut t.text_latencies_ms),
                text_gateway_ms: std::mem::take(&mut t.text_gateway_ms),
                gaps_ms: std::mem::take(&mut t.gaps_ms),
                turn_ends_ms: std::mem::take(&mut t.turn_ends_ms),
                ..Turn::default()
            };
        }
        let done = shared.turn_done.notified();
        tokio::pin!(done);
        // This turn's marks, kept here so the shared turn is locked only when one is set.
        let mut marks = Marks::default();
        for chunk in (0..clip.len()).step_by(frame_bytes) {
            if shared.restarting.load(Ordering::Relaxed) {
                return Err(Stop::Restart);
            }
            let frame = clip.slice(chunk..(chunk + frame_bytes).min(clip.len()));
            let sent = send_frame(start, plan.frame, &mut n, frame, sink, outcome, live)
                .await
                .map_err(Stop::Failed)?;
            // Latency counts from the last frame with speech in it, not from trailing silence.
            if chunk + frame_bytes >= *speech_end && marks.speech_end_slot.is_none() {
                marks.speech_end_slot = Some(n - 1);
                shared.turn().speech_end = Some(sent);
            }
            marks.after_frame(shared, plan, n, sent);
        }
        // The microphone stays open: silence until the answer is complete.
        let give_up = Instant::now() + ANSWER_TIMEOUT;
        loop {
            let next = start + plan.frame * n;
            tokio::select! {
                // An answer already complete is never counted as timed out.
                biased;
                () = &mut done => break,
                // The turn under way is dropped; the session says it again on the next node.
                () = &mut restart => return Err(Stop::Restart),
                () = sleep_until(next) => {
                    if Instant::now() > give_up {
                        return Err(Stop::Timeout(shared.turn().stage()));
                    }
                    let sent = send_frame(start, plan.frame, &mut n, silence.clone(), sink, outcome, live)
                        .await
                        .map_err(Stop::Failed)?;
                    marks.after_frame(shared, plan, n, sent);
                }
            }
        }
        *turn += 1;
    }
    Ok(())
}

/// Where the writer is in a turn.
#[derive(Debug, Default)]
struct Marks {
    /// The slot (frame number) of the last speech frame.
    speech_end_slot: Option<u32>,
    /// The frame completing the model's delay has gone out.
    answerable: bool,
}

impl Marks {
    /// Notes when the frame completing the model's delay went out (`n` frames sent so far, the
    /// last at `sent`).
    fn after_frame(&mut self, shared: &Shared, plan: &Plan, n: u32, sent: Instant) {
        if let (Some(end), false) = (self.speech_end_slot, self.answerable) {
            if n > end.saturating_add(plan.model_delay_frames) {
                self.answerable = true;
                shared.turn().answerable = Some(sent);
            }
        }
    }
}

/// Sends frame `n` at its slot on the session's clock, recording how late it went out; returns
/// the instant just before the send, so latencies timed from it are never short.
async fn send_frame(
    start: Instant,
    period: Duration,
    n: &mut u32,
    frame: Bytes,
    sink: &mut futures::stream::SplitSink<Socket, Message>,
    outcome: &mut Outcome,
    live: &Live,
) -> Result<Instant, SessionFailure> {
    let slot = start + period * *n;
    sleep_until(slot).await;
    let sent = Instant::now();
    outcome
        .lags_ms
        .push(sent.saturating_duration_since(slot).as_secs_f64() * 1000.0);
    let len = frame.len() as u64;
    sink.send(Message::Binary(frame))
        .await
        .map_err(SessionFailure::Send)?;
    *n += 1;
    outcome.frames_sent += 1;
    outcome.bytes_sent += len;
    outcome.audio_bytes_sent += len;
    live.frames_sent.fetch_add(1, Ordering::Relaxed);
    Ok(sent)
}

#[derive(Debug, Default)]
struct Read {
    frames: u64,
    bytes: u64,
    audio_bytes: u64,
    turns: u64,
    interrupted: u64,
    unexpected_close: bool,
    errors: Vec<String>,
    /// When the node closed the connection for a restart (1012, 1001).
    restart_close: Option<Instant>,
    /// Ids of committed events, when the plan keeps them.
    committed: Vec<String>,
}

/// The reader: counts what arrives and times answers.
async fn read(
    mut stream: SplitStream<Socket>,
    shared: Arc<Shared>,
    live: Arc<Live>,
    arrivals: Arc<Arrivals>,
) -> Read {
    let mut read = Read::default();
    loop {
        let message = match stream.next().await {
            Some(Ok(message)) => message,
            Some(Err(error)) => {
                if !shared.closing.load(Ordering::Relaxed) {
                    read.unexpected_close = true;
                    read.errors.push(format!("connection failed: {error}"));
                }
                break;
            }
            None => {
                if !shared.closing.load(Ordering::Relaxed) {
                    read.unexpected_close = true;
                }
                break;
            }
        };
        read.frames += 1;
        match message {
            Message::Binary(data) => {
                read.bytes += data.len() as u64;
                audio(&shared, &mut read, data.len(), OUTPUT_RATE, &arrivals);
            }
            Message::Text(text) => {
                read.bytes += text.len() as u64;
                event(text.as_str(), &shared, &live, &mut read, &arrivals);
            }
            Message::Close(frame) => {
                let code = frame.map(|f| u16::from(f.code));
                if code.is_some_and(|c| RESTART_CODES.contains(&c)) {
                    read.restart_close = Some(Instant::now());
                    shared.restarting.store(true, Ordering::Relaxed);
                    shared.restart.notify_one();
                } else if !shared.closing.load(Ordering::Relaxed) {
                    read.unexpected_close = true;
                }
                break;
            }
            _ => {}
        }
    }
    read
}

/// One JSON event. Only a few flags matter here, so it is scanned, not parsed: at a thousand
/// sessions a full parse of every event costs the generator more CPU than the gateway uses.
fn event(text: &str, shared: &Shared, live: &Live, read: &mut Read, arrivals: &Arrivals) {
    if text.contains("\"errorCode\"") {
        live.errors.fetch_add(1, Ordering::Relaxed);
        if read.errors.len() < 5 {
            let detail = serde_json::from_str::<Value>(text).map_or_else(
                |_| text.chars().take(200).collect(),
                |e| {
                    format!(
                        "{}: {}",
                        e["errorCode"],
                        e["errorMessage"].as_str().unwrap_or_default()
                    )
                },
            );
            read.errors.push(format!("error event {detail}"));
        }
    }
    // base64 mode: the audio is inside the JSON.
    const AUDIO: &str = "\"inlineData\":{\"data\":\"";
    if let Some(start) = text.find(AUDIO) {
        let data = &text[start + AUDIO.len()..];
        let len = data.find('"').unwrap_or(0);
        audio(shared, read, len * 3 / 4, OUTPUT_RATE, arrivals);
    }
    // TEXT modality: the answer is the model's text, not its thoughts. (Transcriptions are not
    // `content`.)
    const TEXT: &str = "\"content\":{\"parts\":[{\"text\":";
    if text.contains(TEXT)
        && !text.contains("\"role\":\"user\"")
        && !text.contains("\"thought\":true")
    {
        let now = Instant::from_std(arrivals.latest_or_now());
        shared.turn().answer_arrived(true, now);
    }
    if text.contains("\"inputTranscription\"") {
        shared.turn().transcribed = true;
    }
    if text.contains("\"interrupted\":true") {
        read.interrupted += 1;
    }
    if shared.record_ids {
        if let Some(id) = committed_id(text) {
            read.committed.push(id);
        }
    }
    if text.contains("\"turnComplete\":true") {
        let now = Instant::from_std(arrivals.latest_or_now());
        let mut turn = shared.turn();
        if let Some(last) = turn.last_answer.take() {
            let end = now.saturating_duration_since(last).as_secs_f64() * 1000.0;
            turn.turn_ends_ms.push(end);
        }
        drop(turn);
        read.turns += 1;
        live.turns.fetch_add(1, Ordering::Relaxed);
        shared.turn_done.notify_one();
    }
}

/// The id of an event the gateway committed before sending it: neither partial nor carrying
/// inline audio (with or without its data), nor an error of the connection's own. Parsed whole:
/// only a run that keeps session records pays for it.
fn committed_id(text: &str) -> Option<String> {
    let event: Value = serde_json::from_str(text).ok()?;
    let inline = event["content"]["parts"]
        .as_array()
        .is_some_and(|parts| parts.iter().any(|p| p.get("inlineData").is_some()));
    // A resumption update reaches the client but is not history: the session row keeps the
    // latest handle.
    let resumption = event.get("liveSessionResumptionUpdate").is_some();
    if event["partial"] == true || inline || resumption || event.get("errorCode").is_some() {
        return None;
    }
    event["id"].as_str().map(str::to_owned)
}

/// Answer audio arrived (at the socket when `arrivals` says): time the first of the turn and track
/// playback underruns.
fn audio(shared: &Shared, read: &mut Read, bytes: usize, rate: f64, arrivals: &Arrivals) {
    read.audio_bytes += bytes as u64;
    let now = Instant::from_std(arrivals.latest_or_now());
    let mut turn = shared.turn();
    turn.answer_arrived(false, now);
    if let Some(playback_end) = turn.playback_end {
        if now > playback_end {
            let gap = (now - playback_end).as_secs_f64() * 1000.0;
            turn.gaps_ms.push(gap);
        }
    }
    let plays = Duration::from_secs_f64(bytes as f64 / 2.0 / rate);
    let from = turn.playback_end.map_or(now, |end| end.max(now));
    turn.playback_end = Some(from + plays);
}

/// Prints the live counters (for the progress line).
pub(crate) fn progress(live: &Live, t: f64) -> String {
    format!(
        "{t:6.1} s  connected {:5}  turns {:7}  frames sent {:9}  errors {}",
        live.connected.load(Ordering::Relaxed),
        live.turns.load(Ordering::Relaxed),
        live.frames_sent.load(Ordering::Relaxed),
        live.errors.load(Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default frame period.
    const FRAME: Duration = Duration::from_millis(20);

    #[test]
    fn the_port_comes_from_the_url_or_its_scheme() {
        let port = |url: &str| port_of(&url.parse().unwrap());
        assert_eq!(port("ws://127.0.0.1:18081/ws"), 18081);
        assert_eq!(port("ws://localhost/ws"), 80);
        assert_eq!(port("wss://example.com/ws?x=1"), 443);
        assert_eq!(port("ws://[::1]:9000/ws"), 9000);
        assert_eq!(port("ws://[::1]/ws"), 80);
    }

    #[test]
    fn a_timeout_says_when_the_gateway_had_sent_bytes_left_unread() {
        use std::io::Write;

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let probe = client.as_fd().try_clone_to_owned().unwrap();
        assert_eq!(unread_bytes(&probe), Some(0));

        server.write_all(b"hello").unwrap();
        // Blocks until the bytes are there, and leaves them unread.
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut peeked = [0u8; 5];
        assert_eq!(client.peek(&mut peeked).unwrap(), 5);
        assert_eq!(unread_bytes(&probe), Some(5));

        let stage = "answer audio came, its turnComplete did not";
        assert_eq!(
            timeout_error(stage, 0),
            format!("no turnComplete within 20s: {stage}")
        );
        let behind = timeout_error(stage, 5);
        assert!(
            behind.starts_with(&timeout_error(stage, 0))
                && behind.contains("5 bytes from the gateway still unread"),
            "{behind}"
        );
    }

    fn plan(in_phase: bool) -> Plan {
        Plan {
            base_urls: vec![String::new()],
            query: String::new(),
            clips: Vec::new(),
            calls: Vec::new(),
            deadline: Instant::now(),
            stop: Latch::new(),
            turns: 0,
            idle: false,
            epoch: Instant::now(),
            in_phase,
            run_id: String::new(),
            model_delay_frames: 0,
            credentials: Default::default(),
            session_records: false,
            frame: FRAME,
            frame_bytes: FRAME_BYTES,
        }
    }

    /// Where in the frame period a clock starts, in whole microseconds.
    fn phase_us(plan: &Plan, start: Instant) -> u128 {
        (start - plan.epoch).as_micros() % FRAME.as_micros()
    }

    #[test]
    fn clocks_start_within_a_frame_at_phases_spread_over_the_period() {
        let plan = plan(false);
        let mut phases = Vec::new();
        for index in 0..100 {
            // Sessions started every 10 ms, as `--ramp 100` starts them.
            let now = plan.epoch + Duration::from_millis(10) * index as u32;
            let start = plan.clock_start(index, now);
            assert!(start >= now && start < now + FRAME, "session {index}");
            phases.push(phase_us(&plan, start));
        }
        // Every 2 ms tenth of the period holds about a tenth of the clocks.
        for tenth in 0..10u128 {
            let count = phases.iter().filter(|p| **p / 2_000 == tenth).count();
            assert!((7..=13).contains(&count), "tenth {tenth}: {count} clocks");
        }
    }

    #[test]
    fn in_phase_clocks_all_start_on_one_phase() {
        let plan = plan(true);
        for index in 0..20 {
            let now = plan.epoch + Duration::from_micros(10_300) * index as u32;
            let start = plan.clock_start(index, now);
            assert!(start >= now && start < now + FRAME, "session {index}");
            assert_eq!(phase_us(&plan, start), 0, "session {index}");
        }
    }

    /// What the reader's event and audio handlers work on, fresh.
    fn reader() -> (Shared, Live, Read, Arc<Arrivals>) {
        (
            Shared::default(),
            Live::default(),
            Read::default(),
            Arrivals::new(),
        )
    }

    #[test]
    fn a_turn_that_times_out_says_how_far_its_answer_got() {
        let (shared, live, mut read, arrivals) = reader();
        assert_eq!(
            shared.turn().stage(),
            "neither an input transcription nor an answer came"
        );
        let heard = r#"{"inputTranscription":{"text":"[speech 1.20 s]","finished":true}}"#;
        event(heard, &shared, &live, &mut read, &arrivals);
        assert_eq!(
            shared.turn().stage(),
            "an input transcription came, no answer"
        );
        shared.turn().speech_end = Some(Instant::now());
        event(MODEL_TEXT, &shared, &live, &mut read, &arrivals);
        assert_eq!(
            shared.turn().stage(),
            "answer text came, its turnComplete did not"
        );
        audio(&shared, &mut read, 9_600, OUTPUT_RATE, &arrivals);
        assert_eq!(
            shared.turn().stage(),
            "answer audio came, its turnComplete did not"
        );
        assert_eq!(read.turns, 0);
    }

    #[test]
    fn only_events_the_gateway_committed_count_as_committed() {
        let committed = [
            r#"{"id":"e1","turnComplete":true}"#,
            r#"{"id":"e2","content":{"parts":[{"text":"You said"}],"role":"model"}}"#,
            r#"{"id":"e3","content":{"parts":[{"fileData":{"fileUri":"artifact://x"}}]}}"#,
        ];
        let ids: Vec<_> = committed.iter().filter_map(|t| committed_id(t)).collect();
        assert_eq!(ids, ["e1", "e2", "e3"]);
        for not_committed in [
            MODEL_TEXT,
            r#"{"id":"a","content":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000"}}]}}"#,
            r#"{"id":"b","errorCode":"INVALID_ARGUMENT","errorMessage":"bad frame"}"#,
            r#"{"id":"c","liveSessionResumptionUpdate":{"newHandle":"h","resumable":true}}"#,
            "not json",
        ] {
            assert_eq!(committed_id(not_committed), None, "{not_committed}");
        }
    }

    /// A text fragment of an answer, as the gateway sends it in TEXT modality.
    const MODEL_TEXT: &str = r#"{"modelVersion":"sim","content":{"parts":[{"text":"You said"}],"role":"model"},"partial":true}"#;

    #[test]
    fn a_text_answer_is_timed_by_its_first_text_and_a_transcript_is_not_an_answer() {
        let (shared, live, mut read, arrivals) = reader();
        let start = Instant::now();
        shared.turn().speech_end = Some(start - Duration::from_millis(700));
        shared.turn().answerable = Some(start - Duration::from_millis(200));
        // Neither what the model says aloud, nor the user's own words, nor a recording, nor the
        // model's thoughts are the answer's text.
        for not_text in [
            r#"{"partial":true,"outputTranscription":{"text":"You","finished":false}}"#,
            r#"{"content":{"parts":[{"text":"typed by the user"}],"role":"user"}}"#,
            r#"{"content":{"parts":[{"fileData":{"fileUri":"artifact://x"}}],"role":"model"}}"#,
            r#"{"content":{"parts":[{"text":"Let me think.","thought":true}],"role":"model"}}"#,
        ] {
            event(not_text, &shared, &live, &mut read, &arrivals);
        }
        assert!(shared.turn().text_latencies_ms.is_empty());
        assert_eq!(shared.turn().last_answer, None);

        event(MODEL_TEXT, &shared, &live, &mut read, &arrivals);
        event(MODEL_TEXT, &shared, &live, &mut read, &arrivals);
        let turn = std::mem::take(&mut *shared.turn());
        assert_eq!(turn.text_latencies_ms.len(), 1, "timed once per turn");
        assert!((700.0..2_000.0).contains(&turn.text_latencies_ms[0]));
        assert_eq!(turn.text_gateway_ms.len(), 1);
        assert!((200.0..1_500.0).contains(&turn.text_gateway_ms[0]));
        assert!(turn.text_latencies_ms[0] - turn.text_gateway_ms[0] >= 499.0);
        assert!(turn.latencies_ms.is_empty(), "no audio came");
        assert!(turn.last_answer.is_some());
    }

    #[test]
    fn a_turn_end_is_timed_from_the_last_answer_audio_or_text() {
        let (shared, live, mut read, arrivals) = reader();
        let done = r#"{"turnComplete":true}"#;
        // A turnComplete with no answer before it has no answer end to time.
        event(done, &shared, &live, &mut read, &arrivals);
        assert!(shared.turn().turn_ends_ms.is_empty());

        shared.turn().speech_end = Some(Instant::now());
        audio(&shared, &mut read, 9_600, OUTPUT_RATE, &arrivals);
        // As if that audio had come a second ago: timed from the first, the end would be longer.
        let a_second_ago = shared
            .turn()
            .last_answer
            .map(|t| t - Duration::from_secs(1));
        shared.turn().last_answer = a_second_ago;
        audio(&shared, &mut read, 9_600, OUTPUT_RATE, &arrivals);
        event(done, &shared, &live, &mut read, &arrivals);
        // The same for an answer in text.
        shared.turn().last_answer = Some(Instant::now() - Duration::from_secs(1));
        event(MODEL_TEXT, &shared, &live, &mut read, &arrivals);
        event(done, &shared, &live, &mut read, &arrivals);
        let ends = shared.turn().turn_ends_ms.clone();
        assert_eq!(ends.len(), 2, "{ends:?}");
        assert!(
            ends.iter().all(|end| (0.0..500.0).contains(end)),
            "{ends:?}"
        );
        assert_eq!(shared.turn().last_answer, None);
        assert_eq!(read.turns, 3);
    }
}
