//! The sim model over its channels: text and audio turns, the voice echo, barge-in, manual activity,
//! resumption handles, bad input, and closing.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::timeout;

use super::pcm::samples;
use super::vad::{rms_dbfs, Vad, VadEvent, VadSettings};
use super::*;
use crate::event::{Blob, Content, FunctionResponse};
use crate::model::{
    AutomaticActivityDetection, LiveInput, LlmResponse, Modality, RealtimeInputConfig,
    SessionResumptionConfig,
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

fn manual_config(modality: Modality) -> LiveConnectConfig {
    LiveConnectConfig {
        realtime_input_config: Some(RealtimeInputConfig {
            automatic_activity_detection: Some(AutomaticActivityDetection {
                disabled: Some(true),
                ..Default::default()
            }),
            activity_handling: None,
        }),
        ..connect_config(modality)
    }
}

/// A speech fixture's samples (16 kHz mono PCM16).
fn clip(name: &str) -> Vec<i16> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let mut reader = hound::WavReader::open(path).expect("fixture");
    assert_eq!(reader.spec().sample_rate, 16_000);
    reader
        .samples::<i16>()
        .map(|s| s.expect("sample"))
        .collect()
}

fn silence(ms: usize) -> Vec<i16> {
    vec![0; ms * 16]
}

fn pcm_bytes(samples: &[i16]) -> Bytes {
    samples.iter().flat_map(|s| s.to_le_bytes()).collect()
}

fn text_turn(text: &str) -> LiveInput {
    LiveInput::Content {
        content: Content::text("user", text),
        turn_complete: true,
    }
}

/// Streams audio in 20 ms chunks from its own task, so the test can read answers meanwhile.
fn feed(sender: &crate::model::InputSender, audio: Vec<i16>) {
    let sender = sender.clone();
    tokio::spawn(async move {
        for chunk in audio.chunks(320) {
            let input = LiveInput::audio(pcm_bytes(chunk), 16_000);
            if sender.send(input).await.is_err() {
                return;
            }
        }
    });
}

async fn send(connection: &LiveConnection, input: LiveInput) {
    timeout(WAIT, connection.sender.send(input))
        .await
        .expect("sent in time")
        .expect("sim is running");
}

async fn recv(connection: &mut LiveConnection) -> LlmResponse {
    let message = timeout(WAIT, connection.receiver.recv())
        .await
        .expect("a message in time")
        .expect("connection open")
        .expect("no error");
    assert_eq!(message.model_version.as_deref(), Some("sim"));
    *message
}

/// Messages up to and including the next `turn_complete`.
async fn turn(connection: &mut LiveConnection) -> Vec<LlmResponse> {
    let mut out = Vec::new();
    loop {
        let message = recv(connection).await;
        let done = message.turn_complete;
        out.push(message);
        if done {
            return out;
        }
    }
}

fn audio_of(message: &LlmResponse) -> Option<&Blob> {
    message
        .content
        .as_ref()
        .and_then(|c| c.parts.first())
        .and_then(|p| p.inline_data.as_ref())
}

fn audio_samples(messages: &[LlmResponse]) -> Vec<i16> {
    messages
        .iter()
        .filter_map(audio_of)
        .flat_map(|b| samples(&b.data).collect::<Vec<_>>())
        .collect()
}

fn texts(messages: &[LlmResponse]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| audio_of(m).is_none())
        .filter_map(|m| m.content.as_ref())
        .map(Content::joined_text)
        .collect()
}

fn output_transcript(messages: &[LlmResponse]) -> String {
    messages
        .iter()
        .filter_map(|m| m.output_transcription.as_ref())
        .inspect(|t| assert_eq!(t.finished, Some(false)))
        .filter_map(|t| t.text.clone())
        .collect()
}

fn position(messages: &[LlmResponse], test: impl Fn(&LlmResponse) -> bool) -> usize {
    messages.iter().position(test).expect("message present")
}

