//! `livegate mock-openai` (`livegate-mock-openai`): an offline OpenAI Realtime server (GA event
//! names) backed by the `sim` model, for developing and testing Realtime clients, the gateway's
//! `openai` backend among them, with no key and no network.
//!
//! It serves `/v1/realtime?model=…` (and Azure's `/openai/v1/realtime`), takes the key as
//! `Authorization: Bearer`, `api-key` or the browsers' `openai-insecure-api-key.` subprotocol,
//! sends `session.created` first and `session.updated` for each `session.update`, and answers
//! malformed or out-of-order client events with `error` events, leaving the session open as
//! OpenAI does. The sim is connected at the first input, with the session as it stands then.
//! Fault switches: an error and a 1011 close after N server events, or a dropped connection in the
//! middle of the first answer. Every `conversation.item.truncate` is recorded for tests.

mod server;
mod start;
#[cfg(test)]
mod tests;
mod wire;

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use livegate::lock::Recover;
use livegate::model::sim::SimConfig;

pub use start::start;

/// How long `shutdown` waits for open connections to close.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Truncations kept for inspection (oldest dropped first).
const MAX_TRUNCATIONS: usize = 1024;
/// How many appends the mock keeps for [`MockOpenAi::appends`] (a minute of 20 ms frames).
const MAX_APPENDS: usize = 3000;

/// Settings of a mock OpenAI Realtime server.
#[derive(Clone, Default)]
pub struct MockOpenAiConfig {
    /// The model behind every connection.
    pub sim: SimConfig,
    /// When set, connections must present this key, else the upgrade is refused with 401.
    pub api_key: Option<String>,
    /// After this many server events (the session events not counted), send a `server_error`
    /// and close with 1011.
    pub fail_after: Option<u64>,
    /// Drop the connection, without a close frame, right after the first answer's first delta.
    pub close_mid_answer: bool,
}

impl fmt::Debug for MockOpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the key itself: configs end up in logs.
        f.debug_struct("MockOpenAiConfig")
            .field("sim", &self.sim)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("fail_after", &self.fail_after)
            .field("close_mid_answer", &self.close_mid_answer)
            .finish()
    }
}

/// A `conversation.item.truncate` the mock accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// The assistant item cut.
    pub item_id: String,
    /// Where the client said playback stopped.
    pub audio_end_ms: u64,
    /// How much audio of that item the mock had sent, in milliseconds.
    pub item_audio_ms: u64,
}

/// State shared by the server's connections.
#[derive(Debug)]
struct Shared {
    config: MockOpenAiConfig,
    shutdown: CancellationToken,
    connections: TaskTracker,
    next_connection: AtomicU64,
    truncations: Mutex<Vec<Truncation>>,
    /// The bytes of each `input_audio_buffer.append` received (the latest ones, oldest first).
    appends: Mutex<std::collections::VecDeque<usize>>,
    /// How many truncations were ever recorded (for waiting on one).
    truncated: watch::Sender<u64>,
}

impl Shared {
    fn record_append(&self, bytes: usize) {
        let mut appends = self.appends.lock_or_recover();
        if appends.len() >= MAX_APPENDS {
            appends.pop_front();
        }
        appends.push_back(bytes);
    }

    fn record(&self, truncation: Truncation) {
        let mut list = self.truncations.lock_or_recover();
        if list.len() >= MAX_TRUNCATIONS {
            list.remove(0);
        }
        list.push(truncation);
        drop(list);
        self.truncated.send_modify(|n| *n += 1);
    }
}

/// A running mock OpenAI Realtime server.
#[derive(Debug)]
pub struct MockOpenAi {
    /// The address it listens on.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl MockOpenAi {
    /// How many WebSocket sessions clients have opened so far.
    pub fn connections(&self) -> u64 {
        self.shared.next_connection.load(Ordering::Relaxed) - 1
    }

    /// The audio of each `input_audio_buffer.append` clients sent, in bytes (the latest 3,000,
    /// oldest first).
    pub fn appends(&self) -> Vec<usize> {
        let appends = self.shared.appends.lock_or_recover();
        appends.iter().copied().collect()
    }

    /// The truncations clients asked for, oldest first.
    pub fn truncations(&self) -> Vec<Truncation> {
        self.shared.truncations.lock_or_recover().clone()
    }

    /// Waits until `n` truncations have been recorded in all, at most `limit`; then the list.
    pub async fn wait_for_truncations(&self, n: u64, limit: Duration) -> Vec<Truncation> {
        let mut count = self.shared.truncated.subscribe();
        let _ = tokio::time::timeout(limit, count.wait_for(|seen| *seen >= n)).await;
        self.truncations()
    }

    /// Stops accepting, closes every connection with 1001 and waits (a bounded time) for them.
    pub async fn shutdown(self) {
        self.shared.shutdown.cancel();
        self.shared.connections.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.shared.connections.wait())
            .await
            .is_err()
        {
            tracing::warn!("mock-openai connections did not close in time");
        }
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, self.task).await;
    }
}
