//! The OpenAI Realtime wire mapping against GA-shaped events (upstream-protocols reference, B).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::wire::{history_events, session_update, Action, Decoder, Encoder, LastAudio, Vad};
use super::*;
use crate::event::{Content, FunctionResponse, Scheduling};
use crate::model::{
    AutomaticActivityDetection, FunctionDeclaration, LiveConnectConfig, LiveInput, LlmResponse,
    Modality, RealtimeInputConfig,
};

const LEAD: Duration = Duration::from_millis(500);

fn decoder() -> Decoder {
    Decoder::new("gpt-realtime", true, LEAD, LastAudio::default())
}

fn responses(actions: Vec<Action>) -> Vec<LlmResponse> {
    actions
        .into_iter()
        .filter_map(|a| match a {
            Action::Respond(r) => Some(*r),
            _ => None,
        })
        .collect()
}

fn feed(d: &mut Decoder, event: Value, now: Instant) -> Vec<Action> {
    d.decode(event.to_string().as_bytes(), now)
        .expect("decodes")
}

fn parsed(events: Vec<String>) -> Vec<Value> {
    events
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

#[test]
fn model_names_pick_the_backend_and_stay_plain() {
    for name in [
        "gpt-realtime",
        "gpt-realtime-mini",
        "gpt-4o-realtime-preview-2024-12-17",
        "gpt-4o-mini-realtime-preview",
        "openai:my-azure-deployment",
    ] {
        assert!(is_openai_model(name), "{name}");
    }
    assert!(!is_openai_model(
        "gemini-2.5-flash-native-audio-preview-12-2025"
    ));
    assert!(!is_openai_model("gpt-4o"));
    let model = OpenAiModel::new("openai:my-deployment", OpenAiOptions::default()).unwrap();
    assert_eq!(model.name(), "my-deployment");
    assert!(OpenAiModel::new("openai:a&b=c", OpenAiOptions::default()).is_err());
    assert!(OpenAiModel::new("openai:", OpenAiOptions::default()).is_err());
}

#[test]
fn urls_and_the_key_header_for_openai_and_azure() {
    let mut options = OpenAiOptions {
        api_key: Some(Secret::new("sk-test")),
        ..OpenAiOptions::default()
    };
    assert_eq!(
        options.url("gpt-realtime"),
        "wss://api.openai.com/v1/realtime?model=gpt-realtime"
    );
    assert_eq!(
        options.headers(),
        vec![("authorization", "Bearer sk-test".to_owned())]
    );
    options.base_url = "http://127.0.0.1:9400".into();
    assert_eq!(
        options.url("gpt-realtime"),
        "ws://127.0.0.1:9400/v1/realtime?model=gpt-realtime"
    );
    options.base_url = "https://contoso.openai.azure.com/openai/v1/".into();
    assert!(options.is_azure());
    assert_eq!(
        options.url("my-deployment"),
        "wss://contoso.openai.azure.com/openai/v1/realtime?model=my-deployment"
    );
    assert_eq!(options.headers(), vec![("api-key", "sk-test".to_owned())]);
    options.base_url = "ws://127.0.0.1:9400".into();
    assert!(!options.is_azure());
    options.azure = true;
    assert_eq!(options.headers()[0].0, "api-key");
    assert!(
        !format!("{options:?}").contains("sk-test"),
        "the key is redacted"
    );
}

#[test]
fn session_update_carries_the_agent_and_the_live_settings() {
    let config = LiveConnectConfig {
        model: "gpt-realtime".into(),
        system_instruction: Some("Be brief.".into()),
        tools: vec![FunctionDeclaration {
            name: "get_weather".into(),
            description: "Weather in a city".into(),
            parameters_json_schema: Some(Arc::new(
                json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            )),
            behavior: None,
        }],
        response_modalities: vec![Modality::Audio],
        speech_config: Some(crate::model::SpeechConfig {
            voice_name: Some("Marin".into()),
            language_code: None,
        }),
        input_audio_transcription: true,
        output_audio_transcription: true,
        realtime_input_config: Some(RealtimeInputConfig {
            automatic_activity_detection: Some(AutomaticActivityDetection {
                silence_duration_ms: Some(700),
                ..AutomaticActivityDetection::default()
            }),
            activity_handling: None,
        }),
        ..LiveConnectConfig::default()
    };
    let update = session_update(&config, Vad::Server);
    let session = &update["session"];
    assert_eq!(update["type"], "session.update");
    assert_eq!(session["type"], "realtime");
    assert_eq!(session["instructions"], "Be brief.");
    assert_eq!(session["output_modalities"], json!(["audio"]));
    assert_eq!(
        session["audio"]["input"]["format"],
        json!({"type": "audio/pcm", "rate": 24000})
    );
    assert_eq!(
        session["audio"]["input"]["transcription"]["model"],
        wire::TRANSCRIPTION_MODEL
    );
    let vad = &session["audio"]["input"]["turn_detection"];
    assert_eq!(vad["type"], "server_vad");
    assert_eq!(vad["silence_duration_ms"], 700);
    assert_eq!(vad["interrupt_response"], true);
    assert_eq!(session["audio"]["output"]["voice"], "marin");
    assert_eq!(session["tools"][0]["type"], "function");
    assert_eq!(
        session["tools"][0]["parameters"]["properties"]["city"]["type"],
        "string"
    );

    let semantic = session_update(&config, Vad::Semantic);
    assert_eq!(
        semantic["session"]["audio"]["input"]["turn_detection"]["type"],
        "semantic_vad"
    );

    // Text answers, no transcription, manual activity, a Gemini voice OpenAI does not have.
    let manual = LiveConnectConfig {
        response_modalities: vec![Modality::Text],
        speech_config: Some(crate::model::SpeechConfig {
            voice_name: Some("Puck".into()),
            language_code: None,
        }),
        input_audio_transcription: false,
        realtime_input_config: Some(RealtimeInputConfig {
            automatic_activity_detection: Some(AutomaticActivityDetection {
                disabled: Some(true),
                ..AutomaticActivityDetection::default()
            }),
            activity_handling: None,
        }),
        ..LiveConnectConfig::default()
    };
    let session = &session_update(&manual, Vad::Server)["session"];
    assert_eq!(session["output_modalities"], json!(["text"]));
    assert!(session["audio"]["input"]["turn_detection"].is_null());
    assert!(session["audio"]["input"]["transcription"].is_null());
    assert!(session["audio"]["output"].get("voice").is_none());
    assert!(session.get("tools").is_none());
}

#[test]
fn history_is_seeded_as_items_and_answered_when_the_user_spoke_last() {
    let config = LiveConnectConfig {
        history: vec![
            Content::text("user", "hi"),
            Content::text("model", "hello"),
            Content::text("user", "and now?"),
        ],
        ..LiveConnectConfig::default()
    };
    let events = history_events(&config);
    assert_eq!(events.len(), 4);
    assert_eq!(events[1]["item"]["role"], "assistant");
    assert_eq!(events[1]["item"]["content"][0]["type"], "output_text");
    assert_eq!(events[3]["type"], "response.create");
}

#[test]
fn text_turns_tool_results_and_manual_activity_ask_for_responses() {
    let mut encoder = Encoder::new(true, LastAudio::default());
    let text = parsed(encoder.encode(LiveInput::Content {
        content: Content::text("user", "hello"),
        turn_complete: true,
    }));
    assert_eq!(text[0]["type"], "conversation.item.create");
    assert_eq!(
        text[0]["item"]["content"][0],
        json!({"type": "input_text", "text": "hello"})
    );
    assert_eq!(text[1]["type"], "response.create");

    let partial = parsed(encoder.encode(LiveInput::Content {
        content: Content::text("user", "more"),
        turn_complete: false,
    }));
    assert_eq!(partial.len(), 1, "no answer for a partial turn");

    // With no response under way (a connection's decoder says when one is).
    let results = parsed(
        Encoder::new(true, LastAudio::default()).encode(LiveInput::ToolResponse(vec![
            FunctionResponse {
                id: Some("call_1".into()),
                name: "a".into(),
                response: json!({"temp_c": 12}),
                scheduling: None,
            },
            FunctionResponse {
                id: Some("call_2".into()),
                name: "b".into(),
                response: json!({"ok": true}),
                scheduling: None,
            },
        ])),
    );
    assert_eq!(
        results.len(),
        3,
        "one output per call, then one response.create"
    );
    assert_eq!(results[0]["item"]["type"], "function_call_output");
    assert_eq!(results[0]["item"]["call_id"], "call_1");
    assert_eq!(results[0]["item"]["output"], "{\"temp_c\":12}");
    assert_eq!(results[2]["type"], "response.create");

    let start = parsed(encoder.encode(LiveInput::ActivityStart));
    assert_eq!(start[0]["type"], "input_audio_buffer.clear");
    // 30 ms at 16 kHz: one 20 ms chunk out now, the rest at the end of the activity.
    let audio = parsed(encoder.encode(LiveInput::audio(Bytes::from(vec![0u8; 960]), 16_000)));
    assert_eq!(audio[0]["type"], "input_audio_buffer.append");
    let end = parsed(encoder.encode(LiveInput::ActivityEnd));
    let kinds: Vec<&str> = end.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "input_audio_buffer.append",
            "input_audio_buffer.commit",
            "response.create"
        ]
    );

    // With server-side detection, activity signals are not sent.
    let mut automatic = Encoder::new(false, LastAudio::default());
    assert!(automatic.encode(LiveInput::ActivityEnd).is_empty());
}

