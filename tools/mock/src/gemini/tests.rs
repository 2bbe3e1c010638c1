use axum::http::{HeaderMap, HeaderValue, Uri};
use bytes::Bytes;
use serde_json::{json, Value};

use super::server::credentials;
use super::wire::{
    camelize, encode, endpoint, go_away, parse_client_message, setup_complete, Api, ClientMessage,
    Close, Endpoint, Outbound, CLOSE_INVALID, CLOSE_POLICY,
};
use super::MockGeminiConfig;
use livegate::event::{
    Blob, Content, FunctionCall, FunctionResponse, ModalityTokenCount, Part,
    SessionResumptionUpdate, Transcription, UsageMetadata,
};
use livegate::model::{
    ActivityHandling, AutomaticActivityDetection, ContextWindowCompression, FunctionDeclaration,
    GoAway, LiveConnectConfig, LiveInput, LlmResponse, Modality, ProactivityConfig,
    RealtimeInputConfig, SessionResumptionConfig, SlidingWindow, SpeechConfig, StartSensitivity,
};

const DEVELOPER: Endpoint = Endpoint {
    api: Api::Developer,
    version: "v1beta",
};
const VERTEX: Endpoint = Endpoint {
    api: Api::Vertex,
    version: "v1beta1",
};

fn parse(message: Value) -> Result<ClientMessage, Close> {
    parse_client_message(&message.to_string(), &DEVELOPER)
}

fn parsed(message: Value) -> ClientMessage {
    match parse(message.clone()) {
        Ok(parsed) => parsed,
        Err(close) => panic!("{message} rejected: {close:?}"),
    }
}

fn rejected(text: &str) -> Close {
    match parse_client_message(text, &DEVELOPER) {
        Ok(parsed) => panic!("{text} accepted as {parsed:?}"),
        Err(close) => close,
    }
}

fn setup(message: Value) -> LiveConnectConfig {
    match parsed(message) {
        ClientMessage::Setup(config) => *config,
        other => panic!("not a setup: {other:?}"),
    }
}

fn realtime(message: Value) -> Vec<LiveInput> {
    match parsed(message) {
        ClientMessage::RealtimeInput(inputs) => inputs,
        other => panic!("not realtime input: {other:?}"),
    }
}

fn pcm(data: &'static [u8]) -> LiveInput {
    LiveInput::Realtime(Blob::new(Bytes::from_static(data), "audio/pcm;rate=16000"))
}

#[test]
fn endpoints_cover_both_apis_their_versions_and_a_doubled_slash() {
    let developer = |version| {
        Some(Endpoint {
            api: Api::Developer,
            version,
        })
    };
    for (path, want) in [
        (
            "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent",
            developer("v1beta"),
        ),
        (
            "//ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent",
            developer("v1beta"),
        ),
        (
            "/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContentConstrained",
            developer("v1alpha"),
        ),
        (
            "//ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent",
            Some(VERTEX),
        ),
        (
            "/ws/google.cloud.aiplatform.v1.LlmBidiService/BidiGenerateContent",
            Some(Endpoint {
                api: Api::Vertex,
                version: "v1",
            }),
        ),
        (
            "/ws/google.ai.generativelanguage.v2.GenerativeService.BidiGenerateContent",
            None,
        ),
        (
            "/ws/google.ai.generativelanguage.v1beta.GenerativeService.GenerateContent",
            None,
        ),
        (
            "/ws/google.cloud.aiplatform.v1.LlmBidiService/BidiGenerateContentX",
            None,
        ),
        ("/ws/user/session", None),
        ("/", None),
    ] {
        assert_eq!(endpoint(path), want, "{path}");
    }
}

#[test]
fn credentials_come_from_the_query_and_every_header_form() {
    let uri: Uri = "/ws/x?key=k1&access_token=auth_tokens%2Fk2&other=no"
        .parse()
        .unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("x-goog-api-key", HeaderValue::from_static("k3"));
    headers.append("authorization", HeaderValue::from_static("Token k4"));
    headers.append("authorization", HeaderValue::from_static("bearer k5"));
    headers.append("authorization", HeaderValue::from_static("Basic k6"));
    assert_eq!(
        credentials(&uri, &headers),
        ["k1", "auth_tokens/k2", "k3", "k4", "k5"]
    );
    assert!(credentials(&"/ws/x".parse().unwrap(), &HeaderMap::new()).is_empty());
}

