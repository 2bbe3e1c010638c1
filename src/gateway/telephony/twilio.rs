//! Twilio: Media Streams over a bidirectional `<Connect><Stream>`, and the voice webhook signed
//! with `X-Twilio-Signature`.
//!
//! Messages as <https://www.twilio.com/docs/voice/media-streams/websocket-messages> gives them:
//! `connected`, `start`, `media` (base64 μ-law, 8 kHz), `dtmf`, `mark`, `stop` in; `media`, `mark`
//! and `clear` out, each naming the `streamSid`. TwiML as
//! <https://www.twilio.com/docs/voice/twiml/stream>; signatures as
//! <https://www.twilio.com/docs/usage/webhooks/webhooks-security> (HMAC-SHA1 with the account's
//! auth token over the URL and the sorted form fields).

use axum::http::HeaderMap;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::carrier::{
    connect_stream, field, form_fields, read_message, CallStart, Carrier, Inbound, MediaFormat,
    ProtocolError, WebhookCall, WebhookError,
};

/// The signature header.
pub const SIGNATURE_HEADER: &str = "x-twilio-signature";
/// Where the auth token comes from.
pub const AUTH_TOKEN_ENV: &str = "TWILIO_AUTH_TOKEN";
/// Most form fields a voice webhook may carry (Twilio sends about twenty).
const MAX_FORM_FIELDS: usize = 100;
const NAME: &str = "twilio";

/// The Twilio adapter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Twilio;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Start {
    stream_sid: String,
    call_sid: String,
    #[serde(default)]
    custom_parameters: Option<Map<String, Value>>,
    #[serde(default)]
    media_format: Option<MediaFormat>,
}

/// Appends `{"event":"<event>","streamSid":"<id>"` (ids are checked to need no escaping).
fn head(out: &mut String, event: &str, stream_id: &str) {
    out.push_str("{\"event\":\"");
    out.push_str(event);
    out.push_str("\",\"streamSid\":\"");
    out.push_str(stream_id);
    out.push('"');
}

impl Carrier for Twilio {
    fn name(&self) -> &'static str {
        NAME
    }

    fn parse<'a>(&self, text: &'a str) -> Result<Inbound<'a>, ProtocolError> {
        read_message(
            NAME,
            text,
            |start: Option<Start>, _: IgnoredAny, missing| {
                let start = start.ok_or_else(|| missing("start"))?;
                CallStart::read(
                    NAME,
                    ["callSid", "streamSid"],
                    start.call_sid,
                    start.stream_sid,
                    start.custom_parameters,
                    start.media_format,
                )
            },
        )
    }

    fn media(&self, stream_id: &str, payload: &[u8], out: &mut String) {
        out.reserve(64 + base64::encoded_len(payload.len(), true).unwrap_or(0));
        head(out, "media", stream_id);
        out.push_str(",\"media\":{\"payload\":\"");
        STANDARD.encode_string(payload, out);
        out.push_str("\"}}");
    }

    fn mark(&self, stream_id: &str, name: &str) -> String {
        let mut out = String::with_capacity(80 + name.len());
        head(&mut out, "mark", stream_id);
        out.push_str(",\"mark\":{\"name\":");
        out.push_str(&Value::from(name).to_string());
        out.push_str("}}");
        out
    }

    fn clear(&self, stream_id: &str) -> String {
        let mut out = String::with_capacity(64);
        head(&mut out, "clear", stream_id);
        out.push('}');
        out
    }

    fn verify_webhook(
        &self,
        secret: Option<&str>,
        url: &str,
        headers: &HeaderMap,
        body: &[u8],
        _now_unix: u64,
    ) -> Result<WebhookCall, WebhookError> {
        let fields = form_fields(body, MAX_FORM_FIELDS)?;
        if let Some(token) = secret {
            let signature = headers
                .get(SIGNATURE_HEADER)
                .and_then(|v| v.to_str().ok())
                .ok_or(WebhookError::Missing)?;
            let signature = STANDARD
                .decode(signature.trim())
                .map_err(|_| WebhookError::Invalid)?;
            // Twilio's own validators accept the URL with and without its scheme's default port.
            let valid = url_variants(url)
                .iter()
                .any(|url| verify(token, url, &fields, &signature));
            if !valid {
                return Err(WebhookError::Invalid);
            }
        }
        Ok(WebhookCall {
            call_id: field(&fields, "CallSid")
                .ok_or_else(|| WebhookError::Malformed("no CallSid".into()))?,
            from: field(&fields, "From"),
            to: field(&fields, "To"),
        })
    }

    fn answer(&self, stream_url: &str, parameters: &[(String, String)]) -> String {
        connect_stream(stream_url, "", parameters)
    }

    fn secret_env(&self) -> &'static str {
        AUTH_TOKEN_ENV
    }
}

