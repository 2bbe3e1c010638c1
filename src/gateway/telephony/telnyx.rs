//! Telnyx: media streaming over a bidirectional TeXML `<Connect><Stream bidirectionalMode="rtp">`,
//! and the TeXML webhook signed with Ed25519.
//!
//! Chosen as the second carrier because TeXML is Twilio-compatible (a Twilio voice app moves by
//! changing its URL) while its stream and its signatures are not Twilio's: snake_case messages
//! named by `stream_id`, and a public-key signature (`telnyx-signature-ed25519` over
//! `{telnyx-timestamp}|{body}`) instead of a shared secret, so the gateway holds no Telnyx
//! secret at all. Messages as
//! <https://developers.telnyx.com/docs/voice/programmable-voice/media-streaming> and
//! <https://developers.telnyx.com/api-reference/websockets/stream-call-media-over-websocket>,
//! TeXML as <https://developers.telnyx.com/docs/voice/programmable-voice/texml-verbs/stream>,
//! signatures as <https://developers.telnyx.com/docs/development/api-fundamentals/webhooks>.

use axum::http::HeaderMap;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::carrier::{
    connect_stream, field, form_fields, read_message, CallStart, Carrier, Inbound, MediaFormat,
    ProtocolError, WebhookCall, WebhookError,
};

/// The signature header (base64 Ed25519).
pub const SIGNATURE_HEADER: &str = "telnyx-signature-ed25519";
/// The header with the signing time (Unix seconds), signed with the body.
pub const TIMESTAMP_HEADER: &str = "telnyx-timestamp";
/// Where the account's public key (base64, 32 bytes) comes from.
pub const PUBLIC_KEY_ENV: &str = "TELNYX_PUBLIC_KEY";
/// How old a signature may be: older ones are replays.
const TOLERANCE_SECS: u64 = 300;
const MAX_FORM_FIELDS: usize = 100;
const NAME: &str = "telnyx";

/// The Telnyx adapter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Telnyx;

#[derive(Deserialize)]
struct Start {
    call_control_id: String,
    #[serde(default)]
    custom_parameters: Option<Map<String, Value>>,
    #[serde(default)]
    media_format: Option<MediaFormat>,
}

impl Carrier for Telnyx {
    fn name(&self) -> &'static str {
        NAME
    }

    fn parse<'a>(&self, text: &'a str) -> Result<Inbound<'a>, ProtocolError> {
        read_message(
            NAME,
            text,
            |start: Option<Start>, stream_id: Option<String>, missing| {
                let stream_id = stream_id.ok_or_else(|| missing("stream_id"))?;
                let start = start.ok_or_else(|| missing("start"))?;
                CallStart::read(
                    NAME,
                    ["call_control_id", "stream_id"],
                    start.call_control_id,
                    stream_id,
                    start.custom_parameters,
                    start.media_format,
                )
            },
        )
    }

    fn media(&self, _stream_id: &str, payload: &[u8], out: &mut String) {
        out.reserve(48 + base64::encoded_len(payload.len(), true).unwrap_or(0));
        out.push_str("{\"event\":\"media\",\"media\":{\"payload\":\"");
        STANDARD.encode_string(payload, out);
        out.push_str("\"}}");
    }

    fn mark(&self, _stream_id: &str, name: &str) -> String {
        format!(
            "{{\"event\":\"mark\",\"mark\":{{\"name\":{}}}}}",
            Value::from(name)
        )
    }

    fn clear(&self, _stream_id: &str) -> String {
        "{\"event\":\"clear\"}".to_owned()
    }

    fn verify_webhook(
        &self,
        secret: Option<&str>,
        _url: &str,
        headers: &HeaderMap,
        body: &[u8],
        now_unix: u64,
    ) -> Result<WebhookCall, WebhookError> {
        if let Some(public_key) = secret {
            verify(public_key, headers, body, now_unix)?;
        }
        let fields = form_fields(body, MAX_FORM_FIELDS)?;
        Ok(WebhookCall {
            call_id: field(&fields, "CallSid")
                .or_else(|| field(&fields, "CallControlId"))
                .ok_or_else(|| WebhookError::Malformed("no CallSid".into()))?,
            from: field(&fields, "From"),
            to: field(&fields, "To"),
        })
    }

    fn answer(&self, stream_url: &str, parameters: &[(String, String)]) -> String {
        connect_stream(
            stream_url,
            " bidirectionalMode=\"rtp\" bidirectionalCodec=\"PCMU\"",
            parameters,
        )
    }

    fn secret_env(&self) -> &'static str {
        PUBLIC_KEY_ENV
    }
}

