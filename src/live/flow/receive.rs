//! Turns model responses into ADK events: partial text then the merged full text, transcription
//! fragments then the finished transcription, control events of their own, and where the audio
//! cache must be flushed. Pure and synchronous, so ADK's ordering rules are unit-testable.

use crate::event::{Content, Event, Part, Transcription};
use crate::model::LlmResponse;

use super::limits::{DEFAULT_MAX_TURN_BYTES, MAX_MODEL_ERRORS_PER_TURN};

/// Prefix of function call ids the runtime fills in (ADK's `AF_FUNCTION_CALL_ID_PREFIX`).
pub const FUNCTION_CALL_ID_PREFIX: &str = "adk-";

/// One thing the flow must do, in order.
// Steps live briefly in a small Vec; boxing every event would cost an allocation per audio chunk.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Yield (and commit) this event.
    Emit(Event),
    /// Flush the audio cache to artifacts now; the resulting events come before the next step.
    Flush {
        /// Flush the user's audio.
        input: bool,
        /// Flush the model's audio.
        output: bool,
    },
}

/// Per-connection state of the receive side: pending text and transcription accumulators.
#[derive(Debug)]
pub struct ResponseProcessor {
    invocation_id: String,
    agent_name: String,
    save_live_blob: bool,
    pending_text: String,
    pending_thought: bool,
    input_transcript: String,
    output_transcript: String,
    /// Text and transcription bytes this turn brought, and the most it may.
    turn_bytes: usize,
    max_turn_bytes: usize,
    /// The turn went over `max_turn_bytes`: the rest of its text is dropped.
    over: bool,
    /// In-band errors this turn brought.
    errors: u32,
}

impl ResponseProcessor {
    /// A processor for one connection of one agent's run.
    pub fn new(invocation_id: &str, agent_name: &str, save_live_blob: bool) -> Self {
        ResponseProcessor {
            invocation_id: invocation_id.to_owned(),
            agent_name: agent_name.to_owned(),
            save_live_blob,
            pending_text: String::new(),
            pending_thought: false,
            input_transcript: String::new(),
            output_transcript: String::new(),
            turn_bytes: 0,
            max_turn_bytes: DEFAULT_MAX_TURN_BYTES,
            over: false,
            errors: 0,
        }
    }

    /// Bounds the text and transcription bytes of one turn (what one stored event may hold).
    pub fn with_max_turn_bytes(mut self, bytes: usize) -> Self {
        self.max_turn_bytes = bytes;
        self
    }

    /// Takes `text` into the turn's budget: all of it, the part that fits (cut at a character),
    /// or none once the turn is over it. The first cut adds an error event to `steps`.
    fn budget(&mut self, mut text: String, steps: &mut Vec<Step>) -> String {
        if self.over {
            return String::new();
        }
        let room = self.max_turn_bytes.saturating_sub(self.turn_bytes);
        if text.len() > room {
            let mut cut = room;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            self.over = true;
            tracing::warn!(
                invocation_id = self.invocation_id,
                limit = self.max_turn_bytes,
                "the model's turn went over its text limit; the rest is dropped"
            );
            let message = format!(
                "the model's answer went over {} bytes of text and transcription in one turn; the rest is dropped",
                self.max_turn_bytes
            );
            let event = Event::error(
                &self.invocation_id,
                &self.agent_name,
                "RESOURCE_EXHAUSTED",
                message,
            );
            steps.push(Step::Emit(event));
        }
        self.turn_bytes += text.len();
        text
    }

    /// A new turn: its own budget of text and errors.
    fn next_turn(&mut self) {
        self.turn_bytes = 0;
        self.over = false;
        self.errors = 0;
    }

