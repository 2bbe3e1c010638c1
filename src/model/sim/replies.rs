//! What the sim says: deterministic replies to what it heard, their fragments, and token estimates.

use serde_json::{json, Map, Value};

use super::intents::{detect, Intent};
use crate::event::{FunctionCall, FunctionResponse};
use crate::model::{LiveConnectConfig, Modality};

/// The transfer tool the runtime gives coordinators.
const TRANSFER_TO_AGENT: &str = "transfer_to_agent";
/// The tool the runtime gives the steps of a sequence.
const TASK_COMPLETED: &str = "task_completed";

/// What the user said in one turn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Heard<'a> {
    /// Typed text (a complete content turn, with any earlier partial turns before it).
    Text(&'a str),
    /// An utterance of speech lasting `seconds`.
    Speech {
        /// Duration of the utterance.
        seconds: f64,
    },
}

/// What the sim decides to do about a turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Answer with this text (written in TEXT modality, spoken in AUDIO modality).
    Say(String),
    /// Call these tools first; the answer follows their responses.
    Call(Vec<FunctionCall>),
}

/// Decides the reply to one turn.
pub fn plan_reply(heard: &Heard<'_>, config: &LiveConnectConfig) -> Reply {
    match *heard {
        Heard::Text(text) => match tool_calls_for(text, config) {
            Some(calls) => Reply::Call(calls),
            None => Reply::Say(text_reply(text)),
        },
        Heard::Speech { seconds } => Reply::Say(speech_reply(seconds, config.modality())),
    }
}

/// The tool calls a typed turn asks for, among the tools the agent declared:
/// - a transfer target's name (`transfer_to_agent`);
/// - a time question (`get_current_time`) or arithmetic (`calculate`);
/// - declared tool names written in the text, each called with the text's `key=value` words;
/// - otherwise `task_completed`, when declared: a step of a sequence is done after one exchange.
pub fn tool_calls_for(text: &str, config: &LiveConnectConfig) -> Option<Vec<FunctionCall>> {
    let declared = |name: &str| config.tools.iter().find(|t| t.name == name);
    let lower = text.to_lowercase();
    if let Some(transfer) = declared(TRANSFER_TO_AGENT) {
        let targets = transfer
            .parameters_json_schema
            .as_ref()
            .and_then(|s| s.pointer("/properties/agent_name/enum"))
            .and_then(Value::as_array);
        let named = targets
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find(|t| {
                let t = t.to_lowercase();
                lower.contains(&t) || lower.contains(&t.replace('_', " "))
            });
        if let Some(target) = named {
            return Some(vec![call(
                TRANSFER_TO_AGENT,
                json!({ "agent_name": target }),
            )]);
        }
    }
    match detect(text) {
        Some(Intent::Time { timezone }) if declared("get_current_time").is_some() => {
            return Some(vec![call(
                "get_current_time",
                json!({ "timezone": timezone }),
            )]);
        }
        Some(Intent::Calculate { expression }) if declared("calculate").is_some() => {
            return Some(vec![call("calculate", json!({ "expression": expression }))]);
        }
        _ => {}
    }
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || ",;!?".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    let named: Vec<FunctionCall> = config
        .tools
        .iter()
        .filter(|t| t.name != TRANSFER_TO_AGENT && t.name != TASK_COMPLETED)
        .filter(|t| words.iter().any(|w| w.trim_end_matches('.') == t.name))
        .map(|t| call(&t.name, key_values(&words)))
        .collect();
    if !named.is_empty() {
        return Some(named);
    }
    declared(TASK_COMPLETED).map(|_| vec![call(TASK_COMPLETED, json!({}))])
}

fn call(name: &str, args: Value) -> FunctionCall {
    FunctionCall {
        id: Some(format!("sim-call-{}", uuid::Uuid::new_v4().simple())),
        args: Some(args),
        name: name.to_owned(),
    }
}

/// `key=value` words as arguments; values that parse as JSON numbers or booleans keep that type.
fn key_values(words: &[&str]) -> Value {
    let mut args = Map::new();
    for word in words {
        if let Some((key, value)) = word.split_once('=') {
            let value = value.trim_end_matches('.');
            if key.is_empty() || value.is_empty() {
                continue;
            }
            let parsed = match serde_json::from_str::<Value>(value) {
                Ok(v @ (Value::Number(_) | Value::Bool(_))) => v,
                _ => Value::String(value.to_owned()),
            };
            args.insert(key.to_owned(), parsed);
        }
    }
    Value::Object(args)
}

