//! The client frame codec: WebSocket frames to `LiveRequest`s and events to outbound frames.
//! Plain data, no sockets, so every wire shape is testable alone.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use serde::Deserialize;

use crate::event::{decode_base64, Blob, Content, Event};
use crate::live::LiveRequest;

/// Mime type of microphone audio from the client.
pub const INPUT_AUDIO_MIME: &str = "audio/pcm;rate=16000";

/// How model audio reaches the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AudioEncoding {
    /// Raw PCM in a binary frame, then the event's JSON without `data`.
    #[default]
    Binary,
    /// Base64 inside the event JSON, exactly as ADK sends it.
    Base64,
}

/// An audio frame mode other than `binary` or `base64` (as given, lower-cased).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown audio frame mode {0:?} (expected binary or base64)")]
pub struct UnknownAudioEncoding(pub String);

impl std::str::FromStr for AudioEncoding {
    type Err = UnknownAudioEncoding;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "binary" => Ok(AudioEncoding::Binary),
            "base64" | "json" => Ok(AudioEncoding::Base64),
            other => Err(UnknownAudioEncoding(other.to_owned())),
        }
    }
}

/// A client frame that could not be understood.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FrameError {
    /// The text frame is not JSON of the expected shape.
    #[error("malformed JSON message: {0}")]
    MalformedJson(String),
    /// The `type` is not one the gateway knows.
    #[error("unknown message type {0:?} (expected text, image, audio, activity_start, activity_end or audio_stream_end)")]
    UnknownType(String),
    /// A required field is missing.
    #[error("message of type {kind:?} is missing the {field:?} field")]
    MissingField {
        /// The message type.
        kind: String,
        /// The missing field.
        field: &'static str,
    },
    /// Audio must be whole 16-bit samples.
    #[error("audio frame of {0} bytes is not a whole number of 16-bit samples")]
    OddAudioLength(usize),
    /// The media type is not one a client may send.
    #[error(transparent)]
    MediaType(#[from] crate::gateway::media::MediaTypeError),
    /// Base64 data could not be decoded.
    #[error("invalid base64 in the data field: {0}")]
    InvalidBase64(String),
    /// The message is bigger than the limit for its kind.
    #[error("{what} of {size} bytes is over the {limit}-byte limit ({setting})")]
    TooLarge {
        /// What was too large ("text turn", "audio frame", "media message").
        what: &'static str,
        /// Its size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
        /// The setting that raises the limit.
        setting: &'static str,
    },
}

impl FrameError {
    /// The ADK error code reported for this error.
    pub fn code(&self) -> &'static str {
        "INVALID_ARGUMENT"
    }
}

/// Largest text turn a client may send by default.
pub const DEFAULT_MAX_TEXT_BYTES: usize = 64 * 1024;
/// Largest binary audio frame by default: two seconds of 16 kHz PCM16, a hundred times the 20 ms
/// frames clients send.
pub const DEFAULT_MAX_AUDIO_FRAME_BYTES: usize = 64 * 1024;
/// Largest decoded image or audio of a JSON media message by default.
pub const DEFAULT_MAX_MEDIA_BYTES: usize = 1024 * 1024;

/// Size limits of client messages by kind. Each is checked before the request is queued; one
/// over its limit is answered with an `INVALID_ARGUMENT` error event and the connection goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// Bytes of a text turn's text.
    pub text_bytes: usize,
    /// Bytes of one binary audio frame.
    pub audio_frame_bytes: usize,
    /// Decoded bytes of a JSON `image` or `audio` message.
    pub media_bytes: usize,
}

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits {
            text_bytes: DEFAULT_MAX_TEXT_BYTES,
            audio_frame_bytes: DEFAULT_MAX_AUDIO_FRAME_BYTES,
            media_bytes: DEFAULT_MAX_MEDIA_BYTES,
        }
    }
}

/// Room for a JSON message's envelope (type, mime type, escapes) beyond its payload.
const JSON_ENVELOPE_SLACK: usize = 4096;

impl FrameLimits {
    /// Decodes a binary audio frame within the limits.
    pub fn decode_binary(
        &self,
        data: &[u8],
        blocks: &mut InputAudioBlocks,
    ) -> Result<LiveRequest, FrameError> {
        if data.len() > self.audio_frame_bytes {
            return Err(FrameError::TooLarge {
                what: "audio frame",
                size: data.len(),
                limit: self.audio_frame_bytes,
                setting: "--max-audio-frame-bytes",
            });
        }
        decode_binary(data, blocks)
    }

