//! One phone call, whatever the carrier: waits for the stream's `start`, runs the agent on the
//! call's session (its id from the call, its state from the call's parameters), feeds the
//! caller's audio to the run (μ-law 8 kHz to PCM16 16 kHz, the rate every model and recording
//! here is built around), hands the run's answers to the writer through [`CallOutput`], turns
//! keys pressed into ADK events, and ends when the caller hangs up, the run ends (failed: a
//! goodbye first), the session is taken over, or a draining node's grace runs out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;

use super::carrier::{CallStart, Carrier, Inbound, ProtocolError};
use super::output::{CallOutput, Heard, OutputParts, SharedPlayback, GOODBYE_MARK};
use super::{CallIds, DtmfMode};
use crate::audio::{g711, resample::Resampler};
use crate::event::{Blob, Content, Event};
use crate::gateway::auth::Grant;
use crate::gateway::telemetry::metrics::Meter;
use crate::gateway::ws::close;
use crate::gateway::ws::codec::InputAudioBlocks;
use crate::gateway::ws::live_settings::ConnectOptions;
use crate::gateway::ws::live_settings::{self, ClientLayer};
use crate::gateway::ws::writer::{run_writer, Abort, WriterCommand, WriterExit, WriterStats};
use crate::gateway::{Gateway, LeaseError};
use crate::latch::Latch;
use crate::live::{bounded_live_request_queue, LiveRequest, LiveRequestQueue, RunConfig};
use crate::model::{Modality, Playout};

/// How long the carrier has to send `start` once the socket is open.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a closing call waits for its run to end and flush.
const RUN_DRAIN_GRACE: Duration = Duration::from_secs(10);
/// The rate the caller's audio reaches the model at.
const MODEL_INPUT_RATE: u32 = 16_000;
/// The mime type of that audio.
const MODEL_INPUT_MIME: &str = "audio/pcm;rate=16000";
/// Longest decoded audio one `media` message may carry (Twilio sends 20 ms: 160 bytes).
const MAX_MEDIA_BYTES: usize = 16 * 1024;
/// Most keys gathered into one DTMF turn.
const MAX_DTMF_DIGITS: usize = 32;
/// No limit: far enough ahead never to fire, near enough not to overflow a clock.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

type Sink = SplitSink<WebSocket, Message>;
type Source = SplitStream<WebSocket>;

/// Serves one call's media stream until it ends.
pub async fn serve_call(
    gateway: Arc<Gateway>,
    carrier: &'static dyn Carrier,
    socket: WebSocket,
    grant: Option<Grant>,
) {
    let span = tracing::info_span!(
        target: crate::trace_context::TRACE_TARGET,
        "call",
        otel.name = "livegate.call",
        otel.kind = "server",
        carrier = carrier.name(),
        call_id = tracing::field::Empty,
        user_id = tracing::field::Empty,
        session_id = tracing::field::Empty,
        invocation_id = tracing::field::Empty
    );
    async move {
        let (mut sink, mut stream) = socket.split();
        let start = match read_start(&mut stream, carrier).await {
            Ok(start) => start,
            Err(why) => {
                tracing::info!(why, "call stream ended before its start");
                return close_now(&mut sink, close::POLICY, why).await;
            }
        };
        let span = tracing::Span::current();
        span.record("call_id", start.call_id.as_str());
        let ids = match CallIds::resolve(&gateway.telephony, &start, grant.as_ref()) {
            Ok(ids) => ids,
            Err(why) => {
                tracing::warn!(%why, "call refused");
                return close_now(&mut sink, close::POLICY, "call refused").await;
            }
        };
        span.record("user_id", ids.user.as_str());
        span.record("session_id", ids.session.as_str());
        let slot = match gateway
            .limits
            .admit(ids.user.as_str(), ids.session.as_str())
        {
            Ok(slot) => slot,
            Err(refused) => {
                tracing::warn!(?refused, "call over a limit");
                return close_now(&mut sink, TRY_AGAIN_LATER, "over capacity").await;
            }
        };
        let lease = match gateway
            .registry
            .acquire(ids.user.as_str(), ids.session.as_str(), RUN_DRAIN_GRACE)
            .await
        {
            Ok(lease) => lease,
            Err(error) => {
                tracing::warn!(%error, "call has no session lease");
                let code = match error {
                    LeaseError::Unavailable => TRY_AGAIN_LATER,
                    LeaseError::Superseded => close::TAKEN_OVER,
                };
                return close_now(&mut sink, code, "session unavailable").await;
            }
        };
        let _counted = gateway.metrics.connection();
        Call::new(gateway.clone(), carrier, start, ids)
            .serve(sink, stream, &lease)
            .await;
        drop(lease);
        drop(slot);
        tracing::info!("call ended");
    }
    .instrument(span)
    .await
}

