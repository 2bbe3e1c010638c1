//! The `gemini` backend: Google's Gemini Live API (`BidiGenerateContent` over WebSocket), on the
//! Developer API (API key) or Vertex AI (bearer token). The base URL is configurable, so the same
//! client talks to `livegate mock-gemini`.

mod connection;
#[cfg(test)]
mod tests;
pub mod wire;

use std::time::Duration;

use async_trait::async_trait;

use super::{LiveConnectConfig, LiveConnection, LiveModel, ModelError};
use connection::{open, Endpoint};
use wire::setup_message;

/// Google's Developer API endpoint.
pub const DEFAULT_BASE_URL: &str = "wss://generativelanguage.googleapis.com";
/// The default API version of the Developer API.
pub const DEFAULT_API_VERSION: &str = "v1beta";

/// A secret that never shows in `Debug` output or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Vertex AI settings.
#[derive(Debug, Clone, PartialEq)]
pub struct VertexOptions {
    /// Google Cloud project id.
    pub project: String,
    /// Region, e.g. `us-central1`, or `global`.
    pub location: String,
    /// OAuth2 access token (`Authorization: Bearer`).
    pub access_token: Secret,
}

/// How to reach Gemini.
#[derive(Debug, Clone, PartialEq)]
pub struct GeminiOptions {
    /// Developer API key (`GOOGLE_API_KEY` / `GEMINI_API_KEY`), sent as `x-goog-api-key`.
    pub api_key: Option<Secret>,
    /// Base URL (`ws://`, `wss://`, `http://` or `https://`); for Vertex, the regional host is used
    /// unless this is changed from the default.
    pub base_url: String,
    /// API version: `v1beta` or `v1alpha` (Vertex: `v1beta1` or `v1`).
    pub api_version: String,
    /// Use Vertex AI instead of the Developer API.
    pub vertex: Option<VertexOptions>,
    /// How long connecting (TCP, TLS, WebSocket upgrade) and the setup handshake may each take.
    pub connect_timeout: Duration,
    /// How long the server may send nothing, not even a pong to the client's pings, before the
    /// connection counts as lost (a blackholed upstream is noticed).
    pub silence_timeout: Duration,
    /// Least microphone audio per upstream message: frames are gathered into chunks this long
    /// (zero: every frame as it came; see `model::DEFAULT_AUDIO_CHUNK`).
    pub audio_chunk: Duration,
}

/// Default of [`GeminiOptions::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Default of [`GeminiOptions::silence_timeout`].
pub const DEFAULT_SILENCE_TIMEOUT: Duration = Duration::from_secs(15);

impl Default for GeminiOptions {
    fn default() -> Self {
        GeminiOptions {
            api_key: None,
            base_url: DEFAULT_BASE_URL.into(),
            api_version: DEFAULT_API_VERSION.into(),
            vertex: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            silence_timeout: DEFAULT_SILENCE_TIMEOUT,
            audio_chunk: crate::model::DEFAULT_AUDIO_CHUNK,
        }
    }
}

impl GeminiOptions {
    /// The WebSocket URL of the live service (no credentials in it).
    pub fn url(&self) -> String {
        let base = match &self.vertex {
            Some(v) if self.base_url == DEFAULT_BASE_URL => match v.location.as_str() {
                "global" => "wss://aiplatform.googleapis.com".to_owned(),
                location => format!("wss://{location}-aiplatform.googleapis.com"),
            },
            _ => self.base_url.clone(),
        };
        let base = base.trim_end_matches('/');
        let base = if let Some(rest) = base.strip_prefix("https://") {
            format!("wss://{rest}")
        } else if let Some(rest) = base.strip_prefix("http://") {
            format!("ws://{rest}")
        } else {
            base.to_owned()
        };
        match &self.vertex {
            Some(_) => format!(
                "{base}/ws/google.cloud.aiplatform.{}.LlmBidiService/BidiGenerateContent",
                self.api_version
            ),
            None => format!(
                "{base}/ws/google.ai.generativelanguage.{}.GenerativeService.BidiGenerateContent",
                self.api_version
            ),
        }
    }

    /// The `setup.model` path of a model id.
    pub fn model_path(&self, model: &str) -> String {
        let id = model.strip_prefix("models/").unwrap_or(model);
        match &self.vertex {
            Some(v) => format!(
                "projects/{}/locations/{}/publishers/google/models/{id}",
                v.project, v.location
            ),
            None => format!("models/{id}"),
        }
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        match (&self.vertex, &self.api_key) {
            (Some(v), _) => vec![(
                "authorization",
                format!("Bearer {}", v.access_token.expose()),
            )],
            (None, Some(key)) => vec![("x-goog-api-key", key.expose().to_owned())],
            (None, None) => Vec::new(),
        }
    }
}

/// A Gemini live model.
#[derive(Debug, Clone)]
pub struct GeminiModel {
    model: String,
    options: GeminiOptions,
}

impl GeminiModel {
    /// A model id (e.g. `gemini-2.5-flash-native-audio-preview-12-2025`) reached with `options`.
    pub fn new(model: &str, options: GeminiOptions) -> Self {
        GeminiModel {
            model: model.strip_prefix("models/").unwrap_or(model).to_owned(),
            options,
        }
    }
}

/// Gemini Live's prebuilt voices (the native-audio models have them all).
pub const VOICES: &[&str] = &[
    "Puck",
    "Charon",
    "Kore",
    "Fenrir",
    "Aoede",
    "Leda",
    "Orus",
    "Zephyr",
    "Achernar",
    "Achird",
    "Algenib",
    "Algieba",
    "Alnilam",
    "Autonoe",
    "Callirrhoe",
    "Despina",
    "Enceladus",
    "Erinome",
    "Gacrux",
    "Iapetus",
    "Laomedeia",
    "Pulcherrima",
    "Rasalgethi",
    "Sadachbia",
    "Sadaltager",
    "Schedar",
    "Sulafat",
    "Umbriel",
    "Vindemiatrix",
    "Zubenelgenubi",
];

/// True for model names the `gemini` backend serves.
pub fn is_gemini_model(name: &str) -> bool {
    let id = name.strip_prefix("models/").unwrap_or(name);
    id.starts_with("gemini-") || id.starts_with("gemini_")
}

#[async_trait]
impl LiveModel for GeminiModel {
    fn name(&self) -> &str {
        &self.model
    }

    fn provider(&self) -> super::Provider {
        super::Provider::Gemini
    }

    async fn connect(&self, config: LiveConnectConfig) -> Result<LiveConnection, ModelError> {
        let setup = setup_message(&config, &self.options.model_path(&self.model));
        let endpoint = Endpoint {
            url: self.options.url(),
            headers: self.options.headers(),
            model: self.model.clone(),
            connect_timeout: self.options.connect_timeout,
            silence_timeout: self.options.silence_timeout,
            audio_chunk: self.options.audio_chunk,
        };
        tracing::debug!(
            url = endpoint.url,
            model = self.model,
            "connecting to Gemini Live"
        );
        open(endpoint, setup, &config).await
    }
}
