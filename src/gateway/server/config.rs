//! `livegate serve`'s options: flags, with `LIVEGATE_*` environment variables as fallback.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Args, FromArgMatches, ValueEnum};

pub use crate::cli::LogFormat;
use crate::gateway::auth::{AuthMode, AuthOptions, AuthSecrets, IdentityProvider};
use crate::gateway::ws::codec::AudioEncoding;
pub use crate::model::sim::Pacing;
use crate::model::Modality;

/// OpenAI Realtime's automatic turn detection, as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum OpenAiVadArg {
    /// Silence-based (`server_vad`).
    #[default]
    Server,
    /// Model-based end of turn (`semantic_vad`).
    Semantic,
}

/// Options of `livegate serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TOML file with any of these options (kebab- or snake-case keys); flags and environment
    /// variables take precedence over it.
    #[arg(long, env = "LIVEGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Listen address (port 0 picks a free port; the chosen address is logged as `listening on ADDR`).
    /// `localhost:PORT` and `:PORT` mean 127.0.0.1:PORT; 0.0.0.0:PORT listens on every interface.
    #[arg(long, env = "LIVEGATE_BIND", default_value = "127.0.0.1:8080", value_parser = parse_bind)]
    pub bind: SocketAddr,
    /// Where the default SQLite file and artifact folder live.
    #[arg(long, env = "LIVEGATE_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// Session store: `memory:`, `sqlite://PATH` or `postgres://USER@HOST/DB` (shared by several
    /// nodes) [default: sqlite://{data-dir}/livegate.db].
    #[arg(long, env = "LIVEGATE_SESSION_STORE")]
    pub session_store: Option<String>,
    /// Artifact store: `memory:`, `file://PATH`, or a bucket: `s3://BUCKET/PREFIX`, `gs://…`,
    /// `az://…` (credentials from the environment) [default: file://{data-dir}/artifacts].
    #[arg(long, env = "LIVEGATE_ARTIFACT_STORE")]
    pub artifact_store: Option<String>,
    /// Local folder where recordings wait on their way to a bucket: spool files while their
    /// turn runs, and the outbox of uploads that failed, which the next process started on the
    /// same folder takes up [default: {data-dir}/spool].
    #[arg(long, env = "LIVEGATE_SPOOL_DIR")]
    pub spool_dir: Option<PathBuf>,
    /// Model: `sim` (embedded, offline), a Gemini live model id (needs `GOOGLE_API_KEY` or
    /// `GEMINI_API_KEY`, or Vertex settings), or an OpenAI realtime model id such as
    /// `gpt-realtime`, or `openai:<id>` (needs `OPENAI_API_KEY`).
    #[arg(long, env = "LIVEGATE_MODEL", default_value = "sim")]
    pub model: String,
    /// Gemini Live base URL, e.g. `ws://127.0.0.1:9300` for `livegate mock-gemini`.
    #[arg(long, env = "LIVEGATE_GEMINI_BASE_URL", default_value = crate::model::gemini::DEFAULT_BASE_URL)]
    pub gemini_base_url: String,
    /// Gemini API version (`v1beta`, `v1alpha`; Vertex: `v1beta1`, `v1`).
    #[arg(long, env = "LIVEGATE_GEMINI_API_VERSION", default_value = crate::model::gemini::DEFAULT_API_VERSION)]
    pub gemini_api_version: String,
    /// Vertex AI project: use Vertex instead of the Developer API (token from `GOOGLE_CLOUD_ACCESS_TOKEN`).
    #[arg(long, env = "GOOGLE_CLOUD_PROJECT")]
    pub vertex_project: Option<String>,
    /// Vertex AI location.
    #[arg(long, env = "GOOGLE_CLOUD_LOCATION", default_value = "us-central1")]
    pub vertex_location: String,
    /// Agent definition (TOML) [default: one assistant with get_current_time and calculate].
    #[arg(long, env = "LIVEGATE_AGENT")]
    pub agent: Option<PathBuf>,
    /// Default response modality (a client may override it per connection with `?modality=`).
    #[arg(long, env = "LIVEGATE_MODALITY", default_value = "AUDIO", value_parser = parse_modality)]
    pub modality: Modality,
    /// Default downstream audio encoding (a client may override it with `?audio=`).
    #[arg(long, env = "LIVEGATE_AUDIO_FRAMES", default_value = "binary", value_parser = parse_audio_frames)]
    pub audio_frames: AudioEncoding,
    /// Record input and output audio to artifacts (ADK's `save_live_blob`, also accepted as the
    /// flag's name).
    #[arg(long = "save-audio", alias = "save-live-blob", env = "LIVEGATE_SAVE_AUDIO", default_value_t = true, action = ArgAction::Set)]
    pub save_live_blob: bool,
    /// Log output format.
    #[arg(long, env = "LIVEGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Export traces over OTLP/HTTP, configured by the standard `OTEL_*` variables
    /// (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`, …;
    /// docs/OBSERVABILITY.md). Off: no tracing layer is installed at all.
    #[arg(long, env = "LIVEGATE_OTEL", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub otel: bool,
    /// How far model audio may run ahead of real-time playback at the client, in milliseconds.
    #[arg(long, env = "LIVEGATE_AUDIO_LEAD_MS", default_value_t = 500)]
    pub audio_lead_ms: u64,
    /// Largest WebSocket message or HTTP request body a client may send, in bytes (larger
    /// messages close with 1009, larger bodies get 413). The default holds the largest message
    /// the protocol has: an image of `--max-media-bytes` in base64, in its JSON.
    #[arg(long, env = "LIVEGATE_MAX_MESSAGE_BYTES", default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_message_bytes: usize,
    /// Requests a live run may queue before the socket reader waits for the model.
    #[arg(long, env = "LIVEGATE_QUEUE_CAPACITY", default_value_t = crate::live::DEFAULT_QUEUE_CAPACITY)]
    pub queue_capacity: usize,
    /// `sim` model: pace answers like a speaking voice (`realtime`) or send them at once (`burst`).
    #[arg(long, env = "LIVEGATE_SIM_PACING", value_enum, default_value_t = Pacing::RealTime)]
    pub sim_pacing: Pacing,
    /// `sim` model: delay before each answer starts, in milliseconds (default 150).
    #[arg(long, env = "LIVEGATE_SIM_REPLY_DELAY_MS")]
    pub sim_reply_delay_ms: Option<u64>,
    /// `sim` model: length of each answer audio chunk, in milliseconds (default 40).
    #[arg(long, env = "LIVEGATE_SIM_CHUNK_MS")]
    pub sim_chunk_ms: Option<u32>,
    /// Serve the web client from this folder instead of the embedded one (e.g. ADK's bidi-demo
    /// `app/static`, with `--audio-frames base64`).
    #[arg(long, env = "LIVEGATE_WEB_ROOT")]
    pub web_root: Option<PathBuf>,
    /// Application name (first part of session and artifact keys).
    #[arg(long, env = "LIVEGATE_APP_NAME", default_value = "livegate")]
    pub app_name: String,
    /// Seconds a client may take to send a request's head (and its TLS handshake); an idle
    /// keep-alive connection is closed after as long.
    #[arg(long, env = "LIVEGATE_HEADER_READ_TIMEOUT_SECS", default_value_t = 10)]
    pub header_read_timeout_secs: u64,
    /// Most connections that have not finished their first request (past it the oldest is closed);
    /// never more than half the process's file descriptor limit.
    #[arg(
        long,
        env = "LIVEGATE_MAX_UNFINISHED_CONNECTIONS",
        default_value_t = 1024
    )]
    pub max_unfinished_connections: usize,
    /// Most WebSocket connections at once (beyond it: 503 before the upgrade; 0: no cap).
    #[arg(long, env = "LIVEGATE_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Most live sessions one user may have at once, WebSockets and `/run` turns alike (beyond
    /// it: 429 before any work; 0: no cap) [default: 10 with `--auth token`, no cap without: user
    /// ids are only trustworthy with authentication on].
    #[arg(long, env = "LIVEGATE_MAX_SESSIONS_PER_USER")]
    pub max_sessions_per_user: Option<usize>,
    /// Most sessions a client token's user may keep stored (creating one more: 429; 0: no cap)
    /// [default: 1000 with `--auth token`, no cap without].
    #[arg(long, env = "LIVEGATE_MAX_STORED_SESSIONS_PER_USER")]
    pub max_stored_sessions_per_user: Option<usize>,
    /// Most bytes of state (as JSON) a client token may give a session (beyond it: 413; 0: no
    /// cap) [default: 65536 with `--auth token`, no cap without].
    #[arg(long, env = "LIVEGATE_MAX_STATE_BYTES")]
    pub max_state_bytes: Option<usize>,
    /// Most requests one client address may have in flight at once (beyond it: 429; loopback
    /// addresses are not limited; 0: no cap).
    #[arg(long, env = "LIVEGATE_MAX_REQUESTS_IN_FLIGHT", default_value_t = 64)]
    pub max_requests_in_flight: usize,
    /// How long a client may take to send a request's whole body (beyond it: 408; `0` for never).
    #[arg(long, env = "LIVEGATE_BODY_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub body_read_timeout: Duration,
    /// How long a WebSocket client may take to finish a message once it has begun sending it
    /// (beyond it: close 1008; `0` for never).
    #[arg(long, env = "LIVEGATE_MESSAGE_READ_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub message_read_timeout: Duration,
    /// The longest a turn's end waits for its recordings to be saved to a bucket; a recording not
    /// saved by then waits on local disk and is saved later (`0` for no bound).
    #[arg(long, env = "LIVEGATE_RECORDING_SAVE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub recording_save_timeout: Duration,
    /// New connections one client address may open per second, in bursts of twice as many
    /// (beyond it: 429; loopback addresses are not limited; 0: no limit).
    #[arg(long, env = "LIVEGATE_CONNECTIONS_PER_SECOND", default_value_t = 20)]
    pub connections_per_second: u32,
    /// Proxies (CIDRs, comma-separated) whose `X-Forwarded-For` names the client address.
    #[arg(long, env = "LIVEGATE_TRUSTED_PROXIES", value_delimiter = ',', value_parser = parse_proxy)]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Most recent session events a live run replays to the model as history.
    #[arg(long, env = "LIVEGATE_HISTORY_MAX_EVENTS", default_value_t = crate::runner::DEFAULT_HISTORY_EVENTS)]
    pub history_max_events: usize,
    /// Most bytes of text a live run replays to the model as history (the newest kept).
    #[arg(long, env = "LIVEGATE_HISTORY_MAX_BYTES", default_value_t = crate::runner::DEFAULT_HISTORY_BYTES)]
    pub history_max_bytes: usize,
    /// `/readyz` also checks that the model can be reached (Gemini, OpenAI: a TCP connect to its host).
    #[arg(long, env = "LIVEGATE_READY_CHECKS_MODEL", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub ready_checks_model: bool,
    /// Serve `https://` and `wss://` with this PEM certificate chain (needs `--tls-key`); the
    /// files are reloaded when they change.
    #[arg(long, env = "LIVEGATE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(long, env = "LIVEGATE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Most recording audio one connection holds in memory when it cannot be saved (a full disk);
    /// beyond it audio is dropped with an error event (0: no cap).
    #[arg(long, env = "LIVEGATE_MAX_UNSAVED_RECORDING_BYTES", default_value_t = crate::live::flow::DEFAULT_MAX_UNSAVED_BYTES)]
    pub max_unsaved_recording_bytes: usize,
    /// With a `postgres://` session store: how long a node's session leases outlive its last
    /// renewal, in milliseconds (a node that dies loses its sessions to other nodes after this).
    #[arg(long, env = "LIVEGATE_LEASE_TTL_MS", default_value_t = 10_000)]
    pub lease_ttl_ms: u64,
    /// On SIGTERM or Ctrl-C, how long live connections get to end, flush and close with 1012,
    /// in seconds.
    #[arg(long, env = "LIVEGATE_DRAIN_TIMEOUT", default_value_t = 10)]
    pub drain_timeout: u64,
    /// Largest text turn a client may send, in bytes (larger ones get an INVALID_ARGUMENT error event).
    #[arg(long, env = "LIVEGATE_MAX_TEXT_BYTES", default_value_t = crate::gateway::ws::codec::DEFAULT_MAX_TEXT_BYTES)]
    pub max_text_bytes: usize,
    /// Largest binary audio frame a client may send, in bytes.
    #[arg(long, env = "LIVEGATE_MAX_AUDIO_FRAME_BYTES", default_value_t = crate::gateway::ws::codec::DEFAULT_MAX_AUDIO_FRAME_BYTES)]
    pub max_audio_frame_bytes: usize,
    /// Largest image or audio a client may send in a JSON message, in decoded bytes.
    #[arg(long, env = "LIVEGATE_MAX_MEDIA_BYTES", default_value_t = crate::gateway::ws::codec::DEFAULT_MAX_MEDIA_BYTES)]
    pub max_media_bytes: usize,
    /// Bytes of media and text a live run may queue before the socket reader waits for the model.
    #[arg(long, env = "LIVEGATE_QUEUE_MAX_BYTES", default_value_t = crate::live::DEFAULT_QUEUE_MAX_BYTES)]
    pub queue_max_bytes: usize,
    /// Close a WebSocket whose client sent nothing for this long (1008; `0` for never), e.g. `300s`, `5m`.
    #[arg(long, env = "LIVEGATE_IDLE_TIMEOUT", default_value = "300s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Close a WebSocket this long after it opened (1008; `0` for never), e.g. `4h`.
    #[arg(long, env = "LIVEGATE_MAX_SESSION_DURATION", default_value = "4h", value_parser = parse_duration)]
    pub max_session_duration: Duration,
    /// Close (1008) a client that has not read what was sent to it for this long.
    #[arg(long, env = "LIVEGATE_SLOW_CLIENT_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub slow_client_timeout: Duration,
    /// How long connecting to Gemini (TCP, TLS, WebSocket, setup) may take.
    #[arg(long, env = "LIVEGATE_GEMINI_CONNECT_TIMEOUT", default_value = "15s", value_parser = parse_duration)]
    pub gemini_connect_timeout: Duration,
    /// How long Gemini may send nothing, not even a pong to the gateway's pings, before the
    /// connection counts as lost.
    #[arg(long, env = "LIVEGATE_GEMINI_SILENCE_TIMEOUT", default_value = "15s", value_parser = parse_duration)]
    pub gemini_silence_timeout: Duration,
    /// How long OpenAI may send nothing, not even a pong to the gateway's pings, before the
    /// connection counts as lost.
    #[arg(long, env = "LIVEGATE_OPENAI_SILENCE_TIMEOUT", default_value = "15s", value_parser = parse_duration)]
    pub openai_silence_timeout: Duration,
    /// Reconnects to the model in a row without a finished answer before the run ends with
    /// `UNAVAILABLE` (goAway and resumable closes count).
    #[arg(long, env = "LIVEGATE_MODEL_MAX_RECONNECTS", default_value_t = crate::live::flow::DEFAULT_MAX_RECONNECTS)]
    pub model_max_reconnects: u32,
    /// The first reconnect's delay; each next one doubles (at most 10 s), less up to half at random.
    #[arg(long, env = "LIVEGATE_MODEL_RECONNECT_BACKOFF", default_value = "250ms", value_parser = parse_duration)]
    pub model_reconnect_backoff: Duration,
    /// How long the model may take to begin answering a turn the user ended (typed text,
    /// `activity_end`) before the turn ends with `DEADLINE_EXCEEDED`.
    #[arg(long, env = "LIVEGATE_MODEL_ANSWER_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub model_answer_timeout: Duration,
    /// Bytes of text and transcription one model turn may bring (the rest is dropped, with an error).
    #[arg(long, env = "LIVEGATE_MODEL_MAX_TURN_BYTES", default_value_t = crate::live::flow::DEFAULT_MAX_TURN_BYTES)]
    pub model_max_turn_bytes: usize,
    /// Longest resumption handle the gateway keeps, in bytes.
    #[arg(long, env = "LIVEGATE_MODEL_MAX_HANDLE_BYTES", default_value_t = crate::live::flow::DEFAULT_MAX_HANDLE_BYTES)]
    pub model_max_handle_bytes: usize,
    /// Rounds of tool calls the model may start in one user turn before the run ends.
    #[arg(long, env = "LIVEGATE_MODEL_MAX_TOOL_ROUNDS", default_value_t = crate::live::flow::DEFAULT_MAX_TOOL_ROUNDS)]
    pub model_max_tool_rounds: u32,
    /// Least microphone audio per message to a model server (Gemini, OpenAI), in milliseconds:
    /// shorter client frames are gathered into chunks this long, at most 100 (`0`: each frame as
    /// it came). Fewer messages cost less CPU on both ends; a chunk's first frame waits up to the
    /// chunk's length less one frame. `sim` runs in process and takes every frame at once.
    #[arg(long, env = "LIVEGATE_UPSTREAM_AUDIO_CHUNK_MS", default_value_t = 20, value_parser = parse_audio_chunk_ms)]
    pub upstream_audio_chunk_ms: u64,
    /// Authentication: `none` (anyone who reaches the port; the default on a loopback bind) or
    /// `token` (operator API keys and client tokens; the default elsewhere).
    #[arg(long, env = "LIVEGATE_AUTH", value_enum)]
    pub auth: Option<AuthMode>,
    /// Serve a non-loopback address without authentication, on purpose.
    #[arg(long, env = "LIVEGATE_ALLOW_ANONYMOUS")]
    pub allow_anonymous: bool,
    /// File of operator API keys, one per line (or comma-separated); also `LIVEGATE_API_KEYS`.
    #[arg(long, env = "LIVEGATE_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,
    /// PEM public key (RSA, EC P-256 or Ed25519) of an identity provider whose tokens are accepted.
    #[arg(long, env = "LIVEGATE_AUTH_PUBLIC_KEY")]
    pub auth_public_key: Option<PathBuf>,
    /// The `iss` the identity provider's tokens must carry.
    #[arg(long, env = "LIVEGATE_AUTH_ISSUER")]
    pub auth_issuer: Option<String>,
    /// The `aud` the identity provider's tokens must carry.
    #[arg(long, env = "LIVEGATE_AUTH_AUDIENCE")]
    pub auth_audience: Option<String>,
    /// Other origins whose pages may use the gateway, comma-separated (`https://app.example.com`,
    /// `https://*.example.com`); same-origin pages always may.
    #[arg(long, env = "LIVEGATE_ALLOWED_ORIGINS")]
    pub allowed_origins: Option<String>,
    /// Also serve `/metrics`, to anyone who reaches it, on this address (e.g. an internal one).
    #[arg(long, env = "LIVEGATE_METRICS_BIND")]
    pub metrics_bind: Option<SocketAddr>,
    /// Token secret and API keys, read from the environment by [`AuthSecrets::from_env`], never
    /// from flags.
    #[arg(skip)]
    pub secrets: AuthSecrets,
    /// Default live settings (voice, language, VAD, compression, …) and what clients may change.
    #[command(flatten)]
    pub live: crate::gateway::ws::live_settings::LiveArgs,
    /// Phone calls: the carriers' webhooks and media streams.
    #[command(flatten)]
    pub telephony: crate::gateway::telephony::TelephonyArgs,
    /// OpenAI Realtime base URL (`/realtime?model=` is added), e.g. `ws://127.0.0.1:9400` for
    /// `livegate mock-openai`, or `https://RESOURCE.openai.azure.com/openai/v1` for Azure OpenAI
    /// (key from `OPENAI_API_KEY`; Azure: `AZURE_OPENAI_API_KEY` first).
    #[arg(long, env = "LIVEGATE_OPENAI_BASE_URL", default_value = crate::model::openai::DEFAULT_BASE_URL)]
    pub openai_base_url: String,
    /// Send the OpenAI key as Azure's `api-key` header even if the host is not `*.openai.azure.com`.
    #[arg(long, env = "LIVEGATE_OPENAI_AZURE", default_value_t = false, action = ArgAction::Set)]
    pub openai_azure: bool,
    /// OpenAI Realtime turn detection when the agent leaves automatic detection on.
    #[arg(long, env = "LIVEGATE_OPENAI_VAD", value_enum, default_value_t = OpenAiVadArg::Server)]
    pub openai_vad: OpenAiVadArg,
}