/// The answer once the tools responded: what each result says, in call order. `asked` is the
/// user's text, which a `task_completed` step still answers.
pub fn tool_answer(asked: &str, calls: &[FunctionCall], responses: &[FunctionResponse]) -> String {
    let mut sentences = Vec::new();
    for call in calls {
        let response = responses
            .iter()
            .find(|r| r.id.is_some() && r.id == call.id)
            .or_else(|| responses.iter().find(|r| r.name == call.name));
        let result = response.map_or(&Value::Null, |r| &r.response);
        let error = result
            .get("error")
            .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned));
        let sentence = match (call.name.as_str(), error) {
            (TASK_COMPLETED, _) => text_reply(asked),
            (TRANSFER_TO_AGENT, None) => {
                let target = call
                    .args
                    .as_ref()
                    .and_then(|a| a.get("agent_name"))
                    .and_then(Value::as_str);
                format!("Transferring you to {}.", target.unwrap_or("another agent"))
            }
            ("get_current_time", None) => {
                let field = |k: &str| {
                    result
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_owned()
                };
                format!(
                    "It's {} on {}, {} in {}.",
                    field("time"),
                    field("weekday"),
                    field("date"),
                    field("timezone")
                )
            }
            ("calculate", None) => {
                let field = |k: &str| {
                    result.get(k).map_or_else(
                        || "?".to_owned(),
                        |v| v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                    )
                };
                format!("{} = {}.", field("expression"), field("formatted"))
            }
            (name, Some(error)) => format!("Calling {name} failed: {error}."),
            (name, None) => format!("{name} returned {result}."),
        };
        sentences.push(sentence);
    }
    sentences.join(" ")
}

/// What the sim says at once after calling only non-blocking tools: it goes on while they run.
pub fn running_answer(calls: &[FunctionCall]) -> String {
    let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    let verb = if names.len() == 1 { "is" } else { "are" };
    format!(
        "{} {verb} running; I'll tell you when it's done.",
        names.join(" and ")
    )
}

/// The sim's answer to a system notice: it reads it out.
pub fn notice_reply(text: &str) -> String {
    format!("Noted: {}", text.trim())
}

/// Words of the user's text quoted back at most.
const QUOTE_WORDS: usize = 12;

/// The reply to typed text: `Hello! I'm the livegate simulator. You said: "…".`, plus a sentence
/// for longer inputs.
pub fn text_reply(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() {
        return "Hello! I'm the livegate simulator. I didn't catch any words. Could you say that again?"
            .into();
    }
    let mut quote = words[..words.len().min(QUOTE_WORDS)].join(" ");
    if words.len() > QUOTE_WORDS {
        quote.push('…');
    }
    let mut reply = format!("Hello! I'm the livegate simulator. You said: \"{quote}\".");
    if words.len() > 6 {
        reply.push_str(&format!(
            " That was {} words. I run offline, so all I can do is repeat them.",
            words.len()
        ));
    }
    reply
}

/// The reply to an utterance: `You said something for 2.9 seconds.` (spoken over the voice echo),
/// with an explanation added in TEXT modality, where there is no echo.
pub fn speech_reply(seconds: f64, modality: Modality) -> String {
    let said = format!("You said something for {seconds:.1} seconds.");
    match modality {
        Modality::Audio => said,
        Modality::Text => {
            format!(
                "{said} I'm the livegate simulator, so I can hear speech but not understand it."
            )
        }
    }
}

/// The input transcription of an utterance: `[speech 2.86 s]`.
pub fn speech_transcript(seconds: f64) -> String {
    format!("[speech {seconds:.2} s]")
}

/// Output transcription fragments: one per word, later words with a leading space, so that
/// they concatenate to the text (for text with single spaces, as the replies have).
pub fn spoken_fragments(text: &str) -> Vec<String> {
    text.split_whitespace()
        .enumerate()
        .map(|(i, word)| {
            if i == 0 {
                word.to_owned()
            } else {
                format!(" {word}")
            }
        })
        .collect()
}

/// Text fragments of `words` words each, later fragments with a leading space.
pub fn written_fragments(text: &str, words: usize) -> Vec<String> {
    let all: Vec<&str> = text.split_whitespace().collect();
    all.chunks(words.max(1))
        .enumerate()
        .map(|(i, chunk)| {
            let joined = chunk.join(" ");
            if i == 0 {
                joined
            } else {
                format!(" {joined}")
            }
        })
        .collect()
}

