//! Executing the function calls of one model message: concurrently, through the before/after-tool
//! callbacks, errors turned into `{"error": ...}` responses, results merged into one event.
//! Streaming tools start in the background and answer "pending" at once. Each call may have its
//! own cancellation: a cancelled call stops (its future is dropped, so an MCP call tells its
//! server) and has no response, while the others of its message go on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{FutureExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::{merge_actions, Context, Invocation};
use super::tool::{FunctionTool, ToolBody, ToolError};
use super::Callbacks;
use crate::event::{Content, Event, EventActions, FunctionCall, FunctionResponse, Part};
use crate::live::{live_request_queue, LiveRequest, LiveRequestQueue};
use crate::lock::Recover;
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
    let run = ToolRun {
        invocation,
        agent_name,
        tools,
        callbacks,
        background,
    };
    call_tools_cancellable(run, calls, &HashMap::new()).await
}

/// What a tool run needs besides its calls.
#[derive(Clone, Copy)]
pub struct ToolRun<'a> {
    /// The invocation the calls belong to.
    pub invocation: &'a Arc<Invocation>,
    /// The agent whose tools run (the author of the response event).
    pub agent_name: &'a str,
    /// The tools the agent has.
    pub tools: &'a [FunctionTool],
    /// Its before- and after-tool callbacks.
    pub callbacks: &'a Callbacks,
    /// In a live run: where streaming tools run, and the way to the model.
    pub background: Option<(&'a BackgroundTools, &'a mpsc::Sender<LiveInput>)>,
}

/// Like [`call_tools`], with a cancellation per call id: a call whose token is cancelled stops
/// and is left out of the event (`None` when every call was).
pub async fn call_tools_cancellable(
    run: ToolRun<'_>,
    calls: &[FunctionCall],
    cancels: &HashMap<String, CancellationToken>,
) -> Option<Event> {
    if calls.is_empty() {
        return None;
    }
    let runs = calls.iter().map(|call| {
        let tool = run.tools.iter().find(|t| t.name() == call.name);
        let span = tool_span(call);
        let outcome = span.clone();
        let cancel = call.id.as_ref().and_then(|id| cancels.get(id)).cloned();
        let one = call_one(run, tool, call).map(move |(response, actions)| {
            if response.response.get("error").is_some() {
                outcome
                    .record("error.type", "tool_error")
                    .record("otel.status_code", "error");
            }
            (response, actions)
        });
        async move {
            match cancel {
                Some(cancel) => tokio::select! {
                    // Dropping the call's future stops it where it is.
                    () = cancel.cancelled() => None,
                    done = one => Some(done),
                },
                None => Some(one.await),
            }
        }
        .instrument(span)
    });
    // All at once: two slow tools take as long as the slower one.
    let results: Vec<_> = futures::future::join_all(runs)
        .await
        .into_iter()
        .flatten()
        .collect();
    if results.is_empty() {
        return None;
    }
    let (invocation, agent_name) = (run.invocation, run.agent_name);
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
    run: ToolRun<'_>,
    tool: Option<&FunctionTool>,
    call: &FunctionCall,
) -> (FunctionResponse, EventActions) {
    let (callbacks, background) = (run.callbacks, run.background);
    let ctx = Context::new(run.invocation.clone(), run.agent_name, call.id.clone());
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
        // A non-blocking tool's result says when the model takes it up.
        scheduling: tool.and_then(FunctionTool::scheduling),
    };
    (response, ctx.take_actions())
}

