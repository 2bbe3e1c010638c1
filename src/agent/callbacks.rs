//! Callbacks (ADK seed 001): before/after agent, model and tool. Returning `None` lets the step
//! proceed; returning a value overrides it (skips the agent, the model call or the tool, or
//! replaces its result). With several callbacks of a kind, the first that returns a value wins.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::context::Context;
use crate::event::{Content, FunctionCall};
use crate::model::{LlmRequest, LlmResponse};

type AgentFn = Arc<dyn Fn(Context) -> BoxFuture<'static, Option<Content>> + Send + Sync>;
type BeforeModelFn =
    Arc<dyn Fn(Context, LlmRequest) -> BoxFuture<'static, Option<LlmResponse>> + Send + Sync>;
type AfterModelFn =
    Arc<dyn Fn(Context, LlmResponse) -> BoxFuture<'static, Option<LlmResponse>> + Send + Sync>;
type BeforeToolFn =
    Arc<dyn Fn(FunctionCall, Context) -> BoxFuture<'static, Option<Value>> + Send + Sync>;
type AfterToolFn =
    Arc<dyn Fn(FunctionCall, Context, Value) -> BoxFuture<'static, Option<Value>> + Send + Sync>;

/// An agent's callbacks, each kind a chain.
#[derive(Clone, Default)]
pub struct Callbacks {
    before_agent: Vec<AgentFn>,
    after_agent: Vec<AgentFn>,
    before_model: Vec<BeforeModelFn>,
    after_model: Vec<AfterModelFn>,
    before_tool: Vec<BeforeToolFn>,
    after_tool: Vec<AfterToolFn>,
}

impl std::fmt::Debug for Callbacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callbacks")
            .field("before_agent", &self.before_agent.len())
            .field("after_agent", &self.after_agent.len())
            .field("before_model", &self.before_model.len())
            .field("after_model", &self.after_model.len())
            .field("before_tool", &self.before_tool.len())
            .field("after_tool", &self.after_tool.len())
            .finish()
    }
}

impl Callbacks {
    /// Adds a before-agent callback: content returned is the agent's answer and the agent is skipped.
    pub fn before_agent<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<Content>> + Send + 'static,
    {
        self.before_agent
            .push(Arc::new(move |ctx| Box::pin(f(ctx))));
        self
    }

    /// Adds an after-agent callback: content returned is added after the agent's events.
    pub fn after_agent<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<Content>> + Send + 'static,
    {
        self.after_agent.push(Arc::new(move |ctx| Box::pin(f(ctx))));
        self
    }

    /// Adds a before-model callback: a response returned is used instead of calling the model
    /// (in a live run: the user message is blocked and answered with it).
    pub fn before_model<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Context, LlmRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<LlmResponse>> + Send + 'static,
    {
        self.before_model
            .push(Arc::new(move |ctx, request| Box::pin(f(ctx, request))));
        self
    }

    /// Adds an after-model callback: a response returned replaces the model's.
    pub fn after_model<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Context, LlmResponse) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<LlmResponse>> + Send + 'static,
    {
        self.after_model
            .push(Arc::new(move |ctx, response| Box::pin(f(ctx, response))));
        self
    }

    /// Adds a before-tool callback: a value returned is the tool's result and the tool is skipped.
    pub fn before_tool<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(FunctionCall, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<Value>> + Send + 'static,
    {
        self.before_tool
            .push(Arc::new(move |call, ctx| Box::pin(f(call, ctx))));
        self
    }

    /// Adds an after-tool callback: a value returned replaces the tool's result.
    pub fn after_tool<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(FunctionCall, Context, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<Value>> + Send + 'static,
    {
        self.after_tool.push(Arc::new(move |call, ctx, result| {
            Box::pin(f(call, ctx, result))
        }));
        self
    }

    /// Runs the before-agent chain.
    pub async fn run_before_agent(&self, ctx: &Context) -> Option<Content> {
        first(&self.before_agent, |f| f(ctx.clone())).await
    }

    /// Runs the after-agent chain.
    pub async fn run_after_agent(&self, ctx: &Context) -> Option<Content> {
        first(&self.after_agent, |f| f(ctx.clone())).await
    }

    /// True if there are before-model callbacks (so a live run screens user content).
    pub fn has_before_model(&self) -> bool {
        !self.before_model.is_empty()
    }

    /// True if there are after-model callbacks.
    pub fn has_after_model(&self) -> bool {
        !self.after_model.is_empty()
    }

    /// Runs the before-model chain.
    pub async fn run_before_model(
        &self,
        ctx: &Context,
        request: &LlmRequest,
    ) -> Option<LlmResponse> {
        first(&self.before_model, |f| f(ctx.clone(), request.clone())).await
    }

    /// Runs the after-model chain.
    pub async fn run_after_model(
        &self,
        ctx: &Context,
        response: &LlmResponse,
    ) -> Option<LlmResponse> {
        first(&self.after_model, |f| f(ctx.clone(), response.clone())).await
    }

    /// Runs the before-tool chain.
    pub async fn run_before_tool(&self, call: &FunctionCall, ctx: &Context) -> Option<Value> {
        first(&self.before_tool, |f| f(call.clone(), ctx.clone())).await
    }

    /// Runs the after-tool chain.
    pub async fn run_after_tool(
        &self,
        call: &FunctionCall,
        ctx: &Context,
        result: &Value,
    ) -> Option<Value> {
        first(&self.after_tool, |f| {
            f(call.clone(), ctx.clone(), result.clone())
        })
        .await
    }
}

/// Runs a chain in order until a callback returns a value (ADK: the first override wins).
async fn first<F: ?Sized, T>(
    chain: &[Arc<F>],
    call: impl Fn(&F) -> BoxFuture<'static, Option<T>>,
) -> Option<T> {
    for f in chain {
        if let Some(value) = call(f).await {
            return Some(value);
        }
    }
    None
}
