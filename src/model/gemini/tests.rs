//! The Gemini wire format against real-shaped frames.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Value};

use super::wire::{
    history_message, input_text, parse_server_message, setup_message, text_as_realtime, ServerEvent,
};
use super::*;
use crate::event::{Blob, Content, FunctionResponse, Scheduling, Transcription};
use crate::model::{
    ContextWindowCompression, FunctionDeclaration, LiveInput, LlmResponse, Modality,
    ProactivityConfig, SessionResumptionConfig, SlidingWindow, SpeechConfig,
};

const MODEL: &str = "gemini-2.5-flash-native-audio-preview-12-2025";

fn parse(frame: &str) -> LlmResponse {
    match parse_server_message(frame.as_bytes(), MODEL).expect("parses") {
        ServerEvent::Response(response) => *response,
        other => panic!("expected a response, got {other:?}"),
    }
}

#[test]
fn setup_complete_and_empty_messages() {
    let pretty = "{\n  \"setupComplete\": {}\n}\n";
    assert_eq!(
        parse_server_message(pretty.as_bytes(), MODEL).unwrap(),
        ServerEvent::SetupComplete
    );
    assert_eq!(
        parse_server_message(b"{}", MODEL).unwrap(),
        ServerEvent::Nothing
    );
    let vad = r#"{"voiceActivity":{"type":"ACTIVITY_START","audioOffset":"0.5s"}}"#;
    assert_eq!(
        parse_server_message(vad.as_bytes(), MODEL).unwrap(),
        ServerEvent::Nothing
    );
    assert!(matches!(
        parse_server_message(b"not json", MODEL),
        Err(ModelError::Protocol(_))
    ));
}

#[test]
fn turn_complete_has_grounding_as_adk_reports_it() {
    let complete = br#"{"serverContent":{"turnComplete":true}}"#;
    let on = |model: &str, json: &[u8]| match parse_server_message(json, model).unwrap() {
        ServerEvent::Response(r) => r.grounding_metadata,
        other => panic!("{other:?}"),
    };
    // ADK gives 3.x live models' turnComplete an empty grounding object, and 2.5's none.
    assert_eq!(
        on("gemini-3.1-flash-live-preview", complete),
        Some(json!({}))
    );
    assert_eq!(on(MODEL, complete), None);
    // What the model sent is kept.
    let grounded = br#"{"serverContent":{"turnComplete":true,"groundingMetadata":{"webSearchQueries":["q"]}}}"#;
    assert_eq!(
        on(MODEL, grounded),
        Some(json!({"webSearchQueries": ["q"]}))
    );
}

#[test]
fn model_turn_audio_text_and_thoughts() {
    let audio = parse(
        r#"{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"AQACAAMA"}}]}}}"#,
    );
    let blob = audio.content.as_ref().unwrap().parts[0]
        .inline_data
        .clone()
        .unwrap();
    assert_eq!(blob.data, Bytes::from_static(&[1, 0, 2, 0, 3, 0]));
    assert_eq!(blob.mime_type, "audio/pcm;rate=24000");
    // No role from Gemini, none added: ADK passes `modelTurn` on as it is.
    assert_eq!(audio.content.unwrap().role, None);
    assert_eq!(audio.model_version.as_deref(), Some(MODEL));

    let text = parse(
        r#"{"serverContent":{"modelTurn":{"parts":[{"text":"Yes"},{"text":"thinking","thought":true}]}}}"#,
    );
    let parts = &text.content.unwrap().parts;
    assert_eq!(parts[0].text.as_deref(), Some("Yes"));
    assert_eq!(parts[1].thought, Some(true));
}

