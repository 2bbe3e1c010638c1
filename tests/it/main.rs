//! The gateway's integration tests, as one binary: one link, the shared helpers (`common`)
//! compiled once. Each module is the suite of one area; `cargo test --test it NAME::` runs one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod browser;
mod cli_errors;
mod codec_fuzz;
mod examples;
mod faults;
mod gemini_backend;
mod gemini_tls;
mod hostile_model;
mod http;
mod live_audio;
mod live_sessions;
mod live_settings;
mod live_shutdown;
mod live_text;
mod live_tools;
mod loadtest;
mod mcp;
mod mock_gemini;
mod multinode;
mod objstore;
mod openai_backend;
mod otel;
mod replay;
mod rest_api;
mod runtime;
mod security_auth;
mod security_limits;
mod security_ws;
mod telephony;
mod tool_commands;
mod usage;
