//! livegate: a bidirectional live-streaming gateway re-implementing Google ADK's live runtime.
//!
//! Layers, lowest first: [`event`] (ADK events and their JSON), [`model`] (live model
//! backends), [`session`] and [`artifact`] (storage), [`live`] (the request queue, run config and
//! live flow), [`agent`] and [`runner`] (ADK's agent and runner), and [`gateway`] (the axum server).
//! [`mockgemini`] serves the `sim` model over the Gemini Live wire protocol; it sits beside the
//! gateway and uses only [`event`] and [`model`]; [`mockopenai`] does the same over OpenAI Realtime. [`loadtest`] is the load generator; it knows the
//! gateway only by its WebSocket protocol.
//! Lower layers never import upper ones.

/// This build: the version and, built from git, the commit (`0.1.0 (4a584fd)`).
pub const BUILD: &str = env!("LIVEGATE_BUILD");

pub mod agent;
pub mod artifact;
pub mod event;
pub mod gateway;
pub mod live;
// A tool beside the gateway, never on its serving path.
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub mod loadtest;
// A tool beside the gateway, never on its serving path.
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub mod mockgemini;
// A tool beside the gateway, never on its serving path.
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub mod mockopenai;
pub mod model;
pub mod runner;
pub mod session;
pub mod signal;
