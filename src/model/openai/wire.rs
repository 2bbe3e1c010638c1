//! The OpenAI Realtime wire format (GA event names), client side: `session.update` built from a
//! connect config, client events from `LiveInput`s, and server events turned into `LlmResponse`s
//! by a small per-connection state machine (responses, playing audio, transcripts).

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use crate::audio::resample::Resampler;
use crate::event::{
    Blob, Content, FunctionCall, FunctionResponse, ModalityTokenCount, Scheduling, Transcription,
    UsageMetadata,
};
use crate::lock::Recover;
use crate::model::{
    ActivityHandling, EndSensitivity, LiveConnectConfig, LiveInput, LlmResponse, Modality,
    ModelError, SpeechConfig, StartSensitivity,
};

/// The only PCM rate OpenAI Realtime takes and gives.
pub const RATE: u32 = 24_000;
/// The mime type of the model's audio, as Gemini's backend labels it too.
pub const OUTPUT_MIME: &str = "audio/pcm;rate=24000";
/// The transcription model asked for when the user's speech should be transcribed.
pub const TRANSCRIPTION_MODEL: &str = "gpt-4o-mini-transcribe";
/// Voices OpenAI Realtime knows; other names (Gemini's) are not sent.
pub const VOICES: &[&str] = &[
    "alloy", "ash", "ballad", "cedar", "coral", "echo", "marin", "sage", "shimmer", "verse",
];
/// Most function calls one response may hold (more are dropped, with a warning).
const MAX_CALLS: usize = 64;
/// Longest transcript kept while waiting for its `completed` event.
const MAX_TRANSCRIPT_BYTES: usize = 64 * 1024;

/// Which automatic turn detection to ask for when the agent leaves detection on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Vad {
    /// Silence-based detection (`server_vad`).
    #[default]
    Server,
    /// Model-based end-of-turn detection (`semantic_vad`).
    Semantic,
}

/// True when the agent turned automatic detection off: activity signals delimit the turns.
pub fn manual_activity(config: &LiveConnectConfig) -> bool {
    config
        .realtime_input_config
        .as_ref()
        .is_some_and(|r| r.automatic_detection_disabled())
}

/// The `session.update` event for a connect config.
pub fn session_update(config: &LiveConnectConfig, vad: Vad) -> Value {
    let mut session = Map::new();
    session.insert("type".into(), json!("realtime"));
    if let Some(instructions) = config
        .system_instruction
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        session.insert("instructions".into(), json!(instructions));
    }
    let modality = match config.modality() {
        Modality::Audio => "audio",
        Modality::Text => "text",
    };
    session.insert("output_modalities".into(), json!([modality]));
    let format = json!({ "type": "audio/pcm", "rate": RATE });
    let mut input = Map::new();
    input.insert("format".into(), format.clone());
    input.insert(
        "transcription".into(),
        if config.input_audio_transcription {
            json!({ "model": TRANSCRIPTION_MODEL })
        } else {
            Value::Null
        },
    );
    input.insert("turn_detection".into(), turn_detection(config, vad));
    let mut output = Map::new();
    output.insert("format".into(), format);
    if let Some(voice) = config.speech_config.as_ref().and_then(voice_name) {
        output.insert("voice".into(), json!(voice));
    }
    session.insert(
        "audio".into(),
        json!({ "input": Value::Object(input), "output": Value::Object(output) }),
    );
    if !config.tools.is_empty() {
        let tools: Vec<Value> = config
            .tools
            .iter()
            .map(|t| {
                let parameters = crate::model::schema::for_backend(
                    t.parameters_json_schema.as_deref(),
                    crate::model::schema::Backend::OpenAi,
                );
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": parameters,
                })
            })
            .collect();
        session.insert("tools".into(), Value::Array(tools));
        session.insert("tool_choice".into(), json!("auto"));
    }
    json!({ "type": "session.update", "session": session })
}

