//! HTTP tools: declared in the agent file; a call POSTs the model's arguments as JSON to a URL and
//! the JSON reply is the function response. How people who do not write Rust give agents tools.

use std::time::Duration;

use serde_json::Value;

use super::tool::{FunctionTool, ToolError};

/// Largest reply body an HTTP tool accepts.
const MAX_REPLY_BYTES: usize = 1024 * 1024;

/// A tool that POSTs its arguments to `url` and answers with the JSON reply; a timeout, a non-2xx
/// status or a non-JSON body is an error response.
pub fn http_tool(
    name: &str,
    description: &str,
    parameters: Value,
    url: String,
    timeout: Duration,
    client: reqwest::Client,
) -> FunctionTool {
    let tool_name = name.to_owned();
    FunctionTool::new(name, description, parameters, move |args, _ctx| {
        let (client, url, tool_name) = (client.clone(), url.clone(), tool_name.clone());
        async move {
            // The call's trace goes on to the tool's server (when traces are exported).
            let traceparent = crate::trace_context::traceparent_of(&tracing::Span::current());
            let call = async {
                let mut request = client.post(&url).json(&args);
                if let Some(traceparent) = traceparent {
                    request = request.header(crate::trace_context::TRACEPARENT, traceparent);
                }
                let reply = request
                    .send()
                    .await
                    .map_err(|e| ToolError::Failed(format!("request failed: {e}")))?;
                let status = reply.status();
                let body = reply
                    .bytes()
                    .await
                    .map_err(|e| ToolError::Failed(format!("reading the reply failed: {e}")))?;
                if body.len() > MAX_REPLY_BYTES {
                    return Err(ToolError::Failed(format!(
                        "the reply is larger than {MAX_REPLY_BYTES} bytes"
                    )));
                }
                if !status.is_success() {
                    let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
                    return Err(ToolError::Failed(format!("HTTP {status}: {text}")));
                }
                serde_json::from_slice::<Value>(&body)
                    .map_err(|e| ToolError::Failed(format!("the reply is not JSON: {e}")))
            };
            tracing::debug!(tool = tool_name, url, "calling HTTP tool");
            tokio::time::timeout(timeout, call)
                .await
                .unwrap_or(Err(ToolError::Timeout(timeout)))
        }
    })
}
