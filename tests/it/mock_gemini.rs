//! `livegate mock-gemini` over real sockets: a Gemini Live client's view of setup, text and audio
//! turns, tools, history, resumption, the key check, the fault switches, TLS and shutdown.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use crate::common::{fixture_pcm, silence, WAIT};
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use base64::Engine;
use futures::{SinkExt, StreamExt};
use livegate::model::sim::SimConfig;
use livegate_mock::gemini::{self as mockgemini, MockGemini, MockGeminiConfig, TlsFiles};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

const PATH: &str = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent";
const MODEL: &str = "models/gemini-2.5-flash-native-audio-preview-12-2025";

/// Starts a server. Tests hang up before shutting it down: a client that has stopped reading never
/// answers the server's close frame, so the server would wait out its close grace for each one.
async fn start(config: MockGeminiConfig) -> MockGemini {
    mockgemini::start("127.0.0.1:0".parse().expect("address"), config)
        .await
        .expect("mock-gemini starts")
}

fn instant() -> MockGeminiConfig {
    MockGeminiConfig {
        sim: SimConfig::instant(),
        ..MockGeminiConfig::default()
    }
}

/// One server frame.
#[derive(Debug)]
enum Frame {
    /// A JSON message, and whether it came in a binary frame.
    Json(Value, bool),
    /// The close frame's code and reason (`None` if the socket just ended).
    Closed(Option<(u16, String)>),
}

/// A Gemini Live client over any stream (plain TCP or TLS).
struct Gemini<S> {
    ws: WebSocketStream<S>,
}

