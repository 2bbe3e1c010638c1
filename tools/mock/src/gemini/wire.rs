//! The Gemini Live wire format: endpoint paths, client JSON in (either key spelling, either base64
//! alphabet) to setup and `LiveInput`s, and `LlmResponse`s out as server JSON.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Map, Value};

use livegate::event::{Blob, Content, FunctionResponse, Part, Scheduling, UsageMetadata};
use livegate::model::{
    Behavior, ContextWindowCompression, FunctionDeclaration, LiveConnectConfig, LiveInput,
    LlmResponse, Modality, ProactivityConfig, RealtimeInputConfig, SessionResumptionConfig,
    SpeechConfig,
};

/// Close code: normal closure (after `goAway`).
pub const CLOSE_NORMAL: u16 = 1000;
/// Close code: the server is going down.
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// Close code: invalid argument (bad message, bad key).
pub const CLOSE_INVALID: u16 = 1007;
/// Close code: policy violation (unknown model).
pub const CLOSE_POLICY: u16 = 1008;
/// Close code: internal error.
pub const CLOSE_INTERNAL: u16 = 1011;
/// What a WebSocket close frame can carry as its reason.
const MAX_REASON_BYTES: usize = 123;

/// Keys whose values are the client's own data (tool arguments, results, schemas): their keys are
/// names the client chose, so snake_case there must survive normalisation.
const OPAQUE_KEYS: [&str; 4] = ["args", "response", "parameters", "parametersJsonSchema"];

/// A reason to close the connection: a WebSocket close code and a short reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    /// The close code.
    pub code: u16,
    /// The reason, cut to what a close frame can carry.
    pub reason: String,
}

impl Close {
    /// A close with this code; the reason is cut to 123 bytes on a character boundary.
    pub fn new(code: u16, reason: impl Into<String>) -> Self {
        let mut reason = reason.into();
        if reason.len() > MAX_REASON_BYTES {
            let mut end = MAX_REASON_BYTES;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        Close { code, reason }
    }

    /// 1007, as Gemini answers any message it cannot accept.
    pub fn invalid(reason: impl Into<String>) -> Self {
        Close::new(CLOSE_INVALID, reason)
    }
}

/// Which of Google's two live APIs a connection speaks; they differ in a few server fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// The Gemini Developer API (generativelanguage).
    Developer,
    /// Vertex AI (aiplatform): `setupComplete.sessionId`, `candidates*` usage names.
    Vertex,
}

/// A recognised live endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The API flavour.
    pub api: Api,
    /// The API version in the path (`v1beta`, `v1alpha`, `v1`, `v1beta1`).
    pub version: &'static str,
}

/// The endpoint a request path names, if any; leading slashes may be doubled, as python-genai
/// joins its base URL and path into `//ws/...`.
pub fn endpoint(path: &str) -> Option<Endpoint> {
    let path = path.trim_start_matches('/');
    if let Some(rest) = path.strip_prefix("ws/google.ai.generativelanguage.") {
        let (version, method) = rest.split_once(".GenerativeService.")?;
        let version = ["v1alpha", "v1beta"].into_iter().find(|v| *v == version)?;
        matches!(
            method,
            "BidiGenerateContent" | "BidiGenerateContentConstrained"
        )
        .then_some(Endpoint {
            api: Api::Developer,
            version,
        })
    } else {
        let rest = path.strip_prefix("ws/google.cloud.aiplatform.")?;
        let version = rest.strip_suffix(".LlmBidiService/BidiGenerateContent")?;
        let version = ["v1", "v1beta1"].into_iter().find(|v| *v == version)?;
        Some(Endpoint {
            api: Api::Vertex,
            version,
        })
    }
}

/// One client message, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientMessage {
    /// `setup`: how to open the model session.
    Setup(Box<LiveConnectConfig>),
    /// `clientContent`: turns, and whether the model should answer now.
    ClientContent {
        /// The turns, in order.
        turns: Vec<Content>,
        /// Answer after these turns.
        turn_complete: bool,
    },
    /// `realtimeInput`: media, realtime text and activity signals, in a sensible order.
    RealtimeInput(Vec<LiveInput>),
    /// `toolResponse`: results, with the ids the client was given.
    ToolResponse(Vec<FunctionResponse>),
}

