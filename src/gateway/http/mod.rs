//! HTTP: the routes, the REST API, ADK's turn-based `/run` and `/run_sse`, readiness, and the web
//! client's files.

pub mod access;
pub mod assets;
pub mod error;
pub mod export;
pub mod live_info;
pub mod ready;
pub mod rest;
pub mod router;
pub mod run_api;
