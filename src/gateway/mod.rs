//! The gateway: the axum app that pairs browser WebSockets with live runs, serves the web client,
//! and runs until shut down.

mod assets;
pub mod auth;
pub mod close;
mod codec;
pub mod config;
mod connection;
mod ids;
pub mod limits;
pub mod live_settings;
pub mod metrics;
mod pacing;
mod pg_leases;
pub mod process;
mod ready;
mod registry;
mod rest;
mod run_api;
mod serve;
pub mod telephony;
mod tls;
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
    decode_binary, decode_text, encode_event, AudioEncoding, EncodedEvent, FrameError, FrameLimits,
    InputAudioBlocks,
};
pub use config::ServeArgs;
pub use connection::{ConnectOptions, SessionLimits};
pub use ids::PathId;
pub use pg_leases::PgLeases;
pub use registry::{LeaseGuard, SessionRegistry, SharedLeases};
pub use writer::{run_writer, WriterCommand, WriterConfig, WriterExit, SOCKET_WRITE_BUFFER};

use crate::agent::config::{AgentConfig, AgentConfigError};
use crate::artifact::open_artifact_service_in;
use crate::model::{model_for_name, Modality, ModelOptions};
use crate::runner::Runner;
use crate::session::{
    is_postgres_url, open_session_service, PostgresSessionService, SessionService,
};

/// Bytes read from a client socket at a time (larger messages still arrive whole).
const SOCKET_READ_BUFFER: usize = 2048;