/// Decodes one client frame. Errors are the close Gemini would send (1007, or 1008 for a model
/// it does not serve).
pub fn parse_client_message(text: &str, endpoint: &Endpoint) -> Result<ClientMessage, Close> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Close::invalid(format!("Invalid JSON payload received. {e}")))?;
    let Value::Object(message) = camelize(value) else {
        return Err(Close::invalid(
            "Invalid JSON payload received. Expected an object.",
        ));
    };
    let mut fields = message.into_iter();
    let (Some((kind, body)), None) = (fields.next(), fields.next()) else {
        return Err(Close::invalid(
            "Request must set exactly one of setup, clientContent, realtimeInput, toolResponse.",
        ));
    };
    match kind.as_str() {
        "setup" => parse_setup(body, endpoint).map(|c| ClientMessage::Setup(Box::new(c))),
        "clientContent" => {
            let wire: ClientContentWire = typed(&kind, body, &["turns", "turnComplete"])?;
            let turns = wire
                .turns
                .into_iter()
                .map(|turn| Content {
                    role: turn.role.or_else(|| Some("user".into())),
                    ..turn
                })
                .collect();
            Ok(ClientMessage::ClientContent {
                turns,
                turn_complete: wire.turn_complete,
            })
        }
        "realtimeInput" => parse_realtime(body).map(ClientMessage::RealtimeInput),
        "toolResponse" => {
            let wire: ToolResponseWire = typed(&kind, body, &["functionResponses"])?;
            wire.function_responses
                .into_iter()
                .map(FunctionResponseWire::into_response)
                .collect::<Result<_, _>>()
                .map(ClientMessage::ToolResponse)
        }
        other => Err(unknown_field(other, "")),
    }
}

fn unknown_field(name: &str, at: &str) -> Close {
    Close::invalid(format!(
        "Invalid JSON payload received. Unknown name \"{name}\" at '{at}': Cannot find field."
    ))
}

/// Checks a message body's field names (Gemini rejects unknown ones), then deserializes it.
fn typed<T: DeserializeOwned>(kind: &str, body: Value, known: &[&str]) -> Result<T, Close> {
    if let Some(fields) = body.as_object() {
        if let Some(name) = fields.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(unknown_field(name, kind));
        }
    }
    serde_json::from_value(body)
        .map_err(|e| Close::invalid(format!("Invalid value at '{kind}': {e}")))
}

/// Rewrites snake_case keys to camelCase at every depth, except inside the client's own data.
pub fn camelize(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(key, value)| {
                    let key = camel_case(&key).into_owned();
                    let value = if OPAQUE_KEYS.contains(&key.as_str()) {
                        value
                    } else {
                        camelize(value)
                    };
                    (key, value)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(camelize).collect()),
        other => other,
    }
}

/// `voice_config` → `voiceConfig`; names without an inner underscore stay as they are.
fn camel_case(key: &str) -> Cow<'_, str> {
    if !key.trim_start_matches('_').contains('_') {
        return Cow::Borrowed(key);
    }
    let leading = key.len() - key.trim_start_matches('_').len();
    let mut out = String::with_capacity(key.len());
    out.push_str(&key[..leading]);
    let mut upper = false;
    for c in key[leading..].chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A boolean, also from `"true"` / `"false"` (SDKs coerce those, so the server should too).
fn lenient_bool<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(b),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(false),
        other => Err(serde::de::Error::custom(format!("{other} is not a bool"))),
    }
}

