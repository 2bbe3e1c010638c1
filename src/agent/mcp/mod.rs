//! MCP toolsets: an agent's tools from Model Context Protocol servers (`[[mcp]]` in the agent
//! file), over streamable HTTP or a child process on stdio, through the official Rust SDK
//! (`rmcp`). docs/MCP.md says what is supported and what is not.
//!
//! A server's tools are declared to the model as they are listed when a run connects; a
//! `notifications/tools/list_changed` lists them again. A server that is down, slow, answers
//! garbage or dies mid-call never holds a turn: the call ends with an error response within the
//! server's `timeout_ms`, and the toolset reconnects with backoff.

mod call;
mod config;
mod connect;
mod shared;
mod toolset;

pub use config::{McpConfig, McpToolConfig, DEFAULT_TIMEOUT_MS};
pub use toolset::McpToolset;