/// `turn_detection`: `null` for manual activity, else server or semantic VAD tuned from the
/// agent's detection settings.
fn turn_detection(config: &LiveConnectConfig, vad: Vad) -> Value {
    if manual_activity(config) {
        return Value::Null;
    }
    let realtime = config.realtime_input_config.as_ref();
    let detection = realtime.and_then(|r| r.automatic_activity_detection.as_ref());
    let interrupts = realtime
        .and_then(|r| r.activity_handling)
        .is_none_or(|h| h != ActivityHandling::NoInterruption);
    let mut out = Map::new();
    match vad {
        Vad::Server => {
            out.insert("type".into(), json!("server_vad"));
            // A high start sensitivity means a lower energy threshold.
            let threshold = match detection.and_then(|d| d.start_of_speech_sensitivity) {
                Some(StartSensitivity::High) => Some(0.3),
                Some(StartSensitivity::Low) => Some(0.7),
                _ => None,
            };
            if let Some(threshold) = threshold {
                out.insert("threshold".into(), json!(threshold));
            }
            if let Some(ms) = detection.and_then(|d| d.prefix_padding_ms) {
                out.insert("prefix_padding_ms".into(), json!(ms));
            }
            if let Some(ms) = detection.and_then(|d| d.silence_duration_ms) {
                out.insert("silence_duration_ms".into(), json!(ms));
            }
        }
        Vad::Semantic => {
            out.insert("type".into(), json!("semantic_vad"));
            // A high end sensitivity ends turns sooner: an eager detector.
            let eagerness = match detection.and_then(|d| d.end_of_speech_sensitivity) {
                Some(EndSensitivity::High) => "high",
                Some(EndSensitivity::Low) => "low",
                _ => "auto",
            };
            out.insert("eagerness".into(), json!(eagerness));
        }
    }
    out.insert("create_response".into(), json!(true));
    out.insert("interrupt_response".into(), json!(interrupts));
    Value::Object(out)
}

/// The speech config's voice, if OpenAI has a voice of that name.
fn voice_name(speech: &SpeechConfig) -> Option<String> {
    let name = speech.voice_name.as_deref()?.to_ascii_lowercase();
    if VOICES.contains(&name.as_str()) {
        Some(name)
    } else {
        tracing::debug!(
            voice = name,
            "not an OpenAI voice; the default voice is used"
        );
        None
    }
}

/// The conversation to seed a new session with, one `conversation.item.create` per message (text
/// only: assistant audio cannot be seeded), then `response.create` if the user spoke last.
pub fn history_events(config: &LiveConnectConfig) -> Vec<Value> {
    let mut events = Vec::new();
    for content in &config.history {
        let assistant = content.role.as_deref() == Some("model");
        let text = content.joined_text();
        if !text.is_empty() {
            let (role, kind) = if assistant {
                ("assistant", "output_text")
            } else {
                ("user", "input_text")
            };
            events.push(json!({
                "type": "conversation.item.create",
                "item": { "type": "message", "role": role, "content": [{ "type": kind, "text": text }] },
            }));
        }
        for part in &content.parts {
            if let Some(call) = &part.function_call {
                let arguments = call.args.clone().unwrap_or_else(|| json!({})).to_string();
                events.push(json!({
                    "type": "conversation.item.create",
                    "item": {
                        "type": "function_call",
                        "call_id": call.id.clone().unwrap_or_default(),
                        "name": call.name,
                        "arguments": arguments,
                    },
                }));
            }
            if let Some(response) = &part.function_response {
                events.push(function_call_output(response));
            }
        }
    }
    let user_last = config
        .history
        .last()
        .is_some_and(|c| c.role.as_deref() == Some("user") && !c.joined_text().is_empty());
    if user_last {
        events.push(response_create());
    }
    events
}

fn response_create() -> Value {
    json!({ "type": "response.create" })
}

fn function_call_output(response: &FunctionResponse) -> Value {
    json!({
        "type": "conversation.item.create",
        "item": {
            "type": "function_call_output",
            "call_id": response.id.clone().unwrap_or_default(),
            "output": response.response.to_string(),
        },
    })
}

/// What a non-blocking call is answered with at once, so the model goes on (OpenAI takes one
/// output per call: the result comes later as a message, [`result_message`]).
pub fn running_output(call_id: &str) -> Value {
    let output = json!({
        "status": "running",
        "note": "The function runs in the background; its result follows in a system message.",
    });
    json!({
        "type": "conversation.item.create",
        "item": { "type": "function_call_output", "call_id": call_id, "output": output.to_string() },
    })
}

/// What a blocking call the user's speech cancelled is answered with, so the conversation
/// holds no call without an output.
pub fn cancelled_output(call_id: &str) -> Value {
    let output = json!({ "status": "cancelled", "reason": "the user spoke before it finished" });
    json!({
        "type": "conversation.item.create",
        "item": { "type": "function_call_output", "call_id": call_id, "output": output.to_string() },
    })
}

/// A non-blocking call's result, as a system message naming the call.
pub fn result_message(response: &FunctionResponse) -> Value {
    let text = format!(
        "The background function call {} (call_id {}) has finished. Its result: {}",
        response.name,
        response.id.as_deref().unwrap_or("unknown"),
        response.response
    );
    json!({
        "type": "conversation.item.create",
        "item": { "type": "message", "role": "system", "content": [{ "type": "input_text", "text": text }] },
    })
}