/// Checks `telnyx-signature-ed25519` over `{telnyx-timestamp}|{body}` with the account's public
/// key, and that the timestamp is recent.
fn verify(
    public_key: &str,
    headers: &HeaderMap,
    body: &[u8],
    now_unix: u64,
) -> Result<(), WebhookError> {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(signature), Some(timestamp)) = (header(SIGNATURE_HEADER), header(TIMESTAMP_HEADER))
    else {
        return Err(WebhookError::Missing);
    };
    let signed_at: u64 = timestamp
        .trim()
        .parse()
        .map_err(|_| WebhookError::Invalid)?;
    if now_unix.abs_diff(signed_at) > TOLERANCE_SECS {
        return Err(WebhookError::Invalid);
    }
    let key = STANDARD
        .decode(public_key.trim())
        .map_err(|_| WebhookError::NotConfigured(NAME, PUBLIC_KEY_ENV))?;
    let signature = STANDARD
        .decode(signature.trim())
        .map_err(|_| WebhookError::Invalid)?;
    let mut message = Vec::with_capacity(timestamp.len() + 1 + body.len());
    message.extend_from_slice(timestamp.trim().as_bytes());
    message.push(b'|');
    message.extend_from_slice(body);
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key)
        .verify(&message, &signature)
        .map_err(|_| WebhookError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::KeyPair;

    #[test]
    fn telnyx_s_documented_messages_are_read_and_written() {
        let t = Telnyx;
        assert_eq!(
            t.parse(r#"{"event":"connected","version":"1.0.0"}"#),
            Ok(Inbound::Connected)
        );
        let start = r#"{"event":"start","sequence_number":"1","stream_id":"32DE0DEA-53CB-4B21-89A4-9E1819C043BC","start":{"user_id":"3E6F995F-85F7-4705-9741-53B116D28237","call_control_id":"v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg","client_state":"aGF2ZSBhIG5pY2UgZGF5ID1d","media_format":{"encoding":"PCMU","sample_rate":8000,"channels":1}}}"#;
        let Ok(Inbound::Start(start)) = t.parse(start) else {
            panic!("start");
        };
        assert_eq!(
            start.call_id,
            "v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg"
        );
        assert_eq!(start.stream_id, "32DE0DEA-53CB-4B21-89A4-9E1819C043BC");
        assert_eq!(start.encoding.as_deref(), Some("PCMU"));
        let media = r#"{"event":"media","sequence_number":"4","media":{"track":"inbound","chunk":"2","timestamp":"5","payload":"no+JhoaJjpy="},"stream_id":"S1"}"#;
        assert_eq!(t.parse(media), Ok(Inbound::Media("no+JhoaJjpy=".into())));
        let dtmf = r##"{"event":"dtmf","stream_id":"S1","occurred_at":"2022-05-26T14:20:17Z","sequence_number":"5","dtmf":{"digit":"#"}}"##;
        assert_eq!(t.parse(dtmf), Ok(Inbound::Dtmf('#')));
        assert_eq!(
            t.parse(r#"{"event":"mark","stream_id":"S1","mark":{"name":"a1:40"}}"#),
            Ok(Inbound::Mark("a1:40".into()))
        );
        assert_eq!(
            t.parse(r#"{"event":"stop","stream_id":"S1","stop":{}}"#),
            Ok(Inbound::Stop)
        );
        assert_eq!(
            t.parse(r#"{"event":"error","payload":{"code":100002}}"#),
            Ok(Inbound::Ignored("error".into()))
        );
        let mut media = String::new();
        t.media("S1", &[0xff], &mut media);
        assert_eq!(media, r#"{"event":"media","media":{"payload":"/w=="}}"#);
        assert_eq!(t.mark("S1", "m"), r#"{"event":"mark","mark":{"name":"m"}}"#);
        assert_eq!(t.clear("S1"), r#"{"event":"clear"}"#);
        assert!(t
            .answer("wss://h/s", &[])
            .contains("bidirectionalMode=\"rtp\""));
    }

    #[test]
    fn ed25519_signatures_verify_only_for_the_signed_body_and_a_recent_time() {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pair = ring::signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let public = STANDARD.encode(pair.public_key().as_ref());
        let body = b"CallSid=v3%3Aabc&From=%2B15551234567&To=%2B15557654321";
        let signed =
            pair.sign(b"1700000000|CallSid=v3%3Aabc&From=%2B15551234567&To=%2B15557654321");
        let mut headers = HeaderMap::new();
        headers.insert(
            SIGNATURE_HEADER,
            STANDARD.encode(signed.as_ref()).parse().unwrap(),
        );
        headers.insert(TIMESTAMP_HEADER, "1700000000".parse().unwrap());
        let call = Telnyx
            .verify_webhook(Some(&public), "", &headers, body, 1_700_000_100)
            .unwrap();
        assert_eq!(call.call_id, "v3:abc");
        assert_eq!(call.from.as_deref(), Some("+15551234567"));
        assert_eq!(
            Telnyx.verify_webhook(Some(&public), "", &headers, body, 1_700_001_000),
            Err(WebhookError::Invalid),
            "a replay"
        );
        assert_eq!(
            Telnyx.verify_webhook(Some(&public), "", &headers, b"CallSid=other", 1_700_000_100),
            Err(WebhookError::Invalid)
        );
        assert_eq!(
            Telnyx.verify_webhook(Some(&public), "", &HeaderMap::new(), body, 1_700_000_100),
            Err(WebhookError::Missing)
        );
    }
}
