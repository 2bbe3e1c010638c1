//! The OpenAI Realtime wire format, server side: client events parsed (with OpenAI-style errors),
//! the session object, and server events built.

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Map, Value};

use livegate::model::{
    AutomaticActivityDetection, FunctionDeclaration, LiveConnectConfig, Modality,
    RealtimeInputConfig,
};

/// Close code: internal error.
pub const CLOSE_INTERNAL: u16 = 1011;
/// Close code: the server is going down.
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// Largest `instructions` accepted.
const MAX_INSTRUCTIONS_BYTES: usize = 64 * 1024;
/// Most tools a session may declare.
const MAX_TOOLS: usize = 128;

/// A fresh id with OpenAI's look: `item_` and 20 hex digits.
pub fn new_id(prefix: &str) -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}_{}", &hex[..20])
}

/// An error OpenAI would report in an `error` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// `invalid_request_error` or `server_error`.
    pub kind: &'static str,
    /// A finer code.
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
    /// The offending parameter.
    pub param: Option<String>,
}

impl ApiError {
    /// An `invalid_request_error`.
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            kind: "invalid_request_error",
            code,
            message: message.into(),
            param: None,
        }
    }

    /// An `invalid_request_error` about one parameter.
    pub fn param(code: &'static str, param: &str, message: impl Into<String>) -> Self {
        ApiError {
            param: Some(param.to_owned()),
            ..ApiError::invalid(code, message)
        }
    }

    /// The `error` server event, pointing back at the client event that caused it.
    pub fn event(&self, client_event_id: Option<&str>) -> Value {
        json!({
            "type": "error",
            "event_id": new_id("event"),
            "error": {
                "type": self.kind,
                "code": self.code,
                "message": self.message,
                "param": self.param,
                "event_id": client_event_id,
            },
        })
    }
}

/// A conversation item a client created.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A message with its text (`input_text`, `output_text` or `text` parts).
    Message {
        /// `user`, `system` or `assistant`.
        role: String,
        /// The text parts joined.
        text: String,
    },
    /// A tool result.
    FunctionCallOutput {
        /// The call it answers.
        call_id: String,
        /// The result, as the client wrote it.
        output: String,
    },
    /// A function call (seeding history).
    FunctionCall {
        /// Its id.
        call_id: String,
        /// The function.
        name: String,
        /// Arguments as a JSON string.
        arguments: String,
    },
}

/// One client event, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    /// `session.update`: the `session` object.
    SessionUpdate(Value),
    /// `input_audio_buffer.append`: PCM16 at 24 kHz.
    Append(Bytes),
    /// `input_audio_buffer.commit`.
    Commit,
    /// `input_audio_buffer.clear`.
    Clear,
    /// `conversation.item.create`.
    ItemCreate(Item),
    /// `response.create`.
    ResponseCreate,
    /// `response.cancel`.
    ResponseCancel,
    /// `conversation.item.truncate`.
    Truncate {
        /// The assistant item.
        item_id: String,
        /// Where playback stopped.
        audio_end_ms: u64,
    },
}

const CLIENT_EVENTS: [&str; 11] = [
    "session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "conversation.item.create",
    "conversation.item.truncate",
    "conversation.item.delete",
    "conversation.item.retrieve",
    "response.create",
    "response.cancel",
    "output_audio_buffer.clear",
];

/// Decodes one client frame: the client's `event_id` (for errors), and the event or its error.
pub fn parse(text: &str) -> (Option<String>, Result<ClientEvent, ApiError>) {
    let value: Value = match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Value::Object(map),
        Ok(_) => {
            return (
                None,
                Err(ApiError::invalid(
                    "invalid_json",
                    "The event must be a JSON object.",
                )),
            )
        }
        Err(e) => {
            return (
                None,
                Err(ApiError::invalid(
                    "invalid_json",
                    format!("The server failed to parse the event: {e}"),
                )),
            )
        }
    };
    let event_id = value
        .get("event_id")
        .and_then(Value::as_str)
        .map(|s| s.chars().take(64).collect());
    (event_id, parse_event(value))
}

fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