/// What the reader and the writer of one connection share to give OpenAI Realtime the
/// non-blocking tools it does not have (docs/MODELS.md, "Non-blocking tools"): whether a
/// response is under way, a `response.create` held until it ends, and the blocking calls the
/// model waits for (cancelled when the user speaks over them, as Gemini cancels its own).
#[derive(Debug, Clone, Default)]
pub struct ToolExchange(Arc<Mutex<Exchange>>);

#[derive(Debug, Default)]
struct Exchange {
    responding: bool,
    /// A `response.create` waits for the response under way to end.
    create_held: bool,
    /// Responses cancelled by the writer whose `response.done` has not come yet.
    cancelled: u32,
    /// Blocking calls handed on and not answered.
    awaiting: Vec<String>,
}

impl ToolExchange {
    fn lock(&self) -> MutexGuard<'_, Exchange> {
        self.0.lock_or_recover()
    }

    /// A response was asked for (`response.create` sent) or began (`response.created`).
    fn started(&self) {
        self.lock().responding = true;
    }

    /// A response is wanted: true when `response.create` may go now (then it is counted as
    /// under way); otherwise it goes when the response under way ends.
    fn want_response(&self) -> bool {
        let mut state = self.lock();
        if state.responding {
            state.create_held = true;
            return false;
        }
        state.responding = true;
        true
    }

    /// The response under way is to be cancelled and another made: true when there is one.
    fn interrupt(&self) -> bool {
        let mut state = self.lock();
        if !state.responding {
            state.responding = true;
            return false;
        }
        state.cancelled += 1;
        state.create_held = false;
        true
    }

    /// `response.done`: true when a held `response.create` must go now.
    fn done(&self) -> bool {
        let mut state = self.lock();
        if state.cancelled > 0 {
            // The end of a response the writer cancelled: the one it asked for is under way.
            state.cancelled -= 1;
            return false;
        }
        state.responding = std::mem::take(&mut state.create_held);
        state.responding
    }

    fn awaiting(&self, ids: impl IntoIterator<Item = String>) {
        let mut state = self.lock();
        state.awaiting.extend(ids);
        let over = state.awaiting.len().saturating_sub(MAX_CALLS);
        state.awaiting.drain(..over);
    }

    fn answered(&self, id: Option<&str>) {
        if let Some(id) = id {
            self.lock().awaiting.retain(|a| a != id);
        }
    }

    fn take_awaiting(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().awaiting)
    }
}

/// `conversation.item.truncate`: the assistant's audio item played only up to `audio_end_ms`.
pub fn truncate(item_id: &str, audio_end_ms: u64) -> Value {
    json!({
        "type": "conversation.item.truncate",
        "item_id": item_id,
        "content_index": 0,
        "audio_end_ms": audio_end_ms,
    })
}

/// When the gateway read the client audio most recently sent upstream: the writer sets it, the
/// reader stamps the answer to the utterance that audio ended with it (first-answer latency).
#[derive(Debug, Clone, Default)]
pub struct LastAudio(Arc<Mutex<Option<std::time::Instant>>>);

impl LastAudio {
    fn set(&self, at: Option<std::time::Instant>) {
        if at.is_some() {
            *self.0.lock_or_recover() = at;
        }
    }

    fn get(&self) -> Option<std::time::Instant> {
        *self.0.lock_or_recover()
    }
}

/// Turns `LiveInput`s into client events: resamples audio to 24 kHz (keeping the resampler's
/// state across chunks) and asks for answers where Gemini would give them unasked.
#[derive(Debug)]
pub struct Encoder {
    manual: bool,
    upsampler: Option<Resampler>,
    last_audio: LastAudio,
    tools: ToolExchange,
}

impl Encoder {
    /// An encoder for a session whose turns are delimited by activity signals when `manual`.
    pub fn new(manual: bool, last_audio: LastAudio) -> Self {
        Encoder {
            manual,
            upsampler: None,
            last_audio,
            tools: ToolExchange::default(),
        }
    }

    /// Shares `tools` with the connection's decoder.
    pub fn with_tools(mut self, tools: ToolExchange) -> Self {
        self.tools = tools;
        self
    }

