//! `livegate mock-gemini` (`livegate-mock-gemini`): an offline Gemini Live (`BidiGenerateContent`) server backed by the
//! `sim` model, for developing and testing Gemini Live clients with no key and no network.
//!
//! It speaks the wire protocol as Google's servers do: the Developer API
//! and Vertex paths (a doubled leading slash too), the key in any of the accepted places, `setup`
//! first and once, camelCase or snake_case keys, either base64 alphabet, pretty-printed JSON in
//! binary frames, `function-call-<digits>` ids, and close codes 1007 / 1008 / 1011. Fault switches
//! close connections after N messages (1011) or send `goAway` and close them (1000). Optional TLS,
//! because python-genai always connects with `wss://` when it has an API key.

mod server;
mod start;
mod tls;
mod wire;

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use livegate::lock::Recover;
use livegate::model::sim::SimConfig;

pub use start::start;

/// How long `shutdown` waits for open connections to close.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Settings of a mock Gemini Live server.
#[derive(Clone, Default)]
pub struct MockGeminiConfig {
    /// The model behind every connection.
    pub sim: SimConfig,
    /// When set, connections must present this key, else they are accepted and closed with 1007.
    pub api_key: Option<String>,
    /// Close with 1011 after this many server messages (`setupComplete` not counted).
    pub fail_after: Option<u64>,
    /// After this many server messages send `goAway {"timeLeft":"1s"}`, then close with 1000.
    pub go_away_after: Option<u64>,
    /// After this many server messages go silent: send nothing and read nothing (so answer no
    /// pings) while holding the connection open, as a blackholed upstream does.
    pub silent_after: Option<u64>,
    /// Send server JSON in text frames instead of binary ones.
    pub text_frames: bool,
    /// Serve `wss://` with this certificate and key instead of plain `ws://`.
    pub tls: Option<TlsFiles>,
}

impl fmt::Debug for MockGeminiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the key itself: configs end up in logs.
        f.debug_struct("MockGeminiConfig")
            .field("sim", &self.sim)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("fail_after", &self.fail_after)
            .field("go_away_after", &self.go_away_after)
            .field("silent_after", &self.silent_after)
            .field("text_frames", &self.text_frames)
            .field("tls", &self.tls)
            .finish()
    }
}

/// PEM files of a TLS certificate chain and its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// State shared by the server's connections.
#[derive(Debug)]
struct Shared {
    config: MockGeminiConfig,
    shutdown: CancellationToken,
    connections: TaskTracker,
    next_connection: AtomicU64,
    /// Sessions opened on the Vertex AI path.
    vertex_connections: AtomicU64,
    /// The latest `setup` messages received, as sent, oldest first.
    setups: Mutex<VecDeque<Value>>,
    /// The latest inputs received, oldest first.
    inputs: Mutex<VecDeque<Received>>,
}

/// How many `setup` messages the mock keeps for [`MockGemini::setups`].
const KEPT_SETUPS: usize = 64;
/// How many inputs the mock keeps for [`MockGemini::inputs`] (a minute of 20 ms frames).
const KEPT_INPUTS: usize = 3000;

/// One input a client sent, as tests look at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Realtime audio, by its length in bytes.
    Audio(usize),
    /// Text, as content or realtime text.
    Text,
    /// Anything else: other media, tool responses, activity signals.
    Other,
}

impl Received {
    fn of(input: &livegate::model::LiveInput) -> Self {
        use livegate::model::LiveInput;
        match input {
            LiveInput::Realtime(blob) if blob.is_audio() => Received::Audio(blob.data.len()),
            LiveInput::Content { content, .. } => Received::of_content(content),
            _ => Received::Other,
        }
    }

    fn of_content(content: &livegate::event::Content) -> Self {
        if content.parts.iter().all(|p| p.text.is_some()) {
            Received::Text
        } else {
            Received::Other
        }
    }
}

impl Shared {
    /// Keeps what a client message carried, for tests to read.
    fn record_inputs(&self, message: &wire::ClientMessage) {
        use wire::ClientMessage;
        let received: Vec<Received> = match message {
            ClientMessage::Setup(_) => return,
            ClientMessage::ClientContent { turns, .. } => {
                turns.iter().map(Received::of_content).collect()
            }
            ClientMessage::RealtimeInput(inputs) => inputs.iter().map(Received::of).collect(),
            ClientMessage::ToolResponse(_) => vec![Received::Other],
        };
        let mut inputs = self.inputs.lock_or_recover();
        for one in received {
            if inputs.len() == KEPT_INPUTS {
                inputs.pop_front();
            }
            inputs.push_back(one);
        }
    }

    /// Keeps the `setup` of a first message, if it is one, for tests to read.
    fn record_setup(&self, message: &axum::extract::ws::Message) {
        use axum::extract::ws::Message;
        let text = match message {
            Message::Text(text) => text.as_str(),
            Message::Binary(data) => match std::str::from_utf8(data) {
                Ok(text) => text,
                Err(_) => return,
            },
            _ => return,
        };
        let Ok(Value::Object(mut body)) = serde_json::from_str::<Value>(text) else {
            return;
        };
        let Some(setup) = body.remove("setup") else {
            return;
        };
        // A poisoned log only means a test thread panicked; the mock keeps serving.
        let mut setups = self.setups.lock_or_recover();
        if setups.len() == KEPT_SETUPS {
            setups.pop_front();
        }
        setups.push_back(setup);
    }
}

/// A running mock Gemini Live server.
#[derive(Debug)]
pub struct MockGemini {
    /// The address it listens on.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl MockGemini {
    /// How many WebSocket sessions clients have opened so far.
    pub fn connections(&self) -> u64 {
        self.shared.next_connection.load(Ordering::Relaxed) - 1
    }

    /// The `setup` messages clients sent (the latest 64, oldest first), exactly as received.
    pub fn setups(&self) -> Vec<Value> {
        let setups = self.shared.setups.lock_or_recover();
        setups.iter().cloned().collect()
    }

    /// The inputs clients sent (the latest 3,000, oldest first): what reached the model, message
    /// by message.
    pub fn inputs(&self) -> Vec<Received> {
        let inputs = self.shared.inputs.lock_or_recover();
        inputs.iter().copied().collect()
    }

    /// How many of those sessions came in on the Vertex AI path.
    pub fn vertex_connections(&self) -> u64 {
        self.shared.vertex_connections.load(Ordering::Relaxed)
    }

    /// Stops accepting, closes every connection with 1001 and waits (a bounded time) for them.
    pub async fn shutdown(self) {
        self.shared.shutdown.cancel();
        self.shared.connections.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.shared.connections.wait())
            .await
            .is_err()
        {
            tracing::warn!("mock-gemini connections did not close in time");
        }
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, self.task).await;
    }
}

#[cfg(test)]
mod tests;