fn parse_event(value: Value) -> Result<ClientEvent, ApiError> {
    let kind = str_field(&value, "type").ok_or_else(|| {
        ApiError::param(
            "missing_required_parameter",
            "type",
            "Missing required parameter: 'type'.",
        )
    })?;
    match kind {
        "session.update" => match value.get("session") {
            Some(session @ Value::Object(_)) => Ok(ClientEvent::SessionUpdate(session.clone())),
            _ => Err(ApiError::param(
                "missing_required_parameter",
                "session",
                "Missing required parameter: 'session'.",
            )),
        },
        "input_audio_buffer.append" => {
            let audio = str_field(&value, "audio").ok_or_else(|| {
                ApiError::param(
                    "missing_required_parameter",
                    "audio",
                    "Missing required parameter: 'audio'.",
                )
            })?;
            let pcm = STANDARD.decode(audio).map_err(|_| {
                ApiError::param(
                    "invalid_value",
                    "audio",
                    "Invalid 'audio'. Expected base64-encoded audio bytes.",
                )
            })?;
            Ok(ClientEvent::Append(Bytes::from(pcm)))
        }
        "input_audio_buffer.commit" => Ok(ClientEvent::Commit),
        "input_audio_buffer.clear" => Ok(ClientEvent::Clear),
        "conversation.item.create" => parse_item(value.get("item")).map(ClientEvent::ItemCreate),
        "conversation.item.truncate" => {
            let item_id = str_field(&value, "item_id").ok_or_else(|| {
                ApiError::param(
                    "missing_required_parameter",
                    "item_id",
                    "Missing required parameter: 'item_id'.",
                )
            })?;
            let audio_end_ms = value
                .get("audio_end_ms")
                .and_then(Value::as_u64)
                .ok_or_else(|| {
                    ApiError::param(
                        "invalid_value",
                        "audio_end_ms",
                        "Invalid 'audio_end_ms': expected a non-negative integer.",
                    )
                })?;
            if value
                .get("content_index")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                != 0
            {
                return Err(ApiError::param(
                    "invalid_value",
                    "content_index",
                    "Only content_index 0 can be truncated.",
                ));
            }
            Ok(ClientEvent::Truncate {
                item_id: item_id.to_owned(),
                audio_end_ms,
            })
        }
        "response.create" => Ok(ClientEvent::ResponseCreate),
        "response.cancel" => Ok(ClientEvent::ResponseCancel),
        other if CLIENT_EVENTS.contains(&other) => Err(ApiError::invalid(
            "unsupported_event",
            format!("The mock does not support '{other}'."),
        )),
        other => Err(ApiError::param(
            "invalid_value",
            "type",
            format!(
                "Invalid value: '{}'. Supported values are: {}.",
                other.chars().take(64).collect::<String>(),
                CLIENT_EVENTS.join(", ")
            ),
        )),
    }
}

fn parse_item(item: Option<&Value>) -> Result<Item, ApiError> {
    let item = item.filter(|i| i.is_object()).ok_or_else(|| {
        ApiError::param(
            "missing_required_parameter",
            "item",
            "Missing required parameter: 'item'.",
        )
    })?;
    match str_field(item, "type").unwrap_or("message") {
        "message" => {
            let role = str_field(item, "role").unwrap_or_default();
            if !["user", "system", "assistant"].contains(&role) {
                return Err(ApiError::param(
                    "invalid_value",
                    "item.role",
                    "Invalid 'item.role'. Supported values are: user, system, assistant.",
                ));
            }
            let parts = item
                .get("content")
                .and_then(Value::as_array)
                .ok_or_else(|| {
                    ApiError::param(
                        "missing_required_parameter",
                        "item.content",
                        "Missing required parameter: 'item.content'.",
                    )
                })?;
            let text: String = parts
                .iter()
                .filter(|p| {
                    matches!(
                        str_field(p, "type"),
                        Some("input_text" | "output_text" | "text")
                    )
                })
                .filter_map(|p| str_field(p, "text"))
                .collect();
            Ok(Item::Message {
                role: role.to_owned(),
                text,
            })
        }
        "function_call_output" => {
            let call_id = str_field(item, "call_id").ok_or_else(|| {
                ApiError::param(
                    "missing_required_parameter",
                    "item.call_id",
                    "Missing required parameter: 'item.call_id'.",
                )
            })?;
            Ok(Item::FunctionCallOutput {
                call_id: call_id.to_owned(),
                output: str_field(item, "output").unwrap_or_default().to_owned(),
            })
        }
        "function_call" => Ok(Item::FunctionCall {
            call_id: str_field(item, "call_id").unwrap_or_default().to_owned(),
            name: str_field(item, "name").unwrap_or_default().to_owned(),
            arguments: str_field(item, "arguments").unwrap_or("{}").to_owned(),
        }),
        other => Err(ApiError::param(
            "invalid_value",
            "item.type",
            format!(
                "Invalid 'item.type': '{}'.",
                other.chars().take(64).collect::<String>()
            ),
        )),
    }
}