    /// Tool results: a blocking call's as its output, then `response.create` (held while a
    /// response is under way); a non-blocking call's as a system message, then, as its
    /// scheduling says, `response.cancel` of the response under way and `response.create`
    /// (`INTERRUPT`), `response.create` once none is under way (`WHEN_IDLE`), or nothing
    /// (`SILENT`).
    fn tool_responses(&mut self, responses: &[FunctionResponse], out: &mut Vec<String>) {
        let (mut create, mut interrupt) = (false, false);
        for response in responses {
            match response.scheduling {
                None => {
                    self.tools.answered(response.id.as_deref());
                    out.push(function_call_output(response).to_string());
                    create = true;
                }
                Some(scheduling) => {
                    out.push(result_message(response).to_string());
                    interrupt |= scheduling == Scheduling::Interrupt;
                    create |= scheduling != Scheduling::Silent;
                }
            }
        }
        if interrupt {
            if self.tools.interrupt() {
                out.push(json!({ "type": "response.cancel" }).to_string());
            }
            out.push(response_create().to_string());
        } else if create && self.tools.want_response() {
            out.push(response_create().to_string());
        }
    }

    /// The client events for one input, as JSON texts, in order.
    pub fn encode(&mut self, input: LiveInput) -> Vec<String> {
        let mut out = Vec::new();
        match input {
            LiveInput::Realtime(blob) if blob.is_pcm() => {
                self.last_audio.set(blob.received);
                let rate = blob.sample_rate().unwrap_or(16_000);
                if let Some(pcm) = self.resample(rate, &blob.data) {
                    out.push(append(&pcm));
                }
            }
            LiveInput::Realtime(blob) => {
                tracing::debug!(mime_type = %blob.mime_type, "OpenAI Realtime takes only PCM here; media dropped");
            }
            LiveInput::Content {
                content,
                turn_complete,
            } => {
                let text = content.joined_text();
                if !text.is_empty() {
                    out.push(
                        json!({
                            "type": "conversation.item.create",
                            "item": {
                                "type": "message",
                                "role": "user",
                                "content": [{ "type": "input_text", "text": text }],
                            },
                        })
                        .to_string(),
                    );
                }
                if turn_complete {
                    self.tools.started();
                    out.push(response_create().to_string());
                }
            }
            LiveInput::ToolResponse(responses) => self.tool_responses(&responses, &mut out),
            LiveInput::ActivityStart if self.manual => {
                self.upsampler = None;
                out.push(json!({ "type": "input_audio_buffer.clear" }).to_string());
            }
            LiveInput::ActivityEnd if self.manual => {
                out.extend(self.flush());
                out.push(json!({ "type": "input_audio_buffer.commit" }).to_string());
                self.tools.started();
                out.push(response_create().to_string());
            }
            LiveInput::AudioStreamEnd => out.extend(self.flush()),
            LiveInput::ActivityStart | LiveInput::ActivityEnd => {
                tracing::debug!("activity signal ignored: the server detects turns itself");
            }
        }
        out
    }

    /// PCM16 at `rate` as PCM16 at 24 kHz (borrowed when it already is); `None` while the
    /// resampler is still filling a chunk.
    fn resample<'p>(&mut self, rate: u32, pcm: &'p [u8]) -> Option<Cow<'p, [u8]>> {
        if rate == RATE {
            self.upsampler = None;
            return (!pcm.is_empty()).then_some(Cow::Borrowed(pcm));
        }
        if self.upsampler.as_ref().is_none_or(|u| u.from() != rate) {
            self.upsampler = Resampler::new(rate, RATE);
            if self.upsampler.is_none() {
                tracing::warn!(rate, "unusable input sample rate; audio dropped");
            }
        }
        let out = self.upsampler.as_mut()?.push(pcm);
        (!out.is_empty()).then_some(Cow::Owned(out))
    }

    /// The audio the resampler still holds, padded out to a chunk.
    fn flush(&mut self) -> Option<String> {
        let out = self.upsampler.as_mut()?.flush();
        (!out.is_empty()).then(|| append(&out))
    }
}

/// `input_audio_buffer.append`, written straight into its text (no base64 escaping needed), sized
/// exactly: a `String` whose length is its capacity becomes the frame's bytes without a second
/// allocation for their shared header.
fn append(pcm: &[u8]) -> String {
    const HEAD: &str = "{\"type\":\"input_audio_buffer.append\",\"audio\":\"";
    const TAIL: &str = "\"}";
    let data_len = base64::encoded_len(pcm.len(), true).unwrap_or(0);
    let mut text = String::with_capacity(HEAD.len() + data_len + TAIL.len());
    text.push_str(HEAD);
    STANDARD.encode_string(pcm, &mut text);
    text.push_str(TAIL);
    text
}

/// What one server event asks of the connection.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The session was created or updated (setup progress).
    Session,
    /// A response for the flow.
    Respond(Box<LlmResponse>),
    /// A client event to send upstream (the truncate after a barge-in); dropped if the writer
    /// is busy.
    Send(Value),
    /// A client event the gateway's emulation of non-blocking tools sends; never dropped.
    Emulate(Value),
}

