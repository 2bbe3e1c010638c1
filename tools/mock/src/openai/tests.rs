//! The mock over a real socket, spoken to as a Realtime client would: session events, answers,
//! and the errors OpenAI gives for events it cannot take.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::*;

const WAIT: Duration = Duration::from_secs(10);

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn mock(config: MockOpenAiConfig) -> MockOpenAi {
    start("127.0.0.1:0".parse().unwrap(), config).await.unwrap()
}

fn instant() -> MockOpenAiConfig {
    MockOpenAiConfig {
        sim: SimConfig::instant(),
        ..MockOpenAiConfig::default()
    }
}

async fn connect(
    server: &MockOpenAi,
    path: &str,
    key: Option<(&'static str, &str)>,
) -> Result<Socket, u16> {
    let mut request = format!("ws://{}{path}", server.addr)
        .into_client_request()
        .unwrap();
    if let Some((name, value)) = key {
        request
            .headers_mut()
            .insert(name, HeaderValue::from_str(value).unwrap());
    }
    match timeout(WAIT, tokio_tungstenite::connect_async(request))
        .await
        .unwrap()
    {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(other) => panic!("{other}"),
    }
}

async fn send(socket: &mut Socket, event: Value) {
    socket
        .send(Message::Text(event.to_string().into()))
        .await
        .unwrap();
}

async fn next(socket: &mut Socket) -> Value {
    loop {
        match timeout(WAIT, socket.next())
            .await
            .expect("an event in time")
        {
            Some(Ok(Message::Text(text))) => return serde_json::from_str(text.as_str()).unwrap(),
            Some(Ok(_)) => continue,
            other => panic!("socket ended: {other:?}"),
        }
    }
}

/// Events until (and including) the first of `kind`.
async fn until(socket: &mut Socket, kind: &str) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let event = next(socket).await;
        let done = event["type"] == kind;
        events.push(event);
        if done {
            return events;
        }
    }
}

#[tokio::test]
async fn a_session_starts_updates_and_answers_a_text_turn() {
    let server = mock(instant()).await;
    let mut socket = connect(&server, "/v1/realtime?model=gpt-realtime", None)
        .await
        .unwrap();
    let created = next(&mut socket).await;
    assert_eq!(created["type"], "session.created");
    assert_eq!(created["session"]["model"], "gpt-realtime");
    assert!(created["event_id"].as_str().unwrap().starts_with("event_"));
    send(
        &mut socket,
        json!({"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"], "instructions": "Be brief."}}),
    )
    .await;
    let updated = next(&mut socket).await;
    assert_eq!(updated["type"], "session.updated");
    assert_eq!(updated["session"]["output_modalities"], json!(["text"]));
    send(
        &mut socket,
        json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello mock"}]}}),
    )
    .await;
    send(&mut socket, json!({"type": "response.create"})).await;
    let events = until(&mut socket, "response.done").await;
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(text.contains("hello mock"), "{events:#?}");
    let done = events.last().unwrap();
    assert_eq!(done["response"]["status"], "completed");
    assert!(done["response"]["usage"]["output_tokens"].as_u64().unwrap() > 0);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let at = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
    assert!(at("response.created") < at("response.output_item.added"));
    assert!(at("response.output_text.done") < at("response.output_item.done"));
    server.shutdown().await;
}

