//! Sessions over the WebSocket: persistence across restarts, takeover, bad input.

use crate::common::*;
use livegate::event::Event;
use livegate::gateway::ServeArgs;
use livegate::session::{GetSessionConfig, SessionService, SqliteSessionService};
use serde_json::json;
use serde_json::Value;

/// Starts a gateway, plays one text turn on `session`, stops the gateway; returns the turn's events.
async fn one_turn(args: &ServeArgs, session: &str, query: &str, text: &str) -> Vec<Value> {
    let server = start(args.clone()).await;
    let mut client = Client::connect(server.addr, "u1", session, query).await;
    client.send_text(text).await;
    let events = client.events_until_turn_complete().await;
    client.close().await;
    server.shutdown(WAIT).await;
    events
}

/// Test args with the session store in a SQLite file in `dir`; the file's path.
fn sqlite_args(dir: &std::path::Path) -> (ServeArgs, std::path::PathBuf) {
    let db = dir.join("livegate.db");
    let mut args = test_args();
    args.session_store = Some(format!("sqlite://{}", db.display()));
    (args, db)
}

/// The events stored for a session, read straight from the SQLite file.
async fn stored_events(db: &std::path::Path, session: &str) -> Vec<Event> {
    let store = SqliteSessionService::open(db).await.unwrap();
    let config = GetSessionConfig::default();
    let stored = store
        .get_session("livegate", "u1", session, &config)
        .await
        .unwrap();
    stored.expect("session stored").events
}

fn prompt_tokens(events: &[Value]) -> u64 {
    events
        .iter()
        .find_map(|e| e["usageMetadata"]["promptTokenCount"].as_u64())
        .expect("usage reported")
}

#[tokio::test]
async fn session_history_persists_in_sqlite_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (mut args, db) = sqlite_args(dir.path());
    args.artifact_store = Some(format!("file://{}", dir.path().join("artifacts").display()));

    one_turn(&args, "chat", "modality=AUDIO", "hello").await;
    let events = stored_events(&db, "chat").await;
    let is_user_hello = |e: &Event| {
        e.author == "user"
            && e.content
                .as_ref()
                .is_some_and(|c| c.joined_text() == "hello")
    };
    assert!(events.iter().any(is_user_hello), "the user turn");
    let finished = |e: &Event| {
        e.output_transcription
            .as_ref()
            .is_some_and(|t| t.finished == Some(true))
    };
    assert!(events.iter().any(finished), "the finished transcription");
    assert!(
        events.iter().any(|e| e.turn_complete == Some(true)),
        "turnComplete"
    );
    assert!(
        events.iter().all(|e| e.partial != Some(true)),
        "no partial events"
    );
    assert!(
        events.iter().all(|e| !e.has_inline_media()),
        "no inline audio"
    );

    // After a restart the same session goes on: the run replays its history to the model (the
    // sim counts it in the prompt), and the TEXT turn's merged text is stored after it.
    let again = one_turn(&args, "chat", "modality=TEXT", "and again").await;
    let fresh = one_turn(&args, "fresh", "modality=TEXT", "and again").await;
    assert!(
        prompt_tokens(&again) > prompt_tokens(&fresh),
        "the restarted run sees the history"
    );
    let merged: Vec<String> = again
        .iter()
        .filter(|e| e["partial"] == false)
        .map(text_of)
        .filter(|t| !t.is_empty())
        .collect();
    let texts: Vec<String> = stored_events(&db, "chat")
        .await
        .iter()
        .filter_map(|e| e.content.as_ref().map(|c| c.joined_text()))
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(
        texts.first().map(String::as_str),
        Some("hello"),
        "history from before the restart is kept"
    );
    assert!(texts.iter().any(|t| t == "and again"));
    assert_eq!(
        texts.last(),
        merged.last(),
        "the merged text is stored: {texts:?}"
    );
}

