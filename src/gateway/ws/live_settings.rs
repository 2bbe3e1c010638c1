//! A connection's live settings: the gateway's defaults (flags, environment, config file), under
//! the agent file's `[live]` table, under what the client asks for in the URL's query and in an
//! optional first `{"type":"setup", …}` message — each client source only within the operator's
//! allow-list, and all or nothing: a source with a bad field is dropped with an error event per
//! field, and the connection goes on with the settings below it.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use axum::extract::ws::Message;
use clap::Args;
use futures::{Stream, StreamExt};
use serde_json::Value;

use crate::gateway::ws::codec::FrameError;
use crate::gateway::ws::codec::{AudioEncoding, UnknownAudioEncoding};
use crate::live::settings::{
    ClientSettings, LiveSettings, SettingError, UnknownSetting, DEFAULT_CLIENT_SETTINGS,
};
use crate::live::RunConfig;
use crate::model::{Modality, UnknownModality};

/// How long a new connection waits for its first frame, which may be a setup message, before
/// its run starts with the settings it has. Any other first frame starts the run at once.
pub const SETUP_WAIT: Duration = Duration::from_secs(1);

/// The gateway's default live settings, as flags (or `LIVEGATE_*` variables, or the config
/// file's `[live]` table, in that order of precedence).
#[derive(Debug, Clone, Default, Args)]
pub struct LiveArgs {
    /// Prebuilt voice of spoken answers (e.g. Puck, Charon, Kore, Fenrir, Aoede, Leda, Orus, Zephyr).
    #[arg(long, env = "LIVEGATE_VOICE")]
    pub voice: Option<String>,
    /// Language spoken and heard, BCP-47 (e.g. en-US, de-DE).
    #[arg(long, env = "LIVEGATE_LANGUAGE")]
    pub language: Option<String>,
    /// Transcribe the user's speech [default: true].
    #[arg(long, env = "LIVEGATE_INPUT_TRANSCRIPTION")]
    pub input_transcription: Option<String>,
    /// Transcribe the model's speech [default: true].
    #[arg(long, env = "LIVEGATE_OUTPUT_TRANSCRIPTION")]
    pub output_transcription: Option<String>,
    /// Automatic voice activity detection; `false` means clients send activity_start/activity_end
    /// [default: true].
    #[arg(long, env = "LIVEGATE_VAD")]
    pub vad: Option<String>,
    /// How readily speech is detected to start: high or low [default: the model's].
    #[arg(long, env = "LIVEGATE_START_SENSITIVITY")]
    pub start_sensitivity: Option<String>,
    /// How readily speech is detected to end: high or low [default: the model's].
    #[arg(long, env = "LIVEGATE_END_SENSITIVITY")]
    pub end_sensitivity: Option<String>,
    /// Speech needed before a start is committed, in milliseconds [default: the model's].
    #[arg(long, env = "LIVEGATE_PREFIX_PADDING_MS")]
    pub prefix_padding_ms: Option<String>,
    /// Silence needed before an end is committed, in milliseconds [default: the model's].
    #[arg(long, env = "LIVEGATE_SILENCE_DURATION_MS")]
    pub silence_duration_ms: Option<String>,
    /// User speech interrupts the answer (barge-in) [default: true].
    #[arg(long, env = "LIVEGATE_BARGE_IN")]
    pub barge_in: Option<String>,
    /// Context window compression [default: true for audio answers, so long calls go on].
    #[arg(long, env = "LIVEGATE_COMPRESSION")]
    pub compression: Option<String>,
    /// Context size, in tokens, that starts a compression [default: the model's].
    #[arg(long, env = "LIVEGATE_COMPRESSION_TRIGGER_TOKENS")]
    pub compression_trigger_tokens: Option<String>,
    /// Context size, in tokens, kept after a compression [default: the model's].
    #[arg(long, env = "LIVEGATE_COMPRESSION_TARGET_TOKENS")]
    pub compression_target_tokens: Option<String>,
    /// Ask the model for session resumption handles [default: true].
    #[arg(long, env = "LIVEGATE_SESSION_RESUMPTION")]
    pub session_resumption: Option<String>,
    /// Proactive audio [default: false].
    #[arg(long, env = "LIVEGATE_PROACTIVITY")]
    pub proactivity: Option<String>,
    /// Affective dialog [default: false].
    #[arg(long, env = "LIVEGATE_AFFECTIVE_DIALOG")]
    pub affective_dialog: Option<String>,
    /// ADK's max_llm_calls (not enforced in live runs, as in ADK) [default: 500].
    #[arg(long, env = "LIVEGATE_MAX_LLM_CALLS")]
    pub max_llm_calls: Option<String>,
    /// A JSON object merged into every event's customMetadata.
    #[arg(long, env = "LIVEGATE_CUSTOM_METADATA")]
    pub custom_metadata: Option<String>,
    /// What clients may change per connection: setting names or groups (transcription, vad,
    /// compression), `all` or `none`.
    #[arg(long, env = "LIVEGATE_CLIENT_SETTINGS", default_value = DEFAULT_CLIENT_SETTINGS, value_parser = parse_client_settings)]
    pub client_settings: ClientSettings,
    /// The config file's `[live]` table, below the flags.
    #[arg(skip)]
    pub file: Option<LiveSettings>,
}