/// How long plain HTTP requests in flight may run on after shutdown begins.
const HTTP_GRACE: Duration = Duration::from_secs(5);

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
    /// Record input and output audio to artifacts (ADK's `RunConfig::save_live_blob`), unless a
    /// client's setup says otherwise.
    pub save_live_blob: bool,
    /// Default response modality.
    pub modality: Modality,
    /// Default downstream audio encoding.
    pub audio_frames: AudioEncoding,
    /// Largest client message.
    pub max_message_bytes: usize,
    /// Serve the web client from this folder instead of the embedded one.
    pub web_root: Option<std::path::PathBuf>,
    /// What `/metrics` reports.
    pub metrics: metrics::Metrics,
    /// Who may do what.
    pub auth: auth::Auth,
    /// Live settings every connection starts from, and what clients may change.
    pub live: live_settings::LiveDefaults,
    connections: TaskTracker,
    /// Caps on live connections and the rate of new ones.
    pub limits: Arc<limits::Limits>,
    readiness: ready::Readiness,
    /// Size limits of client messages by kind.
    pub frame_limits: FrameLimits,
    /// Bytes of media and text a live run's request queue may hold.
    pub queue_max_bytes: usize,
    /// Idle timeout and maximum duration of a WebSocket connection.
    pub session_limits: SessionLimits,
    /// Phone calls' settings and carrier secrets.
    pub telephony: telephony::Telephony,
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
    /// The session leases could not be shared through the session store.
    #[error("session leases: {0}")]
    Leases(#[source] sqlx::Error),
    /// The agent file or the agent's model could not be used.
    #[error("agent: {0}")]
    Agent(#[from] AgentConfigError),
    /// The TLS certificate or key could not be used.
    #[error("TLS: {0}")]
    Tls(String),
    /// Authentication is misconfigured, or missing where it is required.
    #[error("authentication: {0}")]
    Auth(String),
    /// A default live setting (flags, config file or agent file) is invalid.
    #[error("live settings: {0}")]
    Settings(#[from] crate::live::settings::SettingError),
    /// A telephony setting is invalid.
    #[error("telephony: {0}")]
    Telephony(String),
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
    /// `https` with TLS, else `http`.
    pub scheme: &'static str,
    gateway: Arc<Gateway>,
    task: JoinHandle<()>,
}

impl Server {
    /// The gateway's shared state.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Drains: `/readyz` turns false, no new connections are taken, every live run ends, commits
    /// and flushes its recordings, and then its client is closed with 1012 (reconnect); waits up
    /// to `grace` in all, including giving the sessions' leases back and storing the runs' last
    /// resumption handles.
    pub async fn shutdown(self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        self.gateway.shutdown.fire();
        self.gateway.connections.close();
        let drained = async {
            self.gateway.connections.wait().await;
            self.gateway.registry.idle().await;
            // The runs' last resumption handles, for the nodes that take their sessions over.
            self.gateway.runner.settle().await;
        };
        if tokio::time::timeout_at(deadline, drained).await.is_err() {
            tracing::warn!("connections did not close within the grace period");
        }
        let _ = tokio::time::timeout_at(deadline, self.task).await;
    }
}

/// Opens the stores, binds the address and starts serving.
pub async fn start(args: &ServeArgs) -> Result<Server, StartError> {
    // Checked first: a gateway that would be open to the world must not even open its stores.
    let auth = auth::Auth::new(&args.auth_options()).map_err(StartError::Auth)?;
    let (sessions, registry) = open_sessions(args).await?;
    // A bucket's recordings wait on the local disk on their way to it.
    let spool_root = args.spool_dir();
    let artifacts = open_artifact_service_in(&args.artifact_store_url(), Some(&spool_root)).await?;
    let options = ModelOptions {
        sim: args.sim_config(),
        gemini: args.gemini_options(),
        openai: args.openai_options(),
    };
    let (runner, live) = build_runner(args, &options, sessions, artifacts)?;
    crate::live::flow::set_max_unsaved_bytes(args.max_unsaved_recording_bytes);
    // The sim's delay is known; a load test reads it from here.
    let metrics = match args.model.as_str() {
        "sim" => metrics::Metrics::default().with_model_delay(args.sim_config().answer_delay()),
        _ => metrics::Metrics::default(),
    };
    let metrics = metrics.with_store_reads(runner.sessions.clone());
    let tls = open_tls(args, &metrics)?;
    let telephony =
        telephony::Telephony::new(&args.telephony, Duration::from_secs(args.drain_timeout))
            .map_err(StartError::Telephony)?;
    let limits = Arc::new(limits::Limits::new(
        args.limit_settings(),
        metrics.limits.clone(),
    ));
    let gateway = Arc::new(Gateway {
        runner,
        registry,
        shutdown: Signal::new(),
        writer_config: args.writer_config(),
        queue_capacity: args.queue_capacity,
        save_live_blob: args.save_live_blob,
        modality: args.modality,
        audio_frames: args.audio_frames,
        max_message_bytes: args.max_message_bytes,
        web_root: args.web_root.clone(),
        metrics,
        auth,
        live,
        connections: TaskTracker::new(),
        limits: limits.clone(),
        readiness: readiness(args, &options),
        frame_limits: args.frame_limits(),
        queue_max_bytes: args.queue_max_bytes,
        session_limits: args.session_limits(),
        telephony,
    });
    let (listener, addr) = bind(args.bind).await?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(%addr, model = %args.model, auth = ?gateway.auth.mode(), "listening on {addr} ({scheme})");
    if let Some(metrics_bind) = args.metrics_bind {
        serve_metrics(&gateway, metrics_bind).await?;
    }
    let app = router(gateway.clone());
    let options = serve::ServeOptions {
        header_read_timeout: Duration::from_secs(args.header_read_timeout_secs.max(1)),
        max_unfinished: serve::unfinished_cap(args.max_unfinished_connections),
        tls,
        grace: HTTP_GRACE,
    };
    let task = tokio::spawn(serve::serve(
        listener,
        app,
        limits,
        options,
        gateway.shutdown.clone(),
    ));
    Ok(Server {
        addr,
        scheme,
        gateway,
        task,
    })
}

/// The session store, and the registry that keeps one live run per session. With PostgreSQL
/// every node shares the sessions, so the one-run-per-session lease is shared too; the other
/// stores belong to one process and keep it in that process.
async fn open_sessions(
    args: &ServeArgs,
) -> Result<(Arc<dyn SessionService>, SessionRegistry), StartError> {
    let store_url = args.session_store_url();
    if is_postgres_url(&store_url) {
        let store = PostgresSessionService::open(&store_url).await?;
        let ttl = Duration::from_millis(args.lease_ttl_ms);
        let leases = PgLeases::start(store.pool().clone(), &args.app_name, ttl)
            .await
            .map_err(StartError::Leases)?;
        Ok((Arc::new(store), SessionRegistry::shared(leases)))
    } else {
        let store = open_session_service(&store_url).await?;
        Ok((store, SessionRegistry::local()))
    }
}

/// The agent (from `--agent` or the built-in one) on its model, in a runner, and the live
/// settings every connection starts from (flags over the agent file's `[live]`).
fn build_runner(
    args: &ServeArgs,
    options: &ModelOptions,
    sessions: Arc<dyn SessionService>,
    artifacts: Arc<dyn crate::artifact::ArtifactService>,
) -> Result<(Runner, live_settings::LiveDefaults), StartError> {
    let agent_config = match &args.agent {
        Some(path) => AgentConfig::load(path)?,
        None => AgentConfig::default_agent(DEFAULT_INSTRUCTION),
    };
    let agent = agent_config.build(&args.model, &|name| model_for_name(name, options))?;
    let live = live_settings::LiveDefaults {
        settings: args
            .live
            .settings()?
            .overlay(&agent_config.live.clone().unwrap_or_default()),
        client: args.live.client_settings.clone(),
    };
    tracing::info!(agent = agent.name(), model = args.model, "agent ready");
    let mut runner = Runner::new(args.app_name.clone(), agent, sessions, artifacts);
    runner.history = crate::runner::HistoryLimit {
        events: args.history_max_events,
        bytes: args.history_max_bytes,
    };
    Ok((runner, live))
}

/// The TLS certificate and key, reloaded when they change; `None` without `--tls-cert`.
fn open_tls(
    args: &ServeArgs,
    metrics: &metrics::Metrics,
) -> Result<Option<Arc<tls::ReloadingTls>>, StartError> {
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Ok(Some(Arc::new(
            tls::ReloadingTls::open(cert, key, metrics.limits.tls_reload_failures.clone())
                .map_err(|e| StartError::Tls(e.to_string()))?,
        ))),
        (None, None) => Ok(None),
        _ => Err(StartError::Tls(
            "--tls-cert and --tls-key go together".into(),
        )),
    }
}

/// What `/readyz` checks: the model's host, if `--ready-checks-model`.
fn readiness(args: &ServeArgs, options: &ModelOptions) -> ready::Readiness {
    // The host to check is the one the gateway's model lives on.
    let model_url = if crate::model::openai::is_openai_model(&args.model) {
        let id = args.model.strip_prefix(crate::model::openai::PREFIX);
        options.openai.url(id.unwrap_or(&args.model))
    } else {
        options.gemini.url()
    };
    ready::Readiness::new(ready::ModelCheck::new(
        args.ready_checks_model,
        &args.model,
        &model_url,
    ))
}

/// Binds the listen address; returns the listener and the address it got (port 0: any).
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    Ok((listener, bound))
}

