//! One client connection: a reader loop feeding the run's request queue, and the writer task that
//! owns the sink and takes the run's events.

use std::pin::Pin;
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

use super::codec::{
    decode_binary, decode_text, encode_event, AudioFrames, FrameBlocks, FrameError,
};
use super::ids::PathId;
use super::metrics::{Meter, RunMeter};
use super::writer::{run_writer, Abort, WriterCommand, WriterExit, WriterStats};
use super::Gateway;
use crate::event::Event;
use crate::live::{live_request_queue, LiveRequest, RunConfig};
use crate::model::Modality;
use crate::signal::Signal;

/// Close code sent to a connection whose session was taken over by a newer one.
pub const CLOSE_TAKEN_OVER: u16 = 4000;
/// Close code of a draining gateway (SIGTERM): reconnect, to another node, and carry on.
pub const CLOSE_SERVICE_RESTART: u16 = 1012;
/// Capacity of the channel from the connection (its own events and close) to the writer.
const WRITER_CHANNEL_CAPACITY: usize = 256;
/// How long a closing connection waits for its run to end and flush.
const RUN_DRAIN_GRACE: Duration = Duration::from_secs(10);

/// Per-connection choices made in the URL's query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// How model audio reaches the client.
    pub audio: AudioFrames,
    /// Response modality.
    pub modality: Modality,
    /// Proactive audio.
    pub proactivity: bool,
    /// Affective dialog.
    pub affective_dialog: bool,
}

impl ConnectOptions {
    /// The run config for this connection on this gateway.
    pub fn run_config(&self, save_audio: bool) -> RunConfig {
        RunConfig {
            response_modalities: Some(vec![self.modality]),
            save_live_blob: save_audio,
            proactivity: self
                .proactivity
                .then(|| serde_json::json!({"proactiveAudio": true})),
            enable_affective_dialog: self.affective_dialog.then_some(true),
            session_resumption: Some(Default::default()),
            ..RunConfig::default()
        }
    }
}

/// Why the reader loop stopped.
enum End {
    ClientGone,
    TakenOver,
    Shutdown,
    RunEnded,
    TooBig,
}

