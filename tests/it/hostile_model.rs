//! The gateway against a model server that misbehaves on purpose (`common::hostile`): reconnect
//! storms meet the backoff and the cap, a turn the connection lost ends with an error the client
//! sees, one turn's text and handles are bounded, floods are not stored, a dead or mute upstream
//! is noticed.

use std::time::Duration;

use crate::common::hostile::{Act, Fault, Hostile, Provider};
use crate::common::*;
use livegate::gateway::ServeArgs;
use livegate::live::flow::DEFAULT_MAX_RECONNECTS;
use serde_json::Value;

const GEMINI: &str = "gemini-2.5-flash-native-audio-preview-12-2025";

fn args_for(upstream: &Hostile, provider: Provider) -> ServeArgs {
    let mut args = test_args();
    match provider {
        Provider::Gemini => {
            args.model = GEMINI.into();
            args.gemini_base_url = format!("ws://{}", upstream.addr);
        }
        Provider::OpenAi => {
            args.model = "gpt-realtime".into();
            args.openai_base_url = format!("ws://{}", upstream.addr);
        }
    }
    // Only what a test is about may end a turn.
    args.model_answer_timeout = Duration::from_secs(120);
    args.model_reconnect_backoff = Duration::from_millis(40);
    args
}

/// Every event until the gateway closes the socket, and the close code.
async fn until_closed(client: &mut Client) -> (Vec<Value>, Option<u16>) {
    let mut events = Vec::new();
    loop {
        match client.next_frame().await {
            Frame::Event(e) => events.push(e),
            Frame::Audio(_) => {}
            Frame::Closed(close) => return (events, close.map(|(code, _)| code)),
        }
    }
}

fn errors<'a>(events: &'a [Value], code: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["errorCode"] == code).collect()
}

/// The session's stored events, once its run is over.
async fn stored(server: &livegate::gateway::Server, session: &str) -> Vec<Value> {
    tokio::time::timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("the run ends");
    let url = format!(
        "http://{}/api/sessions/u1/{session}?limit=10000",
        server.addr
    );
    let body: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
    body["events"].as_array().cloned().unwrap_or_default()
}

/// A storm of connections ends after the cap, each reconnect but the first waiting at least
/// half its doubled backoff, with `UNAVAILABLE` and a close the client may retry on.
async fn storm_is_bounded(act: Act) -> Vec<Value> {
    let upstream = Hostile::start(Provider::Gemini, vec![act]).await;
    let args = args_for(&upstream, Provider::Gemini);
    let backoff = args.model_reconnect_backoff;
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    let (events, close) = until_closed(&mut client).await;
    let unavailable = errors(&events, "UNAVAILABLE");
    assert_eq!(unavailable.len(), 1, "{events:#?}");
    assert!(unavailable[0]["errorMessage"]
        .as_str()
        .unwrap()
        .contains("in a row"));
    assert_eq!(close, Some(1013), "try again later");
    let connections = upstream.connections();
    assert_eq!(connections.len(), 1 + DEFAULT_MAX_RECONNECTS as usize);
    for (i, pair) in connections.windows(2).enumerate().skip(1) {
        let least = backoff * (1 << i) / 2;
        let gap = pair[1] - pair[0];
        assert!(gap >= least, "reconnect {}: {gap:?} < {least:?}", i + 1);
    }
    let history = stored(&server, "s1").await;
    server.shutdown(WAIT).await;
    history
}

#[tokio::test]
async fn a_server_that_always_says_go_away_meets_the_backoff_and_the_cap() {
    storm_is_bounded(Act::GoAway).await;
}

#[tokio::test]
async fn a_server_that_sends_a_handle_then_fails_meets_the_backoff_and_the_cap() {
    let history = storm_is_bounded(Act::HandleThenClose).await;
    assert!(
        history
            .iter()
            .all(|e| e.get("liveSessionResumptionUpdate").is_none()),
        "no resumption update is stored: {history:#?}"
    );
}

