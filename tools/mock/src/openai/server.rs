//! The route and the per-connection task: one task per WebSocket reads client events, feeds the
//! sim, and writes the sim's responses as OpenAI Realtime server events until someone closes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::wire::{
    self, event, new_id, ApiError, ClientEvent, Item, Session, CLOSE_GOING_AWAY, CLOSE_INTERNAL,
};
use super::{Shared, Truncation};
use livegate::event::{Blob, Content, FunctionCall, FunctionResponse, UsageMetadata};
use livegate::model::sim::SimModel;
use livegate::model::{LiveInput, LiveModel, LlmResponse, Modality, ModelMessage};

/// Most bytes taken from a client socket per read (see mock-gemini).
const READ_BUFFER_BYTES: usize = 4 * 1024;
/// Largest client event accepted (OpenAI allows 15 MiB of audio per append).
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Longest a write to a client may take before the client counts as gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a close waits for the client's answering close frame.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// Assistant audio items remembered for truncation.
const MAX_AUDIO_ITEMS: usize = 64;
/// Items and tool calls a connection keeps at most before it refuses more.
const MAX_ITEMS: usize = 1024;
/// Samples per millisecond at 24 kHz.
const SAMPLES_PER_MS: u64 = 24;

/// What handling a client event came to: the outer error ends the connection, the inner one is
/// answered to the client as an `error` event and the session goes on.
type Handled = Result<Result<(), ApiError>, End>;

/// Every path goes to one handler, which checks it itself.
pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(upgrade).with_state(shared)
}

fn api_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body =
        json!({ "error": { "type": "invalid_request_error", "code": code, "message": message } });
    (status, Json(body)).into_response()
}

async fn upgrade(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let path = uri.path().trim_end_matches('/');
    if ![
        "/v1/realtime",
        "/realtime",
        "/openai/v1/realtime",
        "/openai/realtime",
    ]
    .contains(&path)
    {
        return StatusCode::NOT_FOUND.into_response();
    }
    let query = Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|Query(pairs)| pairs)
        .unwrap_or_default();
    let model = query
        .iter()
        .find(|(k, _)| k == "model" || k == "deployment")
        .map(|(_, v)| v.chars().take(128).collect::<String>())
        .filter(|m| !m.is_empty());
    let Some(model) = model else {
        return api_error(
            StatusCode::BAD_REQUEST,
            "missing_model",
            "Missing required parameter: 'model'.",
        );
    };
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let authorized = shared
        .config
        .api_key
        .as_deref()
        .is_none_or(|expected| credentials(&headers).iter().any(|k| k == expected));
    if !authorized {
        tracing::info!("mock-openai connection without a valid API key");
        return api_error(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "Incorrect API key provided.",
        );
    }
    let id = shared.next_connection.fetch_add(1, Ordering::Relaxed);
    let span = tracing::info_span!("mock_openai", connection = id, model);
    upgrade
        .protocols(["realtime"])
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(MAX_MESSAGE_BYTES)
        .on_failed_upgrade(|error| tracing::warn!(%error, "mock-openai upgrade failed"))
        .on_upgrade(move |socket| {
            let connections = shared.connections.clone();
            connections.track_future(serve(socket, shared, model).instrument(span))
        })
}

/// Every credential the request presents: `Authorization: Bearer …`, `api-key` (Azure), and the
/// browsers' `openai-insecure-api-key.…` subprotocol.
fn credentials(headers: &HeaderMap) -> Vec<String> {
    let values = |name: &str| {
        headers
            .get_all(name)
            .into_iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::trim)
            .collect::<Vec<_>>()
    };
    let mut found: Vec<String> = values(header::AUTHORIZATION.as_str())
        .into_iter()
        .filter_map(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_owned())
        })
        .collect();
    found.extend(values("api-key").into_iter().map(str::to_owned));
    for protocols in values(header::SEC_WEBSOCKET_PROTOCOL.as_str()) {
        found.extend(
            protocols
                .split(',')
                .filter_map(|p| p.trim().strip_prefix("openai-insecure-api-key."))
                .map(str::to_owned),
        );
    }
    found
}