fn parse_client_settings(s: &str) -> Result<ClientSettings, UnknownSetting> {
    s.parse()
}

impl LiveArgs {
    /// The gateway's defaults: flags over the config file, validated.
    pub fn settings(&self) -> Result<LiveSettings, SettingError> {
        let mut flags = LiveSettings::default();
        let given = [
            ("voice", &self.voice),
            ("language", &self.language),
            ("input_transcription", &self.input_transcription),
            ("output_transcription", &self.output_transcription),
            ("vad", &self.vad),
            ("start_sensitivity", &self.start_sensitivity),
            ("end_sensitivity", &self.end_sensitivity),
            ("prefix_padding_ms", &self.prefix_padding_ms),
            ("silence_duration_ms", &self.silence_duration_ms),
            ("barge_in", &self.barge_in),
            ("compression", &self.compression),
            (
                "compression_trigger_tokens",
                &self.compression_trigger_tokens,
            ),
            ("compression_target_tokens", &self.compression_target_tokens),
            ("session_resumption", &self.session_resumption),
            ("proactivity", &self.proactivity),
            ("affective_dialog", &self.affective_dialog),
            ("max_llm_calls", &self.max_llm_calls),
        ];
        for (name, value) in given {
            if let Some(value) = value {
                flags.set(name, &Value::String(value.clone()))?;
            }
        }
        if let Some(json) = &self.custom_metadata {
            let value: Value = serde_json::from_str(json).map_err(|e| SettingError {
                field: "custom_metadata".into(),
                message: format!("not JSON: {e}"),
            })?;
            flags.set("custom_metadata", &value)?;
        }
        let file = self.file.clone().unwrap_or_default();
        Ok(file.overlay(&flags))
    }
}

/// The settings every connection starts from, and what its client may change.
#[derive(Debug, Clone, Default)]
pub struct LiveDefaults {
    /// Gateway defaults under the agent file's.
    pub settings: LiveSettings,
    /// The operator's allow-list for clients.
    pub client: ClientSettings,
}

/// One client source of settings: used only if it had no errors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientLayer {
    /// The settings, if every field was good.
    pub settings: Option<LiveSettings>,
    /// One error per bad field.
    pub errors: Vec<SettingError>,
}

impl ClientLayer {
    fn from(result: Result<LiveSettings, Vec<SettingError>>) -> Self {
        match result {
            Ok(settings) => ClientLayer {
                settings: Some(settings),
                errors: Vec::new(),
            },
            Err(errors) => ClientLayer {
                settings: None,
                errors,
            },
        }
    }
}

/// The settings in a URL's query: parameters named like a setting; others are not settings
/// (`modality`, `audio`, credentials) and are left alone.
pub fn query_settings(query: &HashMap<String, String>, allowed: &ClientSettings) -> ClientLayer {
    let values: Vec<(&str, Value)> = query
        .iter()
        .filter(|(name, _)| {
            crate::live::settings::SETTINGS
                .iter()
                .any(|(setting, _)| setting == name)
        })
        .map(|(name, value)| (name.as_str(), Value::String(value.clone())))
        .collect();
    ClientLayer::from(LiveSettings::from_object(
        values.iter().map(|(n, v)| (*n, v)),
        allowed,
    ))
}

/// The settings of a `{"type":"setup", …}` text frame; `None` if the frame is something else.
pub fn setup_settings(text: &str, allowed: &ClientSettings) -> Option<ClientLayer> {
    // Cheap test first: audio and text frames are not parsed twice.
    if !text.contains("\"setup\"") {
        return None;
    }
    let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    if fields.get("type").and_then(Value::as_str) != Some("setup") {
        return None;
    }
    let settings = fields
        .iter()
        .filter(|(name, _)| name.as_str() != "type")
        .map(|(name, value)| (name.as_str(), value));
    Some(ClientLayer::from(LiveSettings::from_object(
        settings, allowed,
    )))
}

/// Waits (at most [`SETUP_WAIT`], or until `stop`) for a connection's first frame. A setup
/// message is taken and returned with its length in bytes; any other frame is left to be read
/// next, as if never peeked.
pub async fn read_setup<R>(
    stream: &mut futures::stream::Peekable<R>,
    allowed: &ClientSettings,
    stop: impl Future<Output = ()>,
) -> Option<(ClientLayer, usize)>
where
    R: Stream<Item = Result<Message, axum::Error>> + Unpin,
{
    let mut stream = std::pin::Pin::new(stream);
    let first = tokio::select! {
        biased;
        () = stop => return None,
        _ = tokio::time::sleep(SETUP_WAIT) => return None,
        first = stream.as_mut().peek() => first,
    };
    let Some(Ok(Message::Text(text))) = first else {
        return None;
    };
    let setup = setup_settings(text.as_str(), allowed)?;
    let bytes = text.len();
    let _ = stream.next().await;
    Some((setup, bytes))
}

