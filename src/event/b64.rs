//! Base64 as ADK writes it (URL-safe, padded) and as ADK reads it (either alphabet, padding optional).

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, URL_SAFE};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serializer};

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
    let urlsafe = text.bytes().any(|b| b == b'-' || b == b'_');
    let engine = if urlsafe {
        &URL_SAFE_LENIENT
    } else {
        &STANDARD_LENIENT
    };
    engine.decode(text).map(Bytes::from)
}

pub(crate) fn serialize<S: Serializer>(data: &Bytes, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&encode_base64(data))
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
    let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
    decode_base64(&text).map_err(serde::de::Error::custom)
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
    }
}