#[test]
fn config_debug_never_shows_the_key() {
    let config = MockGeminiConfig {
        api_key: Some("secret-key".into()),
        ..MockGeminiConfig::default()
    };
    let shown = format!("{config:?}");
    assert!(!shown.contains("secret-key"), "{shown}");
    assert!(shown.contains("redacted"), "{shown}");
}

#[test]
fn camelize_rewrites_keys_at_any_depth_but_not_inside_client_data() {
    let snake = json!({
        "realtime_input": {"audio": {"mime_type": "audio/pcm", "data": "AA=="}},
        "list": [{"voice_config": {"prebuilt_voice_config": {"voice_name": "Puck"}}}],
        "function_call": {"args": {"city_name": "Paris"}},
        "function_response": {"response": {"temp_c": 12}},
        "function_declarations": [{
            "parameters": {"properties": {"city_name": {"type": "STRING"}}},
            "parameters_json_schema": {"properties": {"time_zone": {}}},
        }],
        "alreadyCamel": 1,
        "_private_key": 2,
    });
    assert_eq!(
        camelize(snake),
        json!({
            "realtimeInput": {"audio": {"mimeType": "audio/pcm", "data": "AA=="}},
            "list": [{"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": "Puck"}}}],
            "functionCall": {"args": {"city_name": "Paris"}},
            "functionResponse": {"response": {"temp_c": 12}},
            "functionDeclarations": [{
                "parameters": {"properties": {"city_name": {"type": "STRING"}}},
                "parametersJsonSchema": {"properties": {"time_zone": {}}},
            }],
            "alreadyCamel": 1,
            "_privateKey": 2,
        })
    );
}

/// The setup python-genai 2.34.0 sent to a stub server.
fn python_genai_setup() -> Value {
    json!({"setup": {
        "model": "models/gemini-2.5-flash-native-audio-preview-12-2025",
        "generationConfig": {
            "responseModalities": ["AUDIO"],
            "speechConfig": {"voice_config": {"prebuilt_voice_config": {"voice_name": "Puck"}}, "language_code": "en-US"},
            "enableAffectiveDialog": true,
        },
        "systemInstruction": {"parts": [{"text": "You are helpful."}], "role": "user"},
        "tools": [{"functionDeclarations": [{"description": "d", "name": "get_weather",
            "parameters": {"properties": {"city": {"type": "STRING"}}, "type": "OBJECT"}}]}],
        "sessionResumption": {},
        "inputAudioTranscription": {},
        "outputAudioTranscription": {},
        "realtimeInputConfig": {
            "automatic_activity_detection": {"disabled": false, "start_of_speech_sensitivity": "START_SENSITIVITY_HIGH"},
            "activity_handling": "START_OF_ACTIVITY_INTERRUPTS",
        },
        "contextWindowCompression": {"trigger_tokens": 25600, "sliding_window": {"target_tokens": 12800}},
        "proactivity": {"proactive_audio": true},
    }})
}

#[test]
fn adk_system_role_instruction_is_accepted() {
    // ADK sends the instruction with `"role": "system"` (python-genai alone sends `user`).
    let mut adk = python_genai_setup();
    adk["setup"]["systemInstruction"]["role"] = json!("system");
    assert_eq!(
        setup(adk).system_instruction.as_deref(),
        Some("You are helpful.")
    );
}

