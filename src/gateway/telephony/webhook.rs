//! `POST /telephony/{carrier}/voice`: a carrier asks what to do with an incoming call. The
//! request's signature is checked with the carrier's secret from the environment (required
//! unless the gateway is anonymous), and the answer connects the call to this gateway's stream
//! route with a token minted for the call's session, valid for a minute: a stream cannot be
//! opened by someone who only learns the URL later. The webhook URL's query parameters, and the
//! caller's and called numbers, go to the stream as its custom parameters.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::carrier::{WebhookCall, WebhookError, MAX_FIELD_BYTES};
use super::{carrier, CallIds, Telephony, STREAM_TOKEN_TTL};
use crate::gateway::auth::AuthMode;
use crate::gateway::Gateway;

/// Most query parameters of the webhook URL passed on to the stream.
const MAX_FORWARDED: usize = 16;

/// Answers a carrier's voice webhook.
pub(super) async fn voice(
    State(gateway): State<Arc<Gateway>>,
    Path(carrier_name): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(carrier) = carrier(&carrier_name) else {
        return (StatusCode::NOT_FOUND, "no such carrier").into_response();
    };
    if gateway.shutdown.is_fired() {
        // The carrier tries its fallback URL, another node.
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    let telephony = &gateway.telephony;
    let anonymous = gateway.auth.mode() == AuthMode::None;
    let secret = telephony.secrets.for_carrier(carrier);
    if secret.is_none() && !anonymous {
        return refuse(
            &gateway,
            WebhookError::NotConfigured(carrier.name(), carrier.secret_env()),
        );
    }
    let base = base_url(telephony, &headers);
    let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let url = format!("{base}{path}");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let call = match carrier.verify_webhook(secret.map(|s| s.expose()), &url, &headers, &body, now)
    {
        Ok(call) => call,
        Err(error) => return refuse(&gateway, error),
    };
    let parameters = forwarded(&uri, &call);
    let find = |name: &str| {
        parameters
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let ids = match CallIds::derive(
        &telephony.settings,
        &call.call_id,
        call.from.as_deref(),
        find,
    ) {
        Ok(ids) => ids,
        Err(why) => return refuse(&gateway, WebhookError::Malformed(why.to_string())),
    };
    let mut stream_url = format!(
        "{}/telephony/{}/stream",
        websocket_base(&base),
        carrier.name()
    );
    if !anonymous {
        let minted = gateway.auth.mint_for_session(
            ids.user.as_str(),
            ids.session.as_str(),
            STREAM_TOKEN_TTL,
        );
        match minted {
            Some(Ok(minted)) => {
                stream_url.push('/');
                stream_url.push_str(&minted.token);
            }
            Some(Err(error)) => {
                tracing::error!(%error, "could not mint a call's stream token");
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "could not mint a stream token",
                )
                    .into_response();
            }
            None => {
                tracing::error!("calls on a gateway with auth need LIVEGATE_TOKEN_SECRET to sign their stream URLs");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "stream tokens need LIVEGATE_TOKEN_SECRET",
                )
                    .into_response();
            }
        }
    }
    tracing::info!(
        carrier = carrier.name(),
        call_id = call.call_id,
        user_id = %ids.user,
        session_id = %ids.session,
        "call answered"
    );
    (
        [(header::CONTENT_TYPE, "text/xml; charset=utf-8")],
        carrier.answer(&stream_url, &parameters),
    )
        .into_response()
}

/// A refused webhook: 403 (503 when the gateway lacks the secret), counted as an auth failure.
fn refuse(gateway: &Gateway, error: WebhookError) -> Response {
    gateway.metrics.auth_failure(error.reason());
    tracing::warn!(%error, "carrier webhook refused");
    let status = match error {
        WebhookError::NotConfigured(..) => StatusCode::SERVICE_UNAVAILABLE,
        WebhookError::Malformed(_) => StatusCode::BAD_REQUEST,
        WebhookError::Missing | WebhookError::Invalid => StatusCode::FORBIDDEN,
    };
    (status, error.to_string()).into_response()
}

/// The URL carriers reach this gateway at: `--telephony-public-url`, else the request's `Host`
/// with the scheme a proxy says (`X-Forwarded-Proto`), else `http`.
fn base_url(telephony: &Telephony, headers: &HeaderMap) -> String {
    if let Some(url) = &telephony.settings.public_url {
        return url.clone();
    }
    let value = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let scheme = match value("x-forwarded-proto") {
        Some("https") => "https",
        _ => "http",
    };
    let host = value(header::HOST.as_str()).unwrap_or("localhost");
    format!("{scheme}://{host}")
}

/// `http(s)://` as `ws(s)://`.
fn websocket_base(base: &str) -> String {
    if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        base.to_owned()
    }
}

/// The stream's custom parameters: the numbers, then the webhook URL's query parameters.
fn forwarded(uri: &Uri, call: &WebhookCall) -> Vec<(String, String)> {
    let mut parameters = Vec::new();
    if let Some(from) = &call.from {
        parameters.push(("From".to_owned(), from.clone()));
    }
    if let Some(to) = &call.to {
        parameters.push(("To".to_owned(), to.clone()));
    }
    let query = uri.query().unwrap_or_default().as_bytes();
    let fields = super::carrier::form_fields(query, MAX_FORWARDED).unwrap_or_default();
    parameters.extend(fields.into_iter().filter(|(name, value)| {
        !name.is_empty()
            && name.len() <= MAX_FIELD_BYTES
            && value.len() <= MAX_FIELD_BYTES
            && name != "From"
            && name != "To"
    }));
    parameters
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_url_follows_the_public_url_or_the_host() {
        assert_eq!(
            websocket_base("https://voice.example"),
            "wss://voice.example"
        );
        assert_eq!(websocket_base("http://127.0.0.1:9"), "ws://127.0.0.1:9");
        let call = WebhookCall {
            call_id: "CA1".into(),
            from: Some("+1555".into()),
            to: None,
        };
        let uri: Uri = "/telephony/twilio/voice?campaign=spring&From=spoof"
            .parse()
            .unwrap();
        assert_eq!(
            forwarded(&uri, &call),
            [
                ("From".to_owned(), "+1555".to_owned()),
                ("campaign".to_owned(), "spring".to_owned())
            ]
        );
    }
}
