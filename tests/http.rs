//! The gateway's plain HTTP routes: health, readiness, and the embedded web client.

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
