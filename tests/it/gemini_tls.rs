//! The `gemini` backend dials `wss://` and trusts the certificates `SSL_CERT_FILE` names beside
//! the built-in roots (a private CA or proxy; here `mock-gemini --tls-cert`).

use std::path::PathBuf;

use crate::common::process::{listening_addr, output_of, spawn};
use crate::common::*;
use livegate::model::sim::SimConfig;
use livegate_mock::gemini::{self as mockgemini, MockGeminiConfig, TlsFiles};

#[tokio::test]
async fn a_turn_over_wss_to_a_server_whose_certificate_ssl_cert_file_names() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
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
    // A process of its own: the TLS roots are read once per process, from its environment.
    let base = format!("wss://{}", upstream.addr);
    let cert = fixtures.join("cert.pem");
    let (gateway, line) = spawn(
        &[
            "--bind",
            "127.0.0.1:0",
            "--session-store",
            "memory:",
            "--artifact-store",
            "memory:",
            "--model",
            "gemini-2.5-flash-native-audio-preview-12-2025",
            "--gemini-base-url",
            &base,
        ],
        &[
            ("SSL_CERT_FILE", cert.to_str().unwrap()),
            ("GEMINI_API_KEY", "test-key"),
        ],
        "listening on http://",
    )
    .await;
    let mut client = Client::connect(listening_addr(&line), "u1", "s1", "modality=TEXT").await;
    client.send_text("hello over tls").await;
    let events = client.events_until_turn_complete().await;
    client.close().await;
    let output = output_of(gateway).await;
    assert!(
        events.iter().all(|e| e.get("errorCode").is_none()),
        "{events:#?}\n{}",
        output.stderr
    );
    assert!(events.iter().any(|e| text_of(e).contains("hello over tls")));
    upstream.shutdown().await;
}
