//! Function tools: a declaration the model sees and a Rust body the runtime calls with the model's
//! arguments. Bodies are async, sync (run on the blocking pool), or streaming (a background stream
//! whose values are sent to the model as they arrive).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde_json::Value;

use super::context::Context;
use crate::event::Scheduling;
use crate::live::LiveRequestReceiver;
use crate::model::{Behavior, FunctionDeclaration};

/// Why a tool call failed; the model receives it as `{"error": "<message>"}`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// The model's arguments do not fit the tool.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
    /// The tool took longer than allowed.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// No tool of that name is available to the agent.
    #[error("tool `{0}` is not available")]
    NotFound(String),
}

/// What a tool call returns.
pub type ToolResult = Result<Value, ToolError>;

type AsyncBody = Arc<dyn Fn(Value, Context) -> BoxFuture<'static, ToolResult> + Send + Sync>;
type SyncBody = Arc<dyn Fn(Value, Context) -> ToolResult + Send + Sync>;
type StreamBody = Arc<
    dyn Fn(Value, Context, Option<LiveRequestReceiver>) -> BoxStream<'static, Value> + Send + Sync,
>;

/// How a tool runs.
#[derive(Clone)]
pub enum ToolBody {
    /// An async function.
    Async(AsyncBody),
    /// A blocking function, run on tokio's blocking pool so it never stalls audio.
    Sync(SyncBody),
    /// A background stream; with `input` it also gets its own live request queue.
    Streaming {
        /// Produces the stream for one call.
        start: StreamBody,
        /// The tool reads the client's live requests (audio, video) from an input stream.
        input: bool,
    },
}

/// A tool the model can call.
#[derive(Clone)]
pub struct FunctionTool {
    declaration: FunctionDeclaration,
    long_running: bool,
    /// Some for a non-blocking tool: when the model takes its result up.
    scheduling: Option<Scheduling>,
    body: ToolBody,
}

impl std::fmt::Debug for FunctionTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.body {
            ToolBody::Async(_) => "async",
            ToolBody::Sync(_) => "sync",
            ToolBody::Streaming { .. } => "streaming",
        };
        f.debug_struct("FunctionTool")
            .field("name", &self.declaration.name)
            .field("kind", &kind)
            .field("long_running", &self.long_running)
            .field("scheduling", &self.scheduling)
            .finish()
    }
}

fn declaration(name: &str, description: &str, parameters: Value) -> FunctionDeclaration {
    FunctionDeclaration {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters_json_schema: Some(parameters.into()),
        behavior: None,
    }
}

impl FunctionTool {
    /// An async tool: `parameters` is the JSON schema of its arguments.
    pub fn new<F, Fut>(name: &str, description: &str, parameters: Value, run: F) -> Self
    where
        F: Fn(Value, Context) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ToolResult> + Send + 'static,
    {
        FunctionTool {
            declaration: declaration(name, description, parameters),
            long_running: false,
            scheduling: None,
            body: ToolBody::Async(Arc::new(move |args, ctx| Box::pin(run(args, ctx)))),
        }
    }

    /// An async tool with a ready declaration (whose schema is shared, not copied).
    pub fn from_declaration<F, Fut>(declaration: FunctionDeclaration, run: F) -> Self
    where
        F: Fn(Value, Context) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ToolResult> + Send + 'static,
    {
        // A declaration that says non-blocking makes the tool so, with Gemini's default.
        let scheduling = declaration
            .is_non_blocking()
            .then_some(Scheduling::default());
        FunctionTool {
            declaration,
            long_running: false,
            scheduling,
            body: ToolBody::Async(Arc::new(move |args, ctx| Box::pin(run(args, ctx)))),
        }
    }

    /// A blocking tool, run off the async runtime.
    pub fn sync<F>(name: &str, description: &str, parameters: Value, run: F) -> Self
    where
        F: Fn(Value, Context) -> ToolResult + Send + Sync + 'static,
    {
        FunctionTool {
            declaration: declaration(name, description, parameters),
            long_running: false,
            scheduling: None,
            body: ToolBody::Sync(Arc::new(run)),
        }
    }

    /// A streaming tool: started in the background when called; each value it yields is sent to
    /// the model as a function response for the same call. `input` gives it its own live request
    /// queue fed with every client request.
    pub fn streaming<F>(
        name: &str,
        description: &str,
        parameters: Value,
        input: bool,
        start: F,
    ) -> Self
    where
        F: Fn(Value, Context, Option<LiveRequestReceiver>) -> BoxStream<'static, Value>
            + Send
            + Sync
            + 'static,
    {
        FunctionTool {
            declaration: declaration(name, description, parameters),
            long_running: false,
            scheduling: None,
            body: ToolBody::Streaming {
                start: Arc::new(start),
                input,
            },
        }
    }

