//! Live settings as operators, agent files and clients write them: one flat set of optional,
//! validated fields, layered (a later source overrides an earlier one field by field) and then
//! applied to a [`RunConfig`].
//!
//! Every source goes through [`LiveSettings::set`], so a value the gateway flags would refuse is
//! refused the same way in an agent file or a client's setup message, naming the field.

use std::collections::BTreeSet;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::RunConfig;
use crate::model::{
    ActivityHandling, AutomaticActivityDetection, ContextWindowCompression, EndSensitivity,
    Modality, ProactivityConfig, RealtimeInputConfig, SessionResumptionConfig, SlidingWindow,
    SpeechConfig, StartSensitivity,
};

/// Longest voice name accepted.
const MAX_VOICE_LEN: usize = 64;
/// Longest language tag accepted (BCP-47 tags in use are far shorter).
const MAX_LANGUAGE_LEN: usize = 35;
/// Largest prefix padding or silence duration, in milliseconds.
const MAX_VAD_MS: u32 = 10_000;
/// Largest compression trigger or target, in tokens (well above any live model's window).
const MAX_TOKENS: u64 = 100_000_000;
/// Most keys in `custom_metadata`.
const MAX_METADATA_KEYS: usize = 32;
/// Most bytes of `custom_metadata` as JSON: it is copied into every event of the run.
const MAX_METADATA_BYTES: usize = 4096;

/// Every setting's name and the allow-list group that admits it from a client.
pub const SETTINGS: [(&str, &str); 19] = [
    ("voice", "voice"),
    ("language", "language"),
    ("input_transcription", "transcription"),
    ("output_transcription", "transcription"),
    ("vad", "vad"),
    ("start_sensitivity", "vad"),
    ("end_sensitivity", "vad"),
    ("prefix_padding_ms", "vad"),
    ("silence_duration_ms", "vad"),
    ("barge_in", "barge_in"),
    ("compression", "compression"),
    ("compression_trigger_tokens", "compression"),
    ("compression_target_tokens", "compression"),
    ("session_resumption", "session_resumption"),
    ("proactivity", "proactivity"),
    ("affective_dialog", "affective_dialog"),
    ("max_llm_calls", "max_llm_calls"),
    ("save_live_blob", "save_live_blob"),
    ("custom_metadata", "custom_metadata"),
];

/// What a client may set unless the operator says otherwise: how the answer sounds and reads,
/// and the switches clients could already set. Nothing that costs storage (`save_live_blob`),
/// lands in every event (`custom_metadata`) or is the operator's budget (`max_llm_calls`).
pub const DEFAULT_CLIENT_SETTINGS: &str =
    "voice,language,transcription,barge_in,proactivity,affective_dialog";

/// A setting that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("setting {field:?}: {message}")]
pub struct SettingError {
    /// The setting's name as the source spelled it.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl SettingError {
    fn new(field: &str, message: impl Into<String>) -> Self {
        SettingError {
            field: field.to_owned(),
            message: message.into(),
        }
    }

    /// The ADK error code reported for this error.
    pub fn code(&self) -> &'static str {
        "INVALID_ARGUMENT"
    }
}

/// How readily voice activity detection reacts (`high` or `low`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sensitivity {
    /// Reacts to quieter or shorter sounds.
    High,
    /// Needs clearer sounds.
    Low,
}

impl std::str::FromStr for Sensitivity {
    type Err = InvalidValue;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "high" => Ok(Sensitivity::High),
            "low" => Ok(Sensitivity::Low),
            other => Err(InvalidValue::Sensitivity(other.to_owned())),
        }
    }
}

