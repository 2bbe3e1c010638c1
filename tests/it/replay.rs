//! `livegate replay` against real gateways on `sim`: calls recorded over the WebSocket (text, a
//! tool call, speech, a barge-in, a transfer), exported over REST as bundles, replayed against the
//! same agent (no differences), a changed agent (the changed tool call named, exit status 1),
//! and mock-gemini; broken bundles; `--speed`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use livegate::gateway::ServeArgs;
use livegate::model::sim::Pacing;
use livegate_replay::{self as replay, ExportArgs, RunArgs};
use tokio::time::timeout;

/// The agent the calls are recorded with: two built-in tools and a sub-agent to transfer to;
/// `calculate` left out when `with_calculate` is false.
fn agent_file(dir: &Path, name: &str, with_calculate: bool) -> PathBuf {
    let tools = if with_calculate {
        r#"["get_current_time", "calculate"]"#
    } else {
        r#"["get_current_time"]"#
    };
    let text = format!(
        "name = \"assistant\"\ninstruction = \"Help.\"\nbuiltin_tools = {tools}\n\n\
         [[sub_agents]]\nname = \"orders\"\ndescription = \"Answers questions about orders.\"\n"
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A gateway answering at speaking speed (so an answer can be interrupted), with `agent`.
fn gateway_args(agent: PathBuf) -> ServeArgs {
    let mut args = test_args();
    args.sim_pacing = Pacing::RealTime;
    args.agent = Some(agent);
    args
}

/// Records the calls as user `rec`: `text` (a greeting, arithmetic, the time), `speech`,
/// `barge` (an answer interrupted by a typed message) and `transfer`.
async fn record_calls(addr: std::net::SocketAddr) {
    let mut text = Client::connect(addr, "rec", "text", "modality=TEXT").await;
    for message in [
        "hello there",
        "what is 12 * (3 + 4)?",
        "what time is it in Tokyo?",
    ] {
        text.send_text(message).await;
        text.events_until_turn_complete().await;
    }
    text.close().await;

    let mut speech = Client::connect(addr, "rec", "speech", "").await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    speech.stream_pcm(&pcm).await;
    speech.frames_until(is_turn_complete).await;
    speech.close().await;

    let mut barge = Client::connect(addr, "rec", "barge", "").await;
    barge
        .send_text("tell me everything you know about the long history of the city of Tokyo please")
        .await;
    // A second of the answer's audio, then the user types over it.
    let mut audio = 0;
    while audio < 48_000 {
        if let Frame::Audio(pcm) = barge.next_frame().await {
            audio += pcm.len();
        }
    }
    barge.send_text("stop").await;
    let interrupted = barge.events_until_turn_complete().await;
    assert!(interrupted.iter().any(|e| e["interrupted"] == true));
    barge.events_until_turn_complete().await;
    barge.close().await;

    let mut transfer = Client::connect(addr, "rec", "transfer", "modality=TEXT").await;
    transfer.send_text("put me through to orders").await;
    let events = transfer.events_until_turn_complete().await;
    assert!(events
        .iter()
        .any(|e| e["actions"]["transferToAgent"] == "orders"));
    transfer.close().await;
}

/// Exports all of `rec`'s sessions into `out` with the replay's own CLI code.
async fn export_all(addr: std::net::SocketAddr, out: &Path) -> Vec<PathBuf> {
    let args = ExportArgs {
        url: format!("http://{addr}"),
        user: "rec".into(),
        session: Vec::new(),
        out: out.to_owned(),
        token: None,
    };
    let mut bundles = timeout(WAIT, replay::export(&args))
        .await
        .expect("the export ends")
        .expect("the export runs");
    bundles.sort();
    bundles
}

fn run_args(bundles: Vec<PathBuf>, addr: std::net::SocketAddr) -> RunArgs {
    RunArgs {
        bundles,
        target: format!("http://{addr}"),
        speed: 1.0,
        rules: None,
        user: None,
        json: None,
        junit: None,
        html: None,
        token: None,
    }
}

async fn run(args: &RunArgs) -> replay::report::Report {
    timeout(Duration::from_secs(120), replay::run(args))
        .await
        .expect("the replay ends")
        .expect("the replay runs")
}

#[tokio::test]
async fn recorded_calls_replay_the_same_and_a_changed_agent_names_its_tool_call() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(gateway_args(agent_file(dir.path(), "a.toml", true))).await;
    record_calls(server.addr).await;
    timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("recordings flushed");

    let out = dir.path().join("bundles");
    let bundles = export_all(server.addr, &out).await;
    let names: Vec<_> = bundles
        .iter()
        .map(|b| b.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["barge", "speech", "text", "transfer"]);
    // What may not leave the gateway did not: no model resumption handle in any file.
    for bundle in &bundles {
        let events = std::fs::read_to_string(bundle.join("events.jsonl")).unwrap();
        assert!(!events.contains("liveSessionResumptionUpdate"), "{events}");
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(bundle.join("bundle.json")).unwrap()).unwrap();
        assert_eq!(manifest["format"], "livegate-replay-bundle");
        assert_eq!(manifest["version"], 1);
    }
    let speech_files = std::fs::read_dir(out.join("speech/recordings"))
        .unwrap()
        .count();
    assert!(speech_files >= 2, "input and output recordings exported");

    // The same agent: no difference, and the calls did what they were recorded for.
    let html = dir.path().join("same.html");
    let args = RunArgs {
        html: Some(html.clone()),
        junit: Some(dir.path().join("same.xml")),
        ..run_args(vec![out.clone()], server.addr)
    };
    let report = run(&args).await;
    assert!(report.passed(), "{}", report.table());
    assert!(report.table().contains("no differences"));
    let session = |id: &str| report.sessions.iter().find(|s| s.session_id == id).unwrap();
    let text = session("text");
    assert_eq!(text.turns.len(), 3);
    assert_eq!(text.turns[1].now.tool_calls[0].name, "calculate");
    assert_eq!(text.turns[2].now.tool_calls[0].name, "get_current_time");
    // The answer is interrupted after "stop" went out: in that input's turn, then and now.
    let barge = session("barge");
    assert!(barge.turns[1].then.interrupted && barge.turns[1].now.interrupted);
    assert_eq!(session("transfer").turns[0].now.transfers, ["orders"]);
    assert!(session("speech").turns[0].now.heard.contains("speech"));
    assert!(session("speech").turns[0].now.first_audio_ms.is_some());
    let junit = std::fs::read_to_string(dir.path().join("same.xml")).unwrap();
    assert!(
        junit.contains("failures=\"0\"") && !junit.contains("<failure"),
        "{junit}"
    );

    // The agent without `calculate`: that one tool call is named, and the command fails.
    let changed = start(gateway_args(agent_file(dir.path(), "b.toml", false))).await;
    let report_file = dir.path().join("changed.json");
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, "tool_calls = true\ntext_similarity = 0.0\n").unwrap();
    // In process, as `livegate replay run` does: its exit status is 1 exactly when the report
    // did not pass (tools/replay/src/main.rs), and `cargo test` alone builds no tool binaries.
    let mut args = run_args(vec![out.clone()], changed.addr);
    args.rules = Some(rules.clone());
    args.json = Some(report_file.clone());
    args.html = Some(dir.path().join("changed.html"));
    let report = run(&args).await;
    let stdout = report.table();
    assert!(!report.passed(), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report_file).unwrap()).unwrap();
    let mut failed = Vec::new();
    for session in json["sessions"].as_array().unwrap() {
        for turn in session["turns"].as_array().unwrap() {
            for check in turn["checks"].as_array().unwrap() {
                if check["passed"] == false {
                    failed.push((
                        session["sessionId"].as_str().unwrap().to_owned(),
                        turn["index"].as_u64().unwrap(),
                        check["name"].as_str().unwrap().to_owned(),
                        check["then"].as_str().unwrap().to_owned(),
                        check["now"].as_str().unwrap().to_owned(),
                    ));
                }
            }
        }
    }
    assert_eq!(
        failed,
        [(
            "text".to_owned(),
            2,
            "tool_calls".to_owned(),
            r#"calculate({"expression":"12 * (3 + 4)"})"#.to_owned(),
            "none".to_owned()
        )],
        "{stdout}"
    );
    assert!(
        stdout.contains("text turn 2: tool_calls: calculate("),
        "{stdout}"
    );
    let page = std::fs::read_to_string(dir.path().join("changed.html")).unwrap();
    assert!(page.contains("Turn 2") && page.contains("calculate("));
    // A differing turn shows both answers' players (a text answer has none, so "-" twice) and
    // the transcripts.
    assert!(page.contains("84"), "the recorded answer's text");
}