/// The signature Twilio computes: base64 HMAC-SHA1 with the auth token over the URL followed by
/// each form field's name and value, sorted by name (then value).
pub fn signature(token: &str, url: &str, fields: &[(String, String)]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, token.as_bytes());
    STANDARD.encode(ring::hmac::sign(&key, signed_data(url, fields).as_bytes()))
}

fn verify(token: &str, url: &str, fields: &[(String, String)], signature: &[u8]) -> bool {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, token.as_bytes());
    // Constant time.
    ring::hmac::verify(&key, signed_data(url, fields).as_bytes(), signature).is_ok()
}

fn signed_data(url: &str, fields: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = fields.iter().collect();
    sorted.sort();
    let mut data = String::from(url);
    for (name, value) in sorted {
        data.push_str(name);
        data.push_str(value);
    }
    data
}

/// The URL as given, and with its scheme's default port added or removed.
fn url_variants(url: &str) -> Vec<String> {
    let mut variants = vec![url.to_owned()];
    let Some((scheme, rest)) = url.split_once("://") else {
        return variants;
    };
    let default = match scheme {
        "https" => ":443",
        "http" => ":80",
        _ => return variants,
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if let Some(host) = authority.strip_suffix(default) {
        variants.push(format!("{scheme}://{host}{path}"));
    } else if !authority.contains(':') || authority.ends_with(']') {
        variants.push(format!("{scheme}://{authority}{default}{path}"));
    }
    variants
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twilio_s_documented_messages_are_read() {
        let t = Twilio;
        assert_eq!(
            t.parse(r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#),
            Ok(Inbound::Connected)
        );
        let start = r#"{"event":"start","sequenceNumber":"1","start":{"accountSid":"ACXXX","streamSid":"MZ18ad3ab5a668481ce02b83e7395059f0","callSid":"CAXXX","tracks":["inbound"],"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1},"customParameters":{"FirstName":"Jane","LastName":"Doe"}},"streamSid":"MZ18ad3ab5a668481ce02b83e7395059f0"}"#;
        let Ok(Inbound::Start(start)) = t.parse(start) else {
            panic!("start");
        };
        assert_eq!(start.call_id, "CAXXX");
        assert_eq!(start.stream_id, "MZ18ad3ab5a668481ce02b83e7395059f0");
        assert_eq!(start.parameters["FirstName"], "Jane");
        assert_eq!(start.encoding.as_deref(), Some("audio/x-mulaw"));
        assert_eq!(start.sample_rate, Some(8000));
        let media = r#"{"event":"media","sequenceNumber":"3","media":{"track":"inbound","chunk":"1","timestamp":"5","payload":"no+JhoaJjpzSHxAKBgYJ"},"streamSid":"MZ1"}"#;
        assert_eq!(
            t.parse(media),
            Ok(Inbound::Media("no+JhoaJjpzSHxAKBgYJ".into()))
        );
        let dtmf = r#"{"event":"dtmf","streamSid":"MZ1","sequenceNumber":"5","dtmf":{"track":"inbound_track","digit":"1"}}"#;
        assert_eq!(t.parse(dtmf), Ok(Inbound::Dtmf('1')));
        let mark =
            r#"{"event":"mark","sequenceNumber":"4","streamSid":"MZ1","mark":{"name":"my label"}}"#;
        assert_eq!(t.parse(mark), Ok(Inbound::Mark("my label".into())));
        let stop = r#"{"event":"stop","sequenceNumber":"5","stop":{"accountSid":"AC1","callSid":"CA1"},"streamSid":"MZ1"}"#;
        assert_eq!(t.parse(stop), Ok(Inbound::Stop));
        assert_eq!(
            t.parse(r#"{"event":"dance"}"#),
            Ok(Inbound::Ignored("dance".into()))
        );
        for bad in [
            "{not json",
            r#"{"event":"media"}"#,
            r#"{"event":"start","start":{"callSid":"CA1"}}"#,
            r#"{"event":"dtmf","dtmf":{"digit":"x"}}"#,
        ] {
            assert!(t.parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn messages_to_twilio_are_its_documented_json() {
        let t = Twilio;
        let mut media = String::new();
        t.media("MZ1", &[0xff, 0x7f, 0x00], &mut media);
        let media: Value = serde_json::from_str(&media).unwrap();
        assert_eq!(
            media,
            serde_json::json!({"event": "media", "streamSid": "MZ1", "media": {"payload": "/38A"}})
        );
        let mark: Value = serde_json::from_str(&t.mark("MZ1", "a\"1")).unwrap();
        assert_eq!(
            mark,
            serde_json::json!({"event": "mark", "streamSid": "MZ1", "mark": {"name": "a\"1"}})
        );
        let clear: Value = serde_json::from_str(&t.clear("MZ1")).unwrap();
        assert_eq!(
            clear,
            serde_json::json!({"event": "clear", "streamSid": "MZ1"})
        );
    }

    #[test]
    fn signatures_follow_twilio_s_example() {
        // The worked example of Twilio's security page: this URL, these fields, this token.
        let url = "https://mycompany.com/myapp.php?foo=1&bar=2";
        let fields: Vec<(String, String)> = [
            ("CallSid", "CA1234567890ABCDE"),
            ("Caller", "+12349013030"),
            ("Digits", "1234"),
            ("From", "+12349013030"),
            ("To", "+18005551212"),
        ]
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
        assert_eq!(
            signature("12345", url, &fields),
            "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
        );
        let body = "CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234&From=%2B12349013030&To=%2B18005551212";
        let mut headers = HeaderMap::new();
        headers.insert(
            SIGNATURE_HEADER,
            "0/KCTR6DLpKmkAf8muzZqo1nDgQ=".parse().unwrap(),
        );
        let call = Twilio
            .verify_webhook(Some("12345"), url, &headers, body.as_bytes(), 0)
            .unwrap();
        assert_eq!(call.call_id, "CA1234567890ABCDE");
        assert_eq!(call.from.as_deref(), Some("+12349013030"));
        assert_eq!(
            Twilio.verify_webhook(Some("wrong"), url, &headers, body.as_bytes(), 0),
            Err(WebhookError::Invalid)
        );
        let tampered = body.replace("1234&", "9999&");
        assert!(Twilio
            .verify_webhook(Some("12345"), url, &headers, tampered.as_bytes(), 0)
            .is_err());
        assert_eq!(
            Twilio.verify_webhook(Some("12345"), url, &HeaderMap::new(), body.as_bytes(), 0),
            Err(WebhookError::Missing)
        );
        assert_eq!(
            url_variants("https://h.example/voice"),
            ["https://h.example/voice", "https://h.example:443/voice"]
        );
        assert_eq!(
            url_variants("https://h.example:443/voice"),
            ["https://h.example:443/voice", "https://h.example/voice"]
        );
    }

    #[test]
    fn twiml_connects_a_bidirectional_stream_with_parameters() {
        let xml = Twilio.answer(
            "wss://gw.example/telephony/twilio/stream/t0k",
            &[("From".into(), "+1555 <x>".into())],
        );
        assert!(
            xml.contains(
                "<Connect>\n    <Stream url=\"wss://gw.example/telephony/twilio/stream/t0k\">"
            ),
            "{xml}"
        );
        assert!(
            xml.contains("<Parameter name=\"From\" value=\"+1555 &lt;x&gt;\" />"),
            "{xml}"
        );
    }
}
