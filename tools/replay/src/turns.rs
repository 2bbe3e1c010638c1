//! What the agent did in one turn, read from ADK events the same way for the recorded call and
//! the replay: its tool calls, transfers, text, the user's transcription, interrupted or not,
//! errors. Partial events are skipped: the stored history never has them, so the replay's live
//! stream is read as the history would be.

use serde::Serialize;
use serde_json::Value;

/// One tool call: its name and arguments (the call's id differs between runs and is left out).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments.
    pub args: Value,
}

impl std::fmt::Display for ToolCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name, self.args)
    }
}

/// What the agent did in answer to one user input.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Turn {
    /// The tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// The agents handed over to.
    pub transfers: Vec<String>,
    /// The answer's text (written, or the transcription of its speech).
    pub text: String,
    /// What the model heard (the user's speech transcribed).
    pub heard: String,
    /// The answer was interrupted.
    pub interrupted: bool,
    /// Error events, as `CODE: message`.
    pub errors: Vec<String>,
    /// The turn ended (`turnComplete`).
    pub complete: bool,
    /// From the input's start to the answer's first audio, in milliseconds.
    pub first_audio_ms: Option<f64>,
    /// The answer's audio recordings (recorded call: bundle paths).
    pub audio: Vec<String>,
}

impl Turn {
    /// Takes one event into the turn.
    pub fn add(&mut self, event: &Value) {
        if event["partial"] == Value::Bool(true) {
            return;
        }
        let user = event["author"] == "user";
        if let Some(parts) = event["content"]["parts"].as_array() {
            for part in parts {
                if let Some(call) = part.get("functionCall") {
                    self.tool_calls.push(ToolCall {
                        name: call["name"].as_str().unwrap_or_default().to_owned(),
                        args: call.get("args").cloned().unwrap_or(Value::Null),
                    });
                }
                if let (false, Some(text)) = (user, part["text"].as_str()) {
                    if part["thought"] != Value::Bool(true) {
                        append(&mut self.text, text);
                    }
                }
            }
        }
        if let Some(agent) = event["actions"]["transferToAgent"].as_str() {
            self.transfers.push(agent.to_owned());
        }
        let transcription = |key: &str| {
            let t = &event[key];
            (t["finished"] == Value::Bool(true))
                .then(|| t["text"].as_str())
                .flatten()
        };
        if let Some(text) = transcription("outputTranscription") {
            append(&mut self.text, text);
        }
        if let Some(text) = transcription("inputTranscription") {
            append(&mut self.heard, text);
        }
        if event["interrupted"] == Value::Bool(true) {
            self.interrupted = true;
        }
        if let Some(code) = event["errorCode"].as_str() {
            let message = event["errorMessage"].as_str().unwrap_or_default();
            self.errors.push(format!("{code}: {message}"));
        }
        if event["turnComplete"] == Value::Bool(true) {
            self.complete = true;
        }
    }
}

fn append(to: &mut String, text: &str) {
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    if !to.is_empty() {
        to.push(' ');
    }
    to.push_str(text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_turn_reads_calls_transfers_text_and_flags() {
        let mut turn = Turn::default();
        for event in [
            json!({"author": "a", "partial": true, "content": {"parts": [{"text": "He"}]}}),
            json!({"author": "a", "content": {"parts": [{"functionCall": {"id": "x", "name": "calc", "args": {"e": "1+1"}}}]}}),
            json!({"author": "a", "actions": {"transferToAgent": "orders"}}),
            json!({"author": "a", "content": {"parts": [{"text": "Hello"}]}}),
            json!({"author": "user", "content": {"parts": [{"text": "typed"}]}}),
            json!({"author": "user", "inputTranscription": {"text": "hi", "finished": true}}),
            json!({"author": "a", "outputTranscription": {"text": "there", "finished": true}}),
            json!({"author": "a", "interrupted": true}),
            json!({"author": "a", "errorCode": "X", "errorMessage": "m"}),
            json!({"author": "a", "turnComplete": true}),
        ] {
            turn.add(&event);
        }
        assert_eq!(turn.tool_calls.len(), 1);
        assert_eq!(turn.tool_calls[0].to_string(), r#"calc({"e":"1+1"})"#);
        assert_eq!(turn.transfers, ["orders"]);
        assert_eq!(
            (turn.text.as_str(), turn.heard.as_str()),
            ("Hello there", "hi")
        );
        assert!(turn.interrupted && turn.complete);
        assert_eq!(turn.errors, ["X: m"]);
    }
}