    /// Splits one model response into events and flush points, in ADK's order.
    pub fn process(&mut self, mut response: LlmResponse) -> Vec<Step> {
        let mut steps = Vec::new();
        let model_version = response.model_version.clone();
        let ends_text =
            response.turn_complete || response.interrupted || !response.tool_calls.is_empty();

        if let Some(code) = response.error_code.take() {
            let message = response.error_message.take().unwrap_or_default();
            self.in_band_error(&code, message, &model_version, &mut steps);
        }

        // Usage comes before the content of the same message.
        if let Some(usage) = response.usage_metadata {
            let mut event = self.agent_event(&model_version);
            event.usage_metadata = Some(usage);
            steps.push(Step::Emit(event));
        }

        if let Some(content) = response.content {
            self.process_content(content, ends_text, &model_version, &mut steps);
        }

        if let Some(t) = response.input_transcription {
            self.process_transcription(t, true, &mut steps);
        }
        if let Some(t) = response.output_transcription {
            self.process_transcription(t, false, &mut steps);
        }
        if response.interrupted || response.turn_complete || response.generation_complete {
            self.flush_transcriptions(&mut steps);
        }
        if response.turn_complete {
            self.next_turn();
        }

        if !response.tool_calls.is_empty() {
            self.flush_text(None, &mut steps);
            let parts = response
                .tool_calls
                .into_iter()
                .map(|mut call| {
                    if call.id.as_deref().is_none_or(str::is_empty) {
                        call.id =
                            Some(format!("{FUNCTION_CALL_ID_PREFIX}{}", uuid::Uuid::new_v4()));
                    }
                    Part {
                        function_call: Some(call),
                        ..Part::default()
                    }
                })
                .collect();
            let mut event = self.agent_event(&model_version);
            event.content = Some(Content {
                parts,
                role: Some("model".into()),
            });
            event.long_running_tool_ids = Some(Vec::new());
            steps.push(Step::Emit(event));
        }

        if response.turn_complete {
            self.flush_text(Some(response.interrupted), &mut steps);
            if self.save_live_blob {
                // ADK: a turn_complete that also says interrupted takes the interrupted branch.
                steps.push(Step::Flush {
                    input: !response.interrupted,
                    output: true,
                });
            }
            let mut event = self.agent_event(&model_version);
            event.turn_complete = Some(true);
            event.interrupted = response.interrupted.then_some(true);
            event.grounding_metadata = response.grounding_metadata;
            steps.push(Step::Emit(event));
        } else if response.interrupted {
            if self.save_live_blob {
                steps.push(Step::Flush {
                    input: false,
                    output: true,
                });
            }
            if !self.flush_text(Some(true), &mut steps) {
                let mut event = self.agent_event(&model_version);
                event.interrupted = Some(true);
                steps.push(Step::Emit(event));
            }
        }

        if let Some(update) = response.session_resumption_update {
            let mut event = Event::new(&self.invocation_id, &self.agent_name);
            event.live_session_resumption_update = Some(update);
            steps.push(Step::Emit(event));
        }
        steps
    }

    /// An error the model reported in-band; the session goes on. A few a turn: a server
    /// repeating one must not fill the session's history with it.
    fn in_band_error(
        &mut self,
        code: &str,
        message: String,
        model_version: &Option<String>,
        steps: &mut Vec<Step>,
    ) {
        self.errors = self.errors.saturating_add(1);
        if self.errors <= MAX_MODEL_ERRORS_PER_TURN {
            let mut event = Event::error(&self.invocation_id, &self.agent_name, code, message);
            event.model_version.clone_from(model_version);
            steps.push(Step::Emit(event));
        } else if self.errors == MAX_MODEL_ERRORS_PER_TURN + 1 {
            tracing::warn!(
                invocation_id = self.invocation_id,
                "the model keeps reporting errors; the rest of this turn's are dropped"
            );
        }
    }

    fn process_content(
        &mut self,
        content: Content,
        ends_text: bool,
        model_version: &Option<String>,
        steps: &mut Vec<Step>,
    ) {
        // Partial text and audio keep the upstream's role (Gemini sends none), as in ADK; only
        // the merged text gets `model`.
        let role = content.role;
        let mut partial_text = Vec::new();
        let mut other = Vec::new();
        for mut part in content.parts {
            if let Some(text) = part.text.take() {
                let text = self.budget(text, steps);
                if text.is_empty() {
                    continue;
                }
                part.text = Some(text);
                let Some(text) = &part.text else {
                    continue;
                };
                let thought = part.thought == Some(true);
                if !self.pending_text.is_empty() && thought != self.pending_thought {
                    self.flush_text(None, steps);
                }
                self.pending_thought = thought;
                self.pending_text.push_str(text);
                partial_text.push(part);
            } else {
                if part.inline_data.is_none() && !self.pending_text.is_empty() {
                    self.flush_text(None, steps);
                }
                other.push(part);
            }
        }
        // Text arriving with turn_complete / interrupted / a tool call only shows in the full text.
        if !partial_text.is_empty() && !ends_text {
            let mut event = self.event_for_role(role.as_deref(), model_version);
            event.content = Some(Content {
                parts: partial_text,
                role: role.clone(),
            });
            event.partial = Some(true);
            steps.push(Step::Emit(event));
        }
        if !other.is_empty() {
            let mut event = self.event_for_role(role.as_deref(), model_version);
            event.content = Some(Content { parts: other, role });
            steps.push(Step::Emit(event));
        }
    }

