//! The mock servers' own binaries, as `livegate mock-gemini` and `livegate mock-openai` run them:
//! the address on stdout, logs on stderr (plain text in a pipe, debug when asked), and an API key
//! that is checked and answered with but never logged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const WAIT: Duration = Duration::from_secs(20);

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A running mock binary and what it printed.
struct Running {
    child: Child,
    addr: String,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

/// Starts `binary` on a free port with `key` required and debug logs; returns once it printed its
/// address.
async fn start(binary: &str, key: &str) -> Running {
    let mut child = Command::new(binary)
        .args(["--port", "0", "--api-key", key, "--sim-pacing", "burst"])
        .args(["--sim-reply-delay-ms", "0"])
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the mock runs");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = timeout(WAIT, lines.next_line())
        .await
        .expect("prints its address in time")
        .expect("reads stdout")
        .expect("a first line");
    assert!(first.contains("listening on ws://"), "{first}");
    let addr = first
        .rsplit("ws://")
        .next()
        .expect("address")
        .trim()
        .to_owned();
    // Both pipes are read to the end as they come, so the child never blocks on a full one.
    let stdout = tokio::spawn(async move {
        let mut all = format!("{first}\n");
        while let Ok(Some(line)) = lines.next_line().await {
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let mut pipe = child.stderr.take().expect("stderr");
    let stderr = tokio::spawn(async move {
        let mut all = String::new();
        let _ = pipe.read_to_string(&mut all).await;
        all
    });
    Running {
        child,
        addr,
        stdout,
        stderr,
    }
}

/// Stops the binary; checks what it printed: the key nowhere, logs on stderr only, no colours.
async fn stop_and_check_logs(mut running: Running, key: &str, names: &str) {
    let _ = running.child.start_kill();
    let _ = timeout(WAIT, running.child.wait()).await;
    let stdout = timeout(WAIT, running.stdout)
        .await
        .expect("stdout ends")
        .unwrap_or_default();
    let stderr = timeout(WAIT, running.stderr)
        .await
        .expect("stderr ends")
        .unwrap_or_default();
    assert!(stderr.contains("DEBUG"), "debug logs on stderr: {stderr}");
    assert!(stderr.contains(names), "the session was logged: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "ANSI codes in a piped log");
    assert!(!stdout.contains("DEBUG"), "logs on stdout: {stdout}");
    assert!(
        !stdout.contains(key) && !stderr.contains(key),
        "the key is in the output"
    );
}

async fn connect(url: &str, header: Option<(&'static str, String)>) -> Socket {
    let mut request = url.into_client_request().expect("request");
    if let Some((name, value)) = header {
        let value = HeaderValue::from_str(&value).expect("header value");
        request.headers_mut().insert(name, value);
    }
    let (socket, _) = timeout(WAIT, tokio_tungstenite::connect_async(request))
        .await
        .expect("connects in time")
        .expect("websocket upgrade");
    socket
}

async fn send(socket: &mut Socket, message: Value) {
    timeout(WAIT, socket.send(Message::Text(message.to_string().into())))
        .await
        .expect("sends in time")
        .expect("sends");
}

/// JSON messages (text or binary frames) until, and including, the first one `done` accepts.
async fn until(socket: &mut Socket, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut messages = Vec::new();
    loop {
        let data = match timeout(WAIT, socket.next()).await.expect("a frame in time") {
            Some(Ok(Message::Text(text))) => text.as_str().as_bytes().to_vec(),
            Some(Ok(Message::Binary(data))) => data.to_vec(),
            Some(Ok(_)) => continue,
            other => panic!("socket ended: {other:?}"),
        };
        let message: Value = serde_json::from_slice(&data).expect("JSON");
        let end = done(&message);
        messages.push(message);
        if end {
            return messages;
        }
    }
}

#[tokio::test]
async fn mock_gemini_checks_the_key_and_never_logs_it() {
    const KEY: &str = "AIzaTEST-do-not-log-4242";
    let mock = start(env!("CARGO_BIN_EXE_livegate-mock-gemini"), KEY).await;
    let path = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent";
    let mut socket = connect(&format!("ws://{}{path}?key={KEY}", mock.addr), None).await;
    let model = "models/gemini-2.5-flash-native-audio-preview-12-2025";
    send(
        &mut socket,
        json!({"setup": {"model": model, "generationConfig": {"responseModalities": ["TEXT"]}}}),
    )
    .await;
    until(&mut socket, |m| m.get("setupComplete").is_some()).await;
    send(
        &mut socket,
        json!({"clientContent": {
            "turns": [{"role": "user", "parts": [{"text": "is my key good"}]}],
            "turnComplete": true,
        }}),
    )
    .await;
    let turn = until(&mut socket, |m| m["serverContent"]["turnComplete"] == true).await;
    let text: String = turn
        .iter()
        .filter_map(|m| m["serverContent"]["modelTurn"]["parts"].as_array())
        .flatten()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert!(text.contains("is my key good"), "{turn:#?}");
    let _ = socket.close(None).await;
    stop_and_check_logs(mock, KEY, "setup").await;
}

#[tokio::test]
async fn mock_openai_checks_the_key_and_never_logs_it() {
    const KEY: &str = "sk-TEST-do-not-log-4242";
    let mock = start(env!("CARGO_BIN_EXE_livegate-mock-openai"), KEY).await;
    let url = format!("ws://{}/v1/realtime?model=gpt-realtime", mock.addr);
    let mut socket = connect(&url, Some(("authorization", format!("Bearer {KEY}")))).await;
    until(&mut socket, |e| e["type"] == "session.created").await;
    send(
        &mut socket,
        json!({"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"]}}),
    )
    .await;
    send(
        &mut socket,
        json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "is my key good"}]}}),
    )
    .await;
    send(&mut socket, json!({"type": "response.create"})).await;
    let events = until(&mut socket, |e| e["type"] == "response.done").await;
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert!(text.contains("is my key good"), "{events:#?}");
    let _ = socket.close(None).await;
    stop_and_check_logs(mock, KEY, "session").await;
}
