//! The conversation history replayed to a model when a live run (re)connects without a handle.

use crate::event::{Content, Event, Part};
use crate::session::GetSessionConfig;

/// How much of a session's history a run loads and replays to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimit {
    /// The most recent events read from the store.
    pub events: usize,
    /// Bytes of model contents kept from them (the newest).
    pub bytes: usize,
}

impl Default for HistoryLimit {
    fn default() -> Self {
        HistoryLimit {
            events: DEFAULT_HISTORY_EVENTS,
            bytes: DEFAULT_HISTORY_BYTES,
        }
    }
}

impl HistoryLimit {
    /// The store read that loads this much history.
    pub fn read(&self) -> GetSessionConfig {
        GetSessionConfig {
            num_recent_events: Some(self.events),
            after_timestamp: None,
        }
    }
}

/// Builds model contents for `agent` from committed events: user and model text, function calls
/// and responses, and finished transcriptions as text; audio and recordings are left out, and
/// what other agents said is quoted as user context, as ADK does.
pub fn history_contents(events: &[Event], agent: &str) -> Vec<Content> {
    let mut contents: Vec<Content> = Vec::new();
    let mut last_was_transcript = false;
    for event in events.iter().filter(|e| !e.is_partial()) {
        if event.author != "user" && event.author != agent {
            if let Some(quoted) = quote_other_agent(event) {
                last_was_transcript = false;
                contents.push(quoted);
            }
            continue;
        }
        let is_transcript =
            event.input_transcription.is_some() || event.output_transcription.is_some();
        let (role, parts) = if let Some(t) = event
            .input_transcription
            .as_ref()
            .filter(|t| t.finished == Some(true))
        {
            ("user", vec![Part::text(t.text.clone().unwrap_or_default())])
        } else if let Some(t) = event
            .output_transcription
            .as_ref()
            .filter(|t| t.finished == Some(true))
        {
            (
                "model",
                vec![Part::text(t.text.clone().unwrap_or_default())],
            )
        } else if let Some(content) = &event.content {
            let parts: Vec<Part> = content
                .parts
                .iter()
                .filter(|p| !is_audio_part(p) && p.thought != Some(true))
                .cloned()
                .collect();
            let role = match content.role.as_deref() {
                Some("user") => "user",
                Some(_) => "model",
                None if event.author == "user" => "user",
                None => "model",
            };
            (role, parts)
        } else {
            continue;
        };
        if parts.is_empty() || parts.iter().all(|p| p.text.as_deref() == Some("")) {
            continue;
        }
        // Consecutive transcriptions of one speaker read as one turn.
        let merge = last_was_transcript && is_transcript;
        last_was_transcript = is_transcript;
        if let Some(last) = contents.last_mut().filter(|_| merge) {
            let both_text = last.parts.len() == 1
                && parts.len() == 1
                && last.parts[0].text.is_some()
                && parts[0].text.is_some();
            if last.role.as_deref() == Some(role) && both_text {
                if let (Some(prev), Some(next)) =
                    (last.parts[0].text.as_mut(), parts[0].text.as_ref())
                {
                    if !prev.ends_with(' ') && !next.starts_with(' ') {
                        prev.push(' ');
                    }
                    prev.push_str(next);
                }
                continue;
            }
        }
        contents.push(Content {
            parts,
            role: Some(role.into()),
        });
    }
    contents
}

/// Session events a live run replays to the model by default: enough for a long conversation's
/// context, few enough that a session with a huge history neither loads it all nor sends it all.
pub const DEFAULT_HISTORY_EVENTS: usize = 500;
/// Bytes of history (text and tool calls) a live run replays by default.
pub const DEFAULT_HISTORY_BYTES: usize = 256 * 1024;

/// The newest `contents` whose parts add up to at most `max_bytes`, starting at a user turn that
/// is not a tool's answer (a model turn or a tool response without what came before it would
/// read as a conversation that never happened).
pub fn bound_history(mut contents: Vec<Content>, max_bytes: usize) -> Vec<Content> {
    let mut total = 0usize;
    let mut keep_from = contents.len();
    for (i, content) in contents.iter().enumerate().rev() {
        total = total.saturating_add(content.parts.iter().map(part_bytes).sum());
        if total > max_bytes {
            break;
        }
        keep_from = i;
    }
    while let Some(content) = contents.get(keep_from) {
        let is_user = content.role.as_deref() == Some("user");
        let answers_a_tool = content.parts.iter().any(|p| p.function_response.is_some());
        if is_user && !answers_a_tool {
            break;
        }
        keep_from += 1;
    }
    contents.split_off(keep_from)
}

