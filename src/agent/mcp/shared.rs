//! What an MCP server's supervisor and its tools' calls share: the connection in use, the tools
//! it lists, and the counts for `/metrics`. Its own file so that the calls (`call.rs`) and the
//! toolset (`toolset.rs`) both use it without using each other.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use rmcp::service::{Peer, RoleClient};

use super::config::Spec;
use crate::lock::RecoverRw;
use crate::model::FunctionDeclaration;

/// What the server's state says before its first connection.
pub(super) const CONNECTING: &str = "connecting";

/// What the supervisor and the tools share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub spec: Spec,
    state: RwLock<State>,
    pub counters: Counters,
    /// Bumped at each change of the connection or the tool list, for those who wait on one.
    pub changes: tokio::sync::watch::Sender<u64>,
}

#[derive(Debug)]
pub(super) struct State {
    peer: Option<Peer<RoleClient>>,
    pub tools: std::sync::Arc<Vec<FunctionDeclaration>>,
    /// Why the server is not connected (None while it is).
    pub down: Option<String>,
    ever_up: bool,
}

/// Counts for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub calls: AtomicU64,
    pub tool_errors: AtomicU64,
    pub timeouts: AtomicU64,
    pub unavailable: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub reconnects: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why a call cannot start.
pub(crate) enum NoPeer {
    /// The server is not connected.
    Down(String),
    /// The server no longer lists the tool.
    Removed,
}

impl Shared {
    /// The state of a server not connected yet.
    pub fn new(spec: Spec) -> Self {
        Shared {
            spec,
            state: RwLock::new(State {
                peer: None,
                tools: std::sync::Arc::default(),
                down: Some(CONNECTING.into()),
                ever_up: false,
            }),
            counters: Counters::default(),
            changes: tokio::sync::watch::Sender::new(0),
        }
    }

    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read_or_recover()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write_or_recover()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    /// The connection to call `tool` through.
    pub fn peer_for(&self, tool: &str) -> Result<Peer<RoleClient>, NoPeer> {
        let state = self.read();
        match &state.peer {
            None => Err(NoPeer::Down(
                state.down.clone().unwrap_or_else(|| "not connected".into()),
            )),
            Some(_) if !state.tools.iter().any(|t| t.name == tool) => Err(NoPeer::Removed),
            Some(peer) => Ok(peer.clone()),
        }
    }

    pub fn set_up(&self, peer: Peer<RoleClient>) {
        let mut state = self.write();
        if state.ever_up {
            Counters::add(&self.counters.reconnects);
        }
        state.peer = Some(peer);
        state.down = None;
        state.ever_up = true;
        let tools = state.tools.len();
        drop(state);
        self.changed();
        tracing::info!(mcp_server = self.spec.name, tools, "MCP server connected");
    }

    /// Marks the server down; logged at warning once per outage, then at debug.
    pub fn set_down(&self, why: String) {
        let mut state = self.write();
        let was_up = state.down.is_none();
        let first = !state.ever_up && state.down.as_deref() == Some(CONNECTING);
        state.peer = None;
        state.down = Some(why.clone());
        drop(state);
        self.changed();
        if was_up || first {
            tracing::warn!(
                mcp_server = self.spec.name,
                reason = why,
                "MCP server unavailable; retrying with backoff"
            );
        } else {
            tracing::debug!(
                mcp_server = self.spec.name,
                reason = why,
                "MCP server still unavailable"
            );
        }
    }

    pub fn set_tools(&self, tools: Vec<FunctionDeclaration>) {
        self.write().tools = std::sync::Arc::new(tools);
        self.changed();
    }
}