#[test]
fn python_genai_setup_becomes_a_live_connect_config() {
    assert_eq!(
        setup(python_genai_setup()),
        LiveConnectConfig {
            model: "gemini-2.5-flash-native-audio-preview-12-2025".into(),
            system_instruction: Some("You are helpful.".into()),
            tools: vec![FunctionDeclaration {
                name: "get_weather".into(),
                description: "d".into(),
                parameters_json_schema: Some(
                    json!({"properties": {"city": {"type": "STRING"}}, "type": "OBJECT"}).into()
                ),
                behavior: None,
            }],
            response_modalities: vec![Modality::Audio],
            speech_config: Some(SpeechConfig {
                voice_name: Some("Puck".into()),
                language_code: Some("en-US".into()),
            }),
            input_audio_transcription: true,
            output_audio_transcription: true,
            realtime_input_config: Some(RealtimeInputConfig {
                automatic_activity_detection: Some(AutomaticActivityDetection {
                    disabled: Some(false),
                    start_of_speech_sensitivity: Some(StartSensitivity::High),
                    ..AutomaticActivityDetection::default()
                }),
                activity_handling: Some(ActivityHandling::StartOfActivityInterrupts),
            }),
            session_resumption: Some(SessionResumptionConfig::default()),
            context_window_compression: Some(ContextWindowCompression {
                trigger_tokens: Some(25600),
                sliding_window: SlidingWindow {
                    target_tokens: Some(12800)
                },
            }),
            proactivity: Some(ProactivityConfig {
                proactive_audio: Some(true),
            }),
            enable_affective_dialog: Some(true),
            history: Vec::new(),
            playout: None,
        }
    );
}

#[test]
fn setup_reads_snake_case_json_schema_tools_int64_strings_and_a_resumption_handle() {
    let config = setup(json!({"setup": {
        "model": "projects/p/locations/us-central1/publishers/google/models/gemini-live-2.5",
        "generation_config": {"response_modalities": ["text"]},
        "system_instruction": {"parts": [{"text": "Be "}, {"text": "brief."}]},
        "tools": [{"google_search": {}}, {"function_declarations": [{"name": "get_current_time",
            "parameters_json_schema": {"type": "object", "properties": {"time_zone": {"type": "string"}}}}]}],
        "session_resumption": {"handle": "sim-abc-3"},
        "context_window_compression": {"trigger_tokens": "25600", "sliding_window": {"target_tokens": "12800"}},
    }}));
    assert_eq!(config.model, "gemini-live-2.5");
    assert_eq!(config.response_modalities, [Modality::Text]);
    assert_eq!(config.system_instruction.as_deref(), Some("Be brief."));
    assert_eq!(config.tools.len(), 1);
    assert_eq!(
        config.tools[0].parameters_json_schema.as_deref(),
        Some(&json!({"type": "object", "properties": {"time_zone": {"type": "string"}}}))
    );
    assert_eq!(
        config.session_resumption.and_then(|r| r.handle).as_deref(),
        Some("sim-abc-3")
    );
    assert_eq!(
        config.context_window_compression,
        Some(ContextWindowCompression {
            trigger_tokens: Some(25600),
            sliding_window: SlidingWindow {
                target_tokens: Some(12800)
            },
        })
    );
    assert!(!config.input_audio_transcription && !config.output_audio_transcription);
    let minimal = setup(json!({"setup": {"model": "models/m"}}));
    assert_eq!(
        minimal,
        LiveConnectConfig {
            model: "m".into(),
            ..LiveConnectConfig::default()
        }
    );
}

#[test]
fn realtime_audio_in_both_spellings_and_both_base64_alphabets() {
    // Bytes fb ff fe: python-genai writes them URL-safe ("-__-"), js-genai standard ("+//+").
    let want = vec![LiveInput::Realtime(Blob::new(
        Bytes::from_static(&[0xfb, 0xff, 0xfe]),
        "audio/pcm;rate=16000",
    ))];
    let python =
        json!({"realtime_input": {"audio": {"data": "-__-", "mime_type": "audio/pcm;rate=16000"}}});
    let js =
        json!({"realtimeInput": {"audio": {"data": "+//+", "mimeType": "audio/pcm;rate=16000"}}});
    assert_eq!(realtime(python), want);
    assert_eq!(realtime(js), want);
}