#[tokio::test]
async fn bad_and_out_of_order_events_get_error_events_and_the_session_goes_on() {
    let server = mock(MockOpenAiConfig {
        sim: SimConfig {
            pacing: livegate::model::sim::Pacing::RealTime,
            reply_delay: Duration::ZERO,
            ..SimConfig::default()
        },
        ..MockOpenAiConfig::default()
    })
    .await;
    let mut socket = connect(&server, "/v1/realtime?model=gpt-realtime", None)
        .await
        .unwrap();
    next(&mut socket).await;
    let cases = [
        (
            json!({"type": "input_audio_buffer.commit", "event_id": "c1"}),
            "input_audio_buffer_commit_empty",
        ),
        (
            json!({"type": "response.cancel"}),
            "response_cancel_not_active",
        ),
        (json!({"type": "no.such.event"}), "invalid_value"),
        (
            json!({"type": "input_audio_buffer.append", "audio": "%%%"}),
            "invalid_value",
        ),
        (
            json!({"type": "conversation.item.truncate", "item_id": "item_x", "content_index": 0, "audio_end_ms": 10}),
            "invalid_value",
        ),
        (
            json!({"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "call_unknown", "output": "{}"}}),
            "invalid_value",
        ),
        (
            json!({"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcmu"}}}}}),
            "invalid_value",
        ),
    ];
    for (event, code) in cases {
        send(&mut socket, event.clone()).await;
        let error = next(&mut socket).await;
        assert_eq!(error["type"], "error", "{event}");
        assert_eq!(error["error"]["code"], code, "{event}: {error}");
    }
    socket
        .send(Message::Text("{not json".into()))
        .await
        .unwrap();
    assert_eq!(next(&mut socket).await["error"]["code"], "invalid_json");
    // The error points back at the client's event.
    send(
        &mut socket,
        json!({"type": "input_audio_buffer.commit", "event_id": "mine-7"}),
    )
    .await;
    assert_eq!(next(&mut socket).await["error"]["event_id"], "mine-7");
    // A second response while one is under way.
    send(&mut socket, json!({"type": "response.create"})).await;
    until(&mut socket, "response.created").await;
    send(&mut socket, json!({"type": "response.create"})).await;
    let error = until(&mut socket, "error").await;
    assert_eq!(
        error.last().unwrap()["error"]["code"],
        "conversation_already_has_active_response"
    );
    // Cancelling it ends it as cancelled.
    send(&mut socket, json!({"type": "response.cancel"})).await;
    let done = until(&mut socket, "response.done").await;
    assert_eq!(done.last().unwrap()["response"]["status"], "cancelled");
    server.shutdown().await;
}

#[tokio::test]
async fn the_key_the_path_and_the_model_are_checked_before_the_upgrade() {
    let server = mock(MockOpenAiConfig {
        api_key: Some("sk-mock".into()),
        ..instant()
    })
    .await;
    let path = "/v1/realtime?model=gpt-realtime";
    assert_eq!(connect(&server, path, None).await.err(), Some(401));
    assert_eq!(
        connect(&server, path, Some(("authorization", "Bearer sk-wrong")))
            .await
            .err(),
        Some(401)
    );
    assert!(
        connect(&server, path, Some(("authorization", "Bearer sk-mock")))
            .await
            .is_ok()
    );
    let azure = "/openai/v1/realtime?model=my-deployment";
    assert!(connect(&server, azure, Some(("api-key", "sk-mock")))
        .await
        .is_ok());
    assert_eq!(
        connect(&server, "/v1/realtime", Some(("api-key", "sk-mock")))
            .await
            .err(),
        Some(400)
    );
    assert_eq!(
        connect(
            &server,
            "/v1/elsewhere?model=x",
            Some(("api-key", "sk-mock"))
        )
        .await
        .err(),
        Some(404)
    );
    assert_eq!(server.connections(), 2);
    assert!(!format!("{:?}", server).contains("sk-mock"));
    server.shutdown().await;
}

#[tokio::test]
async fn fail_after_sends_a_server_error_then_closes_with_1011() {
    let server = mock(MockOpenAiConfig {
        fail_after: Some(1),
        ..instant()
    })
    .await;
    let mut socket = connect(&server, "/v1/realtime?model=gpt-realtime", None)
        .await
        .unwrap();
    next(&mut socket).await;
    send(&mut socket, json!({"type": "input_audio_buffer.clear"})).await;
    assert_eq!(
        next(&mut socket).await["type"],
        "input_audio_buffer.cleared"
    );
    let error = next(&mut socket).await;
    assert_eq!(error["error"]["type"], "server_error");
    let close = timeout(WAIT, socket.next()).await.unwrap();
    match close {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(u16::from(frame.code), 1011),
        other => panic!("expected a close, got {other:?}"),
    }
    server.shutdown().await;
}
