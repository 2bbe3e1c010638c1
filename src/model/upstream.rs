//! What the WebSocket model backends share on their upstream socket: its type, how a failed
//! upgrade reads, and sending a setup-time JSON message.

use futures::stream::SplitSink;
use futures::SinkExt;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tungstenite::Message;

use super::{LiveInput, ModelError};

/// Most queued inputs written with one flush (a second of microphone frames at 20 ms).
const MAX_INPUTS_PER_WRITE: usize = 50;

/// A backend's socket to its model server.
pub(crate) type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

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

/// Sends `first` and the inputs already queued behind it (each as the messages `encode` makes
/// of it), then flushes once: the upstream write, a system call per flush, is most of what a
/// microphone frame costs on a model server's path, and when a busy gateway left a session's
/// frames waiting, one write carries them all. Nothing waits for more to come.
pub(crate) async fn send_queued<M>(
    sink: &mut SplitSink<Socket, Message>,
    first: LiveInput,
    inputs: &mut mpsc::Receiver<LiveInput>,
    mut encode: impl FnMut(LiveInput) -> M,
) -> Result<(), tungstenite::Error>
where
    M: IntoIterator<Item = Message>,
{
    for message in encode(first) {
        sink.feed(message).await?;
    }
    for _ in 1..MAX_INPUTS_PER_WRITE {
        let Ok(input) = inputs.try_recv() else {
            break;
        };
        for message in encode(input) {
            sink.feed(message).await?;
        }
    }
    sink.flush().await
}