impl ServeArgs {
    /// Defaults for everything, as with no flags and no environment (for tests and embedding):
    /// the flags' own defaults, so each is written once, in its declaration.
    pub fn defaults() -> Self {
        crate::cli::defaults_of()
    }

    /// The auth settings these options ask for.
    pub fn auth_options(&self) -> AuthOptions<'_> {
        let provider = self.auth_public_key.as_ref().map(|key| IdentityProvider {
            public_key: key.clone(),
            issuer: self.auth_issuer.clone().unwrap_or_default(),
            audience: self.auth_audience.clone().unwrap_or_default(),
        });
        AuthOptions {
            bind: self.bind,
            mode: self.auth,
            allow_anonymous: self.allow_anonymous,
            api_keys_file: self.api_keys_file.as_ref(),
            provider,
            allowed_origins: self.allowed_origins.as_deref(),
            secrets: &self.secrets,
        }
    }

    /// Settings of the `sim` model from the `--sim-*` options.
    pub fn sim_config(&self) -> crate::model::sim::SimConfig {
        crate::model::sim::SimConfig::from_options(
            self.sim_pacing,
            self.sim_reply_delay_ms,
            self.sim_chunk_ms,
        )
    }

    /// How to reach Gemini: these options plus the credentials from the environment, which are
    /// read here (never stored in the args, which get logged).
    pub fn gemini_options(&self) -> crate::model::gemini::GeminiOptions {
        use crate::model::gemini::{GeminiOptions, Secret, VertexOptions};
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let vertex = self.vertex_project.as_ref().map(|project| VertexOptions {
            project: project.clone(),
            location: self.vertex_location.clone(),
            access_token: Secret::new(env("GOOGLE_CLOUD_ACCESS_TOKEN").unwrap_or_default()),
        });
        let api_version = match (&vertex, self.gemini_api_version.as_str()) {
            (Some(_), crate::model::gemini::DEFAULT_API_VERSION) => "v1beta1".to_owned(),
            (_, version) => version.to_owned(),
        };
        GeminiOptions {
            api_key: env("GOOGLE_API_KEY")
                .or_else(|| env("GEMINI_API_KEY"))
                .map(Secret::new),
            base_url: self.gemini_base_url.clone(),
            api_version,
            vertex,
            connect_timeout: self.gemini_connect_timeout,
            silence_timeout: self.gemini_silence_timeout,
            audio_chunk: Duration::from_millis(self.upstream_audio_chunk_ms),
        }
    }

    /// How to reach OpenAI Realtime: these options plus the key from the environment, read here
    /// (never stored in the args, which get logged).
    pub fn openai_options(&self) -> crate::model::openai::OpenAiOptions {
        use crate::model::gemini::Secret;
        use crate::model::openai::{OpenAiOptions, Vad};
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut options = OpenAiOptions {
            base_url: self.openai_base_url.clone(),
            azure: self.openai_azure,
            vad: match self.openai_vad {
                OpenAiVadArg::Server => Vad::Server,
                OpenAiVadArg::Semantic => Vad::Semantic,
            },
            playout_lead: std::time::Duration::from_millis(self.audio_lead_ms),
            audio_chunk: Duration::from_millis(self.upstream_audio_chunk_ms),
            silence_timeout: self.openai_silence_timeout,
            ..OpenAiOptions::default()
        };
        let azure_key = options
            .is_azure()
            .then(|| env("AZURE_OPENAI_API_KEY"))
            .flatten();
        options.api_key = azure_key.or_else(|| env("OPENAI_API_KEY")).map(Secret::new);
        options
    }

    /// What every live run allows its model server.
    pub fn flow_limits(&self) -> crate::live::flow::FlowLimits {
        crate::live::flow::FlowLimits {
            max_reconnects: self.model_max_reconnects,
            reconnect_backoff: self.model_reconnect_backoff,
            answer_timeout: self.model_answer_timeout,
            max_turn_bytes: self.model_max_turn_bytes,
            max_handle_bytes: self.model_max_handle_bytes,
            max_tool_rounds: self.model_max_tool_rounds,
        }
    }

    /// Every connection's writer settings.
    pub fn writer_config(&self) -> crate::gateway::ws::writer::WriterConfig {
        crate::gateway::ws::writer::WriterConfig {
            audio_lead: Duration::from_millis(self.audio_lead_ms),
            send_timeout: self.slow_client_timeout,
            ..crate::gateway::ws::writer::WriterConfig::default()
        }
    }

    /// Size limits of client messages by kind.
    pub fn frame_limits(&self) -> crate::gateway::ws::codec::FrameLimits {
        crate::gateway::ws::codec::FrameLimits {
            text_bytes: self.max_text_bytes,
            audio_frame_bytes: self.max_audio_frame_bytes,
            media_bytes: self.max_media_bytes,
        }
    }

    /// Idle timeout and maximum duration of a WebSocket connection.
    pub fn session_limits(&self) -> crate::gateway::server::limits::SessionLimits {
        crate::gateway::server::limits::SessionLimits {
            idle: limit(self.idle_timeout),
            max_duration: limit(self.max_session_duration),
        }
    }

    /// Caps on live connections, requests and their rate, with the defaults of auth `mode`.
    pub fn limit_settings(&self, mode: AuthMode) -> crate::gateway::server::limits::LimitSettings {
        crate::gateway::server::limits::LimitSettings {
            max_connections: self.max_connections,
            max_sessions_per_user: with_auth(mode, self.max_sessions_per_user, 10),
            connections_per_second: self.connections_per_second,
            trusted_proxies: self.trusted_proxies.clone(),
            max_requests_in_flight: self.max_requests_in_flight,
        }
    }

    /// What a client token's user may keep, with the defaults of auth `mode`.
    pub fn quotas(&self, mode: AuthMode) -> crate::gateway::server::quota::Quotas {
        crate::gateway::server::quota::Quotas {
            stored_sessions: with_auth(mode, self.max_stored_sessions_per_user, 1000),
            state_bytes: with_auth(mode, self.max_state_bytes, 64 * 1024),
        }
    }

    /// The folder where a bucket's recordings wait, with the data-dir default filled in.
    pub fn spool_dir(&self) -> PathBuf {
        self.spool_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("spool"))
    }

    /// The session store URL, with the data-dir default filled in.
    pub fn session_store_url(&self) -> String {
        self.session_store
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("livegate.db").display()))
    }

    /// The artifact store URL, with the data-dir default filled in.
    pub fn artifact_store_url(&self) -> String {
        self.artifact_store
            .clone()
            .unwrap_or_else(|| format!("file://{}", self.data_dir.join("artifacts").display()))
    }
}

