//! Phone calls over real sockets: the call simulator (`livegate_loadtest::phone`) speaks
//! Twilio's protocol to a gateway on `sim`, mock-openai or mock-gemini: a whole call, barge-in
//! with `clear` and truncation at the last mark, DTMF, hang-ups, bad messages, signatures, a
//! failing model, a draining node, and a Telnyx call.

use std::time::Duration;

use crate::common::*;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use livegate::gateway::auth::Secret;
use livegate::gateway::config::Pacing;
use livegate::gateway::ServeArgs;
use livegate::session::GetSessionConfig;
use livegate_loadtest::phone::{twilio_signature, Dial, Phone, PhoneEvent, Utterance};
use livegate_loadtest::speech_end;
use livegate_mock::openai::{self as mockopenai, MockOpenAiConfig};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const TOKEN: &str = "twilio-test-auth-token";

fn utterance(name: &str) -> Utterance {
    let pcm = fixture_pcm(name);
    let end = speech_end(&pcm);
    Utterance::from_pcm16k(&pcm, end)
}

fn dial(server: &livegate::gateway::Server, call: &str) -> Dial {
    Dial {
        http_base: format!("http://{}", server.addr),
        carrier: "twilio".into(),
        auth_token: None,
        call_sid: call.into(),
        from: "+15550100".into(),
        to: "+15550199".into(),
        query: "campaign=spring".into(),
    }
}

/// Call args: state kept in the session (`call.` prefix) so tests can read it back.
fn call_args() -> ServeArgs {
    let mut args = test_args();
    args.telephony.telephony_state_prefix = "call.".into();
    args
}

/// Answer audio until none comes for `quiet`; the bytes and everything seen.
async fn answer(phone: &mut Phone, quiet: Duration) -> (usize, Vec<PhoneEvent>) {
    let (first, _) = phone
        .until(WAIT, |e| matches!(e, PhoneEvent::Audio { .. }))
        .await
        .expect("answer audio");
    let PhoneEvent::Audio { mut bytes, .. } = first else {
        unreachable!()
    };
    let mut seen = Vec::new();
    while let Some(event) = phone.next(quiet).await {
        if let PhoneEvent::Audio { bytes: more, .. } = event {
            bytes += more;
        }
        seen.push(event);
    }
    (bytes, seen)
}

async fn session_state(
    server: &livegate::gateway::Server,
    user: &str,
    session: &str,
) -> (serde_json::Map<String, Value>, Vec<livegate::event::Event>) {
    tokio::time::timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("calls finish");
    let session = server
        .gateway()
        .runner
        .sessions
        .get_session("livegate", user, session, &GetSessionConfig::default())
        .await
        .unwrap()
        .expect("the call's session exists");
    (session.state, session.events)
}