    fn process_transcription(&mut self, t: Transcription, input: bool, steps: &mut Vec<Step>) {
        let finished = t.finished == Some(true);
        let text = self.budget(t.text.unwrap_or_default(), steps);
        if !text.is_empty() {
            let acc = if input {
                &mut self.input_transcript
            } else {
                &mut self.output_transcript
            };
            acc.push_str(&text);
            let mut event = self.transcription_event(input);
            let fragment = Transcription::new(text, false);
            if input {
                event.input_transcription = Some(fragment);
            } else {
                event.output_transcription = Some(fragment);
            }
            event.partial = Some(true);
            steps.push(Step::Emit(event));
        }
        if finished {
            self.flush_transcription(input, steps);
        }
    }

    fn flush_transcriptions(&mut self, steps: &mut Vec<Step>) {
        self.flush_transcription(true, steps);
        self.flush_transcription(false, steps);
    }

    fn flush_transcription(&mut self, input: bool, steps: &mut Vec<Step>) {
        let acc = if input {
            std::mem::take(&mut self.input_transcript)
        } else {
            std::mem::take(&mut self.output_transcript)
        };
        if acc.is_empty() {
            return;
        }
        let mut event = self.transcription_event(input);
        let full = Transcription::new(acc, true);
        if input {
            event.input_transcription = Some(full);
        } else {
            event.output_transcription = Some(full);
        }
        event.partial = Some(false);
        steps.push(Step::Emit(event));
    }

    /// Emits the merged text if any is pending; returns whether it did.
    fn flush_text(&mut self, interrupted: Option<bool>, steps: &mut Vec<Step>) -> bool {
        if self.pending_text.is_empty() {
            return false;
        }
        let mut part = Part::text(std::mem::take(&mut self.pending_text));
        if std::mem::take(&mut self.pending_thought) {
            part.thought = Some(true);
        }
        let mut event = Event::new(&self.invocation_id, &self.agent_name);
        event.content = Some(Content {
            parts: vec![part],
            role: Some("model".into()),
        });
        event.partial = Some(false);
        event.interrupted = Some(interrupted.unwrap_or(false));
        steps.push(Step::Emit(event));
        true
    }

    fn agent_event(&self, model_version: &Option<String>) -> Event {
        let mut event = Event::new(&self.invocation_id, &self.agent_name);
        event.model_version.clone_from(model_version);
        event
    }

    fn event_for_role(&self, role: Option<&str>, model_version: &Option<String>) -> Event {
        let mut event = self.agent_event(model_version);
        if role == Some("user") {
            event.author = "user".into();
        }
        event
    }

    fn transcription_event(&self, input: bool) -> Event {
        let author = if input { "user" } else { &self.agent_name };
        Event::new(&self.invocation_id, author)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Blob, FunctionCall, UsageMetadata};
    use bytes::Bytes;

    fn events(steps: Vec<Step>) -> Vec<Event> {
        steps
            .into_iter()
            .filter_map(|s| match s {
                Step::Emit(e) => Some(e),
                Step::Flush { .. } => None,
            })
            .collect()
    }

    fn text(t: &str) -> LlmResponse {
        LlmResponse {
            content: Some(Content::text("model", t)),
            model_version: Some("sim".into()),
            ..LlmResponse::default()
        }
    }

