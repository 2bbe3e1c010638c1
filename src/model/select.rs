//! Picking a backend by model name: `sim`, a Gemini Live model, or an OpenAI Realtime one.

use std::sync::Arc;

use super::{gemini, openai, sim, LiveModel, ModelError, Provider};

impl Provider {
    /// The prebuilt voice names the provider takes (none known for `Other`).
    pub fn voices(self) -> &'static [&'static str] {
        match self {
            Provider::Sim | Provider::Gemini => gemini::VOICES,
            Provider::OpenAi => openai::wire::VOICES,
            Provider::Other => &[],
        }
    }
}

/// Options that pick and configure a backend by model name.
#[derive(Debug, Clone, Default)]
pub struct ModelOptions {
    /// Settings of the `sim` backend.
    pub sim: sim::SimConfig,
    /// How to reach Gemini.
    pub gemini: gemini::GeminiOptions,
    /// How to reach OpenAI Realtime.
    pub openai: openai::OpenAiOptions,
}

/// Where the key a model needs would come from, when `options` have none for it: every turn on
/// such a model fails with the server's refusal, so the gateway warns at start. `None` for a model
/// that needs nothing (`sim`) or has its credentials.
pub fn missing_credentials(name: &str, options: &ModelOptions) -> Option<&'static str> {
    if gemini::is_gemini_model(name) {
        let gemini = &options.gemini;
        return (gemini.api_key.is_none() && gemini.vertex.is_none()).then_some(
            "GOOGLE_API_KEY or GEMINI_API_KEY (or --vertex-project with GOOGLE_CLOUD_ACCESS_TOKEN)",
        );
    }
    if openai::is_openai_model(name) {
        return options
            .openai
            .api_key
            .is_none()
            .then_some(if options.openai.is_azure() {
                "AZURE_OPENAI_API_KEY or OPENAI_API_KEY"
            } else {
                "OPENAI_API_KEY"
            });
    }
    None
}

/// Resolves a model name (`sim`, a Gemini live model id, or an OpenAI realtime model id or
/// `openai:<id>`) to a backend.
pub fn model_for_name(
    name: &str,
    options: &ModelOptions,
) -> Result<Arc<dyn LiveModel>, ModelError> {
    match name {
        "sim" | "" => Ok(Arc::new(sim::SimModel::new(options.sim))),
        id if gemini::is_gemini_model(id) => Ok(Arc::new(gemini::GeminiModel::new(
            id,
            options.gemini.clone(),
        ))),
        id if openai::is_openai_model(id) => Ok(Arc::new(openai::OpenAiModel::new(
            id,
            options.openai.clone(),
        )?)),
        other => Err(ModelError::UnknownModel(other.to_owned())),
    }
}
