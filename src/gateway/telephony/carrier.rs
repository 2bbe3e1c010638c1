//! What a carrier adapter is: its media-stream messages read and written, and its webhook checked
//! and answered. Everything else about a call (the run, audio, marks, DTMF, state, ends) is the
//! shared call session's, so adding a carrier is one file implementing [`Carrier`].

use std::borrow::Cow;

use axum::http::HeaderMap;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Longest id (call, stream) or parameter taken from a carrier; anything longer is refused.
pub const MAX_FIELD_BYTES: usize = 256;
/// Most custom parameters one call may carry into session state.
pub const MAX_PARAMETERS: usize = 32;

/// One message from the carrier's media stream, read.
#[derive(Debug, PartialEq)]
pub enum Inbound<'a> {
    /// The socket is open (Twilio's `connected`): nothing to do.
    Connected,
    /// The call's metadata; always before any media.
    Start(CallStart),
    /// Caller audio: base64 μ-law at 8 kHz, borrowed from the frame.
    Media(Cow<'a, str>),
    /// A key pressed on the phone.
    Dtmf(char),
    /// The phone has played everything sent before the mark of this name (or dropped it on a
    /// `clear`).
    Mark(Cow<'a, str>),
    /// The caller hung up, or the carrier ended the stream.
    Stop,
    /// A message of a kind this adapter does not use (logged at debug, the call goes on).
    Ignored(Cow<'a, str>),
}

/// What a `start` message tells about the call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallStart {
    /// The carrier's id of the call (Twilio's `callSid`, Telnyx's `call_control_id`).
    pub call_id: String,
    /// The id of this media stream, echoed in every message sent back.
    pub stream_id: String,
    /// The stream's custom parameters (`<Parameter>`s), strings only.
    pub parameters: Map<String, Value>,
    /// The caller's audio format as the carrier names it, when it does (`audio/x-mulaw`, `PCMU`).
    pub encoding: Option<String>,
    /// Its sample rate, when given.
    pub sample_rate: Option<u64>,
}

/// A media-stream message that cannot be used; the call goes on (or, before `start`, ends).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// Not JSON, or not of the message's documented shape.
    #[error("malformed {carrier} message: {reason}")]
    Malformed {
        /// The carrier.
        carrier: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// A field over its size bound.
    #[error("{carrier} message field {field} is over {MAX_FIELD_BYTES} bytes")]
    TooLong {
        /// The carrier.
        carrier: &'static str,
        /// The field.
        field: &'static str,
    },
    /// The stream's audio is not 8 kHz μ-law, the only format this gateway takes.
    #[error("unsupported media format {encoding} at {rate} Hz (only 8 kHz μ-law)")]
    Format {
        /// The encoding named.
        encoding: String,
        /// The rate named.
        rate: u64,
    },
}

/// What the webhook asks for: the call's form fields, as the carrier posted them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookCall {
    /// The carrier's call id.
    pub call_id: String,
    /// The caller's number, if given.
    pub from: Option<String>,
    /// The number called, if given.
    pub to: Option<String>,
}

/// Why a webhook request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// No credential to check the signature with, on a gateway that is not anonymous.
    #[error("{0} webhooks need their signing secret in the environment ({1})")]
    NotConfigured(&'static str, &'static str),
    /// The signature header is missing.
    #[error("missing signature")]
    Missing,
    /// The signature does not verify (or is too old).
    #[error("signature does not verify")]
    Invalid,
    /// The body is not the carrier's form.
    #[error("malformed webhook: {0}")]
    Malformed(String),
}

impl WebhookError {
    /// The `reason` label of `livegate_auth_failures_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            WebhookError::NotConfigured(..) => "webhook_unconfigured",
            WebhookError::Missing => "webhook_unsigned",
            WebhookError::Invalid => "webhook_signature",
            WebhookError::Malformed(_) => "webhook_malformed",
        }
    }
}

/// One carrier's protocol: a small adapter over the shared call session.
pub trait Carrier: Send + Sync + std::fmt::Debug {
    /// The name in the routes (`/telephony/{name}/…`) and logs.
    fn name(&self) -> &'static str;

    /// Reads one text message of the media stream.
    fn parse<'a>(&self, text: &'a str) -> Result<Inbound<'a>, ProtocolError>;

    /// Appends a `media` message carrying `payload` (base64 μ-law) to `out`.
    fn media(&self, stream_id: &str, payload: &[u8], out: &mut String);

    /// A `mark` message of this name.
    fn mark(&self, stream_id: &str, name: &str) -> String;

    /// A `clear` message: the phone drops the audio it holds.
    fn clear(&self, stream_id: &str) -> String;

    /// Checks the webhook's signature over `url` (as the carrier requested it), `headers` and
    /// the raw `body`, with the secret from the environment (`None`: not configured). Returns
    /// the call's form fields.
    fn verify_webhook(
        &self,
        secret: Option<&str>,
        url: &str,
        headers: &HeaderMap,
        body: &[u8],
        now_unix: u64,
    ) -> Result<WebhookCall, WebhookError>;

    /// The webhook's answer (`Content-Type: text/xml`): connect the call to `stream_url` with
    /// `parameters`.
    fn answer(&self, stream_url: &str, parameters: &[(String, String)]) -> String;

    /// The environment variable holding the webhook secret (`TWILIO_AUTH_TOKEN`, …).
    fn secret_env(&self) -> &'static str;
}

