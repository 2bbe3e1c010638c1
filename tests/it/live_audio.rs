//! Speech over the WebSocket: transcription, voice answer, barge-in, and recordings.

use crate::common::*;
use livegate::artifact::ArtifactScope;
use livegate::gateway::config::{Pacing, ServeArgs};
use serde_json::{json, Value};

#[tokio::test]
async fn speech_yields_user_transcription_then_audio_answer_then_turn_complete() {
    let server = start(test_args()).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    let frames = client.frames_until(is_turn_complete).await;

    let first_transcript = frames
        .iter()
        .position(|f| matches!(f, Frame::Event(e) if e.get("inputTranscription").is_some()))
        .expect("an input transcription");
    let Frame::Event(t) = &frames[first_transcript] else {
        unreachable!()
    };
    assert_eq!(t["author"], "user");
    let first_audio = frames
        .iter()
        .position(|f| matches!(f, Frame::Audio(_)))
        .expect("an audio answer");
    assert!(
        first_transcript < first_audio,
        "the user is transcribed before the answer"
    );
    let finished = frames.iter().any(|f| {
        matches!(f, Frame::Event(e) if e["inputTranscription"]["finished"] == true && e["author"] == "user" && e["partial"] == false)
    });
    assert!(finished, "a finished input transcription");
    // The voice echo: as long as the utterance, at 24 kHz.
    let clip_samples = fixture_pcm("hello.wav").len() / 2;
    let answer_samples = client.audio_bytes / 2;
    assert!(
        answer_samples >= clip_samples,
        "echo at 24 kHz is longer in samples ({answer_samples} vs {clip_samples})"
    );
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn speaking_over_the_answer_interrupts_it() {
    let mut args = test_args();
    args.sim_pacing = Pacing::RealTime;
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    client
        .send_text("tell me a long story about a lighthouse keeper please")
        .await;
    // Wait for the answer to start playing.
    loop {
        if let Frame::Audio(_) = client.next_frame().await {
            break;
        }
    }
    let mut pcm = fixture_pcm("interrupt.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    let frames = client.frames_until(|e| e["interrupted"] == true).await;
    assert!(!frames.is_empty());
    // As on Gemini, the interrupted turn then completes, with the usage of what was generated.
    let cut = client.frames_until(is_turn_complete).await;
    assert!(
        !cut.iter().any(|f| matches!(f, Frame::Audio(_))),
        "no audio of the interrupted answer after `interrupted`"
    );
    let usage = cut.iter().find_map(|f| match f {
        Frame::Event(e) => e.get("usageMetadata"),
        _ => None,
    });
    assert!(
        usage.is_some_and(|u| u["totalTokenCount"].as_u64() > Some(0)),
        "the interrupted turn reports its usage: {cut:?}"
    );
    // After it, the next audio may only be the answer to the new utterance, which follows its
    // transcription.
    let after = client.frames_until(is_turn_complete).await;
    let transcript = after
        .iter()
        .position(|f| matches!(f, Frame::Event(e) if e.get("inputTranscription").is_some()));
    let first_audio = after.iter().position(|f| matches!(f, Frame::Audio(_)));
    let transcript = transcript.expect("the barge-in utterance is transcribed");
    let audio = first_audio.expect("the barge-in utterance is answered");
    assert!(
        transcript < audio,
        "no audio of the interrupted answer after `interrupted`"
    );
    client.close().await;
    server.shutdown(WAIT).await;
}

fn file_uris(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| {
            e["content"]["parts"][0]["fileData"]["fileUri"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

async fn recorded_bytes(server: &livegate::gateway::Server, session: &str, side: &str) -> usize {
    let artifacts = &server.gateway().runner.artifacts;
    let scope = ArtifactScope {
        app_name: "livegate",
        user_id: "u1",
        session_id: session,
    };
    let mut total = 0;
    for name in artifacts.list_names(scope).await.unwrap() {
        if name.starts_with(&format!("adk_live_audio_storage_{side}_audio_")) {
            let artifact = artifacts.load(scope, &name, None).await.unwrap().unwrap();
            assert_eq!(
                artifact.mime_type,
                if side == "input" {
                    "audio/pcm;rate=16000"
                } else {
                    "audio/pcm;rate=24000"
                }
            );
            total += artifact.data.len();
        }
    }
    total
}

#[tokio::test]
async fn recordings_hold_exactly_what_was_sent_and_received() {
    recordings_hold_exactly_what_was_sent_and_received_in(test_args(), "hello.wav").await;
}

#[tokio::test]
async fn recordings_spooled_to_files_hold_exactly_what_was_sent_and_received() {
    // The file store spools long recordings to files while the turn runs (this clip is longer
    // than one spill).
    let dir = tempfile::tempdir().unwrap();
    let mut args = test_args();
    args.artifact_store = Some(format!("file://{}", dir.path().display()));
    recordings_hold_exactly_what_was_sent_and_received_in(args, "count.wav").await;
    // The store's spool folder is its own, inside `#spool` (beside its lock file).
    let spool = dir.path().join("#spool");
    let folders: Vec<_> = std::fs::read_dir(&spool)
        .unwrap()
        .flatten()
        .map(|f| f.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(folders.len(), 1, "{folders:?}");
    assert_eq!(
        std::fs::read_dir(&folders[0]).unwrap().count(),
        0,
        "no spool file left behind"
    );
}

async fn recordings_hold_exactly_what_was_sent_and_received_in(args: ServeArgs, clip: &str) {
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    let mut pcm = fixture_pcm(clip);
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    client.events_until_turn_complete().await;
    let uris = file_uris(&client.events);
    assert!(
        uris.iter().any(|u| u.contains("_input_audio_")),
        "input recording referenced: {uris:?}"
    );
    assert!(
        uris.iter().any(|u| u.contains("_output_audio_")),
        "output recording referenced: {uris:?}"
    );
    let artifacts = server.gateway().runner.artifacts.clone();
    let scope = ArtifactScope {
        app_name: "livegate",
        user_id: "u1",
        session_id: "s1",
    };
    for uri in &uris {
        let reference = uri
            .strip_prefix("artifact://livegate/u1/s1/_adk_live/")
            .expect("ADK's live recording URI");
        let (name, version) = reference.split_once('#').expect("a version");
        assert!(
            name.starts_with("adk_live_audio_storage_") && name.ends_with(".pcm"),
            "{uri}"
        );
        let version = version.parse().expect("numeric version");
        let stored = artifacts.load(scope, name, Some(version)).await.unwrap();
        assert!(
            stored.is_some_and(|a| !a.data.is_empty()),
            "{uri} names a stored recording"
        );
    }
    let received = client.audio_bytes;
    client.close().await;
    // Every byte sent, but for silence that came after the turn's recording was saved: a silent
    // tail is no recording of its own.
    let input = recorded_bytes_of(&server, "s1", "input").await;
    assert!(input <= pcm.len() && input >= pcm.len() - silence(1000).len());
    assert!(
        pcm[input..].iter().all(|b| *b == 0),
        "only silence is left out"
    );
    assert_eq!(recorded_bytes_of(&server, "s1", "output").await, received);
    server.shutdown(WAIT).await;
}

/// Bytes recorded on one side of a session, once every connection has finished flushing.
async fn recorded_bytes_of(server: &livegate::gateway::Server, session: &str, side: &str) -> usize {
    tokio::time::timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("connections finish");
    recorded_bytes(server, session, side).await
}

#[tokio::test]
async fn disconnecting_mid_turn_still_saves_the_partial_recordings() {
    let mut args = test_args();
    args.sim_pacing = Pacing::RealTime;
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s2", "").await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    // Leave in the middle of the spoken answer.
    loop {
        if let Frame::Audio(_) = client.next_frame().await {
            break;
        }
    }
    drop(client);
    let input = recorded_bytes_of(&server, "s2", "input").await;
    let output = recorded_bytes_of(&server, "s2", "output").await;
    assert_eq!(input, pcm.len(), "every input byte is recorded");
    assert!(
        output > 0,
        "the part of the answer generated before the disconnect is recorded"
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn the_microphones_silent_tail_is_not_saved_as_a_recording_of_its_own() {
    let server = start(test_args()).await;
    let mut client = Client::connect(server.addr, "u1", "tail", "").await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    client.events_until_turn_complete().await;
    // The microphone stays open in a quiet room, is stopped, and the page leaves the session.
    client.stream_pcm(&silence(2000)).await;
    client.send_json(json!({"type": "audio_stream_end"})).await;
    client.close().await;
    tokio::time::timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("connections finish");
    let scope = ArtifactScope {
        app_name: "livegate",
        user_id: "u1",
        session_id: "tail",
    };
    let names = server
        .gateway()
        .runner
        .artifacts
        .list_names(scope)
        .await
        .unwrap();
    let inputs: Vec<_> = names
        .iter()
        .filter(|n| n.contains("_input_audio_"))
        .collect();
    assert_eq!(
        inputs.len(),
        1,
        "one recording of the utterance only: {names:?}"
    );
    server.shutdown(WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recordings_of_a_session_that_ends_on_a_full_disk_are_saved_once_it_has_room() {
    let Some(disk) = Tmpfs::mount("4m") else {
        return;
    };
    let mut args = test_args();
    let root = disk.path().join("artifacts");
    args.artifact_store = Some(format!("file://{}", root.display()));
    let server = start(args).await;
    let filler = disk.fill();
    let (client, _) = say_hello(server.addr).await;
    assert!(
        client.events.iter().any(|e| e["errorCode"].is_string()),
        "the client is told the recordings could not be saved"
    );
    client.close().await;
    assert_eq!(
        recorded_audio(&server, "u1", "s1").await,
        (0, 0),
        "nothing saved yet"
    );
    std::fs::remove_file(filler).unwrap();
    let saved = eventually(
        WAIT,
        "the recordings are saved once the disk has room",
        || async {
            let (input, output) = recorded_audio(&server, "u1", "s1").await;
            (input > 0 && output > 0).then_some((input, output))
        },
    )
    .await;
    assert!(
        saved.0 >= fixture_pcm("hello.wav").len(),
        "the input whole: {saved:?}"
    );
    server.shutdown(WAIT).await;
    drop(disk);
}