#[test]
fn realtime_media_chunks_video_text_and_activity_signals() {
    assert_eq!(
        realtime(json!({"realtimeInput": {"mediaChunks": [
            {"data": "AAE=", "mimeType": "audio/pcm;rate=16000"},
            {"data": "AgM", "mime_type": "audio/pcm;rate=16000"},
        ]}})),
        [pcm(&[0, 1]), pcm(&[2, 3])]
    );
    assert_eq!(
        realtime(
            json!({"realtime_input": {"media_chunks": [{"data": "AAE=", "mime_type": "audio/pcm;rate=16000"}]}})
        ),
        [pcm(&[0, 1])]
    );
    assert_eq!(
        realtime(json!({"realtimeInput": {"video": {"data": "/9j/", "mimeType": "image/jpeg"}}})),
        [LiveInput::Realtime(Blob::new(
            Bytes::from_static(&[0xff, 0xd8, 0xff]),
            "image/jpeg"
        ))]
    );
    assert_eq!(
        realtime(json!({"realtimeInput": {"text": "hi"}})),
        [LiveInput::Content {
            content: Content::text("user", "hi"),
            turn_complete: true
        }]
    );
    assert_eq!(
        realtime(json!({"realtime_input": {"activityStart": {}}})),
        [LiveInput::ActivityStart]
    );
    assert_eq!(
        realtime(json!({"realtimeInput": {"activity_end": {}}})),
        [LiveInput::ActivityEnd]
    );
    assert_eq!(
        realtime(json!({"realtime_input": {"audioStreamEnd": true}})),
        [LiveInput::AudioStreamEnd]
    );
    assert_eq!(
        realtime(json!({"realtimeInput": {"audio_stream_end": "true"}})),
        [LiveInput::AudioStreamEnd]
    );
    assert!(realtime(json!({"realtimeInput": {"audioStreamEnd": false}})).is_empty());
    // Several fields at once: the activity opens before its audio and closes after it.
    assert_eq!(
        realtime(json!({"realtimeInput": {
            "activityEnd": {}, "audio": {"data": "AAE=", "mimeType": "audio/pcm;rate=16000"}, "activityStart": {},
        }})),
        [
            LiveInput::ActivityStart,
            pcm(&[0, 1]),
            LiveInput::ActivityEnd
        ]
    );
}

#[test]
fn client_content_in_both_spellings() {
    let want = ClientMessage::ClientContent {
        turns: vec![Content::text("user", "hi")],
        turn_complete: true,
    };
    assert_eq!(
        parsed(
            json!({"client_content": {"turns": [{"parts": [{"text": "hi"}], "role": "user"}], "turnComplete": true}})
        ),
        want
    );
    assert_eq!(
        parsed(
            json!({"clientContent": {"turns": [{"parts": [{"text": "hi"}]}], "turn_complete": true}})
        ),
        want
    );
    assert_eq!(
        parsed(json!({"clientContent": {"turns": [
            {"role": "user", "parts": [{"text": "a"}]}, {"role": "model", "parts": [{"text": "b"}]},
        ]}})),
        ClientMessage::ClientContent {
            turns: vec![Content::text("user", "a"), Content::text("model", "b")],
            turn_complete: false,
        }
    );
}

#[test]
fn tool_responses_in_both_spellings_keep_their_own_keys() {
    let want = ClientMessage::ToolResponse(vec![FunctionResponse {
        id: Some("fc-1".into()),
        name: "get_weather".into(),
        response: json!({"output": {"temp_c": 12}}),
        scheduling: None,
    }]);
    assert_eq!(
        parsed(
            json!({"tool_response": {"functionResponses": [{"id": "fc-1", "name": "get_weather", "response": {"output": {"temp_c": 12}}}]}})
        ),
        want
    );
    assert_eq!(
        parsed(
            json!({"toolResponse": {"function_responses": [{"id": "fc-1", "name": "get_weather", "response": {"output": {"temp_c": 12}}}]}})
        ),
        want
    );
}

