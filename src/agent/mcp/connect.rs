//! Connecting to an MCP server: a child process over stdio or streamable HTTP, through `rmcp`'s
//! client, with a handler that hears `notifications/tools/list_changed`.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::FutureExt;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientCapabilities, ClientConfig, ClientJsonRpcMessage, Implementation};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;

use super::config::{Spec, Transport};

/// The `_meta` keys a call's identity travels in.
pub(crate) const META_USER_ID: &str = "livegate/user_id";
/// See [`META_USER_ID`].
pub(crate) const META_SESSION_ID: &str = "livegate/session_id";
/// See [`META_USER_ID`]: the client token's verified claims, as an object.
pub(crate) const META_CLAIMS: &str = "livegate/claims";
/// The header the claims travel in over HTTP: their JSON, base64url without padding (a header
/// value is visible ASCII; claims may hold any text).
const CLAIMS_HEADER: &str = "x-livegate-claims";
/// The headers the identity travels in over HTTP, by `_meta` key.
const IDENTITY_HEADERS: [(&str, &str); 2] = [
    (META_USER_ID, "x-livegate-user-id"),
    (META_SESSION_ID, "x-livegate-session-id"),
];
/// Variables of the gateway's environment a child process still gets (its keys never).
const INHERITED_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];
/// Longest line of a child's stderr that is logged.
const MAX_STDERR_LINE: usize = 512;
/// Largest JSON reply accepted over HTTP.
const MAX_HTTP_REPLY_BYTES: usize = 4 * 1024 * 1024;

/// A connected server.
pub(crate) type Service = RunningService<RoleClient, Handler>;

/// The client side of a connection: says who we are, and wakes the supervisor on a changed tool
/// list.
#[derive(Debug, Clone)]
pub(crate) struct Handler {
    pub changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("livegate", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// Connects and initializes (the caller bounds the time).
pub(crate) async fn connect(spec: &Spec, handler: Handler) -> Result<Service, String> {
    match &spec.transport {
        Transport::Http { url, headers } => {
            let mut custom = HashMap::new();
            for (name, value) in headers {
                // Checked when the file was read.
                if let (Ok(name), Ok(value)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    custom.insert(name, value);
                }
            }
            let mut config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            config.max_json_response_size = MAX_HTTP_REPLY_BYTES;
            let transport =
                StreamableHttpClientTransport::with_client(IdentityHeaders(http_client()?), config);
            handler
                .serve(transport)
                .await
                .map_err(|e| format!("cannot initialize: {e}"))
        }
        Transport::Stdio { command, args, env } => {
            let mut child = tokio::process::Command::new(command);
            child.args(args).env_clear().kill_on_drop(true);
            for name in INHERITED_ENV {
                if let Some(value) = std::env::var_os(name) {
                    child.env(name, value);
                }
            }
            child.envs(env.iter().map(|(k, v)| (k, v)));
            let (transport, stderr) = TokioChildProcess::builder(child)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot run {command}: {e}"))?;
            if let Some(stderr) = stderr {
                tokio::spawn(log_stderr(spec.name.clone(), stderr));
            }
            handler
                .serve(transport)
                .await
                .map_err(|e| format!("cannot initialize: {e}"))
        }
    }
}

/// Logs what a child writes to stderr at debug, line by line, each cut to a bounded length.
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).split(b'\n');
    while let Ok(Some(line)) = lines.next_segment().await {
        let line = String::from_utf8_lossy(&line[..line.len().min(MAX_STDERR_LINE)]).into_owned();
        tracing::debug!(mcp_server = server, line, "MCP server stderr");
    }
}

/// rmcp's HTTP client (reqwest 0.13) on the gateway's TLS roots and ring, so it needs no
/// process-wide crypto provider.
fn http_client() -> Result<reqwest013::Client, String> {
    let tls = crate::model::tls::client_config()?;
    reqwest013::Client::builder()
        .tls_backend_preconfigured(tokio_rustls::rustls::ClientConfig::clone(&tls))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// rmcp's reqwest client, plus the caller's identity as headers: read from each call's `_meta`,
/// where [`super::call`] puts it when `forward_identity` is on.
#[derive(Clone)]
struct IdentityHeaders(reqwest013::Client);

fn with_identity(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    let Ok(value) = serde_json::to_value(message) else {
        return headers;
    };
    let Some(meta) = value.pointer("/params/_meta") else {
        return headers;
    };
    for (key, header) in IDENTITY_HEADERS {
        if let Some(id) = meta.get(key).and_then(serde_json::Value::as_str) {
            if let Ok(id) = HeaderValue::from_str(id) {
                headers.insert(HeaderName::from_static(header), id);
            }
        }
    }
    if let Some(claims) = meta.get(META_CLAIMS).filter(|c| c.is_object()) {
        let encoded = base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            claims.to_string(),
        );
        if let Ok(value) = HeaderValue::from_str(&encoded) {
            headers.insert(HeaderName::from_static(CLAIMS_HEADER), value);
        }
    }
    headers
}

type SseStream = BoxStream<'static, Result<sse_stream::Sse, SseError>>;
type HttpResult<T> = Result<T, StreamableHttpError<reqwest013::Error>>;

impl StreamableHttpClient for IdentityHeaders {
    type Error = reqwest013::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl std::future::Future<Output = HttpResult<StreamableHttpPostResponse>> + Send + '_ {
        let headers = with_identity(&message, custom_headers);
        self.0
            .post_message(uri, message, session_id, auth_header, headers)
            .boxed()
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> impl std::future::Future<Output = HttpResult<StreamableHttpPostResponse>> + Send + '_ {
        let headers = with_identity(&message, custom_headers);
        self.0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                limits,
            )
            .boxed()
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl std::future::Future<Output = HttpResult<()>> + Send + '_ {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .boxed()
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl std::future::Future<Output = HttpResult<SseStream>> + Send + '_ {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .boxed()
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl std::future::Future<Output = HttpResult<SseStream>> + Send + '_ {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .boxed()
    }
}
