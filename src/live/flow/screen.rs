//! The callbacks' screening of a model connection's events: finished spoken utterances before
//! the model answers them, the model's answer as it comes.

use super::hooks::{FlowHooks, Screened};
use crate::event::{Content, Event};
use crate::model::LlmResponse;

/// What screening an event led to.
pub(super) enum Blocked {
    /// Callbacks proceeded but changed state: this event (after the screened one) commits it.
    Changes(Event),
    /// The answer is blocked: this event follows the screened one.
    Follows(Event),
    /// The answer is blocked: this event replaces the screened one.
    Replaces(Event),
}

/// Runs the screening callbacks an event calls for: a finished spoken utterance goes to the
/// before-model callbacks; the model's spoken answer so far, and its full text, to the after-model
/// callbacks.
pub(super) async fn screen(
    hooks: &dyn FlowHooks,
    event: &Event,
    spoken: &mut String,
) -> Option<Blocked> {
    // Most agents have no model callbacks: nothing to screen, nothing to copy.
    if !hooks.screens_user() && !hooks.screens_model() {
        return None;
    }
    let (verdict, replaces) = if let Some(heard) = &event.input_transcription {
        if !hooks.screens_user() || heard.finished != Some(true) {
            return None;
        }
        let text = heard.text.clone().unwrap_or_default();
        if text.trim().is_empty() {
            return None;
        }
        (hooks.screen_user(&Content::text("user", text)).await, false)
    } else if event.turn_complete == Some(true) || event.interrupted == Some(true) {
        spoken.clear();
        return None;
    } else if !hooks.screens_model() {
        return None;
    } else if let Some(said) = &event.output_transcription {
        // ADK screens the whole answer so far, so a callback can stop it mid-sentence.
        let finished = said.finished == Some(true);
        if finished {
            spoken.clear();
        }
        spoken.push_str(said.text.as_deref().unwrap_or_default());
        let response = LlmResponse {
            output_transcription: Some(crate::event::Transcription::new(spoken.clone(), false)),
            ..LlmResponse::default()
        };
        if finished {
            spoken.clear();
        }
        (hooks.screen_model(&response).await, false)
    } else if event.partial == Some(false)
        && event
            .content
            .as_ref()
            .is_some_and(|c| c.parts.iter().any(|p| p.text.is_some()))
    {
        let response = LlmResponse {
            content: event.content.clone(),
            ..LlmResponse::default()
        };
        (hooks.screen_model(&response).await, true)
    } else {
        return None;
    };
    match verdict {
        Screened::Proceed(None) => None,
        Screened::Proceed(Some(changes)) => Some(Blocked::Changes(changes)),
        Screened::Block(blocked) if replaces => Some(Blocked::Replaces(blocked)),
        Screened::Block(blocked) => Some(Blocked::Follows(blocked)),
    }
}
