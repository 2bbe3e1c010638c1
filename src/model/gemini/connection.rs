//! One Gemini Live session: the WebSocket, the setup handshake, and two tasks: the writer (inputs
//! and keep-alive pings out) and the reader (server messages in, as `LlmResponse`s).

use std::time::Duration;

use crate::latch::Latch;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

use super::wire::{
    history_message, input_text, parse_server_message, text_as_realtime, ServerEvent,
};
use crate::model::upstream::{
    dial, ping_interval, read_until_end, send_json, ReadHandler, Socket, UpstreamWriter,
};
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
        output: output_tx.clone(),
        model: endpoint.model,
    };
    tokio::spawn(read_until_end(
        "Gemini",
        stream,
        output_tx,
        endpoint.silence_timeout,
        done,
        reader,
    ));
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

/// What the reader does with Gemini's messages.
struct Reader {
    output: mpsc::Sender<ModelMessage>,
    model: String,
}

impl ReadHandler for Reader {
    async fn handle(&mut self, payload: &[u8]) -> bool {
        let response = match parse_server_message(payload, &self.model) {
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
