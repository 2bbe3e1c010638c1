//! Offline model servers backed by livegate's `sim` model, for developing and testing clients
//! with no key and no network: [`gemini`] speaks the Gemini Live wire protocol, [`openai`] the
//! OpenAI Realtime one; [`mcp`] is a small MCP server for the MCP toolsets. They use only livegate's `event`, `model` and `cli` modules, never its gateway;
//! `livegate mock-gemini` and `livegate mock-openai` run their binaries.

pub mod gemini;
pub mod mcp;
pub mod openai;