/// A server event's fields of interest. `delta` is borrowed from the frame when it has no JSON
/// escapes, as base64 audio never has: an audio delta is decoded where it lies, not copied first.
#[derive(Debug, Default, Deserialize)]
struct RawEvent<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    delta: Option<Cow<'a, str>>,
    transcript: Option<String>,
    item_id: Option<String>,
    call_id: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
    response: Option<ResponseObject>,
    error: Option<ErrorObject>,
}

/// OpenAI's `error` event, as the response's error.
fn error_response(event: RawEvent, response: &mut LlmResponse) {
    let error = event.error.unwrap_or_default();
    tracing::warn!(
        code = error.code,
        kind = error.kind,
        "OpenAI reported an error"
    );
    response.error_code = Some(error.adk_code().to_owned());
    response.error_message = Some(error.describe());
}

#[derive(Debug, Default, Deserialize)]
struct ResponseObject {
    id: Option<String>,
    status: Option<String>,
    status_details: Option<StatusDetails>,
    usage: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct StatusDetails {
    reason: Option<String>,
    error: Option<ErrorObject>,
}

/// An OpenAI error object.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct ErrorObject {
    /// `invalid_request_error`, `server_error`, …
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// A finer code, e.g. `session_expired`.
    pub code: Option<String>,
    /// What went wrong.
    pub message: Option<String>,
}

impl ErrorObject {
    /// The ADK-style code for this error (a small fixed set, usable as a metric label).
    pub fn adk_code(&self) -> &'static str {
        match (self.code.as_deref(), self.kind.as_deref()) {
            (Some("session_expired"), _) => "DEADLINE_EXCEEDED",
            (Some("rate_limit_exceeded"), _) | (_, Some("rate_limit_error")) => {
                "RESOURCE_EXHAUSTED"
            }
            (_, Some("invalid_request_error")) => "INVALID_ARGUMENT",
            (_, Some("authentication_error")) => "UNAUTHENTICATED",
            (_, Some("permission_error")) => "PERMISSION_DENIED",
            (_, Some("server_error")) => "INTERNAL",
            _ => "UNKNOWN",
        }
    }

    /// `OpenAI error <code>: <message>`.
    pub fn describe(&self) -> String {
        let code = self
            .code
            .as_deref()
            .or(self.kind.as_deref())
            .unwrap_or("error");
        let message = self.message.as_deref().unwrap_or("no message");
        format!("OpenAI {code}: {message}")
    }
}

/// The assistant audio item the client is hearing: how much of it was handed on, and when.
#[derive(Debug, Clone)]
struct Playing {
    item_id: String,
    samples: u64,
    first_at: Instant,
}

impl Playing {
    fn delivered(&self) -> Duration {
        Duration::from_micros(self.samples * 1_000_000 / u64::from(RATE))
    }
}

/// The response being generated.
#[derive(Debug, Default)]
struct Answer {
    /// It produced audio.
    audio: bool,
    /// Function calls, held until `response.done` (as ADK holds Gemini 2.5's).
    calls: Vec<FunctionCall>,
    /// `interrupted` was already reported for it.
    interrupted: bool,
    /// Function calls dropped past `MAX_CALLS`.
    dropped_calls: u64,
}

/// Turns server events into actions, keeping what spans events.
#[derive(Debug)]
pub struct Decoder {
    model: String,
    transcribe_output: bool,
    lead: Duration,
    answer: Option<Answer>,
    playing: Option<Playing>,
    /// The user item being transcribed and the text its deltas gave so far.
    heard: Option<(String, String)>,
    last_audio: LastAudio,
    /// When the audio that ended the user's last utterance was read, until its answer starts.
    prompted_by: Option<std::time::Instant>,
    /// What the listener heard of the answer, where the transport reports it.
    playout: Option<crate::model::Playout>,
    /// The tools declared non-blocking, by name.
    non_blocking: HashSet<String>,
    /// User speech cancels the blocking calls the model waits for (barge-in is on).
    speech_cancels: bool,
    tools: ToolExchange,
}

impl Decoder {
    /// A decoder for `model`; `lead` is how far the gateway lets audio run ahead of playback.
    pub fn new(
        model: &str,
        transcribe_output: bool,
        lead: Duration,
        last_audio: LastAudio,
    ) -> Self {
        Decoder {
            model: model.to_owned(),
            transcribe_output,
            lead,
            answer: None,
            playing: None,
            heard: None,
            last_audio,
            prompted_by: None,
            playout: None,
            non_blocking: HashSet::new(),
            speech_cancels: true,
            tools: ToolExchange::default(),
        }
    }

