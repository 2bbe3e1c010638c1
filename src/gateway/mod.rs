//! The gateway: the axum app that pairs browser WebSockets with live runs, serves the web client,
//! and runs until shut down.

mod assets;
mod auth;
mod codec;
pub mod config;
mod connection;
mod ids;
pub mod metrics;
pub mod process;
mod registry;
mod rest;
mod run_api;
mod writer;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::signal::Signal;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

pub use codec::{
    decode_binary, decode_text, encode_event, AudioFrames, FrameBlocks, FrameError, OutFrame,
};
pub use config::ServeArgs;
pub use connection::{ConnectOptions, CLOSE_TAKEN_OVER};
pub use ids::PathId;
pub use registry::SessionRegistry;
pub use writer::{run_writer, WriterCommand, WriterConfig, WriterExit, SOCKET_WRITE_BUFFER};

use crate::agent::config::{AgentConfig, AgentConfigError};
use crate::artifact::open_artifact_service;
use crate::model::{model_for_name, Modality, ModelOptions};
use crate::runner::Runner;
use crate::session::open_session_service;

/// Bytes read from a client socket at a time (larger messages still arrive whole).
const SOCKET_READ_BUFFER: usize = 2048;

/// Instruction of the built-in default agent.
pub const DEFAULT_INSTRUCTION: &str = "You are a helpful, concise voice assistant.";

/// Shared state of a running gateway.
#[derive(Debug)]
pub struct Gateway {
    /// Runs agents against sessions and artifacts.
    pub runner: Runner,
    /// One live run per session.
    pub registry: SessionRegistry,
    /// Fires on shutdown.
    pub shutdown: Signal,
    /// Writer settings for every connection.
    pub writer_config: WriterConfig,
    /// Live request queue capacity.
    pub queue_capacity: usize,
    /// Record audio to artifacts.
    pub save_audio: bool,
    /// Default response modality.
    pub modality: Modality,
    /// Default downstream audio encoding.
    pub audio_frames: AudioFrames,
    /// Largest client message.
    pub max_message_bytes: usize,
    /// Serve the web client from this folder instead of the embedded one.
    pub web_root: Option<std::path::PathBuf>,
    /// What `/metrics` reports.
    pub metrics: metrics::Metrics,
    connections: TaskTracker,
}

/// Errors starting the gateway.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The session store could not be opened.
    #[error("session store: {0}")]
    Sessions(#[from] crate::session::SessionError),
    /// The artifact store could not be opened.
    #[error("artifact store: {0}")]
    Artifacts(#[from] crate::artifact::ArtifactError),
    /// The agent file or the agent's model could not be used.
    #[error("agent: {0}")]
    Agent(#[from] AgentConfigError),
    /// The listen address could not be bound.
    #[error("could not listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A running gateway.
#[derive(Debug)]
pub struct Server {
    /// The address it listens on.
    pub addr: SocketAddr,
    gateway: Arc<Gateway>,
    task: JoinHandle<()>,
}

impl Server {
    /// The gateway's shared state.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Stops accepting, closes every live run (flushing recordings), and waits up to `grace`.
    pub async fn shutdown(self, grace: Duration) {
        self.gateway.shutdown.fire();
        self.gateway.connections.close();
        if tokio::time::timeout(grace, self.gateway.connections.wait())
            .await
            .is_err()
        {
            tracing::warn!("connections did not close within the grace period");
        }
        let _ = tokio::time::timeout(grace, self.task).await;
    }
}

/// Opens the stores, binds the address and starts serving.
pub async fn start(args: &ServeArgs) -> Result<Server, StartError> {
    let sessions = open_session_service(&args.session_store_url()).await?;
    let artifacts = open_artifact_service(&args.artifact_store_url()).await?;
    let options = ModelOptions {
        sim: args.sim_config(),
        gemini: args.gemini_options(),
        openai: args.openai_options(),
    };
    let agent_config = match &args.agent {
        Some(path) => AgentConfig::load(path)?,
        None => AgentConfig::default_agent(DEFAULT_INSTRUCTION),
    };
    let agent = agent_config.build(&args.model, &|name| model_for_name(name, &options))?;
    tracing::info!(agent = agent.name(), model = args.model, "agent ready");
    let runner = Runner::new(args.app_name.clone(), agent, sessions, artifacts);
    let gateway = Arc::new(Gateway {
        runner,
        registry: SessionRegistry::default(),
        shutdown: Signal::new(),
        writer_config: WriterConfig {
            audio_lead: Duration::from_millis(args.audio_lead_ms),
            ..WriterConfig::default()
        },
        queue_capacity: args.queue_capacity,
        save_audio: args.save_audio,
        modality: args.modality,
        audio_frames: args.audio_frames,
        max_message_bytes: args.max_message_bytes,
        web_root: args.web_root.clone(),
        metrics: metrics::Metrics::default(),
        connections: TaskTracker::new(),
    });
    let listener = TcpListener::bind(args.bind)
        .await
        .map_err(|source| StartError::Bind {
            addr: args.bind,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: args.bind,
        source,
    })?;
    tracing::info!(%addr, model = %args.model, "listening on {addr}");
    let app = router(gateway.clone());
    let shutdown = gateway.shutdown.clone();
    // Audio frames are small and latency-critical: Nagle's algorithm would hold each one behind
    // the previous one's (delayed) ACK.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::warn!(%error, "could not set TCP_NODELAY");
        }
    });
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.fired().await })
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "server failed");
        }
    });
    Ok(Server {
        addr,
        gateway,
        task,
    })
}