#[test]
fn client_audio_is_resampled_to_24_khz() {
    use base64::Engine;
    let mut encoder = Encoder::new(false, LastAudio::default());
    let mut bytes = 0;
    // One second of 16 kHz audio in 20 ms frames.
    for _ in 0..50 {
        for event in parsed(encoder.encode(LiveInput::audio(Bytes::from(vec![0u8; 640]), 16_000))) {
            let audio = event["audio"].as_str().unwrap();
            bytes += base64::engine::general_purpose::STANDARD
                .decode(audio)
                .unwrap()
                .len();
        }
    }
    assert_eq!(bytes, 48_000, "one second at 24 kHz");
    // 24 kHz audio passes through untouched.
    let same = parsed(encoder.encode(LiveInput::audio(Bytes::from(vec![1u8; 960]), 24_000)));
    assert_eq!(same[0]["audio"].as_str().unwrap().len(), 1280);
}

#[test]
fn output_audio_text_and_transcripts_become_gemini_shaped_responses() {
    let mut d = decoder();
    let now = Instant::now();
    assert_eq!(
        feed(
            &mut d,
            json!({"type": "session.created", "session": {}}),
            now
        ),
        vec![Action::Session]
    );
    assert!(feed(
        &mut d,
        json!({"type": "response.created", "response": {"id": "r1"}}),
        now
    )
    .is_empty());
    let audio = responses(feed(
        &mut d,
        json!({"type": "response.output_audio.delta", "item_id": "i1", "delta": "AQACAA=="}),
        now,
    ));
    let blob = audio[0].content.as_ref().unwrap().parts[0]
        .inline_data
        .clone()
        .unwrap();
    assert_eq!(blob.data, Bytes::from_static(&[1, 0, 2, 0]));
    assert_eq!(blob.mime_type, "audio/pcm;rate=24000");
    assert_eq!(audio[0].model_version.as_deref(), Some("gpt-realtime"));

    let said = responses(feed(
        &mut d,
        json!({"type": "response.output_audio_transcript.delta", "delta": "Hi"}),
        now,
    ));
    assert_eq!(
        said[0]
            .output_transcription
            .as_ref()
            .unwrap()
            .text
            .as_deref(),
        Some("Hi")
    );
    let done = responses(feed(
        &mut d,
        json!({"type": "response.output_audio_transcript.done", "transcript": "Hi"}),
        now,
    ));
    assert_eq!(
        done[0].output_transcription.as_ref().unwrap().finished,
        Some(true)
    );
    assert_eq!(
        done[0].output_transcription.as_ref().unwrap().text,
        None,
        "no second copy"
    );

    let text = responses(feed(
        &mut d,
        json!({"type": "response.output_text.delta", "delta": "Yes"}),
        now,
    ));
    assert_eq!(text[0].content.as_ref().unwrap().joined_text(), "Yes");

    let end = responses(feed(
        &mut d,
        json!({"type": "response.done", "response": {"id": "r1", "status": "completed", "usage": {
            "total_tokens": 30, "input_tokens": 20, "output_tokens": 10,
            "input_token_details": {"text_tokens": 5, "audio_tokens": 15, "cached_tokens": 0},
            "output_token_details": {"text_tokens": 2, "audio_tokens": 8}}}}),
        now,
    ));
    assert!(end[0].turn_complete);
    let usage = end[0].usage_metadata.as_ref().unwrap();
    assert_eq!(
        (
            usage.prompt_token_count,
            usage.candidates_token_count,
            usage.total_token_count
        ),
        (Some(20), Some(10), Some(30))
    );
    assert_eq!(
        usage.prompt_tokens_details.as_ref().unwrap()[1].modality,
        "AUDIO"
    );
    assert_eq!(
        usage.candidates_tokens_details.as_ref().unwrap()[1].token_count,
        8
    );
}

