//! One Gemini Live session: the WebSocket, the setup handshake, and two tasks: the writer (inputs
//! and keep-alive pings out) and the reader (server messages in, as `LlmResponse`s).

use std::time::Duration;

use crate::latch::{receiver_gone, Latch};
use futures::stream::SplitStream;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::{self, Message};

use super::wire::{
    history_message, input_text, parse_server_message, text_as_realtime, ServerEvent,
};
use crate::model::upstream::{dial, ping_interval, send_json, Socket, UpstreamWriter};
use crate::model::{
    LiveConnectConfig, LiveConnection, LiveInput, ModelError, ModelMessage,
    CONNECTION_CHANNEL_CAPACITY,
};

/// Longest keep-alive ping interval (python-genai's websockets default; tungstenite sends none
/// itself); shorter when the silence timeout needs it, so a live server always has a pong to send.
const PING_INTERVAL: Duration = Duration::from_secs(20);
/// How long a closing session waits for the server's close frame.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where and how to connect; `headers` carry credentials and are never logged.
pub(super) struct Endpoint {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    /// Model id for `modelVersion`.
    pub model: String,
    /// How long connecting, and then the setup handshake, may each take.
    pub connect_timeout: Duration,
    /// How long the server may send nothing before the connection counts as lost.
    pub silence_timeout: Duration,
    /// Least microphone audio per upstream message (zero: every frame as it came).
    pub audio_chunk: Duration,
}

/// Opens a session: connects, sends `setup` (and the history), waits for `setupComplete`, then
/// hands the socket to the reader and writer tasks.
pub(super) async fn open(
    endpoint: Endpoint,
    setup: Value,
    config: &LiveConnectConfig,
) -> Result<LiveConnection, ModelError> {
    let mut socket = dial(
        "Gemini",
        &endpoint.url,
        &endpoint.headers,
        endpoint.connect_timeout,
    )
    .await?;
    send_json(&mut socket, &setup, "Gemini").await?;
    timeout(
        endpoint.connect_timeout,
        wait_for_setup(&mut socket, &endpoint.model),
    )
    .await
    .map_err(|_| ModelError::Connect("Gemini did not answer the setup in time".into()))??;
    if let Some(history) = history_message(config) {
        send_json(&mut socket, &history, "Gemini").await?;
    }

    let (sink, stream) = socket.split();
    let (input_tx, input_rx) = crate::model::input_channel();
    let (output_tx, output_rx) = mpsc::channel(CONNECTION_CHANNEL_CAPACITY);
    let done = Latch::new();
    let realtime_text = text_as_realtime(&endpoint.model);
    let ping = ping_interval(PING_INTERVAL, endpoint.silence_timeout);
    tokio::spawn(write_loop(
        UpstreamWriter::new(sink, endpoint.audio_chunk),
        input_rx,
        realtime_text,
        ping,
        done.clone(),
    ));
    let reader = Reader {
        output: output_tx,
        model: endpoint.model,
        silence_timeout: endpoint.silence_timeout,
    };
    tokio::spawn(reader.run(stream, done));
    Ok(LiveConnection {
        sender: input_tx,
        receiver: output_rx,
    })
}

async fn wait_for_setup(socket: &mut Socket, model: &str) -> Result<(), ModelError> {
    while let Some(message) = socket.next().await {
        let message = message.map_err(|e| ModelError::Connect(format!("Gemini dropped: {e}")))?;
        let payload = match &message {
            Message::Text(text) => text.as_bytes(),
            Message::Binary(data) => data,
            Message::Close(frame) => return Err(ModelError::closed(frame.as_ref())),
            _ => continue,
        };
        match parse_server_message(payload, model)? {
            ServerEvent::SetupComplete => return Ok(()),
            other => tracing::debug!(?other, "server message before setupComplete ignored"),
        }
    }
    Err(ModelError::Closed {
        code: 1006,
        reason: "Gemini closed the connection during setup".into(),
    })
}