    #[test]
    fn partial_text_then_merged_text_then_turn_complete() {
        let mut p = ResponseProcessor::new("e-1", "agent", false);
        let mut out = events(p.process(text("Hel")));
        out.extend(events(p.process(text("lo"))));
        out.extend(events(p.process(LlmResponse {
            turn_complete: true,
            ..LlmResponse::default()
        })));
        assert_eq!(out.len(), 4);
        assert_eq!(out[0].partial, Some(true));
        assert_eq!(out[1].partial, Some(true));
        assert_eq!(out[2].partial, Some(false));
        assert_eq!(out[2].content.as_ref().unwrap().joined_text(), "Hello");
        assert_eq!(out[2].interrupted, Some(false));
        assert_eq!(
            out[2].model_version, None,
            "ADK's merged text has no modelVersion"
        );
        assert_eq!(out[3].turn_complete, Some(true));
        assert!(out
            .iter()
            .all(|e| e.author == "agent" && e.invocation_id == "e-1"));
    }

    #[test]
    fn text_with_turn_complete_only_appears_in_the_full_text() {
        let mut p = ResponseProcessor::new("e-1", "agent", false);
        let mut msg = text("Bye");
        msg.turn_complete = true;
        let out = events(p.process(msg));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].partial, Some(false));
        assert_eq!(out[1].turn_complete, Some(true));
    }

    #[test]
    fn transcription_fragments_then_finished_on_turn_complete() {
        let mut p = ResponseProcessor::new("e-1", "agent", false);
        let mut out = Vec::new();
        for frag in ["What's", " the", " time?"] {
            out.extend(events(p.process(LlmResponse {
                input_transcription: Some(Transcription::new(frag, false)),
                ..LlmResponse::default()
            })));
        }
        out.extend(events(p.process(LlmResponse {
            output_transcription: Some(Transcription::new("It is noon.", false)),
            ..LlmResponse::default()
        })));
        out.extend(events(p.process(LlmResponse {
            turn_complete: true,
            ..LlmResponse::default()
        })));
        let finished: Vec<_> = out.iter().filter(|e| e.partial == Some(false)).collect();
        assert_eq!(finished.len(), 2);
        assert_eq!(finished[0].author, "user");
        assert_eq!(
            finished[0].input_transcription,
            Some(Transcription::new("What's the time?", true))
        );
        assert_eq!(finished[1].author, "agent");
        assert_eq!(
            finished[1].output_transcription,
            Some(Transcription::new("It is noon.", true))
        );
        assert_eq!(
            out[0].input_transcription,
            Some(Transcription::new("What's", false))
        );
        assert_eq!(out.last().unwrap().turn_complete, Some(true));
    }

    #[test]
    fn interrupted_flushes_model_audio_and_is_its_own_event() {
        let mut p = ResponseProcessor::new("e-1", "agent", true);
        let audio = LlmResponse {
            content: Some(Content::blob(
                "model",
                Blob::new(Bytes::from_static(&[0, 1]), "audio/pcm;rate=24000"),
            )),
            ..LlmResponse::default()
        };
        let steps = p.process(audio);
        assert!(
            matches!(&steps[..], [Step::Emit(e)] if e.partial.is_none() && e.has_inline_media())
        );
        let steps = p.process(LlmResponse {
            interrupted: true,
            ..LlmResponse::default()
        });
        assert_eq!(
            steps[0],
            Step::Flush {
                input: false,
                output: true
            }
        );
        assert!(
            matches!(&steps[1], Step::Emit(e) if e.interrupted == Some(true) && e.content.is_none())
        );
        let steps = p.process(LlmResponse {
            turn_complete: true,
            ..LlmResponse::default()
        });
        assert_eq!(
            steps[0],
            Step::Flush {
                input: true,
                output: true
            }
        );
    }

    #[test]
    fn usage_first_and_tool_calls_get_ids() {
        let mut p = ResponseProcessor::new("e-1", "agent", false);
        let out = events(p.process(LlmResponse {
            usage_metadata: Some(UsageMetadata {
                total_token_count: Some(3),
                ..UsageMetadata::default()
            }),
            tool_calls: vec![FunctionCall {
                name: "get_current_time".into(),
                ..FunctionCall::default()
            }],
            ..LlmResponse::default()
        }));
        assert!(out[0].usage_metadata.is_some());
        let calls = out[1].function_calls();
        assert!(calls[0].id.as_deref().unwrap().starts_with("adk-"));
        assert_eq!(out[1].long_running_tool_ids, Some(vec![]));
    }
}
