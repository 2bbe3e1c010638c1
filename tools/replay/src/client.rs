//! How the tools present themselves to a gateway's WebSocket: the request for a URL, with the
//! token as `Authorization: Bearer`. The load generator opens its sockets with it too.

use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;

/// Why the upgrade request cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The WebSocket URL is not one.
    #[error("{0}")]
    Url(tungstenite::Error),
    /// The token cannot go in a header.
    #[error("the token is not a valid header value")]
    BadToken,
}

/// The upgrade request for `url`, carrying `token` if there is one.
pub fn request(url: &str, token: Option<&str>) -> Result<Request, RequestError> {
    let mut request = url.into_client_request().map_err(RequestError::Url)?;
    if let Some(token) = token {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| RequestError::BadToken)?;
        request.headers_mut().insert("authorization", value);
    }
    Ok(request)
}