/// Largest client message by default: a JSON image of the default `--max-media-bytes` (1 MiB,
/// 1.34 MiB in base64) with room to spare, 1.5 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1536 * 1024;

/// A per-user cap as set, or by default `token_default` with authentication and none (0)
/// without: without it, anyone may name any user.
fn with_auth(mode: AuthMode, set: Option<usize>, token_default: usize) -> usize {
    set.unwrap_or(match mode {
        AuthMode::Token => token_default,
        AuthMode::None => 0,
    })
}

/// A configuration file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has an unknown or mistyped option.
    #[error("invalid config file {}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The gateway's options alone as a command line, for [`ServeArgs::from_command_line`].
#[derive(Debug, clap::Parser)]
#[command(version = crate::BUILD)]
struct ServeOnly {
    #[command(flatten)]
    serve: ServeArgs,
}

impl ServeArgs {
    /// The options of this process's command line (the flags of `livegate serve`, with their
    /// environment variables), completed by [`ServeArgs::prepare`]. For a program of its own
    /// that serves the gateway; `--help` and a bad flag print and exit, as clap does.
    pub fn from_command_line() -> Result<Self, ConfigError> {
        use clap::{CommandFactory, FromArgMatches};
        let matches = ServeOnly::command().get_matches();
        let mut args = match ServeOnly::from_arg_matches(&matches) {
            Ok(only) => only.serve,
            Err(error) => error.exit(),
        };
        args.prepare(&matches)?;
        Ok(args)
    }