fn part_bytes(part: &Part) -> usize {
    if let Some(text) = &part.text {
        return text.len();
    }
    // Tool calls and answers: as long as they are on the wire, near enough.
    serde_json::to_vec(part).map_or(0, |v| v.len())
}

/// Another agent's event as user-role context: "For context: [agent] said: ...".
fn quote_other_agent(event: &Event) -> Option<Content> {
    let mut lines = Vec::new();
    let author = &event.author;
    if let Some(text) = event
        .output_transcription
        .as_ref()
        .filter(|t| t.finished == Some(true))
        .and_then(|t| t.text.as_deref())
    {
        lines.push(format!("[{author}] said: {text}"));
    }
    for part in event.content.iter().flat_map(|c| &c.parts) {
        if part.thought == Some(true) || is_audio_part(part) {
            continue;
        }
        if let Some(text) = part.text.as_deref().filter(|t| !t.is_empty()) {
            lines.push(format!("[{author}] said: {text}"));
        } else if let Some(call) = &part.function_call {
            let args = call.args.clone().unwrap_or_default();
            lines.push(format!(
                "[{author}] called tool `{}` with parameters: {args}",
                call.name
            ));
        } else if let Some(response) = &part.function_response {
            lines.push(format!(
                "[{author}] `{}` tool returned result: {}",
                response.name, response.response
            ));
        }
    }
    if lines.is_empty() {
        return None;
    }
    let mut parts = vec![Part::text("For context:")];
    parts.extend(lines.into_iter().map(Part::text));
    Some(Content {
        parts,
        role: Some("user".into()),
    })
}

fn is_audio_part(part: &Part) -> bool {
    let audio_blob = part
        .inline_data
        .as_ref()
        .is_some_and(|b| b.mime_type.starts_with("audio/"));
    let audio_file = part.file_data.as_ref().is_some_and(|f| {
        f.mime_type
            .as_deref()
            .is_some_and(|m| m.starts_with("audio/"))
            || (f.file_uri.starts_with("artifact://") && f.file_uri.contains("/_adk_live/"))
    });
    audio_blob || audio_file
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{FileData, Transcription};

    #[test]
    fn keeps_text_and_transcripts_drops_audio() {
        let user = Event {
            content: Some(Content::text("user", "hi")),
            ..Event::new("e", "user")
        };
        let heard = Event {
            input_transcription: Some(Transcription::new("what time", true)),
            ..Event::new("e", "user")
        };
        let said = Event {
            output_transcription: Some(Transcription::new("It is noon.", true)),
            ..Event::new("e", "a")
        };
        let file = Event {
            content: Some(Content {
                parts: vec![Part {
                    file_data: Some(FileData {
                        display_name: None,
                        file_uri: "artifact://a/u/s/_adk_live/x.pcm#0".into(),
                        mime_type: Some("audio/pcm".into()),
                    }),
                    ..Part::default()
                }],
                role: Some("user".into()),
            }),
            ..Event::new("e", "user")
        };
        let other = Event {
            content: Some(Content::text("model", "Routing you.")),
            ..Event::new("e", "coordinator")
        };
        let contents = history_contents(&[user, heard, file, said, other], "a");
        assert_eq!(contents.len(), 4);
        assert_eq!(contents[3].role.as_deref(), Some("user"));
        assert_eq!(
            contents[3].joined_text(),
            "For context:[coordinator] said: Routing you."
        );
        assert_eq!(contents[0].joined_text(), "hi");
        assert_eq!(contents[1].role.as_deref(), Some("user"));
        assert_eq!(contents[2].joined_text(), "It is noon.");
    }

    #[test]
    fn history_keeps_the_newest_bytes_from_a_user_turn() {
        let turn = |role: &str, text: &str| Content::text(role, text);
        let contents = vec![
            turn("user", "first question"),
            turn("model", "a long first answer"),
            turn("user", "second"),
            turn("model", "reply"),
        ];
        // Room for the last three: the kept history still starts with the user's turn.
        let kept = bound_history(contents.clone(), 40);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].joined_text(), "second");
        assert_eq!(bound_history(contents.clone(), 1 << 20), contents);
        assert!(bound_history(contents, 3).is_empty());
    }
}