#[tokio::test]
async fn a_speech_call_replays_through_mock_gemini() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = start(gateway_args(agent_file(dir.path(), "a.toml", true))).await;
    let mut client = Client::connect(recorder.addr, "rec", "talk", "modality=TEXT").await;
    client.send_text("what is 6 * 7?").await;
    client.events_until_turn_complete().await;
    client.close().await;
    timeout(WAIT, recorder.gateway().registry.idle())
        .await
        .expect("flushed");
    let out = dir.path().join("bundles");
    export_all(recorder.addr, &out).await;

    let (_upstream, args) =
        on_mock_gemini(gateway_args(agent_file(dir.path(), "a.toml", true))).await;
    let target = start(args).await;
    let report = run(&run_args(vec![out], target.addr)).await;
    assert!(report.passed(), "{}", report.table());
    let turn = &report.sessions[0].turns[0];
    assert_eq!(turn.now.tool_calls[0].name, "calculate");
    assert!(turn.now.text.contains("42"), "{:?}", turn.now);
}

/// A bundle written by hand: one long input recording (speech, then silence), no answer kept.
fn long_call(dir: &Path, seconds: usize) -> PathBuf {
    let mut pcm = fixture_pcm("hello.wav");
    let speech = pcm.len() / 32;
    pcm.extend(silence(seconds * 1000 - speech));
    let name = "adk_live_audio_storage_input_audio_1000000000000.pcm";
    let events = vec![serde_json::json!({
        "author": "user",
        "timestamp": 1_000_000_000.0,
        "content": {"role": "user", "parts": [{"fileData": {
            "fileUri": format!("artifact://livegate/u/long/_adk_live/{name}#0"),
            "mimeType": "audio/pcm;rate=16000"}}]},
    })];
    let bundle = dir.join("long");
    replay::bundle::write(
        &bundle,
        "u",
        "long",
        &events,
        &[(name.to_owned(), "input", 1_000_000_000.0, &pcm)],
    )
    .unwrap();
    bundle
}