/// "Try again later": a node at its caps, or its session store unreachable.
const TRY_AGAIN_LATER: u16 = close::TRY_AGAIN_LATER;

/// Reads until the carrier's `start` (its `connected` and anything unknown before it skipped).
async fn read_start(stream: &mut Source, carrier: &dyn Carrier) -> Result<CallStart, &'static str> {
    let read = async {
        while let Some(message) = stream.next().await {
            let text = match message {
                Ok(Message::Text(text)) => text,
                Ok(Message::Ping(_) | Message::Pong(_)) => continue,
                Ok(Message::Close(_)) | Err(_) => return Err("the carrier closed the stream"),
                Ok(Message::Binary(_)) => return Err("binary frames are not part of the protocol"),
            };
            match carrier.parse(text.as_str()) {
                Ok(Inbound::Start(start)) => return check_format(start),
                Ok(Inbound::Connected | Inbound::Ignored(_)) => {}
                Ok(Inbound::Stop) => return Err("the call ended before its start"),
                Ok(_) => return Err("media before the start message"),
                Err(error) => {
                    tracing::info!(%error, "bad message before the start");
                    return Err("malformed start message");
                }
            }
        }
        Err("the carrier closed the stream")
    };
    tokio::time::timeout(START_TIMEOUT, read)
        .await
        .unwrap_or(Err("no start message in time"))
}

/// Only 8 kHz μ-law is taken (anything else would be noise to the model), on a stream whose id is
/// a plain id.
fn check_format(start: CallStart) -> Result<CallStart, &'static str> {
    let encoding_ok = start.encoding.as_deref().is_none_or(|e| {
        let e = e.to_ascii_lowercase();
        e == "audio/x-mulaw" || e == "pcmu" || e == "mulaw"
    });
    let rate_ok = start.sample_rate.is_none_or(|r| r == 8_000);
    // Echoed into every message sent back, unescaped.
    let id_ok = !start.stream_id.is_empty()
        && start
            .stream_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
    if !id_ok {
        return Err("the stream id is not an id");
    }
    if encoding_ok && rate_ok {
        Ok(start)
    } else {
        let error = ProtocolError::Format {
            encoding: start.encoding.clone().unwrap_or_default(),
            rate: start.sample_rate.unwrap_or_default(),
        };
        tracing::warn!(%error, "call refused");
        Err("unsupported media format (only 8 kHz μ-law)")
    }
}

/// Sends a close frame, best effort, and gives up on the socket.
async fn close_now(sink: &mut Sink, code: u16, reason: &str) {
    let frame = Message::Close(Some(CloseFrame {
        code,
        reason: reason.to_owned().into(),
    }));
    let _ = tokio::time::timeout(Duration::from_secs(1), sink.send(frame)).await;
}

/// Why the call's reader stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// `stop`, or the socket closed or failed: the caller is gone.
    HungUp,
    /// The writer gave up on the socket.
    CarrierGone,
    /// A newer connection took the session over.
    TakenOver,
    /// The run ended (after its goodbye, if it failed and one is set).
    RunEnded,
    /// The node is draining and the call's grace ran out.
    Drained,
    /// The call reached the maximum session duration.
    MaxDuration,
}

/// One call's state shared by its steps.
struct Call {
    gateway: Arc<Gateway>,
    carrier: &'static dyn Carrier,
    start: CallStart,
    ids: CallIds,
    meter: Meter,
    playback: SharedPlayback,
    playout: Playout,
    run_done: Latch,
    writer_done: Latch,
    run_failed: Arc<AtomicBool>,
}