#[test]
fn transcriptions_and_turn_flags() {
    let heard = parse(r#"{"serverContent":{"inputTranscription":{"text":"What's the"}}}"#);
    assert_eq!(
        heard.input_transcription,
        Some(Transcription {
            text: Some("What's the".into()),
            finished: None
        })
    );
    let said = parse(
        r#"{"serverContent":{"outputTranscription":{"text":" of France is Paris.","finished":true}}}"#,
    );
    assert_eq!(said.output_transcription.unwrap().finished, Some(true));
    // An empty transcription object carries nothing.
    assert_eq!(
        parse_server_message(br#"{"serverContent":{"outputTranscription":{}}}"#, MODEL).unwrap(),
        ServerEvent::Nothing
    );
    assert!(parse(r#"{"serverContent":{"generationComplete":true}}"#).generation_complete);
    assert!(parse(r#"{"serverContent":{"interrupted":true}}"#).interrupted);
}

#[test]
fn usage_in_the_turn_complete_message_gets_adk_names() {
    let response = parse(
        r#"{"serverContent":{"turnComplete":true},"usageMetadata":{"promptTokenCount":373,"responseTokenCount":23,"totalTokenCount":"396","promptTokensDetails":[{"modality":"TEXT","tokenCount":300},{"modality":"AUDIO","tokenCount":73}],"responseTokensDetails":[{"modality":"AUDIO","tokenCount":23}]}}"#,
    );
    assert!(response.turn_complete);
    let usage = response.usage_metadata.unwrap();
    assert_eq!(usage.candidates_token_count, Some(23));
    assert_eq!(usage.prompt_token_count, Some(373));
    assert_eq!(usage.total_token_count, Some(396), "int64 as a string");
    assert_eq!(
        usage.candidates_tokens_details.unwrap()[0].modality,
        "AUDIO"
    );
    assert_eq!(usage.prompt_tokens_details.unwrap().len(), 2);
    let vertex = parse(r#"{"usageMetadata":{"candidatesTokenCount":7}}"#);
    assert_eq!(
        vertex.usage_metadata.unwrap().candidates_token_count,
        Some(7)
    );
}

#[test]
fn tool_calls_and_cancellations() {
    let call = parse(
        r#"{"toolCall":{"functionCalls":[{"name":"get_current_weather","args":{"location":"Redmond, WA"},"id":"function-call-5831923424298605773"}]}}"#,
    );
    assert_eq!(call.tool_calls.len(), 1);
    assert_eq!(
        call.tool_calls[0].id.as_deref(),
        Some("function-call-5831923424298605773")
    );
    assert_eq!(
        call.tool_calls[0].args,
        Some(json!({"location": "Redmond, WA"}))
    );
    let cancel = parse(r#"{"toolCallCancellation":{"ids":["function-call-1"]}}"#);
    assert_eq!(cancel.tool_call_cancellations, vec!["function-call-1"]);
}

#[test]
fn resumption_updates_and_go_away() {
    let update = parse(r#"{"sessionResumptionUpdate":{"newHandle":"CiQ2N2Y","resumable":true}}"#);
    let update = update.session_resumption_update.unwrap();
    assert_eq!(
        (update.new_handle.as_deref(), update.resumable),
        (Some("CiQ2N2Y"), Some(true))
    );
    let lenient = parse(r#"{"sessionResumptionUpdate":{"newHandle":"","resumable":"false"}}"#);
    let lenient = lenient.session_resumption_update.unwrap();
    assert_eq!((lenient.new_handle, lenient.resumable), (None, Some(false)));
    let go_away = parse(r#"{"goAway":{"timeLeft":"10s"}}"#);
    assert_eq!(go_away.go_away.unwrap().time_left.as_deref(), Some("10s"));
}

#[test]
fn in_band_errors_are_errors() {
    for frame in [
        r#"{"error":{"code":400,"message":"bad"}}"#,
        r#"{"code":7,"message":"denied"}"#,
    ] {
        let error = parse_server_message(frame.as_bytes(), MODEL).unwrap_err();
        assert!(error.to_string().contains("reported an error"), "{error}");
    }
}

fn config() -> LiveConnectConfig {
    LiveConnectConfig {
        model: MODEL.into(),
        system_instruction: Some("Be brief.".into()),
        tools: vec![FunctionDeclaration {
            name: "get_current_time".into(),
            description: "time".into(),
            parameters_json_schema: Some(json!({"type": "object"}).into()),
            ..FunctionDeclaration::default()
        }],
        response_modalities: vec![Modality::Audio],
        speech_config: Some(SpeechConfig {
            voice_name: Some("Puck".into()),
            language_code: Some("en-US".into()),
        }),
        input_audio_transcription: true,
        output_audio_transcription: true,
        session_resumption: Some(SessionResumptionConfig::default()),
        context_window_compression: Some(ContextWindowCompression {
            trigger_tokens: Some(25600),
            sliding_window: SlidingWindow {
                target_tokens: Some(12800),
            },
        }),
        proactivity: Some(ProactivityConfig {
            proactive_audio: Some(true),
        }),
        enable_affective_dialog: Some(true),
        ..LiveConnectConfig::default()
    }
}

#[test]
fn setup_carries_every_setting_in_camel_case() {
    let setup = setup_message(&config(), &format!("models/{MODEL}"));
    let s = &setup["setup"];
    assert_eq!(s["model"], format!("models/{MODEL}"));
    assert_eq!(
        s["generationConfig"]["responseModalities"],
        json!(["AUDIO"])
    );
    assert_eq!(
        s["generationConfig"]["speechConfig"]["voiceConfig"]["prebuiltVoiceConfig"]["voiceName"],
        "Puck"
    );
    assert_eq!(s["generationConfig"]["enableAffectiveDialog"], true);
    assert_eq!(s["systemInstruction"]["parts"][0]["text"], "Be brief.");
    assert_eq!(s["systemInstruction"]["role"], "system", "as ADK sends it");
    assert_eq!(
        s["tools"][0]["functionDeclarations"][0]["name"],
        "get_current_time"
    );
    assert_eq!(
        s["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"],
        json!({"type": "object"})
    );
    assert_eq!(s["sessionResumption"], json!({}));
    assert_eq!(s["inputAudioTranscription"], json!({}));
    assert_eq!(s["outputAudioTranscription"], json!({}));
    assert_eq!(s["contextWindowCompression"]["triggerTokens"], 25600);
    assert_eq!(s["proactivity"]["proactiveAudio"], true);
    assert!(
        s.get("historyConfig").is_none(),
        "no history, no history config"
    );
}

#[test]
fn history_is_sent_unless_resuming_and_answered_only_after_a_user_turn() {
    let mut config = config();
    config.history = vec![Content::text("user", "hi"), Content::text("model", "hello")];
    let history = history_message(&config).unwrap();
    assert_eq!(history["clientContent"]["turnComplete"], false);
    assert_eq!(
        history["clientContent"]["turns"][1]["parts"][0]["text"],
        "hello"
    );
    assert_eq!(
        setup_message(&config, "m")["setup"]["historyConfig"]["initialHistoryInClientContent"],
        true
    );
    config.history.push(Content::text("user", "and now?"));
    assert_eq!(
        history_message(&config).unwrap()["clientContent"]["turnComplete"],
        true
    );
    config.session_resumption = Some(SessionResumptionConfig {
        handle: Some("h".into()),
        transparent: None,
    });
    assert!(history_message(&config).is_none());
    assert_eq!(
        setup_message(&config, "m")["setup"]["sessionResumption"]["handle"],
        "h"
    );
}

/// The message a client input goes out as, read back from the text sent.
fn sent(input: &LiveInput, realtime_text: bool) -> Value {
    let text = input_text(input, realtime_text);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{input:?} sent {text}: {e}"))
}

#[test]
fn client_messages_for_every_input() {
    // Microphone chunks are written straight into the text: every length mod 3 (so every base64
    // padding), none, and a 20 ms frame.
    for data in [
        &[0xfb, 0xff, 0xfe, 0x00][..],
        &[0xfb, 0xff, 0xfe],
        &[0xfb, 0xff],
        &[],
        &[0x5a; 640],
    ] {
        let audio = LiveInput::audio(Bytes::copy_from_slice(data), 16_000);
        let want = json!({"realtimeInput": {"audio": {
            "data": STANDARD.encode(data),
            "mimeType": "audio/pcm;rate=16000",
        }}});
        assert_eq!(sent(&audio, false), want, "{data:?}");
        assert_eq!(sent(&audio, true), want, "{data:?}");
        // Sized exactly, so the frame takes the text's buffer as it is.
        let text = input_text(&audio, false);
        assert_eq!(text.len(), text.capacity(), "{data:?}");
    }
    assert_eq!(
        sent(
            &LiveInput::audio(Bytes::from_static(&[0xfb, 0xff, 0xfe, 0x00]), 16_000),
            false
        ),
        json!({"realtimeInput": {"audio": {"data": "+//+AA==", "mimeType": "audio/pcm;rate=16000"}}})
    );
    // A camera frame, with a client's mime type that needs escaping in JSON.
    let mime = "image/jpeg; name=\"a\\b\u{1}\"";
    assert_eq!(
        sent(
            &LiveInput::Realtime(Blob::new(Bytes::from_static(b"jpg"), mime)),
            false
        ),
        json!({"realtimeInput": {"video": {"data": "anBn", "mimeType": mime}}})
    );
    let text = input_text(&LiveInput::Realtime(Blob::new(Bytes::new(), mime)), false);
    assert_eq!(text.len(), text.capacity());
    let hi = LiveInput::Content {
        content: Content::text("user", "hi \"there\""),
        turn_complete: true,
    };
    assert_eq!(
        sent(&hi, false),
        json!({"clientContent": {"turns": [{"parts": [{"text": "hi \"there\""}], "role": "user"}], "turnComplete": true}})
    );
    assert!(text_as_realtime("gemini-3.8-live") && !text_as_realtime(MODEL));
    assert_eq!(
        sent(&hi, true),
        json!({"realtimeInput": {"text": "hi \"there\""}})
    );
    let tool = sent(
        &LiveInput::ToolResponse(vec![FunctionResponse {
            id: Some("function-call-1".into()),
            name: "f".into(),
            response: json!({"output": 1}),
            ..FunctionResponse::default()
        }]),
        true,
    );
    assert_eq!(
        tool,
        json!({"toolResponse": {"functionResponses": [{"id": "function-call-1", "name": "f", "response": {"output": 1}}]}})
    );
    let signals: Vec<Value> = [
        LiveInput::ActivityStart,
        LiveInput::ActivityEnd,
        LiveInput::AudioStreamEnd,
    ]
    .iter()
    .map(|i| sent(i, false))
    .collect();
    assert_eq!(
        signals,
        vec![
            json!({"realtimeInput": {"activityStart": {}}}),
            json!({"realtimeInput": {"activityEnd": {}}}),
            json!({"realtimeInput": {"audioStreamEnd": true}}),
        ]
    );
}

#[test]
fn urls_paths_and_credentials() {
    let developer = GeminiOptions {
        api_key: Some(Secret::new("k-123")),
        ..GeminiOptions::default()
    };
    assert_eq!(
        developer.url(),
        "wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
    );
    assert!(
        !developer.url().contains("k-123"),
        "the key never goes in the URL"
    );
    assert_eq!(
        developer.model_path(&format!("models/{MODEL}")),
        format!("models/{MODEL}")
    );
    assert!(
        !format!("{developer:?}").contains("k-123"),
        "nor in debug output"
    );
    let mock = GeminiOptions {
        base_url: "http://127.0.0.1:9300/".into(),
        ..GeminiOptions::default()
    };
    assert!(mock
        .url()
        .starts_with("ws://127.0.0.1:9300/ws/google.ai.generativelanguage.v1beta."));
    let vertex = GeminiOptions {
        api_version: "v1beta1".into(),
        vertex: Some(VertexOptions {
            project: "p".into(),
            location: "us-central1".into(),
            access_token: Secret::new("t"),
        }),
        ..GeminiOptions::default()
    };
    assert_eq!(
        vertex.url(),
        "wss://us-central1-aiplatform.googleapis.com/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent"
    );
    assert_eq!(
        vertex.model_path("gemini-live-2.5-flash"),
        "projects/p/locations/us-central1/publishers/google/models/gemini-live-2.5-flash"
    );
    assert!(
        is_gemini_model(MODEL)
            && is_gemini_model("models/gemini-3.8-live")
            && !is_gemini_model("sim")
    );
}

#[test]
fn non_blocking_tools_are_declared_so_and_their_results_scheduled() {
    let mut config = config();
    config.tools.push(FunctionDeclaration {
        name: "book_ticket".into(),
        description: "Books a ticket.".into(),
        parameters_json_schema: None,
        behavior: Some(crate::model::Behavior::NonBlocking),
    });
    let setup = setup_message(&config, &format!("models/{MODEL}"));
    let declarations = &setup["setup"]["tools"][0]["functionDeclarations"];
    assert_eq!(
        declarations[1],
        json!({"name": "book_ticket", "description": "Books a ticket.", "behavior": "NON_BLOCKING"})
    );
    // A blocking tool is declared as before non-blocking ones existed.
    assert!(declarations[0].get("behavior").is_none(), "{declarations}");

    let response = |id: &str, scheduling| FunctionResponse {
        id: Some(id.into()),
        name: "book_ticket".into(),
        response: json!({"booked": true}),
        scheduling,
    };
    let text = input_text(
        &LiveInput::ToolResponse(vec![
            response("function-call-1", Some(Scheduling::Interrupt)),
            response("function-call-2", Some(Scheduling::WhenIdle)),
            response("function-call-3", Some(Scheduling::Silent)),
            response("function-call-4", None),
        ]),
        false,
    );
    let sent: Value = serde_json::from_str(&text).unwrap();
    let schedulings: Vec<&Value> = sent["toolResponse"]["functionResponses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["scheduling"])
        .collect();
    assert_eq!(
        schedulings,
        [
            &json!("INTERRUPT"),
            &json!("WHEN_IDLE"),
            &json!("SILENT"),
            &Value::Null
        ]
    );
    assert_eq!(
        sent["toolResponse"]["functionResponses"][0],
        json!({"id": "function-call-1", "name": "book_ticket", "response": {"booked": true}, "scheduling": "INTERRUPT"})
    );
}