/// How a connection ends.
enum End {
    /// Close it with this code and reason.
    Close(u16, &'static str),
    /// Drop it with no close frame (a fault switch).
    Drop,
    /// The client closed it or went away.
    ClientGone,
}

async fn serve(mut socket: WebSocket, shared: Arc<Shared>, model: String) {
    tracing::info!("mock-openai connection opened");
    let end = Connection::new(&shared, &model).run(&mut socket).await;
    match end {
        End::ClientGone => finish_handshake(&mut socket).await,
        End::Drop => {
            tracing::info!("mock-openai drops the connection mid-answer");
            drop(socket);
        }
        End::Close(code, reason) => {
            tracing::info!(code, reason, "mock-openai closing the connection");
            let frame = CloseFrame {
                code,
                reason: reason.into(),
            };
            let sent =
                tokio::time::timeout(WRITE_TIMEOUT, socket.send(Message::Close(Some(frame)))).await;
            if matches!(sent, Ok(Ok(()))) {
                finish_handshake(&mut socket).await;
            }
        }
    }
}

/// Reads on, for at most the close grace, until the client's close frame or the end of the stream.
async fn finish_handshake(socket: &mut WebSocket) {
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        while let Some(Ok(message)) = socket.recv().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
        }
    })
    .await;
}

/// The response being sent.
#[derive(Debug, Default)]
struct Answer {
    response_id: String,
    /// The assistant message item, once the answer has audio or text.
    item_id: Option<String>,
    text: String,
    transcript: String,
    samples: u64,
    output: Vec<Value>,
}

/// The state of one client connection.
struct Connection<'a> {
    shared: &'a Shared,
    session: Session,
    model: Option<livegate::model::InputSender>,
    responses: Option<mpsc::Receiver<ModelMessage>>,
    /// Items created since the last `response.create`.
    pending: Vec<Item>,
    /// Tool results waiting for `response.create`.
    outputs: Vec<FunctionResponse>,
    /// Calls handed out: wire id to the function's name and the sim's own id.
    calls: HashMap<String, (String, Option<String>)>,
    /// Calls given their output: OpenAI takes one output per call.
    answered: std::collections::HashSet<String>,
    /// Calls the client put in the conversation itself (`function_call` items, as a history is
    /// seeded): an output for one is context, as OpenAI takes it, not an answer for the sim.
    seeded_calls: std::collections::HashSet<String>,
    /// Audio bytes appended since the last commit or clear.
    buffered: usize,
    /// Manual mode: an activity was started in the sim.
    activity_open: bool,
    /// The user item whose `speech_started` went out (barge-in), awaiting its end.
    speaking: Option<String>,
    /// A committed user item awaiting the sim's transcript (and its answer).
    committed: Option<String>,
    last_item: Option<String>,
    answer: Option<Answer>,
    /// Usage the sim reported ahead of its turn's end.
    usage: Option<UsageMetadata>,
    /// The client cancelled the answer: the sim's output is dropped until its turn ends.
    cancelled: bool,
    audio_items: VecDeque<(String, u64)>,
    /// A commit's utterance is being answered: the next `response.create` needs no turn of its own.
    commit_answered: bool,
    /// Server events sent, the session events not counted.
    sent: u64,
    answers: u64,
}

impl<'a> Connection<'a> {
    fn new(shared: &'a Shared, model: &str) -> Self {
        Connection {
            shared,
            session: Session::new(model),
            model: None,
            responses: None,
            pending: Vec::new(),
            outputs: Vec::new(),
            calls: HashMap::new(),
            answered: std::collections::HashSet::new(),
            seeded_calls: std::collections::HashSet::new(),
            buffered: 0,
            activity_open: false,
            speaking: None,
            committed: None,
            last_item: None,
            answer: None,
            usage: None,
            cancelled: false,
            audio_items: VecDeque::new(),
            commit_answered: false,
            sent: 0,
            answers: 0,
        }
    }

    async fn run(&mut self, socket: &mut WebSocket) -> End {
        let created = event(
            "session.created",
            json!({ "session": self.session.to_json() }),
        );
        if let Err(end) = self.write(socket, &created).await {
            return end;
        }
        loop {
            let step = tokio::select! {
                () = self.shared.shutdown.cancelled() => Err(End::Close(CLOSE_GOING_AWAY, "server shutting down")),
                frame = socket.recv() => match frame {
                    Some(Ok(Message::Text(text))) => self.client_event(text.as_str(), socket).await,
                    Some(Ok(Message::Binary(data))) => match std::str::from_utf8(&data) {
                        Ok(text) => self.client_event(text, socket).await,
                        Err(_) => self.error(socket, &ApiError::invalid("invalid_json", "Events must be UTF-8 JSON."), None).await,
                    },
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => Err(End::ClientGone),
                    Some(Ok(_)) => Ok(()),
                },
                response = recv(&mut self.responses) => self.model_message(response, socket).await,
            };
            if let Err(end) = step {
                return end;
            }
        }
    }