    /// Completes options parsed from a command line as the `livegate` binary does: the
    /// `--config` file fills what flags and environment variables left unset, and the secrets
    /// (token secret, API keys, the carriers') are read from the environment.
    pub fn prepare(&mut self, matches: &ArgMatches) -> Result<(), ConfigError> {
        self.apply_config_file(matches)?;
        self.secrets = AuthSecrets::from_env();
        self.telephony.secrets = crate::gateway::telephony::TelephonySecrets::from_env();
        Ok(())
    }

    /// Fills every option not given as a flag or environment variable from `--config`, if set.
    /// `matches` are the parsed arguments these args came from (they tell what was explicit).
    pub fn apply_config_file(&mut self, matches: &ArgMatches) -> Result<(), ConfigError> {
        let Some(path) = self.config.clone() else {
            return Ok(());
        };
        let file = ConfigFile::read(&path)?;
        let options = file.matches(matches)?;
        self.update_from_arg_matches(&options)
            .map_err(|e| file.invalid(reason(&e)))?;
        // Below each `--voice`-style flag, which `LiveArgs::settings` lays over it.
        self.live.file = file.live;
        Ok(())
    }
}

/// A config file, read and checked: each key is a flag's long name (or an alias), and its value
/// goes through that flag's own parser, so an option is declared once, in [`ServeArgs`], for
/// flags, environment and file alike.
struct ConfigFile {
    path: PathBuf,
    /// Each option the file sets, as flag arguments.
    options: Vec<FileOption>,
    /// The `[live]` table: live settings, below their flags.
    live: Option<crate::live::settings::LiveSettings>,
}

