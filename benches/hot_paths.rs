//! Hot paths of one audio chunk: client frame decode and metering (up), event encode (audio in
//! binary and base64, transcription, text) and metering (down), the live flow's response
//! processing, an answer chunk's whole way from the model to the socket's bytes, the sim's voice
//! activity detection per 20 ms frame; and the session store's commit of the events a turn leaves.
//! The model backends' wire work is in `benches/gemini.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use livegate::event::{Blob, Content, Event, Transcription};
use livegate::gateway::{
    decode_binary, decode_text, encode_event, AudioEncoding, InputAudioBlocks, SOCKET_WRITE_BUFFER,
};
use livegate::live::flow::{AudioCache, AudioSide, ResponseProcessor, Step};
use livegate::model::LlmResponse;
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

fn audio_event() -> Event {
    // 40 ms of 24 kHz PCM16, the sim's chunk size.
    let pcm = Bytes::from(vec![7u8; 1920]);
    Event {
        model_version: Some("sim".into()),
        content: Some(Content::blob(
            "model",
            Blob::new(pcm, "audio/pcm;rate=24000"),
        )),
        ..Event::new("e-00000000-0000-4000-8000-000000000001", "assistant")
    }
}

/// A server-side WebSocket over a stream that takes every byte and has nothing to read, with the
/// gateway's write buffer: what framing and buffering cost short of the `send` system call.
fn socket() -> WebSocket<Discard> {
    let config = WebSocketConfig::default().write_buffer_size(SOCKET_WRITE_BUFFER);
    WebSocket::from_raw_socket(Discard, Role::Server, Some(config))
}

/// Accepts all writes, reads nothing yet.
struct Discard;

impl std::io::Read for Discard {
    fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::WouldBlock.into())
    }
}

