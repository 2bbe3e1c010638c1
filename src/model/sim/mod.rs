//! `sim`: the embedded, deterministic, offline live model.

use async_trait::async_trait;

use super::{LiveConnectConfig, LiveConnection, LiveModel, ModelError};

/// Settings of the `sim` model.
#[derive(Debug, Clone, Default)]
pub struct SimConfig {}

/// The embedded simulated live model.
#[derive(Debug, Clone, Default)]
pub struct SimModel {
    config: SimConfig,
}

impl SimModel {
    /// A sim model with these settings.
    pub fn new(config: SimConfig) -> Self {
        SimModel { config }
    }
}

#[async_trait]
impl LiveModel for SimModel {
    fn name(&self) -> &str {
        "sim"
    }

    async fn connect(&self, _config: LiveConnectConfig) -> Result<LiveConnection, ModelError> {
        let _ = &self.config;
        Err(ModelError::Connect("sim not implemented yet".into()))
    }
}