/// A media-stream message in the shape Twilio set and Telnyx copied: an `event`, and the body of
/// that name. `S` is the carrier's own `start` body; `I` what it sends beside it at the top
/// (Telnyx's `stream_id`), ignored where it sends nothing there that is needed.
#[derive(Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de>, I: Deserialize<'de> + Default"))]
struct StreamMessage<'a, S, I> {
    #[serde(borrow)]
    event: Cow<'a, str>,
    #[serde(default)]
    stream_id: I,
    #[serde(default, borrow)]
    media: Option<MediaBody<'a>>,
    #[serde(default)]
    start: Option<S>,
    #[serde(default, borrow)]
    mark: Option<MarkBody<'a>>,
    #[serde(default, borrow)]
    dtmf: Option<DtmfBody<'a>>,
}

/// Names what a message of this event lacks, as a [`ProtocolError`].
pub type Missing<'m> = &'m dyn Fn(&str) -> ProtocolError;

/// Reads one text message of `carrier`'s media stream; `start` reads a `start` message's body
/// (and the top-level id beside it) into the call's metadata.
pub fn read_message<'a, S, I>(
    carrier: &'static str,
    text: &'a str,
    start: impl FnOnce(Option<S>, I, Missing<'_>) -> Result<CallStart, ProtocolError>,
) -> Result<Inbound<'a>, ProtocolError>
where
    S: DeserializeOwned,
    I: DeserializeOwned + Default,
{
    let malformed = |reason: String| ProtocolError::Malformed { carrier, reason };
    let message: StreamMessage<'a, S, I> =
        serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
    let missing = |field: &str| malformed(format!("{} without {field}", message.event));
    Ok(match message.event.as_ref() {
        "connected" => Inbound::Connected,
        "media" => media(message.media.ok_or_else(|| missing("media"))?),
        "start" => Inbound::Start(start(message.start, message.stream_id, &missing)?),
        "mark" => Inbound::Mark(bounded(
            carrier,
            "mark.name",
            message.mark.ok_or_else(|| missing("mark"))?.name,
        )?),
        "dtmf" => Inbound::Dtmf(dtmf_digit(
            carrier,
            &message.dtmf.ok_or_else(|| missing("dtmf"))?.digit,
        )?),
        "stop" => Inbound::Stop,
        _ => Inbound::Ignored(message.event),
    })
}

impl CallStart {
    /// The metadata of a `start`, each id bounded (`fields` name them for the error: call id's,
    /// then stream id's).
    pub fn read(
        carrier: &'static str,
        fields: [&'static str; 2],
        call_id: String,
        stream_id: String,
        custom_parameters: Option<Map<String, Value>>,
        media_format: Option<MediaFormat>,
    ) -> Result<CallStart, ProtocolError> {
        let format = media_format.unwrap_or_default();
        Ok(CallStart {
            call_id: bounded(carrier, fields[0], call_id.into())?.into_owned(),
            stream_id: bounded(carrier, fields[1], stream_id.into())?.into_owned(),
            parameters: parameters(carrier, custom_parameters)?,
            encoding: format.encoding,
            sample_rate: format.sample_rate,
        })
    }
}

/// The body of a `media` message, as the carriers that copied Twilio's shape send it.
#[derive(Deserialize)]
pub struct MediaBody<'a> {
    /// Base64 μ-law.
    #[serde(borrow)]
    pub payload: Cow<'a, str>,
    /// `inbound` (the caller) or `outbound`.
    #[serde(default, borrow)]
    pub track: Option<Cow<'a, str>>,
}

/// The body of a `mark` message.
#[derive(Deserialize)]
pub struct MarkBody<'a> {
    /// The mark's name, as sent.
    #[serde(borrow)]
    pub name: Cow<'a, str>,
}

/// The body of a `dtmf` message.
#[derive(Deserialize)]
pub struct DtmfBody<'a> {
    /// The key.
    #[serde(borrow)]
    pub digit: Cow<'a, str>,
}

/// The media format a `start` names (camelCase for Twilio, snake_case for Telnyx).
#[derive(Deserialize, Default)]
pub struct MediaFormat {
    /// The encoding.
    #[serde(default)]
    pub encoding: Option<String>,
    /// The sample rate.
    #[serde(default, alias = "sampleRate")]
    pub sample_rate: Option<u64>,
}