#[tokio::test]
async fn a_whole_call_is_answered_acknowledged_recorded_and_ends_on_hang_up() {
    let server = start(call_args()).await;
    let http = reqwest::Client::new();
    let mut phone = Phone::dial(&http, &dial(&server, "CAwhole")).await.unwrap();
    assert!(
        phone.twiml.contains(&format!(
            "<Stream url=\"ws://{}/telephony/twilio/stream\">",
            server.addr
        )),
        "{}",
        phone.twiml
    );
    phone.speak(&utterance("hello.wav")).await;
    let (bytes, seen) = answer(&mut phone, Duration::from_millis(1500)).await;
    // The sim echoes the utterance: about as long as it, at 8 kHz μ-law.
    assert!(bytes > 8_000, "{bytes} bytes of answer");
    let acked = seen
        .iter()
        .filter(|e| matches!(e, PhoneEvent::Acked(_)))
        .count();
    assert!(acked > 0, "every media has its mark: {seen:?}");
    phone.hang_up().await;
    phone
        .until(WAIT, |e| matches!(e, PhoneEvent::Closed(_)))
        .await
        .expect("closed");
    let (state, events) = session_state(&server, "tel-15550100", "CAwhole").await;
    assert_eq!(state["call.caller"], "+15550100");
    assert_eq!(state["call.called"], "+15550199");
    assert_eq!(state["call.campaign"], "spring");
    assert_eq!(state["call.carrier"], "twilio");
    assert!(
        events
            .iter()
            .any(|e| e.input_transcription.is_some() || e.output_transcription.is_some()),
        "the call's turn is in its session"
    );
    let (input, output) = recorded_audio(&server, "tel-15550100", "CAwhole").await;
    assert!(input > 0 && output > 0, "recorded {input} in, {output} out");
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn barge_in_clears_the_phone_and_truncates_openai_at_the_last_mark() {
    let upstream = mockopenai::start(
        "127.0.0.1:0".parse().unwrap(),
        MockOpenAiConfig {
            sim: livegate::model::sim::SimConfig {
                pacing: livegate::model::sim::Pacing::RealTime,
                reply_delay: Duration::ZERO,
                ..Default::default()
            },
            ..MockOpenAiConfig::default()
        },
    )
    .await
    .unwrap();
    let mut args = call_args();
    args.model = "gpt-realtime".into();
    args.openai_base_url = format!("ws://{}", upstream.addr);
    let server = start(args).await;
    let http = reqwest::Client::new();
    let mut phone = Phone::dial(&http, &dial(&server, "CAbarge")).await.unwrap();
    phone.speak(&utterance("count.wav")).await;
    phone
        .until(WAIT, |e| matches!(e, PhoneEvent::Audio { .. }))
        .await
        .expect("the answer starts");
    // Let some of it play (marks come back), then speak over it.
    let (acked, _) = phone
        .until(
            WAIT,
            |e| matches!(e, PhoneEvent::Acked(name) if name.starts_with("0:")),
        )
        .await
        .expect("a mark of the answer comes back as it plays");
    phone.speak(&utterance("hello.wav")).await;
    phone
        .until(WAIT, |e| matches!(e, PhoneEvent::Clear))
        .await
        .expect("the gateway clears the phone's audio");
    let truncation = upstream
        .wait_for_truncations(1, WAIT)
        .await
        .pop()
        .expect("OpenAI was told where the answer was cut");
    let PhoneEvent::Acked(name) = acked else {
        unreachable!()
    };
    let first_mark: u64 = name[2..].parse().unwrap();
    assert!(
        truncation.audio_end_ms >= first_mark && truncation.audio_end_ms < truncation.item_audio_ms,
        "cut at a mark the phone acknowledged ({first_mark} ms or later), before the end: {truncation:?}"
    );
    phone.hang_up().await;
    let (state, _) = session_state(&server, "tel-15550100", "CAbarge").await;
    let heard = &state["interrupted_answer"];
    let heard_ms = heard["heardMs"]
        .as_u64()
        .expect("what was heard is recorded");
    assert!(
        heard_ms >= first_mark && heard_ms <= heard["sentMs"].as_u64().unwrap(),
        "{heard}"
    );
    assert_eq!(
        heard_ms, truncation.audio_end_ms,
        "the session and OpenAI agree on where the caller stopped hearing"
    );
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn keys_pressed_become_a_user_turn_the_agent_answers() {
    let mut args = call_args();
    args.telephony.telephony_dtmf_gap_ms = 200;
    let server = start(args).await;
    let http = reqwest::Client::new();
    let mut phone = Phone::dial(&http, &dial(&server, "CAkeys")).await.unwrap();
    phone.press("12#").await;
    let (bytes, _) = answer(&mut phone, Duration::from_millis(1000)).await;
    assert!(bytes > 0, "the agent answers the keys");
    phone.press("7").await;
    // No `#`: the pause sends it.
    answer(&mut phone, Duration::from_millis(1000)).await;
    phone.hang_up().await;
    let (state, events) = session_state(&server, "tel-15550100", "CAkeys").await;
    let turns: Vec<String> = events
        .iter()
        .filter(|e| e.author == "user")
        .filter_map(|e| e.content.as_ref().map(|c| c.joined_text()))
        .filter(|text| !text.is_empty())
        .collect();
    assert_eq!(turns, ["DTMF: 12#", "DTMF: 7"], "{events:?}");
    assert_eq!(state["call.dtmf"], "7");
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn hanging_up_mid_answer_ends_the_run_and_keeps_the_recordings() {
    let mut args = call_args();
    args.sim_pacing = Pacing::RealTime;
    let server = start(args).await;
    let http = reqwest::Client::new();
    let mut phone = Phone::dial(&http, &dial(&server, "CAhangup"))
        .await
        .unwrap();
    phone.speak(&utterance("count.wav")).await;
    phone
        .until(WAIT, |e| matches!(e, PhoneEvent::Audio { .. }))
        .await
        .expect("the answer starts");
    phone.hang_up().await;
    let (input, output) = recorded_audio(&server, "tel-15550100", "CAhangup").await;
    assert!(input > 0 && output > 0, "recorded {input} in, {output} out");
    assert_eq!(server.gateway().limits.live_connections(), 0);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn bad_messages_are_refused_and_the_call_goes_on() {
    let server = start(call_args()).await;
    let http = reqwest::Client::new();
    let mut phone = Phone::dial(&http, &dial(&server, "CAbad")).await.unwrap();
    for bad in [
        "not json",
        r#"{"event":"media"}"#,
        r#"{"event":"media","media":{"payload":"!!!"}}"#,
        r#"{"event":"dtmf","dtmf":{"digit":"x"}}"#,
        r#"{"event":"start","start":{"streamSid":"MZ2","callSid":"CA2"}}"#,
    ] {
        phone.send_raw(bad).await;
    }
    phone.send_raw(r#"{"event":"dance"}"#).await;
    phone.speak(&utterance("hello.wav")).await;
    let (bytes, _) = answer(&mut phone, Duration::from_millis(1000)).await;
    assert!(bytes > 0, "the call goes on");
    metric_reaches(
        server.addr,
        r#"livegate_errors_total{code="INVALID_ARGUMENT"}"#,
        5.0,
    )
    .await;
    phone.hang_up().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_stream_that_does_not_start_properly_is_closed() {
    let server = start(call_args()).await;
    let url = format!("ws://{}/telephony/twilio/stream", server.addr);
    for first in [
        json!({"event": "media", "media": {"payload": "/w=="}}),
        json!({"event": "start", "start": {"streamSid": "MZ1", "callSid": "CA1", "mediaFormat": {"encoding": "audio/l16", "sampleRate": 16000}}}),
    ] {
        let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .unwrap();
        ws.send(Message::Text(first.to_string().into()))
            .await
            .unwrap();
        let closed = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("closed in time");
        let Some(Ok(Message::Close(Some(frame)))) = closed else {
            panic!("{closed:?}");
        };
        assert_eq!(u16::from(frame.code), 1008, "{first}");
    }
    server.shutdown(WAIT).await;
}

/// A gateway with auth on: an operator key, a token secret, and Twilio's auth token.
fn secured_args() -> ServeArgs {
    let mut args = call_args();
    args.secrets.token_secret = Some(Secret::new("0123456789abcdef0123456789abcdef-test"));
    args.secrets.api_keys = Some(Secret::new("operator-key-for-the-telephony-tests"));
    args.auth = Some(livegate::gateway::auth::AuthMode::Token);
    args.telephony.secrets.twilio_auth_token = Some(Secret::new(TOKEN));
    args
}

#[tokio::test]
async fn webhook_signatures_and_stream_tokens_are_checked() {
    let server = start(secured_args()).await;
    let http = reqwest::Client::new();
    let url = format!("http://{}/telephony/twilio/voice", server.addr);
    let post = |signature: Option<String>| {
        let mut request = http
            .post(&url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body("CallSid=CAsigned&From=%2B15550100");
        if let Some(signature) = signature {
            request = request.header("x-twilio-signature", signature);
        }
        request.send()
    };
    let fields = [("CallSid", "CAsigned"), ("From", "+15550100")];
    assert_eq!(post(None).await.unwrap().status(), 403, "unsigned");
    let forged = twilio_signature("not-the-token", &url, &fields);
    assert_eq!(post(Some(forged)).await.unwrap().status(), 403, "wrong key");
    let other_url = twilio_signature(TOKEN, "http://elsewhere/voice", &fields);
    assert_eq!(
        post(Some(other_url)).await.unwrap().status(),
        403,
        "another URL"
    );
    // The stream cannot be opened without the webhook's token, or with a made-up one.
    for path in ["stream", "stream/not.a.token"] {
        let stream = format!("ws://{}/telephony/twilio/{path}", server.addr);
        let refused = tokio_tungstenite::connect_async(stream.as_str()).await;
        assert!(refused.is_err(), "{path}");
    }
    let metrics = http_get(server.addr, "/metrics").await;
    let failures = |reason: &str| {
        metric(
            &metrics,
            &format!("livegate_auth_failures_total{{reason=\"{reason}\"}}"),
        )
    };
    assert!(
        failures("webhook_unsigned") == Some(1.0)
            && failures("webhook_signature") == Some(2.0)
            && failures("stream_token") == Some(1.0),
        "{metrics}"
    );
    // Signed as Twilio signs: the TwiML's stream URL carries a token, and the call works.
    let mut signed = dial(&server, "CAsigned");
    signed.auth_token = Some(TOKEN.into());
    let mut phone = Phone::dial(&http, &signed)
        .await
        .expect("a signed call connects");
    assert!(
        phone.twiml.contains("/telephony/twilio/stream/ey"),
        "{}",
        phone.twiml
    );
    phone.speak(&utterance("hello.wav")).await;
    let (bytes, _) = answer(&mut phone, Duration::from_millis(1000)).await;
    assert!(bytes > 0);
    phone.hang_up().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_gateway_with_auth_and_no_carrier_secret_refuses_webhooks() {
    let mut args = secured_args();
    args.telephony.secrets.twilio_auth_token = None;
    let server = start(args).await;
    let response = reqwest::Client::new()
        .post(format!("http://{}/telephony/twilio/voice", server.addr))
        .body("CallSid=CA1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.text().await.unwrap().contains("TWILIO_AUTH_TOKEN"));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_failing_model_says_goodbye_and_the_call_ends() {
    let upstream = mockopenai::start(
        "127.0.0.1:0".parse().unwrap(),
        MockOpenAiConfig {
            fail_after: Some(2),
            sim: livegate::model::sim::SimConfig::instant(),
            ..MockOpenAiConfig::default()
        },
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let goodbye = dir.path().join("goodbye.ulaw");
    // Half a second of a tone, as the operator's recording would be.
    let clip: Vec<u8> = (0..4000)
        .map(|i| if i % 16 < 8 { 0x20 } else { 0xa0 })
        .collect();
    std::fs::write(&goodbye, &clip).unwrap();
    let mut args = call_args();
    args.model = "gpt-realtime".into();
    args.openai_base_url = format!("ws://{}", upstream.addr);
    args.telephony.telephony_goodbye = Some(goodbye);
    let server = start(args).await;
    let http = reqwest::Client::new();
    let mut phone = Phone::dial(&http, &dial(&server, "CAfail")).await.unwrap();
    phone.speak(&utterance("hello.wav")).await;
    let (closed, seen) = phone
        .until(WAIT, |e| matches!(e, PhoneEvent::Closed(_)))
        .await
        .expect("the call ends");
    assert_eq!(closed, PhoneEvent::Closed(Some(1011)));
    assert!(
        seen.contains(&PhoneEvent::Acked("goodbye".into())),
        "the goodbye played to its mark before the end: {seen:?}"
    );
    let audio: usize = seen
        .iter()
        .map(|e| match e {
            PhoneEvent::Audio { bytes, .. } => *bytes,
            _ => 0,
        })
        .sum();
    assert!(audio >= clip.len(), "the whole goodbye was sent");
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
async fn a_draining_node_lets_calls_finish_within_its_drain_timeout() {
    let mut args = call_args();
    // Generous: the call's grace (the timeout less 3 s to flush) must outlast a paced utterance
    // and its answer on a loaded CI machine, where 3 s of grace was once not enough.
    args.drain_timeout = 15;
    let server = start(args).await;
    let http = reqwest::Client::new();
    let mut phone = Phone::dial(&http, &dial(&server, "CAdrain")).await.unwrap();
    let gateway = server.gateway().clone();
    let shutdown = tokio::spawn(server.shutdown(Duration::from_secs(15)));
    tokio::time::timeout(WAIT, async {
        while !gateway.shutdown.is_fired() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    // The call in progress goes on: it is still answered.
    phone.speak(&utterance("hello.wav")).await;
    let (bytes, seen) = answer(&mut phone, Duration::from_millis(1000)).await;
    assert!(bytes > 0, "answered while draining: {seen:?}");
    // Then, within the drain timeout less a margin to flush, the node ends it.
    let closed = match seen.iter().find(|e| matches!(e, PhoneEvent::Closed(_))) {
        Some(closed) => closed.clone(),
        None => {
            phone
                .until(WAIT, |e| matches!(e, PhoneEvent::Closed(_)))
                .await
                .expect("the call is ended by the drain")
                .0
        }
    };
    assert_eq!(closed, PhoneEvent::Closed(Some(1012)));
    shutdown.await.unwrap();
}

#[tokio::test]
async fn a_telnyx_call_speaks_telnyx_s_protocol() {
    let server = start(call_args()).await;
    let response = reqwest::Client::new()
        .post(format!("http://{}/telephony/telnyx/voice", server.addr))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("CallSid=v3%3Atelnyx-call&From=%2B15550100&To=%2B15550199")
        .send()
        .await
        .unwrap();
    let texml = response.text().await.unwrap();
    assert!(texml.contains("bidirectionalMode=\"rtp\""), "{texml}");
    let url = format!("ws://{}/telephony/telnyx/stream", server.addr);
    let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    let start = json!({"event": "start", "sequence_number": "1", "stream_id": "S-telnyx", "start": {
        "call_control_id": "v3:telnyx-call", "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1},
        "custom_parameters": {"From": "+15550100"}}});
    ws.send(Message::Text(start.to_string().into()))
        .await
        .unwrap();
    let pcm = fixture_pcm("hello.wav");
    let mut ulaw = livegate_loadtest::phone::ulaw_of(&Bytes::from(pcm));
    ulaw.extend(std::iter::repeat_n(0xff, 8_000));
    let sender = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        for frame in ulaw.chunks(160) {
            tick.tick().await;
            let media = json!({"event": "media", "stream_id": "S-telnyx", "media": {"track": "inbound", "payload": STANDARD.encode(frame)}});
            if ws
                .send(Message::Text(media.to_string().into()))
                .await
                .is_err()
            {
                break;
            }
        }
        ws
    });
    let mut ws = sender.await.unwrap();
    let media = tokio::time::timeout(WAIT, async {
        while let Some(Ok(message)) = ws.next().await {
            if let Message::Text(text) = message {
                let value: Value = serde_json::from_str(text.as_str()).unwrap();
                if value["event"] == "media" {
                    return value;
                }
            }
        }
        Value::Null
    })
    .await
    .expect("answer media");
    assert!(media.get("streamSid").is_none(), "Telnyx's shape: {media}");
    assert!(media["media"]["payload"]
        .as_str()
        .is_some_and(|p| !p.is_empty()));
    let stop = json!({"event": "stop", "stream_id": "S-telnyx", "stop": {}});
    ws.send(Message::Text(stop.to_string().into()))
        .await
        .unwrap();
    let (_, events) = session_state(&server, "tel-15550100", "v3:telnyx-call").await;
    assert!(!events.is_empty());
    server.shutdown(WAIT).await;
}

/// Answers' first frames: one per model chunk of 20 ms or more, at once; a shorter chunk goes
/// out with the next, and either way the frame is timed (`/metrics`) from the model's first
/// audio and from the end of the caller's speech, as a browser's answer is.
#[tokio::test]
async fn an_answers_first_frame_is_sent_and_timed_from_the_models_first_audio() {
    for chunk_ms in [40, 10] {
        let mut args = call_args();
        args.sim_chunk_ms = Some(chunk_ms);
        let server = start(args).await;
        let http = reqwest::Client::new();
        let call = format!("CAfirst{chunk_ms}");
        let mut phone = Phone::dial(&http, &dial(&server, &call)).await.unwrap();
        phone.speak(&utterance("hello.wav")).await;
        let (first, _) = phone
            .until(WAIT, |e| matches!(e, PhoneEvent::Audio { .. }))
            .await
            .expect("answer audio");
        if chunk_ms == 40 {
            // The model's first chunk, alone: 40 ms of μ-law, not held for more.
            assert!(
                matches!(first, PhoneEvent::Audio { bytes: 320, .. }),
                "{first:?}"
            );
        }
        metric_reaches(
            server.addr,
            "livegate_answer_forward_latency_seconds_count",
            1.0,
        )
        .await;
        metric_reaches(
            server.addr,
            "livegate_first_audio_latency_seconds_count",
            1.0,
        )
        .await;
        phone.hang_up().await;
        server.shutdown(WAIT).await;
    }
}
