//! The gateway's plain HTTP routes: health, readiness, metrics, and the embedded web client.

mod common;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 GET over a real socket; returns the status line, headers and body as text.
async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut response))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&response).into_owned()
}

#[tokio::test]
async fn health_readiness_and_the_web_client_are_served() {
    let server = start(test_args()).await;
    let health = get(server.addr, "/healthz").await;
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("ok"),
        "{health}"
    );
    let ready = get(server.addr, "/readyz").await;
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");

    let page = get(server.addr, "/").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page
        .to_ascii_lowercase()
        .contains("content-type: text/html"));
    assert!(page.contains("<title>livegate</title>") && page.contains("app.js"));
    let script = get(server.addr, "/app.js").await;
    assert!(
        script
            .to_ascii_lowercase()
            .contains("content-type: text/javascript"),
        "module scripts need a JavaScript type"
    );
    for worklet in ["/pcm-recorder-processor.js", "/pcm-player-processor.js"] {
        assert!(
            get(server.addr, worklet).await.starts_with("HTTP/1.1 200"),
            "{worklet}"
        );
    }
    assert!(get(server.addr, "/missing.js")
        .await
        .starts_with("HTTP/1.1 404"));
    server.shutdown(WAIT).await;
}

/// The web client works offline: no file in `static/` points outside the gateway (no CDN, fonts,
/// analytics). `https://` alone, in a message, names a scheme, not a place.
#[test]
fn the_web_client_names_no_external_url() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("static");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let lower = text.to_ascii_lowercase();
        for (at, _) in lower.match_indices("//") {
            let before = &lower[..at];
            let after = &lower[at + 2..];
            let scheme = before.ends_with("http:") || before.ends_with("https:");
            let quoted = ["\"", "'", "(", "="].iter().any(|q| before.ends_with(q));
            let host = after.starts_with(|c: char| c.is_ascii_alphanumeric());
            assert!(
                !((scheme || quoted) && host),
                "{}:{} names an external URL",
                path.display(),
                text[..at].lines().count()
            );
        }
        checked += 1;
    }
    assert!(checked >= 5, "static files found");
}

/// The value of one unlabelled or labelled sample line of a metrics text.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn metrics_count_connections_client_frames_and_answer_forwarding() {
    let server = start(test_args()).await;
    let metrics = get(server.addr, "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics
        .to_ascii_lowercase()
        .contains("content-type: application/openmetrics-text"));
    assert_eq!(sample(&metrics, "livegate_connections"), Some(0.0));

    let mut client = Client::connect(server.addr, "u1", "metrics", "").await;
    for _ in 0..3 {
        client.send_binary(silence(20)).await;
    }
    // The reader takes messages in order: once the text turn is answered, all four are counted.
    client.send_text("hello").await;
    client.events_until_turn_complete().await;
    let metrics = get(server.addr, "/metrics").await;
    assert_eq!(sample(&metrics, "livegate_connections"), Some(1.0));
    let audio_in = r#"livegate_frames_total{direction="in",kind="audio"}"#;
    let text_in = r#"livegate_frames_total{direction="in",kind="text"}"#;
    assert_eq!(sample(&metrics, audio_in), Some(3.0), "{metrics}");
    assert_eq!(sample(&metrics, text_in), Some(1.0), "{metrics}");
    let bytes_in = r#"livegate_bytes_total{direction="in"}"#;
    assert!(sample(&metrics, bytes_in).is_some_and(|b| b >= 3.0 * 640.0));
    assert!(
        client.audio_bytes > 0,
        "the sim answers a text turn in audio"
    );
    assert_eq!(
        sample(&metrics, "livegate_answer_forward_latency_seconds_count"),
        Some(1.0),
        "{metrics}"
    );

    // Leaving is counted too (the server notices the close on its own time: poll, bounded).
    client.close().await;
    let gone = tokio::time::timeout(WAIT, async {
        loop {
            let metrics = get(server.addr, "/metrics").await;
            if sample(&metrics, "livegate_connections") == Some(0.0) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "the connection gauge went back to 0");
    server.shutdown(WAIT).await;
}
