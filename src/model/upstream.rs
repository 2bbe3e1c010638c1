//! What the WebSocket model backends share on their upstream socket: its type, how a failed
//! upgrade reads, and sending a setup-time JSON message.

use futures::SinkExt;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tungstenite::Message;

use super::ModelError;

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