    /// The connection's tools: those of `config` that are non-blocking are emulated, with
    /// `tools` shared with the encoder.
    pub fn with_tools(mut self, config: &LiveConnectConfig, tools: ToolExchange) -> Self {
        self.non_blocking = config
            .tools
            .iter()
            .filter(|t| t.is_non_blocking())
            .map(|t| t.name.clone())
            .collect();
        self.speech_cancels = config
            .realtime_input_config
            .as_ref()
            .is_none_or(|r| r.activity_interrupts());
        self.tools = tools;
        self
    }

    /// Truncates an interrupted answer where `playout` says the listener stopped hearing it,
    /// not where the gateway's pacing says it was sent.
    pub fn with_playout(mut self, playout: Option<crate::model::Playout>) -> Self {
        self.playout = playout;
        self
    }

    fn response(&self) -> LlmResponse {
        LlmResponse {
            model_version: Some(self.model.clone()),
            ..LlmResponse::default()
        }
    }

    fn answer(&mut self) -> &mut Answer {
        self.answer.get_or_insert_with(Answer::default)
    }

    /// What one server event (its JSON) means; `now` is when it arrived.
    pub fn decode(&mut self, json: &[u8], now: Instant) -> Result<Vec<Action>, ModelError> {
        let mut event: RawEvent = serde_json::from_slice(json)
            .map_err(|e| ModelError::Protocol(format!("unreadable OpenAI event: {e}")))?;
        // Taken out so that the steps below can have the event; a `Cow` leaves nothing to copy.
        let kind = std::mem::take(&mut event.kind);
        let mut response = self.response();
        match kind.as_ref() {
            "session.created" | "session.updated" => return Ok(vec![Action::Session]),
            "response.created" => {
                self.tools.started();
                self.answer = Some(Answer::default());
            }
            "response.output_audio.delta" | "response.audio.delta" => {
                self.audio_delta(event, now, &mut response)?;
            }
            "response.output_audio_transcript.delta" | "response.audio_transcript.delta" => {
                self.output_transcript_delta(event, &mut response);
            }
            "response.output_audio_transcript.done" | "response.audio_transcript.done" => {
                self.output_transcript_done(&mut response);
            }
            "response.output_text.delta" | "response.text.delta" => {
                self.text_delta(event, &mut response);
            }
            "conversation.item.input_audio_transcription.delta" => {
                self.input_transcript_delta(event, &mut response);
            }
            "conversation.item.input_audio_transcription.completed" => {
                self.input_transcript_completed(event, &mut response);
            }
            "input_audio_buffer.speech_started" => return Ok(self.barge_in(now)),
            "input_audio_buffer.speech_stopped" | "input_audio_buffer.committed" => {
                self.prompted_by = self.prompted_by.or_else(|| self.last_audio.get());
                return Ok(Vec::new());
            }
            "response.function_call_arguments.done" => {
                self.function_call(event);
                return Ok(Vec::new());
            }
            "response.done" => return Ok(self.response_done(event.response.unwrap_or_default())),
            "error" => error_response(event, &mut response),
            _ => return Ok(Vec::new()),
        }
        if response != self.response() {
            return Ok(vec![Action::Respond(Box::new(response))]);
        }
        Ok(Vec::new())
    }

    /// A piece of the answer's audio: counted for the playout clock, the first stamped with
    /// when its prompt was read.
    fn audio_delta(
        &mut self,
        event: RawEvent,
        now: Instant,
        response: &mut LlmResponse,
    ) -> Result<(), ModelError> {
        let data = STANDARD
            .decode(event.delta.unwrap_or_default().as_bytes())
            .map_err(|e| ModelError::Protocol(format!("audio delta not base64: {e}")))?;
        if data.is_empty() {
            return Ok(());
        }
        let item_id = event.item_id.unwrap_or_default();
        if self.playing.as_ref().is_none_or(|p| p.item_id != item_id) {
            self.playing = Some(Playing {
                item_id,
                samples: 0,
                first_at: now,
            });
        }
        if let Some(playing) = &mut self.playing {
            playing.samples += data.len() as u64 / 2;
        }
        self.answer().audio = true;
        let mut content = Content::blob("model", Blob::new(Bytes::from(data), OUTPUT_MIME));
        // The answer's first audio carries when its prompt was read, for the writer's clock.
        if let Some(part) = content.parts.first_mut() {
            part.prompted_by = self.prompted_by.take();
        }
        response.content = Some(content);
        Ok(())
    }

    /// A piece of the answer's transcript.
    fn output_transcript_delta(&mut self, event: RawEvent, response: &mut LlmResponse) {
        let delta = event.delta.unwrap_or_default().into_owned();
        if !self.transcribe_output || delta.is_empty() {
            return;
        }
        response.output_transcription = Some(Transcription {
            text: Some(delta),
            finished: None,
        });
    }

