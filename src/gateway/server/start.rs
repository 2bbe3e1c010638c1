//! Starting and stopping a gateway: the stores, the agent's runner, the listener, the accept loop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

use crate::agent::config::{AgentConfig, AgentConfigError};
use crate::agent::Agent;
use crate::artifact::open_artifact_service_in;
use crate::gateway::auth;
use crate::gateway::cluster::pg_leases::PgLeases;
use crate::gateway::cluster::registry::SessionRegistry;
use crate::gateway::http::ready;
use crate::gateway::http::router::{metrics_open, router};
use crate::gateway::server::config::ServeArgs;
use crate::gateway::server::{config, limits, serve, tls};
use crate::gateway::state::Gateway;
use crate::gateway::telemetry::metrics;
use crate::gateway::ws::live_settings;
use crate::latch::Latch;
use crate::lock::Recover;
use crate::model::{model_for_name, ModelOptions};
use crate::runner::Runner;
use crate::session::{
    is_postgres_url, open_session_service, PostgresSessionService, SessionService,
};

/// How long plain HTTP requests in flight may run on after shutdown begins.
const HTTP_GRACE: Duration = Duration::from_secs(5);

/// Instruction of the built-in default agent.
pub const DEFAULT_INSTRUCTION: &str = "You are a helpful, concise voice assistant.";

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
    Tls(#[from] tls::TlsError),
    /// One of `--tls-cert` and `--tls-key` without the other (one from the config file, say).
    #[error("TLS: --tls-cert and --tls-key go together")]
    TlsUnpaired,
    /// Authentication is misconfigured, or missing where it is required.
    #[error("authentication: {0}")]
    Auth(#[from] crate::gateway::auth::AuthError),
    /// A default live setting (flags, config file or agent file) is invalid.
    #[error("live settings: {0}")]
    Settings(#[from] crate::live::settings::SettingError),
    /// A telephony setting is invalid.
    #[error("telephony: {0}")]
    Telephony(#[from] crate::gateway::telephony::TelephonyError),
    /// The listen address could not be bound.
    #[error("could not listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl StartError {
    /// What to change, where the message alone does not say it.
    pub fn hint(&self) -> Option<String> {
        use std::io::ErrorKind;
        match self {
            StartError::Bind { addr, source } => match source.kind() {
                ErrorKind::AddrInUse => Some(format!(
                    "another program listens on port {}: pick another port, or \
                     --bind 127.0.0.1:0 for any free one",
                    addr.port()
                )),
                ErrorKind::PermissionDenied => Some(
                    "ports below 1024 need privileges: use a port from 1024 up, e.g. \
                     --bind 127.0.0.1:8080"
                        .into(),
                ),
                ErrorKind::AddrNotAvailable => Some(format!(
                    "{} is not an address of this machine: use 127.0.0.1 (this machine only) \
                     or 0.0.0.0 (every interface)",
                    addr.ip()
                )),
                _ => None,
            },
            StartError::Sessions(_) => Some(
                "--data-dir (LIVEGATE_DATA_DIR) must name a folder livegate can create and \
                 write, or --session-store a store it can open"
                    .into(),
            ),
            StartError::Artifacts(_) => Some(
                "--data-dir (LIVEGATE_DATA_DIR) must name a folder livegate can create and \
                 write, or --artifact-store a store it can open"
                    .into(),
            ),
            _ => None,
        }
    }
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
        self.gateway.drain(grace).await;
        let _ = tokio::time::timeout_at(deadline, self.task).await;
    }
}

impl Gateway {
    /// Drains the gateway's sessions: `/readyz` turns false, the WebSocket routes take no new
    /// connections, every live run ends, commits and flushes its recordings, and then its client
    /// is closed with 1012 (reconnect); waits up to `grace`, including giving the sessions'
    /// leases back and storing the runs' last resumption handles. [`Server::shutdown`] does this
    /// before it stops listening; an application serving [`router`] itself calls it on its way
    /// down.
    pub async fn drain(&self, grace: Duration) {
        self.shutdown.fire();
        self.connections.close();
        let drained = async {
            self.connections.wait().await;
            self.registry.idle().await;
            // The runs' last resumption handles, for the nodes that take their sessions over.
            self.runner.settle().await;
        };
        if tokio::time::timeout(grace, drained).await.is_err() {
            tracing::warn!("connections did not close within the grace period");
        }
    }
}

/// Changes the agent tree a gateway built from its arguments (the agent file's, or the built-in
/// one) before it serves: adds Rust tools, toolsets and callbacks, or replaces it. An error
/// stops the start ([`StartError::Agent`]), its message said as the agent file's errors are.
pub type Customize<'a> = Box<dyn FnOnce(Agent) -> Result<Agent, CustomizeError> + Send + 'a>;

/// Why a [`Customize`] refused the agent tree: any error (`"…".into()` makes one of a message).
pub type CustomizeError = Box<dyn std::error::Error + Send + Sync>;

/// Opens the stores, binds the address and starts serving: what the `livegate` binary does.
pub async fn start(args: &ServeArgs) -> Result<Server, StartError> {
    start_with(args, Box::new(Ok)).await
}

/// [`start`], with the agent tree changed by `customize` first.
pub async fn start_with(args: &ServeArgs, customize: Customize<'_>) -> Result<Server, StartError> {
    let gateway = build(args, customize).await?;
    serve_gateway(args, gateway).await
}

/// Builds a gateway from its arguments without serving it: the stores opened, the agent (as
/// `customize` leaves it) on its model in a runner, the limits and metrics. [`router`] serves
/// it inside any axum application; [`start`] serves it on its own listener.
pub async fn build(args: &ServeArgs, customize: Customize<'_>) -> Result<Arc<Gateway>, StartError> {
    // Checked first: a gateway that would be open to the world must not even open its stores.
    let auth = auth::Auth::new(&args.auth_options())?;
    let (sessions, registry) = open_sessions(args).await?;
    // A bucket's recordings wait on the local disk on their way to it.
    let spool_root = args.spool_dir();
    let save_timeout = config::limit(args.recording_save_timeout);
    let artifacts =
        open_artifact_service_in(&args.artifact_store_url(), Some(&spool_root), save_timeout)
            .await?;
    let options = ModelOptions {
        sim: args.sim_config(),
        gemini: args.gemini_options(),
        openai: args.openai_options(),
    };
    let (runner, live) = build_runner(args, &options, sessions, artifacts, customize)?;
    crate::live::flow::set_max_unsaved_bytes(args.max_unsaved_recording_bytes);
    // The sim's delay is known; a load test reads it from here.
    let metrics = match args.model.as_str() {
        "sim" => metrics::Metrics::default().with_model_delay(args.sim_config().answer_delay()),
        _ => metrics::Metrics::default(),
    };
    let metrics = metrics
        .with_store_reads(runner.sessions.clone())
        .with_toolsets(runner.agent.toolsets());
    let telephony = crate::gateway::telephony::Telephony::new(
        &args.telephony,
        Duration::from_secs(args.drain_timeout),
    )?;
    let limits = Arc::new(limits::Limits::new(
        args.limit_settings(auth.mode()),
        metrics.limits.clone(),
    ));
    let quotas = args.quotas(auth.mode());
    Ok(Arc::new(Gateway {
        runner,
        registry,
        shutdown: Latch::new(),
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
        limits,
        readiness: readiness(args, &options),
        frame_limits: args.frame_limits(),
        queue_max_bytes: args.queue_max_bytes,
        flow_limits: args.flow_limits(),
        session_limits: args.session_limits(),
        telephony,
        message_read_timeout: config::limit(args.message_read_timeout),
        quotas,
    }))
}

/// Serves a built gateway on `args.bind` (and `--metrics-bind`), with its TLS, until shutdown.
async fn serve_gateway(args: &ServeArgs, gateway: Arc<Gateway>) -> Result<Server, StartError> {
    let tls = open_tls(args, &gateway.metrics)?;
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
        body_read_timeout: config::limit(args.body_read_timeout),
        max_body_bytes: args.max_message_bytes,
        write_timeout: config::limit(args.slow_client_timeout),
    };
    let task = tokio::spawn(serve::serve(
        listener,
        app,
        gateway.limits.clone(),
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
    customize: Customize<'_>,
) -> Result<(Runner, live_settings::LiveDefaults), StartError> {
    let agent_config = match &args.agent {
        Some(path) => AgentConfig::load(path)?,
        None => AgentConfig::default_agent(DEFAULT_INSTRUCTION),
    };
    let warned = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let agent = agent_config.build(&args.model, &|name| {
        warn_without_credentials(name, options, &warned);
        model_for_name(name, options)
    })?;
    let agent = customize(agent).map_err(|e| AgentConfigError::Invalid(e.to_string()))?;
    agent
        .validate()
        .map_err(|e| AgentConfigError::Invalid(e.to_string()))?;
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

/// Warns, once per model name, when a model the agent uses needs a key that the environment
/// does not give: each of its turns would fail with the server's refusal.
fn warn_without_credentials(
    name: &str,
    options: &ModelOptions,
    warned: &std::sync::Mutex<std::collections::BTreeSet<String>>,
) {
    let Some(needed) = crate::model::missing_credentials(name, options) else {
        return;
    };
    let mut warned = warned.lock_or_recover();
    if warned.insert(name.to_owned()) {
        tracing::warn!(
            model = name,
            "model {name} needs a key and none is set: set {needed}; every turn will fail until then"
        );
    }
}

/// The TLS certificate and key, reloaded when they change; `None` without `--tls-cert`.
fn open_tls(
    args: &ServeArgs,
    metrics: &metrics::Metrics,
) -> Result<Option<Arc<tls::ReloadingTls>>, StartError> {
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Ok(Some(Arc::new(tls::ReloadingTls::open(
            cert,
            key,
            metrics.limits.tls_reload_failures.clone(),
        )?))),
        (None, None) => Ok(None),
        _ => Err(StartError::TlsUnpaired),
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
