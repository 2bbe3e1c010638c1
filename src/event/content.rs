//! genai's `Content` and its parts, as they appear inside ADK events.

use std::time::Instant;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A turn's content: a role (`user` or `model`) and its parts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Content {
    /// The parts in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Part>,
    /// `user` or `model`; absent for content whose role the runtime fills in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

impl Content {
    /// Content with one text part.
    pub fn text(role: &str, text: impl Into<String>) -> Self {
        Content {
            parts: vec![Part::text(text)],
            role: Some(role.to_owned()),
        }
    }

    /// Content with one inline-data part.
    pub fn blob(role: &str, blob: Blob) -> Self {
        Content {
            parts: vec![Part {
                inline_data: Some(blob),
                ..Part::default()
            }],
            role: Some(role.to_owned()),
        }
    }

    /// The concatenated text of all text parts (thoughts excluded).
    pub fn joined_text(&self) -> String {
        self.parts
            .iter()
            .filter(|p| p.thought != Some(true))
            .filter_map(|p| p.text.as_deref())
            .collect()
    }

    /// True if any part carries inline audio, video or image data (ADK's "live media event" check).
    pub fn has_inline_media(&self) -> bool {
        self.parts.iter().any(|p| {
            p.inline_data.as_ref().is_some_and(|b| {
                ["audio/", "video/", "image/"]
                    .iter()
                    .any(|prefix| b.mime_type.starts_with(prefix))
            })
        })
    }
}

/// One part of a `Content`; exactly one of the payload fields is normally set.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// Function call requested by the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_call: Option<FunctionCall>,
    /// Result of a function call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_response: Option<FunctionResponse>,
    /// Reference to stored data (e.g. a saved recording).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_data: Option<FileData>,
    /// Inline bytes (audio chunks, images).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_data: Option<Blob>,
    /// Text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Whether the text is a model thought.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought: Option<bool>,
    /// On an answer's first audio or text: when livegate read the client audio that prompted
    /// the answer (models that say: sim). Only for latency metrics; never serialized.
    #[serde(skip)]
    pub prompted_by: Option<Instant>,
}

/// Parts are equal by what they hold, whatever prompted them.
impl PartialEq for Part {
    fn eq(&self, other: &Self) -> bool {
        // Destructured, so a field added later cannot be left out of the comparison unnoticed.
        let Part {
            function_call,
            function_response,
            file_data,
            inline_data,
            text,
            thought,
            prompted_by: _,
        } = self;
        *function_call == other.function_call
            && *function_response == other.function_response
            && *file_data == other.file_data
            && *inline_data == other.inline_data
            && *text == other.text
            && *thought == other.thought
    }
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Part {
            text: Some(text.into()),
            ..Part::default()
        }
    }
}

/// Inline bytes with their mime type (`audio/pcm;rate=24000`, `image/jpeg`, …).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Blob {
    /// The raw bytes; base64 in JSON. Absent in binary-audio mode metadata.
    #[serde(
        default,
        with = "crate::event::b64",
        skip_serializing_if = "Bytes::is_empty"
    )]
    pub data: Bytes,
    /// Optional display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Mime type, including parameters such as `rate=`.
    #[serde(default)]
    pub mime_type: String,
    /// When livegate read this client audio off its socket. Only for latency metrics; never
    /// serialized.
    #[serde(skip)]
    pub received: Option<Instant>,
}

/// Blobs are equal by what they hold, whenever they arrived.
impl PartialEq for Blob {
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data
            && self.display_name == other.display_name
            && self.mime_type == other.mime_type
    }
}

impl Blob {
    /// A blob from bytes and a mime type.
    pub fn new(data: Bytes, mime_type: impl Into<String>) -> Self {
        Blob {
            data,
            display_name: None,
            mime_type: mime_type.into(),
            received: None,
        }
    }

    /// True for `audio/*` blobs.
    pub fn is_audio(&self) -> bool {
        self.mime_type.starts_with("audio/")
    }

    /// True for raw PCM audio (`audio/pcm`, `audio/l16`, any case, any parameters).
    pub fn is_pcm(&self) -> bool {
        let kind = mime_params(&self.mime_type)
            .next()
            .unwrap_or_default()
            .trim();
        kind.eq_ignore_ascii_case("audio/pcm") || kind.eq_ignore_ascii_case("audio/l16")
    }

