//! One MCP tool call: sent through the server's current connection, bounded by the server's
//! timeout, cancelled on the server (`notifications/cancelled`) when it times out or the call is
//! dropped (the model cancelled it, the flow ended); the result mapped to a function response.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, MetaObject, RequestId, RequestMetaObject, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient};
use rmcp::ServiceError;
use serde_json::{json, Map, Value};

use super::connect::{META_CLAIMS, META_SESSION_ID, META_USER_ID};
use super::shared::{Counters, NoPeer, Shared};
use crate::agent::{Context, ToolError, ToolResult};
use crate::artifact::Artifact;

/// Largest function response an MCP result may become, serialized.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// Calls `tool` on the server with the model's `args`.
pub(crate) async fn call(
    shared: Arc<Shared>,
    tool: String,
    args: Value,
    ctx: Context,
) -> ToolResult {
    Counters::add(&shared.counters.calls);
    let timeout = shared.spec.timeout;
    let counters = &shared.counters;
    match tokio::time::timeout(timeout, send(&shared, &tool, args, &ctx)).await {
        Err(_) => {
            Counters::add(&counters.timeouts);
            Err(ToolError::Timeout(timeout))
        }
        Ok(Err(failure)) => {
            Counters::add(match failure {
                Failure::Unavailable(_) => &counters.unavailable,
                Failure::Protocol(_) => &counters.protocol_errors,
                Failure::Arguments(_) => &counters.tool_errors,
            });
            Err(failure.into_error(&shared.spec.name))
        }
        Ok(Ok(result)) => {
            if result.is_error == Some(true) {
                Counters::add(&counters.tool_errors);
            }
            let response = response_of(result, &shared.spec.name, &tool, &ctx).await;
            if serde_json::to_vec(&response).map_or(0, |v| v.len()) > MAX_RESPONSE_BYTES {
                Counters::add(&counters.protocol_errors);
                return Err(ToolError::Failed(format!(
                    "the result of `{tool}` is over {MAX_RESPONSE_BYTES} bytes"
                )));
            }
            Ok(response)
        }
    }
}

enum Failure {
    Unavailable(String),
    Protocol(String),
    Arguments(String),
}

impl Failure {
    fn into_error(self, server: &str) -> ToolError {
        match self {
            Failure::Unavailable(why) => {
                ToolError::Failed(format!("MCP server {server} is unavailable: {why}"))
            }
            Failure::Protocol(why) => ToolError::Failed(format!("MCP server {server}: {why}")),
            Failure::Arguments(why) => ToolError::InvalidArguments(why),
        }
    }
}

/// Sends the call and waits for its answer (unbounded: the caller bounds it).
async fn send(
    shared: &Shared,
    tool: &str,
    args: Value,
    ctx: &Context,
) -> Result<CallToolResult, Failure> {
    let peer = shared.peer_for(tool).map_err(|e| match e {
        NoPeer::Down(why) => Failure::Unavailable(why),
        NoPeer::Removed => Failure::Unavailable(format!(
            "it no longer offers the tool `{tool}` (its tool list changed)"
        )),
    })?;
    let arguments = match args {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        _ => return Err(Failure::Arguments("the arguments must be an object".into())),
    };
    let mut options = PeerRequestOptions::no_options();
    if shared.spec.forward_identity {
        let invocation = ctx.invocation();
        let mut meta = Map::new();
        meta.insert(META_USER_ID.into(), json!(invocation.user_id));
        meta.insert(META_SESSION_ID.into(), json!(invocation.session_id));
        if let Some(claims) = &invocation.caller_claims {
            meta.insert(META_CLAIMS.into(), Value::Object(claims.as_ref().clone()));
        }
        options.meta = Some(RequestMetaObject(MetaObject(meta)));
    }
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer
        .send_cancellable_request(request, options)
        .await
        .map_err(|e| Failure::Unavailable(e.to_string()))?;
    let mut cancel = CancelOnDrop {
        peer: peer.clone(),
        id: Some(handle.id.clone()),
    };
    let answer = handle.rx.await;
    cancel.id = None;
    match answer {
        Ok(Ok(ServerResult::CallToolResult(result))) => Ok(result),
        Ok(Ok(_)) => Err(Failure::Protocol(
            "answered tools/call with something other than a tool result".into(),
        )),
        Ok(Err(ServiceError::McpError(error))) => Err(Failure::Protocol(format!(
            "error {}: {}",
            error.code.0, error.message
        ))),
        Ok(Err(error)) => Err(Failure::Unavailable(error.to_string())),
        Err(_) => Err(Failure::Unavailable(
            "the connection closed mid-call".into(),
        )),
    }
}

