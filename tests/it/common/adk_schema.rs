//! ADK's event field set (google-adk 2.13): every key and its JSON type.
//! Any other key, or a value of the wrong type, fails the test.

use serde_json::{Map, Value};

#[derive(Clone, Copy)]
enum T {
    Str,
    Bool,
    Num,
    Obj(&'static [(&'static str, T)]),
    ArrOf(&'static T),
    AnyObj,
    Any,
}

const BLOB: &[(&str, T)] = &[
    ("data", T::Str),
    ("displayName", T::Str),
    ("mimeType", T::Str),
];
const FILE_DATA: &[(&str, T)] = &[
    ("displayName", T::Str),
    ("fileUri", T::Str),
    ("mimeType", T::Str),
];
const FUNCTION_CALL: &[(&str, T)] = &[
    ("id", T::Str),
    ("args", T::AnyObj),
    ("name", T::Str),
    ("partialArgs", T::Any),
    ("willContinue", T::Bool),
];
const FUNCTION_RESPONSE: &[(&str, T)] = &[
    ("willContinue", T::Bool),
    ("scheduling", T::Str),
    ("parts", T::Any),
    ("id", T::Str),
    ("name", T::Str),
    ("response", T::AnyObj),
];
const PART: &[(&str, T)] = &[
    ("text", T::Str),
    ("thought", T::Bool),
    ("thoughtSignature", T::Str),
    ("inlineData", T::Obj(BLOB)),
    ("fileData", T::Obj(FILE_DATA)),
    ("functionCall", T::Obj(FUNCTION_CALL)),
    ("functionResponse", T::Obj(FUNCTION_RESPONSE)),
    ("executableCode", T::AnyObj),
    ("codeExecutionResult", T::AnyObj),
];
const CONTENT: &[(&str, T)] = &[("parts", T::ArrOf(&T::Obj(PART))), ("role", T::Str)];
const TRANSCRIPTION: &[(&str, T)] = &[
    ("text", T::Str),
    ("finished", T::Bool),
    ("languageCode", T::Str),
    ("speakerLabel", T::Str),
    ("words", T::Any),
    ("startOffset", T::Any),
    ("endOffset", T::Any),
];
const MODALITY_COUNT: &[(&str, T)] = &[("modality", T::Str), ("tokenCount", T::Num)];
const USAGE: &[(&str, T)] = &[
    ("cacheTokensDetails", T::ArrOf(&T::Obj(MODALITY_COUNT))),
    ("cachedContentTokenCount", T::Num),
    ("candidatesTokenCount", T::Num),
    ("candidatesTokensDetails", T::ArrOf(&T::Obj(MODALITY_COUNT))),
    ("promptTokenCount", T::Num),
    ("promptTokensDetails", T::ArrOf(&T::Obj(MODALITY_COUNT))),
    ("thoughtsTokenCount", T::Num),
    ("toolUsePromptTokenCount", T::Num),
    (
        "toolUsePromptTokensDetails",
        T::ArrOf(&T::Obj(MODALITY_COUNT)),
    ),
    ("totalTokenCount", T::Num),
    ("trafficType", T::Str),
];
const RESUMPTION: &[(&str, T)] = &[
    ("newHandle", T::Str),
    ("resumable", T::Bool),
    ("lastConsumedClientMessageIndex", T::Any),
];
const ACTIONS: &[(&str, T)] = &[
    ("skipSummarization", T::Bool),
    ("stateDelta", T::AnyObj),
    ("artifactDelta", T::AnyObj),
    ("transferToAgent", T::Str),
    ("transferReason", T::Str),
    ("escalate", T::Bool),
    ("requestedAuthConfigs", T::AnyObj),
    ("requestedToolConfirmations", T::AnyObj),
    ("compaction", T::AnyObj),
    ("endOfAgent", T::Bool),
    ("agentState", T::AnyObj),
    ("rewindBeforeInvocationId", T::Str),
];
const NODE_INFO: &[(&str, T)] = &[
    ("path", T::Str),
    ("outputFor", T::Any),
    ("messageAsOutput", T::Any),
];
const EVENT: &[(&str, T)] = &[
    ("modelVersion", T::Str),
    ("content", T::Obj(CONTENT)),
    ("groundingMetadata", T::AnyObj),
    ("partial", T::Bool),
    ("turnComplete", T::Bool),
    ("turnCompleteReason", T::Str),
    ("interactionStatus", T::Str),
    ("finishReason", T::Str),
    ("errorCode", T::Str),
    ("errorMessage", T::Str),
    ("interrupted", T::Bool),
    ("customMetadata", T::AnyObj),
    ("usageMetadata", T::Obj(USAGE)),
    ("liveSessionResumptionUpdate", T::Obj(RESUMPTION)),
    ("liveSessionId", T::Str),
    ("goAway", T::AnyObj),
    ("voiceActivity", T::AnyObj),
    ("inputTranscription", T::Obj(TRANSCRIPTION)),
    ("outputTranscription", T::Obj(TRANSCRIPTION)),
    ("avgLogprobs", T::Num),
    ("logprobsResult", T::AnyObj),
    ("cacheMetadata", T::AnyObj),
    ("citationMetadata", T::AnyObj),
    ("invocationId", T::Str),
    ("author", T::Str),
    ("actions", T::Obj(ACTIONS)),
    ("output", T::Any),
    ("nodeInfo", T::Obj(NODE_INFO)),
    ("longRunningToolIds", T::ArrOf(&T::Str)),
    ("branch", T::Str),
    ("isolationScope", T::Any),
    ("id", T::Str),
    ("timestamp", T::Num),
];

fn check(value: &Value, t: T, path: &str) {
    match (t, value) {
        (T::Any, _) => {}
        (T::Str, Value::String(_)) | (T::Bool, Value::Bool(_)) | (T::Num, Value::Number(_)) => {}
        (T::AnyObj, Value::Object(_)) => {}
        (T::ArrOf(inner), Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                check(item, *inner, &format!("{path}[{i}]"));
            }
        }
        (T::Obj(fields), Value::Object(map)) => check_object(map, fields, path),
        (_, other) => panic!("{path} has the wrong JSON type: {other}"),
    }
}

fn check_object(map: &Map<String, Value>, fields: &[(&str, T)], path: &str) {
    for (key, value) in map {
        let Some((_, t)) = fields.iter().find(|(name, _)| name == key) else {
            panic!("{path}.{key} is not an ADK event field");
        };
        check(value, *t, &format!("{path}.{key}"));
    }
}

/// Panics unless `event` has only ADK event fields of the right types, and the required ones.
pub fn check_event(event: &Value) {
    check(event, T::Obj(EVENT), "event");
    for required in ["id", "invocationId", "author", "timestamp", "actions"] {
        assert!(
            event.get(required).is_some(),
            "event lacks {required}: {event}"
        );
    }
    let inv = event["invocationId"].as_str().unwrap_or_default();
    assert!(
        inv.starts_with("e-") || inv.is_empty(),
        "invocationId {inv:?} is not ADK-shaped"
    );
}
