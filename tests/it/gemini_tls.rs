//! The `gemini` backend dials `wss://` and trusts the certificates `SSL_CERT_FILE` names beside
//! the built-in roots (a private CA or proxy; here `mock-gemini --tls-cert`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::*;
use livegate::model::sim::SimConfig;
use livegate_mock::gemini::{self as mockgemini, MockGeminiConfig, TlsFiles};

#[tokio::test]
async fn a_turn_over_wss_to_a_server_whose_certificate_ssl_cert_file_names() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
    // The only test in this binary, and before the first connection reads it.
    std::env::set_var("SSL_CERT_FILE", fixtures.join("cert.pem"));
    let config = MockGeminiConfig {
        sim: SimConfig::instant(),
        tls: Some(TlsFiles {
            cert: fixtures.join("cert.pem"),
            key: fixtures.join("key.pem"),
        }),
        ..MockGeminiConfig::default()
    };
    let upstream = mockgemini::start("127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("mock-gemini starts");
    let mut args = test_args();
    args.model = "gemini-2.5-flash-native-audio-preview-12-2025".into();
    args.gemini_base_url = format!("wss://{}", upstream.addr);
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("hello over tls").await;
    let events = client.events_until_turn_complete().await;
    assert!(
        events.iter().all(|e| e.get("errorCode").is_none()),
        "{events:#?}"
    );
    assert!(events.iter().any(|e| text_of(e).contains("hello over tls")));
    client.close().await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}