/// Live settings from one source; `None` leaves the setting to the sources below it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveSettings {
    /// Prebuilt voice name (`Puck`, `Kore`, …).
    pub voice: Option<String>,
    /// Language code, BCP-47 (`en-US`).
    pub language: Option<String>,
    /// Transcribe the user's speech.
    pub input_transcription: Option<bool>,
    /// Transcribe the model's speech.
    pub output_transcription: Option<bool>,
    /// Automatic voice activity detection; off means the client sends `activity_start`/`_end`.
    pub vad: Option<bool>,
    /// How readily speech is detected to start.
    pub start_sensitivity: Option<Sensitivity>,
    /// How readily speech is detected to end.
    pub end_sensitivity: Option<Sensitivity>,
    /// Speech needed before a start is committed, in milliseconds.
    pub prefix_padding_ms: Option<u32>,
    /// Silence needed before an end is committed, in milliseconds.
    pub silence_duration_ms: Option<u32>,
    /// User speech interrupts the answer (barge-in).
    pub barge_in: Option<bool>,
    /// Context window compression (on by default for audio answers).
    pub compression: Option<bool>,
    /// Context size that starts a compression.
    pub compression_trigger_tokens: Option<u64>,
    /// Context size kept after a compression.
    pub compression_target_tokens: Option<u64>,
    /// Ask the model for resumption handles.
    pub session_resumption: Option<bool>,
    /// Proactive audio.
    pub proactivity: Option<bool>,
    /// Affective dialog.
    pub affective_dialog: Option<bool>,
    /// ADK's `max_llm_calls` (0: unbounded; not enforced in live runs, as in ADK).
    pub max_llm_calls: Option<u32>,
    /// Record input and output audio to artifacts.
    pub save_live_blob: Option<bool>,
    /// Metadata merged into every event's `customMetadata`.
    pub custom_metadata: Option<Map<String, Value>>,
}

impl LiveSettings {
    /// Sets one setting from a JSON value, validated. Unknown names are errors.
    pub fn set(&mut self, name: &str, value: &Value) -> Result<(), SettingError> {
        let error = |invalid: InvalidValue| SettingError::new(name, invalid.to_string());
        match name {
            "voice" => self.voice = Some(voice(value).map_err(error)?),
            "language" => self.language = Some(language(value).map_err(error)?),
            "input_transcription" => {
                self.input_transcription = Some(boolean(value).map_err(error)?)
            }
            "output_transcription" => {
                self.output_transcription = Some(boolean(value).map_err(error)?)
            }
            "vad" => self.vad = Some(boolean(value).map_err(error)?),
            "start_sensitivity" => {
                self.start_sensitivity = Some(sensitivity(value).map_err(error)?)
            }
            "end_sensitivity" => self.end_sensitivity = Some(sensitivity(value).map_err(error)?),
            "prefix_padding_ms" => {
                self.prefix_padding_ms =
                    Some(number(value, MAX_VAD_MS.into()).map_err(error)? as u32)
            }
            "silence_duration_ms" => {
                self.silence_duration_ms =
                    Some(number(value, MAX_VAD_MS.into()).map_err(error)? as u32)
            }
            "barge_in" => self.barge_in = Some(boolean(value).map_err(error)?),
            "compression" => self.compression = Some(boolean(value).map_err(error)?),
            "compression_trigger_tokens" => {
                self.compression_trigger_tokens = Some(tokens(value).map_err(error)?)
            }
            "compression_target_tokens" => {
                self.compression_target_tokens = Some(tokens(value).map_err(error)?)
            }
            "session_resumption" => self.session_resumption = Some(boolean(value).map_err(error)?),
            "proactivity" => self.proactivity = Some(boolean(value).map_err(error)?),
            "affective_dialog" => self.affective_dialog = Some(boolean(value).map_err(error)?),
            "max_llm_calls" => {
                self.max_llm_calls = Some(number(value, u32::MAX.into()).map_err(error)? as u32)
            }
            "save_live_blob" => self.save_live_blob = Some(boolean(value).map_err(error)?),
            "custom_metadata" => self.custom_metadata = Some(metadata(value).map_err(error)?),
            _ => {
                return Err(SettingError::new(
                    name,
                    format!(
                        "unknown setting (known: {})",
                        SETTINGS.map(|(n, _)| n).join(", ")
                    ),
                ))
            }
        }
        Ok(())
    }

