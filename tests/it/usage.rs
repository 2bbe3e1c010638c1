//! Usage totals: the model's tokens and the audio each way, per session and per user in the REST
//! API, and in `/metrics` without user labels.

use serde_json::Value;

use crate::common::{
    fixture_pcm, http_get, is_turn_complete, metric, silence, start, test_args, Client, WAIT,
};

async fn get_json(addr: std::net::SocketAddr, path: &str) -> Value {
    let response = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

#[tokio::test]
async fn a_sessions_tokens_and_audio_add_up_in_the_api_and_the_metrics() {
    let server = start(test_args()).await;
    let addr = server.addr;

    // A spoken turn in one session, two typed turns in another.
    let mut client = Client::connect(addr, "u1", "spoken", "").await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    let sent_seconds = pcm.len() as f64 / 32_000.0;
    client.stream_pcm(&pcm).await;
    client.frames_until(is_turn_complete).await;
    client.close().await;
    let mut client = Client::connect(addr, "u1", "typed", "modality=TEXT").await;
    for text in ["hello", "what is 2 + 2"] {
        client.send_text(text).await;
        client.events_until_turn_complete().await;
    }
    client.close().await;
    tokio::time::timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("the runs end");

    let spoken = &get_json(addr, "/api/sessions/u1/spoken").await["session"]["usage"];
    assert!(spoken["inputTokens"].as_u64().unwrap() > 0, "{spoken}");
    assert!(spoken["outputTokens"].as_u64().unwrap() > 0, "{spoken}");
    assert!(
        spoken["outputAudioTokens"].as_u64().unwrap() > 0,
        "{spoken}"
    );
    assert_eq!(spoken["turns"], 1);
    // The speech reached the model before its answer's usage was stored; the answer was spoken.
    let heard = spoken["audioSecondsIn"].as_f64().unwrap();
    assert!(
        heard > 1.0 && heard <= sent_seconds + 0.01,
        "{heard} of {sent_seconds}"
    );
    assert!(
        spoken["audioSecondsOut"].as_f64().unwrap() > 0.1,
        "{spoken}"
    );

    let typed = &get_json(addr, "/api/sessions/u1/typed").await["session"]["usage"];
    assert_eq!(typed["turns"], 2);
    assert_eq!(typed["audioSecondsOut"], 0.0);
    assert!(typed["outputTextTokens"].as_u64().unwrap() > 0, "{typed}");

    let user = get_json(addr, "/api/users/u1/usage").await;
    assert_eq!(user["sessions"], 2);
    for key in ["inputTokens", "outputTokens", "turns"] {
        assert_eq!(
            user["usage"][key].as_u64().unwrap(),
            spoken[key].as_u64().unwrap() + typed[key].as_u64().unwrap(),
            "{key}"
        );
    }
    let nobody = get_json(addr, "/api/users/u2/usage").await;
    assert_eq!(nobody["sessions"], 0);
    assert_eq!(nobody["usage"]["inputTokens"], 0);

    // The totals go on from what the session had: a second connection adds to them.
    let mut client = Client::connect(addr, "u1", "typed", "modality=TEXT").await;
    client.send_text("hello again").await;
    client.events_until_turn_complete().await;
    client.close().await;
    tokio::time::timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("the run ends");
    let again = &get_json(addr, "/api/sessions/u1/typed").await["session"]["usage"];
    assert_eq!(again["turns"], 3);
    assert!(again["inputTokens"].as_u64() > typed["inputTokens"].as_u64());

    let metrics = http_get(addr, "/metrics").await;
    let input = metric(
        &metrics,
        r#"livegate_model_tokens_total{direction="input"}"#,
    )
    .unwrap();
    assert_eq!(
        input,
        again["inputTokens"].as_f64().unwrap() + spoken["inputTokens"].as_f64().unwrap()
    );
    let audio_in = metric(&metrics, r#"livegate_audio_seconds_total{direction="in"}"#).unwrap();
    assert!(
        (audio_in - sent_seconds).abs() < 0.01,
        "{audio_in} vs {sent_seconds}"
    );
    let audio_out = metric(&metrics, r#"livegate_audio_seconds_total{direction="out"}"#).unwrap();
    assert!(audio_out > 0.1);
    assert!(!metrics.contains("u1"), "no user labels");
    server.shutdown(WAIT).await;
}
