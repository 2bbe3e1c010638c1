//! livegate: a bidirectional live-streaming gateway re-implementing Google ADK's live runtime.
//!
//! Layers, lowest first: [`event`] (ADK events and their JSON), [`model`] (live model
//! backends), [`session`] and [`artifact`] (storage), [`live`] (the request queue, run config and
//! live flow), [`agent`] and [`runner`] (ADK's agent and runner), and [`gateway`] (the axum server).
//! Lower layers never import upper ones. Beside them, used by any layer: [`latch`] (a shared
//! "it happened" flag), [`lock`] (taking a mutex a panicked holder poisoned), [`byte_channel`] (a
//! channel bounded in messages and bytes), [`procfs`] (a process's CPU and memory from `/proc`)
//! and [`audio`] (the resampler and the G.711 codec).
//!
//! The tools are crates of their own in the same workspace, so the server's binary carries
//! neither them nor their test audio: `livegate-mock` (`tools/mock`) serves the `sim` model over
//! the Gemini Live and OpenAI Realtime wire protocols using only [`event`] and [`model`];
//! `livegate-loadtest` (`tools/loadtest`) is the load generator, which knows the gateway only by
//! its WebSocket protocol and its `/metrics`. `livegate loadtest`, `livegate mock-gemini` and
//! `livegate mock-openai` run their binaries.

/// This build: the version and, built from git, the commit (`0.1.0 (4a584fd)`).
pub const BUILD: &str = env!("LIVEGATE_BUILD");

pub mod agent;
pub mod artifact;
pub mod audio;
pub mod byte_channel;
pub mod cli;
pub mod event;
pub mod gateway;
pub mod latch;
pub mod live;
pub mod lock;
pub mod model;
pub mod procfs;
pub mod runner;
pub mod session;
