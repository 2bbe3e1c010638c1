//! The tools the runtime adds to agents in a tree: `transfer_to_agent` for a coordinator and its
//! sub-agents, `task_completed` for the steps of a sequential agent.

use serde_json::{json, Value};

use super::tool::{string_arg, FunctionTool, ToolError};

/// Name of the transfer tool.
pub const TRANSFER_TO_AGENT: &str = "transfer_to_agent";

/// `transfer_to_agent(agent_name)`: hands the conversation to one of `targets`.
pub fn transfer_to_agent_tool(targets: &[&str]) -> FunctionTool {
    let allowed: Vec<String> = targets.iter().map(|t| (*t).to_owned()).collect();
    let parameters = json!({
        "type": "object",
        "properties": {
            "agent_name": {
                "type": "string",
                "description": "the agent to transfer to",
                "enum": allowed,
            }
        },
        "required": ["agent_name"],
    });
    FunctionTool::sync(
        TRANSFER_TO_AGENT,
        "Transfer the question to another agent.",
        parameters,
        move |args, ctx| {
            let name = string_arg(&args, "agent_name")?;
            if !allowed.iter().any(|a| a == name) {
                return Err(ToolError::InvalidArguments(format!(
                    "no agent named `{name}` to transfer to (choose one of: {})",
                    allowed.join(", ")
                )));
            }
            ctx.transfer_to_agent(name);
            Ok(json!({ "result": Value::Null }))
        },
    )
}

/// `task_completed()`: the step of a sequence is done.
pub fn task_completed_tool() -> FunctionTool {
    FunctionTool::sync(
        crate::live::flow::TASK_COMPLETED,
        "Signals that the agent has successfully completed the user's question or task.",
        json!({ "type": "object", "properties": {} }),
        |_, _| Ok(json!({ "result": "Task completion signaled." })),
    )
}