#[test]
fn rejects_what_gemini_rejects_with_1007() {
    for text in [
        "not json",
        "[1]",
        "{}",
        r#"{"setup": {"model": "models/m"}, "clientContent": {}}"#,
        r#"{"bogus": {}}"#,
        r#"{"setup": {"model": "models/m", "bogusField": 1}}"#,
        r#"{"setup": {"generationConfig": {}}}"#,
        r#"{"setup": {"model": "models/m", "generationConfig": {"responseModalities": ["SMELL"]}}}"#,
        r#"{"setup": {"model": "models/m", "contextWindowCompression": {"triggerTokens": "many"}}}"#,
        r#"{"setup": 3}"#,
        r#"{"realtimeInput": {"audio": {"data": "not base64!", "mimeType": "audio/pcm"}}}"#,
        r#"{"realtimeInput": {"audioChunk": {}}}"#,
        r#"{"clientContent": {"turns": "hi"}}"#,
        r#"{"toolResponse": {"functionResponses": [{"id": "a", "name": "f", "response": "ok"}]}}"#,
        r#"{"toolResponse": {"functionResponses": [{"id": "a", "name": "f"}]}}"#,
    ] {
        let close = rejected(text);
        assert_eq!(close.code, CLOSE_INVALID, "{text}: {close:?}");
        assert!(
            !close.reason.is_empty() && close.reason.len() <= 123,
            "{close:?}"
        );
    }
}

#[test]
fn an_unknown_model_closes_with_1008() {
    for model in [
        "gemini-2.5-flash",
        "models/",
        "models/a/b",
        "projects/p/models/",
    ] {
        let close = rejected(&json!({"setup": {"model": model}}).to_string());
        assert_eq!(close.code, CLOSE_POLICY, "{model}");
        assert!(close.reason.starts_with(model), "{close:?}");
        assert!(close.reason.contains("v1beta"), "{close:?}");
    }
    let vertex = parse_client_message(r#"{"setup": {"model": "models/m"}}"#, &VERTEX);
    assert!(matches!(vertex, Ok(ClientMessage::Setup(_))));
}

#[test]
fn close_reasons_are_cut_to_123_bytes_on_a_character_boundary() {
    let close = Close::new(1007, "é".repeat(100));
    assert_eq!(close.reason.len(), 122);
    assert_eq!(Close::new(1007, "short").reason, "short");
}

#[test]
fn server_json_is_pretty_with_a_trailing_newline() {
    assert_eq!(
        encode(&setup_complete(Api::Developer)),
        "{\n  \"setupComplete\": {}\n}\n"
    );
    let vertex = setup_complete(Api::Vertex);
    assert!(vertex
        .pointer("/setupComplete/sessionId")
        .and_then(Value::as_str)
        .is_some_and(|id| !id.is_empty()));
    assert_eq!(go_away("1s"), json!({"goAway": {"timeLeft": "1s"}}));
}

/// The one server message for a response.
fn message(response: LlmResponse) -> Value {
    let mut messages = Outbound::new(Api::Developer).messages(&response);
    assert_eq!(messages.len(), 1, "{messages:?}");
    messages.remove(0)
}

#[test]
fn model_turn_parts_audio_in_standard_base64_text_and_thoughts() {
    let content = Content {
        parts: vec![
            Part {
                inline_data: Some(Blob::new(
                    Bytes::from_static(&[0xfb, 0xff, 0xfe, 0x00]),
                    "audio/pcm;rate=24000",
                )),
                ..Part::default()
            },
            Part::text("Hi"),
            Part {
                thought: Some(true),
                ..Part::text("**Thinking**")
            },
        ],
        role: Some("model".into()),
    };
    assert_eq!(
        message(LlmResponse::from_content(content)),
        json!({"serverContent": {"modelTurn": {"role": "model", "parts": [
            {"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": "+//+AA=="}},
            {"text": "Hi"},
            {"text": "**Thinking**", "thought": true},
        ]}}})
    );
}

#[test]
fn transcriptions_and_turn_flags_share_server_content() {
    let response = LlmResponse {
        input_transcription: Some(Transcription::new("[speech 1.00 s]", false)),
        output_transcription: Some(Transcription {
            text: Some("Hello".into()),
            finished: None,
        }),
        generation_complete: true,
        turn_complete: true,
        interrupted: true,
        ..LlmResponse::default()
    };
    assert_eq!(
        message(response),
        json!({"serverContent": {
            "inputTranscription": {"text": "[speech 1.00 s]", "finished": false},
            "outputTranscription": {"text": "Hello"},
            "generationComplete": true,
            "turnComplete": true,
            "interrupted": true,
        }})
    );
}

