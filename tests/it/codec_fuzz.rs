//! Fuzzing the client frame codec with proptest: arbitrary bytes and arbitrary JSON decode to a
//! request or a typed error, never a panic. Cheap enough to run with every `cargo test`
//! (`PROPTEST_CASES=10000 cargo test --test it codec_fuzz::` runs it longer, as CI does).

use livegate::gateway::{decode_binary, decode_text, FrameError, FrameLimits, InputAudioBlocks};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Small limits, so the fuzzer also reaches the size checks.
const LIMITS: FrameLimits = FrameLimits {
    text_bytes: 64,
    audio_frame_bytes: 256,
    media_bytes: 96,
};

/// Any JSON value, nested a few levels.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(".{0,12}", inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A client message's shape with arbitrary field values: reaches past the JSON parser.
fn message_like() -> impl Strategy<Value = Value> {
    let kind = prop_oneof![
        Just("text".to_owned()),
        Just("image".to_owned()),
        Just("audio".to_owned()),
        Just("activity_start".to_owned()),
        Just("activity_end".to_owned()),
        Just("audio_stream_end".to_owned()),
        "[a-z_]{0,16}",
    ];
    let data = prop_oneof![
        "[A-Za-z0-9+/=_-]{0,200}".prop_map(Value::String),
        any_json(),
    ];
    (
        kind,
        proptest::option::of(any_json()),
        proptest::option::of(data),
        proptest::option::of(any_json()),
    )
        .prop_map(|(kind, text, data, mime)| {
            let mut message = Map::new();
            message.insert("type".into(), Value::String(kind));
            for (name, value) in [("text", text), ("data", data), ("mimeType", mime)] {
                if let Some(value) = value {
                    message.insert(name.into(), value);
                }
            }
            Value::Object(message)
        })
}

/// Every error is one of the codec's own, reported to the client as `INVALID_ARGUMENT` with a
/// message saying what was wrong.
fn check_error(error: &FrameError) {
    assert_eq!(error.code(), "INVALID_ARGUMENT");
    assert!(!error.to_string().is_empty());
}

/// Cases per target: a few hundred with every `cargo test`, more from `PROPTEST_CASES` (CI).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_as_a_binary_frame(data in prop::collection::vec(any::<u8>(), 0..1024)) {
        let mut blocks = InputAudioBlocks::default();
        match LIMITS.decode_binary(&data, &mut blocks) {
            Ok(request) => {
                let blob = request.blob.expect("audio");
                prop_assert_eq!(&blob.data[..], &data[..]);
                prop_assert!(data.len() <= LIMITS.audio_frame_bytes && data.len() % 2 == 0);
            }
            Err(error) => check_error(&error),
        }
        if let Err(error) = decode_binary(&data, &mut blocks) {
            check_error(&error);
        }
    }

    #[test]
    fn arbitrary_bytes_as_a_text_frame(data in prop::collection::vec(any::<u8>(), 0..1024)) {
        // The socket hands over text frames as UTF-8; anything else never reaches the codec.
        let text = String::from_utf8_lossy(&data);
        if let Err(error) = LIMITS.decode_text(&text) {
            check_error(&error);
        }
        if let Err(error) = decode_text(&text) {
            check_error(&error);
        }
    }

    #[test]
    fn arbitrary_json_as_a_text_frame(value in any_json()) {
        if let Err(error) = LIMITS.decode_text(&value.to_string()) {
            check_error(&error);
        }
    }

    #[test]
    fn arbitrary_client_messages(value in message_like()) {
        match LIMITS.decode_text(&value.to_string()) {
            Ok(request) => {
                // What passes is within its limit.
                let text: usize = request.content.iter().flat_map(|c| &c.parts)
                    .filter_map(|p| p.text.as_ref()).map(String::len).sum();
                prop_assert!(text <= LIMITS.text_bytes);
                prop_assert!(request.blob.as_ref().is_none_or(|b| b.data.len() <= LIMITS.media_bytes));
            }
            Err(error) => check_error(&error),
        }
    }
}
