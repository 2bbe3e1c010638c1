//! `livegate serve`'s options: flags, with `LIVEGATE_*` environment variables as fallback.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{ArgAction, Args, ValueEnum};

use super::codec::AudioFrames;
use crate::model::Modality;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `sim` pacing, as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum SimPacingArg {
    /// Audio at the speed of speech.
    #[default]
    Realtime,
    /// As fast as possible, like Gemini.
    Burst,
}

/// Options of `livegate serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Listen address (port 0 picks a free port; the chosen address is logged as `listening on ADDR`).
    #[arg(long, env = "LIVEGATE_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Where the default SQLite file and artifact folder live.
    #[arg(long, env = "LIVEGATE_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// Session store: `memory:` or `sqlite://PATH` [default: sqlite://{data-dir}/livegate.db].
    #[arg(long, env = "LIVEGATE_SESSION_STORE")]
    pub session_store: Option<String>,
    /// Artifact store: `memory:` or `file://PATH` [default: file://{data-dir}/artifacts].
    #[arg(long, env = "LIVEGATE_ARTIFACT_STORE")]
    pub artifact_store: Option<String>,
    /// Model: `sim` (embedded, offline).
    #[arg(long, env = "LIVEGATE_MODEL", default_value = "sim")]
    pub model: String,
    /// Default response modality (a client may override it per connection with `?modality=`).
    #[arg(long, env = "LIVEGATE_MODALITY", default_value = "AUDIO", value_parser = parse_modality)]
    pub modality: Modality,
    /// Default downstream audio encoding (a client may override it with `?audio=`).
    #[arg(long, env = "LIVEGATE_AUDIO_FRAMES", default_value = "binary", value_parser = parse_audio_frames)]
    pub audio_frames: AudioFrames,
    /// Record input and output audio to artifacts.
    #[arg(long, env = "LIVEGATE_SAVE_AUDIO", default_value_t = true, action = ArgAction::Set)]
    pub save_audio: bool,
    /// Log output format.
    #[arg(long, env = "LIVEGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// How far model audio may run ahead of real-time playback at the client, in milliseconds.
    #[arg(long, env = "LIVEGATE_AUDIO_LEAD_MS", default_value_t = 500)]
    pub audio_lead_ms: u64,
    /// Largest WebSocket message a client may send, in bytes (larger ones close with 1009).
    #[arg(long, env = "LIVEGATE_MAX_MESSAGE_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_message_bytes: usize,
    /// Requests a live run may queue before the socket reader waits for the model.
    #[arg(long, env = "LIVEGATE_QUEUE_CAPACITY", default_value_t = crate::live::DEFAULT_QUEUE_CAPACITY)]
    pub queue_capacity: usize,
    /// `sim` model: pace answers like a speaking voice (`realtime`) or send them at once (`burst`).
    #[arg(long, env = "LIVEGATE_SIM_PACING", value_enum, default_value_t = SimPacingArg::Realtime)]
    pub sim_pacing: SimPacingArg,
    /// `sim` model: delay before each answer starts, in milliseconds.
    #[arg(long, env = "LIVEGATE_SIM_REPLY_DELAY_MS")]
    pub sim_reply_delay_ms: Option<u64>,
    /// Application name (first part of session and artifact keys).
    #[arg(long, env = "LIVEGATE_APP_NAME", default_value = "livegate")]
    pub app_name: String,
}

impl ServeArgs {
    /// Defaults for everything, as with no flags and no environment (for tests and embedding).
    pub fn defaults() -> Self {
        ServeArgs {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("./data"),
            session_store: None,
            artifact_store: None,
            model: "sim".into(),
            modality: Modality::Audio,
            audio_frames: AudioFrames::Binary,
            save_audio: true,
            log_format: LogFormat::Text,
            audio_lead_ms: 500,
            max_message_bytes: 4 * 1024 * 1024,
            queue_capacity: crate::live::DEFAULT_QUEUE_CAPACITY,
            sim_pacing: SimPacingArg::Realtime,
            sim_reply_delay_ms: None,
            app_name: "livegate".into(),
        }
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

fn parse_modality(s: &str) -> Result<Modality, String> {
    s.parse()
}

fn parse_audio_frames(s: &str) -> Result<AudioFrames, String> {
    s.parse()
}