fn usage() -> UsageMetadata {
    UsageMetadata {
        candidates_token_count: Some(23),
        candidates_tokens_details: Some(vec![ModalityTokenCount {
            modality: "AUDIO".into(),
            token_count: 23,
        }]),
        prompt_token_count: Some(373),
        prompt_tokens_details: Some(vec![ModalityTokenCount {
            modality: "TEXT".into(),
            token_count: 373,
        }]),
        total_token_count: Some(396),
    }
}

#[test]
fn usage_waits_for_turn_complete_and_uses_each_apis_names() {
    let usage_only = LlmResponse {
        usage_metadata: Some(usage()),
        model_version: Some("sim".into()),
        ..LlmResponse::default()
    };
    let generation_complete = LlmResponse {
        generation_complete: true,
        ..LlmResponse::default()
    };
    let turn_complete = LlmResponse {
        turn_complete: true,
        ..LlmResponse::default()
    };
    let mut developer = Outbound::new(Api::Developer);
    assert_eq!(developer.messages(&usage_only), Vec::<Value>::new());
    assert_eq!(
        developer.messages(&generation_complete),
        [json!({"serverContent": {"generationComplete": true}})]
    );
    assert_eq!(
        developer.messages(&turn_complete),
        [json!({
            "serverContent": {"turnComplete": true},
            "usageMetadata": {
                "promptTokenCount": 373,
                "responseTokenCount": 23,
                "totalTokenCount": 396,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 373}],
                "responseTokensDetails": [{"modality": "AUDIO", "tokenCount": 23}],
            },
        })]
    );
    // Used once: the next turn's turnComplete has no stale usage.
    assert_eq!(
        developer.messages(&turn_complete),
        [json!({"serverContent": {"turnComplete": true}})]
    );

    let mut vertex = Outbound::new(Api::Vertex);
    assert!(vertex.messages(&usage_only).is_empty());
    let sent = vertex.messages(&turn_complete).remove(0);
    assert_eq!(sent["usageMetadata"]["candidatesTokenCount"], 23);
    assert_eq!(
        sent["usageMetadata"]["candidatesTokensDetails"][0]["modality"],
        "AUDIO"
    );
    assert!(sent["usageMetadata"].get("responseTokenCount").is_none());
}

#[test]
fn tool_call_ids_are_gemini_style_and_translate_back() {
    let mut outbound = Outbound::new(Api::Developer);
    let calls = LlmResponse {
        tool_calls: vec![
            FunctionCall {
                id: Some("sim-call-1".into()),
                args: Some(json!({"timezone": "UTC"})),
                name: "get_current_time".into(),
            },
            FunctionCall {
                id: Some("sim-call-2".into()),
                args: None,
                name: "calculate".into(),
            },
        ],
        ..LlmResponse::default()
    };
    let sent = outbound.messages(&calls).remove(0);
    let wire = sent["toolCall"]["functionCalls"]
        .as_array()
        .expect("calls")
        .clone();
    assert_eq!(wire.len(), 2);
    let ids: Vec<String> = wire
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_owned())
        .collect();
    for id in &ids {
        let digits = id.strip_prefix("function-call-").expect("gemini-style id");
        assert!(
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
            "{id}"
        );
    }
    assert_ne!(ids[0], ids[1]);
    assert_eq!(wire[0]["name"], "get_current_time");
    assert_eq!(wire[0]["args"], json!({"timezone": "UTC"}));
    assert_eq!(wire[1]["args"], json!({}));

    let answer = |id: &str| FunctionResponse {
        id: Some(id.into()),
        name: "get_current_time".into(),
        response: json!({"output": "12:00"}),
        scheduling: None,
    };
    let back = outbound
        .tool_responses(vec![answer(&ids[0]), answer(&ids[1])])
        .expect("known ids");
    assert_eq!(back[0].id.as_deref(), Some("sim-call-1"));
    assert_eq!(back[1].id.as_deref(), Some("sim-call-2"));
    // Streaming tools answer the same call again.
    assert!(outbound.tool_responses(vec![answer(&ids[0])]).is_ok());
    let without_id = FunctionResponse {
        id: None,
        ..answer("")
    };
    assert_eq!(
        outbound.tool_responses(vec![without_id.clone()]),
        Ok(vec![without_id])
    );
    let unknown = outbound
        .tool_responses(vec![answer("function-call-1")])
        .expect_err("unknown id");
    assert_eq!(unknown.code, CLOSE_INVALID);

    let cancelled = outbound.messages(&LlmResponse {
        tool_call_cancellations: vec!["sim-call-2".into()],
        ..LlmResponse::default()
    });
    assert_eq!(
        cancelled,
        [json!({"toolCallCancellation": {"ids": [ids[1]]}})]
    );
}

