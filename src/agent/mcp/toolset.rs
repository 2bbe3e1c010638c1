//! One MCP server's toolset: a supervisor task keeps the connection (connecting, listing the
//! tools, listening for changes, reconnecting with backoff) and the tools call through whatever
//! connection is up when they are called.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::service::{Peer, RoleClient};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::config::{is_valid_name, McpConfig};
use super::connect::{connect, Handler};
use super::shared::Shared;
use crate::agent::{FunctionTool, Toolset, ToolsetStats};
use crate::model::FunctionDeclaration;

/// The first wait before connecting again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait before connecting again.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A connection that lasted this long starts the backoff over when it ends.
const STABLE_FOR: Duration = Duration::from_secs(10);
/// Least time connecting or listing tools may take, whatever a call's timeout.
const MIN_SETUP_TIMEOUT: Duration = Duration::from_secs(5);
/// Most tools taken from one server.
const MAX_TOOLS: usize = 256;
/// Largest input schema taken, serialized.
const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Longest description taken, in bytes (cut at a character boundary).
const MAX_DESCRIPTION_BYTES: usize = 4 * 1024;

/// The tools of one MCP server (`[[mcp]]` in the agent file).
#[derive(Debug)]
pub struct McpToolset {
    shared: Arc<Shared>,
    /// Stops the supervisor, and with it the connection (and a child process), when the agent
    /// tree holding this toolset is dropped.
    _stop: DropGuard,
}