impl Gemini<TcpStream> {
    /// Connects to `path_and_query` with extra headers.
    async fn connect_with(
        addr: SocketAddr,
        path_and_query: &str,
        headers: &[(&str, &str)],
    ) -> Self {
        let mut request = format!("ws://{addr}{path_and_query}")
            .into_client_request()
            .expect("request");
        for (name, value) in headers {
            let name = HeaderName::from_bytes(name.as_bytes()).expect("header name");
            let value = HeaderValue::from_str(value).expect("header value");
            request.headers_mut().insert(name, value);
        }
        let tcp = timeout(WAIT, TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("tcp connects");
        let (ws, _) = timeout(WAIT, tokio_tungstenite::client_async(request, tcp))
            .await
            .expect("upgrade in time")
            .expect("websocket upgrade");
        Gemini { ws }
    }

    async fn connect(addr: SocketAddr) -> Self {
        Self::connect_with(addr, PATH, &[]).await
    }

    /// Connects and sends `setup`, expecting `setupComplete`.
    async fn set_up(addr: SocketAddr, setup: Value) -> Self {
        let mut gemini = Self::connect(addr).await;
        gemini.send(json!({ "setup": setup })).await;
        assert_eq!(gemini.next_json().await, json!({"setupComplete": {}}));
        gemini
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Gemini<S> {
    async fn send(&mut self, message: Value) {
        timeout(
            WAIT,
            self.ws.send(Message::Text(message.to_string().into())),
        )
        .await
        .expect("send in time")
        .expect("send");
    }

    async fn next_frame(&mut self) -> Frame {
        loop {
            let message = timeout(WAIT, self.ws.next())
                .await
                .expect("a frame in time");
            let (data, binary) = match message {
                Some(Ok(Message::Binary(data))) => (data, true),
                Some(Ok(Message::Text(text))) => (text.into(), false),
                Some(Ok(Message::Close(frame))) => {
                    return Frame::Closed(frame.map(|f| (u16::from(f.code), f.reason.to_string())))
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return Frame::Closed(None),
            };
            let text = std::str::from_utf8(&data).expect("UTF-8 JSON");
            assert!(
                text.ends_with("}\n"),
                "pretty JSON with a newline: {text:?}"
            );
            let value: Value = serde_json::from_str(text).expect("JSON");
            let pretty = serde_json::to_string_pretty(&value).expect("pretty") + "\n";
            assert_eq!(text, pretty, "pretty-printed with a 2-space indent");
            return Frame::Json(value, binary);
        }
    }

    async fn next_json(&mut self) -> Value {
        match self.next_frame().await {
            Frame::Json(value, _) => value,
            Frame::Closed(close) => panic!("closed while waiting for a message: {close:?}"),
        }
    }

    /// Messages up to and including the one with `turnComplete`.
    async fn turn(&mut self) -> Vec<Value> {
        let mut messages = Vec::new();
        loop {
            let message = self.next_json().await;
            let done = message["serverContent"]["turnComplete"] == true;
            messages.push(message);
            if done {
                return messages;
            }
        }
    }

    /// The close code and reason, skipping any messages before it.
    async fn closed(&mut self) -> (u16, String) {
        loop {
            match self.next_frame().await {
                Frame::Json(..) => continue,
                Frame::Closed(Some(close)) => return close,
                Frame::Closed(None) => panic!("socket ended without a close frame"),
            }
        }
    }

    async fn say(&mut self, text: &str) {
        self.send(json!({"clientContent": {
            "turns": [{"role": "user", "parts": [{"text": text}]}],
            "turnComplete": true,
        }}))
        .await;
    }
}

fn text_of(messages: &[Value]) -> String {
    parts(messages)
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect()
}

fn parts(messages: &[Value]) -> impl Iterator<Item = &Value> {
    messages.iter().flat_map(|m| {
        m["serverContent"]["modelTurn"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
    })
}

fn audio_bytes(messages: &[Value]) -> usize {
    parts(messages)
        .filter_map(|p| p["inlineData"]["data"].as_str())
        .map(|data| STANDARD.decode(data).expect("standard base64").len())
        .sum()
}

fn transcript(messages: &[Value], key: &str) -> String {
    messages
        .iter()
        .filter_map(|m| m["serverContent"][key]["text"].as_str())
        .collect()
}

/// hello.wav and a second of silence, as 100 ms chunks.
fn hello_chunks() -> Vec<Vec<u8>> {
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    pcm.chunks(3200).map(<[u8]>::to_vec).collect()
}

#[tokio::test]
async fn setup_complete_is_a_binary_frame_of_pretty_json() {
    let server = start(instant()).await;
    let mut gemini = Gemini::connect(server.addr).await;
    gemini.send(json!({"setup": {"model": MODEL}})).await;
    let raw = timeout(WAIT, gemini.ws.next()).await.expect("in time");
    match raw {
        Some(Ok(Message::Binary(data))) => {
            assert_eq!(&data[..], b"{\n  \"setupComplete\": {}\n}\n");
        }
        other => panic!("expected a binary setupComplete, got {other:?}"),
    }
    drop(gemini);
    server.shutdown().await;
}

#[tokio::test]
async fn text_frames_switch_sends_text_frames() {
    let server = start(MockGeminiConfig {
        text_frames: true,
        ..instant()
    })
    .await;
    let mut gemini = Gemini::connect(server.addr).await;
    gemini.send(json!({"setup": {"model": MODEL}})).await;
    match gemini.next_frame().await {
        Frame::Json(value, false) => assert_eq!(value, json!({"setupComplete": {}})),
        other => panic!("expected a text setupComplete, got {other:?}"),
    }
    drop(gemini);
    server.shutdown().await;
}

#[tokio::test]
async fn text_turn_streams_model_turn_then_turn_complete_with_usage() {
    let server = start(instant()).await;
    let setup = json!({"model": MODEL, "generationConfig": {"responseModalities": ["TEXT"]}});
    let mut gemini = Gemini::set_up(server.addr, setup).await;
    gemini.say("hello").await;
    let turn = gemini.turn().await;
    assert_eq!(
        text_of(&turn),
        "Hello! I'm the livegate simulator. You said: \"hello\"."
    );
    assert!(turn
        .iter()
        .filter(|m| m["serverContent"].get("modelTurn").is_some())
        .all(|m| m["serverContent"]["modelTurn"].get("role").is_none()));
    let last = turn.last().expect("turnComplete");
    let usage = &last["usageMetadata"];
    assert!(usage["promptTokenCount"].as_u64() > Some(0), "{last}");
    assert!(usage["responseTokenCount"].as_u64() > Some(0), "{last}");
    assert!(usage.get("candidatesTokenCount").is_none(), "{last}");
    let generation = turn
        .iter()
        .position(|m| m["serverContent"]["generationComplete"] == true);
    assert!(
        generation.is_some_and(|g| g < turn.len() - 1),
        "generationComplete first"
    );
    drop(gemini);
    server.shutdown().await;
}

#[tokio::test]
async fn audio_turn_is_transcribed_and_answered_with_speech() {
    let server = start(instant()).await;
    let setup = json!({
        "model": MODEL,
        "generationConfig": {"responseModalities": ["AUDIO"]},
        "inputAudioTranscription": {},
        "outputAudioTranscription": {},
    });
    let mut gemini = Gemini::set_up(server.addr, setup).await;
    for chunk in hello_chunks() {
        gemini
            .send(json!({"realtimeInput": {"audio": {
                "data": STANDARD.encode(&chunk), "mimeType": "audio/pcm;rate=16000",
            }}}))
            .await;
    }
    let turn = gemini.turn().await;
    let heard = turn
        .iter()
        .position(|m| m["serverContent"].get("inputTranscription").is_some())
        .expect("an input transcription");
    let spoken = turn
        .iter()
        .position(|m| m["serverContent"].get("modelTurn").is_some())
        .expect("an audio answer");
    assert!(heard < spoken, "the user is transcribed before the answer");
    assert!(transcript(&turn, "inputTranscription").starts_with("[speech"));
    assert!(transcript(&turn, "outputTranscription").starts_with("You said something for"));
    let mime = parts(&turn).find_map(|p| p["inlineData"]["mimeType"].as_str());
    assert_eq!(mime, Some("audio/pcm;rate=24000"));
    // A voice echo of the utterance at 24 kHz: 1.5 times its bytes at 16 kHz, and less than the
    // whole clip with its trailing silence.
    let clip = fixture_pcm("hello.wav").len();
    let answer = audio_bytes(&turn);
    assert!(
        answer > clip && answer < clip * 2,
        "{answer} bytes for {clip}"
    );
    assert!(turn.last().expect("last")["usageMetadata"].is_object());
    drop(gemini);
    server.shutdown().await;
}

#[tokio::test]
async fn python_genai_snake_case_url_safe_base64_and_double_slash() {
    let server = start(MockGeminiConfig {
        api_key: Some("test-key".into()),
        ..instant()
    })
    .await;
    let path = format!("/{PATH}");
    let mut gemini =
        Gemini::connect_with(server.addr, &path, &[("x-goog-api-key", "test-key")]).await;
    // What python-genai sends, with snake_case keys inside.
    gemini
        .send(json!({"setup": {
            "model": MODEL,
            "generationConfig": {"responseModalities": ["AUDIO"],
                "speechConfig": {"voice_config": {"prebuilt_voice_config": {"voice_name": "Puck"}}}},
            "input_audio_transcription": {},
            "outputAudioTranscription": {},
            "realtimeInputConfig": {"automatic_activity_detection": {"disabled": false},
                "activity_handling": "START_OF_ACTIVITY_INTERRUPTS"},
            "contextWindowCompression": {"trigger_tokens": "25600", "sliding_window": {"target_tokens": 12800}},
        }}))
        .await;
    assert_eq!(gemini.next_json().await, json!({"setupComplete": {}}));
    let mut url_safe = false;
    for chunk in hello_chunks() {
        let data = URL_SAFE.encode(&chunk);
        url_safe |= data.contains(['-', '_']);
        gemini
            .send(json!({"realtime_input": {"audio": {"data": data, "mime_type": "audio/pcm;rate=16000"}}}))
            .await;
    }
    assert!(url_safe, "the audio used the URL-safe alphabet");
    gemini
        .send(json!({"realtime_input": {"audioStreamEnd": true}}))
        .await;
    let turn = gemini.turn().await;
    assert!(!transcript(&turn, "inputTranscription").is_empty());
    assert!(audio_bytes(&turn) > 0);
    drop(gemini);
    server.shutdown().await;
}

#[tokio::test]
async fn media_chunks_and_the_vertex_path_work() {
    let server = start(instant()).await;
    let path = "//ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent";
    let mut gemini = Gemini::connect_with(server.addr, path, &[]).await;
    gemini
        .send(json!({"setup": {
            "model": "projects/p/locations/us-central1/publishers/google/models/gemini-live-2.5-flash-native-audio",
            "inputAudioTranscription": {},
        }}))
        .await;
    let complete = gemini.next_json().await;
    assert!(
        complete["setupComplete"]["sessionId"].is_string(),
        "{complete}"
    );
    for chunk in hello_chunks() {
        gemini
            .send(json!({"realtimeInput": {"mediaChunks": [
                {"data": STANDARD.encode(&chunk), "mimeType": "audio/pcm;rate=16000"},
            ]}}))
            .await;
    }
    let turn = gemini.turn().await;
    assert!(!transcript(&turn, "inputTranscription").is_empty());
    assert!(audio_bytes(&turn) > 0);
    let usage = &turn.last().expect("last")["usageMetadata"];
    assert!(
        usage["candidatesTokenCount"].as_u64() > Some(0),
        "Vertex names: {usage}"
    );
    drop(gemini);
    server.shutdown().await;
}

#[tokio::test]
async fn tool_call_round_trip_with_gemini_ids() {
    let server = start(instant()).await;
    let setup = json!({
        "model": MODEL,
        "generationConfig": {"responseModalities": ["TEXT"]},
        "tools": [{"functionDeclarations": [{"name": "get_current_time", "description": "The time",
            "parameters": {"type": "OBJECT", "properties": {"timezone": {"type": "STRING"}}}}]}],
    });
    let mut gemini = Gemini::set_up(server.addr, setup).await;
    gemini.say("what time is it").await;
    let call = gemini.next_json().await;
    let calls = call["toolCall"]["functionCalls"]
        .as_array()
        .expect("a toolCall");
    let id = calls[0]["id"].as_str().expect("an id").to_owned();
    assert!(id.starts_with("function-call-"), "{id}");
    assert_eq!(calls[0]["name"], "get_current_time");
    gemini
        .send(json!({"tool_response": {"function_responses": [
            {"id": id, "name": "get_current_time", "response": {"time": "12:34", "weekday": "Monday",
                "date": "2026-01-05", "timezone": "UTC"}},
        ]}}))
        .await;
    let turn = gemini.turn().await;
    assert_eq!(text_of(&turn), "It's 12:34 on Monday, 2026-01-05 in UTC.");
    // An id the server never gave out ends the session.
    gemini
        .send(json!({"toolResponse": {"functionResponses": [
            {"id": "function-call-1", "name": "get_current_time", "response": {}},
        ]}}))
        .await;
    assert_eq!(gemini.closed().await.0, 1007);
    drop(gemini);
    server.shutdown().await;
}

#[tokio::test]
async fn barge_in_interrupts_then_completes_the_turn() {
    // Real-time pacing, so the answer is still being spoken when the next turn arrives.
    let server = start(MockGeminiConfig {
        sim: SimConfig {
            reply_delay: std::time::Duration::ZERO,
            ..SimConfig::default()
        },
        ..MockGeminiConfig::default()
    })
    .await;
    let setup = json!({"model": MODEL, "outputAudioTranscription": {}});
    let mut gemini = Gemini::set_up(server.addr, setup).await;
    gemini.say("hello").await;
    loop {
        let message = gemini.next_json().await;
        if message["serverContent"].get("modelTurn").is_some() {
            break;
        }
    }
    gemini.say("stop, I meant something else").await;
    let cut = gemini.turn().await;
    let [.., interrupted, complete] = &cut[..] else {
        panic!("too few messages: {cut:?}");
    };
    assert_eq!(
        interrupted,
        &json!({"serverContent": {"interrupted": true}})
    );
    assert_eq!(complete["serverContent"], json!({"turnComplete": true}));
    assert!(
        complete["usageMetadata"]["totalTokenCount"].as_u64() > Some(0),
        "the interrupted turn reports its usage: {complete}"
    );
    assert!(cut
        .iter()
        .all(|m| m["serverContent"].get("generationComplete").is_none()));
    // The answer to the new turn follows.
    let next = gemini.next_json().await;
    assert!(
        next["serverContent"].get("modelTurn").is_some()
            || next["serverContent"].get("outputTranscription").is_some(),
        "{next}"
    );
    drop(gemini);
    server.shutdown().await;
}

#[tokio::test]
async fn leading_client_content_becomes_history() {
    let server = start(instant()).await;
    let setup = json!({"model": MODEL, "generationConfig": {"responseModalities": ["TEXT"]}});
    let mut fresh = Gemini::set_up(server.addr, setup.clone()).await;
    fresh.say("hello").await;
    let fresh_turn = fresh.turn().await;
    let mut seeded = Gemini::set_up(server.addr, setup).await;
    seeded
        .send(json!({"clientContent": {"turns": [
            {"role": "user", "parts": [{"text": "My name is Ada and I like long conversations."}]},
            {"role": "model", "parts": [{"text": "Nice to meet you, Ada."}]},
        ], "turnComplete": false}}))
        .await;
    seeded.say("hello").await;
    let seeded_turn = seeded.turn().await;
    // Same answer, but the prompt re-reads the history.
    assert_eq!(text_of(&seeded_turn), text_of(&fresh_turn));
    let prompt =
        |turn: &[Value]| turn.last().expect("last")["usageMetadata"]["promptTokenCount"].as_u64();
    assert!(
        prompt(&seeded_turn) > prompt(&fresh_turn),
        "{:?} vs {:?}",
        prompt(&seeded_turn),
        prompt(&fresh_turn)
    );
    drop(fresh);
    drop(seeded);
    server.shutdown().await;
}

#[tokio::test]
async fn the_key_is_checked_in_every_accepted_place() {
    let server = start(MockGeminiConfig {
        api_key: Some("test-key".into()),
        ..instant()
    })
    .await;
    let bad = [
        (format!("{PATH}?key=wrong"), vec![]),
        (PATH.to_owned(), vec![]),
        (PATH.to_owned(), vec![("authorization", "Bearer wrong")]),
    ];
    for (path, headers) in bad {
        let mut gemini = Gemini::connect_with(server.addr, &path, &headers).await;
        let (code, reason) = gemini.closed().await;
        assert_eq!(code, 1007, "{path} {headers:?}");
        assert_eq!(reason, "API key not valid. Please pass a valid API key.");
    }
    let good = [
        (format!("{PATH}?key=test-key"), vec![]),
        (format!("{PATH}?access_token=test-key"), vec![]),
        (PATH.to_owned(), vec![("x-goog-api-key", "test-key")]),
        (PATH.to_owned(), vec![("authorization", "Token test-key")]),
        (PATH.to_owned(), vec![("authorization", "Bearer test-key")]),
    ];
    for (path, headers) in good {
        let mut gemini = Gemini::connect_with(server.addr, &path, &headers).await;
        gemini.send(json!({"setup": {"model": MODEL}})).await;
        assert_eq!(
            gemini.next_json().await,
            json!({"setupComplete": {}}),
            "{path} {headers:?}"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn protocol_errors_close_with_gemini_codes() {
    let server = start(instant()).await;
    let cases = [
        (vec![json!({"clientContent": {"turnComplete": true}})], 1007),
        (vec![json!({"setup": {"model": "gemini-2.5-flash"}})], 1008),
        (
            vec![json!({"setup": {"model": MODEL}, "realtimeInput": {}})],
            1007,
        ),
        (
            vec![
                json!({"setup": {"model": MODEL}}),
                json!({"setup": {"model": MODEL}}),
            ],
            1007,
        ),
        (
            vec![
                json!({"setup": {"model": MODEL}}),
                json!({"toolResponse": {"functionResponses": [
            {"id": "x", "name": "f", "response": [1]}]}}),
            ],
            1007,
        ),
    ];
    for (messages, code) in cases {
        let mut gemini = Gemini::connect(server.addr).await;
        for message in &messages {
            gemini.send(message.clone()).await;
        }
        let (closed, reason) = gemini.closed().await;
        assert_eq!(closed, code, "{messages:?}: {reason}");
        assert!(!reason.is_empty() && reason.len() <= 123, "{reason}");
    }
    let mut gemini = Gemini::connect(server.addr).await;
    timeout(WAIT, gemini.ws.send(Message::Text("{not json".into())))
        .await
        .expect("in time")
        .expect("sent");
    assert_eq!(gemini.closed().await.0, 1007);
    drop(gemini);
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_paths_are_404() {
    let server = start(instant()).await;
    for path in [
        "/ws/u/s",
        "/ws/google.ai.generativelanguage.v1beta.GenerativeService.StreamGenerateContent",
    ] {
        let url = format!("ws://{}{path}", server.addr);
        match timeout(WAIT, tokio_tungstenite::connect_async(url))
            .await
            .expect("in time")
        {
            Err(WsError::Http(response)) => assert_eq!(response.status(), 404, "{path}"),
            other => panic!("{path}: expected HTTP 404, got {other:?}"),
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn fail_after_closes_with_1011() {
    let server = start(MockGeminiConfig {
        fail_after: Some(2),
        ..instant()
    })
    .await;
    let setup = json!({"model": MODEL, "generationConfig": {"responseModalities": ["TEXT"]}});
    let mut gemini = Gemini::set_up(server.addr, setup).await;
    gemini.say("hello").await;
    assert!(matches!(gemini.next_frame().await, Frame::Json(..)));
    assert!(matches!(gemini.next_frame().await, Frame::Json(..)));
    match gemini.next_frame().await {
        Frame::Closed(Some((code, _))) => assert_eq!(code, 1011),
        other => panic!("expected a 1011 close after two messages, got {other:?}"),
    }
    drop(gemini);
    server.shutdown().await;
}

#[tokio::test]
async fn go_away_after_sends_go_away_then_closes_normally() {
    let server = start(MockGeminiConfig {
        go_away_after: Some(1),
        ..instant()
    })
    .await;
    let setup = json!({"model": MODEL, "generationConfig": {"responseModalities": ["TEXT"]}});
    let mut gemini = Gemini::set_up(server.addr, setup).await;
    gemini.say("hello").await;
    let first = gemini.next_json().await;
    assert!(first.get("goAway").is_none(), "{first}");
    assert_eq!(
        gemini.next_json().await,
        json!({"goAway": {"timeLeft": "1s"}})
    );
    // The session goes on until the connection closes, a second later.
    assert_eq!(gemini.closed().await.0, 1000);
    drop(gemini);
    server.shutdown().await;
}

#[tokio::test]
async fn silent_after_holds_the_connection_and_answers_nothing_not_even_pings() {
    let server = start(MockGeminiConfig {
        silent_after: Some(1),
        ..instant()
    })
    .await;
    let setup = json!({"model": MODEL, "generationConfig": {"responseModalities": ["TEXT"]}});
    let mut gemini = Gemini::set_up(server.addr, setup).await;
    gemini.say("hello").await;
    assert!(matches!(gemini.next_frame().await, Frame::Json(..)));
    gemini
        .ws
        .send(Message::Ping(b"are you there".to_vec().into()))
        .await
        .unwrap();
    // A connected peer that answers nothing: no more of the answer, no pong, no close.
    let heard = timeout(std::time::Duration::from_secs(1), gemini.ws.next()).await;
    assert!(heard.is_err(), "the silent mock sent {heard:?}");
    drop(gemini);
    server.shutdown().await;
}

#[tokio::test]
async fn resumption_handles_resume_the_session() {
    let server = start(instant()).await;
    let setup = json!({
        "model": MODEL,
        "generationConfig": {"responseModalities": ["TEXT"]},
        "sessionResumption": {},
    });
    let mut first = Gemini::set_up(server.addr, setup).await;
    first.say("hello").await;
    first.turn().await;
    let update = first.next_json().await;
    let handle = update["sessionResumptionUpdate"]["newHandle"]
        .as_str()
        .expect("a handle")
        .to_owned();
    assert_eq!(update["sessionResumptionUpdate"]["resumable"], true);
    assert!(
        handle.starts_with("sim-") && handle.ends_with("-1"),
        "{handle}"
    );
    drop(first);

    let resume = json!({
        "model": MODEL,
        "generationConfig": {"responseModalities": ["TEXT"]},
        "sessionResumption": {"handle": handle},
    });
    let mut second = Gemini::set_up(server.addr, resume).await;
    second.say("again").await;
    second.turn().await;
    let update = second.next_json().await;
    let next = update["sessionResumptionUpdate"]["newHandle"]
        .as_str()
        .expect("a handle");
    // The same session, continued: its handle numbering goes on.
    assert_eq!(next, format!("{}-2", handle.trim_end_matches("-1")));
    drop(second);
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_closes_open_connections_with_1001() {
    let server = start(instant()).await;
    let mut gemini = Gemini::set_up(server.addr, json!({"model": MODEL})).await;
    let (closed, ()) = tokio::join!(gemini.closed(), server.shutdown());
    assert_eq!(closed.0, 1001);
}

#[tokio::test]
async fn a_client_close_is_answered_with_a_close_frame() {
    let server = start(instant()).await;
    let mut gemini = Gemini::set_up(server.addr, json!({"model": MODEL})).await;
    timeout(WAIT, gemini.ws.close(None))
        .await
        .expect("close sent in time")
        .expect("close sent");
    // The handshake completes with the server's answering close, not a reset, which clients
    // log as a failed connection.
    let answer = timeout(WAIT, gemini.ws.next())
        .await
        .expect("an answer in time");
    assert!(
        matches!(answer, Some(Ok(Message::Close(_)))),
        "answered with a close frame: {answer:?}"
    );
    server.shutdown().await;
}

fn tls_fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

#[tokio::test]
async fn tls_serves_wss() {
    let server = start(MockGeminiConfig {
        tls: Some(TlsFiles {
            cert: tls_fixture("cert.pem"),
            key: tls_fixture("key.pem"),
        }),
        ..instant()
    })
    .await;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(tls_fixture("cert.pem")).expect("cert file") {
        roots.add(cert.expect("cert")).expect("root");
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocols")
            .with_root_certificates(roots)
            .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(server.addr).await.expect("tcp connects");
    let name = ServerName::IpAddress(server.addr.ip().into());
    let tls = timeout(WAIT, connector.connect(name, tcp))
        .await
        .expect("handshake in time")
        .expect("handshake");
    let url = format!("wss://{}{PATH}", server.addr);
    let (ws, _) = timeout(WAIT, tokio_tungstenite::client_async(url, tls))
        .await
        .expect("upgrade in time")
        .expect("upgrade");
    let mut gemini = Gemini { ws };
    gemini.send(json!({"setup": {"model": MODEL}})).await;
    assert_eq!(gemini.next_json().await, json!({"setupComplete": {}}));
    gemini.say("hello").await;
    assert!(!gemini.turn().await.is_empty());
    // A plain-text client gets no WebSocket from a TLS server.
    let plain = format!("ws://{}{PATH}", server.addr);
    assert!(timeout(WAIT, tokio_tungstenite::connect_async(plain))
        .await
        .expect("in time")
        .is_err());
    drop(gemini);
    server.shutdown().await;
}

/// A `livegate` child started with `args`, with the model keys of `env` and no others (a blank
/// key counts as none); it and its address.
async fn spawn_gateway(
    env: &[(String, String)],
    args: &[String],
) -> (crate::common::process::Process, SocketAddr) {
    use crate::common::process;
    let mut envs: Vec<(&str, &str)> = vec![("GOOGLE_API_KEY", ""), ("GEMINI_API_KEY", "")];
    envs.extend(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
    argv.extend([
        "--bind",
        "127.0.0.1:0",
        "--session-store",
        "memory:",
        "--artifact-store",
        "memory:",
        "--log-format",
        "text",
    ]);
    let (child, line) = process::spawn(&argv, &envs, "listening on").await;
    (child, process::listening_addr(&line))
}

#[tokio::test]
async fn the_models_guide_example_works_as_written() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/MODELS.md"))
        .expect("docs/MODELS.md");
    let section = doc
        .split("### `livegate mock-gemini`")
        .nth(1)
        .expect("the mock-gemini section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("its example");
    let mut lines = block.lines();
    let mock: Vec<&str> = lines
        .next()
        .expect("the mock's command")
        .trim_end_matches('&')
        .split_whitespace()
        .collect();
    assert_eq!(&mock[..2], ["livegate", "mock-gemini"]);
    let key = mock
        .windows(2)
        .find(|w| w[0] == "--api-key")
        .map(|w| w[1].to_owned());
    assert!(key.is_some(), "the example's mock checks a key");
    let server = start(MockGeminiConfig {
        api_key: key,
        ..instant()
    })
    .await;
    let gateway: Vec<&str> = lines
        .next()
        .expect("the gateway's command")
        .split_whitespace()
        .collect();
    let at = gateway
        .iter()
        .position(|w| *w == "livegate")
        .expect("livegate");
    let env: Vec<(String, String)> = gateway[..at]
        .iter()
        .map(|w| w.split_once('=').expect("VAR=value"))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let args: Vec<String> = gateway[at + 1..]
        .iter()
        .map(|w| w.replace("127.0.0.1:9300", &server.addr.to_string()))
        .collect();
    let (child, addr) = spawn_gateway(&env, &args).await;
    let mut client = crate::common::Client::connect(addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello").await;
    let events = client.events_until_turn_complete().await;
    assert!(
        events.iter().all(|e| e["errorCode"].is_null()),
        "the turn is answered, not refused: {events:?}"
    );
    assert!(events.iter().any(|e| !crate::common::text_of(e).is_empty()));
    client.close().await;
    crate::common::process::output_of(child).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_model_without_its_key_is_warned_about_at_start() {
    let model = "gemini-2.5-flash-native-audio-preview-12-2025".to_owned();
    let args = ["--model".to_owned(), model];
    let (child, _) = spawn_gateway(&[], &args).await;
    let log = crate::common::process::output_of(child).await.stderr;
    let warned = log
        .lines()
        .find(|line| line.contains("WARN") && line.contains("GEMINI_API_KEY"))
        .unwrap_or_else(|| panic!("no warning in {log}"));
    assert!(warned.contains("needs a key"), "{warned}");
}