    /// Writes one event; `Err` if the client is gone.
    async fn write(&self, socket: &mut WebSocket, value: &Value) -> Result<(), End> {
        let frame = Message::Text(value.to_string().into());
        match tokio::time::timeout(WRITE_TIMEOUT, socket.send(frame)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) | Err(_) => Err(End::ClientGone),
        }
    }

    /// Writes one event and applies the fault switches.
    async fn send(&mut self, socket: &mut WebSocket, value: Value) -> Result<(), End> {
        self.write(socket, &value).await?;
        self.sent += 1;
        if self
            .shared
            .config
            .fail_after
            .is_some_and(|n| self.sent >= n)
        {
            let error = ApiError {
                kind: "server_error",
                code: "server_error",
                message: "The server had an error while processing your request.".into(),
                param: None,
            };
            self.write(socket, &error.event(None)).await?;
            return Err(End::Close(CLOSE_INTERNAL, "internal error"));
        }
        Ok(())
    }

    async fn error(
        &mut self,
        socket: &mut WebSocket,
        error: &ApiError,
        event_id: Option<&str>,
    ) -> Result<(), End> {
        tracing::debug!(code = error.code, message = %error.message, "mock-openai rejects a client event");
        self.send(socket, error.event(event_id)).await
    }

    async fn client_event(&mut self, text: &str, socket: &mut WebSocket) -> Result<(), End> {
        let (event_id, parsed) = wire::parse(text);
        let outcome = match parsed {
            Ok(event) => self.handle(event, socket).await?,
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) => Ok(()),
            Err(error) => self.error(socket, &error, event_id.as_deref()).await,
        }
    }

    /// Handles a client event; the inner error is reported to the client and the session goes on.
    async fn handle(&mut self, client: ClientEvent, socket: &mut WebSocket) -> Handled {
        match client {
            ClientEvent::SessionUpdate(update) => self.on_session_update(update, socket).await,
            ClientEvent::Append(pcm) => self.on_append(pcm).await,
            ClientEvent::Commit => self.on_commit(socket).await,
            ClientEvent::Clear => self.on_clear(socket).await,
            ClientEvent::ItemCreate(item) => self.on_item_create(item, socket).await,
            ClientEvent::ResponseCreate => self.on_response_create().await,
            ClientEvent::ResponseCancel => self.on_response_cancel(socket).await,
            ClientEvent::Truncate {
                item_id,
                audio_end_ms,
            } => self.on_truncate(item_id, audio_end_ms, socket).await,
        }
    }

    /// `session.update`: the session's settings, answered with `session.updated`.
    async fn on_session_update(&mut self, update: Value, socket: &mut WebSocket) -> Handled {
        if let Err(error) = self.session.apply(&update) {
            return Ok(Err(error));
        }
        if self.model.is_some() {
            tracing::debug!("session.update after the first input: the sim keeps its settings");
        }
        let updated = event(
            "session.updated",
            json!({ "session": self.session.to_json() }),
        );
        self.write(socket, &updated).await?;
        Ok(Ok(()))
    }

    /// `input_audio_buffer.append`: audio on to the sim (connecting it at the first).
    async fn on_append(&mut self, pcm: Bytes) -> Handled {
        self.shared.record_append(pcm.len());
        if pcm.is_empty() {
            return Ok(Ok(()));
        }
        self.connect(Vec::new()).await?;
        if self.session.manual() && !self.activity_open {
            self.activity_open = true;
            self.forward(LiveInput::ActivityStart).await?;
        }
        self.buffered += pcm.len();
        self.forward(LiveInput::Realtime(Blob::new(pcm, "audio/pcm;rate=24000")))
            .await?;
        Ok(Ok(()))
    }

    /// `input_audio_buffer.commit`: the end of the user's audio, as a user item.
    async fn on_commit(&mut self, socket: &mut WebSocket) -> Handled {
        if self.buffered == 0 {
            return Ok(Err(ApiError::invalid(
                        "input_audio_buffer_commit_empty",
                        "Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer only has 0.00ms of audio.",
                    )));
        }
        self.buffered = 0;
        let end = if self.session.manual() {
            self.activity_open = false;
            LiveInput::ActivityEnd
        } else {
            LiveInput::AudioStreamEnd
        };
        self.forward(end).await?;
        let item_id = new_id("item");
        self.committed = Some(item_id.clone());
        self.commit_answered = true;
        self.user_audio_item(&item_id, socket).await?;
        Ok(Ok(()))
    }

    /// `input_audio_buffer.clear`.
    async fn on_clear(&mut self, socket: &mut WebSocket) -> Handled {
        self.buffered = 0;
        self.activity_open = false;
        self.send(socket, event("input_audio_buffer.cleared", json!({})))
            .await?;
        Ok(Ok(()))
    }

    /// `conversation.item.create`: a message, a seeded call or a tool's output.
    async fn on_item_create(&mut self, item: Item, socket: &mut WebSocket) -> Handled {
        if self.pending.len() >= MAX_ITEMS {
            return Ok(Err(ApiError::invalid(
                "too_many_items",
                "Too many items before a response.",
            )));
        }
        let item_json = match &item {
            Item::FunctionCallOutput { call_id, output } if self.seeded_calls.contains(call_id) => {
                self.pending.push(item.clone());
                json!({ "type": "function_call_output", "call_id": call_id, "output": output })
            }
            Item::FunctionCallOutput { call_id, output } => {
                let Some((name, sim_id)) = self.calls.get(call_id).cloned() else {
                    return Ok(Err(ApiError::param(
                        "invalid_value",
                        "item.call_id",
                        format!(
                            "Tool call ID '{}' not found in conversation.",
                            call_id.chars().take(64).collect::<String>()
                        ),
                    )));
                };
                if !self.answered.insert(call_id.clone()) {
                    return Ok(Err(ApiError::param(
                        "invalid_value",
                        "item.call_id",
                        format!(
                            "Tool call ID '{}' already has an output.",
                            call_id.chars().take(64).collect::<String>()
                        ),
                    )));
                }
                let response = match serde_json::from_str::<Value>(output) {
                    Ok(Value::Object(map)) => Value::Object(map),
                    _ => json!({ "output": output }),
                };
                self.outputs.push(FunctionResponse {
                    id: sim_id,
                    name,
                    response,
                    scheduling: None,
                });
                json!({ "type": "function_call_output", "call_id": call_id, "output": output })
            }
            Item::Message { role, text } => {
                let kind = if role == "assistant" {
                    "output_text"
                } else {
                    "input_text"
                };
                json!({ "type": "message", "role": role, "content": [{ "type": kind, "text": text }] })
            }
            Item::FunctionCall {
                call_id,
                name,
                arguments,
            } => {
                if self.seeded_calls.len() < MAX_ITEMS {
                    self.seeded_calls.insert(call_id.clone());
                }
                json!({ "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments })
            }
        };
        if !matches!(item, Item::FunctionCallOutput { .. }) {
            self.pending.push(item);
        }
        self.item_added(item_json, socket).await?;
        Ok(Ok(()))
    }

    /// `response.create`, refused while an answer is under way.
    async fn on_response_create(&mut self) -> Handled {
        if let Some(answer) = &self.answer {
            return Ok(Err(ApiError::invalid(
                        "conversation_already_has_active_response",
                        format!(
                            "Conversation already has an active response in progress: {}. Wait until the response is finished before creating a new one.",
                            answer.response_id
                        ),
                    )));
        }
        self.response_create().await?;
        Ok(Ok(()))
    }

    /// `response.cancel` of the answer under way.
    async fn on_response_cancel(&mut self, socket: &mut WebSocket) -> Handled {
        if self.answer.is_none() {
            return Ok(Err(ApiError::invalid(
                "response_cancel_not_active",
                "Cancellation failed: no active response found",
            )));
        }
        self.cancelled = true;
        self.finish(socket, "cancelled", Some("client_cancelled"))
            .await?;
        Ok(Ok(()))
    }

    /// `conversation.item.truncate`: what the client played of an assistant audio item, recorded.
    async fn on_truncate(
        &mut self,
        item_id: String,
        audio_end_ms: u64,
        socket: &mut WebSocket,
    ) -> Handled {
        let Some(item_ms) = self
            .audio_items
            .iter()
            .find(|(id, _)| *id == item_id)
            .map(|(_, samples)| samples / SAMPLES_PER_MS)
        else {
            return Ok(Err(ApiError::param(
                "invalid_value",
                "item_id",
                "No assistant audio item with this id.",
            )));
        };
        if audio_end_ms > item_ms {
            return Ok(Err(ApiError::param(
                "invalid_value",
                "audio_end_ms",
                format!(
                    "audio_end_ms {audio_end_ms} is longer than the item's audio ({item_ms} ms)."
                ),
            )));
        }
        tracing::info!(
            item_id,
            audio_end_ms,
            item_ms,
            "mock-openai truncates an item"
        );
        self.shared.record(Truncation {
            item_id: item_id.clone(),
            audio_end_ms,
            item_audio_ms: item_ms,
        });
        let truncated =
            json!({ "item_id": item_id, "content_index": 0, "audio_end_ms": audio_end_ms });
        self.send(socket, event("conversation.item.truncated", truncated))
            .await?;
        Ok(Ok(()))
    }

    /// `response.create`: tool results, then the latest user messages as the turn; what came
    /// before them seeds the sim's history if it is not connected yet.
    async fn response_create(&mut self) -> Result<(), End> {
        let pending = std::mem::take(&mut self.pending);
        let split = pending
            .iter()
            .rposition(|i| !matches!(i, Item::Message { role, .. } if role == "user"))
            .map_or(0, |i| i + 1);
        let history = pending[..split]
            .iter()
            .filter_map(history_content)
            .collect();
        let turn: Vec<String> = pending[split..]
            .iter()
            .filter_map(|i| match i {
                Item::Message { text, .. } => Some(text.clone()),
                _ => None,
            })
            .collect();
        // System messages since the last answer (the gateway's results of non-blocking calls)
        // are what this response reads, when no user turn came with them.
        let notices: Vec<String> = pending
            .iter()
            .filter_map(|i| match i {
                Item::Message { role, text } if role == "system" => Some(text.clone()),
                _ => None,
            })
            .collect();
        self.connect(history).await?;
        let outputs = std::mem::take(&mut self.outputs);
        let had_outputs = !outputs.is_empty();
        if had_outputs {
            self.forward(LiveInput::ToolResponse(outputs)).await?;
        }
        let answered_by_audio = std::mem::take(&mut self.commit_answered);
        if turn.is_empty() && !had_outputs && !answered_by_audio && !notices.is_empty() {
            self.forward(LiveInput::Content {
                content: Content::text("system", notices.join(" ")),
                turn_complete: true,
            })
            .await?;
        } else if !turn.is_empty() || (!had_outputs && !answered_by_audio) {
            self.forward(LiveInput::Content {
                content: Content::text("user", turn.join(" ")),
                turn_complete: true,
            })
            .await?;
        }
        Ok(())
    }

    /// Connects the sim, if it is not yet, with the session as it stands.
    async fn connect(&mut self, history: Vec<Content>) -> Result<(), End> {
        if self.model.is_some() {
            return Ok(());
        }
        let mut config = self.session.connect_config();
        config.history = history;
        let connection = SimModel::new(self.shared.config.sim)
            .connect(config)
            .await
            .map_err(|_| End::Close(CLOSE_INTERNAL, "model session failed"))?;
        self.model = Some(connection.sender);
        self.responses = Some(connection.receiver);
        Ok(())
    }

    async fn forward(&mut self, input: LiveInput) -> Result<(), End> {
        let Some(sender) = &self.model else {
            return Ok(());
        };
        sender
            .send(input)
            .await
            .map_err(|_| End::Close(CLOSE_INTERNAL, "model session ended"))
    }

    async fn item_added(&mut self, mut item: Value, socket: &mut WebSocket) -> Result<(), End> {
        let id = new_id("item");
        item["id"] = json!(id);
        item["object"] = json!("realtime.item");
        item["status"] = json!("completed");
        let previous = self.last_item.replace(id);
        self.send(
            socket,
            event(
                "conversation.item.added",
                json!({ "previous_item_id": previous, "item": item }),
            ),
        )
        .await?;
        self.send(
            socket,
            event("conversation.item.done", json!({ "item": item })),
        )
        .await
    }

    /// A user audio item was committed: `committed`, then the item.
    async fn user_audio_item(&mut self, item_id: &str, socket: &mut WebSocket) -> Result<(), End> {
        let previous = self.last_item.replace(item_id.to_owned());
        self.send(
            socket,
            event(
                "input_audio_buffer.committed",
                json!({ "item_id": item_id, "previous_item_id": previous }),
            ),
        )
        .await?;
        let item = json!({
            "id": item_id, "object": "realtime.item", "type": "message", "role": "user",
            "status": "completed", "content": [{ "type": "input_audio", "transcript": null }],
        });
        self.send(
            socket,
            event(
                "conversation.item.added",
                json!({ "previous_item_id": previous, "item": item }),
            ),
        )
        .await
    }

    async fn model_message(
        &mut self,
        message: Option<ModelMessage>,
        socket: &mut WebSocket,
    ) -> Result<(), End> {
        let response = match message {
            Some(Ok(response)) => *response,
            Some(Err(_)) | None => return Err(End::Close(CLOSE_INTERNAL, "model session ended")),
        };
        self.model_response(response, socket).await
    }

    async fn model_response(
        &mut self,
        response: LlmResponse,
        socket: &mut WebSocket,
    ) -> Result<(), End> {
        if response.interrupted && self.answer.is_some() {
            let item_id = new_id("item");
            self.speaking = Some(item_id.clone());
            let started = json!({ "audio_start_ms": 0, "item_id": item_id });
            self.send(socket, event("input_audio_buffer.speech_started", started))
                .await?;
            self.finish(socket, "cancelled", Some("turn_detected"))
                .await?;
        }
        if let Some(heard) = &response.input_transcription {
            let text = heard.text.clone().unwrap_or_default();
            self.heard(text, socket).await?;
        }
        if let Some(usage) = response.usage_metadata {
            self.usage = Some(usage);
        }
        if self.cancelled {
            self.cancelled = !response.turn_complete;
            return Ok(());
        }
        for part in response.content.iter().flat_map(|c| &c.parts) {
            if let Some(text) = part.text.as_ref().filter(|t| !t.is_empty()) {
                let ids = self.message_item(socket).await?;
                if let Some(answer) = &mut self.answer {
                    answer.text.push_str(text);
                }
                self.delta(socket, "response.output_text.delta", ids, json!(text))
                    .await?;
            }
            if let Some(blob) = part.inline_data.as_ref().filter(|b| !b.data.is_empty()) {
                let ids = self.message_item(socket).await?;
                if let Some(answer) = &mut self.answer {
                    answer.samples += blob.data.len() as u64 / 2;
                }
                let audio = STANDARD.encode(&blob.data);
                self.delta(socket, "response.output_audio.delta", ids, json!(audio))
                    .await?;
            }
        }
        if let Some(text) = response
            .output_transcription
            .as_ref()
            .and_then(|t| t.text.clone())
            .filter(|t| !t.is_empty())
        {
            let ids = self.message_item(socket).await?;
            if let Some(answer) = &mut self.answer {
                answer.transcript.push_str(&text);
            }
            self.delta(
                socket,
                "response.output_audio_transcript.delta",
                ids,
                json!(text),
            )
            .await?;
        }
        if !response.tool_calls.is_empty() {
            self.function_calls(response.tool_calls, socket).await?;
        }
        if response.turn_complete && self.answer.is_some() {
            self.finish(socket, "completed", None).await?;
        }
        Ok(())
    }

    /// An utterance ended (the sim's transcript of it): the input events, then its transcript.
    async fn heard(&mut self, text: String, socket: &mut WebSocket) -> Result<(), End> {
        let item_id = match self.committed.take() {
            Some(item_id) => item_id,
            None => {
                let item_id = match self.speaking.take() {
                    Some(item_id) => item_id,
                    None => {
                        let item_id = new_id("item");
                        let started = json!({ "audio_start_ms": 0, "item_id": item_id });
                        self.send(socket, event("input_audio_buffer.speech_started", started))
                            .await?;
                        item_id
                    }
                };
                let stopped = json!({ "audio_end_ms": 0, "item_id": item_id });
                self.send(socket, event("input_audio_buffer.speech_stopped", stopped))
                    .await?;
                self.buffered = 0;
                self.user_audio_item(&item_id, socket).await?;
                item_id
            }
        };
        if self.session.transcription.is_none() {
            return Ok(());
        }
        let delta = json!({ "item_id": item_id, "content_index": 0, "delta": text });
        self.send(
            socket,
            event("conversation.item.input_audio_transcription.delta", delta),
        )
        .await?;
        let completed = json!({
            "item_id": item_id, "content_index": 0, "transcript": text,
            "usage": { "type": "duration", "seconds": 1 },
        });
        self.send(
            socket,
            event(
                "conversation.item.input_audio_transcription.completed",
                completed,
            ),
        )
        .await
    }

    /// Starts the response if needed.
    async fn response(&mut self, socket: &mut WebSocket) -> Result<String, End> {
        if let Some(answer) = &self.answer {
            return Ok(answer.response_id.clone());
        }
        let response_id = new_id("resp");
        self.answers += 1;
        self.answer = Some(Answer {
            response_id: response_id.clone(),
            ..Answer::default()
        });
        let response = json!({
            "object": "realtime.response", "id": response_id, "status": "in_progress",
            "status_details": null, "output": [], "usage": null,
        });
        self.send(
            socket,
            event("response.created", json!({ "response": response })),
        )
        .await?;
        Ok(response_id)
    }

    /// Starts the response and its assistant message item if needed: (response id, item id).
    async fn message_item(&mut self, socket: &mut WebSocket) -> Result<(String, String), End> {
        let response_id = self.response(socket).await?;
        if let Some(item_id) = self.answer.as_ref().and_then(|a| a.item_id.clone()) {
            return Ok((response_id, item_id));
        }
        let item_id = new_id("item");
        if let Some(answer) = &mut self.answer {
            answer.item_id = Some(item_id.clone());
        }
        let item = json!({
            "id": item_id, "object": "realtime.item", "type": "message", "role": "assistant",
            "status": "in_progress", "content": [],
        });
        let previous = self.last_item.replace(item_id.clone());
        let ids = json!({ "response_id": response_id, "output_index": 0, "item": item });
        self.send(socket, event("response.output_item.added", ids))
            .await?;
        self.send(
            socket,
            event(
                "conversation.item.added",
                json!({ "previous_item_id": previous, "item": item }),
            ),
        )
        .await?;
        let part = json!({
            "response_id": response_id, "item_id": item_id, "output_index": 0, "content_index": 0,
            "part": self.part(None),
        });
        self.send(socket, event("response.content_part.added", part))
            .await?;
        Ok((response_id, item_id))
    }

    fn part(&self, answer: Option<&Answer>) -> Value {
        match self.session.modality() {
            Modality::Text => {
                json!({ "type": "text", "text": answer.map(|a| a.text.as_str()).unwrap_or_default() })
            }
            Modality::Audio => {
                json!({ "type": "audio", "transcript": answer.map(|a| a.transcript.as_str()).unwrap_or_default() })
            }
        }
    }

    async fn delta(
        &mut self,
        socket: &mut WebSocket,
        kind: &str,
        (response_id, item_id): (String, String),
        delta: Value,
    ) -> Result<(), End> {
        let fields = json!({
            "response_id": response_id, "item_id": item_id, "output_index": 0, "content_index": 0,
            "delta": delta,
        });
        self.send(socket, event(kind, fields)).await?;
        if self.shared.config.close_mid_answer && self.answers == 1 {
            return Err(End::Drop);
        }
        Ok(())
    }

    /// The sim's tool calls: one function-call item each, then the response ends (the model
    /// goes on in a new response once the client sends the results).
    async fn function_calls(
        &mut self,
        calls: Vec<FunctionCall>,
        socket: &mut WebSocket,
    ) -> Result<(), End> {
        let response_id = self.response(socket).await?;
        for (index, call) in calls.into_iter().enumerate() {
            if self.calls.len() >= MAX_ITEMS {
                self.calls.clear();
            }
            let call_id = new_id("call");
            let arguments = call.args.clone().unwrap_or_else(|| json!({})).to_string();
            self.calls
                .insert(call_id.clone(), (call.name.clone(), call.id.clone()));
            let item_id = new_id("item");
            let mut item = json!({
                "id": item_id, "object": "realtime.item", "type": "function_call",
                "status": "in_progress", "call_id": call_id, "name": call.name, "arguments": "",
            });
            let previous = self.last_item.replace(item_id.clone());
            let added = json!({ "response_id": response_id, "output_index": index, "item": item });
            self.send(socket, event("response.output_item.added", added))
                .await?;
            self.send(
                socket,
                event(
                    "conversation.item.added",
                    json!({ "previous_item_id": previous, "item": item }),
                ),
            )
            .await?;
            let ids = json!({
                "response_id": response_id, "item_id": item_id, "output_index": index,
                "call_id": call_id, "delta": arguments,
            });
            self.send(socket, event("response.function_call_arguments.delta", ids))
                .await?;
            let done = json!({
                "response_id": response_id, "item_id": item_id, "output_index": index,
                "call_id": call_id, "name": call.name, "arguments": arguments,
            });
            self.send(socket, event("response.function_call_arguments.done", done))
                .await?;
            item["status"] = json!("completed");
            item["arguments"] = json!(arguments);
            let done = json!({ "response_id": response_id, "output_index": index, "item": item });
            self.send(socket, event("response.output_item.done", done))
                .await?;
            self.send(
                socket,
                event("conversation.item.done", json!({ "item": item })),
            )
            .await?;
            if let Some(answer) = &mut self.answer {
                answer.output.push(item);
            }
        }
        self.finish(socket, "completed", None).await
    }

    /// Ends the response: its message item's closing events, then `response.done`.
    async fn finish(
        &mut self,
        socket: &mut WebSocket,
        status: &str,
        reason: Option<&str>,
    ) -> Result<(), End> {
        let Some(mut answer) = self.answer.take() else {
            return Ok(());
        };
        let response_id = answer.response_id.clone();
        if let Some(item_id) = answer.item_id.clone() {
            let ids = json!({ "response_id": response_id, "item_id": item_id, "output_index": 0, "content_index": 0 });
            let with = |extra: Value| {
                let mut fields = ids.clone();
                if let (Some(fields), Value::Object(extra)) = (fields.as_object_mut(), extra) {
                    fields.extend(extra);
                }
                fields
            };
            match self.session.modality() {
                Modality::Text => {
                    let done = with(json!({ "text": answer.text }));
                    self.send(socket, event("response.output_text.done", done))
                        .await?;
                }
                Modality::Audio => {
                    self.send(socket, event("response.output_audio.done", with(json!({}))))
                        .await?;
                    let done = with(json!({ "transcript": answer.transcript }));
                    self.send(socket, event("response.output_audio_transcript.done", done))
                        .await?;
                }
            }
            let part = with(json!({ "part": self.part(Some(&answer)) }));
            self.send(socket, event("response.content_part.done", part))
                .await?;
            let item_status = if status == "completed" {
                "completed"
            } else {
                "incomplete"
            };
            let item = json!({
                "id": item_id, "object": "realtime.item", "type": "message", "role": "assistant",
                "status": item_status, "content": [self.part(Some(&answer))],
            });
            let done = json!({ "response_id": response_id, "output_index": 0, "item": item });
            self.send(socket, event("response.output_item.done", done))
                .await?;
            self.send(
                socket,
                event("conversation.item.done", json!({ "item": item })),
            )
            .await?;
            answer.output.insert(0, item);
            if answer.samples > 0 {
                if self.audio_items.len() >= MAX_AUDIO_ITEMS {
                    self.audio_items.pop_front();
                }
                self.audio_items.push_back((item_id, answer.samples));
            }
        }
        let status_details = reason.map(|reason| json!({ "type": status, "reason": reason }));
        let response = json!({
            "object": "realtime.response", "id": response_id, "status": status,
            "status_details": status_details, "output": answer.output,
            "usage": usage(self.usage.take().unwrap_or_default()),
        });
        self.send(
            socket,
            event("response.done", json!({ "response": response })),
        )
        .await?;
        let limits = json!({ "rate_limits": [
            { "name": "requests", "limit": 5000, "remaining": 4999, "reset_seconds": 0.012 },
            { "name": "tokens", "limit": 800_000, "remaining": 799_000, "reset_seconds": 0.075 },
        ]});
        self.send(socket, event("rate_limits.updated", limits))
            .await
    }
}

/// A history item as sim content (text and function calls; outputs are answered, not replayed).
fn history_content(item: &Item) -> Option<Content> {
    match item {
        Item::Message { role, text } if !text.is_empty() => {
            let role = if role == "assistant" { "model" } else { "user" };
            Some(Content::text(role, text.clone()))
        }
        _ => None,
    }
}

/// The sim's usage with OpenAI's names.
fn usage(usage: UsageMetadata) -> Value {
    let of = |details: &Option<Vec<livegate::event::ModalityTokenCount>>, modality: &str| {
        details
            .iter()
            .flatten()
            .filter(|d| d.modality == modality)
            .map(|d| d.token_count)
            .sum::<u64>()
    };
    let input = usage.prompt_token_count.unwrap_or(0);
    let output = usage.candidates_token_count.unwrap_or(0);
    json!({
        "total_tokens": usage.total_token_count.unwrap_or(input + output),
        "input_tokens": input,
        "output_tokens": output,
        "input_token_details": {
            "text_tokens": of(&usage.prompt_tokens_details, "TEXT"),
            "audio_tokens": of(&usage.prompt_tokens_details, "AUDIO"),
            "image_tokens": 0,
            "cached_tokens": 0,
            "cached_tokens_details": { "text_tokens": 0, "audio_tokens": 0, "image_tokens": 0 },
        },
        "output_token_details": {
            "text_tokens": of(&usage.candidates_tokens_details, "TEXT"),
            "audio_tokens": of(&usage.candidates_tokens_details, "AUDIO"),
        },
    })
}

/// The next model response, or never while no model is connected.
async fn recv(responses: &mut Option<mpsc::Receiver<ModelMessage>>) -> Option<ModelMessage> {
    match responses {
        Some(responses) => responses.recv().await,
        None => std::future::pending().await,
    }
}