impl McpToolset {
    /// Starts the toolset of `config` on the current tokio runtime, reading `${NAME}`s from the
    /// process environment. It connects in the background: a server that is down does not fail
    /// this, its tools are simply absent until it is up (and [`Toolset::health`] says why).
    pub fn start(config: &McpConfig) -> Result<Arc<Self>, String> {
        let spec = config.spec(&|name| std::env::var(name).ok())?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| format!("MCP server {:?}: needs a tokio runtime", spec.name))?;
        let shared = Arc::new(Shared::new(spec));
        let stop = CancellationToken::new();
        let supervisor = Supervisor {
            shared: shared.clone(),
            changed: Arc::new(Notify::new()),
            backoff: FIRST_BACKOFF,
        };
        let token = stop.clone();
        runtime.spawn(async move {
            tokio::select! {
                () = token.cancelled() => {}
                () = supervisor.run() => {}
            }
        });
        Ok(Arc::new(McpToolset {
            shared,
            _stop: stop.drop_guard(),
        }))
    }

    /// Waits until `check` holds, at most `timeout` (false when it did not), checking again at
    /// each change of the connection or the tool list.
    pub async fn wait_until(&self, timeout: Duration, check: impl Fn(&Self) -> bool) -> bool {
        let mut changes = self.shared.changes.subscribe();
        let wait = async {
            loop {
                if check(self) {
                    return true;
                }
                if changes.changed().await.is_err() {
                    return false;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or(false)
    }

    /// Waits until the server is connected, at most `timeout`; otherwise says why not.
    pub async fn wait_connected(&self, timeout: Duration) -> Result<(), String> {
        self.wait_until(timeout, |t| t.health().is_ok()).await;
        self.health()
    }

    fn declared(&self) -> Arc<Vec<FunctionDeclaration>> {
        self.shared.read().tools.clone()
    }
}

impl Toolset for McpToolset {
    fn name(&self) -> &str {
        &self.shared.spec.name
    }

    fn tools(&self) -> Vec<FunctionTool> {
        self.declared()
            .iter()
            .map(|declaration| {
                let shared = self.shared.clone();
                let name = declaration.name.clone();
                let tool = FunctionTool::from_declaration(declaration.clone(), move |args, ctx| {
                    super::call::call(shared.clone(), name.clone(), args, ctx)
                });
                match self.shared.spec.mode_of(&declaration.name) {
                    Some(scheduling) => tool.non_blocking(scheduling),
                    None => tool,
                }
            })
            .collect()
    }

    fn health(&self) -> Result<(), String> {
        match &self.shared.read().down {
            None => Ok(()),
            Some(why) => Err(format!("MCP server {} unavailable: {why}", self.name())),
        }
    }

    fn stats(&self) -> ToolsetStats {
        let c = &self.shared.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ToolsetStats {
            calls: get(&c.calls),
            tool_errors: get(&c.tool_errors),
            timeouts: get(&c.timeouts),
            unavailable: get(&c.unavailable),
            protocol_errors: get(&c.protocol_errors),
            reconnects: get(&c.reconnects),
            up: self.shared.read().down.is_none(),
        }
    }
}

/// Keeps one server connected: connect, list, serve until the connection ends, back off, again.
struct Supervisor {
    shared: Arc<Shared>,
    changed: Arc<Notify>,
    backoff: Duration,
}

impl Supervisor {
    async fn run(mut self) {
        loop {
            let why = self.connection().await;
            self.shared.set_down(why);
            tokio::time::sleep(self.backoff).await;
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        }
    }

    fn setup_timeout(&self) -> Duration {
        self.shared.spec.timeout.max(MIN_SETUP_TIMEOUT)
    }

    /// One connection, from connecting to its end; returns why it ended.
    async fn connection(&mut self) -> String {
        let handler = Handler {
            changed: self.changed.clone(),
        };
        let service =
            match tokio::time::timeout(self.setup_timeout(), connect(&self.shared.spec, handler))
                .await
            {
                Ok(Ok(service)) => service,
                Ok(Err(why)) => return why,
                Err(_) => return "timed out connecting".into(),
            };
        let peer = service.peer().clone();
        if let Err(why) = self.refresh(&peer).await {
            return why;
        }
        self.shared.set_up(peer.clone());
        let started = Instant::now();
        let mut ended = std::pin::pin!(service.waiting());
        loop {
            tokio::select! {
                _ = &mut ended => break,
                () = self.changed.notified() => {
                    if let Err(why) = self.refresh(&peer).await {
                        tracing::warn!(mcp_server = self.shared.spec.name, reason = why, "MCP tool list not refreshed");
                    }
                }
            }
        }
        if started.elapsed() >= STABLE_FOR {
            self.backoff = FIRST_BACKOFF;
        }
        "the connection closed".into()
    }

    /// Lists the server's tools and keeps those the filters and the backends accept.
    async fn refresh(&self, peer: &Peer<RoleClient>) -> Result<(), String> {
        let listed = tokio::time::timeout(self.setup_timeout(), peer.list_all_tools())
            .await
            .map_err(|_| "timed out listing tools".to_owned())?
            .map_err(|e| format!("cannot list tools: {e}"))?;
        let spec = &self.shared.spec;
        let mut tools = Vec::new();
        for tool in listed {
            let name = tool.name.as_ref();
            if !spec.allows(name) || tools.iter().any(|t: &FunctionDeclaration| t.name == name) {
                continue;
            }
            if !is_valid_name(name) {
                tracing::warn!(mcp_server = spec.name, tool = name, "MCP tool left out: its name is not a function name models accept ([A-Za-z0-9_-], at most 64)");
                continue;
            }
            let schema = Value::Object(tool.input_schema.as_ref().clone());
            if schema.to_string().len() > MAX_SCHEMA_BYTES {
                tracing::warn!(
                    mcp_server = spec.name,
                    tool = name,
                    "MCP tool left out: its input schema is over {MAX_SCHEMA_BYTES} bytes"
                );
                continue;
            }
            if tools.len() == MAX_TOOLS {
                tracing::warn!(
                    mcp_server = spec.name,
                    "MCP server lists more than {MAX_TOOLS} tools; the rest are left out"
                );
                break;
            }
            tools.push(FunctionDeclaration {
                name: name.to_owned(),
                description: cut(tool.description.as_deref().unwrap_or_default()),
                parameters_json_schema: Some(Arc::new(schema)),
                behavior: None,
            });
        }
        tracing::debug!(
            mcp_server = spec.name,
            tools = tools.len(),
            "MCP tools listed"
        );
        self.shared.set_tools(tools);
        Ok(())
    }
}

fn cut(text: &str) -> String {
    if text.len() <= MAX_DESCRIPTION_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_DESCRIPTION_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}
