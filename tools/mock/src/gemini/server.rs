//! The route and the per-connection task: one task per WebSocket reads client frames, feeds the
//! sim, and writes the sim's responses as Gemini server messages until someone closes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use super::wire::{
    self, ClientMessage, Close, Endpoint, CLOSE_GOING_AWAY, CLOSE_INTERNAL, CLOSE_NORMAL,
};
use super::{MockGeminiConfig, Shared};
use livegate::event::Content;
use livegate::model::sim::SimModel;
use livegate::model::{LiveConnectConfig, LiveInput, LiveModel, ModelError, ModelMessage};

/// Gemini's reason for a missing or wrong API key.
const BAD_KEY: &str = "API key not valid. Please pass a valid API key.";
/// What `goAway` announces, and how long the connection then stays open.
const GO_AWAY_AFTER: Duration = Duration::from_secs(1);
const GO_AWAY_TIME_LEFT: &str = "1s";
/// Most bytes taken from a client socket per read (see `upgrade`).
const READ_BUFFER_BYTES: usize = 4 * 1024;
/// Longest a write to a client may take before the client counts as gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a close waits for the client's answering close frame.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// How long a connection that went silent is held open before it is dropped.
const SILENT_FOR: Duration = Duration::from_secs(120);

/// Every path goes to one handler, which normalises it itself (python-genai dials `//ws/...`).
pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(upgrade).with_state(shared)
}

async fn upgrade(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let Some(endpoint) = wire::endpoint(uri.path()) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let authorized = shared
        .config
        .api_key
        .as_deref()
        .is_none_or(|expected| credentials(&uri, &headers).iter().any(|k| k == expected));
    let id = shared.next_connection.fetch_add(1, Ordering::Relaxed);
    if endpoint.api == wire::Api::Vertex {
        shared.vertex_connections.fetch_add(1, Ordering::Relaxed);
    }
    let span = tracing::info_span!("mock_gemini", connection = id, api = ?endpoint.api, version = endpoint.version);
    upgrade
        // Client messages are small (a 20 ms audio chunk is about 1 KB as JSON); tungstenite's
        // default 128 KiB read buffer, zero-filled before each read, would stay resident per
        // connection and weigh on load tests that run the mock beside the gateway.
        .read_buffer_size(READ_BUFFER_BYTES)
        .on_failed_upgrade(|error| tracing::warn!(%error, "mock-gemini upgrade failed"))
        .on_upgrade(move |socket| {
            let connections = shared.connections.clone();
            connections.track_future(serve(socket, shared, endpoint, authorized).instrument(span))
        })
}

/// Every credential the request presents: `?key=`, `?access_token=`, `x-goog-api-key`, and
/// `Authorization: Token …` / `Bearer …`.
pub(super) fn credentials(uri: &Uri, headers: &HeaderMap) -> Vec<String> {
    let mut found: Vec<String> = Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|Query(pairs)| pairs)
        .unwrap_or_default()
        .into_iter()
        .filter(|(name, _)| name == "key" || name == "access_token")
        .map(|(_, value)| value)
        .collect();
    let header = |name| {
        headers
            .get_all(name)
            .into_iter()
            .filter_map(|v| v.to_str().ok())
    };
    found.extend(header("x-goog-api-key").map(|v| v.trim().to_owned()));
    found.extend(header(header::AUTHORIZATION.as_str()).filter_map(|v| {
        let (scheme, token) = v.trim().split_once(' ')?;
        let known = scheme.eq_ignore_ascii_case("token") || scheme.eq_ignore_ascii_case("bearer");
        known.then(|| token.trim().to_owned())
    }));
    found
}

/// How a connection ends.
enum End {
    /// Close it with this code and reason.
    Close(Close),
    /// The client closed it or went away; nothing more to send.
    ClientGone,
    /// Go silent: hold the socket without reading or writing it.
    Silent,
}

impl From<Close> for End {
    fn from(close: Close) -> Self {
        End::Close(close)
    }
}

/// Serves one WebSocket until it closes; the sim session ends with it.
async fn serve(mut socket: WebSocket, shared: Arc<Shared>, endpoint: Endpoint, authorized: bool) {
    let end = if authorized {
        tracing::info!("mock-gemini connection opened");
        let mut connection = Connection::new(&shared.config, endpoint);
        connection.run(&mut socket, &shared).await
        // Dropping the connection here ends its sim session before the close handshake.
    } else {
        tracing::info!("mock-gemini connection without a valid API key");
        End::Close(Close::invalid(BAD_KEY))
    };
    match end {
        End::Silent => {
            tracing::info!("mock-gemini goes silent");
            tokio::select! {
                () = shared.shutdown.cancelled() => {}
                () = tokio::time::sleep(SILENT_FOR) => {}
            }
        }
        End::ClientGone => {
            tracing::info!("mock-gemini client closed the connection");
            // tungstenite queues the answer to a client's close frame but writes it only on the
            // socket's next read or write; dropping the socket now would end the stream without
            // it, which clients (the gateway among them) report as a reset.
            finish_handshake(&mut socket).await;
        }
        End::Close(close) if matches!(close.code, CLOSE_NORMAL | CLOSE_GOING_AWAY) => {
            tracing::info!(code = close.code, reason = %close.reason, "mock-gemini closing the connection");
            close_socket(&mut socket, close).await;
        }
        End::Close(close) => {
            tracing::warn!(code = close.code, reason = %close.reason, "mock-gemini closing the connection on an error");
            close_socket(&mut socket, close).await;
        }
    }
}