impl std::io::Write for Discard {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(black_box(buf).len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn bench_down(c: &mut Criterion) {
    let mut group = c.benchmark_group("downstream");
    group.throughput(Throughput::Bytes(1920));
    let event = audio_event();
    group.bench_function("encode_audio_event_binary", |b| {
        b.iter(|| encode_event(black_box(event.clone()), AudioEncoding::Binary))
    });
    group.bench_function("encode_audio_event_base64", |b| {
        b.iter(|| encode_event(black_box(event.clone()), AudioEncoding::Base64))
    });
    let transcript = Event {
        partial: Some(true),
        output_transcription: Some(Transcription::new(" lighthouse", false)),
        ..Event::new("e-00000000-0000-4000-8000-000000000001", "assistant")
    };
    group.bench_function("encode_transcription_event", |b| {
        b.iter(|| encode_event(black_box(transcript.clone()), AudioEncoding::Binary))
    });
    // A chunk of a model's answer in text (a TEXT-modality run streams these as partials).
    let text = Event {
        partial: Some(true),
        model_version: Some("sim".into()),
        content: Some(Content::text("model", "The lighthouse keeper ")),
        ..Event::new("e-00000000-0000-4000-8000-000000000001", "assistant")
    };
    group.bench_function("encode_text_event", |b| {
        b.iter(|| encode_event(black_box(text.clone()), AudioEncoding::Binary))
    });
    // What the gateway counts for `/metrics` per event of a run (kind, error code, artifacts).
    let meter = livegate::gateway::metrics::Metrics::default().meter();
    group.bench_function("meter_audio_event", |b| {
        b.iter(|| meter.event(black_box(&event)))
    });
    // The model's message carrying that chunk.
    let response = LlmResponse {
        content: event.content.clone(),
        model_version: Some("sim".into()),
        ..LlmResponse::default()
    };
    group.bench_function("process_audio_response", |b| {
        let mut processor = ResponseProcessor::new("e-1", "assistant", false);
        b.iter(|| processor.process(black_box(response.clone())))
    });
    // The whole way of one answer chunk from the model to the socket's bytes: the flow's
    // response processing, the `/metrics` count, the encoding, and the WebSocket framing of its
    // binary and text frames into the write buffer, as the writer feeds them and flushes.
    group.bench_function("forward_audio_chunk", |b| {
        let mut processor = ResponseProcessor::new("e-1", "assistant", false);
        let mut socket = socket();
        b.iter(|| {
            for step in processor.process(black_box(response.clone())) {
                if let Step::Emit(event) = step {
                    meter.event(&event);
                    if let Ok(frame) = encode_event(event, AudioEncoding::Binary) {
                        if let Some(pcm) = frame.binary {
                            let _ = socket.write(Message::Binary(pcm));
                        }
                        let _ = socket.write(Message::Text(frame.json.into()));
                    }
                }
            }
            let _ = socket.flush();
        })
    });
    group.bench_function("record_audio_chunk", |b| {
        let blob = Blob::new(Bytes::from(vec![7u8; 1920]), "audio/pcm;rate=24000");
        let mut cache = AudioCache::default();
        let mut n = 0u32;
        b.iter(|| {
            cache.push(AudioSide::Output, black_box(&blob));
            // Start a fresh turn now and then, as a flush would, so the cache stays turn-sized.
            n += 1;
            if n.is_multiple_of(1000) {
                cache = AudioCache::default();
            }
        })
    });
    group.finish();
}

fn bench_up(c: &mut Criterion) {
    let mut group = c.benchmark_group("upstream");
    let pcm = Bytes::from(vec![3u8; 640]);
    group.throughput(Throughput::Bytes(640));
    // Decoded frames live on: the recording and the model each hold one for about two seconds.
    let mut kept = std::collections::VecDeque::with_capacity(101);
    let mut blocks = InputAudioBlocks::default();
    group.bench_function("decode_binary_audio_frame", |b| {
        b.iter(|| {
            if let Ok(request) = decode_binary(black_box(&pcm), &mut blocks) {
                if let Some(blob) = request.blob {
                    kept.push_back((blob.data.clone(), blob));
                    if kept.len() > 100 {
                        kept.pop_front();
                    }
                }
            }
        })
    });
    let json = format!(
        r#"{{"type":"audio","data":"{}"}}"#,
        livegate::event::encode_base64(&pcm)
    );
    group.bench_function("decode_base64_audio_frame", |b| {
        b.iter(|| decode_text(black_box(&json)))
    });
    // What the reader counts for `/metrics` per client frame.
    let meter = livegate::gateway::metrics::Metrics::default().meter();
    group.bench_function("meter_received_frame", |b| {
        b.iter(|| meter.received(black_box(true), black_box(640)))
    });
    group.bench_function("decode_text_frame", |b| {
        b.iter(|| {
            decode_text(black_box(
                r#"{"type":"text","text":"what time is it in Tokyo?"}"#,
            ))
        })
    });
    group.finish();
}

fn bench_sim(c: &mut Criterion) {
    use livegate::model::sim::pcm::Pcm;
    use livegate::model::sim::vad::{Vad, VadSettings};
    use livegate::model::sim::voice::{Echo, Voice};
    let mut group = c.benchmark_group("sim");
    group.throughput(Throughput::Bytes(640));
    // 20 ms of 16 kHz speech-like audio: loud enough to count as speech.
    let samples: Vec<i16> = (0..320).map(|i| ((i % 40) as i16 - 20) * 500).collect();
    let frame: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    let settings = VadSettings {
        threshold_dbfs: -40.0,
        min_speech_ms: 100,
        silence_ms: 500,
    };
    group.bench_function("vad_20ms_frame", |b| {
        let mut vad = Vad::new(settings, 16_000);
        let mut events = Vec::new();
        b.iter(|| {
            vad.push(black_box(&frame), &mut events);
            events.clear();
        })
    });

    // The voice echo of a 3 s utterance, kept as the 20 ms frames it arrived in, rendered one
    // 200 ms answer chunk (4,800 samples at 24 kHz) at a time, as the sim sends it.
    group.throughput(Throughput::Bytes(9_600));
    let mut utterance = Pcm::default();
    for k in 0..150 {
        let frame: Vec<u8> = (0..320)
            .flat_map(|i: i32| (((k * 320 + i) * 7919 % 20_000 - 10_000) as i16).to_le_bytes())
            .collect();
        utterance.push(Bytes::from(frame));
    }
    let echo = Voice::Echo(Echo::new(utterance, 16_000));
    group.bench_function("echo_200ms_chunk", |b| {
        b.iter(|| black_box(&echo).render(black_box(24_000), 28_800))
    });
    group.finish();
}

fn bench_sessions(c: &mut Criterion) {
    use futures::future::join_all;
    use livegate::session::{SessionService, SqliteSessionService};

    // As at 1,000 live sessions: many sessions, each committing a turn's events at about the
    // same time as others (so the store's writer batches them).
    const SESSIONS: usize = 1000;
    const AT_ONCE: usize = 64;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = tempfile::tempdir().expect("a temp dir");
    let (store, sessions) = runtime.block_on(async {
        let store = SqliteSessionService::open(dir.path().join("bench.db"))
            .await
            .expect("the store opens");
        let mut sessions = Vec::with_capacity(SESSIONS);
        for i in 0..SESSIONS {
            let id = format!("s{i}");
            let session = store
                .create_session("bench", "load", Some(&id), Default::default())
                .await
                .expect("a session");
            sessions.push(tokio::sync::Mutex::new(session));
        }
        (store, sessions)
    });
    // One append to session `i` (of the ring), as a turn's event would be.
    let append = |i: usize| {
        let (store, sessions) = (&store, &sessions);
        async move {
            let mut event = Event::new("e-00000000-0000-4000-8000-000000000001", "user");
            event.input_transcription = Some(Transcription::new("[speech 2.54 s]", true));
            let mut session = sessions[i % SESSIONS].lock().await;
            session.events.clear();
            store
                .append_event(&mut session, event)
                .await
                .expect("committed");
        }
    };
    let mut group = c.benchmark_group("sessions");
    group.throughput(Throughput::Elements(AT_ONCE as u64));
    let mut next = 0usize;
    group.bench_function("sqlite_append_64_sessions_at_once", |b| {
        b.to_async(&runtime).iter(|| {
            let first = next;
            next = (next + AT_ONCE) % SESSIONS;
            join_all((first..first + AT_ONCE).map(append))
        })
    });
    // At lower load a session's events mostly reach the store alone: one transaction each.
    group.throughput(Throughput::Elements(1));
    group.bench_function("sqlite_append_one_at_a_time", |b| {
        b.to_async(&runtime).iter(|| {
            next = (next + 1) % SESSIONS;
            append(next)
        })
    });
    // A turn's end brings six events of one session at once (usage, both transcriptions, both
    // recordings, `turnComplete`): committed one after the other, or handed over together.
    const TURN: usize = 6;
    let commit_turn = |i: usize, together: bool| {
        let (store, session) = (&store, &sessions[i % SESSIONS]);
        async move {
            let turn = (0..TURN).map(|_| {
                let mut event = Event::new("e-00000000-0000-4000-8000-000000000001", "assistant");
                event.output_transcription = Some(Transcription::new("You said something.", true));
                event
            });
            let mut session = session.lock().await;
            session.events.clear();
            if together {
                for outcome in store.append_events(&mut session, turn.collect()).await {
                    outcome.expect("committed");
                }
            } else {
                for event in turn {
                    store
                        .append_event(&mut session, event)
                        .await
                        .expect("committed");
                }
            }
        }
    };
    group.throughput(Throughput::Elements(TURN as u64));
    group.bench_function("sqlite_append_a_turn_one_by_one", |b| {
        b.to_async(&runtime).iter(|| {
            next = (next + 1) % SESSIONS;
            commit_turn(next, false)
        })
    });
    group.bench_function("sqlite_append_a_turn_at_once", |b| {
        b.to_async(&runtime).iter(|| {
            next = (next + 1) % SESSIONS;
            commit_turn(next, true)
        })
    });
    group.finish();
}

criterion_group!(benches, bench_down, bench_up, bench_sim, bench_sessions);
criterion_main!(benches);