/// The gateway's routes.
pub fn router(gateway: Arc<Gateway>) -> Router {
    let sessions = "/api/sessions/{user_id}/{session_id}";
    let protected = Router::new()
        .route("/ws/{user_id}/{session_id}", get(ws_upgrade))
        .route(
            "/api/sessions",
            get(rest::list_sessions).post(rest::create_session),
        )
        .route(
            sessions,
            get(rest::get_session).delete(rest::delete_session),
        )
        .route(&format!("{sessions}/artifacts"), get(rest::list_artifacts))
        .route(
            &format!("{sessions}/artifacts/{{name}}"),
            get(rest::download_artifact),
        )
        .route("/run", post(run_api::run))
        .route("/run_sse", post(run_api::run_sse))
        .route(
            "/apps/{app_name}/users/{user_id}/sessions",
            post(run_api::create_session),
        )
        .route(
            "/apps/{app_name}/users/{user_id}/sessions/{session_id}",
            post(run_api::create_session),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            gateway.clone(),
            auth::authorize,
        ));
    Router::new()
        .route("/", get(assets::index))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .merge(protected)
        .route("/static/{*path}", get(assets::file))
        .route("/{file}", get(assets::file))
        .with_state(gateway)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn metrics(State(gateway): State<Arc<Gateway>>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        gateway.metrics.render(),
    )
        .into_response()
}

async fn readyz(State(gateway): State<Arc<Gateway>>) -> Response {
    match gateway.runner.sessions.ping().await {
        Ok(()) => "ready".into_response(),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("session store unavailable: {error}"),
        )
            .into_response(),
    }
}

/// A JSON error response.
fn bad_request(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({"error": message})),
    )
        .into_response()
}

fn parse_options(
    gateway: &Gateway,
    query: &HashMap<String, String>,
) -> Result<ConnectOptions, String> {
    let flag = |name: &str| -> Result<bool, String> {
        match query.get(name).map(|v| v.to_ascii_lowercase()) {
            None => Ok(false),
            Some(v) if v == "true" || v == "1" => Ok(true),
            Some(v) if v == "false" || v == "0" => Ok(false),
            Some(v) => Err(format!("invalid {name} {v:?} (expected true or false)")),
        }
    };
    Ok(ConnectOptions {
        audio: match query.get("audio") {
            Some(v) => v.parse()?,
            None => gateway.audio_frames,
        },
        modality: match query.get("modality") {
            Some(v) => v.parse()?,
            None => gateway.modality,
        },
        proactivity: flag("proactivity")?,
        affective_dialog: flag("affective_dialog")?,
    })
}

async fn ws_upgrade(
    State(gateway): State<Arc<Gateway>>,
    Path((user_id, session_id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let ids = PathId::parse("user id", &user_id)
        .and_then(|u| Ok((u, PathId::parse("session id", &session_id)?)));
    let (user_id, session_id) = match ids {
        Ok(ids) => ids,
        Err(message) => return bad_request(message),
    };
    let options = match parse_options(&gateway, &query) {
        Ok(options) => options,
        Err(message) => return bad_request(message),
    };
    if gateway.shutdown.is_fired() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    let tracker = gateway.connections.clone();
    upgrade
        .max_message_size(gateway.max_message_bytes)
        .max_frame_size(gateway.max_message_bytes)
        // tungstenite's default 128 KiB read buffer is zeroed as it is refilled and held per
        // connection; client messages are 640-byte audio frames and small JSON.
        .read_buffer_size(SOCKET_READ_BUFFER)
        .write_buffer_size(SOCKET_WRITE_BUFFER)
        .on_upgrade(move |socket| {
            let (sink, stream) = socket.split();
            tracker.track_future(connection::serve_connection(
                gateway, sink, stream, user_id, session_id, options,
            ))
        })
}