    /// Reads a whole object of settings, all or nothing: every field that is unknown, not in
    /// `allowed` or invalid is an error, and any error leaves no setting applied.
    pub fn from_object<'a>(
        fields: impl IntoIterator<Item = (&'a str, &'a Value)>,
        allowed: &ClientSettings,
    ) -> Result<LiveSettings, Vec<SettingError>> {
        let mut settings = LiveSettings::default();
        let mut errors = Vec::new();
        for (name, value) in fields {
            let result = allowed.check(name).and_then(|()| settings.set(name, value));
            if let Err(error) = result {
                errors.push(error);
            }
        }
        if let Err(error) = settings.check_compression() {
            errors.push(error);
        }
        if errors.is_empty() {
            Ok(settings)
        } else {
            Err(errors)
        }
    }

    /// The target must leave room below the trigger, or nothing would ever be dropped.
    fn check_compression(&self) -> Result<(), SettingError> {
        match (
            self.compression_trigger_tokens,
            self.compression_target_tokens,
        ) {
            (Some(trigger), Some(target)) if target >= trigger => Err(SettingError::new(
                "compression_target_tokens",
                format!("{target} must be below compression_trigger_tokens ({trigger})"),
            )),
            _ => Ok(()),
        }
    }

    /// These settings with every setting `over` has replacing this one's.
    pub fn overlay(&self, over: &LiveSettings) -> LiveSettings {
        macro_rules! pick {
            ($($field:ident),*) => {
                LiveSettings { $($field: over.$field.clone().or_else(|| self.$field.clone())),* }
            };
        }
        pick!(
            voice,
            language,
            input_transcription,
            output_transcription,
            vad,
            start_sensitivity,
            end_sensitivity,
            prefix_padding_ms,
            silence_duration_ms,
            barge_in,
            compression,
            compression_trigger_tokens,
            compression_target_tokens,
            session_resumption,
            proactivity,
            affective_dialog,
            max_llm_calls,
            save_live_blob,
            custom_metadata
        )
    }

    /// Applies the settings to a run config; what they leave unset keeps the config's value.
    pub fn apply(&self, config: &mut RunConfig) {
        if self.voice.is_some() || self.language.is_some() {
            let speech = config
                .speech_config
                .get_or_insert_with(SpeechConfig::default);
            if let Some(voice) = &self.voice {
                speech.voice_name = Some(voice.clone());
            }
            if let Some(language) = &self.language {
                speech.language_code = Some(language.clone());
            }
        }
        if let Some(on) = self.input_transcription {
            config.input_audio_transcription = on;
        }
        if let Some(on) = self.output_transcription {
            config.output_audio_transcription = on;
        }
        let detection = self.vad.is_some()
            || self.start_sensitivity.is_some()
            || self.end_sensitivity.is_some()
            || self.prefix_padding_ms.is_some()
            || self.silence_duration_ms.is_some();
        if detection || self.barge_in.is_some() {
            let realtime = config
                .realtime_input_config
                .get_or_insert_with(RealtimeInputConfig::default);
            if detection {
                let auto = realtime
                    .automatic_activity_detection
                    .get_or_insert_with(AutomaticActivityDetection::default);
                if let Some(on) = self.vad {
                    auto.disabled = Some(!on);
                }
                if let Some(s) = self.start_sensitivity {
                    auto.start_of_speech_sensitivity = Some(match s {
                        Sensitivity::High => StartSensitivity::High,
                        Sensitivity::Low => StartSensitivity::Low,
                    });
                }
                if let Some(s) = self.end_sensitivity {
                    auto.end_of_speech_sensitivity = Some(match s {
                        Sensitivity::High => EndSensitivity::High,
                        Sensitivity::Low => EndSensitivity::Low,
                    });
                }
                auto.prefix_padding_ms = self.prefix_padding_ms.or(auto.prefix_padding_ms);
                auto.silence_duration_ms = self.silence_duration_ms.or(auto.silence_duration_ms);
            }
            if let Some(on) = self.barge_in {
                realtime.activity_handling = Some(if on {
                    ActivityHandling::StartOfActivityInterrupts
                } else {
                    ActivityHandling::NoInterruption
                });
            }
        }
        // Audio sessions without compression end after minutes; text ones may keep the model's
        // own behaviour unless asked.
        let sized =
            self.compression_trigger_tokens.is_some() || self.compression_target_tokens.is_some();
        let audio = config.live_modalities().contains(&Modality::Audio);
        if self.compression.unwrap_or(audio || sized) {
            config.context_window_compression = Some(ContextWindowCompression {
                trigger_tokens: self.compression_trigger_tokens,
                sliding_window: SlidingWindow {
                    target_tokens: self.compression_target_tokens,
                },
            });
        } else if self.compression == Some(false) {
            config.context_window_compression = None;
        }
        match self.session_resumption {
            Some(true) if config.session_resumption.is_none() => {
                config.session_resumption = Some(SessionResumptionConfig::default());
            }
            Some(false) => config.session_resumption = None,
            _ => {}
        }
        // Off is sent as nothing: newer models reject the fields themselves.
        if let Some(on) = self.proactivity {
            config.proactivity = on.then_some(ProactivityConfig {
                proactive_audio: Some(true),
            });
        }
        if let Some(on) = self.affective_dialog {
            config.enable_affective_dialog = on.then_some(true);
        }
        if let Some(calls) = self.max_llm_calls {
            config.max_llm_calls = calls;
        }
        if let Some(on) = self.save_live_blob {
            config.save_live_blob = on;
        }
        if let Some(metadata) = &self.custom_metadata {
            config.custom_metadata = Some(metadata.clone());
        }
    }
}

