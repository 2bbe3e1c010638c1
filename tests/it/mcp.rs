//! MCP toolsets against real MCP servers from the official Rust SDK (`livegate-mock-mcp`): over
//! streamable HTTP in process and over stdio as a child process; tools listed, filtered, called
//! with every kind of result, list changes, identity, and every failure (down, slow, garbage,
//! dying mid-call) ending the call in time; then end to end over the WebSocket on `sim`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use livegate::agent::mcp::{McpConfig, McpToolset};
use livegate::agent::{Context, FunctionTool, Invocation, Toolset};
use livegate::artifact::{ArtifactScope, ArtifactService, InMemoryArtifactService};
use livegate_mock::mcp::serve_http;
use serde_json::{json, Value};
use tokio::time::timeout;

use crate::common::{
    eventually, http_get, metric, on_mock_gemini, start, test_args, text_of, Client, WAIT,
};

fn config(text: &str) -> McpConfig {
    toml::from_str(text).unwrap()
}

fn context(artifacts: Arc<InMemoryArtifactService>) -> Context {
    let scope = ArtifactScope {
        app_name: "app",
        user_id: "ada",
        session_id: "s-1",
    };
    let invocation = Invocation::new("e-1".into(), scope, artifacts, serde_json::Map::new());
    Context::new(Arc::new(invocation), "agent", Some("call-1".into()))
}

fn tool(toolset: &McpToolset, name: &str) -> FunctionTool {
    toolset
        .tools()
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("{name} is listed"))
}

async fn call(toolset: &McpToolset, name: &str, args: Value) -> Result<Value, String> {
    let ctx = context(Arc::default());
    timeout(WAIT, tool(toolset, name).call(args, ctx))
        .await
        .expect("a call ends in time")
        .map_err(|e| e.to_string())
}

/// `livegate-mock-mcp`, built beside the test's `livegate` (`cargo build --workspace`).
fn mock_binary() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_livegate")).with_file_name("livegate-mock-mcp");
    assert!(
        path.exists(),
        "{} is missing: cargo build -p livegate-mock",
        path.display()
    );
    path
}

async fn connected(text: &str) -> Arc<McpToolset> {
    let toolset = McpToolset::start(&config(text)).unwrap();
    toolset.wait_connected(WAIT).await.expect("connects");
    toolset
}