#[test]
fn input_transcripts_are_fragments_then_finished_without_repeats() {
    let mut d = decoder();
    let now = Instant::now();
    let delta = |t: &str| json!({"type": "conversation.item.input_audio_transcription.delta", "item_id": "u1", "delta": t});
    let a = responses(feed(&mut d, delta("What's"), now));
    assert_eq!(
        a[0].input_transcription.as_ref().unwrap().text.as_deref(),
        Some("What's")
    );
    feed(&mut d, delta(" the"), now);
    let done = responses(feed(
        &mut d,
        json!({"type": "conversation.item.input_audio_transcription.completed", "item_id": "u1", "transcript": "What's the time?"}),
        now,
    ));
    let t = done[0].input_transcription.as_ref().unwrap();
    assert_eq!(
        (t.text.as_deref(), t.finished),
        (Some(" time?"), Some(true))
    );
    // whisper-1 gives no deltas: the whole transcript arrives at once.
    let whole = responses(feed(
        &mut d,
        json!({"type": "conversation.item.input_audio_transcription.completed", "item_id": "u2", "transcript": "Hello."}),
        now,
    ));
    assert_eq!(
        whole[0]
            .input_transcription
            .as_ref()
            .unwrap()
            .text
            .as_deref(),
        Some("Hello.")
    );
}