/// The fields of `setup` Gemini knows; anything else is rejected like Gemini does.
const SETUP_FIELDS: [&str; 14] = [
    "model",
    "generationConfig",
    "systemInstruction",
    "tools",
    "realtimeInputConfig",
    "sessionResumption",
    "contextWindowCompression",
    "inputAudioTranscription",
    "outputAudioTranscription",
    "proactivity",
    "historyConfig",
    "safetySettings",
    "avatarConfig",
    "explicitVadSignal",
];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetupWire {
    model: String,
    #[serde(default)]
    generation_config: GenerationConfigWire,
    system_instruction: Option<Content>,
    #[serde(default)]
    tools: Vec<ToolWire>,
    realtime_input_config: Option<RealtimeInputConfig>,
    session_resumption: Option<SessionResumptionConfig>,
    context_window_compression: Option<ContextWindowCompression>,
    input_audio_transcription: Option<Value>,
    output_audio_transcription: Option<Value>,
    proactivity: Option<ProactivityConfig>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfigWire {
    #[serde(default)]
    response_modalities: Vec<String>,
    speech_config: Option<SpeechConfig>,
    enable_affective_dialog: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolWire {
    #[serde(default)]
    function_declarations: Vec<FunctionDeclarationWire>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionDeclarationWire {
    name: String,
    #[serde(default)]
    description: String,
    parameters: Option<Value>,
    parameters_json_schema: Option<Value>,
    /// `BLOCKING` or `NON_BLOCKING`; anything else is refused, as Gemini refuses it.
    behavior: Option<String>,
}

/// A declaration's `behavior`, checked.
fn behavior_of(d: &FunctionDeclarationWire) -> Result<Option<Behavior>, Close> {
    match d.behavior.as_deref() {
        None | Some("UNSPECIFIED") => Ok(None),
        Some("BLOCKING") => Ok(Some(Behavior::Blocking)),
        Some("NON_BLOCKING") => Ok(Some(Behavior::NonBlocking)),
        Some(other) => Err(Close::invalid(format!(
            "Invalid value at 'setup.tools[0].function_declarations' ({}): invalid value \"{other}\" for enum type.Behavior",
            d.name
        ))),
    }
}

/// The model id in `models/X` or `projects/…/models/X`.
fn model_id(model: &str) -> Option<&str> {
    let id = match model.strip_prefix("models/") {
        Some(id) => id,
        None if model.starts_with("projects/") => model.rsplit_once("/models/")?.1,
        None => return None,
    };
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

fn parse_setup(body: Value, endpoint: &Endpoint) -> Result<LiveConnectConfig, Close> {
    let setup: SetupWire = typed("setup", body, &SETUP_FIELDS)?;
    let model = model_id(&setup.model).ok_or_else(|| {
        Close::new(
            CLOSE_POLICY,
            format!(
                "{} is not found for API version {}, or is not supported for bidiGenerateContent.",
                setup.model, endpoint.version
            ),
        )
    })?;
    let response_modalities = setup
        .generation_config
        .response_modalities
        .iter()
        .map(|m| m.parse::<Modality>())
        .collect::<Result<_, _>>()
        .map_err(|e| Close::invalid(format!("Invalid value at 'setup.generationConfig': {e}")))?;
    let tools = setup
        .tools
        .into_iter()
        .flat_map(|t| t.function_declarations)
        .map(|d| {
            Ok(FunctionDeclaration {
                behavior: behavior_of(&d)?,
                name: d.name,
                description: d.description,
                parameters_json_schema: d.parameters_json_schema.or(d.parameters).map(Arc::new),
            })
        })
        .collect::<Result<_, Close>>()?;
    Ok(LiveConnectConfig {
        model: model.to_owned(),
        system_instruction: setup
            .system_instruction
            .map(|c| c.joined_text())
            .filter(|t| !t.is_empty()),
        tools,
        response_modalities,
        speech_config: setup.generation_config.speech_config,
        input_audio_transcription: setup.input_audio_transcription.is_some(),
        output_audio_transcription: setup.output_audio_transcription.is_some(),
        realtime_input_config: setup.realtime_input_config,
        session_resumption: setup.session_resumption,
        context_window_compression: setup.context_window_compression,
        proactivity: setup.proactivity,
        enable_affective_dialog: setup.generation_config.enable_affective_dialog,
        history: Vec::new(),
        playout: None,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClientContentWire {
    #[serde(default)]
    turns: Vec<Content>,
    #[serde(default, deserialize_with = "lenient_bool")]
    turn_complete: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RealtimeInputWire {
    /// Deprecated, but ADK still sends 2.5 models their audio this way.
    #[serde(default)]
    media_chunks: Vec<Blob>,
    audio: Option<Blob>,
    video: Option<Blob>,
    text: Option<String>,
    activity_start: Option<Value>,
    activity_end: Option<Value>,
    #[serde(default, deserialize_with = "lenient_bool")]
    audio_stream_end: bool,
}

fn parse_realtime(body: Value) -> Result<Vec<LiveInput>, Close> {
    const FIELDS: [&str; 7] = [
        "mediaChunks",
        "audio",
        "video",
        "text",
        "activityStart",
        "activityEnd",
        "audioStreamEnd",
    ];
    let wire: RealtimeInputWire = typed("realtimeInput", body, &FIELDS)?;
    // SDKs send one field per message; if several come together, start an activity before its
    // media and end it (or the stream) after them.
    let mut inputs = Vec::new();
    if wire.activity_start.is_some() {
        inputs.push(LiveInput::ActivityStart);
    }
    let media = wire
        .media_chunks
        .into_iter()
        .chain(wire.audio)
        .chain(wire.video);
    inputs.extend(media.map(LiveInput::Realtime));
    if let Some(text) = wire.text {
        inputs.push(LiveInput::Content {
            content: Content::text("user", text),
            turn_complete: true,
        });
    }
    if wire.activity_end.is_some() {
        inputs.push(LiveInput::ActivityEnd);
    }
    if wire.audio_stream_end {
        inputs.push(LiveInput::AudioStreamEnd);
    }
    Ok(inputs)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolResponseWire {
    #[serde(default)]
    function_responses: Vec<FunctionResponseWire>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionResponseWire {
    id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    response: Value,
    /// `SILENT`, `WHEN_IDLE` or `INTERRUPT` (for a non-blocking call's result).
    scheduling: Option<String>,
    will_continue: Option<bool>,
}

impl FunctionResponseWire {
    fn into_response(self) -> Result<FunctionResponse, Close> {
        if !self.response.is_object() {
            return Err(Close::invalid(format!(
                "Invalid value at 'toolResponse.functionResponses' ({}): response must be an object.",
                self.name
            )));
        }
        let scheduling = match self.scheduling.as_deref() {
            None | Some("SCHEDULING_UNSPECIFIED") => None,
            Some("SILENT") => Some(Scheduling::Silent),
            Some("WHEN_IDLE") => Some(Scheduling::WhenIdle),
            Some("INTERRUPT") => Some(Scheduling::Interrupt),
            Some(other) => {
                return Err(Close::invalid(format!(
                    "Invalid value at 'toolResponse.functionResponses' ({}): invalid value \"{other}\" for enum type.Scheduling",
                    self.name
                )))
            }
        };
        // Streaming results (`willContinue`) are taken as any other; the flag says nothing here.
        let _ = self.will_continue;
        Ok(FunctionResponse {
            id: self.id,
            name: self.name,
            response: self.response,
            scheduling,
        })
    }
}

/// Function call ids: Gemini's `function-call-<digits>` on the wire, the model's own ids inside,
/// so tool responses and cancellations translate both ways.
#[derive(Debug, Default)]
struct CallIds {
    to_model: HashMap<String, Option<String>>,
    to_wire: HashMap<String, String>,
}

impl CallIds {
    /// A fresh wire id for a call the model made (with its own id, if it gave one).
    fn issue(&mut self, model_id: Option<&str>) -> String {
        if let Some(wire) = model_id.and_then(|id| self.to_wire.get(id)) {
            return wire.clone();
        }
        let wire = loop {
            let digits = uuid::Uuid::new_v4().as_u128() % 10u128.pow(19);
            let wire = format!("function-call-{digits}");
            if !self.to_model.contains_key(&wire) {
                break wire;
            }
        };
        self.to_model
            .insert(wire.clone(), model_id.map(str::to_owned));
        if let Some(id) = model_id {
            self.to_wire.insert(id.to_owned(), wire.clone());
        }
        wire
    }

    /// The wire id of a model's call id (itself if it was never issued).
    fn wire(&self, model_id: &str) -> String {
        self.to_wire
            .get(model_id)
            .cloned()
            .unwrap_or_else(|| model_id.to_owned())
    }

    /// Rewrites tool responses to the model's ids; an id never issued closes with 1007. Ids stay
    /// known after a response, as streaming tools answer the same call more than once.
    fn to_model(&self, responses: Vec<FunctionResponse>) -> Result<Vec<FunctionResponse>, Close> {
        responses
            .into_iter()
            .map(|mut response| {
                if let Some(wire) = &response.id {
                    let id = self.to_model.get(wire).ok_or_else(|| {
                        Close::invalid(format!("Function call id {wire:?} was not found."))
                    })?;
                    response.id = id.clone();
                }
                Ok(response)
            })
            .collect()
    }
}

/// Turns one connection's model responses into server messages, remembering what spans messages:
/// the call ids handed out, and usage held back until the `turnComplete` it belongs with.
#[derive(Debug)]
pub struct Outbound {
    api: Api,
    ids: CallIds,
    usage: Option<UsageMetadata>,
}

impl Outbound {
    /// Translation for a connection on `api`.
    pub fn new(api: Api) -> Self {
        Outbound {
            api,
            ids: CallIds::default(),
            usage: None,
        }
    }

    /// The server messages for a response (none or one). Where the sim's message boundaries
    /// differ from Gemini's, Gemini's win: the sim reports usage in a message of its own just
    /// before `turnComplete`, Gemini in the `turnComplete` message. (An interrupted answer ends
    /// with `interrupted` and then `turnComplete` in the sim as in Gemini.)
    pub fn messages(&mut self, response: &LlmResponse) -> Vec<Value> {
        if response.usage_metadata.is_some() && is_usage_only(response) {
            self.usage = response.usage_metadata.clone();
            return Vec::new();
        }
        let mut response = Cow::Borrowed(response);
        if response.turn_complete && response.usage_metadata.is_none() && self.usage.is_some() {
            response.to_mut().usage_metadata = self.usage.take();
        }
        server_message(&response, &mut self.ids, self.api)
            .into_iter()
            .collect()
    }

    /// Rewrites tool responses to the model's call ids (1007 for an id never handed out).
    pub fn tool_responses(
        &self,
        responses: Vec<FunctionResponse>,
    ) -> Result<Vec<FunctionResponse>, Close> {
        self.ids.to_model(responses)
    }
}

/// True if a response carries nothing but usage (and the model name).
fn is_usage_only(response: &LlmResponse) -> bool {
    let rest = LlmResponse {
        usage_metadata: None,
        model_version: None,
        ..response.clone()
    };
    rest == LlmResponse::default()
}

/// `{"setupComplete": {}}`; Vertex adds a session id.
pub fn setup_complete(api: Api) -> Value {
    match api {
        Api::Developer => json!({ "setupComplete": {} }),
        Api::Vertex => {
            json!({ "setupComplete": { "sessionId": uuid::Uuid::new_v4().to_string() } })
        }
    }
}

/// `{"goAway": {"timeLeft": …}}`.
pub fn go_away(time_left: &str) -> Value {
    json!({ "goAway": { "timeLeft": time_left } })
}

/// The server message for one model response, every field of it in one message (as Gemini puts
/// `usageMetadata` beside `turnComplete`); `None` if the response carries nothing to send.
fn server_message(response: &LlmResponse, ids: &mut CallIds, api: Api) -> Option<Value> {
    let mut message = Map::new();
    let mut content = Map::new();
    if let Some(turn) = &response.content {
        let parts: Vec<Value> = turn.parts.iter().filter_map(part).collect();
        if !parts.is_empty() {
            // Gemini's `modelTurn` has no role unless one was given.
            let mut model_turn = json!({ "parts": parts });
            if let Some(role) = &turn.role {
                model_turn["role"] = json!(role);
            }
            content.insert("modelTurn".into(), model_turn);
        }
    }
    let transcriptions = [
        ("inputTranscription", &response.input_transcription),
        ("outputTranscription", &response.output_transcription),
    ];
    for (key, transcription) in transcriptions {
        if let Some(t) = transcription {
            content.insert(key.into(), serde_json::to_value(t).unwrap_or_default());
        }
    }
    let flags = [
        ("generationComplete", response.generation_complete),
        ("turnComplete", response.turn_complete),
        ("interrupted", response.interrupted),
    ];
    for (key, set) in flags {
        if set {
            content.insert(key.into(), Value::Bool(true));
        }
    }
    if !content.is_empty() {
        message.insert("serverContent".into(), Value::Object(content));
    }
    if let Some(usage) = &response.usage_metadata {
        message.insert("usageMetadata".into(), usage_metadata(usage, api));
    }
    if !response.tool_calls.is_empty() {
        let calls: Vec<Value> = response
            .tool_calls
            .iter()
            .map(|call| {
                json!({
                    "id": ids.issue(call.id.as_deref()),
                    "name": call.name,
                    "args": call.args.clone().unwrap_or_else(|| json!({})),
                })
            })
            .collect();
        message.insert("toolCall".into(), json!({ "functionCalls": calls }));
    }
    if !response.tool_call_cancellations.is_empty() {
        let cancelled: Vec<String> = response
            .tool_call_cancellations
            .iter()
            .map(|id| ids.wire(id))
            .collect();
        message.insert("toolCallCancellation".into(), json!({ "ids": cancelled }));
    }
    if let Some(update) = &response.session_resumption_update {
        message.insert(
            "sessionResumptionUpdate".into(),
            serde_json::to_value(update).unwrap_or_default(),
        );
    }
    if let Some(go_away) = &response.go_away {
        let time_left = go_away.time_left.as_ref().map(|t| json!({ "timeLeft": t }));
        message.insert("goAway".into(), time_left.unwrap_or_else(|| json!({})));
    }
    (!message.is_empty()).then_some(Value::Object(message))
}

/// A model turn part as Gemini writes it: audio in standard base64, text, the thought flag.
fn part(part: &Part) -> Option<Value> {
    let mut out = Map::new();
    if let Some(text) = &part.text {
        out.insert("text".into(), json!(text));
    }
    if let Some(blob) = &part.inline_data {
        out.insert(
            "inlineData".into(),
            json!({ "mimeType": blob.mime_type, "data": STANDARD.encode(&blob.data) }),
        );
    }
    if part.thought == Some(true) {
        out.insert("thought".into(), Value::Bool(true));
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// Usage with the API's names: ADK's `candidates*` are `response*` on the Developer API.
fn usage_metadata(usage: &UsageMetadata, api: Api) -> Value {
    let (count, details) = match api {
        Api::Developer => ("responseTokenCount", "responseTokensDetails"),
        Api::Vertex => ("candidatesTokenCount", "candidatesTokensDetails"),
    };
    let fields = [
        ("promptTokenCount", json!(usage.prompt_token_count)),
        (count, json!(usage.candidates_token_count)),
        ("totalTokenCount", json!(usage.total_token_count)),
        ("promptTokensDetails", json!(usage.prompt_tokens_details)),
        (details, json!(usage.candidates_tokens_details)),
    ];
    Value::Object(
        fields
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

/// Server JSON as Gemini frames it: pretty-printed with a 2-space indent and a trailing newline.
pub fn encode(message: &Value) -> String {
    let mut text = serde_json::to_string_pretty(message).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    text
}