/// What a `media` message means: the caller's audio, or another track's (ignored).
pub fn media(body: MediaBody<'_>) -> Inbound<'_> {
    if body.track.as_deref().is_some_and(|t| t != "inbound") {
        return Inbound::Ignored(Cow::Borrowed("media of another track"));
    }
    Inbound::Media(body.payload)
}

/// `<Response><Connect><Stream url=… {attributes}>` with a `<Parameter>` for each parameter: the
/// answer of Twilio's TwiML and Telnyx's TeXML alike.
pub fn connect_stream(url: &str, attributes: &str, parameters: &[(String, String)]) -> String {
    let mut xml = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response>\n  <Connect>\n    <Stream url=\"",
    );
    xml.push_str(&xml_attr(url));
    xml.push('"');
    xml.push_str(attributes);
    xml.push_str(">\n");
    for (name, value) in parameters {
        xml.push_str("      <Parameter name=\"");
        xml.push_str(&xml_attr(name));
        xml.push_str("\" value=\"");
        xml.push_str(&xml_attr(value));
        xml.push_str("\" />\n");
    }
    xml.push_str("    </Stream>\n  </Connect>\n</Response>\n");
    xml
}

/// The first non-empty value of a form field.
pub fn field(fields: &[(String, String)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(n, v)| n == name && !v.is_empty())
        .map(|(_, v)| v.clone())
}

/// A string field, bounded.
pub fn bounded<'a>(
    carrier: &'static str,
    field: &'static str,
    value: Cow<'a, str>,
) -> Result<Cow<'a, str>, ProtocolError> {
    if value.len() > MAX_FIELD_BYTES {
        return Err(ProtocolError::TooLong { carrier, field });
    }
    Ok(value)
}

/// Custom parameters kept: string values within the bounds, at most [`MAX_PARAMETERS`].
pub fn parameters(
    carrier: &'static str,
    raw: Option<Map<String, Value>>,
) -> Result<Map<String, Value>, ProtocolError> {
    let mut kept = Map::new();
    for (name, value) in raw.unwrap_or_default() {
        let Value::String(text) = value else {
            continue;
        };
        if name.len() > MAX_FIELD_BYTES || text.len() > MAX_FIELD_BYTES {
            return Err(ProtocolError::TooLong {
                carrier,
                field: "customParameters",
            });
        }
        if kept.len() >= MAX_PARAMETERS {
            break;
        }
        kept.insert(name, Value::String(text));
    }
    Ok(kept)
}

/// The bytes of a DTMF digit as a `char`, if it is one of the sixteen.
pub fn dtmf_digit(carrier: &'static str, digit: &str) -> Result<char, ProtocolError> {
    let mut chars = digit.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_digit() || "*#ABCDabcd".contains(c) => {
            Ok(c.to_ascii_uppercase())
        }
        _ => Err(ProtocolError::Malformed {
            carrier,
            reason: format!("DTMF digit {digit:?} is not one of 0-9 * # A-D"),
        }),
    }
}

/// Escapes text for an XML attribute value.
pub fn xml_attr(value: &str) -> Cow<'_, str> {
    if !value.contains(['&', '<', '>', '"', '\'']) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A form body's fields, decoded (`application/x-www-form-urlencoded`), at most `limit` of them.
pub fn form_fields(body: &[u8], limit: usize) -> Result<Vec<(String, String)>, WebhookError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| WebhookError::Malformed("the form is not UTF-8".into()))?;
    let mut fields = Vec::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        if fields.len() >= limit {
            return Err(WebhookError::Malformed(format!("more than {limit} fields")));
        }
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        fields.push((form_decode(name)?, form_decode(value)?));
    }
    Ok(fields)
}

fn form_decode(raw: &str) -> Result<String, WebhookError> {
    let spaced = raw.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .map(Cow::into_owned)
        .map_err(|_| WebhookError::Malformed("a form field is not UTF-8".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_digits_and_xml_are_read_and_written_safely() {
        let fields = form_fields(b"CallSid=CA1&From=%2B15551234567&Body=a+b&Empty=", 10).unwrap();
        assert_eq!(
            fields,
            [
                ("CallSid".into(), "CA1".into()),
                ("From".into(), "+15551234567".into()),
                ("Body".into(), "a b".into()),
                ("Empty".into(), String::new()),
            ]
        );
        assert!(form_fields(b"a=1&b=2&c=3", 2).is_err());
        assert!(form_fields(b"a=%FF", 2).is_err());
        assert_eq!(dtmf_digit("t", "#"), Ok('#'));
        assert_eq!(dtmf_digit("t", "b"), Ok('B'));
        assert!(dtmf_digit("t", "12").is_err() && dtmf_digit("t", "x").is_err());
        assert_eq!(xml_attr("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        let long = "x".repeat(MAX_FIELD_BYTES + 1);
        let mut raw = Map::new();
        raw.insert("ok".into(), "1".into());
        raw.insert("number".into(), 5.into());
        assert_eq!(parameters("t", Some(raw.clone())).unwrap().len(), 1);
        raw.insert("big".into(), long.into());
        assert!(parameters("t", Some(raw)).is_err());
    }
}
