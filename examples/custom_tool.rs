//! A tool and a callback written in Rust, served by the stock gateway: every flag of
//! `livegate serve` works (`cargo run --example custom_tool -- --bind 127.0.0.1:8080`), and the
//! agent (`--agent FILE`, or the built-in one) gets one more tool.
//!
//! On `--model sim`, typing "order_status order_id=A-17" calls the tool; "order_status
//! order_id=test" is answered by the callback without running it.

use std::time::Duration;

use livegate::agent::{string_arg, Agent, Callbacks, FunctionTool, LlmAgent};
use livegate::gateway::{self, CustomizeError, ServeArgs};
use serde_json::{json, Value};

/// The tool: its name, what the model is told, its JSON schema, and what it does.
fn order_status() -> FunctionTool {
    FunctionTool::sync(
        "order_status",
        "Where an order is.",
        json!({
            "type": "object",
            "properties": { "order_id": { "type": "string" } },
            "required": ["order_id"],
        }),
        |args, _ctx| {
            let id = string_arg(&args, "order_id")?;
            Ok(json!({ "order_id": id, "status": "shipped", "carrier": "parcel post" }))
        },
    )
}

/// A before-tool callback: test orders get a canned answer and the tool does not run.
fn callbacks() -> Callbacks {
    Callbacks::default().before_tool(|call, _ctx| async move {
        let id = call.args.as_ref().and_then(|a| a.get("order_id"));
        (id == Some(&Value::from("test"))).then(|| json!({ "status": "test orders never ship" }))
    })
}

/// Adds both to the agent the gateway built from its flags.
fn customize(agent: Agent) -> Result<Agent, CustomizeError> {
    let Agent::Llm(root) = agent else {
        return Err("the root agent must be an LLM agent to take a tool".into());
    };
    // An agent file has no callbacks to keep.
    let root = LlmAgent::clone(&root)
        .with_tool(order_status())
        .with_callbacks(callbacks());
    Ok(root.into())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = ServeArgs::from_command_line()?;
    livegate::cli::init_logging(args.log_format);
    let server = gateway::start_with(&args, Box::new(customize)).await?;
    println!("livegate listening on {}://{}", server.scheme, server.addr);
    livegate::cli::shutdown_signal().await;
    server
        .shutdown(Duration::from_secs(args.drain_timeout))
        .await;
    Ok(())
}
