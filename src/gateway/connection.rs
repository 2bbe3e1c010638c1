//! One client connection: a reader loop feeding the run's request queue, a task forwarding the
//! run's events to the writer, and the writer task that owns the sink.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::signal::Signal;
use axum::extract::ws::Message;
use futures::{Sink, Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use super::codec::{decode_binary, decode_text, encode_event, AudioFrames, FrameError};
use super::ids::PathId;
use super::writer::{run_writer, Abort, WriterCommand, WriterExit};
use super::Gateway;
use crate::event::Event;
use crate::live::{live_request_queue, LiveRequest, RunConfig};
use crate::model::Modality;

/// Close code sent to a connection whose session was taken over by a newer one.
pub const CLOSE_TAKEN_OVER: u16 = 4000;
/// Capacity of the channel from the run to the writer.
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
        let writer = tokio::spawn({
            let writer_done = writer_done.clone();
            let config = gateway.writer_config;
            let meter = meter.clone();
            async move {
                let result = run_writer(sink, writer_rx, config, abort, meter).await;
                writer_done.fire();
                result
            }
            .in_current_span()
        });

        let (queue, requests) = live_request_queue(gateway.queue_capacity);
        let run_config = RunConfig {
            on_reconnect: gateway.metrics.on_reconnect(),
            ..options.run_config(gateway.save_audio)
        };
        let run = match gateway
            .runner
            .run_live(user_id.as_str(), session_id.as_str(), requests, run_config)
            .await
        {
            Ok(run) => run,
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
                let _ = writer.await;
                drop(abort_writer);
                gateway
                    .registry
                    .release(user_id.as_str(), session_id.as_str(), &lease);
                return;
            }
        };
        let invocation_id = run.invocation_id.clone();
        tracing::Span::current().record("invocation_id", invocation_id.as_str());
        tracing::info!(modality = ?options.modality, audio = ?options.audio, "live run started");

        // Forward the run's events to the writer; keep draining after the client is gone so the
        // run can finish committing and flushing recordings.
        let run_done = Signal::new();
        let forward = tokio::spawn({
            let writer_tx = writer_tx.clone();
            let run_done = run_done.clone();
            let mode = options.audio;
            let mut events = run.events;
            let run_meter = meter.run();
            async move {
                let mut writer_open = true;
                while let Some(event) = events.next().await {
                    let event = run_meter.counted(event);
                    if writer_open {
                        writer_open = send_event(&writer_tx, event, mode).await;
                    }
                }
                drop(run_meter);
                run_done.fire();
            }
            .in_current_span()
        });

        let agent = gateway.runner.agent.name().to_owned();
        // Made once, not per frame: a pinned wait polled again costs an atomic load.
        let taken_over = lease.taken_over.fired();
        let shutdown = gateway.shutdown.fired();
        let run_ended = run_done.fired();
        let client_gone = writer_done.fired();
        tokio::pin!(taken_over, shutdown, run_ended, client_gone);
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
                    decode_binary(data)
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
            End::Shutdown => Some(Some((1001, "gateway shutting down".into()))),
            End::TooBig => Some(Some((1009, "message too big".into()))),
            End::RunEnded => None,
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
            forward.abort();
        }
        if close_after_pending {
            let close = WriterCommand::Close {
                code: 1000,
                reason: "live run ended".into(),
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
            Ok(Err(error)) => tracing::error!(%error, "writer task failed"),
            Err(_) => tracing::warn!("writer did not finish in time"),
        }
        gateway
            .registry
            .release(user_id.as_str(), session_id.as_str(), &lease);
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

/// Encodes and queues an event for the writer; false once the writer is gone.
async fn send_event(writer: &mpsc::Sender<WriterCommand>, event: Event, mode: AudioFrames) -> bool {
    match encode_event(event, mode) {
        Ok(frame) => writer
            .send(WriterCommand::Frame(Box::new(frame)))
            .await
            .is_ok(),
        Err(error) => {
            tracing::error!(%error, "could not encode an event");
            true
        }
    }
}
