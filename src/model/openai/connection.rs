//! One OpenAI Realtime session: the WebSocket, the `session.created` / `session.update` /
//! `session.updated` handshake, and two tasks: the writer (client events and keep-alive pings
//! out; the only owner of the sink) and the reader (server events in, as `LlmResponse`s).

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::Message;

use super::wire::{Action, Decoder, Encoder, LastAudio, ToolExchange};
use crate::latch::Latch;
use crate::model::upstream::{
    dial, ping_interval, read_until_end, send_json, ReadHandler, Socket, UpstreamWriter,
};
use crate::model::{LiveConnection, ModelError, ModelMessage, CONNECTION_CHANNEL_CAPACITY};

/// How long the TCP/TLS/WebSocket handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the server may take to create and then update the session.
const SETUP_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest keep-alive ping interval (tungstenite sends none itself); shorter when the silence
/// timeout needs it.
const PING_INTERVAL: Duration = Duration::from_secs(20);
/// How long a closing session waits for the server's close frame.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Client events the reader may queue for the writer (truncates after barge-ins).
const UPSTREAM_CAPACITY: usize = 16;

/// Where and how to connect; `headers` carry credentials and are never logged.
pub(super) struct Endpoint {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    /// Least microphone audio per upstream message (zero: every frame as it came).
    pub audio_chunk: Duration,
    /// How long the server may send nothing, not even a pong, before the connection counts as
    /// lost (a black-holed upstream is noticed).
    pub silence_timeout: Duration,
}

/// What the session starts with.
pub(super) struct Setup {
    pub session_update: Value,
    pub history: Vec<Value>,
    pub manual: bool,
    pub decoder: Decoder,
    pub last_audio: LastAudio,
    pub tools: ToolExchange,
}

/// Opens a session: connects, waits for `session.created`, sends `session.update` and waits for
/// `session.updated`, seeds the history, then hands the socket to the reader and writer tasks.
pub(super) async fn open(endpoint: Endpoint, setup: Setup) -> Result<LiveConnection, ModelError> {
    let mut socket = dial("OpenAI", &endpoint.url, &endpoint.headers, CONNECT_TIMEOUT).await?;

    let Setup {
        session_update,
        history,
        manual,
        mut decoder,
        last_audio,
        tools,
    } = setup;
    let handshake = async {
        wait_for_session(&mut socket, &mut decoder).await?;
        send_json(&mut socket, &session_update, "OpenAI").await?;
        wait_for_session(&mut socket, &mut decoder).await
    };
    timeout(SETUP_TIMEOUT, handshake)
        .await
        .map_err(|_| ModelError::Connect("OpenAI did not set up the session in time".into()))??;
    for event in &history {
        send_json(&mut socket, event, "OpenAI").await?;
    }

    let (sink, stream) = socket.split();
    let (input_tx, input_rx) = crate::model::input_channel();
    let (output_tx, output_rx) = mpsc::channel(CONNECTION_CHANNEL_CAPACITY);
    let (upstream_tx, upstream_rx) = mpsc::channel(UPSTREAM_CAPACITY);
    let done = Latch::new();
    tokio::spawn(write_loop(
        UpstreamWriter::new(sink, endpoint.audio_chunk),
        input_rx,
        upstream_rx,
        Encoder::new(manual, last_audio).with_tools(tools),
        ping_interval(PING_INTERVAL, endpoint.silence_timeout),
        done.clone(),
    ));
    let reader = Reader {
        output: output_tx.clone(),
        upstream: upstream_tx,
        decoder,
        dropped_truncates: 0,
    };
    tokio::spawn(read_until_end(
        "OpenAI",
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

/// Reads until `session.created` or `session.updated`; an `error` event fails the setup.
async fn wait_for_session(socket: &mut Socket, decoder: &mut Decoder) -> Result<(), ModelError> {
    while let Some(message) = socket.next().await {
        let message = message.map_err(|e| ModelError::Connect(format!("OpenAI dropped: {e}")))?;
        let payload = match &message {
            Message::Text(text) => text.as_bytes(),
            Message::Binary(data) => data,
            Message::Close(frame) => return Err(ModelError::closed(frame.as_ref())),
            _ => continue,
        };
        for action in decoder.decode(payload, Instant::now())? {
            match action {
                Action::Session => return Ok(()),
                Action::Respond(response) if response.error_code.is_some() => {
                    return Err(ModelError::Connect(format!(
                        "OpenAI refused the session: {}",
                        response.error_message.unwrap_or_default()
                    )));
                }
                other => tracing::debug!(?other, "OpenAI event before the session was set up"),
            }
        }
    }
    Err(ModelError::Closed {
        code: 1006,
        reason: "OpenAI closed the connection during setup".into(),
    })
}

/// Sends client events and pings until the flow drops its sender (then closes politely) or the
/// reader ends.
async fn write_loop(
    mut writer: UpstreamWriter,
    mut inputs: crate::model::InputReceiver,
    mut upstream: mpsc::Receiver<Value>,
    mut encoder: Encoder,
    ping_interval: Duration,
    done: Latch,
) {
    let mut ping = tokio::time::interval(ping_interval);
    ping.tick().await;
    loop {
        let mut encode = |input| {
            encoder
                .encode(input)
                .into_iter()
                .map(|text| Message::Text(text.into()))
        };
        let sent = tokio::select! {
            _ = done.fired() => break,
            input = inputs.recv() => match input {
                Some(input) => writer.send_queued(input, &mut inputs, &mut encode).await,
                None => {
                    writer.close_within(CLOSE_TIMEOUT, &mut encode).await;
                    // The reader sees the server's close and ends; don't wait on it forever.
                    let _ = timeout(CLOSE_TIMEOUT, done.fired()).await;
                    break;
                }
            },
            () = writer.due() => writer.send_held(&mut encode).await,
            Some(event) = upstream.recv() => writer.send(Message::Text(event.to_string().into())).await,
            _ = ping.tick() => writer.send(Message::Ping(Vec::new().into())).await,
        };
        if let Err(error) = sent {
            tracing::debug!(%error, "sending to OpenAI failed");
            break;
        }
    }
    done.fire();
}

/// What the reader does with OpenAI's server events.
struct Reader {
    output: mpsc::Sender<ModelMessage>,
    /// Client events for the writer (truncates after barge-ins).
    upstream: mpsc::Sender<Value>,
    decoder: Decoder,
    /// Truncates dropped with the writer busy, for one log line now and then.
    dropped_truncates: u64,
}

impl ReadHandler for Reader {
    async fn handle(&mut self, payload: &[u8]) -> bool {
        let actions = match self.decoder.decode(payload, Instant::now()) {
            Ok(actions) => actions,
            Err(error) => {
                tracing::warn!(%error, "bad event from OpenAI");
                let _ = self.output.send(Err(error)).await;
                return false;
            }
        };
        for action in actions {
            match action {
                Action::Session => {}
                Action::Emulate(event) => {
                    if self.upstream.send(event).await.is_err() {
                        return false;
                    }
                }
                Action::Send(event) => {
                    if self.upstream.try_send(event).is_err() {
                        self.dropped_truncates += 1;
                        if self.dropped_truncates.is_power_of_two() {
                            tracing::warn!(
                                dropped = self.dropped_truncates,
                                "OpenAI writer busy; truncates dropped"
                            );
                        }
                    }
                }
                Action::Respond(response) => {
                    if self.output.send(Ok(response)).await.is_err() {
                        return false;
                    }
                }
            }
        }
        true
    }
}