/// One option of a config file.
struct FileOption {
    /// The option's clap id (its field's name), which says whether it was explicit.
    id: String,
    /// Where it is, for errors: ` at line N`, or nothing.
    line: String,
    /// `--long=value`, once per value.
    args: Vec<String>,
}

impl ConfigFile {
    /// Reads and checks a config file; snake_case keys mean the same as kebab-case ones.
    fn read(path: &std::path::Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut file = ConfigFile {
            path: path.to_owned(),
            options: Vec::new(),
            live: None,
        };
        let table: toml::Table =
            toml::from_str(&text).map_err(|e| file.invalid(e.message().trim().to_owned()))?;
        let command = file_command();
        for (key, value) in table {
            let key = key.replace('_', "-");
            if key == "live" {
                let live = value
                    .try_into()
                    .map_err(|e| file.invalid(format!("live: {e}")))?;
                file.live = Some(live);
                continue;
            }
            let arg = settable(&command, &key).map_err(|why| file.invalid(why.say(&key, &text)))?;
            let line = line_of(&key, &text);
            let long = arg.get_long().unwrap_or(&key);
            let many = matches!(arg.get_action(), ArgAction::Append);
            let values = flag_values(value, many).map_err(|expected| {
                file.invalid(format!("{}{line}: expected {expected}", arg.get_id()))
            })?;
            file.options.push(FileOption {
                id: arg.get_id().to_string(),
                line,
                args: values.iter().map(|v| format!("--{long}={v}")).collect(),
            });
        }
        Ok(file)
    }

    /// The file's options that no flag or environment variable set (in `explicit`), parsed.
    fn matches(&self, explicit: &ArgMatches) -> Result<ArgMatches, ConfigError> {
        let unset: Vec<&FileOption> = self
            .options
            .iter()
            .filter(|option| {
                matches!(
                    explicit.value_source(&option.id),
                    None | Some(ValueSource::DefaultValue)
                )
            })
            .collect();
        let args = unset.iter().flat_map(|option| &option.args);
        file_command().try_get_matches_from(args).map_err(|error| {
            // The one option to blame, said with its line; else what clap said of them all.
            let blamed = unset.iter().find_map(|option| {
                let alone = file_command().try_get_matches_from(&option.args).err()?;
                Some(format!("{}{}: {}", option.id, option.line, reason(&alone)))
            });
            self.invalid(blamed.unwrap_or_else(|| reason(&error)))
        })
    }

    fn invalid(&self, message: String) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.clone(),
            message,
        }
    }
}

/// [`ServeArgs`] as a config file sets them: no defaults and no environment (an option the file
/// leaves out is left as the command line had it), no `requires` (its partner may be a flag),
/// switches take `true` or `false`, and value names any case, as a file's always could.
fn file_command() -> clap::Command {
    let command = clap::Command::new("livegate")
        .no_binary_name(true)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .color(clap::ColorChoice::Never);
    ServeArgs::augment_args(command).mut_args(|arg| {
        let arg = arg
            .env(None)
            .default_value(None)
            .requires(clap::builder::Resettable::Reset)
            .ignore_case(true);
        match arg.get_action() {
            ArgAction::SetTrue => arg.action(ArgAction::Set),
            _ => arg,
        }
    })
}

/// Why a config file's key cannot be set at its top level.
enum Refused {
    /// It names no option.
    Unknown {
        /// The option nearest to it, if one is near.
        nearest: Option<String>,
    },
    /// A live setting, whose place is the `[live]` table.
    Live,
    /// `config`: a file names no other.
    Config,
}

impl Refused {
    /// The error's message, naming `key` and its line in `text`.
    fn say(&self, key: &str, text: &str) -> String {
        let line = line_of(key, text);
        match self {
            Refused::Unknown { nearest } => {
                let nearest = nearest
                    .as_ref()
                    .map_or_else(String::new, |name| format!(": did you mean {name:?}?"));
                format!("unknown option {key:?}{line}{nearest}")
            }
            Refused::Live => format!("{key:?}{line} is a live setting: set it in the [live] table"),
            Refused::Config => format!("{key:?}{line}: a config file cannot name another"),
        }
    }
}

/// The option a config file's top-level `key` sets (`key` is kebab-case).
fn settable<'a>(command: &'a clap::Command, key: &str) -> Result<&'a clap::Arg, Refused> {
    let names = |arg: &'a clap::Arg| {
        arg.get_long()
            .into_iter()
            .chain(arg.get_all_aliases().unwrap_or_default())
    };
    let Some(arg) = command
        .get_arguments()
        .find(|arg| names(arg).any(|name| name == key))
    else {
        // `[live]` is the table of the `--voice`-style live settings.
        let nearest = command
            .get_arguments()
            .flat_map(names)
            .chain(["live"])
            .map(|name| (strsim::damerau_levenshtein(key, name), name))
            .min()
            .filter(|(distance, _)| *distance <= 3)
            .map(|(_, name)| name.to_owned());
        return Err(Refused::Unknown { nearest });
    };
    let live =
        crate::gateway::ws::live_settings::LiveArgs::augment_args(clap::Command::new("live"));
    let is_live = live.get_arguments().any(|a| a.get_id() == arg.get_id());
    match arg.get_id().as_str() {
        "config" => Err(Refused::Config),
        // The allow-list is the gateway's own, not a setting.
        "client_settings" => Ok(arg),
        _ if is_live => Err(Refused::Live),
        _ => Ok(arg),
    }
}

/// Where `key` is set in a config file's `text`: ` at line N`, or nothing if it cannot be told.
fn line_of(key: &str, text: &str) -> String {
    text.lines()
        .position(|line| {
            let line = line.trim_start().trim_start_matches('[').replace('_', "-");
            line.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with(['=', ']']))
        })
        .map_or_else(String::new, |i| format!(" at line {}", i + 1))
}

/// A config file's value as a flag's values: a list only where the flag takes several (`many`);
/// otherwise the kind of value expected.
fn flag_values(value: toml::Value, many: bool) -> Result<Vec<String>, &'static str> {
    let scalar = |value: toml::Value| match value {
        toml::Value::String(s) => Ok(s),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(x) => Ok(x.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        toml::Value::Datetime(d) => Ok(d.to_string()),
        toml::Value::Array(_) | toml::Value::Table(_) => Err("a string, a number or a boolean"),
    };
    match value {
        toml::Value::Array(items) if many => items.into_iter().map(scalar).collect(),
        toml::Value::Array(_) => Err("one value, not a list"),
        value => scalar(value).map(|value| vec![value]),
    }
}

/// What clap's error says is wrong with a value, without its usage text: the value parser's own
/// error where there is one, else the values it takes.
fn reason(error: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    if let Some(source) = std::error::Error::source(error) {
        return source.to_string();
    }
    let value = match error.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(value)) => value.as_str(),
        _ => "",
    };
    match error.get(ContextKind::ValidValue) {
        Some(ContextValue::Strings(valid)) => {
            format!("{value:?} is not one of {}", valid.join(", "))
        }
        _ => {
            let text = error.to_string();
            let first = text.lines().next().unwrap_or_default();
            first.trim_start_matches("error: ").to_owned()
        }
    }
}