#[tokio::test]
async fn bad_input_gets_an_error_event_and_the_connection_survives() {
    let server = start(test_args()).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_raw_text("{not json").await;
    client.send_json(json!({"type": "dance"})).await;
    client.send_binary(vec![1, 2, 3]).await;
    client
        .send_json(json!({"type": "image", "data": "%%%"}))
        .await;
    let mut messages = Vec::new();
    for _ in 0..4 {
        let e = client.next_event().await;
        assert_eq!(e["errorCode"], "INVALID_ARGUMENT", "{e}");
        messages.push(e["errorMessage"].as_str().unwrap().to_owned());
    }
    assert!(messages[0].contains("malformed JSON"), "{messages:?}");
    assert!(messages[1].contains("dance"), "{messages:?}");
    assert!(messages[2].contains("3 bytes"), "{messages:?}");
    assert!(messages[3].contains("base64"), "{messages:?}");
    client.send_text("still there?").await;
    let events = client.events_until_turn_complete().await;
    assert!(
        events.iter().any(|e| !text_of(e).is_empty()),
        "the next valid message is answered"
    );
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_second_connection_takes_the_session_over() {
    let server = start(test_args()).await;
    let mut first = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    first.send_text("hi").await;
    first.events_until_turn_complete().await;
    let mut second = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    let closed = loop {
        if let Frame::Closed(close) = first.next_frame().await {
            break close;
        }
    };
    let (code, reason) = closed.expect("a close frame with a reason");
    assert_eq!(code, livegate::gateway::close::TAKEN_OVER);
    assert!(reason.contains("taken over"), "{reason}");
    second.send_text("hello again").await;
    let events = second.events_until_turn_complete().await;
    assert!(events.iter().any(|e| !text_of(e).is_empty()));
    second.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn invalid_ids_are_rejected_before_the_upgrade() {
    let server = start(test_args()).await;
    let url = format!("ws://{}/ws/bad%20user/s1", server.addr);
    let error = tokio_tungstenite::connect_async(url)
        .await
        .expect_err("rejected");
    match error {
        tokio_tungstenite::tungstenite::Error::Http(response) => assert_eq!(response.status(), 400),
        other => panic!("expected HTTP 400, got {other}"),
    }
    // `_` starts the ids the stores reserve: its recordings could never be saved.
    let url = format!("ws://{}/ws/u1/_user", server.addr);
    match tokio_tungstenite::connect_async(url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 400)
        }
        other => panic!("expected HTTP 400 for a reserved id, got {other:?}"),
    }
    let too_long = "x".repeat(129);
    let url = format!("ws://{}/ws/u1/{too_long}", server.addr);
    assert!(
        tokio_tungstenite::connect_async(url).await.is_err(),
        "a 129-character session id is refused"
    );
    // The allowed alphabet still connects.
    let client = Client::connect(server.addr, "user.1@example:x", "s-1_a", "").await;
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_message_over_the_size_limit_closes_with_1009() {
    let mut args = test_args();
    args.max_message_bytes = 64 * 1024;
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_binary(vec![0; 100 * 1024]).await;
    let close = loop {
        match client.next_frame().await {
            Frame::Closed(close) => break close,
            _ => continue,
        }
    };
    assert_eq!(close.map(|(code, _)| code), Some(1009));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_run_that_cannot_start_is_reported_and_closed_with_1011() {
    let dir = tempfile::tempdir().unwrap();
    let (args, db) = sqlite_args(dir.path());
    let server = start(args).await;
    // Break the session store under the running gateway: loading the session fails.
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    for table in ["events", "sessions"] {
        sqlx::query(&format!("DROP TABLE {table}"))
            .execute(&pool)
            .await
            .unwrap();
    }
    pool.close().await;

    let mut client = Client::connect(server.addr, "u1", "broken", "").await;
    let Frame::Event(error) = client.next_frame().await else {
        panic!("expected the error event first");
    };
    assert!(
        error["errorCode"].as_str().is_some_and(|c| !c.is_empty()),
        "{error}"
    );
    assert!(
        error["errorMessage"]
            .as_str()
            .is_some_and(|m| m.contains("could not start the live run")),
        "{error}"
    );
    match client.next_frame().await {
        Frame::Closed(Some((code, _))) => assert_eq!(code, 1011),
        other => panic!("expected a 1011 close, got {other:?}"),
    }
    server.shutdown(WAIT).await;
}

/// The next `liveSessionResumptionUpdate`'s handle (it follows a turn's `turnComplete`).
async fn next_handle(client: &mut Client) -> String {
    loop {
        let event = client.next_event().await;
        if let Some(handle) = event["liveSessionResumptionUpdate"]["newHandle"].as_str() {
            return handle.to_owned();
        }
    }
}

/// `sim-{id}-{n}`: the model session's id.
fn model_session(handle: &str) -> &str {
    handle
        .strip_prefix("sim-")
        .and_then(|rest| rest.rsplit_once('-'))
        .map_or("", |(id, _)| id)
}

#[tokio::test]
async fn a_reconnect_resumes_the_models_own_context_with_the_stored_handle() {
    let server = start(test_args()).await;
    let sessions = server.gateway().runner.sessions.clone();

    let mut client = Client::connect(server.addr, "u1", "resumed", "modality=TEXT").await;
    client.send_text("hello").await;
    let first = next_handle(&mut client).await;
    client.close().await;
    assert_eq!(
        sessions
            .resumption_handle("livegate", "u1", "resumed")
            .await
            .unwrap(),
        Some(first.clone()),
        "stored with the session"
    );
    let state = sessions
        .get_session("livegate", "u1", "resumed", &GetSessionConfig::default())
        .await
        .unwrap()
        .unwrap()
        .state;
    assert!(state.values().all(|v| v.as_str() != Some(first.as_str())));

    // The next connection resumes the same model session: its handles carry on.
    let mut client = Client::connect(server.addr, "u1", "resumed", "modality=TEXT").await;
    client.send_text("hello again").await;
    let second = next_handle(&mut client).await;
    client.close().await;
    assert_eq!(model_session(&second), model_session(&first));
    assert!(second.ends_with("-2"), "{first} then {second}");

    // A handle the model does not know: the history is replayed to a new model session.
    timeout_idle(&server).await;
    sessions
        .set_resumption_handle(
            "livegate",
            "u1",
            "resumed",
            Some("sim-forgotten-9"),
            &livegate::session::Fence::none(),
        )
        .await
        .unwrap();
    let mut client = Client::connect(server.addr, "u1", "resumed", "modality=TEXT").await;
    client.send_text("are you there").await;
    let events = client.events_until_turn_complete().await;
    assert!(
        events.iter().all(|e| e.get("errorCode").is_none()),
        "{events:?}"
    );
    assert!(
        prompt_tokens(&events) > 10,
        "the history was replayed: {events:?}"
    );
    let third = next_handle(&mut client).await;
    client.close().await;
    assert_ne!(model_session(&third), model_session(&first));
    assert_ne!(model_session(&third), "forgotten");
    server.shutdown(WAIT).await;
}

async fn timeout_idle(server: &livegate::gateway::Server) {
    tokio::time::timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("connections finish");
}
