//! What an MCP tool call costs against an `http_tools` call doing the same work, both over
//! loopback to a server in the same process: the tool as the flow calls it (`FunctionTool::call`),
//! from the model's arguments to the function response. The MCP server is `livegate-mock`'s
//! (the official Rust SDK's server over streamable HTTP); the HTTP tool's is a plain axum route.
//! Both echo the text they are given.

// A bench sets up its own servers; a failure there is a broken bench, not external input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use livegate::agent::mcp::{McpConfig, McpToolset};
use livegate::agent::{http_tool, Context, FunctionTool, Invocation, Toolset};
use livegate::artifact::{ArtifactScope, InMemoryArtifactService};
use serde_json::{json, Value};

fn context() -> Context {
    let scope = ArtifactScope {
        app_name: "bench",
        user_id: "u",
        session_id: "s",
    };
    let artifacts = Arc::new(InMemoryArtifactService::default());
    let invocation = Invocation::new("e-bench".into(), scope, artifacts, serde_json::Map::new());
    Context::new(Arc::new(invocation), "agent", Some("call-1".into()))
}

/// An HTTP tool server that answers as the MCP `echo` does.
async fn echo_server() -> SocketAddr {
    let app = axum::Router::new().route(
        "/echo",
        axum::routing::post(|axum::Json(args): axum::Json<Value>| async move {
            axum::Json(json!({ "result": args["text"] }))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn bench_tool_calls(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mcp, http, _server, _toolset) = runtime.block_on(async {
        let server = livegate_mock::mcp::serve_http(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let config: McpConfig = toml::from_str(&format!(
            "name = \"bench\"\nurl = \"{}\"\nallowed_tools = [\"echo\"]",
            server.url()
        ))
        .unwrap();
        let toolset = McpToolset::start(&config).unwrap();
        toolset
            .wait_connected(Duration::from_secs(20))
            .await
            .unwrap();
        let mcp = toolset.tools().into_iter().next().unwrap();
        let addr = echo_server().await;
        let http = http_tool(
            "echo",
            "Echoes the text.",
            json!({ "type": "object", "properties": { "text": { "type": "string" } } }),
            format!("http://{addr}/echo"),
            Duration::from_secs(10),
            reqwest::Client::new(),
        );
        (mcp, http, server, toolset)
    });
    let args = json!({ "text": "the order A-17 shipped on Tuesday" });
    // Criterion reports means and medians; the target is on the tail, so the latencies of
    // sequential calls are also sorted for their p50 and p99.
    for (name, tool) in [("mcp", &mcp), ("http_tools", &http)] {
        let (p50, p99) = runtime.block_on(percentiles(tool, &args));
        println!("tool_call/{name}: p50 {p50:?} p99 {p99:?} over {SAMPLES} calls");
    }
    let mut group = c.benchmark_group("tool_call");
    for (name, tool) in [("mcp", &mcp), ("http_tools", &http)] {
        let tool: &FunctionTool = tool;
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| async {
                let response = tool.call(args.clone(), context()).await.unwrap();
                assert_eq!(response["result"], args["text"]);
            })
        });
    }
    group.finish();
}

/// Calls timed one by one for the percentiles (after as many to warm up).
const SAMPLES: usize = 5_000;

/// The p50 and p99 of `SAMPLES` sequential calls of `tool`.
async fn percentiles(tool: &FunctionTool, args: &Value) -> (Duration, Duration) {
    for _ in 0..SAMPLES {
        tool.call(args.clone(), context()).await.unwrap();
    }
    let mut took = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let started = std::time::Instant::now();
        let response = tool.call(args.clone(), context()).await.unwrap();
        took.push(started.elapsed());
        assert_eq!(response["result"], args["text"]);
    }
    took.sort();
    (took[SAMPLES / 2], took[SAMPLES * 99 / 100])
}

criterion_group!(benches, bench_tool_calls);
criterion_main!(benches);