/// The user's turn, lost to `fault` on the first connection, ends with an error and the turn's
/// end; the next turn is answered on the resumed connection.
async fn a_lost_turn_ends_with_an_error(
    fault: Fault,
    code: &str,
    tune: impl FnOnce(&mut ServeArgs),
) {
    let upstream = Hostile::start(Provider::Gemini, vec![Act::OnTurn(fault), Act::Answer]).await;
    let mut args = args_for(&upstream, Provider::Gemini);
    tune(&mut args);
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("are you there").await;
    let events = client.events_until_turn_complete().await;
    let lost = errors(&events, code);
    assert_eq!(lost.len(), 1, "{events:#?}");
    assert!(lost[0]["errorMessage"]
        .as_str()
        .unwrap()
        .contains("not answered"));
    client.send_text("again").await;
    let events = client.events_until_turn_complete().await;
    assert!(events.iter().any(|e| text_of(e) == "fine"), "{events:#?}");
    assert_eq!(upstream.connections().len(), 2, "resumed once");
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_turn_lost_to_an_oversize_message_ends_with_an_error() {
    a_lost_turn_ends_with_an_error(Fault::Oversize, "UNAVAILABLE", |_| {}).await;
}

#[tokio::test]
async fn a_turn_lost_to_an_invalid_utf8_frame_ends_with_an_error() {
    a_lost_turn_ends_with_an_error(Fault::BadUtf8, "UNAVAILABLE", |_| {}).await;
}

#[tokio::test]
async fn a_turn_lost_to_a_1011_ends_with_an_error() {
    a_lost_turn_ends_with_an_error(Fault::Close1011, "UNAVAILABLE", |_| {}).await;
}

#[tokio::test]
async fn a_turn_lost_to_a_dead_connection_ends_within_the_silence_timeout() {
    // The turn ends within WAIT only if the silence timeout noticed (the answer timeout is 120 s).
    a_lost_turn_ends_with_an_error(Fault::Dead, "UNAVAILABLE", |args| {
        args.gemini_silence_timeout = Duration::from_millis(600);
    })
    .await;
}

#[tokio::test]
async fn a_server_that_never_answers_meets_the_answer_timeout() {
    a_lost_turn_ends_with_an_error(Fault::Mute, "DEADLINE_EXCEEDED", |args| {
        args.model_answer_timeout = Duration::from_millis(500);
    })
    .await;
}

#[tokio::test]
async fn openai_never_answering_meets_the_answer_timeout() {
    let upstream = Hostile::start(Provider::OpenAi, vec![Act::OnTurn(Fault::Mute)]).await;
    let mut args = args_for(&upstream, Provider::OpenAi);
    args.model_answer_timeout = Duration::from_millis(500);
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("are you there").await;
    let (events, close) = until_closed(&mut client).await;
    assert_eq!(errors(&events, "DEADLINE_EXCEEDED").len(), 1, "{events:#?}");
    // Nothing to resume on OpenAI: the run ends, with the reason.
    assert_eq!(close, Some(1011));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn openai_notices_a_black_holed_upstream() {
    let upstream = Hostile::start(Provider::OpenAi, vec![Act::OnTurn(Fault::Dead)]).await;
    let mut args = args_for(&upstream, Provider::OpenAi);
    args.openai_silence_timeout = Duration::from_millis(600);
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("are you there").await;
    // Within WAIT only if the silence timeout noticed (the answer timeout is 120 s).
    let (events, close) = until_closed(&mut client).await;
    let unavailable = errors(&events, "UNAVAILABLE");
    assert!(!unavailable.is_empty(), "{events:#?}");
    assert!(unavailable
        .iter()
        .any(|e| e["errorMessage"].as_str().unwrap().contains("sent nothing")));
    assert_eq!(close, Some(1013));
    server.shutdown(WAIT).await;
}

/// `fault` brings far more text than a turn may hold: the client is told, and what is kept
/// (streamed and stored) stays within the limit.
async fn a_turn_is_bounded(provider: Provider, fault: Fault) {
    const LIMIT: usize = 256 * 1024;
    let upstream = Hostile::start(provider, vec![Act::OnTurn(fault)]).await;
    let mut args = args_for(&upstream, provider);
    args.model_max_turn_bytes = LIMIT;
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("talk a lot").await;
    let events = client.events_until_turn_complete().await;
    assert_eq!(errors(&events, "RESOURCE_EXHAUSTED").len(), 1, "one error");
    let streamed: usize = events
        .iter()
        .filter(|e| e["partial"] == true)
        .map(|e| {
            text_of(e).len()
                + e["outputTranscription"]["text"]
                    .as_str()
                    .map_or(0, str::len)
        })
        .sum();
    assert_eq!(
        streamed, LIMIT,
        "the kept part of the turn reached the client"
    );
    client.close().await;
    let history = stored(&server, "s1").await;
    let largest = history
        .iter()
        .map(|e| e.to_string().len())
        .max()
        .unwrap_or(0);
    assert!(
        largest < LIMIT + 4096,
        "the largest stored event is bounded: {largest}"
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_turns_text_is_bounded_on_gemini() {
    let text = Fault::Text {
        parts: 8,
        bytes: 200 * 1024,
    };
    a_turn_is_bounded(Provider::Gemini, text).await;
}

#[tokio::test]
async fn a_turns_text_is_bounded_on_openai() {
    let text = Fault::Text {
        parts: 8,
        bytes: 200 * 1024,
    };
    a_turn_is_bounded(Provider::OpenAi, text).await;
}

#[tokio::test]
async fn a_turns_transcription_is_bounded() {
    let transcript = Fault::Transcript {
        parts: 8,
        bytes: 200 * 1024,
    };
    a_turn_is_bounded(Provider::Gemini, transcript).await;
}

#[tokio::test]
async fn handles_over_the_limit_are_dropped_and_none_is_stored_as_an_event() {
    let fault = Fault::Handles {
        count: 300,
        bytes: 20 * 1024,
    };
    let upstream = Hostile::start(Provider::Gemini, vec![Act::OnTurn(fault)]).await;
    let server = start(args_for(&upstream, Provider::Gemini)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello").await;
    let events = client.events_until_turn_complete().await;
    let refused = errors(&events, "RESOURCE_EXHAUSTED");
    assert_eq!(refused.len(), 1, "one error a connection: {refused:#?}");
    assert!(
        events
            .iter()
            .all(|e| e["liveSessionResumptionUpdate"]["newHandle"]
                .as_str()
                .is_none_or(|h| h.len() < 64)),
        "no handle over the limit reaches the client"
    );
    client.close().await;
    let history = stored(&server, "s1").await;
    assert!(history.iter().all(|e| e.to_string().len() < 8 * 1024));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_flood_of_resumption_updates_reaches_the_client_but_not_the_history() {
    let fault = Fault::Handles {
        count: 300,
        bytes: 16,
    };
    let upstream = Hostile::start(Provider::Gemini, vec![Act::OnTurn(fault)]).await;
    let server = start(args_for(&upstream, Provider::Gemini)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello").await;
    let events = client.events_until_turn_complete().await;
    let updates = events
        .iter()
        .filter(|e| e.get("liveSessionResumptionUpdate").is_some())
        .count();
    assert!(updates >= 300, "the client sees each new handle: {updates}");
    client.close().await;
    let history = stored(&server, "s1").await;
    assert!(
        history
            .iter()
            .all(|e| e.get("liveSessionResumptionUpdate").is_none()),
        "no update is stored"
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_flood_of_openai_errors_stores_a_few() {
    let fault = Fault::Errors { count: 500 };
    let upstream = Hostile::start(Provider::OpenAi, vec![Act::OnTurn(fault)]).await;
    let server = start(args_for(&upstream, Provider::OpenAi)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello").await;
    let events = client.events_until_turn_complete().await;
    let shown = errors(&events, "INVALID_ARGUMENT").len();
    assert_eq!(
        shown,
        livegate::live::flow::MAX_MODEL_ERRORS_PER_TURN as usize,
        "{events:#?}"
    );
    assert!(events.iter().any(|e| text_of(e) == "after errors"));
    client.close().await;
    let history = stored(&server, "s1").await;
    let kept = history
        .iter()
        .filter(|e| e.get("errorCode").is_some())
        .count();
    assert!(kept <= shown, "{kept} errors stored");
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_model_that_calls_tools_for_ever_meets_the_round_cap() {
    let upstream = Hostile::start(Provider::Gemini, vec![Act::OnTurn(Fault::ToolLoop)]).await;
    let mut args = args_for(&upstream, Provider::Gemini);
    args.model_max_tool_rounds = 3;
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("what time is it in Tokyo").await;
    let (events, close) = until_closed(&mut client).await;
    let calls = events
        .iter()
        .filter(|e| {
            e["content"]["parts"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p.get("functionCall").is_some()))
        })
        .count();
    assert_eq!(calls, 3, "the rounds allowed ran");
    assert_eq!(errors(&events, "RESOURCE_EXHAUSTED").len(), 1);
    assert_eq!(close, Some(1011));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_go_away_without_a_handle_replays_the_history_as_it_stands() {
    let upstream = Hostile::start(Provider::Gemini, vec![Act::AnswerThenGoAway, Act::Answer]).await;
    let server = start(args_for(&upstream, Provider::Gemini)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("remember the lighthouse").await;
    client.events_until_turn_complete().await;
    client.send_text("again").await;
    let events = client.events_until_turn_complete().await;
    assert!(
        events.iter().all(|e| e.get("errorCode").is_none()),
        "{events:#?}"
    );
    assert_eq!(upstream.connections().len(), 2);
    let replayed = upstream
        .received(1)
        .iter()
        .filter_map(|m| m.get("clientContent"))
        .find(|c| c["turnComplete"] != true)
        .map(|c| c["turns"].to_string())
        .unwrap_or_default();
    assert!(
        replayed.contains("remember the lighthouse") && replayed.contains("fine"),
        "the conversation so far is replayed: {replayed}"
    );
    client.close().await;
    server.shutdown(WAIT).await;
}