/// Sends a close frame and waits briefly for the client's answer, so the handshake completes.
async fn close_socket(socket: &mut WebSocket, close: Close) {
    let frame = CloseFrame {
        code: close.code,
        reason: close.reason.into(),
    };
    let sent = tokio::time::timeout(WRITE_TIMEOUT, socket.send(Message::Close(Some(frame)))).await;
    if matches!(sent, Ok(Ok(()))) {
        finish_handshake(socket).await;
    }
}

/// Reads on, for at most the close grace, until the client's close frame or the end of the
/// stream: reading is what writes a queued answer to the client's close, and what lets the
/// client's answer to ours arrive.
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

/// Where the model session stands.
enum Model {
    /// No `setup` yet.
    AwaitingSetup,
    /// Set up, but the sim is connected lazily, so leading `clientContent` can become its history.
    Pending(Box<LiveConnectConfig>),
    /// Connected; inputs go here.
    Live(livegate::model::InputSender),
}

/// The state of one client connection.
struct Connection<'a> {
    config: &'a MockGeminiConfig,
    endpoint: Endpoint,
    model: Model,
    responses: Option<mpsc::Receiver<ModelMessage>>,
    outbound: wire::Outbound,
    /// Server messages sent, `setupComplete` not counted.
    sent: u64,
    /// When `goAway` was sent: the time to close the connection.
    go_away_at: Option<Instant>,
}

impl<'a> Connection<'a> {
    fn new(config: &'a MockGeminiConfig, endpoint: Endpoint) -> Self {
        Connection {
            config,
            endpoint,
            model: Model::AwaitingSetup,
            responses: None,
            outbound: wire::Outbound::new(endpoint.api),
            sent: 0,
            go_away_at: None,
        }
    }

    async fn run(&mut self, socket: &mut WebSocket, shared: &Shared) -> End {
        loop {
            let step = tokio::select! {
                () = shared.shutdown.cancelled() => Err(Close::new(CLOSE_GOING_AWAY, "Server is shutting down.").into()),
                () = sleep_until(self.go_away_at) => Err(Close::new(CLOSE_NORMAL, "Connection lifetime reached.").into()),
                frame = socket.recv() => match frame {
                    Some(Ok(message)) => {
                        if matches!(self.model, Model::AwaitingSetup) {
                            shared.record_setup(&message);
                        }
                        self.client_frame(message, socket, shared).await
                    }
                    Some(Err(error)) => {
                        tracing::debug!(%error, "mock-gemini read failed");
                        Err(End::ClientGone)
                    }
                    None => Err(End::ClientGone),
                },
                response = recv(&mut self.responses) => self.model_response(response, socket).await,
            };
            if let Err(end) = step {
                return end;
            }
        }
    }

    async fn client_frame(
        &mut self,
        message: Message,
        socket: &mut WebSocket,
        shared: &Shared,
    ) -> Result<(), End> {
        let text = match &message {
            Message::Text(text) => text.as_str(),
            // Clients send text frames, but a binary frame of UTF-8 JSON is read the same way.
            Message::Binary(data) => std::str::from_utf8(data)
                .map_err(|_| Close::invalid("Invalid JSON payload received. Not UTF-8."))?,
            Message::Close(_) => return Err(End::ClientGone),
            Message::Ping(_) | Message::Pong(_) => return Ok(()),
        };
        let message = wire::parse_client_message(text, &self.endpoint)?;
        shared.record_inputs(&message);
        self.client_message(message, socket).await
    }