#[test]
fn barge_in_interrupts_and_truncates_at_what_the_client_was_sent() {
    let mut d = decoder();
    let start = Instant::now();
    feed(
        &mut d,
        json!({"type": "response.created", "response": {"id": "r1"}}),
        start,
    );
    // Ten seconds of audio arrive at once (a model faster than real time).
    let second = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        vec![0u8; 48_000],
    );
    for _ in 0..10 {
        feed(
            &mut d,
            json!({"type": "response.output_audio.delta", "item_id": "item_a", "delta": second}),
            start,
        );
    }
    // Two seconds later the user speaks: the writer sent 2 s plus its lead, not all ten.
    let actions = feed(
        &mut d,
        json!({"type": "input_audio_buffer.speech_started", "audio_start_ms": 1000, "item_id": "u2"}),
        start + Duration::from_secs(2),
    );
    assert_eq!(
        actions[0],
        Action::Send(
            json!({"type": "conversation.item.truncate", "item_id": "item_a", "content_index": 0, "audio_end_ms": 2500})
        )
    );
    let interrupted = responses(actions);
    assert!(interrupted[0].interrupted && !interrupted[0].turn_complete);
    // The server cancels the response: the turn ends, without a second `interrupted`.
    let end = responses(feed(
        &mut d,
        json!({"type": "response.done", "response": {"status": "cancelled", "status_details": {"type": "cancelled", "reason": "turn_detected"}}}),
        start + Duration::from_secs(2),
    ));
    assert!(end[0].turn_complete && !end[0].interrupted);
    // Speech with nothing generating or playing interrupts nothing.
    let quiet = feed(
        &mut d,
        json!({"type": "input_audio_buffer.speech_started", "item_id": "u3"}),
        start + Duration::from_secs(30),
    );
    assert!(quiet.is_empty());
}

