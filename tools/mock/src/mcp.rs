//! A small MCP server (the official Rust SDK's server side), over stdio or streamable HTTP, for
//! testing livegate's MCP toolsets: tools with text, structured, error, image and slow results, a
//! tool that changes the tool list, one that reports who called, and one that kills the process.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{json, Map, Value};
use tokio::sync::Notify;

/// What the tests observe of the server.
#[derive(Debug, Default)]
pub struct McpState {
    /// Calls the client cancelled (`notifications/cancelled`).
    pub cancelled: AtomicU64,
    /// Wakes on each cancellation.
    pub cancelled_notify: Notify,
    /// Calls started, of any tool.
    pub calls: AtomicU64,
    /// Whether the `extra` tool is listed (the `toggle` tool flips it).
    pub extra: AtomicBool,
    /// `die` ends the process (stdio only; over HTTP it is an error).
    pub can_die: bool,
}

/// The server: one per connection, sharing [`McpState`].
#[derive(Debug, Clone)]
pub struct MockMcp {
    state: Arc<McpState>,
}

impl MockMcp {
    /// A server over `state`.
    pub fn new(state: Arc<McpState>) -> Self {
        MockMcp { state }
    }
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(Map::new()),
    }
}

fn tools(extra: bool) -> Vec<Tool> {
    let object = |props: Value, required: Value| {
        schema(json!({ "type": "object", "properties": props, "required": required }))
    };
    let mut tools = vec![
        Tool::new(
            "echo",
            "Says the text back.",
            object(json!({ "text": { "type": "string" } }), json!(["text"])),
        ),
        Tool::new(
            "add",
            "Adds two numbers; a structured result.",
            object(
                json!({ "a": { "type": "number" }, "b": { "type": "number" } }),
                json!(["a", "b"]),
            ),
        ),
        Tool::new(
            "fail",
            "Always reports an error.",
            object(json!({}), json!([])),
        ),
        Tool::new("image", "A 1x1 PNG.", object(json!({}), json!([]))),
        Tool::new(
            "slow",
            "Waits `ms` milliseconds (forever without), unless cancelled.",
            object(json!({ "ms": { "type": "number" } }), json!([])),
        ),
        Tool::new(
            "toggle",
            "Adds or removes the `extra` tool and says so.",
            object(json!({}), json!([])),
        ),
        Tool::new(
            "whoami",
            "The caller's identity as received.",
            object(json!({}), json!([])),
        ),
        Tool::new(
            "die",
            "Ends the server process.",
            object(json!({}), json!([])),
        ),
        Tool::new(
            "bad.name",
            "A name models do not accept.",
            object(json!({}), json!([])),
        ),
    ];
    if extra {
        tools.push(Tool::new(
            "extra",
            "Present after toggle.",
            object(json!({}), json!([])),
        ));
    }
    tools
}

/// The smallest PNG: one transparent pixel.
pub const PIXEL_PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

impl ServerHandler for MockMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools(
            self.state.extra.load(Ordering::SeqCst),
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.state.calls.fetch_add(1, Ordering::SeqCst);
        let args = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "echo" => CallToolResult::success(vec![ContentBlock::text(
                args.get("text").and_then(Value::as_str).unwrap_or_default(),
            )]),
            "add" => {
                let number = |k: &str| args.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                CallToolResult::structured(json!({ "sum": number("a") + number("b") }))
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("it broke")]),
            "image" => CallToolResult::success(vec![
                ContentBlock::text("a pixel"),
                ContentBlock::image(PIXEL_PNG_BASE64, "image/png"),
            ]),
            "slow" => {
                let wait = match args.get("ms").and_then(Value::as_u64) {
                    Some(ms) => Duration::from_millis(ms),
                    None => Duration::from_secs(3600),
                };
                tokio::select! {
                    () = tokio::time::sleep(wait) => CallToolResult::success(vec![ContentBlock::text("done")]),
                    () = context.ct.cancelled() => {
                        self.state.cancelled.fetch_add(1, Ordering::SeqCst);
                        self.state.cancelled_notify.notify_waiters();
                        return Err(ErrorData::internal_error("cancelled", None));
                    }
                }
            }
            "toggle" => {
                let now = !self.state.extra.fetch_xor(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                CallToolResult::success(vec![ContentBlock::text(if now {
                    "extra added"
                } else {
                    "extra removed"
                })])
            }
            "whoami" => {
                let meta = &context.meta.0 .0;
                let header = |name: &str| {
                    context
                        .extensions
                        .get::<http::request::Parts>()
                        .and_then(|parts| parts.headers.get(name))
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                };
                CallToolResult::structured(json!({
                    "meta_user": meta.get("livegate/user_id"),
                    "meta_session": meta.get("livegate/session_id"),
                    "header_user": header("x-livegate-user-id"),
                    "header_session": header("x-livegate-session-id"),
                    "header_auth": header("authorization"),
                    "meta_claims": meta.get("livegate/claims"),
                    "header_claims": header("x-livegate-claims"),
                }))
            }
            "die" if self.state.can_die => std::process::exit(3),
            "extra" if self.state.extra.load(Ordering::SeqCst) => {
                CallToolResult::success(vec![ContentBlock::text("extra ran")])
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool named {other}"),
                    None,
                ))
            }
        };
        Ok(CallToolResponse::Complete(result))
    }
}

/// Serves over stdin and stdout until the client goes away.
pub async fn serve_stdio(state: Arc<McpState>) -> anyhow::Result<()> {
    let service = MockMcp::new(state).serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}

/// A streamable HTTP server at `http://{addr}/mcp`, serving until the task is dropped.
pub struct McpHttp {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What the tests observe.
    pub state: Arc<McpState>,
    task: tokio::task::JoinHandle<()>,
}

impl McpHttp {
    /// The endpoint's URL.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

impl Drop for McpHttp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a streamable HTTP server on `addr` (port 0: any free one).
pub async fn serve_http(addr: SocketAddr) -> anyhow::Result<McpHttp> {
    let state = Arc::new(McpState::default());
    let factory_state = state.clone();
    let service = StreamableHttpService::new(
        move || Ok(MockMcp::new(factory_state.clone())),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    // An answer streams as server-sent events in several writes: with Nagle's algorithm on, a
    // later write waits for the client's delayed ACK of the first (about 40 ms a call).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set");
        }
    });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(McpHttp { addr, state, task })
}