impl Call {
    fn new(
        gateway: Arc<Gateway>,
        carrier: &'static dyn Carrier,
        start: CallStart,
        ids: CallIds,
    ) -> Self {
        let meter = gateway.metrics.meter();
        Call {
            gateway,
            carrier,
            start,
            ids,
            meter,
            playback: SharedPlayback::default(),
            playout: Playout::default(),
            run_done: Latch::new(),
            writer_done: Latch::new(),
            run_failed: Arc::default(),
        }
    }

    /// Starts the run, reads the stream until the call ends, then closes it.
    async fn serve(self, mut sink: Sink, stream: Source, lease: &crate::gateway::LeaseGuard) {
        let gateway = self.gateway.clone();
        let options = ConnectOptions {
            audio: Default::default(),
            modality: Modality::Audio,
            settings: ClientLayer::default(),
            trace_parent: None,
            // The stream's token is the gateway's own, minted for the call: no caller's claims.
            caller_claims: None,
        };
        let (run_config, _) =
            live_settings::run_config(&gateway.live, &options, gateway.save_live_blob, None);
        let run_config = RunConfig {
            on_reconnect: gateway.metrics.on_reconnect(),
            limits: gateway.flow_limits,
            playout: Some(self.playout.clone()),
            ..run_config
        };
        let (queue, requests) =
            bounded_live_request_queue(gateway.queue_capacity, gateway.queue_max_bytes);
        let (user, session) = (self.ids.user.as_str(), self.ids.session.as_str());
        let run = match gateway
            .runner
            .run_live(user, session, requests, run_config, lease.fence())
            .await
        {
            Ok(run) => run,
            Err(error) => {
                tracing::error!(%error, "could not start the call's live run");
                return close_now(&mut sink, close::INTERNAL, "could not start the agent").await;
            }
        };
        tracing::Span::current().record("invocation_id", run.invocation_id.as_str());
        tracing::info!(stream_id = self.start.stream_id, "call started");
        let state = self.call_state();
        if queue
            .send(LiveRequest {
                state_delta: Some(state),
                ..LiveRequest::default()
            })
            .await
            .is_err()
        {
            return;
        }
        let (heard_tx, heard_rx) = mpsc::channel(4);
        let output = CallOutput::new(
            run.events,
            self.meter.run(),
            OutputParts {
                carrier: self.carrier,
                stream_id: self.start.stream_id.clone(),
                playback: self.playback.clone(),
                playout: self.playout.clone(),
                heard: heard_tx,
                done: self.run_done.clone(),
                failed: self.run_failed.clone(),
                goodbye: gateway.telephony.goodbye.clone(),
            },
        );
        let (control_tx, control_rx) = mpsc::channel(8);
        let (abort_tx, abort_rx) = oneshot::channel();
        let writer = self.spawn_writer(sink, output, control_rx, abort_rx);
        let mut reader = Reader::new(&self, &queue, heard_rx);
        let end = reader.read(stream, lease).await;
        self.close(end, &queue, abort_tx, control_tx, writer).await;
    }

    /// What the call puts in session state: the carrier, the call's and stream's ids, the numbers
    /// and the stream's custom parameters, each under the configured prefix.
    fn call_state(&self) -> Map<String, Value> {
        let prefix = &self.gateway.telephony.settings.state_prefix;
        let mut state = Map::new();
        for (name, value) in &self.start.parameters {
            let key = match name.as_str() {
                "From" => "caller",
                "To" => "called",
                other => other,
            };
            state.insert(format!("{prefix}{key}"), value.clone());
        }
        state.insert(format!("{prefix}carrier"), json!(self.carrier.name()));
        state.insert(format!("{prefix}call_id"), json!(self.start.call_id));
        state.insert(format!("{prefix}stream_id"), json!(self.start.stream_id));
        state
    }

    /// The writer task: the carrier's socket's only owner; drains the run once the socket is gone.
    fn spawn_writer(
        &self,
        sink: Sink,
        mut output: CallOutput,
        control: mpsc::Receiver<WriterCommand>,
        abort: oneshot::Receiver<Abort>,
    ) -> JoinHandle<(WriterExit, WriterStats)> {
        let config = self.gateway.writer_config;
        let meter = self.meter.clone();
        let writer_done = self.writer_done.clone();
        tokio::spawn(
            async move {
                let mut sink = sink;
                let commands = futures::stream::select(&mut output, ReceiverStream::new(control));
                let result = run_writer(&mut sink, commands, config, abort, meter).await;
                writer_done.fire();
                // The run goes on to its end, so commits and recordings finish.
                output.drain().await;
                result
            }
            .in_current_span(),
        )
    }