/// The session as the client configured it.
#[derive(Debug, Clone)]
pub struct Session {
    id: String,
    model: String,
    instructions: String,
    modality: Modality,
    /// Transcribe the user's audio (`audio.input.transcription` set).
    pub transcription: Option<Value>,
    /// `audio.input.turn_detection`; `None` is manual (commit) mode.
    pub turn_detection: Option<Value>,
    voice: String,
    tools: Vec<FunctionDeclaration>,
}

impl Session {
    /// The defaults a new session starts with.
    pub fn new(model: &str) -> Self {
        Session {
            id: new_id("sess"),
            model: model.to_owned(),
            instructions: "You are a helpful assistant.".into(),
            modality: Modality::Audio,
            transcription: None,
            turn_detection: Some(json!({
                "type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                "silence_duration_ms": 500, "create_response": true, "interrupt_response": true,
            })),
            voice: "alloy".into(),
            tools: Vec::new(),
        }
    }

    /// Turns are delimited by the client's commits.
    pub fn manual(&self) -> bool {
        self.turn_detection.is_none()
    }

    /// The answer modality.
    pub fn modality(&self) -> Modality {
        self.modality
    }

    /// Applies a `session.update`'s fields; nothing changes if any is invalid.
    pub fn apply(&mut self, update: &Value) -> Result<(), ApiError> {
        let mut next = self.clone();
        match str_field(update, "type") {
            Some("realtime") | None => {}
            Some(_) => {
                return Err(ApiError::param(
                    "invalid_value",
                    "session.type",
                    "Invalid 'session.type'. This server serves 'realtime' sessions.",
                ))
            }
        }
        if let Some(instructions) = update.get("instructions") {
            let text = instructions.as_str().unwrap_or_default();
            if text.len() > MAX_INSTRUCTIONS_BYTES {
                return Err(ApiError::param(
                    "string_above_max_length",
                    "session.instructions",
                    "Instructions are too long.",
                ));
            }
            next.instructions = text.to_owned();
        }
        if let Some(modalities) = update.get("output_modalities") {
            next.modality = match modalities.as_array().map(Vec::as_slice) {
                Some([m]) if m == "audio" => Modality::Audio,
                Some([m]) if m == "text" => Modality::Text,
                _ => {
                    return Err(ApiError::param(
                        "invalid_value",
                        "session.output_modalities",
                        "Invalid 'session.output_modalities': expected ['audio'] or ['text'].",
                    ))
                }
            };
        }
        let input = update.pointer("/audio/input");
        if let Some(format) = input.and_then(|i| i.get("format")) {
            check_format(format, "session.audio.input.format")?;
        }
        if let Some(format) = update.pointer("/audio/output/format") {
            check_format(format, "session.audio.output.format")?;
        }
        if let Some(transcription) = input.and_then(|i| i.get("transcription")) {
            next.transcription = (!transcription.is_null()).then(|| transcription.clone());
        }
        if let Some(detection) = input.and_then(|i| i.get("turn_detection")) {
            next.turn_detection = match str_field(detection, "type") {
                _ if detection.is_null() => None,
                Some("server_vad" | "semantic_vad") => Some(detection.clone()),
                _ => return Err(ApiError::param(
                    "invalid_value",
                    "session.audio.input.turn_detection.type",
                    "Invalid turn detection type. Supported values are: server_vad, semantic_vad.",
                )),
            };
        }
        if let Some(voice) = update
            .pointer("/audio/output/voice")
            .and_then(Value::as_str)
        {
            next.voice = voice.chars().take(64).collect();
        }
        if let Some(tools) = update.get("tools") {
            next.tools = parse_tools(tools)?;
        }
        *self = next;
        Ok(())
    }