#[test]
fn short_audio_is_truncated_at_its_end() {
    let mut d = decoder();
    let start = Instant::now();
    feed(&mut d, json!({"type": "response.created"}), start);
    let tenth =
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, vec![0u8; 4_800]);
    feed(
        &mut d,
        json!({"type": "response.output_audio.delta", "item_id": "b", "delta": tenth}),
        start,
    );
    let actions = feed(
        &mut d,
        json!({"type": "input_audio_buffer.speech_started"}),
        start + Duration::from_millis(50),
    );
    assert_eq!(actions[0], Action::Send(wire::truncate("b", 100)));
}

#[test]
fn function_calls_wait_for_response_done_and_do_not_end_the_turn() {
    let mut d = decoder();
    let now = Instant::now();
    feed(&mut d, json!({"type": "response.created"}), now);
    let held = feed(
        &mut d,
        json!({"type": "response.function_call_arguments.done", "call_id": "call_9", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}", "item_id": "fc", "response_id": "r"}),
        now,
    );
    assert!(held.is_empty());
    let done = responses(feed(
        &mut d,
        json!({"type": "response.done", "response": {"status": "completed", "usage": {"total_tokens": 5}}}),
        now,
    ));
    assert!(
        !done[0].turn_complete,
        "the model answers once it has the result"
    );
    assert_eq!(done[0].tool_calls[0].id.as_deref(), Some("call_9"));
    assert_eq!(done[0].tool_calls[0].args, Some(json!({"city": "Oslo"})));
}

#[test]
fn errors_are_in_band_with_adk_codes() {
    let mut d = decoder();
    let now = Instant::now();
    let cases = [
        (
            json!({"type": "invalid_request_error", "code": "invalid_value", "message": "bad"}),
            "INVALID_ARGUMENT",
        ),
        (
            json!({"type": "server_error", "message": "oops"}),
            "INTERNAL",
        ),
        (
            json!({"type": "invalid_request_error", "code": "session_expired", "message": "60 minutes"}),
            "DEADLINE_EXCEEDED",
        ),
        (json!({"type": "rate_limit_error"}), "RESOURCE_EXHAUSTED"),
    ];
    for (error, code) in cases {
        let out = responses(feed(
            &mut d,
            json!({"type": "error", "event_id": "e", "error": error}),
            now,
        ));
        assert_eq!(out[0].error_code.as_deref(), Some(code));
        assert!(out[0]
            .error_message
            .as_deref()
            .unwrap()
            .starts_with("OpenAI "));
    }
    let failed = responses(feed(
        &mut d,
        json!({"type": "response.done", "response": {"status": "failed", "status_details": {"type": "failed", "error": {"type": "server_error", "message": "boom"}}}}),
        now,
    ));
    assert!(failed[0].turn_complete);
    assert_eq!(failed[0].error_code.as_deref(), Some("INTERNAL"));
    assert!(matches!(
        d.decode(b"not json", now),
        Err(ModelError::Protocol(_))
    ));
    assert!(feed(
        &mut d,
        json!({"type": "rate_limits.updated", "rate_limits": []}),
        now
    )
    .is_empty());
}

#[test]
fn an_answer_still_generating_is_truncated_even_if_its_audio_came_slowly() {
    let mut d = decoder();
    let start = Instant::now();
    feed(&mut d, json!({"type": "response.created"}), start);
    // 100 ms of audio, then the model stalls for a second: the client's playback ran dry.
    let tenth =
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, vec![0u8; 4_800]);
    feed(
        &mut d,
        json!({"type": "response.output_audio.delta", "item_id": "slow", "delta": tenth}),
        start,
    );
    let actions = feed(
        &mut d,
        json!({"type": "input_audio_buffer.speech_started"}),
        start + Duration::from_secs(1),
    );
    assert_eq!(actions[0], Action::Send(wire::truncate("slow", 100)));
}