/// Serves `/metrics` alone on `addr`, to anyone who reaches it, until shutdown.
async fn serve_metrics(gateway: &Arc<Gateway>, addr: SocketAddr) -> Result<(), StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    tracing::info!(addr = %bound, "serving /metrics on {bound}");
    let app = Router::new()
        .route("/metrics", get(metrics_open))
        .with_state(gateway.clone());
    let shutdown = gateway.shutdown.clone();
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.fired().await })
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "metrics server failed");
        }
    });
    Ok(())
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
        .route("/api/tokens", post(auth::mint_token))
        .route_layer(axum::middleware::from_fn_with_state(
            gateway.clone(),
            auth::authorize,
        ));
    let cors = cors(gateway.auth.allowed_origins());
    let app = Router::new()
        .route("/", get(assets::index))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/api/config", get(auth::config))
        .merge(protected)
        .merge(telephony::routes())
        .route("/static/{*path}", get(assets::file))
        .route("/{file}", get(assets::file))
        .layer(axum::middleware::from_fn_with_state(
            gateway.clone(),
            auth::guard_host,
        ))
        .with_state(gateway);
    match cors {
        Some(cors) => app.layer(cors),
        None => app,
    }
}

/// CORS for the operator's allowed origins only; none without them (same-origin pages need none).
fn cors(origins: &auth::AllowedOrigins) -> Option<tower_http::cors::CorsLayer> {
    use axum::http::{header, Method};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let origins = origins.clone();
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::predicate(move |origin, _| {
                origin.to_str().is_ok_and(|o| origins.allows(o))
            }))
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
            .max_age(Duration::from_secs(600)),
    )
}