/// A tool call's trace span (GenAI `execute_tool`), in the caller's span (the turn's). The size
/// of the arguments, not the arguments: they may carry what the user said.
fn tool_span(call: &FunctionCall) -> tracing::Span {
    let span = tracing::info_span!(
        target: crate::trace_context::SPAN_TARGET,
        "tool",
        otel.name = %format_args!("execute_tool {}", call.name),
        otel.kind = "internal",
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = call.name.as_str(),
        gen_ai.tool.call.id = call.id.as_deref().unwrap_or_default(),
        livegate.tool.args_bytes = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    if !span.is_disabled() {
        let bytes = call
            .args
            .as_ref()
            .and_then(|args| serde_json::to_vec(args).ok())
            .map_or(0, |json| json.len());
        // As i64: the OpenTelemetry bridge exports a u64 as a string.
        span.record("livegate.tool.args_bytes", bytes as i64);
    }
    span
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
                    scheduling: None,
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
        self.running.lock_or_recover()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::timeout;

    fn invocation() -> Arc<Invocation> {
        crate::agent::context::test_invocation(serde_json::Map::new())
    }

    fn call(id: &str, name: &str, args: Value) -> FunctionCall {
        FunctionCall {
            id: Some(id.into()),
            args: Some(args),
            name: name.into(),
        }
    }

    async fn to_model(model: &mut mpsc::Receiver<LiveInput>) -> FunctionResponse {
        match timeout(Duration::from_secs(5), model.recv()).await {
            Ok(Some(LiveInput::ToolResponse(mut responses))) if responses.len() == 1 => {
                responses.remove(0)
            }
            other => panic!("expected one tool response, got {other:?}"),
        }
    }

    /// A streaming tool that says it started, then reports every text the client sends.
    fn listener() -> FunctionTool {
        FunctionTool::streaming("listen", "", json!({}), true, |_, _, input| {
            let Some(mut input) = input else {
                return futures::stream::once(async { json!("no input") }).boxed();
            };
            async_stream::stream! {
                yield json!("started");
                loop {
                    let request = input.recv().await;
                    if request.close {
                        break;
                    }
                    if let Some(content) = request.content {
                        yield json!({ "heard": content.joined_text() });
                    }
                }
            }
            .boxed()
        })
    }

    #[tokio::test]
    async fn streaming_tools_answer_pending_then_stream_to_the_model_until_stopped() {
        let inv = invocation();
        let tools = [listener()];
        let background = BackgroundTools::default();
        let (tx, mut model) = mpsc::channel(8);
        let callbacks = Callbacks::default();
        let started = call_tools(
            &inv,
            "agent",
            &tools,
            &callbacks,
            &[call("c1", "listen", json!({}))],
            Some((&background, &tx)),
        )
        .await
        .unwrap();
        let response = &started.function_responses()[0].response;
        assert!(response["status"].as_str().unwrap().contains("pending"));
        assert_eq!(background.len(), 1);

        let first = to_model(&mut model).await;
        assert_eq!(
            (first.id.as_deref(), first.response),
            (Some("c1"), json!({"result": "started"}))
        );
        background.fan_out(&LiveRequest {
            content: Some(Content::text("user", "hello")),
            ..LiveRequest::default()
        });
        assert_eq!(
            to_model(&mut model).await.response,
            json!({"heard": "hello"})
        );

        let stop = |name: &str| call("c2", STOP_STREAMING, json!({ "function_name": name }));
        let stopped = call_tools(
            &inv,
            "agent",
            &tools,
            &callbacks,
            &[stop("listen")],
            Some((&background, &tx)),
        )
        .await
        .unwrap();
        assert_eq!(
            stopped.function_responses()[0].response["status"],
            "Successfully stopped streaming function listen"
        );
        assert!(background.is_empty());
        let again = call_tools(
            &inv,
            "agent",
            &tools,
            &callbacks,
            &[stop("listen")],
            Some((&background, &tx)),
        )
        .await
        .unwrap();
        assert!(again.function_responses()[0].response["status"]
            .as_str()
            .unwrap()
            .starts_with("No active streaming function"));
    }

    #[tokio::test]
    async fn a_stopped_flow_closes_every_tool_input() {
        let inv = invocation();
        let background = BackgroundTools::default();
        let (tx, mut model) = mpsc::channel(8);
        let calls = [
            call("a", "listen", json!({})),
            call("b", "listen", json!({})),
        ];
        call_tools(
            &inv,
            "agent",
            &[listener()],
            &Callbacks::default(),
            &calls,
            Some((&background, &tx)),
        )
        .await
        .unwrap();
        assert_eq!(background.len(), 2, "parallel calls get their own streams");
        to_model(&mut model).await;
        to_model(&mut model).await;
        assert_eq!(background.stop_all(), 2);
        assert!(background.is_empty());
        drop(tx);
        // Both tasks are gone: nothing else reaches the model and the channel ends.
        assert!(timeout(Duration::from_secs(5), model.recv())
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn unknown_tools_and_streaming_tools_outside_a_live_run_are_error_responses() {
        let inv = invocation();
        let event = call_tools(
            &inv,
            "agent",
            &[listener()],
            &Callbacks::default(),
            &[
                call("x", "missing", json!({})),
                call("y", "listen", json!({})),
            ],
            None,
        )
        .await
        .unwrap();
        let responses = event.function_responses();
        assert_eq!(
            responses[0].response,
            json!({"error": "tool `missing` is not available"})
        );
        assert!(responses[1].response["error"]
            .as_str()
            .unwrap()
            .contains("only runs in a live run"));
        assert_eq!(
            event.content.as_ref().unwrap().role.as_deref(),
            Some("user")
        );
    }
}