#[test]
fn the_answer_to_an_utterance_carries_when_its_last_audio_was_read() {
    let last_audio = LastAudio::default();
    let mut encoder = Encoder::new(false, last_audio.clone());
    let mut d = Decoder::new("gpt-realtime", true, LEAD, last_audio);
    let read = Instant::now();
    let mut blob = crate::event::Blob::new(Bytes::from(vec![0u8; 640]), "audio/pcm;rate=16000");
    blob.received = Some(read.into_std());
    encoder.encode(LiveInput::Realtime(blob));
    feed(
        &mut d,
        json!({"type": "input_audio_buffer.speech_stopped", "item_id": "u"}),
        read,
    );
    feed(&mut d, json!({"type": "response.created"}), read);
    let first = responses(feed(
        &mut d,
        json!({"type": "response.output_audio.delta", "item_id": "a", "delta": "AAA="}),
        read,
    ));
    assert_eq!(
        first[0].content.as_ref().unwrap().parts[0].prompted_by,
        Some(read.into_std())
    );
    let second = responses(feed(
        &mut d,
        json!({"type": "response.output_audio.delta", "item_id": "a", "delta": "AAA="}),
        read,
    ));
    assert_eq!(
        second[0].content.as_ref().unwrap().parts[0].prompted_by,
        None,
        "only the first"
    );
}

fn tool_config() -> LiveConnectConfig {
    let tool = |name: &str, behavior| FunctionDeclaration {
        name: name.into(),
        behavior,
        ..FunctionDeclaration::default()
    };
    LiveConnectConfig {
        tools: vec![
            tool("book", Some(crate::model::Behavior::NonBlocking)),
            tool("lookup", None),
        ],
        ..LiveConnectConfig::default()
    }
}

/// A decoder and an encoder sharing their tool exchange, as one connection's do.
fn emulating() -> (Decoder, Encoder) {
    let exchange = wire::ToolExchange::default();
    let decoder = decoder().with_tools(&tool_config(), exchange.clone());
    let encoder = Encoder::new(false, LastAudio::default()).with_tools(exchange);
    (decoder, encoder)
}

/// A response calling `name` as `call_id`, decoded.
fn calling(d: &mut Decoder, name: &str, call_id: &str) -> Vec<Action> {
    let now = Instant::now();
    feed(
        d,
        json!({"type": "response.created", "response": {"id": "r1"}}),
        now,
    );
    feed(
        d,
        json!({"type": "response.function_call_arguments.done", "call_id": call_id, "name": name, "arguments": "{}"}),
        now,
    );
    feed(
        d,
        json!({"type": "response.done", "response": {"id": "r1", "status": "completed"}}),
        now,
    )
}

fn emulated(actions: &[Action]) -> Vec<Value> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Emulate(v) => Some(v.clone()),
            _ => None,
        })
        .collect()
}

fn result(id: &str, scheduling: Option<Scheduling>) -> LiveInput {
    LiveInput::ToolResponse(vec![FunctionResponse {
        id: Some(id.into()),
        name: "book".into(),
        response: json!({"booked": true}),
        scheduling,
    }])
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e["type"].as_str() {
            Some("conversation.item.create") => format!(
                "item.{}",
                e["item"]["role"]
                    .as_str()
                    .unwrap_or(e["item"]["type"].as_str().unwrap_or("?"))
            ),
            other => other.unwrap_or("?").to_owned(),
        })
        .collect()
}

