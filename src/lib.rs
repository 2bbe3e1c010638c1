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
//!
//! # As a library
//!
//! The `livegate` binary is a thin `main` over this crate, and a program of your own can use the
//! same calls: [`gateway::start`] serves the stock gateway from [`gateway::ServeArgs`] (read from
//! the command line by [`gateway::ServeArgs::from_command_line`], or set in code);
//! [`gateway::start_with`] changes its agent tree first, to give it tools
//! ([`agent::FunctionTool`], [`agent::Toolset`], [`agent::mcp::McpToolset`]) and
//! [`agent::Callbacks`] written in Rust; [`gateway::build`] and [`gateway::router`] mount its
//! routes inside an axum application beside the application's own, and
//! [`gateway::Gateway::drain`] ends its sessions on the way down. The crate's `examples/` show
//! each: `custom_tool.rs`, `embed_axum.rs`, and `mcp_agent.toml`, an agent file whose tools come
//! from MCP servers.
//!
//! A tool of your own, served on a free port of the loopback interface by the `sim` model:
//!
//! ```
//! use std::time::Duration;
//!
//! use livegate::agent::{Agent, FunctionTool, LlmAgent};
//! use livegate::gateway::{self, ServeArgs};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let greet = FunctionTool::sync(
//!     "greet",
//!     "Greets someone by name.",
//!     json!({ "type": "object", "properties": { "name": { "type": "string" } } }),
//!     |args, _ctx| {
//!         let name = args["name"].as_str().unwrap_or("you");
//!         Ok(json!({ "greeting": format!("Hello, {name}!") }))
//!     },
//! );
//! let mut args = ServeArgs::defaults();
//! args.bind = "127.0.0.1:0".parse()?;
//! args.session_store = Some("memory:".into());
//! args.artifact_store = Some("memory:".into());
//! let server = gateway::start_with(
//!     &args,
//!     Box::new(move |agent| match agent {
//!         Agent::Llm(root) => Ok(LlmAgent::clone(&root).with_tool(greet).into()),
//!         other => Err(format!("{} takes no tools", other.name()).into()),
//!     }),
//! )
//! .await?;
//! # let Agent::Llm(root) = &server.gateway().runner.agent else { unreachable!() };
//! # assert!(root.tools.iter().any(|t| t.name() == "greet"));
//! println!("connect to ws://{}/ws/USER/SESSION", server.addr);
//! server.shutdown(Duration::from_secs(5)).await;
//! # Ok(())
//! # }
//! ```

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
pub mod trace_context;
