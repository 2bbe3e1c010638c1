//! Live settings through the real gateway and `sim`: from the client's query and setup message,
//! the agent file and the gateway's flags, each one observable in what the client receives.

use crate::common::*;
use livegate::gateway::config::Pacing;
use livegate::gateway::ServeArgs;
use serde_json::{json, Value};

/// The model audio of the frames, as samples (24 kHz PCM16 LE).
fn audio_samples(frames: &[Frame]) -> Vec<i16> {
    frames
        .iter()
        .filter_map(|f| match f {
            Frame::Audio(bytes) => Some(bytes),
            _ => None,
        })
        .flat_map(|b| {
            b.chunks_exact(2)
                .map(|s| i16::from_le_bytes([s[0], s[1]]))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The pitch of the first voiced sound, in Hz: the strongest autocorrelation lag, among those
/// of 60 to 400 Hz, over 50 ms of it.
fn pitch_hz(pcm: &[i16]) -> f64 {
    let onset = pcm
        .iter()
        .position(|s| s.abs() > 5000)
        .expect("audible speech");
    let window: Vec<f64> = pcm[onset + 600..onset + 1800]
        .iter()
        .map(|&s| f64::from(s))
        .collect();
    let correlation = |lag: usize| -> f64 {
        let n = window.len() - lag;
        (0..n).map(|i| window[i] * window[i + lag]).sum::<f64>() / n as f64
    };
    let lag = (24_000 / 400..=24_000 / 60)
        .max_by(|&a, &b| correlation(a).total_cmp(&correlation(b)))
        .expect("a lag");
    24_000.0 / lag as f64
}

/// The pitch of the spoken answer to a text turn on a new connection with `query` and an
/// optional setup message.
async fn answer_pitch(args: ServeArgs, query: &str, setup: Option<Value>) -> f64 {
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", query).await;
    if let Some(setup) = setup {
        client.send_json(setup).await;
    }
    client.send_text("hello").await;
    let frames = client.frames_until(is_turn_complete).await;
    assert!(
        client.events.iter().all(|e| e.get("errorCode").is_none()),
        "{:#?}",
        client.events
    );
    client.close().await;
    server.shutdown(WAIT).await;
    pitch_hz(&audio_samples(&frames))
}

fn errors(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e.get("errorCode").is_some())
        .collect()
}

#[tokio::test]
async fn a_setup_message_changes_the_voice_heard() {
    let default = answer_pitch(test_args(), "", None).await;
    let kore = answer_pitch(
        test_args(),
        "",
        Some(json!({"type": "setup", "voice": "Kore"})),
    )
    .await;
    let charon = answer_pitch(test_args(), "voice=Charon", None).await;
    assert!(
        (1.35..1.65).contains(&(kore / default)),
        "default {default:.0} Hz, Kore {kore:.0} Hz"
    );
    assert!(
        (0.7..0.86).contains(&(charon / default)),
        "default {default:.0} Hz, Charon {charon:.0} Hz"
    );
}

#[tokio::test]
async fn the_agent_file_sets_the_voice_over_the_flags_and_the_client_over_both() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.toml");
    std::fs::write(
        &agent,
        "name = \"voiced\"\ninstruction = \"Speak.\"\n[live]\nvoice = \"Kore\"\n",
    )
    .unwrap();
    let mut flags = test_args();
    flags.live.voice = Some("Charon".into());
    let charon = answer_pitch(flags.clone(), "", None).await;
    let mut with_agent = flags.clone();
    with_agent.agent = Some(agent.clone());
    let kore = answer_pitch(with_agent.clone(), "", None).await;
    let puck = answer_pitch(with_agent, "voice=Puck", None).await;
    assert!(
        (1.75..2.2).contains(&(kore / charon)),
        "flags' Charon {charon:.0} Hz, agent's Kore {kore:.0} Hz"
    );
    assert!(
        (1.35..1.65).contains(&(kore / puck)),
        "agent's Kore {kore:.0} Hz, client's Puck {puck:.0} Hz"
    );
}

#[tokio::test]
async fn transcription_off_sends_no_transcriptions() {
    let server = start(test_args()).await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    for (session, query, expected) in [
        ("on", "", true),
        (
            "off",
            "input_transcription=false&output_transcription=false",
            false,
        ),
    ] {
        let mut client = Client::connect(server.addr, "u1", session, query).await;
        client.stream_pcm(&pcm).await;
        let frames = client.frames_until(is_turn_complete).await;
        assert!(
            frames.iter().any(|f| matches!(f, Frame::Audio(_))),
            "answered"
        );
        let inputs = client
            .events
            .iter()
            .any(|e| e.get("inputTranscription").is_some());
        let outputs = client
            .events
            .iter()
            .any(|e| e.get("outputTranscription").is_some());
        assert_eq!((inputs, outputs), (expected, expected), "{query:?}");
        client.close().await;
    }
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn with_vad_off_only_activity_signals_delimit_an_utterance() {
    let mut args = test_args();
    args.live.vad = Some("false".into());
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    // Speech and a long pause outside any activity: not an utterance.
    let mut ignored = fixture_pcm("count.wav");
    ignored.extend(silence(1500));
    client.stream_pcm(&ignored).await;
    // The one utterance: the hello clip between the activity signals.
    let hello = fixture_pcm("hello.wav");
    client.send_json(json!({"type": "activity_start"})).await;
    client.stream_pcm(&hello).await;
    client.send_json(json!({"type": "activity_end"})).await;
    client.frames_until(is_turn_complete).await;
    let heard: Vec<&str> = client
        .events
        .iter()
        .filter(|e| e["inputTranscription"]["finished"] == true)
        .filter_map(|e| e["inputTranscription"]["text"].as_str())
        .collect();
    let seconds = hello.len() as f64 / 2.0 / 16_000.0;
    assert_eq!(heard, [format!("[speech {seconds:.2} s]")], "{heard:?}");
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn without_barge_in_speech_does_not_interrupt_the_answer() {
    let mut args = test_args();
    args.sim_pacing = Pacing::RealTime;
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "barge_in=false").await;
    client
        .send_text("tell me a long story about a lighthouse keeper please")
        .await;
    loop {
        if let Frame::Audio(_) = client.next_frame().await {
            break;
        }
    }
    let mut pcm = fixture_pcm("interrupt.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    // The story plays to its end, then the utterance spoken over it is answered.
    let story = client.frames_until(is_turn_complete).await;
    let answer = client.frames_until(is_turn_complete).await;
    let interrupted = |frames: &[Frame]| {
        frames
            .iter()
            .any(|f| matches!(f, Frame::Event(e) if e["interrupted"] == true))
    };
    assert!(!interrupted(&story) && !interrupted(&answer));
    let heard = story.iter().chain(&answer).any(
        |f| matches!(f, Frame::Event(e) if e["inputTranscription"]["text"].as_str().is_some_and(|t| t.starts_with("[speech"))),
    );
    assert!(heard, "the speech over the answer was heard");
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn settings_outside_the_allow_list_are_refused_by_name_and_the_connection_goes_on() {
    let server = start(test_args()).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    client
        .send_json(json!({
            "type": "setup", "voice": "Kore", "save_live_blob": false,
            "colour": "blue", "language": "not a language",
        }))
        .await;
    client.send_text("hello").await;
    let frames = client.frames_until(is_turn_complete).await;
    let refused = errors(&client.events);
    let named: Vec<&str> = ["save_live_blob", "colour", "language"]
        .into_iter()
        .filter(|field| {
            refused.iter().any(|e| {
                e["errorCode"] == "INVALID_ARGUMENT"
                    && e["errorMessage"]
                        .as_str()
                        .is_some_and(|m| m.contains(&format!("{field:?}")))
            })
        })
        .collect();
    assert_eq!(
        named,
        ["save_live_blob", "colour", "language"],
        "{refused:#?}"
    );
    assert_eq!(refused.len(), 3, "one error per bad field: {refused:#?}");
    assert!(
        refused
            .iter()
            .all(|e| e["invocationId"].as_str().is_some_and(|i| !i.is_empty())),
        "{refused:#?}"
    );
    // All or nothing: not even the good voice applied, and recording goes on.
    let default = answer_pitch(test_args(), "", None).await;
    let heard = pitch_hz(&audio_samples(&frames));
    assert!((heard / default - 1.0).abs() < 0.05, "{heard} vs {default}");
    client.close().await;
    let (input, output) = recorded_audio(&server, "u1", "s1").await;
    assert!(input + output > 0, "still recorded");
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_setup_after_the_first_frame_is_refused_and_the_connection_goes_on() {
    let server = start(test_args()).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    client.send_text("first").await;
    client.frames_until(is_turn_complete).await;
    client
        .send_json(json!({"type": "setup", "voice": "Kore"}))
        .await;
    client.frames_until(|e| e.get("errorCode").is_some()).await;
    let error = client.events.last().expect("the error event");
    assert_eq!(error["errorCode"], "INVALID_ARGUMENT", "{error}");
    assert!(
        error["errorMessage"]
            .as_str()
            .is_some_and(|m| m.contains("setup must be the first message")),
        "{error}"
    );
    client.send_text("second").await;
    let events = client.events_until_turn_complete().await;
    assert!(events.iter().any(|e| e["partial"] == false));
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn operator_allowed_settings_apply_metadata_recording_and_resumption() {
    let mut args = test_args();
    args.live.client_settings = "all".parse().unwrap();
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    client
        .send_json(json!({
            "type": "setup", "save_live_blob": false, "session_resumption": false,
            "custom_metadata": {"tenant": "t1"}, "max_llm_calls": 3,
        }))
        .await;
    // Two turns: a handle after the first would come before the second's answer.
    for text in ["hello", "again"] {
        client.send_text(text).await;
        client.frames_until(is_turn_complete).await;
    }
    assert!(errors(&client.events).is_empty(), "{:#?}", client.events);
    assert!(
        client
            .events
            .iter()
            .all(|e| e["customMetadata"]["tenant"] == "t1"),
        "{:#?}",
        client.events
    );
    assert!(client
        .events
        .iter()
        .all(|e| e.get("liveSessionResumptionUpdate").is_none()));
    client.close().await;
    assert_eq!(recorded_audio(&server, "u1", "s1").await, (0, 0));

    // The same gateway's default: handles, recordings and no metadata.
    let mut client = Client::connect(server.addr, "u1", "s2", "").await;
    client.send_text("hello").await;
    client.frames_until(is_turn_complete).await;
    client
        .frames_until(|e| e.get("liveSessionResumptionUpdate").is_some())
        .await;
    assert!(client
        .events
        .iter()
        .all(|e| e.get("customMetadata").is_none()));
    client.close().await;
    assert_ne!(recorded_audio(&server, "u1", "s2").await.1, 0);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn the_agent_file_turns_transcription_off_and_the_client_back_on() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.toml");
    std::fs::write(
        &agent,
        "name = \"quiet\"\n[live]\ninput_transcription = false\noutput_transcription = false\n",
    )
    .unwrap();
    let mut args = test_args();
    args.agent = Some(agent);
    let server = start(args).await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    for (session, query, expected) in [("a", "", false), ("b", "input_transcription=true", true)] {
        let mut client = Client::connect(server.addr, "u1", session, query).await;
        client.stream_pcm(&pcm).await;
        client.frames_until(is_turn_complete).await;
        let heard = client
            .events
            .iter()
            .any(|e| e.get("inputTranscription").is_some());
        assert_eq!(heard, expected, "{query:?}");
        client.close().await;
    }
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn an_invalid_default_stops_the_gateway_naming_the_setting() {
    let mut args = test_args();
    args.live.silence_duration_ms = Some("forever".into());
    let error = livegate::gateway::start(&args).await.unwrap_err();
    assert!(error.to_string().contains("silence_duration_ms"), "{error}");
}

#[tokio::test]
async fn a_longer_silence_duration_joins_two_phrases_into_one_utterance() {
    let mut args = test_args();
    args.live.client_settings = "vad,barge_in".parse().unwrap();
    let server = start(args).await;
    let hello = fixture_pcm("hello.wav");
    // Two phrases a second apart, then a long pause.
    let mut pcm = hello.clone();
    pcm.extend(silence(800));
    pcm.extend(&hello);
    pcm.extend(silence(2000));
    let one = hello.len() as f64 / 2.0 / 16_000.0;
    // Without barge-in, so that the second phrase cannot cut the first one's answer short.
    for (session, query, utterances) in [
        ("a", "barge_in=false", 2),
        ("b", "barge_in=false&silence_duration_ms=1500", 1),
    ] {
        let mut client = Client::connect(server.addr, "u1", session, query).await;
        client.stream_pcm(&pcm).await;
        for _ in 0..utterances {
            client.frames_until(is_turn_complete).await;
        }
        assert!(errors(&client.events).is_empty(), "{:#?}", client.events);
        // The sim's own transcriptions, one per utterance (the flow's finished one joins them).
        let heard: Vec<f64> = client
            .events
            .iter()
            .filter(|e| e["partial"] == true)
            .filter_map(|e| e["inputTranscription"]["text"].as_str())
            .filter_map(|t| {
                t.strip_prefix("[speech ")?
                    .strip_suffix(" s]")?
                    .parse()
                    .ok()
            })
            .collect();
        assert_eq!(heard.len(), utterances, "{query:?}: {heard:?}");
        if utterances == 1 {
            assert!(heard[0] > 2.0 * one, "both phrases in one: {heard:?}");
        } else {
            assert!(
                heard.iter().all(|&s| s < one + 0.8),
                "one phrase each: {heard:?}"
            );
        }
        client.close().await;
    }
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_bad_query_setting_is_refused_by_name_and_the_query_ignored() {
    let server = start(test_args()).await;
    let mut client = Client::connect(
        server.addr,
        "u1",
        "s1",
        "modality=TEXT&input_transcription=maybe&max_llm_calls=3",
    )
    .await;
    client.send_text("hello").await;
    let events = client.events_until_turn_complete().await;
    let refused: Vec<String> = errors(&events)
        .iter()
        .filter(|e| e["errorCode"] == "INVALID_ARGUMENT")
        .filter_map(|e| e["errorMessage"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused
        .iter()
        .any(|m| m.contains("\"input_transcription\"") && m.contains("maybe")));
    assert!(refused
        .iter()
        .any(|m| m.contains("\"max_llm_calls\"") && m.contains("--client-settings")));
    // Not a setting: the modality still applies.
    assert!(events
        .iter()
        .any(|e| e["partial"] == false && !text_of(e).is_empty()));
    client.close().await;
    server.shutdown(WAIT).await;
}
