//! The Gemini Live wire format, client side: the `setup` message built from a connect config,
//! client messages from `LiveInput`s, and server messages parsed into `LlmResponse`s.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::event::{
    Blob, Content, FunctionCall, ModalityTokenCount, SessionResumptionUpdate, Transcription,
    UsageMetadata,
};
use crate::model::{
    schema, Behavior, GoAway, LiveConnectConfig, LiveInput, LlmResponse, ModelError,
};

/// The `setup` message: the first thing a client sends.
pub fn setup_message(config: &LiveConnectConfig, model_path: &str) -> Value {
    let mut setup = Map::new();
    setup.insert("model".into(), json!(model_path));
    let mut generation = Map::new();
    let modalities: Vec<Value> = config
        .response_modalities
        .iter()
        .map(|m| json!(m))
        .collect();
    if !modalities.is_empty() {
        generation.insert("responseModalities".into(), Value::Array(modalities));
    }
    if let Some(speech) = &config.speech_config {
        generation.insert("speechConfig".into(), json!(speech));
    }
    if let Some(affective) = config.enable_affective_dialog {
        generation.insert("enableAffectiveDialog".into(), json!(affective));
    }
    if !generation.is_empty() {
        setup.insert("generationConfig".into(), Value::Object(generation));
    }
    if let Some(instruction) = config
        .system_instruction
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        setup.insert(
            "systemInstruction".into(),
            // ADK sends the instruction with the `system` role.
            json!({ "parts": [{ "text": instruction }], "role": "system" }),
        );
    }
    if !config.tools.is_empty() {
        let declarations: Vec<Value> = config
            .tools
            .iter()
            .map(|t| {
                let mut d = json!({ "name": t.name, "description": t.description });
                if let Some(schema) = &t.parameters_json_schema {
                    d["parametersJsonSchema"] =
                        schema::for_backend(Some(schema), schema::Backend::Gemini);
                }
                // Only a non-blocking tool says so: a blocking one is declared as it always was.
                if let Some(behavior) = t.behavior.filter(|b| *b == Behavior::NonBlocking) {
                    d["behavior"] = json!(behavior.as_wire());
                }
                d
            })
            .collect();
        setup.insert(
            "tools".into(),
            json!([{ "functionDeclarations": declarations }]),
        );
    }
    if let Some(realtime) = &config.realtime_input_config {
        setup.insert("realtimeInputConfig".into(), json!(realtime));
    }
    if let Some(resumption) = &config.session_resumption {
        setup.insert("sessionResumption".into(), json!(resumption));
    }
    if let Some(compression) = &config.context_window_compression {
        setup.insert("contextWindowCompression".into(), json!(compression));
    }
    if config.input_audio_transcription {
        setup.insert("inputAudioTranscription".into(), json!({}));
    }
    if config.output_audio_transcription {
        setup.insert("outputAudioTranscription".into(), json!({}));
    }
    if let Some(proactivity) = &config.proactivity {
        setup.insert("proactivity".into(), json!(proactivity));
    }
    if history_message(config).is_some() {
        setup.insert(
            "historyConfig".into(),
            json!({ "initialHistoryInClientContent": true }),
        );
    }
    json!({ "setup": setup })
}

/// The history to seed a new (not resumed) session with, as one `clientContent` message; the
/// model answers at once only when the last turn is the user's (as ADK does).
pub fn history_message(config: &LiveConnectConfig) -> Option<Value> {
    let resuming = config
        .session_resumption
        .as_ref()
        .is_some_and(|r| r.handle.is_some());
    if resuming || config.history.is_empty() {
        return None;
    }
    let last_is_user = config
        .history
        .last()
        .is_some_and(|c| c.role.as_deref() == Some("user"));
    Some(json!({
        "clientContent": { "turns": config.history, "turnComplete": last_is_user }
    }))
}

/// True for model families that take typed user turns as realtime text (Gemini 3.x: early 3.1
/// closed the session on any `clientContent`; ADK routes 3.x text the same way).
pub fn text_as_realtime(model: &str) -> bool {
    model
        .strip_prefix("models/")
        .unwrap_or(model)
        .starts_with("gemini-3")
}

/// True for the Gemini 3.x live models, where ADK gives every `turnComplete` a grounding object.
fn is_gemini_3_live(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model);
    name.starts_with("gemini-3.") && name.contains("-live") && !name.contains("live-translate")
}