    async fn client_message(
        &mut self,
        message: ClientMessage,
        socket: &mut WebSocket,
    ) -> Result<(), End> {
        match (message, &mut self.model) {
            (ClientMessage::Setup(config), Model::AwaitingSetup)
                if config
                    .session_resumption
                    .as_ref()
                    .and_then(|r| r.handle.as_deref())
                    .is_some_and(|h| !livegate::model::sim::knows_handle(h)) =>
            {
                // Gemini refuses an unknown or expired handle at setup.
                Err(Close::invalid("Invalid session resumption handle.").into())
            }
            (ClientMessage::Setup(config), Model::AwaitingSetup) => {
                let speech = config.speech_config.clone().unwrap_or_default();
                tracing::info!(
                    model = %config.model,
                    modality = ?config.modality(),
                    tools = config.tools.len(),
                    voice = speech.voice_name.as_deref().unwrap_or("default"),
                    language = speech.language_code.as_deref().unwrap_or("default"),
                    compression = config.context_window_compression.is_some(),
                    "mock-gemini setup"
                );
                self.model = Model::Pending(config);
                self.send(socket, &wire::setup_complete(self.endpoint.api))
                    .await?;
                self.check_limits(socket).await
            }
            (ClientMessage::Setup(_), _) => {
                Err(Close::invalid("setup must be sent once, as the first message.").into())
            }
            (_, Model::AwaitingSetup) => {
                Err(Close::invalid("The first message must be setup.").into())
            }
            // Content before any other input, not asking for an answer: the conversation so far.
            (
                ClientMessage::ClientContent {
                    turns,
                    turn_complete: false,
                },
                Model::Pending(config),
            ) => {
                config.history.extend(turns);
                Ok(())
            }
            (
                ClientMessage::ClientContent {
                    mut turns,
                    turn_complete,
                },
                _,
            ) => {
                if turns.is_empty() && turn_complete {
                    turns.push(Content {
                        parts: Vec::new(),
                        role: Some("user".into()),
                    });
                }
                let last = turns.len().saturating_sub(1);
                let inputs = turns
                    .into_iter()
                    .enumerate()
                    .map(|(i, content)| LiveInput::Content {
                        content,
                        turn_complete: turn_complete && i == last,
                    });
                self.forward(inputs.collect()).await
            }
            (ClientMessage::RealtimeInput(inputs), _) => self.forward(inputs).await,
            (ClientMessage::ToolResponse(responses), _) => {
                let responses = self.outbound.tool_responses(responses)?;
                self.forward(vec![LiveInput::ToolResponse(responses)]).await
            }
        }
    }

    /// Sends inputs to the sim, connecting it first if this is the first input.
    async fn forward(&mut self, inputs: Vec<LiveInput>) -> Result<(), End> {
        if inputs.is_empty() {
            return Ok(());
        }
        if let Model::Pending(config) = &mut self.model {
            let config = std::mem::take(config.as_mut());
            tracing::debug!(
                history = config.history.len(),
                "mock-gemini connects the sim"
            );
            let connection = SimModel::new(self.config.sim)
                .connect(config)
                .await
                .map_err(|error| model_close(&error))?;
            self.model = Model::Live(connection.sender);
            self.responses = Some(connection.receiver);
        }
        let Model::Live(sender) = &self.model else {
            return Ok(());
        };
        for input in inputs {
            if sender.send(input).await.is_err() {
                return Err(
                    Close::new(CLOSE_INTERNAL, "Internal error: the model session ended.").into(),
                );
            }
        }
        Ok(())
    }

    async fn model_response(
        &mut self,
        response: Option<ModelMessage>,
        socket: &mut WebSocket,
    ) -> Result<(), End> {
        let response = match response {
            Some(Ok(response)) => response,
            Some(Err(error)) => {
                tracing::warn!(%error, "mock-gemini model error");
                return Err(model_close(&error).into());
            }
            None => {
                return Err(
                    Close::new(CLOSE_INTERNAL, "Internal error: the model session ended.").into(),
                )
            }
        };
        for message in self.outbound.messages(&response) {
            self.send(socket, &message).await?;
            self.sent += 1;
            self.check_limits(socket).await?;
        }
        Ok(())
    }

    /// Applies the fault switches after a server message.
    async fn check_limits(&mut self, socket: &mut WebSocket) -> Result<(), End> {
        if self.config.silent_after.is_some_and(|n| self.sent >= n) {
            return Err(End::Silent);
        }
        if self.config.fail_after.is_some_and(|n| self.sent >= n) {
            return Err(Close::new(CLOSE_INTERNAL, "Internal error encountered.").into());
        }
        if self.go_away_at.is_none() && self.config.go_away_after.is_some_and(|n| self.sent >= n) {
            tracing::info!(after = self.sent, "mock-gemini sends goAway");
            self.send(socket, &wire::go_away(GO_AWAY_TIME_LEFT)).await?;
            self.go_away_at = Some(Instant::now() + GO_AWAY_AFTER);
        }
        Ok(())
    }

    /// Writes one server message, framed as configured.
    async fn send(&self, socket: &mut WebSocket, message: &Value) -> Result<(), End> {
        let text = wire::encode(message);
        let frame = if self.config.text_frames {
            Message::Text(text.into())
        } else {
            Message::Binary(text.into())
        };
        match tokio::time::timeout(WRITE_TIMEOUT, socket.send(frame)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                tracing::debug!(%error, "mock-gemini write failed");
                Err(End::ClientGone)
            }
            Err(_) => {
                tracing::warn!("mock-gemini client stopped reading");
                Err(End::ClientGone)
            }
        }
    }
}

/// The close for a model error: its own code if it has one, else 1011.
fn model_close(error: &ModelError) -> Close {
    match error {
        ModelError::Closed { code, reason } => Close::new(*code, reason.clone()),
        other => Close::new(CLOSE_INTERNAL, format!("Internal error: {other}")),
    }
}

/// The next model response, or never while no model is connected.
async fn recv(responses: &mut Option<mpsc::Receiver<ModelMessage>>) -> Option<ModelMessage> {
    match responses {
        Some(responses) => responses.recv().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
