//! The flow's trace spans: one per model connection and one per turn, with the GenAI attributes
//! (`gen_ai.system`, `gen_ai.request.model`, `gen_ai.usage.*`). They are made in the span the
//! flow is polled in (the runner's invocation span) and are disabled, and free, when traces are
//! off. A turn is not one span per message or audio chunk: it is opened by the first model
//! message after the last turn ended and closed by the model's turn end (the one that completes
//! the answer, not a tool call's), with its first audio, interruption and usage recorded on it.

use std::time::Instant;

use super::reconnect::ConnectionEnd;
use crate::model::{LlmResponse, Provider};
use crate::trace_context::SPAN_TARGET;

/// `gen_ai.system` for a provider (the GenAI conventions' names where they have one).
fn system(provider: Provider) -> &'static str {
    match provider {
        Provider::Gemini => "gcp.gemini",
        Provider::OpenAi => "openai",
        Provider::Sim => "livegate.sim",
        Provider::Other => "_OTHER",
    }
}

/// The model a flow talks to, as its spans name it.
#[derive(Debug, Clone)]
pub(super) struct ModelLabel {
    pub system: &'static str,
    pub name: String,
}

impl ModelLabel {
    pub fn new(provider: Provider, name: &str) -> Self {
        ModelLabel {
            system: system(provider),
            name: name.to_owned(),
        }
    }
}

/// How a model connection is opened.
#[derive(Debug, Clone, Copy)]
pub(super) struct Opening {
    /// Not the flow's first connection.
    pub reconnect: bool,
    /// With a resumption handle (the model resumes its own context).
    pub resumed: bool,
    /// Afresh after a connection: the history is replayed to the model.
    pub replayed: bool,
}

/// The span of one model connection: opened before connecting, ended when the connection is.
pub(super) fn connection_span(model: &ModelLabel, opening: Opening) -> tracing::Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "model_connection",
        otel.name = %format_args!("connect {}", model.name),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        gen_ai.system = model.system,
        gen_ai.provider.name = model.system,
        gen_ai.request.model = model.name.as_str(),
        livegate.model.reconnect = opening.reconnect,
        livegate.model.resumed = opening.resumed,
        livegate.model.replayed = opening.replayed,
        livegate.model.connect_seconds = tracing::field::Empty,
        livegate.model.go_away = tracing::field::Empty,
        livegate.model.resumption_updates = tracing::field::Empty,
        livegate.model.end = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// Records how connecting went on the connection's span.
pub(super) fn connected(span: &tracing::Span, started: Instant, error: Option<&str>) {
    span.record(
        "livegate.model.connect_seconds",
        started.elapsed().as_secs_f64(),
    );
    if let Some(error) = error {
        span.record("error.type", error)
            .record("otel.status_code", "error")
            .record("livegate.model.end", "refused");
    }
}

/// Records why the connection ended.
pub(super) fn connection_ended(span: &tracing::Span, end: &ConnectionEnd) {
    let (name, failed) = match end {
        ConnectionEnd::Refused(_) => ("refused", true),
        ConnectionEnd::Closed => ("closed", false),
        ConnectionEnd::GoAway => ("go_away", false),
        ConnectionEnd::Dropped(_) => ("dropped", true),
        ConnectionEnd::Blocked => ("blocked", false),
        ConnectionEnd::Done(_) => ("done", false),
    };
    span.record("livegate.model.end", name);
    if failed {
        span.record("error.type", name)
            .record("otel.status_code", "error");
    }
}

/// The turn under way, if any.
#[derive(Debug, Default)]
pub(super) struct Turns {
    open: Option<Turn>,
    /// Resumption handles the model sent on the current connection (recorded, not spanned).
    pub resumption_updates: u64,
}

#[derive(Debug)]
struct Turn {
    span: tracing::Span,
    audio: bool,
    interrupted: bool,
}

