//! `livegate-mock-mcp`: a small MCP server for testing MCP toolsets, over stdio (the default) or
//! streamable HTTP (`--http 127.0.0.1:0`, printing its URL).

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use livegate_mock::mcp::{serve_http, serve_stdio, McpState};

/// Run a small MCP server.
#[derive(Debug, Parser)]
#[command(name = "livegate-mock-mcp")]
struct Args {
    /// Serve streamable HTTP on this address instead of stdio.
    #[arg(long)]
    http: Option<SocketAddr>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.http {
        Some(addr) => {
            let server = serve_http(addr).await?;
            println!("mock MCP server on {}", server.url());
            tokio::signal::ctrl_c().await?;
            Ok(())
        }
        None => {
            let state = McpState {
                can_die: true,
                ..McpState::default()
            };
            serve_stdio(Arc::new(state)).await
        }
    }
}