    /// Decodes a JSON text frame within the limits. A frame too big for any kind is refused
    /// before it is parsed.
    pub fn decode_text(&self, text: &str) -> Result<LiveRequest, FrameError> {
        // JSON escapes can double text (`\u` sequences more), base64 takes 4 bytes per 3.
        let largest = (self.text_bytes.saturating_mul(6))
            .max(self.media_bytes.saturating_mul(4) / 3)
            .saturating_add(JSON_ENVELOPE_SLACK);
        if text.len() > largest {
            return Err(FrameError::TooLarge {
                what: "message",
                size: text.len(),
                limit: largest,
                setting: "--max-text-bytes / --max-media-bytes",
            });
        }
        let mut request = decode_text(text)?;
        if let Some(content) = &mut request.content {
            self.check_turn(content)?;
        }
        if let Some(blob) = &request.blob {
            if blob.data.len() > self.media_bytes {
                return Err(FrameError::TooLarge {
                    what: "media message",
                    size: blob.data.len(),
                    limit: self.media_bytes,
                    setting: "--max-media-bytes",
                });
            }
        }
        Ok(request)
    }
}

impl FrameLimits {
    /// Checks a turn's content as a client sent it (a text message, a `/run` request): its text
    /// and its inline media within their limits, each medium of a type a client may send
    /// (normalised in place), and no control characters in a file reference.
    pub fn check_turn(&self, content: &mut Content) -> Result<(), FrameError> {
        let size: usize = content
            .parts
            .iter()
            .filter_map(|p| p.text.as_ref())
            .map(String::len)
            .sum();
        if size > self.text_bytes {
            return Err(FrameError::TooLarge {
                what: "text turn",
                size,
                limit: self.text_bytes,
                setting: "--max-text-bytes",
            });
        }
        for part in &mut content.parts {
            if let Some(blob) = &mut part.inline_data {
                if blob.data.len() > self.media_bytes {
                    return Err(FrameError::TooLarge {
                        what: "media",
                        size: blob.data.len(),
                        limit: self.media_bytes,
                        setting: "--max-media-bytes",
                    });
                }
                blob.mime_type = crate::gateway::media::client_blob_type(&blob.mime_type)?;
            }
            if let Some(file) = &part.file_data {
                let fields = [Some(file.file_uri.as_str()), file.mime_type.as_deref()];
                if fields
                    .iter()
                    .flatten()
                    .any(|f| f.chars().any(char::is_control))
                {
                    return Err(FrameError::MalformedJson(
                        "fileData holds a control character".into(),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct RawFrame {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    data: Option<String>,
    #[serde(rename = "mimeType", alias = "mime_type")]
    mime_type: Option<String>,
}

/// Decodes a binary frame: raw PCM16 LE mono 16 kHz audio, copied into `blocks`.
pub fn decode_binary(
    data: &[u8],
    blocks: &mut InputAudioBlocks,
) -> Result<LiveRequest, FrameError> {
    if !data.len().is_multiple_of(2) {
        return Err(FrameError::OddAudioLength(data.len()));
    }
    Ok(LiveRequest {
        blob: Some(Blob::new(blocks.copy(data), INPUT_AUDIO_MIME)),
        ..LiveRequest::default()
    })
}

/// Client audio blocks of one connection: frames are copied in back to back, each handed out as
/// a `Bytes` slice of its block.
///
/// A frame from the socket is a slice of the connection's 2 KiB read block, and the audio is
/// kept for seconds (the utterance the model hears, the recording before it is spooled): held as
/// slices, two 640-byte frames pinned a whole read block, 1.5x the audio. Copied into a block of
/// their own, frames are one allocation per dozen, not two each (the copy, and the shared count
/// its first clone adds); and since a connection's frames are kept and dropped in the order they
/// came, a block is freed soon after its last frame.
#[derive(Debug, Default)]
pub struct InputAudioBlocks {
    /// The unused rest of the current block.
    rest: BytesMut,
}

/// Bytes per audio block: twelve 20 ms frames of 16 kHz PCM16.
const AUDIO_BLOCK: usize = 12 * 640;

impl InputAudioBlocks {
    /// Copies `data` into the current block (a new one when it does not fit).
    pub fn copy(&mut self, data: &[u8]) -> Bytes {
        if self.rest.capacity() < data.len() {
            self.rest = BytesMut::with_capacity(AUDIO_BLOCK.max(data.len()));
        }
        self.rest.extend_from_slice(data);
        self.rest.split().freeze()
    }
}

/// Decodes a JSON text frame.
pub fn decode_text(text: &str) -> Result<LiveRequest, FrameError> {
    let raw: RawFrame =
        serde_json::from_str(text).map_err(|e| FrameError::MalformedJson(e.to_string()))?;
    let missing = |field| FrameError::MissingField {
        kind: raw.kind.clone(),
        field,
    };
    let request = match raw.kind.as_str() {
        "text" => {
            let text = raw.text.clone().ok_or_else(|| missing("text"))?;
            LiveRequest {
                content: Some(Content::text("user", text)),
                ..LiveRequest::default()
            }
        }
        "image" | "audio" => {
            let data = raw.data.as_deref().ok_or_else(|| missing("data"))?;
            let bytes =
                decode_base64(data).map_err(|e| FrameError::InvalidBase64(e.to_string()))?;
            let is_audio = raw.kind == "audio";
            if is_audio && !bytes.len().is_multiple_of(2) {
                return Err(FrameError::OddAudioLength(bytes.len()));
            }
            // The type goes with the bytes into the model and, for audio, into the recording
            // served for download: only the types that are what they say.
            let mime = if is_audio {
                crate::gateway::media::client_audio_type(raw.mime_type.as_deref())?
            } else {
                crate::gateway::media::client_image_type(raw.mime_type.as_deref())?
            };
            LiveRequest {
                blob: Some(Blob::new(bytes, mime)),
                ..LiveRequest::default()
            }
        }
        "activity_start" => LiveRequest {
            activity_start: true,
            ..LiveRequest::default()
        },
        "activity_end" => LiveRequest {
            activity_end: true,
            ..LiveRequest::default()
        },
        "audio_stream_end" => LiveRequest {
            audio_stream_end: true,
            ..LiveRequest::default()
        },
        other => return Err(FrameError::UnknownType(other.to_owned())),
    };
    Ok(request)
}

/// One event ready for the socket.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedEvent {
    /// Raw PCM sent as a binary frame before the JSON (binary audio mode).
    pub binary: Option<Bytes>,
    /// The event's JSON; empty for an event the client is not sent (a phone call's transcript),
    /// which the writer still times and counts.
    pub json: String,
    /// A text frame written right after `json`, kept or dropped with it (a phone call's `mark`
    /// behind its audio: an interrupted answer's marks go with its audio).
    pub trailer: Option<String>,
    /// Playback length of the audio this frame carries (zero if none).
    pub audio: Duration,
    /// The event says the model's answer was interrupted.
    pub interrupted: bool,
    /// The event completes or interrupts the model's turn.
    pub ends_turn: bool,
    /// The event carries text of the model's answer (not a thought): an answer in text.
    pub answer_text: bool,
    /// When the event was made (Unix seconds): how long the gateway took to forward it.
    pub created: f64,
    /// On an answer's first audio or text, when the gateway received the client audio that
    /// prompted it (if the model says): the first-answer latency.
    pub prompted_by: Option<Instant>,
}

impl EncodedEvent {
    /// True if the frame carries model audio.
    pub fn is_audio(&self) -> bool {
        !self.audio.is_zero()
    }

    /// True if the frame carries the model's answer: its audio or its text.
    pub fn is_answer(&self) -> bool {
        self.is_audio() || self.answer_text
    }
}

/// Encodes an event for the client. In binary mode the PCM of an audio chunk is moved out of the
/// JSON (no base64, no copy) and its `inlineData` keeps only the mime type.
pub fn encode_event(
    mut event: Event,
    mode: AudioEncoding,
) -> Result<EncodedEvent, serde_json::Error> {
    let mut binary = None;
    let mut audio = Duration::ZERO;
    let mut prompted_by = None;
    let mut answer_text = false;
    if let Some(content) = event.content.as_mut() {
        // The model's partial text has no role (as ADK passes Gemini's on); the user's has `user`.
        let from_model = content.role.as_deref() != Some("user") && event.author != "user";
        for part in &mut content.parts {
            prompted_by = prompted_by.or(part.prompted_by);
            answer_text |= from_model && part.text.is_some() && part.thought != Some(true);
            let Some(blob) = part
                .inline_data
                .as_mut()
                .filter(|b| b.is_audio() && !b.data.is_empty())
            else {
                continue;
            };
            audio += pcm_duration(blob.data.len(), blob.sample_rate().unwrap_or(24_000));
            if mode == AudioEncoding::Binary && binary.is_none() {
                binary = Some(std::mem::take(&mut blob.data));
            }
        }
    }
    Ok(EncodedEvent {
        json: serde_json::to_string(&event)?,
        trailer: None,
        binary,
        audio,
        interrupted: event.interrupted == Some(true),
        ends_turn: event.interrupted == Some(true) || event.turn_complete == Some(true),
        answer_text,
        created: event.timestamp,
        prompted_by,
    })
}

/// Playback time of `bytes` of 16-bit mono PCM at `rate` Hz.
pub fn pcm_duration(bytes: usize, rate: u32) -> Duration {
    Duration::from_secs_f64(bytes as f64 / 2.0 / f64::from(rate.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_client_message_kind() {
        let r = decode_text(r#"{"type":"text","text":"hello"}"#).unwrap();
        assert_eq!(r.content.unwrap().joined_text(), "hello");
        let r = decode_text(r#"{"type":"image","data":"/9j/","mimeType":"image/jpeg"}"#).unwrap();
        assert_eq!(r.blob.unwrap().mime_type, "image/jpeg");
        let r = decode_text(r#"{"type":"audio","data":"AAABAA=="}"#).unwrap();
        assert_eq!(r.blob.unwrap().data.len(), 4);
        assert!(
            decode_text(r#"{"type":"activity_start"}"#)
                .unwrap()
                .activity_start
        );
        assert!(
            decode_text(r#"{"type":"activity_end"}"#)
                .unwrap()
                .activity_end
        );
        assert!(
            decode_text(r#"{"type":"audio_stream_end"}"#)
                .unwrap()
                .audio_stream_end
        );
        let r = decode_binary(&[1, 0, 2, 0], &mut InputAudioBlocks::default()).unwrap();
        assert_eq!(r.blob.unwrap().mime_type, INPUT_AUDIO_MIME);
    }

    #[test]
    fn only_the_model_s_own_text_is_answer_text() {
        use crate::event::{Content, Part};

        let with = |content: Content| {
            let event = Event {
                content: Some(content),
                ..Event::default()
            };
            encode_event(event, AudioEncoding::Binary)
                .unwrap()
                .answer_text
        };
        assert!(with(Content::text("model", "It is sunny.")));
        assert!(!with(Content::text("user", "What is the weather?")));
        let thought = Content {
            parts: vec![Part {
                thought: Some(true),
                ..Part::text("Let me think.")
            }],
            role: Some("model".into()),
        };
        assert!(!with(thought));
        let audio = Content::blob(
            "model",
            crate::event::Blob::new(Bytes::from_static(&[0, 0]), "audio/pcm;rate=24000"),
        );
        assert!(!with(audio));
    }

    #[test]
    fn binary_audio_does_not_pin_the_read_block() {
        let block = Bytes::from(vec![7u8; 2048]);
        let frame = block.slice(8..648);
        let blob = decode_binary(&frame, &mut InputAudioBlocks::default())
            .unwrap()
            .blob
            .unwrap();
        assert_eq!(blob.data, block.slice(8..648));
        let held = blob.data.as_ptr_range();
        let read = block.as_ptr_range();
        assert!(
            held.end <= read.start || held.start >= read.end,
            "the audio is its own allocation"
        );
    }

    #[test]
    fn frames_fill_a_block_back_to_back_then_start_the_next() {
        let mut blocks = InputAudioBlocks::default();
        let frames: Vec<Bytes> = (0..13u8).map(|i| blocks.copy(&[i; 640])).collect();
        for (i, frame) in frames.iter().enumerate() {
            assert_eq!(&frame[..], &[i as u8; 640][..], "frame {i} kept its bytes");
        }
        for pair in frames[..12].windows(2) {
            assert_eq!(pair[0].as_ptr_range().end, pair[1].as_ptr().cast_mut());
        }
        assert_ne!(
            frames[11].as_ptr_range().end,
            frames[12].as_ptr().cast_mut(),
            "the thirteenth starts a new block"
        );
        // A frame bigger than a block gets one of its own; the next starts afresh.
        let big = blocks.copy(&[9; 3 * AUDIO_BLOCK]);
        assert_eq!(big.len(), 3 * AUDIO_BLOCK);
        assert_eq!(&blocks.copy(&[1, 2])[..], &[1, 2]);
    }

    #[test]
    fn each_kind_is_held_to_its_own_limit() {
        let limits = FrameLimits {
            text_bytes: 10,
            audio_frame_bytes: 4,
            media_bytes: 3,
        };
        let too_large = |r: Result<LiveRequest, FrameError>| match r {
            Err(FrameError::TooLarge { what, setting, .. }) => (what, setting),
            other => panic!("{other:?}"),
        };
        assert!(limits
            .decode_text(r#"{"type":"text","text":"0123456789"}"#)
            .is_ok());
        assert_eq!(
            too_large(limits.decode_text(r#"{"type":"text","text":"0123456789a"}"#)),
            ("text turn", "--max-text-bytes")
        );
        let mut blocks = InputAudioBlocks::default();
        assert!(limits.decode_binary(&[0; 4], &mut blocks).is_ok());
        assert_eq!(
            too_large(limits.decode_binary(&[0; 6], &mut blocks)),
            ("audio frame", "--max-audio-frame-bytes")
        );
        assert!(limits
            .decode_text(r#"{"type":"image","data":"AAAA"}"#)
            .is_ok());
        assert_eq!(
            too_large(limits.decode_text(r#"{"type":"image","data":"AAAAAA=="}"#)),
            ("media message", "--max-media-bytes")
        );
        // Far over every limit: refused before parsing, still an error event, not a close.
        let huge = format!(r#"{{"type":"text","text":"{}"}}"#, "x".repeat(10_000));
        let error = limits.decode_text(&huge).unwrap_err();
        assert_eq!(error.code(), "INVALID_ARGUMENT");
        assert!(error.to_string().contains("limit"), "{error}");
    }

    #[test]
    fn rejects_bad_frames_with_clear_errors() {
        assert!(matches!(
            decode_text("{not json"),
            Err(FrameError::MalformedJson(_))
        ));
        assert!(matches!(
            decode_text(r#"{"text":"no type"}"#),
            Err(FrameError::MalformedJson(_))
        ));
        assert_eq!(
            decode_text(r#"{"type":"dance"}"#),
            Err(FrameError::UnknownType("dance".into()))
        );
        assert!(matches!(
            decode_text(r#"{"type":"text"}"#),
            Err(FrameError::MissingField { field: "text", .. })
        ));
        assert!(matches!(
            decode_text(r#"{"type":"image","data":"!!"}"#),
            Err(FrameError::InvalidBase64(_))
        ));
        assert_eq!(
            decode_binary(&[1, 2, 3], &mut InputAudioBlocks::default()),
            Err(FrameError::OddAudioLength(3))
        );
        assert_eq!(
            decode_text(r#"{"type":"audio","data":"AAAB"}"#),
            Err(FrameError::OddAudioLength(3))
        );
    }

    #[test]
    fn binary_mode_moves_pcm_out_of_the_json() {
        let pcm = Bytes::from(vec![0u8; 4800]);
        let event = Event {
            content: Some(Content::blob(
                "model",
                Blob::new(pcm.clone(), "audio/pcm;rate=24000"),
            )),
            ..Event::new("e-1", "agent")
        };
        let frame = encode_event(event.clone(), AudioEncoding::Binary).unwrap();
        assert_eq!(
            frame.binary.as_ref().map(|b| b.as_ptr()),
            Some(pcm.as_ptr()),
            "no copy"
        );
        assert!(frame
            .json
            .contains(r#""inlineData":{"mimeType":"audio/pcm;rate=24000"}"#));
        assert_eq!(frame.audio, Duration::from_millis(100));
        let frame = encode_event(event, AudioEncoding::Base64).unwrap();
        assert!(frame.binary.is_none() && frame.json.contains(r#""data":"AAAA"#));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use crate::event::encode_base64;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_text_frame_decodes_or_errors_without_panicking(text in ".{0,200}") {
            let _ = decode_text(&text);
        }

        #[test]
        fn any_json_shaped_frame_decodes_or_errors(kind in "[a-z_]{0,16}", text in proptest::option::of(".{0,40}"), data in proptest::option::of("[A-Za-z0-9+/=_-]{0,64}")) {
            let mut frame = serde_json::json!({"type": kind});
            if let Some(t) = text { frame["text"] = t.into(); }
            if let Some(d) = data { frame["data"] = d.into(); }
            let _ = decode_text(&frame.to_string());
        }

        #[test]
        fn binary_frames_are_accepted_exactly_when_whole_samples(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let len = data.len();
            let decoded = decode_binary(&data, &mut InputAudioBlocks::default());
            prop_assert_eq!(decoded.is_ok(), len % 2 == 0);
        }

        #[test]
        fn base64_audio_round_trips_in_both_alphabets(samples in proptest::collection::vec(any::<i16>(), 0..512)) {
            let pcm: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
            let url_safe = encode_base64(&pcm);
            let standard = url_safe.replace('-', "+").replace('_', "/");
            for data in [url_safe.clone(), standard, url_safe.trim_end_matches('=').to_owned()] {
                let frame = serde_json::json!({"type": "audio", "data": data}).to_string();
                let blob = decode_text(&frame).map(|r| r.blob).ok().flatten();
                prop_assert_eq!(blob.map(|b| b.data.to_vec()), Some(pcm.clone()));
            }
        }
    }
}