/// A VAD with the sim's default settings, at 16 kHz.
fn default_vad() -> Vad {
    let sim = SimConfig::default();
    let settings = VadSettings {
        threshold_dbfs: sim.vad_threshold_dbfs,
        min_speech_ms: sim.vad_min_speech_ms,
        silence_ms: sim.vad_silence_ms,
    };
    Vad::new(settings, 16_000)
}

/// The utterance the sim's VAD cuts from `audio` (default settings), as stream sample indices.
fn vad_cut(audio: &[i16]) -> (u64, u64) {
    let mut vad = default_vad();
    let mut events = Vec::new();
    vad.push(&super::pcm::to_pcm(audio), &mut events);
    match events.as_slice() {
        [VadEvent::Start, VadEvent::End { start, end }] => (*start, *end),
        other => panic!("one utterance expected: {other:?}"),
    }
}

#[tokio::test]
async fn text_turn_in_text_modality_streams_fragments_then_usage_then_turn_complete() {
    let model = SimModel::new(SimConfig::instant());
    let mut connection = model.connect(connect_config(Modality::Text)).await.unwrap();
    send(&connection, text_turn("hello")).await;
    let messages = turn(&mut connection).await;

    let fragments = texts(&messages);
    assert!(fragments.len() >= 2, "{fragments:?}");
    assert_eq!(fragments.concat(), text_reply("hello"));
    assert_eq!(
        fragments.concat(),
        "Hello! I'm the livegate simulator. You said: \"hello\"."
    );
    let last_text = messages.iter().rposition(|m| m.content.is_some()).unwrap();
    let usage = position(&messages, |m| m.usage_metadata.is_some());
    let generated = position(&messages, |m| m.generation_complete);
    assert!(last_text < usage && usage < generated && generated < messages.len() - 1);
    let usage = messages[usage].usage_metadata.clone().unwrap();
    let details = usage.candidates_tokens_details.unwrap();
    assert_eq!(details[0].modality, "TEXT");
    assert!(usage.prompt_token_count.unwrap() > 0 && usage.candidates_token_count.unwrap() > 0);
    assert_eq!(
        usage.total_token_count,
        Some(usage.prompt_token_count.unwrap() + usage.candidates_token_count.unwrap())
    );

    // Deterministic: a fresh connection says exactly the same.
    let mut again = model.connect(connect_config(Modality::Text)).await.unwrap();
    send(&again, text_turn("hello")).await;
    assert_eq!(turn(&mut again).await, messages);
}

#[tokio::test]
async fn text_turn_in_audio_modality_speaks_with_transcription() {
    let model = SimModel::new(SimConfig::instant());
    let mut connection = model
        .connect(connect_config(Modality::Audio))
        .await
        .unwrap();
    send(&connection, text_turn("what time is it?")).await;
    let messages = turn(&mut connection).await;

    let reply = text_reply("what time is it?");
    assert_eq!(output_transcript(&messages), reply);
    let chunks: Vec<&Blob> = messages.iter().filter_map(audio_of).collect();
    assert!(chunks.len() > 10);
    for (i, chunk) in chunks.iter().enumerate() {
        assert_eq!(chunk.mime_type, "audio/pcm;rate=24000");
        assert_eq!(chunk.data.len() % 2, 0);
        if i + 1 < chunks.len() {
            assert_eq!(chunk.data.len(), 40 * 24 * 2, "40 ms chunks");
        }
    }
    let audio = audio_samples(&messages);
    let level = rms_dbfs(&audio);
    assert!(level > -20.0, "audible speech: {level} dBFS");
    let seconds = audio.len() as f64 / 24_000.0;
    let words = reply.split_whitespace().count() as f64;
    assert!(
        (0.2..0.45).contains(&(seconds / words)),
        "{seconds} s for {words} words"
    );
    // The transcript leads the audio it describes.
    let first_transcript = position(&messages, |m| m.output_transcription.is_some());
    let first_audio = position(&messages, |m| audio_of(m).is_some());
    assert!(first_transcript < first_audio);
    let usage = position(&messages, |m| m.usage_metadata.is_some());
    assert!(
        messages[..usage]
            .iter()
            .rposition(|m| audio_of(m).is_some())
            < Some(usage)
    );
    assert_eq!(
        messages[usage]
            .usage_metadata
            .as_ref()
            .unwrap()
            .candidates_tokens_details
            .as_ref()
            .unwrap()[0]
            .modality,
        "AUDIO"
    );
    assert!(messages.last().unwrap().turn_complete);
}