/// Sends inputs and pings until the flow drops its sender (then closes politely) or the reader
/// ends (then flushes the echo of the server's close frame the socket queued when it read it, so
/// the server's closing handshake completes).
async fn write_loop(
    mut writer: UpstreamWriter,
    mut inputs: crate::model::InputReceiver,
    realtime_text: bool,
    ping_interval: Duration,
    done: Latch,
) {
    let encode =
        |input: LiveInput| std::iter::once(Message::Text(input_text(&input, realtime_text).into()));
    let mut ping = tokio::time::interval(ping_interval);
    ping.tick().await;
    loop {
        let sent = tokio::select! {
            _ = done.fired() => {
                writer.flush_within(CLOSE_TIMEOUT).await;
                break;
            }
            input = inputs.recv() => match input {
                Some(input) => writer.send_queued(input, &mut inputs, encode).await,
                None => {
                    writer.close_within(CLOSE_TIMEOUT, encode).await;
                    // The reader sees the server's close and ends; don't wait on it forever.
                    let _ = timeout(CLOSE_TIMEOUT, done.fired()).await;
                    break;
                }
            },
            () = writer.due() => writer.send_held(encode).await,
            _ = ping.tick() => writer.send(Message::Ping(Vec::new().into())).await,
        };
        if let Err(error) = sent {
            tracing::debug!(%error, "sending to Gemini failed");
            break;
        }
    }
    done.fire();
}

/// The reading half of a session.
struct Reader {
    output: mpsc::Sender<ModelMessage>,
    model: String,
    silence_timeout: Duration,
}

impl Reader {
    /// Turns server messages into responses until the socket closes, the server goes silent or
    /// the flow goes away.
    async fn run(self, mut stream: SplitStream<Socket>, done: Latch) {
        // Made once, not per message: a fresh wait registers and unregisters a waiter each time.
        let ended = done.fired();
        let flow_gone = receiver_gone(&self.output);
        tokio::pin!(ended, flow_gone);
        loop {
            let message = tokio::select! {
                () = &mut ended => break,
                () = &mut flow_gone => break,
                message = timeout(self.silence_timeout, stream.next()) => message,
            };
            let Ok(message) = message else {
                tracing::warn!(timeout = ?self.silence_timeout, "Gemini went silent");
                let silent = ModelError::Closed {
                    code: 1006,
                    reason: format!("Gemini sent nothing for {:?}", self.silence_timeout),
                };
                let _ = self.output.send(Err(silent)).await;
                break;
            };
            if !self.handle(message).await {
                break;
            }
        }
        done.fire();
    }

    /// Passes one socket read on to the flow; false once the session is over.
    async fn handle(&self, message: Option<Result<Message, tungstenite::Error>>) -> bool {
        let result = match message {
            Some(Ok(Message::Text(text))) => parse_server_message(text.as_bytes(), &self.model),
            Some(Ok(Message::Binary(data))) => parse_server_message(&data, &self.model),
            Some(Ok(Message::Close(frame))) => {
                let error = ModelError::closed(frame.as_ref());
                tracing::info!(%error, "Gemini closed the session");
                // A normal close just ends the stream (the flow reconnects if it has a handle).
                if !matches!(error, ModelError::Closed { code: 1000, .. }) {
                    let _ = self.output.send(Err(error)).await;
                }
                return false;
            }
            Some(Ok(_)) => return true,
            Some(Err(error)) => {
                tracing::warn!(%error, "Gemini connection failed");
                let _ = self
                    .output
                    .send(Err(ModelError::Closed {
                        code: 1006,
                        reason: error.to_string(),
                    }))
                    .await;
                return false;
            }
            None => return false,
        };
        let response = match result {
            Ok(ServerEvent::Response(response)) => response,
            Ok(ServerEvent::SetupComplete | ServerEvent::Nothing) => return true,
            Err(error) => {
                tracing::warn!(%error, "bad message from Gemini");
                let _ = self.output.send(Err(error)).await;
                return false;
            }
        };
        self.output.send(Ok(response)).await.is_ok()
    }
}
