//! Agents: what talks to the model and how (`LlmAgent`: name, instruction, model).

use std::sync::Arc;

use crate::event::Content;
use crate::live::RunConfig;
use crate::model::{LiveConnectConfig, LiveModel};

/// An agent backed by a live model (ADK's `LlmAgent`).
#[derive(Debug, Clone)]
pub struct LlmAgent {
    /// The agent's name; the `author` of its events.
    pub name: String,
    /// What the agent does (shown to other agents).
    pub description: String,
    /// The system instruction.
    pub instruction: String,
    /// The live model it talks to.
    pub model: Arc<dyn LiveModel>,
}

impl LlmAgent {
    /// An agent with a name, an instruction and a model.
    pub fn new(
        name: impl Into<String>,
        instruction: impl Into<String>,
        model: Arc<dyn LiveModel>,
    ) -> Self {
        LlmAgent {
            name: name.into(),
            description: String::new(),
            instruction: instruction.into(),
            model,
        }
    }

    /// The system instruction as ADK builds it: the instruction, then the agent's identity.
    pub fn system_instruction(&self) -> String {
        let mut text = self.instruction.clone();
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&format!(
            "You are an agent. Your internal name is \"{}\".",
            self.name
        ));
        if !self.description.is_empty() {
            text.push_str(&format!(
                " The description about you is \"{}\".",
                self.description
            ));
        }
        text
    }

    /// The connect config for a live run of this agent.
    pub fn connect_config(
        &self,
        run_config: &RunConfig,
        history: Vec<Content>,
    ) -> LiveConnectConfig {
        LiveConnectConfig {
            model: self.model.name().to_owned(),
            system_instruction: Some(self.system_instruction()),
            tools: Vec::new(),
            response_modalities: run_config.live_modalities(),
            speech_config: run_config.speech_config.clone(),
            input_audio_transcription: run_config.input_audio_transcription,
            output_audio_transcription: run_config.output_audio_transcription,
            realtime_input_config: run_config.realtime_input_config.clone(),
            session_resumption: run_config.session_resumption.clone(),
            context_window_compression: run_config.context_window_compression.clone(),
            proactivity: run_config.proactivity.clone(),
            enable_affective_dialog: run_config.enable_affective_dialog,
            history,
        }
    }
}
