//! The gateway on the `openai` backend against `livegate mock-openai` over a real socket: the same
//! scenarios as on Gemini (a text turn, a spoken turn, barge-in, a tool call, upstream failures,
//! recordings), seen by the client exactly as on Gemini but for `modelVersion`.

use std::time::Duration;

use crate::common::process::{listening_addr, output_of, spawn};
use crate::common::*;
use livegate::gateway::ServeArgs;
use livegate::model::sim::{Pacing, SimConfig};
use livegate_mock::openai::{self as mockopenai, MockOpenAi, MockOpenAiConfig};
use serde_json::Value;
use tokio::time::timeout;

const MODEL: &str = "gpt-realtime";

async fn mock(config: MockOpenAiConfig) -> MockOpenAi {
    mockopenai::start("127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("mock-openai starts")
}

fn instant() -> MockOpenAiConfig {
    MockOpenAiConfig {
        sim: SimConfig::instant(),
        ..MockOpenAiConfig::default()
    }
}

fn real_time() -> MockOpenAiConfig {
    MockOpenAiConfig {
        sim: SimConfig {
            pacing: Pacing::RealTime,
            reply_delay: Duration::ZERO,
            ..SimConfig::default()
        },
        ..MockOpenAiConfig::default()
    }
}

fn gateway_args(mock: &MockOpenAi) -> ServeArgs {
    let mut args = test_args();
    args.model = MODEL.into();
    args.openai_base_url = format!("ws://{}", mock.addr);
    args
}

fn has_part(e: &Value, kind: &str) -> bool {
    e["content"]["parts"]
        .as_array()
        .is_some_and(|parts| parts.iter().any(|p| p.get(kind).is_some()))
}

/// Reads frames until the server closes the socket; every wait is bounded by `WAIT`.
async fn until_closed(client: &mut Client) {
    loop {
        if let Frame::Closed(_) = client.next_frame().await {
            return;
        }
    }
}

#[tokio::test]
async fn a_text_turn_streams_then_merges_then_completes() {
    let upstream = mock(instant()).await;
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello over the wire").await;
    let events = client.events_until_turn_complete().await;
    let partials: String = events
        .iter()
        .filter(|e| e["partial"] == true)
        .map(text_of)
        .collect();
    let merged: Vec<&Value> = events
        .iter()
        .filter(|e| e["partial"] == false && !text_of(e).is_empty())
        .collect();
    assert_eq!(merged.len(), 1, "{events:#?}");
    assert_eq!(text_of(merged[0]), partials);
    assert!(partials.contains("hello over the wire"));
    assert!(events
        .iter()
        .any(|e| e["usageMetadata"]["candidatesTokenCount"].is_u64()));
    assert!(
        events
            .iter()
            .filter(|e| e["partial"] == true)
            .all(|e| e["modelVersion"] == MODEL),
        "the answer says which model gave it"
    );
    assert!(events.iter().all(|e| e.get("errorCode").is_none()));
    // A second turn on the same session.
    client.send_text("and a second one").await;
    let events = client.events_until_turn_complete().await;
    assert!(events
        .iter()
        .any(|e| text_of(e).contains("and a second one")));
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn an_audio_turn_is_transcribed_answered_and_recorded() {
    let upstream = mock(instant()).await;
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    let frames = client.frames_until(is_turn_complete).await;
    let heard = frames.iter().position(
        |f| matches!(f, Frame::Event(e) if e.get("inputTranscription").is_some() && e["author"] == "user"),
    );
    let finished = frames
        .iter()
        .any(|f| matches!(f, Frame::Event(e) if e["inputTranscription"]["finished"] == true));
    let audio = frames.iter().position(|f| matches!(f, Frame::Audio(_)));
    let said = frames
        .iter()
        .any(|f| matches!(f, Frame::Event(e) if e["outputTranscription"]["finished"] == true));
    assert!(heard.expect("an input transcription") < audio.expect("audio"));
    assert!(finished, "a finished input transcription");
    assert!(said, "a finished output transcription");
    // The sim echoes what it heard: 16 kHz in, resampled to 24 kHz upstream, so the answer has
    // about 1.5 times the clip's samples (less the resampler's edges).
    let clip_samples = fixture_pcm("hello.wav").len() / 2;
    assert!(
        client.audio_bytes / 2 >= clip_samples,
        "the echo came through ({} bytes)",
        client.audio_bytes
    );
    let received = client.audio_bytes;
    client.close().await;

    let recorded = recorded_audio(&server, "u1", "s1").await;
    assert_eq!(recorded, (pcm.len(), received));
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn speaking_over_the_answer_interrupts_it_and_truncates_what_was_heard() {
    let upstream = mock(real_time()).await;
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    client
        .send_text("tell me a long story about a lighthouse keeper please")
        .await;
    while !matches!(client.next_frame().await, Frame::Audio(_)) {}
    let mut pcm = fixture_pcm("interrupt.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    let before = client.frames_until(|e| e["interrupted"] == true).await;
    // Everything of the answer the client got, the first chunk included.
    let heard_bytes = client.audio_bytes;
    let after = client
        .frames_until(|e| e.get("inputTranscription").is_some())
        .await;
    assert!(
        !after.iter().any(|f| matches!(f, Frame::Audio(_))),
        "no audio of the interrupted answer after `interrupted`"
    );
    assert!(before.iter().any(|f| matches!(f, Frame::Audio(_))) || heard_bytes > 0);
    let answer = client.frames_until(is_turn_complete).await;
    assert!(
        answer.iter().any(|f| matches!(f, Frame::Audio(_))),
        "the barge-in is answered"
    );

    // The model was told where the client's playback of its answer stopped.
    let truncations = upstream.wait_for_truncations(1, WAIT).await;
    assert_eq!(truncations.len(), 1, "one truncate: {truncations:?}");
    let cut = &truncations[0];
    let heard_ms = (heard_bytes / 48) as i64;
    assert!(
        cut.audio_end_ms < cut.item_audio_ms || cut.item_audio_ms as i64 <= heard_ms + 100,
        "{cut:?}"
    );
    assert!(
        (cut.audio_end_ms as i64 - heard_ms).abs() <= 250,
        "truncated at {} ms; the client was sent {heard_ms} ms",
        cut.audio_end_ms
    );
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn a_tool_call_makes_the_round_trip() {
    let upstream = mock(instant()).await;
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("what time is it in Tokyo").await;
    let events = client.events_until_turn_complete().await;
    let call = events
        .iter()
        .position(|e| has_part(e, "functionCall"))
        .expect("a function call");
    let response = events
        .iter()
        .position(|e| has_part(e, "functionResponse"))
        .expect("a function response");
    let function_call = &events[call]["content"]["parts"][0]["functionCall"];
    assert_eq!(function_call["name"], "get_current_time");
    assert!(
        function_call["id"].as_str().unwrap().starts_with("call_"),
        "OpenAI's call id is kept"
    );
    let result = &events[response]["content"]["parts"][0]["functionResponse"]["response"];
    let answer = events
        .iter()
        .rposition(|e| e["partial"] == false && !text_of(e).is_empty())
        .expect("an answer");
    assert!(call < response && response < answer);
    assert!(text_of(&events[answer]).contains(result["time"].as_str().unwrap()));
    assert!(events.iter().all(|e| e.get("errorCode").is_none()));
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn an_upstream_error_is_an_error_event_then_the_end() {
    let upstream = mock(MockOpenAiConfig {
        fail_after: Some(3),
        ..instant()
    })
    .await;
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello there, this will break").await;
    let error = client.frames_until(|e| e.get("errorCode").is_some()).await;
    let Some(Frame::Event(error)) = error.last() else {
        unreachable!()
    };
    assert_eq!(error["errorCode"], "INTERNAL");
    assert!(
        error["errorMessage"]
            .as_str()
            .unwrap()
            .contains("server_error"),
        "{error}"
    );
    // The mock then closes with 1011: the run ends, without reconnecting (nothing to resume).
    until_closed(&mut client).await;
    let codes: Vec<&Value> = client
        .events
        .iter()
        .filter_map(|e| e.get("errorCode"))
        .collect();
    assert!(codes.iter().all(|c| *c == "INTERNAL"), "{codes:?}");
    let metrics = http_get(server.addr, "/metrics").await;
    let internal = r#"livegate_errors_total{code="INTERNAL"}"#;
    assert!(metric(&metrics, internal) >= Some(1.0), "{metrics}");
    assert_eq!(upstream.connections(), 1);
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn an_upstream_close_mid_answer_ends_the_answer_without_a_hang() {
    let upstream = mock(MockOpenAiConfig {
        close_mid_answer: true,
        ..real_time()
    })
    .await;
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client
        .send_text("tell me a long story about a lighthouse keeper please")
        .await;
    let frames = client.frames_until(|e| e.get("errorCode").is_some()).await;
    assert!(
        frames
            .iter()
            .any(|f| matches!(f, Frame::Event(e) if e["partial"] == true)),
        "the answer had begun: {frames:?}"
    );
    let Some(Frame::Event(error)) = frames.last() else {
        unreachable!()
    };
    assert_eq!(error["errorCode"], "UNAVAILABLE", "{error}");
    assert!(error["errorMessage"].as_str().unwrap().contains("1006"));
    until_closed(&mut client).await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn a_wrong_key_is_refused_at_connect() {
    let upstream = mock(MockOpenAiConfig {
        api_key: Some("sk-right".into()),
        ..instant()
    })
    .await;
    // No OPENAI_API_KEY in the test environment: the gateway connects without one.
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello").await;
    let error = client.next_event().await;
    assert_eq!(error["errorCode"], "UNAVAILABLE", "{error}");
    assert!(error["errorMessage"].as_str().unwrap().contains("401"));
    until_closed(&mut client).await;
    assert_eq!(upstream.connections(), 0, "refused before the upgrade");
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn the_api_key_reaches_the_model_and_never_the_logs() {
    const KEY: &str = "sk-TEST-do-not-log-4242";
    // The mock in process (its own binary's logs are tools/mock's test): the gateway's side.
    let upstream = mock(MockOpenAiConfig {
        api_key: Some(KEY.into()),
        ..instant()
    })
    .await;
    let base = format!("ws://{}", upstream.addr);
    let (gateway_process, line) = spawn(
        &[
            "--bind",
            "127.0.0.1:0",
            "--session-store",
            "memory:",
            "--artifact-store",
            "memory:",
            "--model",
            MODEL,
            "--openai-base-url",
            &base,
        ],
        &[("OPENAI_API_KEY", KEY)],
        "listening on http://",
    )
    .await;
    let addr = listening_addr(&line);
    let mut client = Client::connect(addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("is my key good").await;
    let events = client.events_until_turn_complete().await;
    assert!(
        events.iter().any(|e| text_of(e).contains("is my key good")),
        "the key was accepted"
    );
    let sent: String = client.events.iter().map(Value::to_string).collect();
    client.close().await;
    let output = output_of(gateway_process).await;
    let logs = output.stdout + &output.stderr;
    upstream.shutdown().await;
    assert!(logs.contains("OpenAI"), "debug logs were captured: {logs}");
    assert!(!logs.contains(KEY), "the key is in the logs");
    assert!(!sent.contains(KEY), "the key was sent to the client");
}

#[tokio::test]
async fn an_agent_file_switches_the_model_with_one_line() {
    let upstream = mock(instant()).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.toml");
    std::fs::write(
        &agent,
        "name = \"assistant\"\nmodel = \"openai:gpt-realtime-mini\"\ninstruction = \"Be brief.\"\n",
    )
    .unwrap();
    let mut args = gateway_args(&upstream);
    args.model = "sim".into();
    args.agent = Some(agent);
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("which model are you").await;
    let events = client.events_until_turn_complete().await;
    assert!(
        events
            .iter()
            .any(|e| e["modelVersion"] == "gpt-realtime-mini"),
        "{events:#?}"
    );
    assert_eq!(upstream.connections(), 1);
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

/// Speaks a clip with `chunk_ms` upstream chunks; the bytes of each append OpenAI received.
async fn appends_with_chunks_of(chunk_ms: u64) -> (usize, Vec<usize>) {
    let upstream = mock(instant()).await;
    let mut args = gateway_args(&upstream);
    args.upstream_audio_chunk_ms = chunk_ms;
    let server = start(args).await;
    let (client, pcm) = say_hello(server.addr).await;
    // 16 kHz frames go up resampled to 24 kHz: half as many bytes again; a last frame short of
    // a resampler's 20 ms stays in it.
    let expected = pcm.len() / 640 * 960;
    let arrived = timeout(WAIT, async {
        while upstream.appends().iter().sum::<usize>() < expected {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let appends = upstream.appends();
    assert!(arrived.is_ok(), "{appends:?}");
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
    (pcm.len() / 640, appends)
}

#[tokio::test]
async fn microphone_frames_reach_openai_gathered_into_chunks() {
    let (frames, appends) = appends_with_chunks_of(20).await;
    assert_eq!(appends.len(), frames, "one append per 20 ms frame");
    assert!(appends.iter().all(|&len| len == 960), "{appends:?}");
    let (frames, appends) = appends_with_chunks_of(40).await;
    assert_eq!(
        appends.len(),
        frames.div_ceil(2),
        "one append per two frames"
    );
    let (last, whole) = appends.split_last().expect("audio arrived");
    assert!(whole.iter().all(|&len| len == 1920), "{appends:?}");
    assert!(*last <= 1920);
}

/// Reconnecting to a session whose history holds a tool call seeds it as OpenAI takes it (the
/// `function_call` item before its `function_call_output`): the next turn is answered, with no
/// error.
#[tokio::test]
async fn a_session_whose_history_holds_a_tool_call_reconnects() {
    let upstream = mock(instant()).await;
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("what time is it in Tokyo").await;
    let events = client.events_until_turn_complete().await;
    assert!(events.iter().any(|e| has_part(e, "functionResponse")));
    client.close().await;
    timeout(WAIT, server.gateway().registry.idle())
        .await
        .unwrap();
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello again").await;
    let events = client.events_until_turn_complete().await;
    assert!(
        events.iter().all(|e| e.get("errorCode").is_none()),
        "{events:#?}"
    );
    assert!(events
        .iter()
        .any(|e| e["partial"] == false && text_of(e).contains("hello again")));
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}