#[tokio::test]
async fn partial_content_joins_the_next_turn() {
    let model = SimModel::new(SimConfig::instant());
    let mut connection = model.connect(connect_config(Modality::Text)).await.unwrap();
    send(
        &connection,
        LiveInput::Content {
            content: Content::text("user", "first part"),
            turn_complete: false,
        },
    )
    .await;
    send(&connection, text_turn("second part")).await;
    let messages = turn(&mut connection).await;
    assert_eq!(
        texts(&messages).concat(),
        text_reply("first part second part")
    );
    // The second turn re-reads the first: its prompt is larger.
    send(&connection, text_turn("second part")).await;
    let again = turn(&mut connection).await;
    let prompt = |m: &[LlmResponse]| {
        m.iter()
            .find_map(|m| m.usage_metadata.as_ref())
            .and_then(|u| u.prompt_token_count)
            .unwrap()
    };
    assert!(prompt(&again) > prompt(&messages));
}

#[tokio::test]
async fn speech_is_transcribed_then_echoed_at_one_and_a_half_times_its_length() {
    let model = SimModel::new(SimConfig::instant());
    let mut connection = model
        .connect(connect_config(Modality::Audio))
        .await
        .unwrap();
    let hello = clip("hello.wav");
    let audio = [hello.clone(), silence(1000)].concat();
    feed(&connection.sender, audio.clone());
    let messages = turn(&mut connection).await;

    let (start, end) = vad_cut(&audio);
    let utterance = (end - start) as usize;
    let heard = messages[0]
        .input_transcription
        .as_ref()
        .expect("input transcription first");
    assert_eq!(heard.finished, Some(false));
    assert_eq!(
        heard.text.as_deref(),
        Some(speech_transcript(utterance as f64 / 16_000.0).as_str())
    );
    let echo = audio_samples(&messages);
    assert_eq!(echo.len(), utterance * 3 / 2, "exactly 1.5x the utterance");
    assert_eq!(echo.len(), echo_len(utterance, 16_000));
    // The VAD keeps nearly all of the clip: it only trims the silence at its end.
    assert!(
        utterance <= hello.len() && utterance > hello.len() * 8 / 10,
        "{utterance} of {}",
        hello.len()
    );
    // It is the user's own voice: every third output sample is an input sample.
    for k in 0..echo.len() / 3 {
        assert_eq!(echo[3 * k], audio[start as usize + 2 * k]);
    }
    assert_eq!(
        output_transcript(&messages),
        speech_reply(utterance as f64 / 16_000.0, Modality::Audio)
    );
    assert!(messages.last().unwrap().turn_complete);
}

