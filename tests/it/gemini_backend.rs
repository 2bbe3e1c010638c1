//! The gateway on the `gemini` backend against `livegate mock-gemini` over a real socket: the same
//! scenarios as on the in-process `sim`, plus tool calls, goAway, upstream failures, and the key.

use std::time::Duration;

use crate::common::process::{listening_addr, output_of, spawn};
use crate::common::*;
use livegate::gateway::ServeArgs;
use livegate::model::sim::{Pacing, SimConfig};
use livegate_mock::gemini::{self as mockgemini, MockGemini, MockGeminiConfig};
use serde_json::Value;
use tokio::time::timeout;

const MODEL: &str = "gemini-2.5-flash-native-audio-preview-12-2025";

async fn mock(config: MockGeminiConfig) -> MockGemini {
    mockgemini::start("127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("mock-gemini starts")
}

fn instant() -> MockGeminiConfig {
    MockGeminiConfig {
        sim: SimConfig::instant(),
        ..MockGeminiConfig::default()
    }
}

fn gateway_args(mock: &MockGemini) -> ServeArgs {
    let mut args = test_args();
    args.model = MODEL.into();
    args.gemini_base_url = format!("ws://{}", mock.addr);
    args
}

fn has_part(e: &Value, kind: &str) -> bool {
    e["content"]["parts"]
        .as_array()
        .is_some_and(|parts| parts.iter().any(|p| p.get(kind).is_some()))
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
    assert!(events.iter().all(|e| e.get("errorCode").is_none()));
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn an_audio_turn_is_transcribed_answered_and_recorded() {
    audio_turn_round_trip(instant()).await;
}

#[tokio::test]
async fn answer_messages_many_times_the_read_buffer_arrive_whole() {
    // One second of 24 kHz audio per message: about 64 KB of JSON against the backend's 8 KiB
    // socket reads.
    let mut config = instant();
    config.sim.chunk_ms = 1000;
    audio_turn_round_trip(config).await;
}

/// Speaks a clip through the gateway to `config`'s mock and checks it is heard, answered in
/// full, and recorded both ways.
async fn audio_turn_round_trip(config: MockGeminiConfig) {
    let upstream = mock(config).await;
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
    let clip_samples = fixture_pcm("hello.wav").len() / 2;
    assert!(
        client.audio_bytes / 2 >= clip_samples,
        "the echo came through"
    );
    let received = client.audio_bytes;
    client.close().await;

    let recorded = recorded_audio(&server, "u1", "s1").await;
    assert_eq!(recorded, (pcm.len(), received));
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn speaking_over_the_answer_interrupts_it() {
    let upstream = mock(MockGeminiConfig {
        sim: SimConfig {
            pacing: Pacing::RealTime,
            reply_delay: Duration::ZERO,
            ..SimConfig::default()
        },
        ..MockGeminiConfig::default()
    })
    .await;
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    client
        .send_text("tell me a long story about a lighthouse keeper please")
        .await;
    while !matches!(client.next_frame().await, Frame::Audio(_)) {}
    let mut pcm = fixture_pcm("interrupt.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    client.frames_until(|e| e["interrupted"] == true).await;
    // Gemini ends the interrupted turn; nothing of that answer plays before the user is heard.
    let before = client
        .frames_until(|e| e.get("inputTranscription").is_some())
        .await;
    assert!(
        !before.iter().any(|f| matches!(f, Frame::Audio(_))),
        "no audio of the interrupted answer after `interrupted`"
    );
    let answer = client.frames_until(is_turn_complete).await;
    assert!(
        answer.iter().any(|f| matches!(f, Frame::Audio(_))),
        "the barge-in is answered"
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
        function_call["id"]
            .as_str()
            .unwrap()
            .starts_with("function-call-"),
        "Gemini's call id is kept"
    );
    let result = &events[response]["content"]["parts"][0]["functionResponse"]["response"];
    let answer = events
        .iter()
        .rposition(|e| e["partial"] == false && !text_of(e).is_empty())
        .expect("an answer");
    assert!(call < response && response < answer);
    assert!(text_of(&events[answer]).contains(result["time"].as_str().unwrap()));
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn go_away_reconnects_with_the_handle_and_the_conversation_goes_on() {
    let upstream = mock(MockGeminiConfig {
        go_away_after: Some(12),
        ..instant()
    })
    .await;
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    let mut handles = Vec::new();
    for text in ["first question", "second question", "third question"] {
        client.send_text(text).await;
        let events = client.events_until_turn_complete().await;
        assert!(
            events.iter().any(|e| text_of(e).contains(text)),
            "{events:#?}"
        );
        // The resumption update follows the turn.
        let update = client
            .frames_until(|e| e.get("liveSessionResumptionUpdate").is_some())
            .await;
        if let Some(Frame::Event(e)) = update.last() {
            handles.push(
                e["liveSessionResumptionUpdate"]["newHandle"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
    }
    assert!(
        upstream.connections() >= 2,
        "goAway made the gateway reconnect ({} connections)",
        upstream.connections()
    );
    assert!(
        client.events.iter().all(|e| e.get("errorCode").is_none()),
        "the reconnects are transparent"
    );
    // ... but counted. The gateway counts an attempt before the mock sees it, so a reconnect
    // under way may be counted already, never the other way round.
    let metrics = http_get(server.addr, "/metrics").await;
    let reconnects = metric(&metrics, "livegate_upstream_reconnects_total").unwrap_or(0.0);
    assert!(
        reconnects >= 1.0 && reconnects >= (upstream.connections() - 1) as f64,
        "{reconnects} reconnects counted for {} connections",
        upstream.connections()
    );
    // Handles keep counting across connections: the resumed session is the same one.
    let counts: Vec<u64> = handles
        .iter()
        .map(|h| h.rsplit('-').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(counts, vec![1, 2, 3], "{handles:?}");
    assert_eq!(
        handles
            .iter()
            .map(|h| h.rsplit_once('-').unwrap().0)
            .collect::<std::collections::HashSet<_>>()
            .len(),
        1
    );
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn an_upstream_1011_is_an_error_event_then_the_end() {
    let upstream = mock(MockGeminiConfig {
        fail_after: Some(2),
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
    assert!(error["errorMessage"].as_str().unwrap().contains("1011"));
    let metrics = http_get(server.addr, "/metrics").await;
    let internal = r#"livegate_errors_total{code="INTERNAL"}"#;
    assert_eq!(metric(&metrics, internal), Some(1.0), "{metrics}");
    // The run is over: the gateway closes the socket, without reconnecting (there is no handle).
    loop {
        if let Frame::Closed(_) = client.next_frame().await {
            break;
        }
    }
    assert_eq!(upstream.connections(), 1);
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn the_api_key_reaches_the_model_and_never_the_logs() {
    const KEY: &str = "AIzaTEST-do-not-log-4242";
    // The mock in process (its own binary's logs are tools/mock's test): the gateway's side.
    let upstream = mock(MockGeminiConfig {
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
            "--gemini-base-url",
            &base,
        ],
        &[("GEMINI_API_KEY", KEY)],
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
    let gateway = output_of(gateway_process).await;
    upstream.shutdown().await;
    // Logs on stderr, plain text when it is not a terminal; stdout only says where it listens.
    assert!(gateway.stderr.contains("DEBUG"), "{}", gateway.stderr);
    assert!(
        !gateway.stderr.contains('\u{1b}'),
        "ANSI codes in a piped log"
    );
    assert!(!gateway.stdout.contains("DEBUG"), "{}", gateway.stdout);
    let logs = [gateway.stdout, gateway.stderr].concat();
    assert!(logs.contains("Gemini"), "debug logs were captured: {logs}");
    assert!(!logs.contains(KEY), "the key is in the logs");
    assert!(!sent.contains(KEY), "the key was sent to the client");
}

#[tokio::test]
async fn vertex_ai_settings_use_the_vertex_path_and_model_resource() {
    let upstream = mock(instant()).await;
    let mut args = gateway_args(&upstream);
    args.vertex_project = Some("demo-project".into());
    args.vertex_location = "europe-west4".into();
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello vertex").await;
    let events = client.events_until_turn_complete().await;
    assert!(
        events.iter().any(|e| text_of(e).contains("hello vertex")),
        "{events:#?}"
    );
    assert_eq!(
        (upstream.connections(), upstream.vertex_connections()),
        (1, 1),
        "the session went to the Vertex AI path"
    );
    // Vertex reports usage as candidates*; it arrives under ADK's names all the same.
    assert!(events
        .iter()
        .any(|e| e["usageMetadata"]["candidatesTokenCount"].is_u64()));
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

/// Frames until (and including) the first event matching `done`, each with when it arrived.
async fn timed_frames_until(
    client: &mut Client,
    done: impl Fn(&Value) -> bool,
) -> Vec<(std::time::Instant, Frame)> {
    let mut frames = Vec::new();
    loop {
        let frame = client.next_frame().await;
        let stop = matches!(&frame, Frame::Event(e) if done(e));
        if let Frame::Closed(c) = &frame {
            panic!("socket closed before the expected event: {c:?}; got {frames:?}");
        }
        frames.push((std::time::Instant::now(), frame));
        if stop {
            return frames;
        }
    }
}

/// The answer cut short ends with `interrupted`, then `turnComplete`, no later than `bound` after
/// the frame before them (the last the upstream sent).
fn assert_answer_ended(frames: &[(std::time::Instant, Frame)], bound: Duration) {
    let event = |i: usize| match &frames[i].1 {
        Frame::Event(e) => Some(e),
        _ => None,
    };
    let interrupted = (0..frames.len())
        .find(|&i| event(i).is_some_and(|e| e["interrupted"] == true))
        .unwrap_or_else(|| panic!("no interrupted: {frames:?}"));
    let complete = (interrupted..frames.len())
        .find(|&i| event(i).is_some_and(is_turn_complete))
        .unwrap_or_else(|| panic!("no turnComplete after interrupted: {frames:?}"));
    assert!(interrupted > 0, "something of the answer came first");
    let waited = frames[complete].0 - frames[interrupted - 1].0;
    assert!(
        waited <= bound,
        "the answer ended {waited:?} after it stopped"
    );
}

#[tokio::test]
async fn an_upstream_1011_mid_answer_ends_the_answer_then_reports_the_error() {
    let upstream = mock(MockGeminiConfig {
        fail_after: Some(2),
        ..instant()
    })
    .await;
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello there, this will break").await;
    let frames = timed_frames_until(&mut client, |e| e.get("errorCode").is_some()).await;
    assert_answer_ended(&frames, Duration::from_secs(2));
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn a_go_away_mid_answer_ends_the_answer_then_the_run_reconnects() {
    // Answers at the speed of speech: the connection closes a second after its goAway, long
    // before the answer is done.
    let upstream = mock(MockGeminiConfig {
        go_away_after: Some(3),
        sim: SimConfig {
            pacing: Pacing::RealTime,
            ..SimConfig::instant()
        },
        ..MockGeminiConfig::default()
    })
    .await;
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=AUDIO").await;
    client
        .send_text("please tell me a long story about the sea and the ships on it")
        .await;
    let frames = timed_frames_until(&mut client, is_turn_complete).await;
    // The mock closes a second after its goAway; the flow waits at most two for the answer.
    assert_answer_ended(&frames, Duration::from_secs(3));
    // The run goes on over a new upstream connection.
    client.send_text("and another one").await;
    let events = client.events_until_turn_complete().await;
    assert!(
        events.iter().all(|e| e.get("errorCode").is_none()),
        "{events:#?}"
    );
    assert!(upstream.connections() >= 2);
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn a_silent_upstream_mid_answer_is_noticed_and_the_answer_ended() {
    let upstream = mock(MockGeminiConfig {
        silent_after: Some(3),
        ..instant()
    })
    .await;
    let mut args = gateway_args(&upstream);
    args.gemini_silence_timeout = Duration::from_secs(1);
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello there, this will go quiet").await;
    let frames = timed_frames_until(&mut client, |e| e.get("errorCode").is_some()).await;
    // Noticed after the silence timeout, ended at once.
    assert_answer_ended(&frames, Duration::from_secs(3));
    let Some((_, Frame::Event(error))) = frames.last() else {
        unreachable!()
    };
    assert_eq!(error["errorCode"], "UNAVAILABLE", "{error}");
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn the_gemini_client_answers_the_servers_close_frame() {
    use futures::{SinkExt, StreamExt};
    use livegate::model::gemini::{GeminiModel, GeminiOptions};
    use livegate::model::{LiveConnectConfig, LiveModel, ModelError};
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    use tokio_tungstenite::tungstenite::Message;

    // A server that completes the setup, then closes with 1011 and reads the client's answer.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        let _setup = ws.next().await;
        ws.send(Message::Text(r#"{"setupComplete":{}}"#.into()))
            .await
            .unwrap();
        ws.send(Message::Close(Some(CloseFrame {
            code: CloseCode::Error,
            reason: "boom".into(),
        })))
        .await
        .unwrap();
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                // No answer: the client just dropped the connection.
                Some(Err(_)) | None => return None,
            }
        }
    });
    let options = GeminiOptions {
        base_url: format!("ws://{addr}"),
        ..GeminiOptions::default()
    };
    let model = GeminiModel::new(MODEL, options);
    let mut connection = model
        .connect(LiveConnectConfig::default())
        .await
        .expect("connects");
    let error = timeout(WAIT, connection.receiver.recv()).await.unwrap();
    assert!(
        matches!(error, Some(Err(ModelError::Closed { code: 1011, .. }))),
        "{error:?}"
    );
    let answered = timeout(WAIT, server).await.unwrap().unwrap();
    assert_eq!(answered, Some(1011), "the close frame was echoed");
}

#[tokio::test]
async fn a_blackholed_upstream_times_out_connecting() {
    // Accepts TCP connections and never answers the WebSocket handshake.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    let mut args = test_args();
    args.model = MODEL.into();
    args.gemini_base_url = format!("ws://{addr}");
    args.gemini_connect_timeout = Duration::from_millis(500);
    let server = start(args).await;
    let started = std::time::Instant::now();
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    let error = client.next_event().await;
    assert_eq!(error["errorCode"], "UNAVAILABLE", "{error}");
    assert!(
        error["errorMessage"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    server.shutdown(WAIT).await;
    held.abort();
}

#[tokio::test]
async fn live_settings_reach_the_setup_gemini_receives() {
    let upstream = mock(instant()).await;
    let mut args = gateway_args(&upstream);
    args.live.compression_trigger_tokens = Some("25600".into());
    args.live.compression_target_tokens = Some("12800".into());
    args.live.start_sensitivity = Some("low".into());
    args.live.silence_duration_ms = Some("800".into());
    args.live.proactivity = Some("true".into());
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "output_transcription=false").await;
    client
        .send_json(serde_json::json!({
            "type": "setup", "voice": "Kore", "language": "de-DE",
            "barge_in": false, "affective_dialog": true,
        }))
        .await;
    client.send_text("hallo").await;
    client.frames_until(is_turn_complete).await;
    assert!(client.events.iter().all(|e| e.get("errorCode").is_none()));
    client.close().await;
    let setups = upstream.setups();
    let setup = setups.last().expect("the mock received a setup");
    let generation = &setup["generationConfig"];
    assert_eq!(
        generation["speechConfig"],
        serde_json::json!({"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": "Kore"}}, "languageCode": "de-DE"})
    );
    assert_eq!(generation["enableAffectiveDialog"], true);
    assert_eq!(
        setup["contextWindowCompression"],
        serde_json::json!({"triggerTokens": 25600, "slidingWindow": {"targetTokens": 12800}})
    );
    assert_eq!(
        setup["realtimeInputConfig"],
        serde_json::json!({
            "automaticActivityDetection": {"startOfSpeechSensitivity": "START_SENSITIVITY_LOW", "silenceDurationMs": 800},
            "activityHandling": "NO_INTERRUPTION",
        })
    );
    assert_eq!(
        setup["proactivity"],
        serde_json::json!({"proactiveAudio": true})
    );
    assert_eq!(setup["inputAudioTranscription"], serde_json::json!({}));
    assert!(setup.get("outputAudioTranscription").is_none(), "{setup:#}");
    assert_eq!(setup["sessionResumption"], serde_json::json!({}));

    // A client with no settings gets the gateway's: compression on for audio, nothing else.
    let mut client = Client::connect(server.addr, "u1", "s2", "").await;
    client.send_text("hello").await;
    client.frames_until(is_turn_complete).await;
    client.close().await;
    let setups = upstream.setups();
    let setup = setups.last().expect("a second setup");
    assert!(
        setup["generationConfig"].get("speechConfig").is_none(),
        "{setup:#}"
    );
    assert_eq!(
        setup["contextWindowCompression"]["slidingWindow"]["targetTokens"],
        12800
    );
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn audio_sessions_get_compression_by_default() {
    let upstream = mock(instant()).await;
    let server = start(gateway_args(&upstream)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    client.send_text("hello").await;
    client.frames_until(is_turn_complete).await;
    client.close().await;
    let setups = upstream.setups();
    let setup = setups.last().expect("the mock received a setup");
    assert_eq!(
        setup["contextWindowCompression"],
        serde_json::json!({"slidingWindow": {}})
    );
    assert!(setup.get("realtimeInputConfig").is_none(), "{setup:#}");
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

/// Waits (within `WAIT`) until the mock has received `bytes` of audio; returns its audio
/// messages' lengths.
async fn audio_messages_until(upstream: &MockGemini, bytes: usize) -> Vec<usize> {
    let audio = || -> Vec<usize> {
        upstream
            .inputs()
            .into_iter()
            .filter_map(|input| match input {
                mockgemini::Received::Audio(len) => Some(len),
                _ => None,
            })
            .collect()
    };
    let arrived = timeout(WAIT, async {
        while audio().iter().sum::<usize>() < bytes {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let messages = audio();
    assert!(
        arrived.is_ok(),
        "{} of {bytes} bytes arrived",
        messages.iter().sum::<usize>()
    );
    messages
}

/// Speaks a clip with `chunk_ms` upstream chunks; the clip, and the bytes of each audio
/// message Gemini received.
async fn audio_messages_with_chunks_of(chunk_ms: u64) -> (Vec<u8>, Vec<usize>) {
    let upstream = mock(instant()).await;
    let mut args = gateway_args(&upstream);
    args.upstream_audio_chunk_ms = chunk_ms;
    let server = start(args).await;
    let (client, pcm) = say_hello(server.addr).await;
    let messages = audio_messages_until(&upstream, pcm.len()).await;
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
    (pcm, messages)
}

#[tokio::test]
async fn microphone_frames_reach_gemini_gathered_into_chunks() {
    // By default 20 ms frames go as they came.
    let (pcm, messages) = audio_messages_with_chunks_of(20).await;
    let frames: Vec<usize> = pcm.chunks(640).map(<[u8]>::len).collect();
    assert_eq!(messages, frames, "one message per frame, as sent");
    // 40 ms: two frames to a message.
    let (pcm, messages) = audio_messages_with_chunks_of(40).await;
    assert_eq!(messages.iter().sum::<usize>(), pcm.len(), "all of it, once");
    let (last, whole) = messages.split_last().expect("audio arrived");
    assert!(
        whole.iter().all(|&len| len == 1280),
        "40 ms (1,280 bytes) per message: {messages:?}"
    );
    assert!(*last <= 1280, "the rest, sent when it fell due: {last}");
}

#[tokio::test]
async fn a_lone_frame_is_sent_when_due_and_text_goes_after_the_audio_before_it() {
    let upstream = mock(instant()).await;
    let mut args = gateway_args(&upstream);
    args.upstream_audio_chunk_ms = 40;
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    // Nothing follows it: held, then sent when its chunk's time is up.
    client.send_binary(silence(20)).await;
    assert_eq!(audio_messages_until(&upstream, 640).await, [640]);
    // Text right behind a frame: the frame, though short of a chunk, reaches Gemini first.
    client.send_binary(silence(20)).await;
    client.send_text("hello").await;
    client.frames_until(is_turn_complete).await;
    let inputs = upstream.inputs();
    let text = inputs
        .iter()
        .position(|i| *i == mockgemini::Received::Text)
        .expect("the text arrived");
    assert_eq!(
        &inputs[..=text],
        [
            mockgemini::Received::Audio(640),
            mockgemini::Received::Audio(640),
            mockgemini::Received::Text
        ],
        "{inputs:?}"
    );
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

/// Reconnecting to a session whose history holds a tool call replays it (the model's
/// `functionCall` turn, then the `functionResponse`): the next turn is answered, with no error.
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