async fn healthz() -> &'static str {
    "ok"
}

async fn metrics(
    State(gateway): State<Arc<Gateway>>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<SocketAddr>>>,
    headers: axum::http::HeaderMap,
) -> Response {
    let peer = peer.map(|axum::Extension(info)| info.0);
    if let Some(refused) = auth::refuse_metrics(&gateway, peer, &headers) {
        return refused;
    }
    metrics_open(State(gateway)).await
}

/// `/metrics` without an access check (the separate `--metrics-bind` listener).
async fn metrics_open(State(gateway): State<Arc<Gateway>>) -> Response {
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
    // A draining node takes no new sessions: the load balancer sends them elsewhere.
    if gateway.shutdown.is_fired() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    match gateway.readiness.check(&gateway.runner).await {
        Ok(()) => "ready".into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
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
    Ok(ConnectOptions {
        audio: match query.get("audio") {
            Some(v) => v.parse()?,
            None => gateway.audio_frames,
        },
        modality: match query.get("modality") {
            Some(v) => v.parse()?,
            None => gateway.modality,
        },
        settings: live_settings::query_settings(query, &gateway.live.client),
    })
}

async fn ws_upgrade(
    State(gateway): State<Arc<Gateway>>,
    axum::Extension(principal): axum::Extension<auth::Principal>,
    Path((user_id, session_id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let ids =
        PathId::parse("user id", &user_id).and_then(|u| Ok((u, PathId::new_session(&session_id)?)));
    let (user_id, session_id) = match ids {
        Ok(ids) => ids,
        Err(message) => return bad_request(message),
    };
    if let Err(denied) = principal.check_session(user_id.as_str(), session_id.as_str()) {
        return denied.into_response();
    }
    let options = match parse_options(&gateway, &query) {
        Ok(options) => options,
        Err(message) => return bad_request(message),
    };
    if gateway.shutdown.is_fired() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    let slot = match gateway.limits.admit(user_id.as_str(), session_id.as_str()) {
        Ok(slot) => slot,
        Err(refused) => return limit_response(refused),
    };
    let tracker = gateway.connections.clone();
    upgrade
        // Echoed when offered; a token offered beside it (`livegate.bearer.…`) never is.
        .protocols([auth::SUBPROTOCOL])
        .max_message_size(gateway.max_message_bytes)
        .max_frame_size(gateway.max_message_bytes)
        // tungstenite's default 128 KiB read buffer is zeroed as it is refilled and held per
        // connection; client messages are 640-byte audio frames and small JSON.
        .read_buffer_size(SOCKET_READ_BUFFER)
        .write_buffer_size(SOCKET_WRITE_BUFFER)
        .on_upgrade(move |socket| {
            let (sink, stream) = socket.split();
            tracker.track_future(async move {
                // Counted under the caps for as long as the connection lives.
                let _slot = slot;
                connection::serve_connection(gateway, sink, stream, user_id, session_id, options)
                    .await
            })
        })
}

/// The answer to a live connection a limit refused, before the upgrade.
fn limit_response(refused: limits::Refused) -> Response {
    let (status, message) = match refused {
        limits::Refused::Connections => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the gateway has its most connections; try again later",
        ),
        limits::Refused::UserSessions => (
            StatusCode::TOO_MANY_REQUESTS,
            "this user has its most live sessions",
        ),
        limits::Refused::Rate => (
            StatusCode::TOO_MANY_REQUESTS,
            "too many new connections from this address",
        ),
    };
    (
        status,
        [(axum::http::header::RETRY_AFTER, "1")],
        Json(serde_json::json!({ "error": message })),
    )
        .into_response()
}
