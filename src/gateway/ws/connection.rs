//! One client connection: a reader loop feeding the run's request queue, and the writer task that
//! owns the sink and takes the run's events.

use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::ws::Message;
use futures::stream::BoxStream;
use futures::{Sink, Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;

use crate::event::Event;
use crate::gateway::cluster::registry::{Lease, LeaseError};
use crate::gateway::ids::PathId;
use crate::gateway::server::limits::SessionLimits;
use crate::gateway::state::Gateway;
use crate::gateway::telemetry::metrics::{Meter, RunMeter};
use crate::gateway::ws::close;
use crate::gateway::ws::codec::{encode_event, AudioEncoding, FrameError, InputAudioBlocks};
use crate::gateway::ws::live_settings::{self, ConnectOptions};
use crate::gateway::ws::writer::{
    close_stalled, run_writer, Abort, WriterCommand, WriterExit, WriterStats,
};
use crate::latch::Latch;
use crate::live::flow::RECORDING_DROPPED;
use crate::live::{bounded_live_request_queue, LiveRequest, LiveRequestQueue, RunConfig};
use crate::runner::RunError;
use crate::session::{Fence, SessionError};

/// Capacity of the channel from the connection (its own events and close) to the writer.
const WRITER_CHANNEL_CAPACITY: usize = 256;
/// How long a closing connection waits for its run to end and flush.
const RUN_DRAIN_GRACE: Duration = Duration::from_secs(10);

/// A client frame, read.
enum Decoded {
    /// A request for the run, or why the frame is refused.
    Request(Result<LiveRequest, FrameError>),
    /// A ping or pong: nothing for the run.
    Control,
    /// The client closed, left or broke the protocol.
    End(End),
}

/// Why the reader loop stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// The client sent a close frame: echo it.
    ClientClosed,
    /// The socket failed or ended without a close frame, or the writer gave up on the client.
    ClientGone,
    TakenOver,
    /// The session store was unreachable for the lease's time to live: the lease is lost, but
    /// not to a takeover.
    StoreLost,
    Shutdown,
    RunEnded,
    /// The client broke a rule the socket enforces: close with this code and reason.
    Violation(u16, &'static str),
    /// No client frame for the idle timeout.
    Idle,
    /// The session reached its maximum duration.
    MaxDuration,
}

impl End {
    /// How the writer is stopped at once, or `None` when the run's queued frames go out first.
    fn abort(&self, limits: &SessionLimits) -> Option<Abort> {
        let close = |code, reason: String| Some(Abort::Close { code, reason });
        match self {
            End::ClientClosed => Some(Abort::Echo),
            End::ClientGone => Some(Abort::Silent),
            End::TakenOver => close(
                close::TAKEN_OVER,
                "session taken over by a newer connection".into(),
            ),
            End::StoreLost => close(
                close::TRY_AGAIN_LATER,
                "session store unavailable; reconnect".into(),
            ),
            End::Violation(code, reason) => close(*code, (*reason).into()),
            End::Idle => close(
                close::POLICY,
                format!("idle for {}s", limits.idle.unwrap_or_default().as_secs()),
            ),
            End::MaxDuration => close(close::POLICY, "maximum session duration reached".into()),
            // A draining gateway closes only once the run has committed and flushed, so a
            // client that reconnects elsewhere finds everything.
            End::Shutdown | End::RunEnded => None,
        }
    }
}

/// Serves one WebSocket connection until the client leaves, the session is taken over, the run
/// ends or the gateway shuts down. Generic over the socket halves so it runs over channels in tests.
pub async fn serve_connection<S, R>(
    gateway: Arc<Gateway>,
    sink: S,
    stream: R,
    user_id: PathId,
    session_id: PathId,
    options: ConnectOptions,
) where
    S: Sink<Message> + Unpin + Send + 'static,
    S::Error: std::fmt::Display,
    R: Stream<Item = Result<Message, axum::Error>> + Unpin + Send,
{
    let span = connection_span(&user_id, &session_id);
    if let Some(trace_id) =
        crate::trace_context::continue_trace(&span, options.trace_parent.as_ref())
    {
        span.record("trace_id", tracing::field::display(&trace_id));
    }
    async move {
        let acquired = gateway
            .registry
            .acquire(user_id.as_str(), session_id.as_str(), RUN_DRAIN_GRACE)
            .await;
        let _counted = gateway.metrics.connection();
        let connection = Connection::new(gateway.clone(), options);
        let lease = match acquired {
            Ok(lease) => lease,
            Err(error) => {
                let (abort_writer, abort) = oneshot::channel();
                connection
                    .refuse_start(sink, abort, Refusal::lease(error))
                    .await;
                drop(abort_writer);
                return;
            }
        };
        connection
            .serve(sink, stream, &user_id, &session_id, &lease, lease.fence())
            .await;
        // The lease goes back when `lease` drops, after the run has flushed.
        drop(lease);
        tracing::info!("connection closed");
    }
    .instrument(span)
    .await
}

/// The connection's span: its log lines' context and, with traces on, its trace's root (or the
/// client's trace continued). `trace_id` joins the log lines to the trace.
fn connection_span(user_id: &PathId, session_id: &PathId) -> tracing::Span {
    tracing::info_span!(
        target: crate::trace_context::TRACE_TARGET,
        "connection",
        otel.name = "livegate.connection",
        otel.kind = "server",
        user_id = %user_id,
        session_id = %session_id,
        invocation_id = tracing::field::Empty,
        trace_id = tracing::field::Empty,
        gen_ai.conversation.id = %session_id,
    )
}

/// One connection's state shared by its steps: start, read loop and close.
struct Connection {
    gateway: Arc<Gateway>,
    options: ConnectOptions,
    meter: Meter,
    writer_tx: mpsc::Sender<WriterCommand>,
    writer_rx: Option<mpsc::Receiver<WriterCommand>>,
    /// Fires when the writer stops writing: a stalled or vanished client ends the connection
    /// rather than leaving a run that nobody hears.
    writer_done: Latch,
    /// Fires when the run has ended.
    run_done: Latch,
    /// The run's last event (recordings aside) was an error: it failed rather than ended
    /// (`RUN_FAILED`), or its model was unavailable (`RUN_UNAVAILABLE`).
    run_failed: Arc<AtomicU8>,
}

impl Connection {
    fn new(gateway: Arc<Gateway>, options: ConnectOptions) -> Self {
        let meter = gateway.metrics.meter();
        let (writer_tx, writer_rx) = mpsc::channel(WRITER_CHANNEL_CAPACITY);
        Connection {
            gateway,
            options,
            meter,
            writer_tx,
            writer_rx: Some(writer_rx),
            writer_done: Latch::new(),
            run_done: Latch::new(),
            run_failed: Arc::default(),
        }
    }

    /// Starts the run, reads the client until the connection ends, then closes it.
    async fn serve<S, R>(
        mut self,
        sink: S,
        stream: R,
        user_id: &PathId,
        session_id: &PathId,
        lease: &Lease,
        fence: Fence,
    ) where
        S: Sink<Message> + Unpin + Send + 'static,
        S::Error: std::fmt::Display,
        R: Stream<Item = Result<Message, axum::Error>> + Unpin + Send,
    {
        let gateway = self.gateway.clone();
        // The run starts with the client's settings when its first frame is a setup message.
        let mut stream = stream.peekable();
        let stop = async {
            tokio::select! {
                () = lease.taken_over.fired() => {}
                () = lease.store_lost.fired() => {}
                () = gateway.shutdown.fired() => {}
            }
        };
        let meter = self.meter.clone();
        let setup = live_settings::read_setup(&mut stream, &gateway.live.client, stop)
            .await
            .map(|(setup, bytes)| {
                meter.received(false, bytes);
                setup
            });
        let (run_config, setting_errors) = live_settings::run_config(
            &gateway.live,
            &self.options,
            gateway.save_live_blob,
            setup.as_ref(),
        );
        let (queue, requests) =
            bounded_live_request_queue(gateway.queue_capacity, gateway.queue_max_bytes);
        let run_config = RunConfig {
            on_reconnect: gateway.metrics.on_reconnect(),
            limits: gateway.flow_limits,
            ..run_config
        };
        let started = gateway
            .runner
            .run_live(
                user_id.as_str(),
                session_id.as_str(),
                requests,
                run_config,
                fence,
            )
            .await;
        let (abort_writer, abort) = oneshot::channel();
        let run = match started {
            Ok(run) => run,
            Err(error) => {
                tracing::error!(%error, "could not start the live run");
                return self.refuse_start(sink, abort, Refusal::run(&error)).await;
            }
        };
        let invocation_id = run.invocation_id;
        tracing::Span::current().record("invocation_id", invocation_id.as_str());
        tracing::info!(modality = ?self.options.modality, audio = ?self.options.audio, "live run started");
        let events = RunEvents {
            events: run.events,
            meter: Some(self.meter.run()),
            mode: self.options.audio,
            done: self.run_done.clone(),
            failed: self.run_failed.clone(),
        };
        let writer = self.spawn_writer(sink, events, abort);
        let agent = gateway.runner.agent.name().to_owned();
        for error in setting_errors {
            tracing::info!(%error, "client live setting refused");
            let event = Event::error(&invocation_id, &agent, error.code(), error.to_string());
            send_event(
                &self.writer_tx,
                self.meter.counted(event),
                self.options.audio,
            )
            .await;
        }
        let end = self.read(stream, &queue, lease, &invocation_id).await;
        self.close(end, &queue, abort_writer, writer).await;
    }

    /// The run did not start: an error event (if any), then the refusal's close.
    async fn refuse_start<S>(mut self, sink: S, abort: oneshot::Receiver<Abort>, refusal: Refusal)
    where
        S: Sink<Message> + Unpin + Send + 'static,
        S::Error: std::fmt::Display,
    {
        if let Some((code, message)) = refusal.event {
            let event = Event::error("", self.gateway.runner.agent.name(), code, message);
            send_event(
                &self.writer_tx,
                self.meter.counted(event),
                self.options.audio,
            )
            .await;
        }
        let _ = self
            .writer_tx
            .send(WriterCommand::Close {
                code: refusal.code,
                reason: refusal.reason.into(),
            })
            .await;
        let writer = self.spawn_writer(sink, RunEvents::none(), abort);
        drop(self);
        let _ = writer.await;
    }

    /// Reads client frames into the run's queue until something ends the connection.
    async fn read<R>(
        &self,
        mut stream: R,
        queue: &LiveRequestQueue,
        lease: &Lease,
        invocation_id: &str,
    ) -> End
    where
        R: Stream<Item = Result<Message, axum::Error>> + Unpin + Send,
    {
        let gateway = &self.gateway;
        // Made once, not per frame: a pinned wait polled again costs an atomic load.
        let taken_over = lease.taken_over.fired();
        let store_lost = lease.store_lost.fired();
        let shutdown = gateway.shutdown.fired();
        let run_ended = self.run_done.fired();
        let client_gone = self.writer_done.fired();
        // One timer for both limits, polled with every frame's select: re-armed only when it
        // fires (never per frame: a timer-wheel update 50 times a second), then to the earlier of
        // the last frame's time plus the idle timeout and the session's end.
        let limits = TimeLimits::new(gateway.session_limits, tokio::time::Instant::now());
        let mut last_frame = limits.started;
        let deadline = tokio::time::sleep_until(limits.next(last_frame));
        tokio::pin!(
            taken_over,
            store_lost,
            shutdown,
            run_ended,
            client_gone,
            deadline
        );
        let mut audio_blocks = InputAudioBlocks::default();
        let mut bad_frames = LogLimit::default();
        loop {
            let message = tokio::select! {
                biased;
                () = &mut taken_over => return End::TakenOver,
                () = &mut store_lost => return End::StoreLost,
                () = &mut shutdown => return End::Shutdown,
                () = &mut run_ended => return End::RunEnded,
                () = &mut client_gone => return End::ClientGone,
                () = &mut deadline => {
                    if let Some(end) = limits.expired(last_frame, tokio::time::Instant::now()) {
                        return end;
                    }
                    deadline.as_mut().reset(limits.next(last_frame));
                    continue;
                }
                message = stream.next() => message,
            };
            let decoded = match self.decode(message, &mut audio_blocks) {
                Decoded::Request(decoded) => decoded,
                // Pings are answered but are no use of the session: a client library's
                // keep-alive must not hold a model session open for ever.
                Decoded::Control => continue,
                Decoded::End(end) => return end,
            };
            last_frame = tokio::time::Instant::now();
            match decoded {
                Ok(mut request) => {
                    // The moment it was read, give or take a decode: the start of first-audio latency.
                    if let Some(blob) = &mut request.blob {
                        blob.received = Some(last_frame.into_std());
                    }
                    // Backpressure: a slow model stops us reading the socket.
                    let sent = tokio::select! {
                        biased;
                        () = &mut taken_over => return End::TakenOver,
                        () = &mut store_lost => return End::StoreLost,
                        () = &mut shutdown => return End::Shutdown,
                        sent = queue.send(request) => sent,
                    };
                    if sent.is_err() {
                        return End::RunEnded;
                    }
                }
                Err(error) => {
                    if !self.refuse(&error, invocation_id, &mut bad_frames).await {
                        return End::ClientGone;
                    }
                }
            }
        }
    }

    /// What a client frame (or the end of the stream) means for the run, counted.
    fn decode(
        &self,
        message: Option<Result<Message, axum::Error>>,
        audio_blocks: &mut InputAudioBlocks,
    ) -> Decoded {
        let limits = self.gateway.frame_limits;
        match message {
            Some(Ok(Message::Binary(data))) => {
                self.meter.received(true, data.len());
                Decoded::Request(limits.decode_binary(&data, audio_blocks))
            }
            Some(Ok(Message::Text(text))) => {
                self.meter.received(false, text.len());
                Decoded::Request(limits.decode_text(text.as_str()))
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => Decoded::Control,
            Some(Ok(Message::Close(_))) => Decoded::End(End::ClientClosed),
            None => Decoded::End(End::ClientGone),
            Some(Err(error)) => Decoded::End(socket_error(error)),
        }
    }

    /// Answers a frame that could not be understood with an error event (the connection goes
    /// on); false once the writer is gone.
    async fn refuse(
        &self,
        error: &FrameError,
        invocation_id: &str,
        bad_frames: &mut LogLimit,
    ) -> bool {
        // Counted as an error event; logged once, then at most once a second.
        if let Some(suppressed) = bad_frames.allow(Instant::now()) {
            tracing::info!(%error, suppressed, "bad client frame");
        }
        let event = self.meter.counted(Event::error(
            invocation_id,
            self.gateway.runner.agent.name(),
            error.code(),
            live_settings::frame_error_message(error),
        ));
        send_event(&self.writer_tx, event, self.options.audio).await
    }

    /// Closes the run, then the socket. A client that is gone, replaced, shut down or over a
    /// limit needs no more frames, so its writer is cut off at once while the run finishes
    /// committing and flushing (bounded); a run that ended by itself gets its queued frames,
    /// then a normal close (1011 if it failed). (`abort_writer` must stay alive otherwise:
    /// dropping it cuts the writer off too.)
    async fn close(
        self,
        end: End,
        queue: &LiveRequestQueue,
        abort_writer: oneshot::Sender<Abort>,
        writer: JoinHandle<(WriterExit, WriterStats)>,
    ) {
        queue.close();
        let cut_off = end.abort(&self.gateway.session_limits);
        let close_after_pending = cut_off.is_none();
        if let Some(abort) = cut_off {
            tracing::info!(?end, "closing the connection");
            let _ = abort_writer.send(abort);
        }
        if tokio::time::timeout(RUN_DRAIN_GRACE, self.run_done.fired())
            .await
            .is_err()
        {
            tracing::warn!("live run did not end in time; abandoning it");
            // The writer task drains the run: stopping it drops the run.
            writer.abort();
        }
        if close_after_pending {
            let close = if end == End::Shutdown {
                WriterCommand::Close {
                    code: close::SERVICE_RESTART,
                    reason: "gateway restarting; reconnect".into(),
                }
            } else if self.run_failed.load(Ordering::Relaxed) == RUN_UNAVAILABLE {
                WriterCommand::Close {
                    code: close::TRY_AGAIN_LATER,
                    reason: "model unavailable; try again later".into(),
                }
            } else if self.run_failed.load(Ordering::Relaxed) == RUN_FAILED {
                WriterCommand::Close {
                    code: close::INTERNAL,
                    reason: "live run failed".into(),
                }
            } else {
                WriterCommand::Close {
                    code: close::NORMAL,
                    reason: "live run ended".into(),
                }
            };
            let _ = self.writer_tx.send(close).await;
        }
        drop(self.writer_tx);
        match tokio::time::timeout(Duration::from_secs(5), writer).await {
            Ok(Ok((exit, stats))) => log_exit(exit, stats),
            Ok(Err(error)) if error.is_cancelled() => {}
            Ok(Err(error)) => tracing::error!(%error, "writer task failed"),
            Err(_) => tracing::warn!("writer did not finish in time"),
        }
    }

    /// Spawns the writer task (see [`spawn_writer`]).
    fn spawn_writer<S>(
        &mut self,
        sink: S,
        run: RunEvents,
        abort: oneshot::Receiver<Abort>,
    ) -> JoinHandle<(WriterExit, WriterStats)>
    where
        S: Sink<Message> + Unpin + Send + 'static,
        S::Error: std::fmt::Display,
    {
        let control = self.writer_rx.take().unwrap_or_else(|| {
            // Only ever taken once; an empty channel keeps the types simple if not.
            mpsc::channel(1).1
        });
        spawn_writer(
            &self.gateway,
            sink,
            control,
            run,
            abort,
            self.meter.clone(),
            &self.writer_done,
        )
    }
}

/// Why a connection gets no run, as its client is told.
struct Refusal {
    code: u16,
    reason: &'static str,
    /// The error event before the close (ADK's code and message), if any.
    event: Option<(&'static str, String)>,
}

impl Refusal {
    /// No lease: the store is unreachable (try again), or a newer connection has the session.
    fn lease(error: LeaseError) -> Self {
        tracing::warn!(%error, "connection has no session lease");
        match error {
            LeaseError::Unavailable => Refusal {
                code: close::TRY_AGAIN_LATER,
                reason: "session store unavailable; reconnect",
                event: Some(("UNAVAILABLE", error.to_string())),
            },
            LeaseError::Superseded => Refusal {
                code: close::TAKEN_OVER,
                reason: "session taken over by a newer connection",
                event: None,
            },
        }
    }

    /// The run could not start: a newer lease claimed the session (taken over), or anything
    /// else, the store's failures included (1011, after the error event: a broken store is not
    /// always a passing one).
    fn run(error: &RunError) -> Self {
        match error {
            RunError::Session(SessionError::Fenced(_)) => Refusal {
                code: close::TAKEN_OVER,
                reason: "session taken over by a newer connection",
                event: None,
            },
            _ => Refusal {
                code: close::INTERNAL,
                reason: "could not start the live run",
                event: Some((
                    error.code(),
                    format!("could not start the live run: {error}"),
                )),
            },
        }
    }
}

/// No limit: far enough ahead never to fire, near enough not to overflow a clock.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A connection's time limits, from when it started reading.
#[derive(Debug, Clone, Copy)]
struct TimeLimits {
    started: tokio::time::Instant,
    idle: Option<Duration>,
    /// When the session reaches its maximum duration.
    ends: Option<tokio::time::Instant>,
}

impl TimeLimits {
    fn new(limits: SessionLimits, started: tokio::time::Instant) -> Self {
        TimeLimits {
            started,
            idle: limits.idle,
            ends: limits.max_duration.map(|d| started + d),
        }
    }

    /// When a limit may be reached next, the last frame read at `last_frame`.
    fn next(&self, last_frame: tokio::time::Instant) -> tokio::time::Instant {
        let idle = self.idle.map(|idle| last_frame + idle);
        match (idle, self.ends) {
            (Some(idle), Some(ends)) => idle.min(ends),
            (Some(at), None) | (None, Some(at)) => at,
            (None, None) => self.started + FOREVER,
        }
    }

    /// The limit reached by `now` (the maximum duration first), if any.
    fn expired(&self, last_frame: tokio::time::Instant, now: tokio::time::Instant) -> Option<End> {
        if self.ends.is_some_and(|ends| ends <= now) {
            return Some(End::MaxDuration);
        }
        self.idle
            .is_some_and(|idle| last_frame + idle <= now)
            .then_some(End::Idle)
    }
}

fn log_exit(exit: WriterExit, stats: WriterStats) {
    match exit {
        WriterExit::ClientGone(reason) => tracing::info!(reason, "client gone"),
        WriterExit::Stalled(reason) => {
            tracing::warn!(reason, "disconnected a client that stopped reading")
        }
        WriterExit::Closed => {}
    }
    if stats.dropped_interrupted_audio > 0 {
        tracing::debug!(
            dropped = stats.dropped_interrupted_audio,
            "audio frames of interrupted answers dropped"
        );
    }
}

/// How a failed client socket ends the connection: the frame's own close code where the socket
/// can still send one (the peer broke the protocol), else a silent end (the peer is gone).
fn socket_error(error: axum::Error) -> End {
    // axum wraps the tungstenite error it read; its type says what happened.
    let error = error.into_inner();
    if error.is::<crate::gateway::server::io_watch::MessageTimedOut>() {
        tracing::info!(%error, "client socket error");
        return End::Violation(close::POLICY, "message not finished in time");
    }
    let end = match error.downcast_ref::<tungstenite::Error>() {
        Some(tungstenite::Error::Capacity(_)) => End::Violation(close::TOO_BIG, "message too big"),
        Some(tungstenite::Error::Utf8(_)) => {
            End::Violation(close::INVALID_PAYLOAD, "text frame is not valid UTF-8")
        }
        Some(tungstenite::Error::Protocol(
            tungstenite::error::ProtocolError::ResetWithoutClosingHandshake,
        )) => End::ClientGone,
        Some(tungstenite::Error::Protocol(_)) => {
            End::Violation(close::PROTOCOL_ERROR, "WebSocket protocol error")
        }
        _ => End::ClientGone,
    };
    tracing::info!(%error, "client socket error");
    end
}

/// Lets a repeated log line through once, then at most once a second, counting what it held back.
#[derive(Debug, Default)]
struct LogLimit {
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimit {
    /// Whether to log now; if so, how many were held back since the last line.
    fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < Duration::from_secs(1) => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// Spawns the writer task: it writes the run's frames and the connection's own commands until the
/// client is gone or the connection closes it, then drains the rest of the run.
///
/// The writer polls the run itself rather than being fed by a forwarding task: the hop saved is
/// on the path of every answer's first audio, and a fourth task woken in a row by the same input
/// frame (reader, send loop, model, forwarder) no longer fits tokio's LIFO slot, which put the
/// writer at the back of the run queue.
fn spawn_writer<S>(
    gateway: &Gateway,
    sink: S,
    control: mpsc::Receiver<WriterCommand>,
    mut run: RunEvents,
    abort: oneshot::Receiver<Abort>,
    meter: Meter,
    writer_done: &Latch,
) -> JoinHandle<(WriterExit, WriterStats)>
where
    S: Sink<Message> + Unpin + Send + 'static,
    S::Error: std::fmt::Display,
{
    let config = gateway.writer_config;
    let writer_done = writer_done.clone();
    tokio::spawn(
        async move {
            let mut sink = sink;
            let commands = futures::stream::select(&mut run, ReceiverStream::new(control));
            let result = run_writer(&mut sink, commands, config, abort, meter).await;
            writer_done.fire();
            // A stalled client's close frame waits for it to read again, in a task of its own
            // (bounded): the connection, and the session's lease, do not wait for it.
            if let WriterExit::Stalled(reason) = &result.0 {
                let reason = reason.clone();
                let linger =
                    async move { close_stalled(&mut sink, reason, config.send_timeout).await };
                tokio::spawn(linger.in_current_span());
            }
            // Keep draining after the client is gone so the run can finish committing and
            // flushing recordings.
            run.drain().await;
            result
        }
        .in_current_span(),
    )
}

/// The run's events as writer frames, each counted; fires `done` when the run ends.
struct RunEvents {
    events: BoxStream<'static, Event>,
    /// Counts the run while it lasts; `None` once it has ended (or for no run at all).
    meter: Option<RunMeter>,
    mode: AudioEncoding,
    done: Latch,
    /// Set while the run's last event (recordings aside) is an error: `RUN_FAILED`, or
    /// `RUN_UNAVAILABLE` for an `UNAVAILABLE` one.
    failed: Arc<AtomicU8>,
}

impl RunEvents {
    /// No run: a connection whose run could not start.
    fn none() -> Self {
        RunEvents {
            events: futures::stream::empty().boxed(),
            meter: None,
            mode: AudioEncoding::default(),
            done: Latch::new(),
            failed: Arc::default(),
        }
    }

    /// The run has ended.
    fn finish(&mut self) {
        self.meter = None;
        self.done.fire();
    }

    /// Takes the rest of the run's events without writing them: the client is gone.
    async fn drain(&mut self) {
        while let Some(meter) = &self.meter {
            match self.events.next().await {
                Some(event) => drop(meter.counted(event)),
                None => self.finish(),
            }
        }
    }
}

impl Stream for RunEvents {
    type Item = WriterCommand;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WriterCommand>> {
        let this = &mut *self;
        while let Some(meter) = &this.meter {
            match ready!(this.events.poll_next_unpin(cx)) {
                Some(event) => {
                    // The recordings a run flushes as it ends come after its last word, and a
                    // recording that could not be kept is no failure of the run.
                    if !announces_recordings(&event) {
                        let failed = match event.error_code.as_deref() {
                            None | Some(RECORDING_DROPPED) => RUN_ENDED,
                            Some("UNAVAILABLE") => RUN_UNAVAILABLE,
                            Some(_) => RUN_FAILED,
                        };
                        this.failed.store(failed, Ordering::Relaxed);
                    }
                    if let Some(command) = encoded(meter.counted(event), this.mode) {
                        return Poll::Ready(Some(command));
                    }
                }
                None => this.finish(),
            }
        }
        Poll::Ready(None)
    }
}

/// How a run's last event (recordings aside) left it: ended, failed, or failed for want of a model.
const RUN_ENDED: u8 = 0;
const RUN_FAILED: u8 = 1;
const RUN_UNAVAILABLE: u8 = 2;

/// True for an event that only announces saved recordings.
fn announces_recordings(event: &Event) -> bool {
    event
        .content
        .as_ref()
        .is_some_and(|c| !c.parts.is_empty() && c.parts.iter().all(|p| p.file_data.is_some()))
}

/// The writer's command for an event; `None` (logged) if it cannot be encoded.
fn encoded(event: Event, mode: AudioEncoding) -> Option<WriterCommand> {
    match encode_event(event, mode) {
        Ok(frame) => Some(WriterCommand::Event(Box::new(frame))),
        Err(error) => {
            tracing::error!(%error, "could not encode an event");
            None
        }
    }
}

/// Encodes and queues an event for the writer; false once the writer is gone.
async fn send_event(
    writer: &mpsc::Sender<WriterCommand>,
    event: Event,
    mode: AudioEncoding,
) -> bool {
    match encoded(event, mode) {
        Some(command) => writer.send(command).await.is_ok(),
        None => true,
    }
}