    /// Marks the tool long-running: its call event lists it in `longRunningToolIds`.
    pub fn long_running(mut self) -> Self {
        self.long_running = true;
        self
    }

    /// Makes the tool non-blocking: the model goes on talking while a call runs, and takes the
    /// result up when the call ends, as `scheduling` says. Gemini Live is told so
    /// (`behavior: NON_BLOCKING`, `scheduling` on the response); OpenAI Realtime and sim are
    /// given the same behaviour by the gateway (docs/MODELS.md, "Non-blocking tools").
    pub fn non_blocking(mut self, scheduling: Scheduling) -> Self {
        self.declaration.behavior = Some(Behavior::NonBlocking);
        self.scheduling = Some(scheduling);
        self
    }

    /// Makes the tool blocking (the default): the model waits for a call's result.
    pub fn blocking(mut self) -> Self {
        self.declaration.behavior = None;
        self.scheduling = None;
        self
    }

    /// Whether the model waits for the tool's results.
    pub fn behavior(&self) -> Behavior {
        if self.scheduling.is_some() {
            Behavior::NonBlocking
        } else {
            Behavior::Blocking
        }
    }

    /// When the model takes a result up: Some for a non-blocking tool only.
    pub fn scheduling(&self) -> Option<Scheduling> {
        self.scheduling
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.declaration.name
    }

    /// What the model is told about the tool.
    pub fn declaration(&self) -> &FunctionDeclaration {
        &self.declaration
    }

    /// True for long-running tools.
    pub fn is_long_running(&self) -> bool {
        self.long_running
    }

    /// How the tool runs.
    pub fn body(&self) -> &ToolBody {
        &self.body
    }

    /// Runs an async or sync tool to completion (a streaming tool cannot be run this way).
    pub async fn call(&self, args: Value, ctx: Context) -> ToolResult {
        match &self.body {
            ToolBody::Async(run) => run(args, ctx).await,
            ToolBody::Sync(run) => {
                let run = run.clone();
                tokio::task::spawn_blocking(move || run(args, ctx))
                    .await
                    .unwrap_or_else(|e| Err(ToolError::Failed(format!("the tool panicked: {e}"))))
            }
            ToolBody::Streaming { .. } => Err(ToolError::Failed(format!(
                "`{}` is a streaming tool and only runs in a live run",
                self.name()
            ))),
        }
    }
}

/// Reads a required string argument.
pub fn string_arg<'a>(args: &'a Value, name: &str) -> Result<&'a str, ToolError> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::InvalidArguments(format!("`{name}` (a string) is required")))
}

/// A `scheduling` key on a tool the agent file makes blocking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("scheduling = \"{}\" is for non-blocking tools: set behavior = \"non_blocking\" or leave scheduling out", .0.as_config())]
pub struct SchedulingOnBlocking(pub Scheduling);

/// What an agent file's `behavior` and `scheduling` keys make of a tool: Some(scheduling) for a
/// non-blocking one. A `scheduling` alone makes it non-blocking (as ADK reads a tool with a
/// response scheduling and no behavior); `inherited` is the scheduling of the table above it
/// (an MCP server's, for one of its tools).
pub fn resolve_mode(
    behavior: Option<Behavior>,
    scheduling: Option<Scheduling>,
    inherited: Option<Scheduling>,
) -> Result<Option<Scheduling>, SchedulingOnBlocking> {
    match (behavior, scheduling) {
        (Some(Behavior::Blocking), Some(scheduling)) => Err(SchedulingOnBlocking(scheduling)),
        (Some(Behavior::Blocking), None) => Ok(None),
        (Some(Behavior::NonBlocking), scheduling) => {
            Ok(Some(scheduling.or(inherited).unwrap_or_default()))
        }
        (None, Some(scheduling)) => Ok(Some(scheduling)),
        (None, None) => Ok(inherited),
    }
}

/// Reads a `scheduling` key of the agent file: `interrupt`, `when_idle` or `silent`.
pub fn scheduling_key<'de, D>(deserializer: D) -> Result<Option<Scheduling>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let name = <String as serde::Deserialize>::deserialize(deserializer)?;
    Scheduling::from_config(&name).map(Some).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "unknown scheduling {name:?}: expected \"interrupt\", \"when_idle\" or \"silent\""
        ))
    })
}
