//! How the tools present themselves to a gateway's WebSocket: the request for a URL, with the
//! token as `Authorization: Bearer`. The load generator opens its sockets with it too.

use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;

/// The upgrade request for `url`, carrying `token` if there is one; why not, if it cannot be
/// made (a bad URL, a token that is no header value).
pub fn request(url: &str, token: Option<&str>) -> Result<Request, String> {
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    if let Some(token) = token {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| "the token is not a valid header value".to_owned())?;
        request.headers_mut().insert("authorization", value);
    }
    Ok(request)
}