#[tokio::test]
async fn http_tools_are_listed_filtered_and_called_with_every_kind_of_result() {
    let server = serve_http(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    std::env::set_var("LIVEGATE_TEST_MCP_TOKEN", "t0ken");
    let toolset = connected(&format!(
        "name = \"tools\"\nurl = \"{}\"\ndenied_tools = [\"die\"]\nforward_identity = true\n\
         headers = {{ Authorization = \"Bearer ${{LIVEGATE_TEST_MCP_TOKEN}}\" }}",
        server.url()
    ))
    .await;
    let mut names: Vec<String> = toolset
        .tools()
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    names.sort();
    // `die` is denied; `bad.name` is no function name the models accept.
    assert_eq!(
        names,
        ["add", "echo", "fail", "image", "slow", "toggle", "whoami"]
    );
    let echo = tool(&toolset, "echo");
    assert_eq!(
        echo.declaration()
            .parameters_json_schema
            .as_deref()
            .unwrap()["required"],
        json!(["text"])
    );

    assert_eq!(
        call(&toolset, "echo", json!({"text": "hi"})).await.unwrap(),
        json!({"result": "hi"})
    );
    assert_eq!(
        call(&toolset, "add", json!({"a": 2, "b": 3}))
            .await
            .unwrap(),
        json!({"result": {"sum": 5.0}})
    );
    assert_eq!(
        call(&toolset, "fail", json!({})).await.unwrap(),
        json!({"error": "it broke"})
    );
    let artifacts = Arc::new(InMemoryArtifactService::default());
    let image = timeout(
        WAIT,
        tool(&toolset, "image").call(json!({}), context(artifacts.clone())),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(image["result"], "a pixel");
    let block = &image["content"][0];
    assert_eq!(
        (block["type"].as_str(), block["mimeType"].as_str()),
        (Some("image"), Some("image/png"))
    );
    let name = block["artifact"].as_str().unwrap();
    let scope = ArtifactScope {
        app_name: "app",
        user_id: "ada",
        session_id: "s-1",
    };
    let saved = artifacts.load(scope, name, None).await.unwrap().unwrap();
    assert_eq!(saved.mime_type, "image/png");
    assert_eq!(saved.data.len(), block["bytes"].as_u64().unwrap() as usize);
    assert!(saved.data.starts_with(b"\x89PNG"));

    let who = call(&toolset, "whoami", json!({})).await.unwrap();
    assert_eq!(
        who["result"],
        json!({
            "meta_user": "ada", "meta_session": "s-1",
            "header_user": "ada", "header_session": "s-1",
            "header_auth": "Bearer t0ken",
            // No client token started this run.
            "meta_claims": null, "header_claims": null,
        })
    );
    let error = call(&toolset, "echo", json!([1])).await.unwrap_err();
    assert!(error.contains("must be an object"), "{error}");
    let stats = toolset.stats();
    assert_eq!((stats.calls, stats.tool_errors, stats.up), (6, 2, true));
}

#[tokio::test]
async fn a_changed_tool_list_is_seen_and_a_removed_tool_answers_with_an_error() {
    let server = serve_http(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let toolset = connected(&format!("name = \"tools\"\nurl = \"{}\"", server.url())).await;
    let has_extra = |t: &McpToolset| t.tools().iter().any(|t| t.name() == "extra");
    assert!(!has_extra(&toolset));
    assert_eq!(
        call(&toolset, "toggle", json!({})).await.unwrap(),
        json!({"result": "extra added"})
    );
    assert!(
        toolset.wait_until(WAIT, has_extra).await,
        "list_changed refreshes the list"
    );
    let extra = tool(&toolset, "extra");
    assert_eq!(
        call(&toolset, "extra", json!({})).await.unwrap(),
        json!({"result": "extra ran"})
    );
    call(&toolset, "toggle", json!({})).await.unwrap();
    assert!(toolset.wait_until(WAIT, |t| !has_extra(t)).await);
    // A declaration the model still holds from before the change.
    let error = timeout(WAIT, extra.call(json!({}), context(Arc::default())))
        .await
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("no longer offers the tool `extra`"),
        "{error}"
    );
}

#[tokio::test]
async fn a_slow_call_times_out_and_is_cancelled_on_the_server() {
    let server = serve_http(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let toolset = connected(&format!(
        "name = \"tools\"\nurl = \"{}\"\ntimeout_ms = 300",
        server.url()
    ))
    .await;
    let cancelled = server.state.cancelled_notify.notified();
    let error = call(&toolset, "slow", json!({})).await.unwrap_err();
    assert!(error.contains("timed out after 300ms"), "{error}");
    timeout(WAIT, cancelled)
        .await
        .expect("the server hears notifications/cancelled");
    assert_eq!(server.state.cancelled.load(Ordering::SeqCst), 1);
    assert_eq!(toolset.stats().timeouts, 1);
    // The connection is still good.
    assert_eq!(
        call(&toolset, "echo", json!({"text": "after"}))
            .await
            .unwrap(),
        json!({"result": "after"})
    );
}

#[tokio::test]
async fn a_dropped_call_is_cancelled_on_the_server() {
    let server = serve_http(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let toolset = connected(&format!("name = \"tools\"\nurl = \"{}\"", server.url())).await;
    let cancelled = server.state.cancelled_notify.notified();
    let slow = tool(&toolset, "slow");
    let task = tokio::spawn(async move { slow.call(json!({}), context(Arc::default())).await });
    // Aborted once the server runs it, as a flow aborts a call the model cancelled.
    let started = async {
        while server.state.calls.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
    };
    timeout(WAIT, started)
        .await
        .expect("the call reaches the server");
    task.abort();
    timeout(WAIT, cancelled)
        .await
        .expect("the server hears notifications/cancelled");
}

#[tokio::test]
async fn stdio_servers_run_as_children_and_are_restarted_when_they_die() {
    let toolset = connected(&format!(
        "name = \"child\"\ncommand = \"{}\"\ntimeout_ms = 5000",
        mock_binary().display()
    ))
    .await;
    assert_eq!(
        call(&toolset, "echo", json!({"text": "over stdio"}))
            .await
            .unwrap(),
        json!({"result": "over stdio"})
    );
    // The process exits mid-call: the call ends at once with an error, not at its timeout.
    let error = call(&toolset, "die", json!({})).await.unwrap_err();
    assert!(error.contains("MCP server child is unavailable"), "{error}");
    assert!(
        toolset
            .wait_until(WAIT, |t| t.stats().reconnects == 1 && t.stats().up)
            .await,
        "restarted: {:?}",
        toolset.stats()
    );
    assert_eq!(
        call(&toolset, "echo", json!({"text": "again"}))
            .await
            .unwrap(),
        json!({"result": "again"})
    );
    assert_eq!(toolset.stats().unavailable, 1);
}

#[tokio::test]
async fn a_server_that_is_down_or_answers_garbage_fails_calls_in_time() {
    // Nothing listens on a port just freed.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = listener.local_addr().unwrap();
    drop(listener);
    let down = McpToolset::start(&config(&format!(
        "name = \"down\"\nurl = \"http://{closed}/mcp\""
    )))
    .expect("a server that is down does not fail the start");
    assert!(
        down.wait_until(WAIT, |t| t.health().unwrap_err()
            != "MCP server down unavailable: connecting")
            .await
    );
    assert!(down.health().is_err());
    assert!(down.tools().is_empty());

    let garbage = garbage_server().await;
    let toolset = McpToolset::start(&config(&format!(
        "name = \"garbage\"\nurl = \"http://{garbage}/mcp\"\ntimeout_ms = 500"
    )))
    .unwrap();
    let error = toolset
        .wait_connected(Duration::from_secs(3))
        .await
        .unwrap_err();
    assert!(error.contains("MCP server garbage unavailable"), "{error}");
    assert!(!toolset.stats().up);

    let missing = McpToolset::start(&config(
        "name = \"missing\"\ncommand = \"/nonexistent/mcp-server\"",
    ))
    .unwrap();
    assert!(
        missing
            .wait_until(WAIT, |t| t.health().unwrap_err().contains("cannot run"))
            .await
    );
}

/// An HTTP server whose every answer is 200 with a body that is not JSON-RPC.
async fn garbage_server() -> SocketAddr {
    let app = axum::Router::new()
        .fallback(|| async { ([("content-type", "application/json")], "{{{ not json") });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// Polls `/readyz` until it answers 200, bounded by [`WAIT`].
async fn ready(addr: SocketAddr) -> String {
    let polled = timeout(WAIT, async {
        loop {
            let answer = http_get(addr, "/readyz").await;
            if answer.starts_with("HTTP/1.1 200") {
                return answer;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    polled.expect("ready in time")
}

/// A gateway on `args` whose agent has one `[[mcp]]` server, `tools` at `url`, with the extra
/// `settings` lines; ready (the server connected) when it returns.
async fn gateway_on(
    mut args: livegate::gateway::ServeArgs,
    url: &str,
    settings: &str,
) -> (livegate::gateway::Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.toml");
    std::fs::write(
        &file,
        format!(
            "name = \"helper\"\ninstruction = \"Use your tools.\"\n\n[[mcp]]\nname = \"tools\"\nurl = \"{url}\"\n{settings}\n"
        ),
    )
    .unwrap();
    args.agent = Some(file);
    let server = start(args).await;
    ready(server.addr).await;
    (server, dir)
}

#[tokio::test]
async fn a_sim_turn_over_the_websocket_calls_an_mcp_tool_and_metrics_count_it() {
    let mcp = serve_http(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let (server, _dir) = gateway_on(
        test_args(),
        &mcp.url(),
        "allowed_tools = [\"echo\", \"fail\"]",
    )
    .await;

    let mut client = Client::connect(server.addr, "u", "s", "modality=TEXT").await;
    client.send_text("echo text=hello").await;
    let events = client.events_until_turn_complete().await;
    let call = events
        .iter()
        .find_map(|e| e["content"]["parts"][0].get("functionCall"))
        .expect("a function call");
    assert_eq!(
        (call["name"].as_str(), &call["args"]),
        (Some("echo"), &json!({"text": "hello"}))
    );
    let response = events
        .iter()
        .find_map(|e| e["content"]["parts"][0].get("functionResponse"))
        .expect("a function response");
    assert_eq!(response["response"], json!({"result": "hello"}));
    assert!(events
        .iter()
        .any(|e| text_of(e).contains("hello") && e["partial"] == false));

    client.send_text("please fail").await;
    let events = client.events_until_turn_complete().await;
    let response = events
        .iter()
        .find_map(|e| e["content"]["parts"][0].get("functionResponse"))
        .expect("a function response");
    assert_eq!(response["response"], json!({"error": "it broke"}));
    client.close().await;

    let metrics = http_get(server.addr, "/metrics").await;
    assert_eq!(
        metric(&metrics, "livegate_mcp_calls_total{server=\"tools\"}"),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "livegate_mcp_failures_total{server=\"tools\",kind=\"tool\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(&metrics, "livegate_mcp_up{server=\"tools\"}"),
        Some(1.0)
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_gateway_starts_with_its_mcp_server_down_and_readiness_says_so() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = listener.local_addr().unwrap();
    drop(listener);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.toml");
    std::fs::write(
        &file,
        format!("name = \"helper\"\n[[mcp]]\nname = \"orders\"\nurl = \"http://{closed}/mcp\"\n"),
    )
    .unwrap();
    let mut args = test_args();
    args.agent = Some(file);
    let server = start(args).await;
    let answer = http_get(server.addr, "/readyz").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("MCP server orders unavailable"), "{answer}");
    // Sessions still run, without the server's tools.
    let mut client = Client::connect(server.addr, "u", "s", "modality=TEXT").await;
    client.send_text("hello").await;
    let events = client.events_until_turn_complete().await;
    assert!(events.iter().any(|e| !text_of(e).is_empty()));
    client.close().await;
    let metrics = http_get(server.addr, "/metrics").await;
    assert_eq!(
        metric(&metrics, "livegate_mcp_up{server=\"orders\"}"),
        Some(0.0)
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn forward_identity_tells_the_server_the_client_tokens_claims() {
    const SECRET: &str = "mcp-test-secret-0123456789abcdef-0123";
    let mcp = serve_http(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let mut args = test_args();
    args.auth = Some(livegate::gateway::auth::AuthMode::Token);
    args.secrets = livegate::gateway::auth::AuthSecrets {
        token_secret: Some(livegate::gateway::auth::Secret::new(SECRET)),
        api_keys: Some(livegate::gateway::auth::Secret::new(
            "mcp-operator-key-0123456789abcdef",
        )),
    };
    let (server, _dir) = gateway_on(args, &mcp.url(), "forward_identity = true").await;
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    // An identity provider's claims beside livegate's own, one of them not ASCII.
    let claims = json!({
        "sub": "ada", "exp": exp, "iss": "livegate", "session_id": "s-claims",
        "email": "ada@example.com", "name": "Ada Lovelace-Byron ✓", "roles": ["billing"],
    });
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();

    let mut client = Client::connect(
        server.addr,
        "ada",
        "s-claims",
        &format!("modality=TEXT&token={token}"),
    )
    .await;
    client.send_text("whoami").await;
    let events = client.events_until_turn_complete().await;
    let response = events
        .iter()
        .find_map(|e| e["content"]["parts"][0].get("functionResponse"))
        .expect("a function response");
    let who = &response["response"]["result"];
    assert_eq!(
        (&who["meta_user"], &who["header_session"]),
        (&json!("ada"), &json!("s-claims"))
    );
    assert_eq!(who["meta_claims"], claims);
    let header = who["header_claims"].as_str().expect("the claims header");
    let decoded =
        base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, header).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&decoded).unwrap(), claims);
    client.close().await;
    server.shutdown(WAIT).await;
}

/// A turn that calls the MCP `slow` tool, then a new turn while it runs: the model voids the
/// call (`toolCallCancellation`), the gateway aborts it, the MCP server hears
/// `notifications/cancelled`, the client gets the event naming the call, and the new turn is
/// answered.
async fn a_new_turn_cancels_a_running_mcp_call(args: livegate::gateway::ServeArgs) {
    let mcp = serve_http(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let (server, _dir) = gateway_on(args, &mcp.url(), "allowed_tools = [\"slow\"]").await;

    let mut client = Client::connect(server.addr, "u", "s", "modality=TEXT").await;
    let cancelled = mcp.state.cancelled_notify.notified();
    let calls = mcp.state.calls.load(Ordering::SeqCst);
    client.send_text("slow").await;
    let is_call = |e: &Value| e["content"]["parts"][0].get("functionCall").is_some();
    client.frames_until(is_call).await;
    let call = client.events.iter().rev().find(|e| is_call(e)).unwrap();
    let id = call["content"]["parts"][0]["functionCall"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The call has reached the server before the user goes on.
    eventually(WAIT, "the server runs the call", || async {
        mcp.state.calls.load(Ordering::SeqCst) > calls
    })
    .await;
    client.send_text("never mind").await;
    let is_told = |e: &Value| e["customMetadata"].get("toolCallCancellation").is_some();
    client.frames_until(is_told).await;
    let told = client.events.iter().rev().find(|e| is_told(e)).unwrap();
    assert_eq!(
        told["customMetadata"]["toolCallCancellation"],
        json!({ "ids": [id] })
    );
    timeout(WAIT, cancelled)
        .await
        .expect("the server hears notifications/cancelled");
    // The new turn's answer (after the first turn's end, should the model send one).
    client
        .frames_until(|e| text_of(e).contains("never mind") && e["partial"] != true)
        .await;
    assert!(
        !client
            .events
            .iter()
            .any(|e| e["content"]["parts"][0].get("functionResponse").is_some()),
        "a cancelled call has no response"
    );
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_new_turn_cancels_a_running_mcp_call_on_sim() {
    a_new_turn_cancels_a_running_mcp_call(test_args()).await;
}

#[tokio::test]
async fn a_new_turn_cancels_a_running_mcp_call_on_gemini() {
    let (_upstream, args) = on_mock_gemini(test_args()).await;
    a_new_turn_cancels_a_running_mcp_call(args).await;
}

/// Two calls in one model message, one of them cancelled by the model: only that one stops (the
/// MCP server hears `notifications/cancelled` for it, the client the event naming it alone);
/// the other's result reaches the client and the model, without the cancelled one's.
#[tokio::test]
async fn cancelling_one_of_two_calls_in_a_message_leaves_the_other_to_answer() {
    use crate::common::hostile::{Act, Fault, Hostile, Provider};
    let mcp = serve_http(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let go = Arc::new(tokio::sync::Notify::new());
    let upstream = Hostile::start(
        Provider::Gemini,
        vec![Act::OnTurn(Fault::CancelOneOfTwo(go.clone()))],
    )
    .await;
    let mut args = test_args();
    args.model = "gemini-2.5-flash-native-audio-preview-12-2025".into();
    args.gemini_base_url = format!("ws://{}", upstream.addr);
    let (server, _dir) = gateway_on(args, &mcp.url(), "allowed_tools = [\"slow\", \"echo\"]").await;

    let mut client = Client::connect(server.addr, "u", "s", "modality=TEXT").await;
    let calls = mcp.state.calls.load(Ordering::SeqCst);
    let cancelled = mcp.state.cancelled_notify.notified();
    client.send_text("both please").await;
    eventually(WAIT, "the server runs both calls", || async {
        mcp.state.calls.load(Ordering::SeqCst) >= calls + 2
    })
    .await;
    go.notify_one();
    let is_told = |e: &Value| e["customMetadata"].get("toolCallCancellation").is_some();
    client.frames_until(is_told).await;
    let told = client.events.iter().rev().find(|e| is_told(e)).unwrap();
    assert_eq!(
        told["customMetadata"]["toolCallCancellation"],
        json!({ "ids": ["call-slow"] })
    );
    timeout(WAIT, cancelled)
        .await
        .expect("the server hears notifications/cancelled");
    let is_response = |e: &Value| e["content"]["parts"][0].get("functionResponse").is_some();
    client.frames_until(is_response).await;
    let response = client.events.iter().rev().find(|e| is_response(e)).unwrap();
    let parts = response["content"]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 1, "{response:#}");
    assert_eq!(parts[0]["functionResponse"]["id"], "call-echo");
    assert_eq!(parts[0]["functionResponse"]["response"]["result"], "kept");
    client.frames_until(|e| text_of(e).contains("fine")).await;
    let sent: Vec<Value> = upstream
        .received(0)
        .into_iter()
        .filter_map(|m| m.get("toolResponse").cloned())
        .collect();
    assert_eq!(sent.len(), 1, "{sent:#?}");
    let ids: Vec<&Value> = sent[0]["functionResponses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["id"])
        .collect();
    assert_eq!(ids, [&json!("call-echo")]);
    assert_eq!(mcp.state.cancelled.load(Ordering::SeqCst), 1);
    client.close().await;
    server.shutdown(WAIT).await;
}
