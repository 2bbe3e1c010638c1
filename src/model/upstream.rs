//! What the WebSocket model backends share on their upstream socket: its type, how a failed
//! upgrade reads, sending a setup-time JSON message, the writer that owns the sink, and the
//! reader's loop.

use std::future::Future;
use std::pin::Pin;

use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{timeout, Duration, Instant, Sleep};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::Message;

use super::chunker::AudioChunker;
use super::{LiveInput, ModelError, ModelMessage};
use crate::latch::{receiver_gone, Latch};

/// Most queued inputs written with one flush (a second of microphone frames at 20 ms).
const MAX_INPUTS_PER_WRITE: usize = 50;

/// A backend's socket to its model server.
pub(crate) type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Largest server message accepted (the SDKs' limit is 1 MiB; leave room).
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Most bytes taken from the socket per read. tungstenite zero-fills its read buffer up to this
/// size before every read, so each session keeps it resident: its default of 128 KiB was most of
/// an idle Gemini session's memory. A bigger message still arrives whole (the buffer grows to fit
/// it); an answer's audio message (200–240 ms, about 11 KB as JSON) takes two reads.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// Opens the WebSocket to `provider`'s `url` with `headers` (credentials: never logged), TLS by
/// rustls, within `limit`.
pub(crate) async fn dial(
    provider: &str,
    url: &str,
    headers: &[(&'static str, String)],
    limit: Duration,
) -> Result<Socket, ModelError> {
    use tungstenite::client::IntoClientRequest;
    use tungstenite::http::HeaderValue;
    let mut request = url
        .into_client_request()
        .map_err(|e| ModelError::Connect(format!("invalid {provider} URL: {e}")))?;
    for (name, value) in headers {
        let value = HeaderValue::from_str(value)
            .map_err(|_| ModelError::Connect(format!("invalid value for header {name}")))?;
        request.headers_mut().insert(*name, value);
    }
    let ws_config = tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES))
        .read_buffer_size(READ_BUFFER_BYTES);
    let tls = super::tls::client_config().map_err(|e| ModelError::Connect(e.to_string()))?;
    let connecting = tokio_tungstenite::connect_async_tls_with_config(
        request,
        Some(ws_config),
        true,
        Some(tokio_tungstenite::Connector::Rustls(tls)),
    );
    let (socket, _) = timeout(limit, connecting)
        .await
        .map_err(|_| ModelError::Connect(format!("timed out connecting to {provider}")))?
        .map_err(|e| handshake_error(provider, e))?;
    Ok(socket)
}

/// The keep-alive ping interval for a silence timeout: at most `longest`, and short enough that a
/// live server always has a pong to send within the timeout.
pub(crate) fn ping_interval(longest: Duration, silence_timeout: Duration) -> Duration {
    longest
        .min(silence_timeout / 3)
        .max(Duration::from_millis(10))
}

/// A failed upgrade to `provider`: an HTTP status (401, 403, 404, 429) or a network error.
pub(crate) fn handshake_error(provider: &str, error: tungstenite::Error) -> ModelError {
    match error {
        tungstenite::Error::Http(response) => ModelError::Connect(format!(
            "{provider} refused the connection: HTTP {}",
            response.status()
        )),
        other => ModelError::Connect(format!("could not reach {provider}: {other}")),
    }
}

/// Sends one JSON message while the connection is being set up.
pub(crate) async fn send_json(
    socket: &mut Socket,
    value: &Value,
    provider: &str,
) -> Result<(), ModelError> {
    socket
        .send(Message::Text(value.to_string().into()))
        .await
        .map_err(|e| ModelError::Connect(format!("sending to {provider} failed: {e}")))
}

/// The sending half of a backend's socket: the one owner of the sink, with microphone audio
/// gathered into chunks on its way out (see [`AudioChunker`]).
pub(crate) struct UpstreamWriter {
    sink: SplitSink<Socket, Message>,
    chunker: AudioChunker,
    /// Fires when held audio is due; armed only while audio is held.
    hold: Pin<Box<Sleep>>,
}

impl UpstreamWriter {
    pub(crate) fn new(sink: SplitSink<Socket, Message>, audio_chunk: Duration) -> Self {
        UpstreamWriter {
            sink,
            chunker: AudioChunker::new(audio_chunk),
            hold: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }

    /// Sends `first` and the inputs already queued behind it (each as the messages `encode`
    /// makes of it, audio gathered into chunks), then flushes once: the upstream write, a system
    /// call per flush, is most of what a microphone frame costs on a model server's path, and
    /// when a busy gateway left a session's frames waiting, one write carries them all. Nothing
    /// waits for more to come; audio short of a chunk stays held until it is [`due`](Self::due).
    pub(crate) async fn send_queued<M>(
        &mut self,
        first: LiveInput,
        inputs: &mut super::InputReceiver,
        mut encode: impl FnMut(LiveInput) -> M,
    ) -> Result<(), tungstenite::Error>
    where
        M: IntoIterator<Item = Message>,
    {
        let now = Instant::now();
        let mut fed = false;
        let mut next = Some(first);
        for taken in 1..=MAX_INPUTS_PER_WRITE {
            let Some(input) = next.take() else {
                break;
            };
            for ready in self.chunker.push(input, now).into_iter().flatten() {
                for message in encode(ready) {
                    self.sink.feed(message).await?;
                    fed = true;
                }
            }
            if taken < MAX_INPUTS_PER_WRITE {
                next = inputs.try_recv().ok();
            }
        }
        // Re-armed only when a new hold starts: a timer reset is a timer-wheel update.
        if let Some(due) = self
            .chunker
            .due()
            .filter(|&due| due != self.hold.deadline())
        {
            self.hold.as_mut().reset(due);
        }
        if fed {
            self.sink.flush().await?;
        }
        Ok(())
    }

    /// Resolves when audio has been held a chunk's length; never while none is held.
    pub(crate) async fn due(&mut self) {
        if self.chunker.due().is_some() {
            self.hold.as_mut().await;
        } else {
            std::future::pending::<()>().await;
        }
    }

    /// Sends the audio held, if any, and flushes.
    pub(crate) async fn send_held<M>(
        &mut self,
        mut encode: impl FnMut(LiveInput) -> M,
    ) -> Result<(), tungstenite::Error>
    where
        M: IntoIterator<Item = Message>,
    {
        if let Some(held) = self.chunker.take() {
            for message in encode(held) {
                self.sink.feed(message).await?;
            }
        }
        self.sink.flush().await
    }

    /// Sends one message now (a ping, a backend's own event), ahead of any audio held.
    pub(crate) async fn send(&mut self, message: Message) -> Result<(), tungstenite::Error> {
        self.sink.send(message).await
    }

    /// Flushes what was written, within `limit`.
    pub(crate) async fn flush_within(&mut self, limit: Duration) {
        let _ = timeout(limit, self.sink.flush()).await;
    }

    /// Sends the audio held, then a normal close frame, within `limit`.
    pub(crate) async fn close_within<M>(
        &mut self,
        limit: Duration,
        encode: impl FnMut(LiveInput) -> M,
    ) where
        M: IntoIterator<Item = Message>,
    {
        let close = CloseFrame {
            code: CloseCode::Normal,
            reason: "client closed".into(),
        };
        let closing = async {
            self.send_held(encode).await?;
            self.sink.send(Message::Close(Some(close))).await
        };
        let _ = timeout(limit, closing).await;
    }
}

/// What a backend's reader does with each message its model server sends.
pub(crate) trait ReadHandler {
    /// Passes one text or binary message's payload on to the flow; false once the session is
    /// over.
    fn handle(&mut self, payload: &[u8]) -> impl Future<Output = bool> + Send;
}

/// The reading half of a backend's session: hands what `provider` sends to `handler` until the
/// socket closes, the server sends nothing (not even a pong) for `silence_timeout`, the flow
/// drops `output`'s receiver or `done` fires; then fires `done`. Everything but a normal close
/// reaches the flow on `output` as an error.
pub(crate) async fn read_until_end(
    provider: &'static str,
    mut stream: SplitStream<Socket>,
    output: mpsc::Sender<ModelMessage>,
    silence_timeout: Duration,
    done: Latch,
    mut handler: impl ReadHandler,
) {
    // Made once, not per message: a fresh wait registers and unregisters a waiter each time.
    let ended = done.fired();
    let flow_gone = receiver_gone(&output);
    tokio::pin!(ended, flow_gone);
    loop {
        let message = tokio::select! {
            () = &mut ended => break,
            () = &mut flow_gone => break,
            message = timeout(silence_timeout, stream.next()) => message,
        };
        let Ok(message) = message else {
            tracing::warn!(timeout = ?silence_timeout, "{provider} went silent");
            let silent = ModelError::Closed {
                code: 1006,
                reason: format!("{provider} sent nothing for {silence_timeout:?}"),
            };
            let _ = output.send(Err(silent)).await;
            break;
        };
        let payload = match &message {
            Some(Ok(Message::Text(text))) => text.as_bytes(),
            Some(Ok(Message::Binary(data))) => data,
            Some(Ok(Message::Close(frame))) => {
                let error = ModelError::closed(frame.as_ref());
                tracing::info!(%error, "{provider} closed the session");
                // A normal close just ends the stream (the flow reconnects if it has a handle).
                if !matches!(error, ModelError::Closed { code: 1000, .. }) {
                    let _ = output.send(Err(error)).await;
                }
                break;
            }
            Some(Ok(_)) => continue,
            Some(Err(error)) => {
                tracing::warn!(%error, "{provider} connection failed");
                let failed = ModelError::Closed {
                    code: 1006,
                    reason: error.to_string(),
                };
                let _ = output.send(Err(failed)).await;
                break;
            }
            // Only after a close frame, which ends the loop first; a drop, should it come.
            None => {
                let dropped = ModelError::Closed {
                    code: 1006,
                    reason: format!("{provider} dropped the connection"),
                };
                let _ = output.send(Err(dropped)).await;
                break;
            }
        };
        if !handler.handle(payload).await {
            break;
        }
    }
    done.fire();
}