/// One client message for an input, as sent; `realtime_text` sends complete text turns as
/// `realtimeInput.text` (see [`text_as_realtime`]).
pub fn input_text(input: &LiveInput, realtime_text: bool) -> String {
    let message = match input {
        LiveInput::Realtime(blob) => return realtime_blob_text(blob),
        LiveInput::Content {
            content,
            turn_complete: true,
        } if realtime_text && content.parts.iter().all(|p| p.text.is_some()) => {
            json!({ "realtimeInput": { "text": content.joined_text() } })
        }
        LiveInput::Content {
            content,
            turn_complete,
        } => json!({ "clientContent": { "turns": [content], "turnComplete": turn_complete } }),
        LiveInput::ToolResponse(responses) => {
            let responses: Vec<Value> = responses
                .iter()
                .map(|r| {
                    let mut response =
                        json!({ "id": r.id, "name": r.name, "response": r.response });
                    if let Some(scheduling) = r.scheduling {
                        response["scheduling"] = json!(scheduling.as_wire());
                    }
                    response
                })
                .collect();
            json!({ "toolResponse": { "functionResponses": responses } })
        }
        LiveInput::ActivityStart => json!({ "realtimeInput": { "activityStart": {} } }),
        LiveInput::ActivityEnd => json!({ "realtimeInput": { "activityEnd": {} } }),
        LiveInput::AudioStreamEnd => json!({ "realtimeInput": { "audioStreamEnd": true } }),
    };
    message.to_string()
}

/// A microphone or camera chunk's `realtimeInput` message, written straight into its text.
///
/// Every session sends a microphone chunk every 20 ms; built as a `Value`, each cost two maps, a
/// base64 `String` copied into the text, and a scan of that base64 for characters to escape, of
/// which it has none (`cargo bench --bench gemini -- gemini_up` measures it). The text is sized
/// exactly: a `String` whose length is its capacity becomes the frame's bytes without a second
/// allocation for their shared header.
fn realtime_blob_text(blob: &Blob) -> String {
    const HEAD: &str = "{\"realtimeInput\":{\"";
    const DATA: &str = "\":{\"data\":\"";
    const MIME: &str = "\",\"mimeType\":";
    const TAIL: &str = "}}}";
    let key = if blob.mime_type.starts_with("audio/") {
        "audio"
    } else {
        "video"
    };
    // The mime type comes from the client: written as it is unless it needs escaping.
    let plain = blob
        .mime_type
        .bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\');
    let escaped = (!plain).then(|| Value::from(blob.mime_type.as_str()).to_string());
    let mime_len = escaped
        .as_ref()
        .map_or(blob.mime_type.len() + 2, String::len);
    let data_len = base64::encoded_len(blob.data.len(), true).unwrap_or(0);
    let len = HEAD.len() + key.len() + DATA.len() + data_len + MIME.len() + mime_len + TAIL.len();
    let mut text = String::with_capacity(len);
    text.push_str(HEAD);
    text.push_str(key);
    text.push_str(DATA);
    STANDARD.encode_string(&blob.data, &mut text);
    text.push_str(MIME);
    match &escaped {
        Some(escaped) => text.push_str(escaped),
        None => {
            text.push('"');
            text.push_str(&blob.mime_type);
            text.push('"');
        }
    }
    text.push_str(TAIL);
    text
}

