//! The built-in tools an agent file can enable: `get_current_time`, `calculate`, and
//! `get_keypad_digits` (the keys a phone caller pressed, with `--telephony-dtmf tool`).

pub mod calculate;
pub mod time;

use serde_json::json;

use super::tool::{string_arg, FunctionTool, ToolError};

/// Names of the built-in tools an agent gets by default, as written in an agent file.
pub const BUILTIN_TOOLS: [&str; 2] = ["get_current_time", "calculate"];

/// Where a phone call keeps the keys its caller pressed (with `--telephony-dtmf tool`).
pub const KEYPAD_STATE_KEY: &str = "temp:dtmf";
/// How many of those keys `get_keypad_digits` has already returned.
const KEYPAD_READ_KEY: &str = "temp:dtmf_read";
/// Most keys a call keeps.
pub const MAX_KEYPAD_DIGITS: usize = 256;

/// `get_keypad_digits()`: the keys the phone caller pressed since the last call of the tool.
pub fn get_keypad_digits_tool() -> FunctionTool {
    FunctionTool::sync(
        "get_keypad_digits",
        "Returns the keys (0-9, *, #) the caller pressed on the phone keypad since this tool \
         was last called.",
        json!({"type": "object", "properties": {}}),
        |_args, ctx| {
            let all = ctx
                .state(KEYPAD_STATE_KEY)
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let read = ctx
                .state(KEYPAD_READ_KEY)
                .and_then(|v| v.as_u64())
                .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
            let new = all
                .get(read.min(all.len())..)
                .unwrap_or_default()
                .to_owned();
            ctx.set_state(KEYPAD_READ_KEY, json!(all.len()));
            Ok(json!({ "digits": new, "allDigits": all }))
        },
    )
}

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
        "get_keypad_digits" => Some(get_keypad_digits_tool()),
        _ => None,
    }
}
