//! Executing the function calls of one model message: concurrently, through the before/after-tool
//! callbacks, errors turned into `{"error": ...}` responses, results merged into one event.
//! Streaming tools start in the background and answer "pending" at once.

use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::context::{merge_actions, Context, Invocation};
use super::tool::{FunctionTool, ToolBody, ToolError};
use super::Callbacks;
use crate::event::{Content, Event, EventActions, FunctionCall, FunctionResponse, Part};
use crate::live::{live_request_queue, LiveRequest, LiveRequestQueue};
use crate::model::LiveInput;

/// The function ADK intercepts to stop a streaming tool.
pub const STOP_STREAMING: &str = "stop_streaming";

/// Capacity of a streaming tool's input queue.
const TOOL_INPUT_CAPACITY: usize = 64;

/// Runs `calls` for `agent_name` and returns the merged function-response event (`None` if there
/// are no calls). `background` runs streaming tools in a live run; without it they fail.
pub async fn call_tools(
    invocation: &Arc<Invocation>,
    agent_name: &str,
    tools: &[FunctionTool],
    callbacks: &Callbacks,
    calls: &[FunctionCall],
    background: Option<(&BackgroundTools, &mpsc::Sender<LiveInput>)>,
) -> Option<Event> {
    if calls.is_empty() {
        return None;
    }
    let runs = calls.iter().map(|call| {
        let tool = tools.iter().find(|t| t.name() == call.name);
        call_one(invocation, agent_name, tool, callbacks, call, background)
    });
    // All at once: two slow tools take as long as the slower one.
    let results = futures::future::join_all(runs).await;
    let mut actions = EventActions::default();
    let mut parts = Vec::with_capacity(results.len());
    for (response, step_actions) in results {
        merge_actions(&mut actions, step_actions);
        parts.push(Part {
            function_response: Some(response),
            ..Part::default()
        });
    }
    let mut event = Event::new(&invocation.invocation_id, agent_name);
    event.content = Some(Content {
        parts,
        role: Some("user".into()),
    });
    event.actions = actions;
    Some(event)
}

async fn call_one(
    invocation: &Arc<Invocation>,
    agent_name: &str,
    tool: Option<&FunctionTool>,
    callbacks: &Callbacks,
    call: &FunctionCall,
    background: Option<(&BackgroundTools, &mpsc::Sender<LiveInput>)>,
) -> (FunctionResponse, EventActions) {
    let ctx = Context::new(invocation.clone(), agent_name, call.id.clone());
    let args = call.args.clone().unwrap_or_else(|| json!({}));
    let result = match callbacks.run_before_tool(call, &ctx).await {
        Some(value) => value,
        None => match (tool, background) {
            (Some(tool), Some((running, to_model))) if is_streaming(tool) => {
                running.start(tool, call, args, ctx.clone(), to_model.clone())
            }
            (None, Some((running, _))) if call.name == STOP_STREAMING => {
                let name = args.get("function_name").and_then(Value::as_str);
                running.stop_named(name).await
            }
            (Some(tool), _) => match tool.call(args, ctx.clone()).await {
                Ok(value) => value,
                Err(error) => error_response(call, &error),
            },
            (None, _) => error_response(call, &ToolError::NotFound(call.name.clone())),
        },
    };
    let result = callbacks
        .run_after_tool(call, &ctx, &result)
        .await
        .unwrap_or(result);
    let response = FunctionResponse {
        id: call.id.clone(),
        name: call.name.clone(),
        response: as_object(result),
    };
    (response, ctx.take_actions())
}

fn is_streaming(tool: &FunctionTool) -> bool {
    matches!(tool.body(), ToolBody::Streaming { .. })
}

fn error_response(call: &FunctionCall, error: &ToolError) -> Value {
    tracing::warn!(tool = call.name, call_id = ?call.id, %error, "tool call failed");
    json!({ "error": error.to_string() })
}

/// Function responses are objects; anything else is wrapped as `{"result": value}` (as ADK does).
fn as_object(value: Value) -> Value {
    if value.is_object() {
        value
    } else {
        json!({ "result": value })
    }
}

/// The streaming tools running in one live flow.
#[derive(Debug, Default)]
pub struct BackgroundTools {
    running: Mutex<Vec<Running>>,
}

#[derive(Debug)]
struct Running {
    name: String,
    task: JoinHandle<()>,
    input: Option<LiveRequestQueue>,
}

impl BackgroundTools {
    /// Starts a streaming tool; each value it yields goes to the model as a function response.
    fn start(
        &self,
        tool: &FunctionTool,
        call: &FunctionCall,
        args: Value,
        ctx: Context,
        to_model: mpsc::Sender<LiveInput>,
    ) -> Value {
        let ToolBody::Streaming { start, input } = tool.body() else {
            return json!({ "error": "not a streaming tool" });
        };
        let (queue, receiver) = if *input {
            let (queue, receiver) = live_request_queue(TOOL_INPUT_CAPACITY);
            (Some(queue), Some(receiver))
        } else {
            (None, None)
        };
        let mut stream = start(args, ctx, receiver);
        let (id, name) = (call.id.clone(), call.name.clone());
        let task = tokio::spawn(async move {
            while let Some(value) = stream.next().await {
                let response = FunctionResponse {
                    id: id.clone(),
                    name: name.clone(),
                    response: as_object(value),
                };
                if to_model
                    .send(LiveInput::ToolResponse(vec![response]))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
        self.lock().push(Running {
            name: tool.name().to_owned(),
            task,
            input: queue,
        });
        json!({ "status": "The function is running asynchronously and the results are pending." })
    }

    /// Copies a client request to every running tool's input; a tool that is not keeping up
    /// misses it rather than stalling the client.
    pub fn fan_out(&self, request: &LiveRequest) {
        for running in self.lock().iter() {
            if let Some(input) = &running.input {
                if !input.try_send(request.clone()) {
                    tracing::debug!(
                        tool = running.name,
                        "streaming tool input full; request dropped"
                    );
                }
            }
        }
    }

    /// Stops the tools named `name` (the `stop_streaming` function).
    async fn stop_named(&self, name: Option<&str>) -> Value {
        let Some(name) = name else {
            return json!({ "error": "`function_name` (a string) is required" });
        };
        let stopped = self.stop(|r| r.name == name);
        if stopped == 0 {
            json!({ "status": format!("No active streaming function named {name} found") })
        } else {
            json!({ "status": format!("Successfully stopped streaming function {name}") })
        }
    }

    /// Stops every running tool and closes its input; returns how many there were.
    pub fn stop_all(&self) -> usize {
        self.stop(|_| true)
    }

    /// How many tools are running.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no tool is running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn stop(&self, matches: impl Fn(&Running) -> bool) -> usize {
        let mut running = self.lock();
        let (stop, keep): (Vec<Running>, Vec<Running>) =
            running.drain(..).partition(|r| matches(r));
        *running = keep;
        for tool in &stop {
            if let Some(input) = &tool.input {
                input.close();
            }
            tool.task.abort();
        }
        stop.len()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }
}