/// Serves one WebSocket connection until the client leaves, the session is taken over, the run
/// ends or the gateway shuts down. Generic over the socket halves so it runs over channels in tests.
pub async fn serve_connection<S, R>(
    gateway: Arc<Gateway>,
    sink: S,
    mut stream: R,
    user_id: PathId,
    session_id: PathId,
    options: ConnectOptions,
) where
    S: Sink<Message> + Unpin + Send + 'static,
    S::Error: std::fmt::Display,
    R: Stream<Item = Result<Message, axum::Error>> + Unpin + Send,
{
    let span = tracing::info_span!("connection", user_id = %user_id, session_id = %session_id, invocation_id = tracing::field::Empty);
    async move {
        let lease = gateway
            .registry
            .acquire(user_id.as_str(), session_id.as_str(), RUN_DRAIN_GRACE)
            .await;
        let _counted = gateway.metrics.connection();
        let meter = gateway.metrics.meter();
        let (writer_tx, writer_rx) = mpsc::channel(WRITER_CHANNEL_CAPACITY);
        let (abort_writer, abort) = oneshot::channel();
        // The reader stops as soon as the writer does: a stalled or vanished client ends the
        // connection rather than leaving a run that nobody hears.
        let writer_done = Signal::new();
        let run_done = Signal::new();

        let (queue, requests) = live_request_queue(gateway.queue_capacity);
        let run_config = RunConfig {
            on_reconnect: gateway.metrics.on_reconnect(),
            ..options.run_config(gateway.save_audio)
        };
        let started = gateway
            .runner
            .run_live(user_id.as_str(), session_id.as_str(), requests, run_config)
            .await;
        let (run, invocation_id) = match started {
            Ok(run) => {
                let frames = RunFrames {
                    events: run.events,
                    meter: Some(meter.run()),
                    mode: options.audio,
                    done: run_done.clone(),
                };
                (frames, run.invocation_id)
            }
            Err(error) => {
                tracing::error!(%error, "could not start the live run");
                let event = Event::error(
                    "",
                    gateway.runner.agent.name(),
                    error.code(),
                    format!("could not start the live run: {error}"),
                );
                send_event(&writer_tx, meter.counted(event), options.audio).await;
                let _ = writer_tx
                    .send(WriterCommand::Close {
                        code: 1011,
                        reason: "could not start the live run".into(),
                    })
                    .await;
                drop(writer_tx);
                let writer = spawn_writer(
                    &gateway,
                    sink,
                    writer_rx,
                    RunFrames::none(),
                    abort,
                    meter.clone(),
                    &writer_done,
                );
                let _ = writer.await;
                drop(abort_writer);
                return;
            }
        };
        tracing::Span::current().record("invocation_id", invocation_id.as_str());
        tracing::info!(modality = ?options.modality, audio = ?options.audio, "live run started");
        let writer = spawn_writer(
            &gateway,
            sink,
            writer_rx,
            run,
            abort,
            meter.clone(),
            &writer_done,
        );

        let agent = gateway.runner.agent.name().to_owned();
        // Made once, not per frame: a pinned wait polled again costs an atomic load.
        let taken_over = lease.taken_over.fired();
        let shutdown = gateway.shutdown.fired();
        let run_ended = run_done.fired();
        let client_gone = writer_done.fired();
        tokio::pin!(taken_over, shutdown, run_ended, client_gone);
        let mut frames = FrameBlocks::default();
        let end = loop {
            let message = tokio::select! {
                biased;
                () = &mut taken_over => break End::TakenOver,
                () = &mut shutdown => break End::Shutdown,
                () = &mut run_ended => break End::RunEnded,
                () = &mut client_gone => break End::ClientGone,
                message = stream.next() => message,
            };
            let decoded: Result<LiveRequest, FrameError> = match message {
                Some(Ok(Message::Binary(data))) => {
                    meter.received(true, data.len());
                    decode_binary(&data, &mut frames)
                }
                Some(Ok(Message::Text(text))) => {
                    meter.received(false, text.len());
                    decode_text(text.as_str())
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Close(_))) | None => break End::ClientGone,
                Some(Err(error)) => {
                    tracing::info!(%error, "client socket error");
                    if is_too_big(error) {
                        break End::TooBig;
                    }
                    break End::ClientGone;
                }
            };
            match decoded {
                Ok(mut request) => {
                    // The moment it was read, give or take a decode: the start of first-audio latency.
                    if let Some(blob) = &mut request.blob {
                        blob.received = Some(Instant::now());
                    }
                    // Backpressure: a slow model stops us reading the socket.
                    let sent = tokio::select! {
                        biased;
                        () = &mut taken_over => break End::TakenOver,
                        () = &mut shutdown => break End::Shutdown,
                        sent = queue.send(request) => sent,
                    };
                    if sent.is_err() {
                        break End::RunEnded;
                    }
                }
                Err(error) => {
                    tracing::info!(%error, "bad client frame");
                    let event = meter.counted(Event::error(
                        &invocation_id,
                        &agent,
                        error.code(),
                        error.to_string(),
                    ));
                    if !send_event(&writer_tx, event, options.audio).await {
                        break End::ClientGone;
                    }
                }
            }
        };

        // Close the run. A client that is gone, replaced or shut down needs no more frames, so
        // its writer is cut off at once while the run finishes committing and flushing (bounded);
        // a run that ended by itself gets its queued frames, then a normal close. (`abort_writer`
        // must stay alive otherwise: dropping it cuts the writer off too.)
        queue.close();
        let cut_off: Option<Abort> = match end {
            End::ClientGone => Some(None),
            End::TakenOver => Some(Some((
                CLOSE_TAKEN_OVER,
                "session taken over by a newer connection".into(),
            ))),
            End::TooBig => Some(Some((1009, "message too big".into()))),
            // A draining gateway closes only once the run has committed and flushed, so a
            // client that reconnects elsewhere finds everything.
            End::Shutdown | End::RunEnded => None,
        };
        let close_after_pending = cut_off.is_none();
        if let Some(close) = cut_off {
            let _ = abort_writer.send(close);
        }
        if tokio::time::timeout(RUN_DRAIN_GRACE, run_done.fired())
            .await
            .is_err()
        {
            tracing::warn!("live run did not end in time; abandoning it");
            // The writer task drains the run: stopping it drops the run.
            writer.abort();
        }
        if close_after_pending {
            let close = match end {
                End::Shutdown => WriterCommand::Close {
                    code: CLOSE_SERVICE_RESTART,
                    reason: "gateway restarting; reconnect".into(),
                },
                _ => WriterCommand::Close {
                    code: 1000,
                    reason: "live run ended".into(),
                },
            };
            let _ = writer_tx.send(close).await;
        }
        drop(writer_tx);
        match tokio::time::timeout(Duration::from_secs(5), writer).await {
            Ok(Ok((exit, stats))) => {
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
            Ok(Err(error)) if error.is_cancelled() => {}
            Ok(Err(error)) => tracing::error!(%error, "writer task failed"),
            Err(_) => tracing::warn!("writer did not finish in time"),
        }
        // The lease goes back when `lease` drops, after the run has flushed.
        tracing::info!("connection closed");
    }
    .instrument(span)
    .await
}