#[tokio::test]
async fn speech_in_text_modality_is_described_in_text() {
    let model = SimModel::new(SimConfig::instant());
    let mut connection = model.connect(connect_config(Modality::Text)).await.unwrap();
    feed(
        &connection.sender,
        [clip("weather.wav"), silence(1000)].concat(),
    );
    let messages = turn(&mut connection).await;
    assert!(messages[0].input_transcription.is_some());
    assert!(audio_samples(&messages).is_empty());
    let text = texts(&messages).concat();
    assert!(text.starts_with("You said something for 2."), "{text}");
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
    send(
        &connection,
        text_turn("tell me a long story about a lighthouse keeper please"),
    )
    .await;
    while audio_of(&recv(&mut connection).await).is_none() {}

    feed(
        &connection.sender,
        [clip("interrupt.wav"), silence(1000)].concat(),
    );
    // Until `interrupted`: only the first answer, unfinished.
    loop {
        let message = recv(&mut connection).await;
        assert!(!message.turn_complete, "the answer was cut, not finished");
        assert!(message.input_transcription.is_none());
        if message.interrupted {
            assert!(message.content.is_none() && !message.generation_complete);
            break;
        }
    }
    // Then, as Gemini does, `turnComplete` with the usage of what was generated.
    let complete = recv(&mut connection).await;
    assert!(complete.turn_complete, "{complete:?}");
    let usage = complete
        .usage_metadata
        .expect("usage with the turnComplete");
    let candidates = usage.candidates_token_count.unwrap_or(0);
    assert!(
        candidates > 0,
        "some of the answer was generated: {usage:?}"
    );
    assert_eq!(
        usage.total_token_count,
        Some(usage.prompt_token_count.unwrap_or(0) + candidates)
    );
    // After it: nothing of the first answer; the barge-in utterance is heard, then answered.
    let heard = recv(&mut connection).await;
    assert!(
        heard.input_transcription.is_some(),
        "no audio of the interrupted answer after `interrupted`: {heard:?}"
    );
    let answer = recv(&mut connection).await;
    assert!(
        answer.output_transcription.is_some() || audio_of(&answer).is_some(),
        "{answer:?}"
    );
}

#[tokio::test]
async fn manual_activity_delimits_utterances() {
    let model = SimModel::new(SimConfig::instant());
    let mut connection = model.connect(manual_config(Modality::Audio)).await.unwrap();
    // Audio outside an activity is not speech, however loud.
    send(
        &connection,
        LiveInput::audio(pcm_bytes(&clip("count.wav")), 16_000),
    )
    .await;
    send(&connection, LiveInput::ActivityStart).await;
    // Pauses and trailing silence inside the activity do not end it.
    let weather = [clip("weather.wav"), silence(800)].concat();
    for chunk in weather.chunks(1600) {
        send(&connection, LiveInput::audio(pcm_bytes(chunk), 16_000)).await;
    }
    send(&connection, LiveInput::ActivityEnd).await;
    let messages = turn(&mut connection).await;
    assert_eq!(
        messages[0]
            .input_transcription
            .as_ref()
            .and_then(|t| t.text.as_deref()),
        Some(speech_transcript(weather.len() as f64 / 16_000.0).as_str())
    );
    assert_eq!(audio_samples(&messages).len(), weather.len() * 3 / 2);
}

#[tokio::test]
async fn audio_stream_end_flushes_the_utterance() {
    let model = SimModel::new(SimConfig::instant());
    let mut connection = model
        .connect(connect_config(Modality::Audio))
        .await
        .unwrap();
    for chunk in clip("hello.wav").chunks(1600) {
        send(&connection, LiveInput::audio(pcm_bytes(chunk), 16_000)).await;
    }
    send(&connection, LiveInput::AudioStreamEnd).await;
    let messages = turn(&mut connection).await;
    assert!(messages[0].input_transcription.is_some());
    assert!(!audio_samples(&messages).is_empty());
}

#[tokio::test]
async fn resumption_handles_follow_each_turn() {
    let model = SimModel::new(SimConfig::instant());
    let mut config = connect_config(Modality::Text);
    config.session_resumption = Some(SessionResumptionConfig::default());
    let mut connection = model.connect(config.clone()).await.unwrap();
    let mut handles = Vec::new();
    for _ in 0..2 {
        send(&connection, text_turn("hi")).await;
        turn(&mut connection).await;
        let update = recv(&mut connection)
            .await
            .session_resumption_update
            .unwrap();
        assert_eq!(update.resumable, Some(true));
        handles.push(update.new_handle.unwrap());
    }
    assert!(handles[0].starts_with("sim-") && handles[0].ends_with("-1"));
    assert_eq!(handles[1], format!("{}2", handles[0].trim_end_matches('1')));

    // Resuming continues the numbering of the handle.
    config.session_resumption = Some(SessionResumptionConfig {
        handle: Some(handles[1].clone()),
        transparent: None,
    });
    let mut resumed = model.connect(config).await.unwrap();
    send(&resumed, text_turn("hi")).await;
    turn(&mut resumed).await;
    let update = recv(&mut resumed).await.session_resumption_update.unwrap();
    assert_eq!(
        update.new_handle.unwrap(),
        format!("{}3", handles[0].trim_end_matches('1'))
    );
}