    /// Ends the call: the run closed and flushed (bounded), then the socket. A caller who hung
    /// up, or a session taken over, needs no more frames; otherwise what is queued goes out
    /// first.
    async fn close(
        self,
        end: End,
        queue: &LiveRequestQueue,
        abort: oneshot::Sender<Abort>,
        control: mpsc::Sender<WriterCommand>,
        writer: JoinHandle<(WriterExit, WriterStats)>,
    ) {
        tracing::info!(?end, "closing the call");
        queue.close();
        let cut_off = match end {
            End::HungUp | End::CarrierGone => Some(Abort::Silent),
            End::TakenOver => Some(Abort::Close {
                code: close::TAKEN_OVER,
                reason: "session taken over".into(),
            }),
            End::RunEnded | End::Drained | End::MaxDuration => None,
        };
        let after_pending = cut_off.is_none();
        if let Some(cut_off) = cut_off {
            let _ = abort.send(cut_off);
        }
        if tokio::time::timeout(RUN_DRAIN_GRACE, self.run_done.fired())
            .await
            .is_err()
        {
            tracing::warn!("the call's run did not end in time; abandoning it");
            writer.abort();
        }
        if after_pending {
            let (code, reason) = match end {
                End::Drained => (close::SERVICE_RESTART, "gateway restarting"),
                _ if self.run_failed.load(Ordering::Relaxed) => {
                    (close::INTERNAL, "the agent failed")
                }
                _ => (close::NORMAL, "call ended"),
            };
            let command = WriterCommand::Close {
                code,
                reason: reason.into(),
            };
            let _ = control.send(command).await;
        }
        drop(control);
        match tokio::time::timeout(Duration::from_secs(5), writer).await {
            Ok(Ok((exit, stats))) => tracing::debug!(
                ?exit,
                dropped = stats.dropped_interrupted_audio,
                "call writer done"
            ),
            Ok(Err(error)) if error.is_cancelled() => {}
            Ok(Err(error)) => tracing::error!(%error, "call writer failed"),
            Err(_) => tracing::warn!("call writer did not finish in time"),
        }
    }
}

/// The caller's side of the call: the stream's messages into the run.
struct Reader<'c> {
    call: &'c Call,
    queue: &'c LiveRequestQueue,
    heard: mpsc::Receiver<Heard>,
    /// Base64-decoded μ-law of the message at hand.
    ulaw: Vec<u8>,
    /// It as PCM16 at 8 kHz.
    pcm: Vec<u8>,
    /// That at the model's rate.
    upsampled: Vec<u8>,
    upsampler: Option<Resampler>,
    blocks: InputAudioBlocks,
    /// Keys pressed and not yet sent as a turn, and when they go without another.
    digits: String,
    digits_due: Option<tokio::time::Instant>,
    /// Keys pressed in the whole call (tool mode).
    all_digits: String,
    /// Bad messages so far, and when one was last logged.
    bad: u64,
    last_logged: Option<Instant>,
    /// The run failed and its goodbye is playing: the call ends once the phone has played it.
    goodbye_until: Option<tokio::time::Instant>,
}

impl<'c> Reader<'c> {
    fn new(call: &'c Call, queue: &'c LiveRequestQueue, heard: mpsc::Receiver<Heard>) -> Self {
        Reader {
            call,
            queue,
            heard,
            ulaw: Vec::with_capacity(512),
            pcm: Vec::with_capacity(1024),
            upsampled: Vec::with_capacity(2048),
            upsampler: Resampler::new(8_000, MODEL_INPUT_RATE),
            blocks: InputAudioBlocks::default(),
            digits: String::new(),
            digits_due: None,
            all_digits: String::new(),
            bad: 0,
            last_logged: None,
            goodbye_until: None,
        }
    }