/// From a table (agent file, config file) with the same names and checks as a client's setup;
/// every setting is allowed, `-` and `_` are the same in names.
impl<'de> Deserialize<'de> for LiveSettings {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let table = Map::<String, Value>::deserialize(deserializer)?;
        let fields: Vec<(String, &Value)> = table
            .iter()
            .map(|(k, v)| (k.replace('-', "_"), v))
            .collect();
        LiveSettings::from_object(
            fields.iter().map(|(k, v)| (k.as_str(), *v)),
            &ClientSettings::all(),
        )
        .map_err(|errors| {
            let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
            serde::de::Error::custom(messages.join("; "))
        })
    }
}

/// The settings a client may change: the operator's allow-list (`--client-settings`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSettings(BTreeSet<&'static str>);

impl ClientSettings {
    /// Every setting.
    pub fn all() -> Self {
        ClientSettings(SETTINGS.iter().map(|(name, _)| *name).collect())
    }

    /// The settings clients may change, by name.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.0.iter().copied()
    }

    /// True when a client may set `name`.
    pub fn allows(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// `Ok` when a client may set `name`; an error naming it otherwise.
    pub fn check(&self, name: &str) -> Result<(), SettingError> {
        if self.allows(name) {
            return Ok(());
        }
        let message = if SETTINGS.iter().any(|(n, _)| *n == name) {
            "not a setting clients may change here (the operator's --client-settings)".to_owned()
        } else {
            format!(
                "unknown setting (known: {})",
                SETTINGS.map(|(n, _)| n).join(", ")
            )
        };
        Err(SettingError::new(name, message))
    }
}

impl Default for ClientSettings {
    fn default() -> Self {
        DEFAULT_CLIENT_SETTINGS
            .parse()
            .unwrap_or_else(|_| ClientSettings(BTreeSet::new()))
    }
}

/// A comma-separated list of setting names or groups (`transcription`, `vad`, `compression`
/// name several), or `all`, or `none` (also the empty list).
/// A client setting name or group `--client-settings` does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown setting {:?} (known: all, none, transcription, {})",
    .0,
    SETTINGS.map(|(n, _)| n).join(", ")
)]
pub struct UnknownSetting(pub String);