/// What one server message means to the client.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// The session is set up.
    SetupComplete,
    /// Model output for the flow.
    Response(Box<LlmResponse>),
    /// Nothing the flow needs (an empty message, voice activity, unknown new fields).
    Nothing,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServerMessage {
    setup_complete: Option<Value>,
    server_content: Option<ServerContent>,
    tool_call: Option<ToolCall>,
    tool_call_cancellation: Option<ToolCallCancellation>,
    usage_metadata: Option<Value>,
    go_away: Option<GoAwayMessage>,
    session_resumption_update: Option<ResumptionUpdate>,
    error: Option<Value>,
    code: Option<Value>,
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServerContent {
    model_turn: Option<Content>,
    #[serde(default)]
    turn_complete: bool,
    #[serde(default)]
    interrupted: bool,
    #[serde(default)]
    generation_complete: bool,
    input_transcription: Option<Transcription>,
    output_transcription: Option<Transcription>,
    grounding_metadata: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolCall {
    #[serde(default)]
    function_calls: Vec<FunctionCall>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolCallCancellation {
    #[serde(default)]
    ids: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GoAwayMessage {
    time_left: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumptionUpdate {
    new_handle: Option<String>,
    resumable: Option<Value>,
}

/// Parses one server frame's JSON into what it means; `model` fills `modelVersion`.
pub fn parse_server_message(json: &[u8], model: &str) -> Result<ServerEvent, ModelError> {
    let message: ServerMessage = serde_json::from_slice(json)
        .map_err(|e| ModelError::Protocol(format!("unreadable server message: {e}")))?;
    if let Some(error) = in_band_error(&message) {
        return Err(error);
    }
    if message.setup_complete.is_some() {
        return Ok(ServerEvent::SetupComplete);
    }
    let mut response = LlmResponse {
        model_version: Some(model.to_owned()),
        ..LlmResponse::default()
    };
    let mut any = false;
    if let Some(usage) = &message.usage_metadata {
        response.usage_metadata = Some(usage_metadata(usage));
        any = true;
    }
    if let Some(content) = message.server_content {
        let turn = content.model_turn.filter(|c| !c.parts.is_empty());
        any |= turn.is_some()
            || content.turn_complete
            || content.interrupted
            || content.generation_complete;
        // The role stays as Gemini sent it (usually absent), as ADK passes it on.
        response.content = turn;
        response.turn_complete = content.turn_complete;
        // ADK reports the turn's grounding on its turnComplete, an empty one for 3.x live models.
        if content.turn_complete {
            response.grounding_metadata = content
                .grounding_metadata
                .or_else(|| is_gemini_3_live(model).then(|| json!({})));
        }
        response.interrupted = content.interrupted;
        response.generation_complete = content.generation_complete;
        // An empty `{}` transcription carries nothing; drop it.
        let has_text = |t: &Transcription| {
            t.text.as_deref().is_some_and(|s| !s.is_empty()) || t.finished == Some(true)
        };
        response.input_transcription = content.input_transcription.filter(has_text);
        response.output_transcription = content.output_transcription.filter(has_text);
        any |= response.input_transcription.is_some() || response.output_transcription.is_some();
    }
    if let Some(call) = message.tool_call {
        any |= !call.function_calls.is_empty();
        response.tool_calls = call.function_calls;
    }
    if let Some(cancellation) = message.tool_call_cancellation {
        any |= !cancellation.ids.is_empty();
        response.tool_call_cancellations = cancellation.ids;
    }
    if let Some(update) = message.session_resumption_update {
        let resumable = match update.resumable {
            Some(Value::Bool(b)) => Some(b),
            Some(Value::String(s)) => Some(s.eq_ignore_ascii_case("true")),
            _ => None,
        };
        response.session_resumption_update = Some(SessionResumptionUpdate {
            new_handle: update.new_handle.filter(|h| !h.is_empty()),
            resumable,
        });
        any = true;
    }
    if let Some(go_away) = message.go_away {
        response.go_away = Some(GoAway {
            time_left: go_away.time_left,
        });
        any = true;
    }
    Ok(if any {
        ServerEvent::Response(Box::new(response))
    } else {
        ServerEvent::Nothing
    })
}

/// An error sent in-band (`{"error": {...}}`, or `{"code":…, "message":…}` with no known key).
fn in_band_error(message: &ServerMessage) -> Option<ModelError> {
    let detail = message.error.as_ref().map(|e| {
        e.get("message")
            .and_then(Value::as_str)
            .map_or_else(|| e.to_string(), str::to_owned)
    });
    let coded = message.code.as_ref().map(|code| {
        format!(
            "code {code}: {}",
            message.message.as_deref().unwrap_or("no message")
        )
    });
    detail
        .or(coded)
        .map(|detail| ModelError::Protocol(format!("the model reported an error: {detail}")))
}

/// Usage with ADK's names: the Developer API's `response*` counts become `candidates*`.
fn usage_metadata(usage: &Value) -> UsageMetadata {
    let count = |keys: &[&str]| {
        keys.iter().find_map(|k| match usage.get(*k)? {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        })
    };
    let details = |keys: &[&str]| {
        keys.iter().find_map(|k| {
            let list = usage.get(*k)?.as_array()?;
            Some(
                list.iter()
                    .filter_map(|d| {
                        Some(ModalityTokenCount {
                            modality: d.get("modality")?.as_str()?.to_owned(),
                            token_count: match d.get("tokenCount") {
                                Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
                                Some(Value::String(s)) => s.parse().unwrap_or(0),
                                _ => 0,
                            },
                        })
                    })
                    .collect::<Vec<_>>(),
            )
        })
    };
    UsageMetadata {
        candidates_token_count: count(&["responseTokenCount", "candidatesTokenCount"]),
        candidates_tokens_details: details(&["responseTokensDetails", "candidatesTokensDetails"]),
        prompt_token_count: count(&["promptTokenCount"]),
        prompt_tokens_details: details(&["promptTokensDetails"]),
        total_token_count: count(&["totalTokenCount"]),
    }
}
