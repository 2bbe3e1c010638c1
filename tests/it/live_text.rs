//! Text turns over the WebSocket: streamed partials, the merged text, turnComplete, in TEXT and
//! AUDIO modality, with binary and base64 audio frames.

use std::collections::HashSet;

use crate::common::*;
use serde_json::Value;

#[tokio::test]
async fn text_turn_streams_partials_then_merged_text_then_turn_complete() {
    let server = start(test_args()).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello").await;
    let events = client.events_until_turn_complete().await;

    let partials: Vec<&Value> = events
        .iter()
        .filter(|e| e["partial"] == true && e["content"].is_object())
        .collect();
    assert!(
        partials.len() >= 2,
        "several partial text events: {events:?}"
    );
    let finals: Vec<&Value> = events
        .iter()
        .filter(|e| e["partial"] == false && !text_of(e).is_empty())
        .collect();
    assert_eq!(finals.len(), 1, "exactly one merged text event");
    let merged = text_of(finals[0]);
    let joined: String = partials.iter().map(|e| text_of(e)).collect();
    assert_eq!(
        merged, joined,
        "merged text is the concatenation of the partials"
    );
    assert!(!merged.is_empty());

    let last = events.last().unwrap();
    assert_eq!(last["turnComplete"], true);
    assert!(
        last.get("content").is_none(),
        "turnComplete is its own event"
    );
    let merged_at = events.iter().position(|e| e == finals[0]).unwrap();
    assert!(
        merged_at < events.len() - 1,
        "merged text comes before turnComplete"
    );

    let invocation = events[0]["invocationId"].as_str().unwrap();
    assert!(invocation.starts_with("e-"));
    assert!(
        events.iter().all(|e| e["invocationId"] == invocation),
        "one invocation id"
    );
    let ids: HashSet<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), events.len(), "every event id is distinct");
    assert!(events.iter().all(|e| e["author"] == "assistant"));
    client.close().await;
    server.shutdown(WAIT).await;
}

fn audio_mime(e: &Value) -> Option<String> {
    e["content"]["parts"][0]["inlineData"]["mimeType"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test]
async fn audio_turn_sends_binary_pcm_then_metadata_and_transcriptions() {
    let server = start(test_args()).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=AUDIO").await;
    client.send_text("hello").await;
    let frames = client.frames_until(is_turn_complete).await;

    let mut audio_frames = 0;
    let mut fragments = String::new();
    let mut finished = None;
    for (i, frame) in frames.iter().enumerate() {
        match frame {
            Frame::Audio(pcm) => {
                audio_frames += 1;
                assert_eq!(pcm.len() % 2, 0, "PCM16");
                let Frame::Event(meta) = &frames[i + 1] else {
                    panic!("audio is followed by its metadata")
                };
                assert_eq!(audio_mime(meta).as_deref(), Some("audio/pcm;rate=24000"));
                assert!(
                    meta["content"]["parts"][0]["inlineData"]
                        .get("data")
                        .is_none(),
                    "no data in metadata"
                );
            }
            Frame::Event(e) => {
                if let Some(t) = e.get("outputTranscription") {
                    if t["finished"] == true {
                        finished = t["text"].as_str().map(str::to_owned);
                        assert_eq!(e["partial"], false);
                    } else {
                        fragments.push_str(t["text"].as_str().unwrap());
                        assert_eq!(e["partial"], true);
                    }
                }
            }
            Frame::Closed(_) => unreachable!(),
        }
    }
    assert!(audio_frames > 0, "binary audio frames arrive");
    assert!(
        !fragments.is_empty(),
        "output transcription fragments arrive"
    );
    assert_eq!(
        finished.as_deref(),
        Some(fragments.as_str()),
        "finished transcription holds the full text"
    );
    let samples = client.audio_bytes / 2;
    assert!(
        samples > 24_000 / 2,
        "at least half a second of 24 kHz audio, got {samples} samples"
    );
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn base64_mode_puts_audio_inside_the_json() {
    let server = start(test_args()).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=AUDIO&audio=base64").await;
    client.send_text("hello").await;
    let frames = client.frames_until(is_turn_complete).await;
    assert!(
        frames.iter().all(|f| !matches!(f, Frame::Audio(_))),
        "no binary frames in base64 mode"
    );
    let audio: Vec<&Value> = frames
        .iter()
        .filter_map(|f| match f {
            Frame::Event(e) if audio_mime(e).is_some() => Some(e),
            _ => None,
        })
        .collect();
    assert!(!audio.is_empty());
    for e in audio {
        let data = e["content"]["parts"][0]["inlineData"]["data"]
            .as_str()
            .expect("inline data");
        let pcm = livegate::event::decode_base64(data).expect("valid base64");
        assert!(!pcm.is_empty() && pcm.len().is_multiple_of(2));
        assert!(
            e.get("partial").is_none(),
            "ADK audio chunks carry no partial flag"
        );
    }
    client.close().await;
    server.shutdown(WAIT).await;
}