    /// Reads until something ends the call.
    async fn read(&mut self, mut stream: Source, lease: &crate::gateway::LeaseGuard) -> End {
        let call = self.call;
        let gateway = &call.gateway;
        let taken_over = lease.taken_over.fired();
        // A call cannot reconnect: a store lost past the lease TTL ends it like a takeover.
        let store_lost = lease.store_lost.fired();
        let shutdown = gateway.shutdown.fired();
        let run_ended = call.run_done.fired();
        let carrier_gone = call.writer_done.fired();
        let drain = tokio::time::sleep(FOREVER);
        let max_duration =
            tokio::time::sleep(gateway.session_limits.max_duration.unwrap_or(FOREVER));
        let dtmf = tokio::time::sleep(FOREVER);
        tokio::pin!(
            taken_over,
            store_lost,
            shutdown,
            run_ended,
            carrier_gone,
            drain,
            max_duration,
            dtmf
        );
        let mut draining = false;
        let mut run_over = false;
        loop {
            if let Some(due) = self.digits_due.take() {
                dtmf.as_mut().reset(due);
            }
            let goodbye = self.goodbye_until;
            let message = tokio::select! {
                biased;
                () = &mut taken_over => return End::TakenOver,
                () = &mut store_lost => return End::TakenOver,
                () = &mut carrier_gone => return End::CarrierGone,
                () = &mut max_duration => return End::MaxDuration,
                () = &mut drain, if draining => return End::Drained,
                () = &mut shutdown, if !draining => {
                    // Calls in progress finish, within the node's drain timeout.
                    draining = true;
                    drain.as_mut().reset(tokio::time::Instant::now() + gateway.telephony.drain_time);
                    continue;
                }
                () = &mut run_ended, if !run_over => {
                    run_over = true;
                    match self.goodbye_wait() {
                        Some(until) => self.goodbye_until = Some(until),
                        None => return End::RunEnded,
                    }
                    continue;
                }
                () = tokio::time::sleep_until(goodbye.unwrap_or_else(far)), if goodbye.is_some() => return End::RunEnded,
                Some(heard) = self.heard.recv() => {
                    self.report_heard(heard).await;
                    continue;
                }
                () = &mut dtmf, if !self.digits.is_empty() => {
                    self.send_digits().await;
                    continue;
                }
                message = stream.next() => message,
            };
            let text = match message {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Binary(_))) => {
                    self.refuse("binary frames are not part of the carrier's protocol");
                    continue;
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return End::HungUp,
            };
            self.call.meter.received(false, text.len());
            let parsed = call.carrier.parse(text.as_str());
            match parsed {
                // Once the run is over (its goodbye playing) the caller's audio has nowhere to go.
                Ok(Inbound::Media(_)) if run_over => {}
                Ok(Inbound::Media(payload)) => {
                    if !self.media(&payload, &lease.taken_over).await {
                        return End::RunEnded;
                    }
                }
                Ok(Inbound::Mark(name)) => {
                    if name == GOODBYE_MARK && self.goodbye_until.is_some() {
                        return End::RunEnded;
                    }
                    if let Some(heard) = call.playback.acknowledged(&name) {
                        call.playout.heard(heard);
                    }
                }
                Ok(Inbound::Dtmf(digit)) => self.dtmf(digit).await,
                Ok(Inbound::Stop) => return End::HungUp,
                Ok(Inbound::Start(_)) => self.refuse("a second start message"),
                Ok(Inbound::Connected) => {}
                Ok(Inbound::Ignored(kind)) => tracing::debug!(%kind, "carrier message ignored"),
                Err(error) => self.refuse(&error.to_string()),
            }
        }
    }

    /// How long to wait for the goodbye to play, if the run failed and one was sent.
    fn goodbye_wait(&self) -> Option<tokio::time::Instant> {
        let goodbye = self.call.gateway.telephony.goodbye.as_ref()?;
        if !self.call.run_failed.load(Ordering::Relaxed) {
            return None;
        }
        // The clip's length, the writer's lead, and a margin for the carrier.
        let plays = Duration::from_millis((goodbye.len() / 8) as u64);
        Some(tokio::time::Instant::now() + plays + Duration::from_secs(3))
    }

    /// One `media` message: base64 μ-law to PCM16 at the model's rate, into the run's queue.
    /// False once the run is gone.
    async fn media(&mut self, payload: &str, taken_over: &Latch) -> bool {
        let received = Instant::now();
        self.ulaw.clear();
        if STANDARD
            .decode_vec(payload.as_bytes(), &mut self.ulaw)
            .is_err()
        {
            self.refuse("media payload is not base64");
            return true;
        }
        if self.ulaw.len() > MAX_MEDIA_BYTES {
            self.refuse("media payload over 16 KiB");
            return true;
        }
        self.pcm.clear();
        g711::decode_into(&self.ulaw, &mut self.pcm);
        self.upsampled.clear();
        let Some(upsampler) = self.upsampler.as_mut() else {
            return true;
        };
        upsampler.push_into(&self.pcm, &mut self.upsampled);
        if self.upsampled.is_empty() {
            return true;
        }
        let mut blob = Blob::new(self.blocks.copy(&self.upsampled), MODEL_INPUT_MIME);
        blob.received = Some(received);
        let request = LiveRequest {
            blob: Some(blob),
            ..LiveRequest::default()
        };
        tokio::select! {
            biased;
            () = taken_over.fired() => true,
            sent = self.queue.send(request) => sent.is_ok(),
        }
    }

    /// A key pressed: gathered into a turn (sent on `#` or after a pause), or kept for the
    /// agent's keypad tool, as configured.
    async fn dtmf(&mut self, digit: char) {
        let settings = &self.call.gateway.telephony.settings;
        match settings.dtmf {
            DtmfMode::Off => tracing::debug!(%digit, "key pressed; DTMF is off"),
            DtmfMode::Turn => {
                if self.digits.len() < MAX_DTMF_DIGITS {
                    self.digits.push(digit);
                }
                if digit == '#' {
                    self.send_digits().await;
                } else {
                    self.digits_due = Some(tokio::time::Instant::now() + settings.dtmf_gap);
                }
            }
            DtmfMode::Tool => {
                if self.all_digits.len() < crate::agent::builtin::MAX_KEYPAD_DIGITS {
                    self.all_digits.push(digit);
                }
                let mut state = Map::new();
                state.insert(
                    crate::agent::builtin::KEYPAD_STATE_KEY.into(),
                    json!(self.all_digits),
                );
                self.send(LiveRequest {
                    state_delta: Some(state),
                    ..LiveRequest::default()
                })
                .await;
            }
        }
    }

    /// The keys gathered so far as one user turn (an ADK event with them in its state delta).
    async fn send_digits(&mut self) {
        let digits = std::mem::take(&mut self.digits);
        if digits.is_empty() {
            return;
        }
        tracing::info!(digits, "keys pressed");
        let prefix = &self.call.gateway.telephony.settings.state_prefix;
        let mut state = Map::new();
        state.insert(format!("{prefix}dtmf"), json!(digits));
        self.send(LiveRequest {
            content: Some(Content::text("user", format!("DTMF: {digits}"))),
            state_delta: Some(state),
            ..LiveRequest::default()
        })
        .await;
    }

    /// What the caller heard of an interrupted answer, committed to the session.
    async fn report_heard(&mut self, heard: Heard) {
        tracing::debug!(
            heard_ms = heard.heard.as_millis() as u64,
            sent_ms = heard.sent.as_millis() as u64,
            "answer interrupted"
        );
        let mut state = Map::new();
        state.insert(
            super::HEARD_STATE_KEY.into(),
            json!({
                "heardMs": heard.heard.as_millis() as u64,
                "sentMs": heard.sent.as_millis() as u64,
                "transcript": heard.transcript,
            }),
        );
        self.send(LiveRequest {
            state_delta: Some(state),
            ..LiveRequest::default()
        })
        .await;
    }

    async fn send(&self, request: LiveRequest) {
        if self.queue.send(request).await.is_err() {
            tracing::debug!("the run is gone; a call request was dropped");
        }
    }

    /// A message that cannot be used: counted as an error event, logged once a second at most;
    /// the call goes on.
    fn refuse(&mut self, why: &str) {
        self.bad += 1;
        let now = Instant::now();
        if self
            .last_logged
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
        {
            self.last_logged = Some(now);
            tracing::info!(why, bad_messages = self.bad, "bad message from the carrier");
        }
        let event = Event::error(
            "",
            self.call.gateway.runner.agent.name(),
            "INVALID_ARGUMENT",
            why,
        );
        self.call.meter.event(&event);
    }
}

/// An instant that never comes (for a disabled `select!` arm's future).
fn far() -> tokio::time::Instant {
    tokio::time::Instant::now() + FOREVER
}