/// Tokens of text, estimated like Gemini's tokenizer on English (about 4 characters each).
pub fn text_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// Tokens of audio: Gemini counts 32 per second.
pub fn audio_tokens(seconds: f64) -> u64 {
    (seconds.max(0.0) * 32.0).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_recognisable_and_bounded() {
        assert_eq!(
            text_reply(" hello "),
            "Hello! I'm the livegate simulator. You said: \"hello\"."
        );
        let long = text_reply(
            "tell me a long story about a lighthouse keeper who finds a message in a bottle",
        );
        assert!(long.contains(
            "You said: \"tell me a long story about a lighthouse keeper who finds a…\"."
        ));
        assert!(long.contains("That was 16 words."));
        let words = long.split_whitespace().count();
        assert!((10..=35).contains(&words), "{words} words");
        assert!(text_reply("").contains("didn't catch"));
        assert_eq!(speech_transcript(2.856), "[speech 2.86 s]");
        assert_eq!(
            speech_reply(2.856, Modality::Audio),
            "You said something for 2.9 seconds."
        );
    }

    #[test]
    fn fragments_concatenate_to_the_text() {
        let text = text_reply("what time is it?");
        assert_eq!(spoken_fragments(&text).concat(), text);
        for n in 1..5 {
            assert_eq!(written_fragments(&text, n).concat(), text);
        }
        assert_eq!(written_fragments("a b c d e", 2), vec!["a b", " c d", " e"]);
        assert_eq!(spoken_fragments("a b"), vec!["a", " b"]);
    }

    fn config_with(tools: &[(&str, Value)]) -> LiveConnectConfig {
        LiveConnectConfig {
            tools: tools
                .iter()
                .map(|(name, schema)| crate::model::FunctionDeclaration {
                    name: (*name).to_owned(),
                    description: String::new(),
                    parameters_json_schema: Some(schema.clone().into()),
                    behavior: None,
                })
                .collect(),
            ..LiveConnectConfig::default()
        }
    }

    fn names(calls: &[FunctionCall]) -> Vec<&str> {
        calls.iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn calls_only_the_tools_the_agent_declared() {
        let none = LiveConnectConfig::default();
        assert_eq!(tool_calls_for("what time is it in Tokyo", &none), None);
        let builtins = config_with(&[("get_current_time", json!({})), ("calculate", json!({}))]);
        let calls = tool_calls_for("What time is it in Tokyo?", &builtins).unwrap();
        assert_eq!(names(&calls), ["get_current_time"]);
        assert_eq!(calls[0].args, Some(json!({"timezone": "Asia/Tokyo"})));
        assert!(calls[0].id.as_deref().unwrap().starts_with("sim-call-"));
        let calls = tool_calls_for("what is 12 * (3 + 4)?", &builtins).unwrap();
        assert_eq!(calls[0].args, Some(json!({"expression": "12 * (3 + 4)"})));
        assert_eq!(tool_calls_for("hello there", &builtins), None);
    }

    #[test]
    fn named_tools_get_key_values_and_transfers_find_their_target() {
        let config = config_with(&[
            ("slow_a", json!({})),
            ("slow_b", json!({})),
            (
                TRANSFER_TO_AGENT,
                json!({"properties": {"agent_name": {"enum": ["billing_agent"]}}}),
            ),
            (TASK_COMPLETED, json!({})),
        ]);
        let calls = tool_calls_for("run slow_a and slow_b with id=42 name=ada", &config).unwrap();
        assert_eq!(names(&calls), ["slow_a", "slow_b"]);
        assert_eq!(calls[1].args, Some(json!({"id": 42, "name": "ada"})));
        let calls = tool_calls_for("I need the billing agent please", &config).unwrap();
        assert_eq!(calls[0].args, Some(json!({"agent_name": "billing_agent"})));
        assert_eq!(
            names(&tool_calls_for("hi", &config).unwrap()),
            [TASK_COMPLETED]
        );
    }

    #[test]
    fn the_answer_reads_the_results() {
        let calls = vec![
            call("get_current_time", json!({"timezone": "Asia/Tokyo"})),
            call("calculate", json!({"expression": "1/0"})),
            call(TASK_COMPLETED, json!({})),
        ];
        let responses = vec![
            FunctionResponse {
                id: calls[0].id.clone(),
                name: "get_current_time".into(),
                response: json!({"time": "14:03", "weekday": "Monday", "date": "2026-11-23", "timezone": "Asia/Tokyo"}),
                scheduling: None,
            },
            FunctionResponse {
                id: calls[1].id.clone(),
                name: "calculate".into(),
                response: json!({"error": "division by zero"}),
                scheduling: None,
            },
            FunctionResponse {
                id: calls[2].id.clone(),
                name: TASK_COMPLETED.into(),
                response: json!({"result": "Task completion signaled."}),
                scheduling: None,
            },
        ];
        assert_eq!(
            tool_answer("hi", &calls, &responses),
            "It's 14:03 on Monday, 2026-11-23 in Asia/Tokyo. Calling calculate failed: division by \
             zero. Hello! I'm the livegate simulator. You said: \"hi\"."
        );
    }
}