#[tokio::test]
async fn a_handle_resumes_the_context_it_was_issued_for_and_unknown_ones_are_refused() {
    let model = SimModel::new(SimConfig::instant());
    let mut config = connect_config(Modality::Text);
    config.session_resumption = Some(SessionResumptionConfig::default());
    let mut connection = model.connect(config.clone()).await.unwrap();
    send(
        &connection,
        text_turn("a first question with several words in it"),
    )
    .await;
    turn(&mut connection).await;
    let handle = recv(&mut connection)
        .await
        .session_resumption_update
        .and_then(|u| u.new_handle)
        .unwrap();

    // A fresh session starts from nothing; the resumed one from what the first turn left.
    let prompt = |messages: &[LlmResponse]| {
        messages
            .iter()
            .find_map(|m| m.usage_metadata.as_ref()?.prompt_token_count)
            .unwrap()
    };
    let mut fresh = model.connect(config.clone()).await.unwrap();
    send(&fresh, text_turn("hi")).await;
    let fresh_prompt = prompt(&turn(&mut fresh).await);
    config.session_resumption = Some(SessionResumptionConfig {
        handle: Some(handle),
        transparent: None,
    });
    let mut resumed = model.connect(config.clone()).await.unwrap();
    send(&resumed, text_turn("hi")).await;
    assert!(prompt(&turn(&mut resumed).await) > fresh_prompt);

    for unknown in ["sim-never-issued-1", "not-a-sim-handle"] {
        config.session_resumption = Some(SessionResumptionConfig {
            handle: Some(unknown.into()),
            transparent: None,
        });
        let refused = model.connect(config.clone()).await;
        assert!(
            matches!(refused, Err(ModelError::Closed { code: 1007, .. })),
            "{unknown}"
        );
    }
}

#[tokio::test]
async fn bad_and_foreign_inputs_are_tolerated() {
    let model = SimModel::new(SimConfig::instant());
    let mut connection = model.connect(connect_config(Modality::Text)).await.unwrap();
    let inputs = [
        LiveInput::audio(Bytes::from_static(&[1, 2, 3]), 16_000),
        LiveInput::audio(Bytes::new(), 16_000),
        LiveInput::Realtime(Blob::new(Bytes::from_static(&[1]), "audio/pcm;rate=banana")),
        LiveInput::Realtime(Blob::new(Bytes::from_static(&[0, 1]), "audio/pcm;rate=0")),
        LiveInput::Realtime(Blob::new(Bytes::from_static(&[0xff; 9]), "image/jpeg")),
        LiveInput::Realtime(Blob::new(Bytes::from_static(&[0xff; 9]), "audio/webm")),
        LiveInput::ToolResponse(vec![FunctionResponse::default()]),
        LiveInput::ActivityStart,
        LiveInput::ActivityEnd,
        LiveInput::AudioStreamEnd,
        LiveInput::Content {
            content: Content::default(),
            turn_complete: false,
        },
    ];
    for input in inputs {
        send(&connection, input).await;
    }
    send(&connection, text_turn("still there?")).await;
    let messages = turn(&mut connection).await;
    assert_eq!(texts(&messages).concat(), text_reply("still there?"));
}

#[tokio::test]
async fn dropping_the_sender_ends_the_connection() {
    let model = SimModel::new(SimConfig::default());
    let LiveConnection {
        sender,
        mut receiver,
    } = model
        .connect(connect_config(Modality::Audio))
        .await
        .unwrap();
    sender.send(text_turn("hello")).await.unwrap();
    drop(sender);
    // Whatever was under way, the connection ends.
    while let Some(message) = timeout(WAIT, receiver.recv()).await.expect("ends in time") {
        message.expect("no error");
    }
}