#[test]
fn resumption_updates_go_away_and_empty_responses() {
    let update = LlmResponse {
        session_resumption_update: Some(SessionResumptionUpdate {
            new_handle: Some("sim-x-1".into()),
            resumable: Some(true),
        }),
        ..LlmResponse::default()
    };
    assert_eq!(
        message(update),
        json!({"sessionResumptionUpdate": {"newHandle": "sim-x-1", "resumable": true}})
    );
    let go_away = LlmResponse {
        go_away: Some(GoAway {
            time_left: Some("10s".into()),
        }),
        ..LlmResponse::default()
    };
    assert_eq!(message(go_away), json!({"goAway": {"timeLeft": "10s"}}));
    let nothing = LlmResponse {
        model_version: Some("sim".into()),
        ..LlmResponse::default()
    };
    assert!(Outbound::new(Api::Developer).messages(&nothing).is_empty());
}

#[test]
fn an_interrupted_answer_passes_through_and_its_turn_complete_carries_usage() {
    let mut outbound = Outbound::new(Api::Developer);
    let interrupted = LlmResponse {
        interrupted: true,
        ..LlmResponse::default()
    };
    // The sim follows `interrupted` with its own `turnComplete`; nothing is added here.
    let sent = outbound.messages(&interrupted);
    assert_eq!(sent, [json!({"serverContent": {"interrupted": true}})]);
    let complete = LlmResponse {
        usage_metadata: Some(usage()),
        turn_complete: true,
        ..LlmResponse::default()
    };
    let sent = outbound.messages(&complete);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["serverContent"], json!({"turnComplete": true}));
    assert_eq!(sent[0]["usageMetadata"]["responseTokenCount"], 23);
    // Already complete: nothing added.
    let both = LlmResponse {
        turn_complete: true,
        ..interrupted
    };
    assert_eq!(
        outbound.messages(&both),
        [json!({"serverContent": {"turnComplete": true, "interrupted": true}})]
    );
}

#[test]
fn setup_reads_unspecified_enums_and_typed_speech_and_proactivity() {
    let config = setup(json!({"setup": {
        "model": "models/m",
        "generationConfig": {"speechConfig": {"languageCode": "de-DE"}},
        "realtimeInputConfig": {
            "automaticActivityDetection": {"startOfSpeechSensitivity": "START_SENSITIVITY_UNSPECIFIED",
                "endOfSpeechSensitivity": "END_SENSITIVITY_LOW"},
            "activityHandling": "ACTIVITY_HANDLING_UNSPECIFIED",
        },
        "contextWindowCompression": {"slidingWindow": {}},
        "proactivity": {"proactiveAudio": false},
    }}));
    let speech = config.speech_config.unwrap();
    assert_eq!(
        (speech.voice_name, speech.language_code.as_deref()),
        (None, Some("de-DE"))
    );
    let realtime = config.realtime_input_config.unwrap();
    assert!(
        realtime.activity_interrupts(),
        "unspecified handling interrupts"
    );
    let auto = realtime.automatic_activity_detection.unwrap();
    assert_eq!(
        auto.start_of_speech_sensitivity,
        Some(StartSensitivity::Unspecified)
    );
    assert_eq!(
        auto.end_of_speech_sensitivity,
        Some(livegate::model::EndSensitivity::Low)
    );
    assert_eq!(
        config.context_window_compression,
        Some(ContextWindowCompression::default())
    );
    assert_eq!(config.proactivity.unwrap().proactive_audio, Some(false));
    // A sensitivity Gemini does not know is refused, as Gemini refuses it.
    rejected(
        &json!({"setup": {"model": "models/m", "realtimeInputConfig": {
            "automaticActivityDetection": {"startOfSpeechSensitivity": "VERY"}}}})
        .to_string(),
    );
}