impl Turns {
    /// Takes a model message: opens a turn if none is, and records on it the first audio's
    /// latency, an interruption and the usage.
    pub fn on_message(&mut self, model: &ModelLabel, response: &LlmResponse) {
        let turn = self.open.get_or_insert_with(|| Turn {
            span: turn_span(model),
            audio: false,
            interrupted: false,
        });
        if turn.span.is_disabled() {
            return;
        }
        if !turn.audio {
            let first_audio = response
                .content
                .iter()
                .flat_map(|c| &c.parts)
                .find(|p| p.inline_data.is_some());
            if let Some(part) = first_audio {
                turn.audio = true;
                if let Some(prompted) = part.prompted_by {
                    turn.span.record(
                        "livegate.turn.first_audio_seconds",
                        prompted.elapsed().as_secs_f64(),
                    );
                }
            }
        }
        if response.interrupted && !turn.interrupted {
            turn.interrupted = true;
            turn.span.record("livegate.turn.interrupted", true);
        }
        if let Some(usage) = &response.usage_metadata {
            record_usage(&turn.span, usage);
        }
        if let Some(version) = &response.model_version {
            turn.span.record("gen_ai.response.model", version.as_str());
        }
    }

    /// The span tools and recordings of the current turn go under (none between turns: then
    /// they go under the invocation).
    pub fn span(&self) -> tracing::Span {
        self.open
            .as_ref()
            .map_or_else(tracing::Span::current, |t| t.span.clone())
    }

    /// The model's turn is over: the span ends.
    pub fn end(&mut self) {
        self.open = None;
    }
}

fn turn_span(model: &ModelLabel) -> tracing::Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "turn",
        otel.name = %format_args!("chat {}", model.name),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.system = model.system,
        gen_ai.provider.name = model.system,
        gen_ai.request.model = model.name.as_str(),
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        livegate.usage.total_tokens = tracing::field::Empty,
        livegate.usage.input_audio_tokens = tracing::field::Empty,
        livegate.usage.input_text_tokens = tracing::field::Empty,
        livegate.usage.output_audio_tokens = tracing::field::Empty,
        livegate.usage.output_text_tokens = tracing::field::Empty,
        livegate.turn.first_audio_seconds = tracing::field::Empty,
        livegate.turn.interrupted = false,
    )
}

/// A count as the spans take it: the OpenTelemetry bridge exports a u64 as a string.
pub(super) fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn record_usage(span: &tracing::Span, usage: &crate::event::UsageMetadata) {
    if let Some(n) = usage.prompt_token_count {
        span.record("gen_ai.usage.input_tokens", count(n));
    }
    if let Some(n) = usage.candidates_token_count {
        span.record("gen_ai.usage.output_tokens", count(n));
    }
    if let Some(n) = usage.total_token_count {
        span.record("livegate.usage.total_tokens", count(n));
    }
    let by_modality = |details: &Option<Vec<crate::event::ModalityTokenCount>>, modality: &str| {
        details.as_ref().and_then(|d| {
            d.iter()
                .find(|c| c.modality.eq_ignore_ascii_case(modality))
                .map(|c| c.token_count)
        })
    };
    let fields = [
        (
            "livegate.usage.input_audio_tokens",
            &usage.prompt_tokens_details,
            "AUDIO",
        ),
        (
            "livegate.usage.input_text_tokens",
            &usage.prompt_tokens_details,
            "TEXT",
        ),
        (
            "livegate.usage.output_audio_tokens",
            &usage.candidates_tokens_details,
            "AUDIO",
        ),
        (
            "livegate.usage.output_text_tokens",
            &usage.candidates_tokens_details,
            "TEXT",
        ),
    ];
    for (field, details, modality) in fields {
        if let Some(n) = by_modality(details, modality) {
            span.record(field, count(n));
        }
    }
}

/// The span of saving a turn's recordings (both sides at once): one per turn's flush, not per
/// chunk or uploaded part.
pub(super) fn recording_span(parent: &tracing::Span) -> tracing::Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        parent: parent,
        "recording_save",
        otel.name = "livegate.recording.save",
        livegate.recordings.saved = tracing::field::Empty,
    )
}