/// How a listen address is written, for the errors that ask for one.
const BIND_EXAMPLE: &str =
    "e.g. 127.0.0.1:8080 (this machine only) or 0.0.0.0:8080 (every interface)";

/// Why an option's value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadValue {
    /// A listen address without a port.
    #[error("{0:?} has no port: give an address and a port, {BIND_EXAMPLE}")]
    NoPort(String),
    /// A listen address whose port is not one.
    #[error("{0:?} is not a port (0 to 65535), {BIND_EXAMPLE}")]
    Port(String),
    /// A listen address whose host is not an IP address (nor `localhost`).
    #[error("{0:?} is not an IP address to listen on: {BIND_EXAMPLE}")]
    Host(String),
    /// An audio chunk length that is not whole milliseconds up to the most.
    #[error("expected whole milliseconds from 0 to {max}, got {value:?}")]
    ChunkMs {
        /// The value as given.
        value: String,
        /// The longest chunk, in milliseconds.
        max: u128,
    },
    /// A trusted proxy that is neither a CIDR nor an address.
    #[error("{0:?} is not a CIDR or an IP address")]
    Proxy(String),
    /// A duration without a number.
    #[error("invalid duration {0:?} (expected e.g. 250ms, 10s, 5m, 4h)")]
    Duration(String),
    /// A duration too long to hold.
    #[error("duration {0:?} is too long")]
    DurationTooLong(String),
    /// A duration in a unit there is not.
    #[error("unknown unit {unit:?} in duration {value:?} (expected ms, s, m or h)")]
    DurationUnit {
        /// The unit.
        unit: String,
        /// The duration as given.
        value: String,
    },
}

/// A listen address as people type it: an IP address and a port (`127.0.0.1:8080`,
/// `[::1]:8080`, `0.0.0.0:8080`), or `localhost:PORT` / `:PORT` for the loopback address.
pub fn parse_bind(value: &str) -> Result<SocketAddr, BadValue> {
    let value = value.trim();
    if let Ok(addr) = value.parse() {
        return Ok(addr);
    }
    let Some((host, port)) = value.rsplit_once(':') else {
        return Err(BadValue::NoPort(value.to_owned()));
    };
    let port: u16 = port.parse().map_err(|_| BadValue::Port(port.to_owned()))?;
    match host {
        "" | "localhost" => Ok(SocketAddr::from(([127, 0, 0, 1], port))),
        _ => Err(BadValue::Host(host.to_owned())),
    }
}

fn parse_audio_chunk_ms(s: &str) -> Result<u64, BadValue> {
    let max = crate::model::MAX_AUDIO_CHUNK.as_millis();
    match s.trim().parse::<u64>() {
        Ok(ms) if u128::from(ms) <= max => Ok(ms),
        _ => Err(BadValue::ChunkMs {
            value: s.to_owned(),
            max,
        }),
    }
}

fn parse_modality(s: &str) -> Result<Modality, crate::model::UnknownModality> {
    s.parse()
}

fn parse_audio_frames(
    s: &str,
) -> Result<AudioEncoding, crate::gateway::ws::codec::UnknownAudioEncoding> {
    s.parse()
}

/// A trusted proxy: a CIDR, or one address.
fn parse_proxy(s: &str) -> Result<ipnet::IpNet, BadValue> {
    let s = s.trim();
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| BadValue::Proxy(s.to_owned()))
}

/// A duration as `250ms`, `10s`, `5m`, `4h` or plain seconds (`10`).
pub fn parse_duration(s: &str) -> Result<Duration, BadValue> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| BadValue::Duration(s.to_owned()))?;
    let seconds = |factor: u64| {
        number
            .checked_mul(factor)
            .map(Duration::from_secs)
            .ok_or_else(|| BadValue::DurationTooLong(s.to_owned()))
    };
    match unit.trim() {
        "ms" => Ok(Duration::from_millis(number)),
        "" | "s" => seconds(1),
        "m" | "min" => seconds(60),
        "h" => seconds(3600),
        other => Err(BadValue::DurationUnit {
            unit: other.to_owned(),
            value: s.to_owned(),
        }),
    }
}