/// True when the socket failed because a client message exceeded the size limit.
fn is_too_big(error: axum::Error) -> bool {
    // axum wraps the tungstenite error it read; its type says what happened.
    matches!(
        error.into_inner().downcast_ref::<tungstenite::Error>(),
        Some(tungstenite::Error::Capacity(_))
    )
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
    mut run: RunFrames,
    abort: oneshot::Receiver<Abort>,
    meter: Meter,
    writer_done: &Signal,
) -> JoinHandle<(WriterExit, WriterStats)>
where
    S: Sink<Message> + Unpin + Send + 'static,
    S::Error: std::fmt::Display,
{
    let config = gateway.writer_config;
    let writer_done = writer_done.clone();
    tokio::spawn(
        async move {
            let commands = futures::stream::select(&mut run, ReceiverStream::new(control));
            let result = run_writer(sink, commands, config, abort, meter).await;
            writer_done.fire();
            // Keep draining after the client is gone so the run can finish committing and
            // flushing recordings.
            run.drain().await;
            result
        }
        .in_current_span(),
    )
}

/// The run's events as writer frames, each counted; fires `done` when the run ends.
struct RunFrames {
    events: BoxStream<'static, Event>,
    /// Counts the run while it lasts; `None` once it has ended (or for no run at all).
    meter: Option<RunMeter>,
    mode: AudioFrames,
    done: Signal,
}

impl RunFrames {
    /// No run: a connection whose run could not start.
    fn none() -> Self {
        RunFrames {
            events: futures::stream::empty().boxed(),
            meter: None,
            mode: AudioFrames::default(),
            done: Signal::new(),
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

impl Stream for RunFrames {
    type Item = WriterCommand;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WriterCommand>> {
        let this = &mut *self;
        while let Some(meter) = &this.meter {
            match ready!(this.events.poll_next_unpin(cx)) {
                Some(event) => {
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

/// The writer's command for an event; `None` (logged) if it cannot be encoded.
fn encoded(event: Event, mode: AudioFrames) -> Option<WriterCommand> {
    match encode_event(event, mode) {
        Ok(frame) => Some(WriterCommand::Frame(Box::new(frame))),
        Err(error) => {
            tracing::error!(%error, "could not encode an event");
            None
        }
    }
}

/// Encodes and queues an event for the writer; false once the writer is gone.
async fn send_event(writer: &mpsc::Sender<WriterCommand>, event: Event, mode: AudioFrames) -> bool {
    match encoded(event, mode) {
        Some(command) => writer.send(command).await.is_ok(),
        None => true,
    }
}
