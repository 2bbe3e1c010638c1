//! The built-in tools an agent file can enable: `get_current_time` and `calculate`.

pub mod calculate;
pub mod time;

use serde_json::json;

use super::tool::{string_arg, FunctionTool, ToolError};

/// Names of the built-in tools, as written in an agent file.
pub const BUILTIN_TOOLS: [&str; 2] = ["get_current_time", "calculate"];

/// `get_current_time(timezone)`: the current date and time in an IANA time zone.
pub fn get_current_time_tool() -> FunctionTool {
    FunctionTool::sync(
        "get_current_time",
        "Returns the current date and time in a time zone.",
        json!({
            "type": "object",
            "properties": {
                "timezone": {
                    "type": "string",
                    "description": "IANA time zone name, e.g. Asia/Tokyo, Europe/Paris or UTC"
                }
            },
            "required": ["timezone"]
        }),
        |args, _ctx| {
            let zone = string_arg(&args, "timezone")?;
            time::current_time(zone, jiff::Timestamp::now())
                .map_err(|e| ToolError::Failed(e.to_string()))
        },
    )
}

/// `calculate(expression)`: evaluates an arithmetic expression (no code is executed).
pub fn calculate_tool() -> FunctionTool {
    FunctionTool::sync(
        "calculate",
        "Evaluates an arithmetic expression: + - * / % ^, parentheses, sqrt, abs, round, \
         floor, ceil, ln, log10, exp, sin, cos, tan, min, max, pi, e.",
        json!({
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "the expression, e.g. (3 + 4) * 12 / 5"
                }
            },
            "required": ["expression"]
        }),
        |args, _ctx| {
            let expression = string_arg(&args, "expression")?;
            let value = calculate::evaluate(expression)
                .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
            Ok(json!({
                "expression": expression,
                "result": value,
                "formatted": calculate::format_number(value),
            }))
        },
    )
}

/// The built-in tool of that name.
pub fn builtin_tool(name: &str) -> Option<FunctionTool> {
    match name {
        "get_current_time" => Some(get_current_time_tool()),
        "calculate" => Some(calculate_tool()),
        _ => None,
    }
}