impl std::str::FromStr for ClientSettings {
    type Err = UnknownSetting;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut names = BTreeSet::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let item = item.replace('-', "_");
            match item.as_str() {
                "none" => {}
                "all" => names.extend(SETTINGS.iter().map(|(n, _)| *n)),
                _ => {
                    let matched: Vec<&'static str> = SETTINGS
                        .iter()
                        .filter(|(name, group)| *name == item || *group == item)
                        .map(|(name, _)| *name)
                        .collect();
                    if matched.is_empty() {
                        return Err(UnknownSetting(item));
                    }
                    names.extend(matched);
                }
            }
        }
        Ok(ClientSettings(names))
    }
}

/// Why a setting's value was refused (a `SettingError`'s message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidValue {
    /// Not `true`/`false` (or `1`/`0`).
    #[error("{0} is not true or false")]
    NotBoolean(Value),
    /// A number above the setting's limit.
    #[error("{value} is above the limit of {max}")]
    AboveLimit {
        /// The number.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// Not a whole number.
    #[error("{value} is not a whole number from 0 to {max}")]
    NotWholeNumber {
        /// The value.
        value: Value,
        /// The limit.
        max: u64,
    },
    /// A token count of 0.
    #[error("must be at least 1 token")]
    NoTokens,
    /// Not a string.
    #[error("{0} is not a string")]
    NotString(Value),
    /// Not a voice name.
    #[error(
        "{0:?} is not a voice name (1 to {MAX_VOICE_LEN} letters, digits, - or _; e.g. Puck, Kore)"
    )]
    Voice(String),
    /// Not a language tag.
    #[error("{0:?} is not a BCP-47 language code (e.g. en-US, de-DE, ja)")]
    Language(String),
    /// Not `high` or `low`.
    #[error("{0:?} is not a sensitivity (expected high or low)")]
    Sensitivity(String),
    /// Not a JSON object.
    #[error("{0} is not an object")]
    NotObject(Value),
    /// Metadata with too many keys.
    #[error("more than {MAX_METADATA_KEYS} keys")]
    TooManyKeys,
    /// Metadata too large.
    #[error("{0} bytes of JSON, above the limit of {MAX_METADATA_BYTES}")]
    TooLarge(usize),
}

fn boolean(value: &Value) -> Result<bool, InvalidValue> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s.eq_ignore_ascii_case("true") || s == "1" => Ok(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") || s == "0" => Ok(false),
        other => Err(InvalidValue::NotBoolean(other.clone())),
    }
}

fn number(value: &Value, max: u64) -> Result<u64, InvalidValue> {
    let n = match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    match n {
        Some(n) if n <= max => Ok(n),
        Some(n) => Err(InvalidValue::AboveLimit { value: n, max }),
        None => Err(InvalidValue::NotWholeNumber {
            value: value.clone(),
            max,
        }),
    }
}

fn tokens(value: &Value) -> Result<u64, InvalidValue> {
    match number(value, MAX_TOKENS)? {
        0 => Err(InvalidValue::NoTokens),
        n => Ok(n),
    }
}

fn string(value: &Value) -> Result<&str, InvalidValue> {
    value
        .as_str()
        .ok_or_else(|| InvalidValue::NotString(value.clone()))
}

fn voice(value: &Value) -> Result<String, InvalidValue> {
    let name = string(value)?;
    let valid = !name.is_empty()
        && name.len() <= MAX_VOICE_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(name.to_owned())
    } else {
        Err(InvalidValue::Voice(name.to_owned()))
    }
}