/// `None` for a zero duration (no limit).
pub fn limit(duration: Duration) -> Option<Duration> {
    (!duration.is_zero()).then_some(duration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ServeArgs,
    }

    fn parse(argv: &[&str]) -> Result<ServeArgs, ConfigError> {
        let matches = Cli::command().get_matches_from(argv);
        let mut args = Cli::from_arg_matches(&matches).map(|c| c.args).unwrap();
        args.apply_config_file(&matches)?;
        Ok(args)
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        std::fs::write(&path, "bind = \"127.0.0.1:9999\"\nmodality = \"TEXT\"\nsave_audio = false\nsim-pacing = \"burst\"\nsim-chunk-ms = 200\n").unwrap();
        let config = path.to_str().unwrap();
        let args = parse(&["livegate", "--config", config, "--bind", "127.0.0.1:7777"]).unwrap();
        assert_eq!(
            args.bind,
            SocketAddr::from(([127, 0, 0, 1], 7777)),
            "the flag wins"
        );
        assert_eq!(args.modality, Modality::Text, "the file beats the default");
        assert!(!args.save_live_blob);
        assert_eq!(args.sim_pacing, Pacing::Burst);
        assert_eq!(args.sim_config().chunk_ms, 200);
        assert_eq!(args.model, "sim", "untouched options keep their defaults");
    }

    #[test]
    fn a_misspelt_key_is_named_with_its_line_and_the_nearest_option() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        std::fs::write(&path, "model = \"sim\"\n\nbnid = \"127.0.0.1:1\"\n").unwrap();
        let error = parse(&["livegate", "--config", path.to_str().unwrap()]).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("\"bnid\" at line 3"), "{message}");
        assert!(message.contains("did you mean \"bind\""), "{message}");
        std::fs::write(&path, "max_conections = 5\n").unwrap();
        let error = parse(&["livegate", "--config", path.to_str().unwrap()]).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("at line 1: did you mean \"max-connections\""),
            "{error}"
        );
    }

    #[test]
    fn a_file_sets_switches_lists_and_empty_values_as_their_flags_take_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        let config = path.to_str().unwrap();
        std::fs::write(
            &path,
            "allow_anonymous = true\ntelephony-state-prefix = \"\"\nlog-format = \"JSON\"\n\
             trusted-proxies = \"10.0.0.0/8,192.0.2.1\"\notel = true\n",
        )
        .unwrap();
        let args = parse(&["livegate", "--config", config]).unwrap();
        assert!(args.allow_anonymous);
        assert_eq!(args.telephony.telephony_state_prefix, "");
        assert_eq!(args.log_format, LogFormat::Json, "any case, as before");
        assert_eq!(args.trusted_proxies.len(), 2);
        assert!(args.otel);
        std::fs::write(
            &path,
            "allow-anonymous = false\nready-checks-model = true\n",
        )
        .unwrap();
        let args = parse(&["livegate", "--config", config, "--allow-anonymous"]).unwrap();
        assert!(args.allow_anonymous, "the switch wins");
        assert!(args.ready_checks_model);
    }

    #[test]
    fn keys_the_top_level_cannot_set_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        let config = path.to_str().unwrap();
        for (text, says) in [
            (
                "voice = \"Kore\"\n",
                "\"voice\" at line 1 is a live setting: set it in the [live] table",
            ),
            ("config = \"other.toml\"\n", "cannot name another"),
            (
                "bind = [\"127.0.0.1:1\"]\n",
                "bind at line 1: expected one value, not a list",
            ),
            ("max-connections = [1]\n", "expected one value, not a list"),
            (
                "[otel]\n",
                "otel at line 1: expected a string, a number or a boolean",
            ),
            (
                "\nmax-connections = \"many\"\n",
                "max_connections at line 2: invalid digit",
            ),
            (
                "log-format = \"xml\"\n",
                "log_format at line 1: \"xml\" is not one of text, json",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let error = parse(&["livegate", "--config", config])
                .unwrap_err()
                .to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn the_defaults_are_the_declared_ones() {
        let args = ServeArgs::defaults();
        assert_eq!(args.bind, SocketAddr::from(([127, 0, 0, 1], 8080)));
        assert_eq!(args.idle_timeout, Duration::from_secs(300));
        assert_eq!(
            args.model_reconnect_backoff,
            crate::live::flow::DEFAULT_RECONNECT_BACKOFF
        );
        assert_eq!(
            args.openai_silence_timeout,
            crate::model::openai::DEFAULT_SILENCE_TIMEOUT
        );
        assert_eq!(args.telephony.telephony_dtmf_gap_ms, 1500);
        assert!(args.save_live_blob && !args.otel && !args.allow_anonymous);
        assert_eq!(args.session_store, None);
        let live = crate::gateway::ws::live_settings::LiveArgs::default();
        assert_eq!(args.live.client_settings, live.client_settings);
    }

    #[test]
    fn bind_takes_localhost_and_a_bare_port_as_loopback() {
        let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
        assert_eq!(parse_bind("localhost:8081"), Ok(loopback(8081)));
        assert_eq!(parse_bind(":8082"), Ok(loopback(8082)));
        assert_eq!(
            parse_bind("0.0.0.0:80"),
            Ok(SocketAddr::from(([0, 0, 0, 0], 80)))
        );
        assert_eq!(parse_bind("[::1]:9"), Ok("[::1]:9".parse().unwrap()));
        for bad in ["example.com:80", "8080", "localhost:http", ":70000"] {
            let error = parse_bind(bad).unwrap_err().to_string();
            assert!(error.contains("127.0.0.1:8080"), "{bad}: {error}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        std::fs::write(&path, "bind = \"localhost:9998\"\n").unwrap();
        let args = parse(&["livegate", "--config", path.to_str().unwrap()]).unwrap();
        assert_eq!(args.bind, loopback(9998), "in the file too");
        let args = parse(&["livegate", "--bind", ":9997"]).unwrap();
        assert_eq!(args.bind, loopback(9997));
    }

    #[test]
    fn save_audio_is_also_accepted_as_save_live_blob() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        let config = path.to_str().unwrap();
        for key in [
            "save-audio",
            "save_audio",
            "save-live-blob",
            "save_live_blob",
        ] {
            std::fs::write(&path, format!("{key} = false\n")).unwrap();
            let args = parse(&["livegate", "--config", config]).unwrap();
            assert!(!args.save_live_blob, "{key} in the file");
        }
        for flag in ["--save-audio", "--save-live-blob"] {
            let args = parse(&["livegate", flag, "false"]).unwrap();
            assert!(!args.save_live_blob, "{flag}");
            // The flag wins over the file whichever name either uses.
            std::fs::write(&path, "save-audio = true\n").unwrap();
            let args = parse(&["livegate", "--config", config, flag, "false"]).unwrap();
            assert!(!args.save_live_blob, "{flag} over the file");
        }
        assert!(
            parse(&["livegate"]).unwrap().save_live_blob,
            "on by default"
        );
    }

    #[test]
    fn limits_and_tls_come_from_flags_or_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        std::fs::write(
            &path,
            "max-connections = 7\nmax_sessions_per_user = 3\ntrusted-proxies = [\"10.0.0.0/8\", \"192.0.2.1\"]\nheader-read-timeout-secs = 4\ntls-cert = \"c.pem\"\ntls-key = \"k.pem\"\nmax-unsaved-recording-bytes = 1024\n",
        )
        .unwrap();
        let config = path.to_str().unwrap();
        let args = parse(&["livegate", "--config", config, "--max-connections", "9"]).unwrap();
        assert_eq!(args.max_connections, 9, "the flag wins");
        assert_eq!(args.max_sessions_per_user, Some(3));
        assert_eq!(args.header_read_timeout_secs, 4);
        assert_eq!(args.max_unsaved_recording_bytes, 1024);
        assert_eq!(
            args.trusted_proxies,
            vec![
                "10.0.0.0/8".parse::<ipnet::IpNet>().unwrap(),
                "192.0.2.1/32".parse().unwrap()
            ]
        );
        assert_eq!(args.tls_cert, Some(PathBuf::from("c.pem")));
        let defaults = parse(&["livegate"]).unwrap();
        assert_eq!(defaults.connections_per_second, 20);
        assert_eq!(
            defaults
                .limit_settings(AuthMode::None)
                .max_sessions_per_user,
            0,
            "no per-user cap where user ids are not authenticated"
        );
        assert_eq!(defaults.tls_cert, None);
        std::fs::write(&path, "trusted-proxies = [\"not-an-ip\"]").unwrap();
        let error = parse(&["livegate", "--config", config]).unwrap_err();
        assert!(error.to_string().contains("trusted_proxies"), "{error}");
    }

    #[test]
    fn limits_come_from_flags_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        std::fs::write(
            &path,
            "max-text-bytes = 1000\nidle_timeout = \"2m\"\nslow-client-timeout = \"1500ms\"\n",
        )
        .unwrap();
        let config = path.to_str().unwrap();
        let args = parse(&["livegate", "--config", config, "--idle-timeout", "0"]).unwrap();
        assert_eq!(args.max_text_bytes, 1000);
        assert_eq!(args.idle_timeout, Duration::ZERO, "the flag wins");
        assert_eq!(limit(args.idle_timeout), None, "zero is no limit");
        assert_eq!(args.slow_client_timeout, Duration::from_millis(1500));
        assert_eq!(args.max_session_duration, Duration::from_secs(4 * 3600));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
    }

    #[test]
    fn per_user_quotas_default_on_with_auth_and_off_without() {
        let args = parse(&["livegate"]).unwrap();
        let token = args.limit_settings(AuthMode::Token);
        assert_eq!(token.max_sessions_per_user, 10);
        let quotas = args.quotas(AuthMode::Token);
        assert_eq!(
            (quotas.stored_sessions, quotas.state_bytes),
            (1000, 64 * 1024)
        );
        let quotas = args.quotas(AuthMode::None);
        assert_eq!((quotas.stored_sessions, quotas.state_bytes), (0, 0));
        let set = parse(&[
            "livegate",
            "--max-sessions-per-user",
            "0",
            "--max-state-bytes",
            "10",
        ]);
        let set = set.unwrap();
        assert_eq!(
            set.limit_settings(AuthMode::Token).max_sessions_per_user,
            0,
            "0 turns it off"
        );
        assert_eq!(set.quotas(AuthMode::None).state_bytes, 10);
        assert_eq!(args.max_message_bytes, 1536 * 1024);
        let largest_image = crate::gateway::ws::codec::DEFAULT_MAX_MEDIA_BYTES.div_ceil(3) * 4;
        assert!(
            largest_image + 4096 < args.max_message_bytes,
            "an image message fits"
        );
    }

    #[test]
    fn auth_options_come_from_the_file_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        std::fs::write(&path, "auth = \"token\"\nallowed_origins = \"https://app.example.com\"\nauth-issuer = \"https://id.example.com/\"\nmetrics-bind = \"127.0.0.1:9100\"\n").unwrap();
        let args = parse(&["livegate", "--config", path.to_str().unwrap()]).unwrap();
        assert_eq!(args.auth, Some(AuthMode::Token));
        assert_eq!(
            args.allowed_origins.as_deref(),
            Some("https://app.example.com")
        );
        assert_eq!(args.auth_issuer.as_deref(), Some("https://id.example.com/"));
        assert_eq!(
            args.metrics_bind,
            Some(SocketAddr::from(([127, 0, 0, 1], 9100)))
        );
        std::fs::write(&path, "auth = \"maybe\"").unwrap();
        let error = parse(&["livegate", "--config", path.to_str().unwrap()]).unwrap_err();
        assert!(error.to_string().contains("auth"), "{error}");
    }

    #[test]
    fn the_upstream_audio_chunk_is_bounded_wherever_it_is_set() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        let path = path.to_str().unwrap();
        let args = parse(&["livegate"]).unwrap();
        let default = crate::model::DEFAULT_AUDIO_CHUNK;
        assert_eq!(args.gemini_options().audio_chunk, default);
        assert_eq!(args.openai_options().audio_chunk, default);
        std::fs::write(path, "upstream_audio_chunk_ms = 60\n").unwrap();
        let args = parse(&["livegate", "--config", path]).unwrap();
        assert_eq!(args.gemini_options().audio_chunk, Duration::from_millis(60));
        assert_eq!(args.openai_options().audio_chunk, Duration::from_millis(60));
        let args = parse(&[
            "livegate",
            "--config",
            path,
            "--upstream-audio-chunk-ms",
            "0",
        ]);
        assert_eq!(args.unwrap().upstream_audio_chunk_ms, 0, "the flag wins");
        std::fs::write(path, "upstream-audio-chunk-ms = 101\n").unwrap();
        let error = parse(&["livegate", "--config", path]).unwrap_err();
        assert!(
            error.to_string().contains("upstream_audio_chunk_ms"),
            "{error}"
        );
        let flag = ["livegate", "--upstream-audio-chunk-ms", "250"];
        assert!(Cli::command().try_get_matches_from(flag).is_err());
    }

    #[test]
    fn a_bad_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "bnid = \"x\"").unwrap();
        let error = parse(&["livegate", "--config", path.to_str().unwrap()]).unwrap_err();
        assert!(error.to_string().contains("bnid"), "{error}");
        std::fs::write(&path, "modality = \"VIDEO\"").unwrap();
        let error = parse(&["livegate", "--config", path.to_str().unwrap()]).unwrap_err();
        assert!(error.to_string().contains("modality"), "{error}");
        assert!(parse(&["livegate", "--config", "/nonexistent/livegate.toml"]).is_err());
    }

    #[test]
    fn live_settings_come_from_flags_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        std::fs::write(
            &path,
            "client-settings = \"voice,vad\"\n[live]\nvoice = \"Puck\"\nlanguage = \"fr-FR\"\nsilence-duration-ms = 900\n",
        )
        .unwrap();
        let config = path.to_str().unwrap();
        let args = parse(&["livegate", "--config", config, "--voice", "Kore"]).unwrap();
        let live = args.live.settings().unwrap();
        assert_eq!(live.voice.as_deref(), Some("Kore"), "the flag wins");
        assert_eq!(live.language.as_deref(), Some("fr-FR"));
        assert_eq!(live.silence_duration_ms, Some(900));
        assert!(args.live.client_settings.allows("prefix_padding_ms"));
        assert!(!args.live.client_settings.allows("language"));
        let defaults = parse(&["livegate"]).unwrap();
        assert_eq!(
            defaults.live.client_settings,
            ServeArgs::defaults().live.client_settings
        );
        assert!(defaults.live.client_settings.allows("barge_in"));
        std::fs::write(&path, "[live]\ncolour = 1\n").unwrap();
        let error = parse(&["livegate", "--config", config]).unwrap_err();
        assert!(error.to_string().contains("colour"), "{error}");
        std::fs::write(&path, "client-settings = \"voice,colour\"\n").unwrap();
        let error = parse(&["livegate", "--config", config]).unwrap_err();
        assert!(error.to_string().contains("colour"), "{error}");
    }

    #[test]
    fn telephony_settings_come_from_flags_over_the_file() {
        use crate::gateway::telephony::{DtmfMode, SessionFrom};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        std::fs::write(
            &path,
            "telephony-public-url = \"https://voice.example.com\"\ntelephony_dtmf = \"tool\"\n\
             telephony-dtmf-gap-ms = 900\ntelephony-state-prefix = \"user:\"\n\
             telephony-session-id = \"parameter:account\"\ntelephony-goodbye = \"bye.ulaw\"\n",
        )
        .unwrap();
        let config = path.to_str().unwrap();
        let args = parse(&["livegate", "--config", config]).unwrap();
        let telephony = &args.telephony;
        assert_eq!(
            telephony.telephony_public_url.as_deref(),
            Some("https://voice.example.com")
        );
        assert_eq!(telephony.telephony_dtmf, DtmfMode::Tool);
        assert_eq!(telephony.telephony_dtmf_gap_ms, 900);
        assert_eq!(telephony.telephony_state_prefix, "user:");
        assert_eq!(
            telephony.telephony_session_id,
            SessionFrom::Parameter("account".into())
        );
        assert_eq!(
            telephony.telephony_goodbye.as_deref(),
            Some(std::path::Path::new("bye.ulaw"))
        );
        let args = parse(&[
            "livegate",
            "--config",
            config,
            "--telephony-dtmf",
            "off",
            "--telephony-session-id",
            "caller",
        ])
        .unwrap();
        assert_eq!(
            args.telephony.telephony_dtmf,
            DtmfMode::Off,
            "the flag wins"
        );
        assert_eq!(args.telephony.telephony_session_id, SessionFrom::Caller);
        assert_eq!(
            args.telephony.telephony_dtmf_gap_ms, 900,
            "the rest from the file"
        );
        std::fs::write(&path, "telephony-session-id = \"parameter:\"\n").unwrap();
        let error = parse(&["livegate", "--config", config]).unwrap_err();
        assert!(
            error.to_string().contains("telephony_session_id"),
            "{error}"
        );
    }

    #[test]
    fn openai_settings_come_from_flags_and_the_file() {
        use crate::model::openai::Vad;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("livegate.toml");
        std::fs::write(
            &path,
            "openai-base-url = \"https://contoso.openai.azure.com/openai/v1\"\nopenai_vad = \"semantic\"\n",
        )
        .unwrap();
        let args = parse(&["livegate", "--config", path.to_str().unwrap()]).unwrap();
        let options = args.openai_options();
        assert_eq!(options.vad, Vad::Semantic);
        assert!(options.is_azure(), "recognised by its host");
        assert_eq!(options.playout_lead, std::time::Duration::from_millis(500));
        let args = parse(&[
            "livegate",
            "--openai-base-url",
            "ws://127.0.0.1:9400",
            "--openai-azure",
            "true",
        ])
        .unwrap();
        assert_eq!(
            args.openai_options().url("gpt-realtime"),
            "ws://127.0.0.1:9400/v1/realtime?model=gpt-realtime"
        );
        assert!(args.openai_options().is_azure(), "forced by the flag");
    }
}