    /// The answer's transcript is over.
    fn output_transcript_done(&mut self, response: &mut LlmResponse) {
        if !self.transcribe_output {
            return;
        }
        // The deltas carried the text; this only closes it.
        response.output_transcription = Some(Transcription {
            text: None,
            finished: Some(true),
        });
    }

    /// A piece of a text answer, the first stamped with when its prompt was read.
    fn text_delta(&mut self, event: RawEvent, response: &mut LlmResponse) {
        let delta = event.delta.unwrap_or_default().into_owned();
        if delta.is_empty() {
            return;
        }
        let mut content = Content::text("model", delta);
        if let Some(part) = content.parts.first_mut() {
            part.prompted_by = self.prompted_by.take();
        }
        response.content = Some(content);
    }

    /// A piece of what the user said, kept (bounded) to tell the completed transcript's rest.
    fn input_transcript_delta(&mut self, event: RawEvent, response: &mut LlmResponse) {
        let delta = event.delta.unwrap_or_default().into_owned();
        let item_id = event.item_id.unwrap_or_default();
        let heard = match &mut self.heard {
            Some((id, text)) if *id == item_id => text,
            _ => &mut self.heard.insert((item_id, String::new())).1,
        };
        if delta.is_empty() || heard.len() + delta.len() > MAX_TRANSCRIPT_BYTES {
            return;
        }
        heard.push_str(&delta);
        response.input_transcription = Some(Transcription {
            text: Some(delta),
            finished: None,
        });
    }

    /// What the user said, complete: only the part the deltas did not carry.
    fn input_transcript_completed(&mut self, event: RawEvent, response: &mut LlmResponse) {
        let transcript = event.transcript.unwrap_or_default();
        let item_id = event.item_id.unwrap_or_default();
        let so_far = match self.heard.take() {
            Some((id, text)) if id == item_id => text,
            _ => String::new(),
        };
        // Only what the deltas did not already say; the flow joins the fragments.
        let rest = transcript
            .strip_prefix(so_far.as_str())
            .unwrap_or_default()
            .to_owned();
        response.input_transcription = Some(Transcription {
            text: (!rest.is_empty()).then_some(rest),
            finished: Some(true),
        });
    }

    /// A function call, held (bounded, once per id) until the response is done.
    fn function_call(&mut self, event: RawEvent) {
        let arguments = event.arguments.unwrap_or_default();
        let args = match serde_json::from_str::<Value>(&arguments) {
            Ok(Value::Object(map)) => Value::Object(map),
            _ if arguments.trim().is_empty() => json!({}),
            _ => {
                tracing::warn!(
                    name = event.name,
                    "function call arguments are not a JSON object"
                );
                json!({})
            }
        };
        let call = FunctionCall {
            id: event.call_id,
            args: Some(args),
            name: event.name.unwrap_or_default(),
        };
        let answer = self.answer();
        if answer.calls.len() >= MAX_CALLS {
            answer.dropped_calls += 1;
            // A line at 1, 2, 4, 8… drops: a flood of calls is no flood of logs.
            if answer.dropped_calls.is_power_of_two() {
                tracing::warn!(
                    dropped = answer.dropped_calls,
                    "too many function calls in one response; the rest are dropped"
                );
            }
        } else if !answer.calls.iter().any(|c| c.id == call.id) {
            answer.calls.push(call);
        }
    }

    /// The user started speaking: if an answer is under way or still playing, it is interrupted,
    /// and the model is told how much of its audio the client was sent.
    fn barge_in(&mut self, now: Instant) -> Vec<Action> {
        let mut actions = self.cancel_awaited_calls();
        let generating = self.answer.as_ref().is_some_and(|a| !a.interrupted);
        // The answer's own audio counts while it is being generated, even if it came slower
        // than it plays; earlier audio only while the clock says it is still playing.
        let speaking = generating && self.answer.as_ref().is_some_and(|a| a.audio);
        let playing = self
            .playing
            .take()
            .filter(|p| speaking || p.first_at + p.delivered() > now);
        if !generating && playing.is_none() {
            return actions;
        }
        if let Some(playing) = playing {
            // The gateway's writer sends audio at most `lead` ahead of real-time playback from
            // the item's first chunk: that, or all of it if less arrived, is what the client got;
            // a transport that hears back from the listener says exactly.
            let sent = match self.playout.as_ref().and_then(|p| p.heard_so_far()) {
                Some(heard) => heard,
                None => now.saturating_duration_since(playing.first_at) + self.lead,
            };
            let end = sent.min(playing.delivered());
            actions.push(Action::Send(truncate(
                &playing.item_id,
                end.as_millis() as u64,
            )));
        }
        if let Some(answer) = &mut self.answer {
            answer.interrupted = true;
        }
        actions.push(Action::Respond(Box::new(LlmResponse {
            interrupted: true,
            ..self.response()
        })));
        actions
    }

