//! `GET /api/live`: what a client needs before it offers live settings — which model answers, who
//! serves it (so it offers that provider's voices, not another's), and which settings the
//! operator lets clients change.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::agent::Agent;
use crate::gateway::state::Gateway;
use crate::model::{LiveModel, Modality, Provider};

/// The model that answers first: the root agent's, or the first sub-agent's of a sequence.
fn first_model(agent: &Agent) -> Option<Arc<dyn LiveModel>> {
    match agent {
        Agent::Llm(llm) => Some(llm.model.clone()),
        Agent::Sequential(_) => agent.sub_agents().iter().find_map(first_model),
    }
}

/// `GET /api/live`.
pub async fn live_info(State(gateway): State<Arc<Gateway>>) -> Json<Value> {
    let model = first_model(&gateway.runner.agent);
    let provider = model.as_ref().map_or(Provider::Other, |m| m.provider());
    let modality = match gateway.modality {
        Modality::Audio => "AUDIO",
        Modality::Text => "TEXT",
    };
    Json(json!({
        "model": model.as_ref().map(|m| m.name().to_owned()),
        "provider": provider.as_str(),
        "voices": provider.voices(),
        "clientSettings": gateway.live.client.names().collect::<Vec<_>>(),
        "modality": modality,
    }))
}
