//! The gateway's shared state: what every connection and request handler reads.

use std::sync::Arc;

use tokio_util::task::TaskTracker;

use crate::gateway::auth;
use crate::gateway::cluster::registry::SessionRegistry;
use crate::gateway::http::ready;
use crate::gateway::server::limits;
use crate::gateway::server::limits::SessionLimits;
use crate::gateway::server::quota;
use crate::gateway::telemetry::metrics;
use crate::gateway::ws::codec::{AudioEncoding, FrameLimits};
use crate::gateway::ws::live_settings;
use crate::gateway::ws::writer::WriterConfig;
use crate::latch::Latch;
use crate::model::Modality;
use crate::runner::Runner;

/// Shared state of a running gateway.
#[derive(Debug)]
pub struct Gateway {
    /// Runs agents against sessions and artifacts.
    pub runner: Runner,
    /// One live run per session.
    pub registry: SessionRegistry,
    /// Fires on shutdown.
    pub shutdown: Latch,
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
    pub(crate) connections: TaskTracker,
    /// Caps on live connections and the rate of new ones.
    pub limits: Arc<limits::Limits>,
    pub(crate) readiness: ready::Readiness,
    /// Size limits of client messages by kind.
    pub frame_limits: FrameLimits,
    /// Bytes of media and text a live run's request queue may hold.
    pub queue_max_bytes: usize,
    /// What every live run allows its model server.
    pub flow_limits: crate::live::flow::FlowLimits,
    /// Idle timeout and maximum duration of a WebSocket connection.
    pub session_limits: SessionLimits,
    /// Phone calls' settings and carrier secrets.
    pub telephony: crate::gateway::telephony::Telephony,
    /// Longest a WebSocket client may take to finish a message it began (`None`: no limit).
    pub message_read_timeout: Option<std::time::Duration>,
    /// What a client token's user may keep.
    pub quotas: quota::Quotas,
}
