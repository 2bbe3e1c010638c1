//! The `openai` backend: OpenAI Realtime (GA protocol, WebSocket), on api.openai.com (bearer key)
//! or Azure OpenAI (`api-key` header). The base URL is configurable, so the same client talks to
//! `livegate mock-openai`.
//!
//! Mapped to the same `LlmResponse`s the Gemini backend gives, so clients cannot tell the two
//! apart but for `modelVersion`: audio in is resampled from the client's 16 kHz to 24 kHz; typed
//! turns, tool results and manual activity ends ask for a response (`response.create`), as Gemini
//! answers them unasked; a function-call response does not end the turn, since the model goes on
//! once it has the results; and a barge-in truncates the interrupted audio item at the position
//! the client was sent, so the model's memory matches what the user heard.

mod connection;
#[cfg(test)]
mod tests;
pub mod wire;

use std::time::Duration;

use async_trait::async_trait;

use super::gemini::Secret;
use super::{LiveConnectConfig, LiveConnection, LiveModel, ModelError};
use connection::{open, Endpoint, Setup};
pub use wire::Vad;
use wire::{history_events, manual_activity, session_update, Decoder, LastAudio, ToolExchange};

/// OpenAI's API base.
pub const DEFAULT_BASE_URL: &str = "wss://api.openai.com/v1";
/// Prefix that picks this backend for any model id.
pub const PREFIX: &str = "openai:";
/// Model id families served without the prefix.
const FAMILIES: [&str; 3] = ["gpt-realtime", "gpt-4o-realtime", "gpt-4o-mini-realtime"];
/// Host suffixes of Azure OpenAI endpoints, which take the key in an `api-key` header.
const AZURE_HOSTS: [&str; 2] = [".openai.azure.com", ".cognitiveservices.azure.com"];

/// How to reach OpenAI Realtime.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiOptions {
    /// API key (`OPENAI_API_KEY`; for Azure, `AZURE_OPENAI_API_KEY` first).
    pub api_key: Option<Secret>,
    /// Base URL (`ws://`, `wss://`, `http://` or `https://`); `/realtime` is added, and `/v1`
    /// before it when the URL has no path.
    pub base_url: String,
    /// Send the key as Azure's `api-key` header even on a host not named like Azure's.
    pub azure: bool,
    /// Automatic turn detection when the agent leaves it on.
    pub vad: Vad,
    /// How far the gateway's writer lets audio run ahead of real-time playback: with it the
    /// backend knows how much of an interrupted answer the client was sent.
    pub playout_lead: Duration,
    /// Least microphone audio per upstream message: frames are gathered into chunks this long
    /// (zero: every frame as it came; see `model::DEFAULT_AUDIO_CHUNK`).
    pub audio_chunk: Duration,
    /// How long the server may send nothing, not even a pong to the gateway's pings, before the
    /// connection counts as lost (a black-holed upstream is noticed).
    pub silence_timeout: Duration,
}

/// Default of [`OpenAiOptions::silence_timeout`].
pub const DEFAULT_SILENCE_TIMEOUT: Duration = Duration::from_secs(15);

impl Default for OpenAiOptions {
    fn default() -> Self {
        OpenAiOptions {
            api_key: None,
            base_url: DEFAULT_BASE_URL.into(),
            azure: false,
            vad: Vad::Server,
            playout_lead: Duration::from_millis(500),
            audio_chunk: crate::model::DEFAULT_AUDIO_CHUNK,
            silence_timeout: DEFAULT_SILENCE_TIMEOUT,
        }
    }
}

impl OpenAiOptions {
    fn base(&self) -> String {
        let base = self.base_url.trim().trim_end_matches('/');
        let base = if let Some(rest) = base.strip_prefix("https://") {
            format!("wss://{rest}")
        } else if let Some(rest) = base.strip_prefix("http://") {
            format!("ws://{rest}")
        } else {
            base.to_owned()
        };
        let has_path = base
            .split_once("://")
            .is_some_and(|(_, rest)| rest.contains('/'));
        if has_path {
            base
        } else {
            format!("{base}/v1")
        }
    }

    /// The WebSocket URL of the realtime service for `model` (no credentials in it).
    pub fn url(&self, model: &str) -> String {
        format!("{}/realtime?model={model}", self.base())
    }

    /// True when the endpoint is Azure OpenAI (by its host, or because `azure` says so).
    pub fn is_azure(&self) -> bool {
        if self.azure {
            return true;
        }
        let base = self.base();
        let host = base
            .split_once("://")
            .map_or(base.as_str(), |(_, rest)| rest)
            .split(['/', ':'])
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        AZURE_HOSTS.iter().any(|suffix| host.ends_with(suffix))
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        match &self.api_key {
            Some(key) if self.is_azure() => vec![("api-key", key.expose().to_owned())],
            Some(key) => vec![("authorization", format!("Bearer {}", key.expose()))],
            None => Vec::new(),
        }
    }
}

/// True for model names the `openai` backend serves: `openai:<id>`, or an id of a realtime
/// family (`gpt-realtime…`, `gpt-4o-realtime…`, `gpt-4o-mini-realtime…`).
pub fn is_openai_model(name: &str) -> bool {
    name.starts_with(PREFIX) || FAMILIES.iter().any(|f| name.starts_with(f))
}

/// An OpenAI Realtime model.
#[derive(Debug, Clone)]
pub struct OpenAiModel {
    model: String,
    options: OpenAiOptions,
}

impl OpenAiModel {
    /// A model (`gpt-realtime` or `openai:<id>`) reached with `options`; the id must be a plain
    /// name (letters, digits, `-`, `_`, `.`), as it goes into the URL.
    pub fn new(name: &str, options: OpenAiOptions) -> Result<Self, ModelError> {
        let id = name.strip_prefix(PREFIX).unwrap_or(name);
        let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if id.is_empty() || id.len() > 128 || !id.chars().all(plain) {
            return Err(ModelError::UnknownModel(name.to_owned()));
        }
        Ok(OpenAiModel {
            model: id.to_owned(),
            options,
        })
    }
}

#[async_trait]
impl LiveModel for OpenAiModel {
    fn name(&self) -> &str {
        &self.model
    }

    fn provider(&self) -> super::Provider {
        super::Provider::OpenAi
    }

    async fn connect(&self, config: LiveConnectConfig) -> Result<LiveConnection, ModelError> {
        let endpoint = Endpoint {
            url: self.options.url(&self.model),
            headers: self.options.headers(),
            audio_chunk: self.options.audio_chunk,
            silence_timeout: self.options.silence_timeout,
        };
        tracing::debug!(
            url = endpoint.url,
            model = self.model,
            azure = self.options.is_azure(),
            "connecting to OpenAI Realtime"
        );
        let last_audio = LastAudio::default();
        let tools = ToolExchange::default();
        let setup = Setup {
            session_update: session_update(&config, self.options.vad),
            history: history_events(&config),
            manual: manual_activity(&config),
            decoder: Decoder::new(
                &self.model,
                config.output_audio_transcription,
                self.options.playout_lead,
                last_audio.clone(),
            )
            .with_playout(config.playout.clone())
            .with_tools(&config, tools.clone()),
            last_audio,
            tools,
        };
        open(endpoint, setup).await
    }
}
