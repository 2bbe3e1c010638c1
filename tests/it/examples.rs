//! The crate's examples (examples/), run as a user would run them: the built example programs as
//! child processes, reached over real sockets; the example agent file loaded and built.

use std::path::PathBuf;

use livegate::agent::config::AgentConfig;
use livegate::agent::Agent;
use livegate::model::sim::{SimConfig, SimModel};
use serde_json::{json, Value};
use tokio::time::timeout;

use crate::common::process::{listening_addr, output_of, spawn_program};
use crate::common::{Client, WAIT};

/// An example program, built beside the test's `livegate` (`cargo test` builds the examples;
/// `cargo build --examples` does too).
fn example(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_livegate"))
        .with_file_name("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: cargo build --examples",
        path.display()
    );
    path
}

fn function_response(events: &[Value]) -> Value {
    events
        .iter()
        .find_map(|e| e["content"]["parts"][0].get("functionResponse"))
        .expect("a function response")["response"]
        .clone()
}

#[tokio::test]
async fn the_custom_tool_example_serves_its_rust_tool_and_callback() {
    let (process, line) = spawn_program(
        &example("custom_tool"),
        &[
            "--bind",
            "127.0.0.1:0",
            "--session-store",
            "memory:",
            "--artifact-store",
            "memory:",
            "--sim-pacing",
            "burst",
            "--sim-reply-delay-ms",
            "0",
        ],
        &[],
        "listening on http://",
    )
    .await;
    let addr = listening_addr(&line);
    let mut client = Client::connect(addr, "u", "s", "modality=TEXT").await;
    client.send_text("order_status order_id=A-17").await;
    let events = client.events_until_turn_complete().await;
    assert_eq!(
        function_response(&events),
        json!({"order_id": "A-17", "status": "shipped", "carrier": "parcel post"})
    );
    // The callback answers for test orders; the tool does not run.
    client.send_text("order_status order_id=test").await;
    let events = client.events_until_turn_complete().await;
    assert_eq!(
        function_response(&events),
        json!({"status": "test orders never ship"})
    );
    client.close().await;
    output_of(process).await;
}

#[tokio::test]
async fn the_embedded_router_serves_beside_the_applications_routes_behind_its_sign_in() {
    let (process, line) = spawn_program(
        &example("embed_axum"),
        &["127.0.0.1:0"],
        &[],
        "listening on http://",
    )
    .await;
    let addr = listening_addr(&line);
    let http = reqwest::Client::new();
    let send = |request: reqwest::RequestBuilder| async move {
        let response = timeout(WAIT, request.send()).await.unwrap().unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    };
    let url = |path: &str| format!("http://{addr}{path}");

    assert_eq!(
        send(http.get(url("/app/hello"))).await,
        (200, "hello from the application".into())
    );
    // The gateway's own routes are there, with the gateway's auth.
    assert_eq!(send(http.get(url("/healthz"))).await.0, 200);
    assert_eq!(send(http.get(url("/api/sessions?userId=ada"))).await.0, 401);
    // The application's sign-in refuses whom it does not know.
    let refused = send(http.post(url("/app/sign-in")).header("x-app-key", "nope")).await;
    assert_eq!(refused.0, 401);
    let (status, body) = send(
        http.post(url("/app/sign-in"))
            .header("x-app-key", "ada-key"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let signed_in: Value = serde_json::from_str(&body).unwrap();
    let token = signed_in["token"].as_str().unwrap();

    let denied = tokio_tungstenite::connect_async(format!("ws://{addr}/ws/ada/s1")).await;
    assert!(denied.is_err(), "no token, no socket");
    let mut client =
        Client::connect(addr, "ada", "s1", &format!("modality=TEXT&token={token}")).await;
    client.send_text("hello there").await;
    let events = client.events_until_turn_complete().await;
    assert!(events
        .iter()
        .any(|e| crate::common::text_of(e).contains("hello there")));
    client.close().await;
    // A user's token reaches that user's sessions only.
    let other =
        tokio_tungstenite::connect_async(format!("ws://{addr}/ws/grace/s1?token={token}")).await;
    assert!(other.is_err(), "ada's token is not grace's");
    output_of(process).await;
}

#[tokio::test]
async fn the_mcp_example_agent_file_builds_an_agent_with_both_servers() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/mcp_agent.toml");
    // The file names it for the HTTP server's header.
    std::env::set_var("ORDERS_TOKEN", "example-token");
    let config = AgentConfig::load(&path).unwrap();
    let agent = config
        .build("sim", &|_| {
            Ok(std::sync::Arc::new(SimModel::new(SimConfig::default())))
        })
        .unwrap();
    let Agent::Llm(root) = &agent else {
        panic!("an LLM agent")
    };
    let names: Vec<&str> = root.toolsets.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["time", "orders"]);
    assert!(root.tools.iter().any(|t| t.name() == "calculate"));
}