#[tokio::test]
async fn dropping_the_receiver_ends_the_task() {
    let model = SimModel::new(SimConfig::default());
    let LiveConnection { sender, receiver } = model
        .connect(connect_config(Modality::Audio))
        .await
        .unwrap();
    drop(receiver);
    timeout(WAIT, sender.closed())
        .await
        .expect("the task ends and drops its input");
}

#[tokio::test(start_paused = true)]
async fn real_time_pacing_sends_audio_at_the_speed_of_speech() {
    let model = SimModel::new(SimConfig::default());
    let mut connection = model
        .connect(connect_config(Modality::Audio))
        .await
        .unwrap();
    let t0 = tokio::time::Instant::now();
    send(&connection, text_turn("hello")).await;
    let mut audio_at = Vec::new();
    let mut samples_sent = 0;
    let done_at = loop {
        let message = recv(&mut connection).await;
        let at = t0.elapsed();
        if let Some(blob) = audio_of(&message) {
            audio_at.push((at, samples_sent));
            samples_sent += blob.data.len() / 2;
        }
        if message.turn_complete {
            break at;
        }
    };
    let close = |a: Duration, b: Duration| a.abs_diff(b) <= Duration::from_millis(2);
    // Each chunk leaves when a voice starting after the reply delay would reach it.
    for (at, offset) in &audio_at {
        let expected =
            Duration::from_millis(150) + Duration::from_secs_f64(*offset as f64 / 24_000.0);
        assert!(close(*at, expected), "{at:?} vs {expected:?}");
    }
    let spoken = Duration::from_secs_f64(samples_sent as f64 / 24_000.0);
    assert!(
        close(done_at, Duration::from_millis(150) + spoken),
        "{done_at:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn without_barge_in_the_answer_finishes_before_the_next() {
    let model = SimModel::new(SimConfig::default());
    let mut config = connect_config(Modality::Audio);
    config.realtime_input_config = Some(RealtimeInputConfig {
        automatic_activity_detection: None,
        activity_handling: Some(crate::model::ActivityHandling::NoInterruption),
    });
    let mut connection = model.connect(config).await.unwrap();
    send(&connection, text_turn("hi")).await;
    while audio_of(&recv(&mut connection).await).is_none() {}
    let audio = [clip("weather.wav"), silence(1000)].concat();
    feed(&connection.sender, audio.clone());
    let first = turn(&mut connection).await;
    let second = turn(&mut connection).await;
    assert!(first.iter().chain(&second).all(|m| !m.interrupted));
    assert!(
        first.iter().any(|m| m.input_transcription.is_some()),
        "the utterance is transcribed while the first answer plays"
    );
    let (start, end) = vad_cut(&audio);
    assert_eq!(
        audio_samples(&second).len(),
        echo_len((end - start) as usize, 16_000)
    );
}

#[tokio::test]
async fn the_first_answer_audio_names_the_input_that_ended_the_utterance() {
    let (messages, ended_on) = answer_with_stamped_input(Modality::Audio).await;
    let stamps: Vec<_> = messages
        .iter()
        .filter(|m| audio_of(m).is_some())
        .map(|m| first_part(m).prompted_by)
        .collect();
    assert!(stamps.len() > 1, "{} audio chunks", stamps.len());
    assert_eq!(stamps[0], Some(ended_on), "the first chunk names its input");
    assert!(stamps[1..].iter().all(Option::is_none), "only the first");
}

#[tokio::test]
async fn the_first_answer_text_names_the_input_that_ended_the_utterance() {
    let (messages, ended_on) = answer_with_stamped_input(Modality::Text).await;
    let stamps: Vec<_> = messages
        .iter()
        .filter(|m| m.content.is_some())
        .map(|m| (first_part(m).text.is_some(), first_part(m).prompted_by))
        .collect();
    assert!(stamps.len() > 1, "{} text fragments", stamps.len());
    assert_eq!(
        stamps[0],
        (true, Some(ended_on)),
        "the first text names its input"
    );
    assert!(
        stamps[1..].iter().all(|(_, s)| s.is_none()),
        "only the first"
    );
}

/// The first part of a message with content.
fn first_part(message: &LlmResponse) -> &crate::event::Part {
    &message.content.as_ref().expect("content").parts[0]
}

/// One answer to speech whose chunks are stamped as received 1 ms apart; also returns the stamp
/// of the chunk that ended the utterance (the last of its trailing silence).
async fn answer_with_stamped_input(modality: Modality) -> (Vec<LlmResponse>, std::time::Instant) {
    let model = SimModel::new(SimConfig::instant());
    let mut connection = model.connect(connect_config(modality)).await.unwrap();
    let audio = [clip("hello.wav"), silence(1000)].concat();
    // Chunk i is stamped as received i ms after t0, so a stamp tells which chunk it was.
    let t0 = std::time::Instant::now();
    let sender = connection.sender.clone();
    let chunks: Vec<Vec<i16>> = audio.chunks(320).map(<[i16]>::to_vec).collect();
    // The chunk on which the VAD ends the utterance, fed as the sim is fed.
    let mut vad = default_vad();
    let mut events = Vec::new();
    let ended_on = chunks
        .iter()
        .position(|chunk| {
            vad.push(&super::pcm::to_pcm(chunk), &mut events);
            events.iter().any(|e| matches!(e, VadEvent::End { .. }))
        })
        .expect("the utterance ends within the audio");
    let (_, end) = vad_cut(&audio);
    assert!(ended_on > end as usize / 320, "after the speech itself");
    tokio::spawn(async move {
        for (i, chunk) in chunks.into_iter().enumerate() {
            let blob = Blob {
                received: Some(t0 + Duration::from_millis(i as u64)),
                ..Blob::new(pcm_bytes(&chunk), "audio/pcm;rate=16000")
            };
            if sender.send(LiveInput::Realtime(blob)).await.is_err() {
                return;
            }
        }
    });
    let messages = turn(&mut connection).await;
    (messages, t0 + Duration::from_millis(ended_on as u64))
}

#[tokio::test]
async fn a_non_blocking_call_outlives_new_turns_and_an_interrupt_result_cuts_the_answer() {
    let config = SimConfig {
        reply_delay: Duration::ZERO,
        ..SimConfig::default()
    };
    let mut connect = connect_config(Modality::Audio);
    connect.tools = vec![crate::model::FunctionDeclaration {
        name: "book".into(),
        behavior: Some(crate::model::Behavior::NonBlocking),
        ..Default::default()
    }];
    let mut connection = SimModel::new(config).connect(connect).await.unwrap();
    send(&connection, text_turn("book seat=1")).await;
    let call = loop {
        let message = recv(&mut connection).await;
        if let Some(call) = message.tool_calls.first() {
            break call.clone();
        }
    };
    // It goes on at once, saying the call is running.
    let said = output_transcript(&turn(&mut connection).await);
    assert!(said.contains("book is running"), "{said}");
    // A new turn does not cancel the call: the sim was not waiting for it.
    send(
        &connection,
        text_turn("tell me a long story about a lighthouse keeper please"),
    )
    .await;
    loop {
        let message = recv(&mut connection).await;
        assert!(message.tool_call_cancellations.is_empty(), "{message:?}");
        if audio_of(&message).is_some() {
            break;
        }
    }
    // The story is under way: an INTERRUPT result cuts it and is read out.
    send(
        &connection,
        LiveInput::ToolResponse(vec![FunctionResponse {
            id: call.id.clone(),
            name: "book".into(),
            response: serde_json::json!({"seat": "1"}),
            scheduling: Some(crate::event::Scheduling::Interrupt),
        }]),
    )
    .await;
    while !recv(&mut connection).await.interrupted {}
    let mut said = String::new();
    loop {
        let message = recv(&mut connection).await;
        said += &output_transcript(std::slice::from_ref(&message));
        if message.turn_complete && !said.is_empty() {
            break;
        }
    }
    assert!(said.contains("book returned"), "{said}");
}
