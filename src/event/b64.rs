//! Base64 as ADK writes it (URL-safe, padded) and as ADK reads it (either alphabet, padding optional).

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, URL_SAFE};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use bytes::Bytes;
use serde::de::Visitor;
use serde::{Deserializer, Serializer};

const LENIENT: GeneralPurposeConfig =
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
const STANDARD_LENIENT: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, LENIENT);
const URL_SAFE_LENIENT: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, LENIENT);

/// Encodes bytes the way pydantic serializes ADK's bytes fields (URL-safe alphabet, padded).
pub fn encode_base64(data: &[u8]) -> String {
    URL_SAFE.encode(data)
}

/// Decodes base64 in either the standard or the URL-safe alphabet, with or without padding.
pub fn decode_base64(text: &str) -> Result<Bytes, base64::DecodeError> {
    let text = text.trim();
    // The standard alphabet first (Gemini's, the browser's); the URL-safe one when a URL-safe
    // character stopped it, which in URL-safe text comes within its first few dozen characters.
    // So neither alphabet costs a separate pass over a long audio chunk to pick the engine.
    match STANDARD_LENIENT.decode(text) {
        Err(base64::DecodeError::InvalidByte(_, b'-' | b'_')) => URL_SAFE_LENIENT.decode(text),
        decoded => decoded,
    }
    .map(Bytes::from)
}

pub(crate) fn serialize<S: Serializer>(data: &Bytes, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&encode_base64(data))
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
    deserializer.deserialize_str(Base64Visitor)
}

/// Decodes the JSON string where the parser has it (the input itself when it has no escapes), so
/// a long audio chunk's base64 is never copied into a `String` first.
struct Base64Visitor;

impl<'de> Visitor<'de> for Base64Visitor {
    type Value = Bytes;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a base64 string")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Bytes, E> {
        decode_base64(text).map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_url_safe_padded_like_pydantic() {
        assert_eq!(encode_base64(&[0xff, 0xfe, 0xfb]), "__77");
        assert_eq!(encode_base64(&[0xff, 0xfe, 0x00, 0x01]), "__4AAQ==");
    }

    #[test]
    fn reads_both_alphabets_with_or_without_padding() {
        let want = Bytes::from_static(&[0xff, 0xfe, 0x00, 0x01]);
        for text in ["__4AAQ==", "__4AAQ", "//4AAQ==", "//4AAQ"] {
            assert_eq!(decode_base64(text).ok(), Some(want.clone()), "{text}");
        }
        assert!(decode_base64("not base64!").is_err());
        // A URL-safe character far in, after a long standard-looking run, and mixed alphabets.
        let long = [0u8; 3000]
            .iter()
            .chain(&[0xff, 0xfe, 0xfb])
            .copied()
            .collect::<Vec<_>>();
        let text = format!("{}__77", "A".repeat(4000));
        assert_eq!(decode_base64(&text).ok(), Some(Bytes::from(long)));
        assert!(decode_base64("__4A/w==").is_err());
        assert!(decode_base64("//4A_w==").is_err());
    }

    #[test]
    fn blob_data_reads_from_json_text_escaped_or_not_and_from_values() {
        use crate::event::Blob;
        let want = Bytes::from_static(&[0xff, 0xfe, 0x00, 0x01]);
        // As Gemini may send it: plain, or with JSON escapes (`\/` is `/`).
        for json in [
            r#"{"mimeType":"audio/pcm","data":"//4AAQ=="}"#,
            r#"{"mimeType":"audio/pcm","data":"\/\/4AAQ=="}"#,
        ] {
            let blob: Blob = serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"));
            assert_eq!(blob.data, want, "{json}");
        }
        let value = serde_json::json!({"mimeType": "audio/pcm", "data": "__4AAQ"});
        let blob: Blob = serde_json::from_value(value).expect("from a Value");
        assert_eq!(blob.data, want);
        for bad in [
            r#"{"mimeType":"audio/pcm","data":"not base64!"}"#,
            r#"{"mimeType":"audio/pcm","data":7}"#,
        ] {
            assert!(serde_json::from_str::<Blob>(bad).is_err(), "{bad}");
        }
    }
}