    /// The user spoke over blocking calls the model waits for: they are void, as Gemini voids
    /// them (`toolCallCancellation` for the flow, a "cancelled" output for the conversation).
    fn cancel_awaited_calls(&mut self) -> Vec<Action> {
        if !self.speech_cancels {
            return Vec::new();
        }
        let ids = self.tools.take_awaiting();
        if ids.is_empty() {
            return Vec::new();
        }
        tracing::debug!(
            calls = ids.len(),
            "user speech cancels the calls the model waits for"
        );
        let mut actions: Vec<Action> = ids
            .iter()
            .map(|id| Action::Emulate(cancelled_output(id)))
            .collect();
        actions.push(Action::Respond(Box::new(LlmResponse {
            tool_call_cancellations: ids,
            ..self.response()
        })));
        actions
    }

    /// What follows a response's calls upstream: each non-blocking one is answered "running"
    /// at once, and when every call is, the model is asked to go on (as it would on Gemini);
    /// the blocking ones are awaited. `create` says a held `response.create` is due anyway.
    fn emulate_calls(&mut self, calls: &[FunctionCall], create: bool) -> Vec<Action> {
        let mut actions = Vec::new();
        let mut blocking = Vec::new();
        for call in calls {
            let id = call.id.clone().unwrap_or_default();
            if self.non_blocking.contains(&call.name) {
                actions.push(Action::Emulate(running_output(&id)));
            } else {
                blocking.push(id);
            }
        }
        let goes_on = !calls.is_empty() && blocking.is_empty();
        self.tools.awaiting(blocking);
        if goes_on || create {
            self.tools.started();
            actions.push(Action::Emulate(response_create()));
        }
        actions
    }

    /// `response.done`: usage, the held function calls, and the end of the turn (unless the
    /// model goes on after the calls' results, as Gemini's does).
    fn response_done(&mut self, done: ResponseObject) -> Vec<Action> {
        let create = self.tools.done();
        let answer = self.answer.take().unwrap_or_default();
        let mut response = self.response();
        response.usage_metadata = done.usage.as_ref().map(usage_metadata);
        let details = done.status_details.unwrap_or_default();
        match done.status.as_deref().unwrap_or("completed") {
            "cancelled" => {
                response.turn_complete = true;
                response.interrupted = !answer.interrupted;
            }
            "failed" => {
                let error = details.error.unwrap_or_else(|| ErrorObject {
                    kind: Some("server_error".into()),
                    code: details.reason.clone(),
                    message: Some("the response failed".into()),
                });
                response.error_code = Some(error.adk_code().to_owned());
                response.error_message = Some(error.describe());
                response.turn_complete = true;
            }
            status => {
                if status == "incomplete" {
                    tracing::debug!(reason = details.reason, "OpenAI response incomplete");
                }
                response.turn_complete = answer.calls.is_empty();
                response.tool_calls = answer.calls;
            }
        }
        tracing::trace!(id = done.id, "response done");
        let then = self.emulate_calls(&response.tool_calls, create);
        let mut actions = vec![Action::Respond(Box::new(response))];
        actions.extend(then);
        actions
    }
}

/// OpenAI usage with ADK's names.
fn usage_metadata(usage: &Value) -> UsageMetadata {
    let count = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64);
    let details = |key: &str, modalities: &[(&str, &str)]| {
        let d = usage.get(key)?;
        let list: Vec<ModalityTokenCount> = modalities
            .iter()
            .filter_map(|(field, modality)| {
                Some(ModalityTokenCount {
                    modality: (*modality).to_owned(),
                    token_count: count(d, field)?,
                })
            })
            .collect();
        (!list.is_empty()).then_some(list)
    };
    UsageMetadata {
        candidates_token_count: count(usage, "output_tokens"),
        candidates_tokens_details: details(
            "output_token_details",
            &[("text_tokens", "TEXT"), ("audio_tokens", "AUDIO")],
        ),
        prompt_token_count: count(usage, "input_tokens"),
        prompt_tokens_details: details(
            "input_token_details",
            &[
                ("text_tokens", "TEXT"),
                ("audio_tokens", "AUDIO"),
                ("image_tokens", "IMAGE"),
            ],
        ),
        total_token_count: count(usage, "total_tokens"),
    }
}