/// A BCP-47 shaped tag: a 2–3 letter language, then subtags of 1–8 letters or digits.
fn language(value: &Value) -> Result<String, InvalidValue> {
    let tag = string(value)?;
    let mut parts = tag.split('-');
    let primary = parts.next().unwrap_or_default();
    let valid = tag.len() <= MAX_LANGUAGE_LEN
        && (2..=3).contains(&primary.len())
        && primary.bytes().all(|b| b.is_ascii_alphabetic())
        && parts
            .all(|p| (1..=8).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_alphanumeric()));
    if valid {
        Ok(tag.to_owned())
    } else {
        Err(InvalidValue::Language(tag.to_owned()))
    }
}

fn sensitivity(value: &Value) -> Result<Sensitivity, InvalidValue> {
    string(value)?.parse()
}

fn metadata(value: &Value) -> Result<Map<String, Value>, InvalidValue> {
    let Value::Object(map) = value else {
        return Err(InvalidValue::NotObject(value.clone()));
    };
    if map.len() > MAX_METADATA_KEYS {
        return Err(InvalidValue::TooManyKeys);
    }
    let bytes = value.to_string().len();
    if bytes > MAX_METADATA_BYTES {
        return Err(InvalidValue::TooLarge(bytes));
    }
    Ok(map.clone())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> Result<LiveSettings, Vec<SettingError>> {
        let Value::Object(map) = value else {
            panic!("an object")
        };
        LiveSettings::from_object(
            map.iter().map(|(k, v)| (k.as_str(), v)),
            &ClientSettings::all(),
        )
    }

    #[test]
    fn every_setting_reaches_the_run_config() {
        let settings = object(json!({
            "voice": "Kore", "language": "de-DE",
            "input_transcription": false, "output_transcription": "false",
            "vad": true, "start_sensitivity": "low", "end_sensitivity": "HIGH",
            "prefix_padding_ms": 40, "silence_duration_ms": "700",
            "barge_in": false,
            "compression_trigger_tokens": 25600, "compression_target_tokens": 12800,
            "session_resumption": false, "proactivity": true, "affective_dialog": true,
            "max_llm_calls": 7, "save_live_blob": true, "custom_metadata": {"tenant": "a"},
        }))
        .unwrap();
        let mut config = RunConfig {
            session_resumption: Some(SessionResumptionConfig::default()),
            ..RunConfig::default()
        };
        settings.apply(&mut config);
        let speech = config.speech_config.clone().unwrap();
        assert_eq!(speech.voice_name.as_deref(), Some("Kore"));
        assert_eq!(speech.language_code.as_deref(), Some("de-DE"));
        assert!(!config.input_audio_transcription && !config.output_audio_transcription);
        let realtime = config.realtime_input_config.clone().unwrap();
        let auto = realtime.automatic_activity_detection.clone().unwrap();
        assert_eq!(auto.disabled, Some(false));
        assert_eq!(
            auto.start_of_speech_sensitivity,
            Some(StartSensitivity::Low)
        );
        assert_eq!(auto.end_of_speech_sensitivity, Some(EndSensitivity::High));
        assert_eq!(
            (auto.prefix_padding_ms, auto.silence_duration_ms),
            (Some(40), Some(700))
        );
        assert!(!realtime.activity_interrupts());
        let compression = config.context_window_compression.clone().unwrap();
        assert_eq!(compression.trigger_tokens, Some(25600));
        assert_eq!(compression.sliding_window.target_tokens, Some(12800));
        assert_eq!(config.session_resumption, None);
        assert_eq!(
            config.proactivity.clone().unwrap().proactive_audio,
            Some(true)
        );
        assert_eq!(config.enable_affective_dialog, Some(true));
        assert_eq!(config.max_llm_calls, 7);
        assert!(config.save_live_blob);
        assert_eq!(config.custom_metadata.unwrap()["tenant"], "a");
    }

    #[test]
    fn compression_is_on_for_audio_unless_turned_off() {
        let mut audio = RunConfig::default();
        LiveSettings::default().apply(&mut audio);
        assert_eq!(
            audio.context_window_compression,
            Some(ContextWindowCompression::default())
        );
        let mut text = RunConfig {
            response_modalities: Some(vec![Modality::Text]),
            ..RunConfig::default()
        };
        LiveSettings::default().apply(&mut text);
        assert_eq!(text.context_window_compression, None);
        let off = LiveSettings {
            compression: Some(false),
            ..LiveSettings::default()
        };
        let mut audio = RunConfig::default();
        off.apply(&mut audio);
        assert_eq!(audio.context_window_compression, None);
    }

    #[test]
    fn later_sources_override_field_by_field() {
        let gateway = LiveSettings {
            voice: Some("Puck".into()),
            language: Some("en-US".into()),
            ..LiveSettings::default()
        };
        let client = LiveSettings {
            voice: Some("Kore".into()),
            ..LiveSettings::default()
        };
        let merged = gateway.overlay(&client);
        assert_eq!(merged.voice.as_deref(), Some("Kore"));
        assert_eq!(merged.language.as_deref(), Some("en-US"));
    }

    #[test]
    fn bad_fields_are_named_and_nothing_applies() {
        let errors = object(json!({
            "voice": "Kore", "language": "english please", "colour": 1,
            "prefix_padding_ms": 99999, "start_sensitivity": "medium",
            "compression_trigger_tokens": 10, "compression_target_tokens": 10,
            "custom_metadata": [1], "barge_in": "maybe",
        }))
        .unwrap_err();
        let fields: BTreeSet<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            BTreeSet::from([
                "language",
                "colour",
                "prefix_padding_ms",
                "start_sensitivity",
                "compression_target_tokens",
                "custom_metadata",
                "barge_in"
            ]),
            "{errors:?}"
        );
        assert!(errors.iter().all(|e| e.code() == "INVALID_ARGUMENT"));
        let big = json!({"custom_metadata": {"k": "x".repeat(5000)}});
        assert_eq!(object(big).unwrap_err()[0].field, "custom_metadata");
        for voice in ["", "a b", "x\"y", &"v".repeat(65)] {
            assert!(object(json!({ "voice": voice })).is_err(), "{voice:?}");
        }
        for language in ["en", "en-US", "zh-Hant-TW", "cmn"] {
            assert!(
                object(json!({ "language": language })).is_ok(),
                "{language}"
            );
        }
    }

    #[test]
    fn the_allow_list_admits_groups_and_refuses_the_rest_by_name() {
        let allowed = ClientSettings::default();
        for name in [
            "voice",
            "language",
            "input_transcription",
            "output_transcription",
            "barge_in",
        ] {
            assert!(allowed.allows(name), "{name}");
        }
        for name in ["save_live_blob", "max_llm_calls", "custom_metadata", "vad"] {
            let error = allowed.check(name).unwrap_err();
            assert_eq!(error.field, name);
            assert!(error.message.contains("--client-settings"), "{error}");
        }
        let vad: ClientSettings = "vad, compression".parse().unwrap();
        assert!(vad.allows("silence_duration_ms") && vad.allows("compression_target_tokens"));
        assert!(!vad.allows("voice"));
        assert_eq!("none".parse::<ClientSettings>().unwrap().0.len(), 0);
        assert_eq!("".parse::<ClientSettings>().unwrap().0.len(), 0);
        assert_eq!(
            "all".parse::<ClientSettings>().unwrap(),
            ClientSettings::all()
        );
        assert!("voice,colour"
            .parse::<ClientSettings>()
            .unwrap_err()
            .to_string()
            .contains("colour"));
    }

    #[test]
    fn a_table_reads_with_either_spelling_and_refuses_bad_values() {
        let settings: LiveSettings =
            toml::from_str("voice = \"Charon\"\nsilence-duration-ms = 800\ncompression = false")
                .unwrap();
        assert_eq!(settings.voice.as_deref(), Some("Charon"));
        assert_eq!(settings.silence_duration_ms, Some(800));
        assert_eq!(settings.compression, Some(false));
        let error = toml::from_str::<LiveSettings>("language = \"??\"").unwrap_err();
        assert!(error.to_string().contains("language"), "{error}");
    }
}