#[test]
fn a_non_blocking_call_is_answered_running_at_once_and_the_model_asked_to_go_on() {
    let (mut d, _) = emulating();
    let actions = calling(&mut d, "book", "c1");
    assert_eq!(responses(actions.clone())[0].tool_calls[0].name, "book");
    let sent = emulated(&actions);
    assert_eq!(
        kinds(&sent),
        ["item.function_call_output", "response.create"]
    );
    assert_eq!(sent[0]["item"]["call_id"], "c1");
    let output: Value = serde_json::from_str(sent[0]["item"]["output"].as_str().unwrap()).unwrap();
    assert_eq!(output["status"], "running");
    // A blocking call is left to its result.
    let (mut d, _) = emulating();
    assert!(emulated(&calling(&mut d, "lookup", "c2")).is_empty());
}

#[test]
fn results_are_system_messages_whose_response_follows_the_scheduling() {
    let (mut d, mut e) = emulating();
    calling(&mut d, "book", "c1");
    let now = Instant::now();
    // The model goes on: a response is under way when the results come.
    feed(
        &mut d,
        json!({"type": "response.created", "response": {"id": "r2"}}),
        now,
    );
    let idle = parsed(e.encode(result("c1", Some(Scheduling::WhenIdle))));
    assert_eq!(
        kinds(&idle),
        ["item.system"],
        "held while a response is under way"
    );
    let text = idle[0]["item"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("book") && text.contains("c1") && text.contains("{\"booked\":true}"),
        "{text}"
    );
    let done = feed(
        &mut d,
        json!({"type": "response.done", "response": {"id": "r2", "status": "completed"}}),
        now,
    );
    assert_eq!(
        kinds(&emulated(&done)),
        ["response.create"],
        "asked for once idle"
    );

    let silent = parsed(e.encode(result("c1", Some(Scheduling::Silent))));
    assert_eq!(kinds(&silent), ["item.system"]);

    feed(
        &mut d,
        json!({"type": "response.created", "response": {"id": "r3"}}),
        now,
    );
    let interrupt = parsed(e.encode(result("c1", Some(Scheduling::Interrupt))));
    assert_eq!(
        kinds(&interrupt),
        ["item.system", "response.cancel", "response.create"]
    );
    // The cancelled response's end asks for nothing more: the new one is under way.
    let cancelled = feed(
        &mut d,
        json!({"type": "response.done", "response": {"id": "r3", "status": "cancelled"}}),
        now,
    );
    assert!(emulated(&cancelled).is_empty());
    // With no response under way, WHEN_IDLE asks at once.
    feed(
        &mut d,
        json!({"type": "response.done", "response": {"id": "r4", "status": "completed"}}),
        now,
    );
    assert_eq!(
        kinds(&parsed(e.encode(result("c1", Some(Scheduling::WhenIdle))))),
        ["item.system", "response.create"]
    );
}

#[test]
fn user_speech_cancels_the_blocking_calls_the_model_waits_for() {
    let (mut d, mut e) = emulating();
    calling(&mut d, "lookup", "c2");
    let spoke = feed(
        &mut d,
        json!({"type": "input_audio_buffer.speech_started", "item_id": "u1"}),
        Instant::now(),
    );
    assert_eq!(
        responses(spoke.clone())[0].tool_call_cancellations,
        ["c2".to_owned()]
    );
    let sent = emulated(&spoke);
    assert_eq!(kinds(&sent), ["item.function_call_output"]);
    assert!(sent[0]["item"]["output"]
        .as_str()
        .unwrap()
        .contains("cancelled"));
    // An answered call is not cancelled.
    calling(&mut d, "lookup", "c3");
    e.encode(LiveInput::ToolResponse(vec![FunctionResponse {
        id: Some("c3".into()),
        name: "lookup".into(),
        ..FunctionResponse::default()
    }]));
    let spoke = feed(
        &mut d,
        json!({"type": "input_audio_buffer.speech_started", "item_id": "u2"}),
        Instant::now(),
    );
    assert!(responses(spoke)
        .iter()
        .all(|r| r.tool_call_cancellations.is_empty()));
}