    /// The `rate=` parameter of the mime type, if any.
    pub fn sample_rate(&self) -> Option<u32> {
        mime_params(&self.mime_type)
            .filter_map(|p| p.trim().strip_prefix("rate="))
            .find_map(|r| r.parse().ok())
    }
}

/// A mime type's `;`-separated parts, the type first. Both questions above are asked of every
/// audio frame, several times on its way: a byte search is cheaper there than
/// `str::split(';')`'s char searcher.
fn mime_params(mime: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(mime);
    std::iter::from_fn(move || {
        let part = rest?;
        match part.bytes().position(|b| b == b';') {
            // `;` is ASCII, so both sides of it are on char boundaries.
            Some(at) => {
                rest = part.get(at + 1..);
                part.get(..at)
            }
            None => {
                rest = None;
                Some(part)
            }
        }
    })
}

/// A reference to stored bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileData {
    /// Optional display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Where the data lives, e.g. `artifact://app/user/session/_adk_live/file#0`.
    pub file_uri: String,
    /// Mime type of the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// A function call requested by the model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionCall {
    /// Call id, used to match the response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Arguments as a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// Function name.
    pub name: String,
}

/// The result of a function call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionResponse {
    /// The id of the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Function name.
    pub name: String,
    /// The result as a JSON object.
    #[serde(default)]
    pub response: Value,
    /// For the result of a non-blocking call: when the model takes it up (Gemini's
    /// `FunctionResponse.scheduling`). None for a blocking call's, which the model waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<Scheduling>,
}

/// When the model takes up the result of a non-blocking tool call, as Gemini Live's
/// `FunctionResponse.scheduling` (and ADK's events) name it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Scheduling {
    /// At once: the model stops what it is saying and reports the result.
    Interrupt,
    /// Once the model has finished what it is saying (Gemini's default).
    #[default]
    WhenIdle,
    /// Into the model's context without an answer of its own.
    Silent,
}

impl Scheduling {
    /// Every value, with its name in agent files.
    pub const ALL: [(Scheduling, &'static str); 3] = [
        (Scheduling::Interrupt, "interrupt"),
        (Scheduling::WhenIdle, "when_idle"),
        (Scheduling::Silent, "silent"),
    ];

    /// Its name on Gemini's wire: `INTERRUPT`, `WHEN_IDLE` or `SILENT`.
    pub fn as_wire(self) -> &'static str {
        match self {
            Scheduling::Interrupt => "INTERRUPT",
            Scheduling::WhenIdle => "WHEN_IDLE",
            Scheduling::Silent => "SILENT",
        }
    }

    /// Its name in agent files: `interrupt`, `when_idle` or `silent`.
    pub fn as_config(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(s, _)| *s == self)
            .map_or("when_idle", |(_, name)| name)
    }

    /// The value an agent file names (`interrupt`, `when_idle`, `silent`).
    pub fn from_config(name: &str) -> Option<Self> {
        Self::ALL.iter().find(|(_, n)| *n == name).map(|(s, _)| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcm_and_its_rate_are_read_from_the_mime_type() {
        let blob = |mime: &str| Blob::new(Bytes::new(), mime);
        assert!(blob("audio/pcm;rate=16000").is_pcm());
        assert_eq!(blob("audio/pcm;rate=16000").sample_rate(), Some(16_000));
        assert!(blob("AUDIO/L16 ; rate=24000").is_pcm());
        assert_eq!(blob("AUDIO/L16 ; rate=24000").sample_rate(), Some(24_000));
        assert!(blob("audio/pcm").is_pcm());
        assert_eq!(blob("audio/pcm").sample_rate(), None);
        assert_eq!(
            blob("audio/pcm;rate=x;rate=8000").sample_rate(),
            Some(8_000)
        );
        assert_eq!(blob("audio/pcm;").sample_rate(), None);
        assert!(!blob("audio/pcmx;rate=16000").is_pcm());
        assert!(!blob("image/png").is_pcm());
        assert!(!blob("").is_pcm());
        assert!(!blob(";audio/pcm").is_pcm());
    }
}