    /// The session object, as `session.created` / `session.updated` carry it.
    pub fn to_json(&self) -> Value {
        let modality = match self.modality {
            Modality::Audio => "audio",
            Modality::Text => "text",
        };
        let tools: Vec<Value> = self
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function", "name": t.name, "description": t.description,
                    "parameters": t.parameters_json_schema.as_deref().cloned().unwrap_or_else(|| json!({})),
                })
            })
            .collect();
        let format = json!({ "type": "audio/pcm", "rate": 24000 });
        json!({
            "type": "realtime",
            "object": "realtime.session",
            "id": self.id,
            "model": self.model,
            "output_modalities": [modality],
            "instructions": self.instructions,
            "audio": {
                "input": {
                    "format": format,
                    "transcription": self.transcription,
                    "noise_reduction": null,
                    "turn_detection": self.turn_detection,
                },
                "output": { "format": format, "voice": self.voice, "speed": 1.0 },
            },
            "tools": tools,
            "tool_choice": "auto",
            "max_output_tokens": "inf",
        })
    }

    /// How to connect the sim for this session: it always transcribes both ways (the mock needs
    /// to know where utterances end) and leaves out what the client did not ask for.
    pub fn connect_config(&self) -> LiveConnectConfig {
        let realtime_input_config = self.manual().then(|| RealtimeInputConfig {
            automatic_activity_detection: Some(AutomaticActivityDetection {
                disabled: Some(true),
                ..AutomaticActivityDetection::default()
            }),
            activity_handling: None,
        });
        LiveConnectConfig {
            model: self.model.clone(),
            system_instruction: Some(self.instructions.clone()).filter(|s| !s.is_empty()),
            tools: self.tools.clone(),
            response_modalities: vec![self.modality],
            input_audio_transcription: true,
            output_audio_transcription: true,
            realtime_input_config,
            ..LiveConnectConfig::default()
        }
    }
}

fn check_format(format: &Value, param: &str) -> Result<(), ApiError> {
    let pcm = str_field(format, "type") == Some("audio/pcm");
    let rate = format.get("rate").and_then(Value::as_u64).unwrap_or(24_000);
    if pcm && rate == 24_000 {
        Ok(())
    } else {
        Err(ApiError::param(
            "invalid_value",
            param,
            "The mock supports only {\"type\":\"audio/pcm\",\"rate\":24000}.",
        ))
    }
}

fn parse_tools(tools: &Value) -> Result<Vec<FunctionDeclaration>, ApiError> {
    let list = tools.as_array().ok_or_else(|| {
        ApiError::param(
            "invalid_type",
            "session.tools",
            "Invalid 'session.tools': expected an array.",
        )
    })?;
    if list.len() > MAX_TOOLS {
        return Err(ApiError::param(
            "array_above_max_length",
            "session.tools",
            "Too many tools.",
        ));
    }
    list.iter()
        .map(|tool| {
            let name = str_field(tool, "name").filter(|n| !n.is_empty());
            match (str_field(tool, "type"), name) {
                (Some("function"), Some(name)) => Ok(FunctionDeclaration {
                    name: name.to_owned(),
                    description: str_field(tool, "description")
                        .unwrap_or_default()
                        .to_owned(),
                    parameters_json_schema: tool.get("parameters").cloned().map(Arc::new),
                    behavior: None,
                }),
                _ => Err(ApiError::param(
                    "invalid_value",
                    "session.tools",
                    "Each tool needs type 'function' and a name.",
                )),
            }
        })
        .collect()
}

/// A server event of `kind` with these fields and a fresh `event_id`.
pub fn event(kind: &str, fields: Value) -> Value {
    let mut map = match fields {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    map.insert("type".into(), json!(kind));
    map.insert("event_id".into(), json!(new_id("event")));
    Value::Object(map)
}
