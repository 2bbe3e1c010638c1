//! The model backends' per-message wire work, on the path every session's audio takes: a client
//! PCM frame encoded as the upstream message it becomes (Gemini's `realtimeInput`, OpenAI's
//! `input_audio_buffer.append`), and a server message carrying base64 audio, or a transcription,
//! parsed into the `LlmResponse` the flow gets.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use livegate::model::gemini::wire::{input_text, parse_server_message};
use livegate::model::openai::wire::{Decoder, Encoder, LastAudio};
use livegate::model::LiveInput;

/// PCM16 frames of `ms` milliseconds at `rate`, with sample values that vary like speech so
/// base64 has no runs to be lucky with.
fn pcm(ms: usize, rate: usize) -> Bytes {
    let samples = rate / 1000 * ms;
    (0..samples)
        .flat_map(|i| (((i * 7919) % 20_000) as i16 - 10_000).to_le_bytes())
        .collect::<Vec<u8>>()
        .into()
}

fn bench_gemini_up(c: &mut Criterion) {
    let mut group = c.benchmark_group("gemini_up");
    // 20 ms (the browser's chunk) and 100 ms of 16 kHz microphone audio.
    for ms in [20, 100] {
        let data = pcm(ms, 16_000);
        group.throughput(Throughput::Bytes(data.len() as u64));
        let frame = LiveInput::audio(data, 16_000);
        group.bench_with_input(
            BenchmarkId::new("encode_realtime_audio", ms),
            &frame,
            |b, f| b.iter(|| input_text(black_box(f), false)),
        );
    }
    group.finish();
}

/// A `serverContent` with one inline audio part, as Gemini sends an answer's audio.
fn gemini_audio_message(ms: usize) -> String {
    let data = STANDARD.encode(pcm(ms, 24_000));
    format!(
        r#"{{"serverContent":{{"modelTurn":{{"parts":[{{"inlineData":{{"mimeType":"audio/pcm;rate=24000","data":"{data}"}}}}]}}}}}}"#
    )
}

fn bench_gemini_down(c: &mut Criterion) {
    let mut group = c.benchmark_group("gemini_down");
    // 40 ms (the sim's chunk) and 200 ms (about Gemini's) of 24 kHz answer audio.
    for ms in [40, 200] {
        let message = gemini_audio_message(ms);
        group.throughput(Throughput::Bytes(ms as u64 * 48));
        group.bench_with_input(BenchmarkId::new("parse_audio", ms), &message, |b, m| {
            b.iter(|| parse_server_message(black_box(m.as_bytes()), "gemini-live"))
        });
    }
    let transcript =
        r#"{"serverContent":{"outputTranscription":{"text":" the lighthouse keeper"}}}"#;
    group.throughput(Throughput::Elements(1));
    group.bench_function("parse_transcription", |b| {
        b.iter(|| parse_server_message(black_box(transcript.as_bytes()), "gemini-live"))
    });
    group.finish();
}

fn bench_openai(c: &mut Criterion) {
    let mut group = c.benchmark_group("openai");
    // At 24 kHz the encoder only wraps the PCM in base64 JSON; at 16 kHz (what clients send) it
    // resamples first.
    for (rate, name) in [(24_000, "encode_append_24k"), (16_000, "encode_append_16k")] {
        let data = pcm(20, rate);
        group.throughput(Throughput::Bytes(data.len() as u64));
        let frame = LiveInput::audio(data, rate as u32);
        let mut encoder = Encoder::new(false, LastAudio::default());
        group.bench_function(BenchmarkId::new(name, 20), |b| {
            b.iter(|| encoder.encode(black_box(frame.clone())))
        });
    }
    for ms in [40, 200] {
        let delta = STANDARD.encode(pcm(ms, 24_000));
        let event = format!(
            r#"{{"type":"response.output_audio.delta","event_id":"event_1","response_id":"resp_1","item_id":"item_1","output_index":0,"content_index":0,"delta":"{delta}"}}"#
        );
        group.throughput(Throughput::Bytes(ms as u64 * 48));
        let mut decoder = Decoder::new(
            "gpt-realtime",
            true,
            Duration::from_millis(500),
            LastAudio::default(),
        );
        let now = tokio::time::Instant::now();
        group.bench_function(BenchmarkId::new("parse_audio_delta", ms), |b| {
            b.iter(|| decoder.decode(black_box(event.as_bytes()), now))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_gemini_up, bench_gemini_down, bench_openai);
criterion_main!(benches);