#[tokio::test]
async fn speed_shortens_a_long_call_in_proportion() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(test_args()).await;
    let bundle = long_call(dir.path(), 16);
    let at = |speed: f64| {
        let args = RunArgs {
            speed,
            ..run_args(vec![bundle.clone()], server.addr)
        };
        async move { run(&args).await }
    };
    let (fast, faster) = (at(4.0).await, at(8.0).await);
    let (fast_ms, faster_ms) = (fast.sessions[0].replay_ms, faster.sessions[0].replay_ms);
    // 16 s of audio: at least 4 s and 2 s, and the one about twice the other.
    assert!(
        fast_ms >= 4000.0 && faster_ms >= 2000.0,
        "{fast_ms} {faster_ms}"
    );
    let ratio = fast_ms / faster_ms;
    assert!(
        (1.5..2.5).contains(&ratio),
        "{fast_ms} ms at 4x, {faster_ms} ms at 8x"
    );
    assert!(fast.sessions[0].turns[0].now.heard.contains("speech"));
}

#[tokio::test]
async fn a_missing_or_corrupted_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(test_args()).await;
    let bundle = long_call(dir.path(), 4);
    let recording = "recordings/adk_live_audio_storage_input_audio_1000000000000.pcm";

    let mut damaged = std::fs::read(bundle.join(recording)).unwrap();
    damaged[100] ^= 0xff;
    std::fs::write(bundle.join(recording), &damaged).unwrap();
    let error = replay::run(&run_args(vec![bundle.clone()], server.addr))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(recording) && error.contains("corrupted"),
        "{error}"
    );

    std::fs::remove_file(bundle.join(recording)).unwrap();
    let error = replay::run(&run_args(vec![bundle.clone()], server.addr))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(recording) && error.contains("missing"),
        "{error}"
    );

    std::fs::write(bundle.join("events.jsonl"), "{not json\n").unwrap();
    std::fs::remove_file(bundle.join("bundle.json")).unwrap();
    let error = replay::run(&run_args(vec![bundle], server.addr))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("bundle.json"), "{error}");
}

#[tokio::test]
async fn the_export_of_an_unknown_or_invalid_session_is_refused() {
    let server = start(test_args()).await;
    let response = http_get(server.addr, "/api/sessions/u/none/export").await;
    assert!(response.starts_with("HTTP/1.1 404"), "{response}");
    let response = http_get(server.addr, "/api/sessions/u/bad%20id/export").await;
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
}