/// Per-connection choices made in the URL's query.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectOptions {
    /// How model audio reaches the client.
    pub audio: AudioEncoding,
    /// Response modality.
    pub modality: Modality,
    /// Live settings given as query parameters.
    pub settings: ClientLayer,
    /// The client's W3C trace context (`traceparent` header on the upgrade, or query parameter):
    /// the connection's trace continues it. A malformed one is ignored, as W3C asks.
    pub trace_parent: Option<crate::trace_context::TraceParent>,
    /// The verified claims of the client token the connection presented (set by the upgrade,
    /// not the query).
    pub caller_claims: Option<std::sync::Arc<serde_json::Map<String, serde_json::Value>>>,
}

/// A connection's URL query asking for an audio frame mode or a modality there is not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadQuery {
    /// `audio=`.
    #[error(transparent)]
    Audio(#[from] UnknownAudioEncoding),
    /// `modality=`.
    #[error(transparent)]
    Modality(#[from] UnknownModality),
}

impl ConnectOptions {
    /// The options a connection's URL query asks for, over the gateway's defaults.
    pub fn from_query(
        query: &HashMap<String, String>,
        audio: AudioEncoding,
        modality: Modality,
        allowed: &ClientSettings,
    ) -> Result<Self, BadQuery> {
        Ok(ConnectOptions {
            audio: match query.get("audio") {
                Some(v) => v.parse()?,
                None => audio,
            },
            modality: match query.get("modality") {
                Some(v) => v.parse()?,
                None => modality,
            },
            settings: query_settings(query, allowed),
            trace_parent: query
                .get(crate::trace_context::TRACEPARENT)
                .and_then(|v| crate::trace_context::TraceParent::parse(v)),
            caller_claims: None,
        })
    }
}

/// The run config of a connection, and the errors of the client's settings to report.
pub fn run_config(
    defaults: &LiveDefaults,
    options: &ConnectOptions,
    save_live_blob: bool,
    setup: Option<&ClientLayer>,
) -> (RunConfig, Vec<SettingError>) {
    let mut config = RunConfig {
        response_modalities: Some(vec![options.modality]),
        save_live_blob,
        session_resumption: Some(Default::default()),
        caller_claims: options.caller_claims.clone(),
        ..RunConfig::default()
    };
    let mut settings = defaults.settings.clone();
    let mut errors = Vec::new();
    for layer in [Some(&options.settings), setup].into_iter().flatten() {
        if let Some(client) = &layer.settings {
            settings = settings.overlay(client);
        }
        errors.extend(layer.errors.iter().cloned());
    }
    settings.apply(&mut config);
    tracing::debug!(?settings, "live settings of the connection");
    (config, errors)
}

/// The message for a bad client frame; a setup that comes after the run started has its own.
pub fn frame_error_message(error: &FrameError) -> String {
    match error {
        FrameError::UnknownType(kind) if kind == "setup" => format!(
            "setup must be the first message, sent within {} ms of connecting; the settings are unchanged",
            SETUP_WAIT.as_millis()
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setup_frame_is_recognised_and_others_are_not() {
        let allowed = ClientSettings::default();
        let layer = setup_settings(r#"{"type":"setup","voice":"Kore"}"#, &allowed).unwrap();
        assert_eq!(layer.settings.unwrap().voice.as_deref(), Some("Kore"));
        assert!(setup_settings(r#"{"type":"text","text":"setup"}"#, &allowed).is_none());
        assert!(setup_settings(r#"{"type":"text","text":"\"setup\""}"#, &allowed).is_none());
        let refused =
            setup_settings(r#"{"type":"setup","save_live_blob":false}"#, &allowed).unwrap();
        assert_eq!(refused.settings, None);
        assert_eq!(refused.errors[0].field, "save_live_blob");
    }

    #[test]
    fn flags_win_over_the_file() {
        let args = LiveArgs {
            voice: Some("Kore".into()),
            file: Some(LiveSettings {
                voice: Some("Puck".into()),
                language: Some("fr-FR".into()),
                ..LiveSettings::default()
            }),
            ..LiveArgs::default()
        };
        let settings = args.settings().unwrap();
        assert_eq!(settings.voice.as_deref(), Some("Kore"));
        assert_eq!(settings.language.as_deref(), Some("fr-FR"));
        let bad = LiveArgs {
            custom_metadata: Some("[1".into()),
            ..LiveArgs::default()
        };
        assert_eq!(bad.settings().unwrap_err().field, "custom_metadata");
    }
}
