//! Toolsets: tools that come from elsewhere and may change while the gateway runs (an MCP
//! server's). An agent asks its toolsets for their tools each time a run of it connects, so a
//! changed list reaches the next model connection.

use super::tool::FunctionTool;

/// What a toolset has done so far, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolsetStats {
    /// Tool calls made.
    pub calls: u64,
    /// Calls that ended with an error the tool itself reported (MCP `isError`).
    pub tool_errors: u64,
    /// Calls that ran out of time.
    pub timeouts: u64,
    /// Calls that found the toolset unreachable, or that it dropped mid-call.
    pub unavailable: u64,
    /// Calls answered with something that is not a tool result (a protocol error, garbage).
    pub protocol_errors: u64,
    /// Times the toolset connected again after losing its server.
    pub reconnects: u64,
    /// True while the toolset's server is connected.
    pub up: bool,
}

/// A source of tools for an agent.
pub trait Toolset: std::fmt::Debug + Send + Sync {
    /// The toolset's name (a metrics label; unique within an agent tree).
    fn name(&self) -> &str;

    /// The tools as they are now.
    fn tools(&self) -> Vec<FunctionTool>;

    /// Ready, or why not (readiness reports it).
    fn health(&self) -> Result<(), String> {
        Ok(())
    }

    /// What the toolset has done so far.
    fn stats(&self) -> ToolsetStats {
        ToolsetStats {
            up: true,
            ..ToolsetStats::default()
        }
    }
}
