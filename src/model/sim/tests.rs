//! The sim model over its channels: text and audio turns, the voice echo, barge-in, manual activity.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::timeout;

use super::*;
use crate::event::Content;
use crate::model::{
    AutomaticActivityDetection, LiveInput, LlmResponse, Modality, RealtimeInputConfig,
};

const WAIT: Duration = Duration::from_secs(10);

fn connect_config(modality: Modality) -> LiveConnectConfig {
    LiveConnectConfig {
        model: "sim".into(),
        response_modalities: vec![modality],
        input_audio_transcription: true,
        output_audio_transcription: true,
        ..LiveConnectConfig::default()
    }
}

fn clip(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let mut reader = hound::WavReader::open(path).unwrap();
    reader
        .samples::<i16>()
        .flat_map(|s| s.unwrap().to_le_bytes())
        .collect()
}

async fn turn(connection: &mut LiveConnection) -> Vec<LlmResponse> {
    let mut out = Vec::new();
    loop {
        let message = timeout(WAIT, connection.receiver.recv())
            .await
            .expect("in time")
            .expect("open")
            .expect("ok");
        let done = message.turn_complete;
        out.push(message);
        if done {
            return out;
        }
    }
}

async fn send_audio(connection: &LiveConnection, pcm: &[u8]) {
    for chunk in pcm.chunks(640) {
        connection
            .sender
            .send(LiveInput::audio(Bytes::copy_from_slice(chunk), 16_000))
            .await
            .unwrap();
    }
}

fn audio_bytes(messages: &[LlmResponse]) -> usize {
    messages
        .iter()
        .flat_map(|m| m.content.iter().flat_map(|c| &c.parts))
        .filter_map(|p| p.inline_data.as_ref())
        .map(|b| b.data.len())
        .sum()
}

#[tokio::test]
async fn text_turn_in_text_modality_streams_fragments_then_usage_then_turn_complete() {
    let model = SimModel::new(SimConfig::instant());
    let mut connection = model.connect(connect_config(Modality::Text)).await.unwrap();
    let hello = LiveInput::Content {
        content: Content::text("user", "hello"),
        turn_complete: true,
    };
    connection.sender.send(hello.clone()).await.unwrap();
    let messages = turn(&mut connection).await;
    let fragments: Vec<String> = messages
        .iter()
        .filter_map(|m| m.content.as_ref())
        .map(Content::joined_text)
        .collect();
    assert!(fragments.len() >= 2);
    assert_eq!(fragments.concat(), reply_to_text("hello"));
    let usage = messages
        .iter()
        .position(|m| m.usage_metadata.is_some())
        .unwrap();
    assert!(usage > 0 && usage < messages.len() - 1);
    connection.sender.send(hello).await.unwrap();
    let again: Vec<String> = turn(&mut connection)
        .await
        .iter()
        .filter_map(|m| m.content.as_ref())
        .map(Content::joined_text)
        .collect();
    assert_eq!(again, fragments, "deterministic");
}

#[tokio::test]
async fn text_turn_in_audio_modality_speaks_with_transcription() {
    let model = SimModel::new(SimConfig::instant());
    let mut connection = model
        .connect(connect_config(Modality::Audio))
        .await
        .unwrap();
    connection
        .sender
        .send(LiveInput::Content {
            content: Content::text("user", "hello"),
            turn_complete: true,
        })
        .await
        .unwrap();
    let messages = turn(&mut connection).await;
    let transcript: String = messages
        .iter()
        .filter_map(|m| m.output_transcription.as_ref())
        .filter_map(|t| t.text.clone())
        .collect();
    assert_eq!(transcript, reply_to_text("hello"));
    let mut samples = Vec::new();
    for blob in messages
        .iter()
        .flat_map(|m| m.content.iter().flat_map(|c| &c.parts))
        .filter_map(|p| p.inline_data.as_ref())
    {
        assert_eq!(blob.mime_type, "audio/pcm;rate=24000");
        assert_eq!(blob.data.len() % 2, 0);
        samples.extend(
            blob.data
                .chunks_exact(2)
                .map(|b| i16::from_le_bytes([b[0], b[1]])),
        );
    }
    assert!(rms(&samples) > 0.03, "audible speech");
}

#[tokio::test]
async fn speech_is_transcribed_and_echoed_at_24_khz() {
    let model = SimModel::new(SimConfig::instant());
    let mut connection = model
        .connect(connect_config(Modality::Audio))
        .await
        .unwrap();
    let pcm = clip("hello.wav");
    send_audio(&connection, &pcm).await;
    send_audio(&connection, &vec![0u8; 32_000]).await;
    let messages = turn(&mut connection).await;
    let heard = messages[0]
        .input_transcription
        .as_ref()
        .and_then(|t| t.text.clone())
        .expect("input transcription first");
    assert!(heard.starts_with("(speech, "), "{heard}");
    let echoed_samples = audio_bytes(&messages) / 2;
    let clip_samples = pcm.len() / 2;
    // The VAD trims the clip's own quiet edges; the echo is 1.5x what it kept.
    assert!(
        echoed_samples <= clip_samples * 3 / 2 && echoed_samples > clip_samples,
        "{echoed_samples} vs {clip_samples}"
    );
}

#[tokio::test]
async fn speaking_over_a_real_time_answer_interrupts_it() {
    let config = SimConfig {
        reply_delay: Duration::ZERO,
        ..SimConfig::default()
    };
    let model = SimModel::new(config);
    let mut connection = model
        .connect(connect_config(Modality::Audio))
        .await
        .unwrap();
    connection
        .sender
        .send(LiveInput::Content {
            content: Content::text("user", "tell me a story"),
            turn_complete: true,
        })
        .await
        .unwrap();
    loop {
        let m = timeout(WAIT, connection.receiver.recv())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if m.content.is_some() {
            break;
        }
    }
    send_audio(&connection, &clip("interrupt.wav")).await;
    loop {
        let m = timeout(WAIT, connection.receiver.recv())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if m.interrupted {
            break;
        }
        assert!(!m.turn_complete, "interrupted before the answer completed");
    }
    send_audio(&connection, &vec![0u8; 32_000]).await;
    let after = turn(&mut connection).await;
    assert!(
        after[0].input_transcription.is_some(),
        "nothing of the old answer after `interrupted`: {:?}",
        after[0]
    );
}

#[tokio::test]
async fn manual_activity_delimits_utterances() {
    let model = SimModel::new(SimConfig::instant());
    let mut config = connect_config(Modality::Audio);
    config.realtime_input_config = Some(RealtimeInputConfig {
        automatic_activity_detection: Some(AutomaticActivityDetection {
            disabled: Some(true),
            ..Default::default()
        }),
        activity_handling: None,
    });
    let mut connection = model.connect(config).await.unwrap();
    connection
        .sender
        .send(LiveInput::ActivityStart)
        .await
        .unwrap();
    send_audio(&connection, &clip("weather.wav")).await;
    connection
        .sender
        .send(LiveInput::ActivityEnd)
        .await
        .unwrap();
    let messages = turn(&mut connection).await;
    assert!(messages[0].input_transcription.is_some());
    assert!(audio_bytes(&messages) > 0);
}

#[tokio::test]
async fn dropping_the_sender_ends_the_connection() {
    let model = SimModel::new(SimConfig::instant());
    let LiveConnection {
        sender,
        mut receiver,
    } = model.connect(connect_config(Modality::Text)).await.unwrap();
    drop(sender);
    assert!(timeout(WAIT, receiver.recv()).await.unwrap().is_none());
}