/// Tells the server a call it is running is no longer wanted, unless disarmed (`id` taken).
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let params = CancelledNotificationParam::new(
                    Some(id),
                    Some("the call was cancelled or timed out".into()),
                );
                let _ = peer.notify_cancelled(params).await;
            });
        }
    }
}

/// The function response of a tool result:
/// - `result`: the structured content when there is some, else the text blocks joined by lines
///   (structured results are, by the MCP spec, also repeated as text: that copy is left out);
/// - `content`: every block that is not text — images and audio saved as artifacts of the
///   session (named there), embedded resources with their text, resource links as they are;
/// - `error`: for `isError`, the text (or a generic message).
async fn response_of(result: CallToolResult, server: &str, tool: &str, ctx: &Context) -> Value {
    let is_error = result.is_error == Some(true);
    let blocks = serde_json::to_value(&result.content).unwrap_or(Value::Null);
    let mut texts: Vec<String> = Vec::new();
    let mut others = Vec::new();
    for (index, block) in blocks.as_array().into_iter().flatten().enumerate() {
        let kind = block
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match kind {
            "text" => texts.push(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            ),
            "image" | "audio" => {
                let mime = block
                    .get("mimeType")
                    .and_then(Value::as_str)
                    .unwrap_or("application/octet-stream");
                let data = block
                    .get("data")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                others.push(saved(ctx, server, tool, index, kind, mime, data).await);
            }
            "resource" => {
                let resource = block.get("resource").cloned().unwrap_or(Value::Null);
                match resource.get("blob").and_then(Value::as_str) {
                    Some(blob) => {
                        let mime = resource
                            .get("mimeType")
                            .and_then(Value::as_str)
                            .unwrap_or("application/octet-stream");
                        let mut entry = saved(ctx, server, tool, index, kind, mime, blob).await;
                        entry["uri"] = resource.get("uri").cloned().unwrap_or(Value::Null);
                        others.push(entry);
                    }
                    None => others.push(json!({ "type": "resource", "resource": resource })),
                }
            }
            _ => others.push(block.clone()),
        }
    }
    let mut response = Map::new();
    match result.structured_content {
        Some(structured) => {
            response.insert("result".into(), structured);
        }
        None if !texts.is_empty() && !is_error => {
            response.insert("result".into(), json!(texts.join("\n")));
        }
        None => {}
    }
    if is_error {
        let message = if texts.is_empty() {
            "the tool reported an error".to_owned()
        } else {
            texts.join("\n")
        };
        response.insert("error".into(), json!(message));
    }
    if !others.is_empty() {
        response.insert("content".into(), Value::Array(others));
    }
    Value::Object(response)
}

/// Saves a binary block as an artifact of the session; the entry names it (or says why not).
async fn saved(
    ctx: &Context,
    server: &str,
    tool: &str,
    index: usize,
    kind: &str,
    mime: &str,
    data: &str,
) -> Value {
    let bytes = match crate::event::decode_base64(data) {
        Ok(bytes) => bytes,
        Err(_) => return json!({ "type": kind, "mimeType": mime, "error": "not base64" }),
    };
    let filename = format!(
        "mcp-{server}-{tool}-{}-{index}.{}",
        uuid::Uuid::new_v4().simple(),
        extension(mime)
    );
    let size = bytes.len();
    let artifact = Artifact {
        data: bytes,
        mime_type: mime.to_owned(),
    };
    match ctx.save_artifact(&filename, artifact).await {
        Ok(version) => {
            json!({ "type": kind, "mimeType": mime, "bytes": size, "artifact": filename, "version": version })
        }
        Err(error) => {
            json!({ "type": kind, "mimeType": mime, "bytes": size, "error": format!("not saved: {error}") })
        }
    }
}

fn extension(mime: &str) -> &'static str {
    match mime.split(';').next().unwrap_or_default().trim() {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "audio/wav" | "audio/x-wav" => "wav",
        "audio/mpeg" => "mp3",
        "audio/ogg" => "ogg",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        _ => "bin",
    }
}
