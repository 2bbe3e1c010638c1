//! The gateway's plain HTTP routes: health, readiness, metrics, and the embedded web client.

use crate::common::*;

#[tokio::test]
async fn health_readiness_and_the_web_client_are_served() {
    let server = start(test_args()).await;
    let health = http_get(server.addr, "/healthz").await;
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("ok"),
        "{health}"
    );
    let ready = http_get(server.addr, "/readyz").await;
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");

    let page = http_get(server.addr, "/").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page
        .to_ascii_lowercase()
        .contains("content-type: text/html"));
    assert!(page.contains("<title>livegate</title>") && page.contains("app.js"));
    let script = http_get(server.addr, "/app.js").await;
    assert!(
        script
            .to_ascii_lowercase()
            .contains("content-type: text/javascript"),
        "module scripts need a JavaScript type"
    );
    for worklet in ["/pcm-recorder-processor.js", "/pcm-player-processor.js"] {
        assert!(
            http_get(server.addr, worklet)
                .await
                .starts_with("HTTP/1.1 200"),
            "{worklet}"
        );
    }
    assert!(http_get(server.addr, "/missing.js")
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

#[tokio::test]
async fn metrics_count_connections_client_frames_and_answer_forwarding() {
    let server = start(test_args()).await;
    let metrics = http_get(server.addr, "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics
        .to_ascii_lowercase()
        .contains("content-type: application/openmetrics-text"));
    assert_eq!(metric(&metrics, "livegate_connections"), Some(0.0));

    let mut client = Client::connect(server.addr, "u1", "metrics", "").await;
    for _ in 0..3 {
        client.send_binary(silence(20)).await;
    }
    // The reader takes messages in order: once the text turn is answered, all four are counted.
    client.send_text("hello").await;
    client.events_until_turn_complete().await;
    let metrics = http_get(server.addr, "/metrics").await;
    assert_eq!(metric(&metrics, "livegate_connections"), Some(1.0));
    let audio_in = r#"livegate_frames_total{direction="in",kind="audio"}"#;
    let text_in = r#"livegate_frames_total{direction="in",kind="text"}"#;
    assert_eq!(metric(&metrics, audio_in), Some(3.0), "{metrics}");
    assert_eq!(metric(&metrics, text_in), Some(1.0), "{metrics}");
    let bytes_in = r#"livegate_bytes_total{direction="in"}"#;
    assert!(metric(&metrics, bytes_in).is_some_and(|b| b >= 3.0 * 640.0));
    assert!(
        client.audio_bytes > 0,
        "the sim answers a text turn in audio"
    );
    assert_eq!(
        metric(&metrics, "livegate_answer_forward_latency_seconds_count"),
        Some(1.0),
        "{metrics}"
    );

    // Leaving is counted too.
    client.close().await;
    metric_reaches(server.addr, "livegate_connections", 0.0).await;
    server.shutdown(WAIT).await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn metrics_report_the_process_cpu_memory_and_descriptors() {
    use livegate::procfs::Usage;

    let server = start(test_args()).await;
    let before = Usage::read("self").expect("a readable /proc/self");
    let metrics = http_get(server.addr, "/metrics").await;
    let after = Usage::read("self").expect("a readable /proc/self");
    let value = |name: &str| metric(&metrics, name).unwrap_or_else(|| panic!("{name}: {metrics}"));
    // The gateway runs inside this test process, so its numbers are this process's: the CPU
    // time it reports lies between two readings of our own taken around the scrape (a young
    // process may not have used a clock tick yet, so it cannot be required above zero).
    let cpu = value("process_cpu_seconds_total");
    assert!(
        (before.cpu_seconds..=after.cpu_seconds).contains(&cpu),
        "{cpu} not in {}..={}",
        before.cpu_seconds,
        after.cpu_seconds
    );
    let rss = value("process_resident_memory_bytes");
    assert!(rss > 1024.0 * 1024.0, "{rss}");
    assert!(value("process_virtual_memory_bytes") >= rss);
    assert!(value("process_threads") >= 1.0);
    let (open, max) = (value("process_open_fds"), value("process_max_fds"));
    assert!(open >= 3.0 && open <= max, "{open} of {max}");
    let started = value("process_start_time_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started <= now + 1.0 && started > now - 24.0 * 3600.0,
        "{started}"
    );
    // Standard names: no gateway prefix on them.
    assert!(!metrics.contains("livegate_process_"));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn metrics_count_runs_events_errors_and_saved_recordings() {
    let server = start(test_args()).await;
    let mut client = Client::connect(server.addr, "u1", "events", "").await;
    for _ in 0..3 {
        client.send_binary(silence(20)).await;
    }
    client.send_text("hello").await;
    let turn = client.events_until_turn_complete().await;
    client.send_raw_text("{not json").await;
    client
        .frames_until(|e| e["errorCode"] == "INVALID_ARGUMENT")
        .await;

    let metrics = http_get(server.addr, "/metrics").await;
    assert_eq!(
        metric(&metrics, "livegate_live_runs"),
        Some(1.0),
        "{metrics}"
    );
    let kind = |k: &str| metric(&metrics, &format!(r#"livegate_events_total{{kind="{k}"}}"#));
    assert_eq!(kind("turn_complete"), Some(1.0), "{metrics}");
    assert_eq!(kind("error"), Some(1.0), "{metrics}");
    assert!(kind("audio").is_some_and(|n| n >= 1.0), "{metrics}");
    let errors = r#"livegate_errors_total{code="INVALID_ARGUMENT"}"#;
    assert_eq!(metric(&metrics, errors), Some(1.0), "{metrics}");
    // Every recording the client was told about is counted as saved, and there was one.
    let announced = turn
        .iter()
        .filter(|e| e.to_string().contains("\"fileUri\":\"artifact://"))
        .count() as f64;
    assert!(announced >= 1.0, "{turn:#?}");
    let saved = r#"livegate_artifacts_saved_total{source="recording"}"#;
    assert_eq!(metric(&metrics, saved), Some(announced), "{metrics}");
    assert_eq!(kind("file_data"), Some(announced), "{metrics}");

    client.close().await;
    metric_reaches(server.addr, "livegate_live_runs", 0.0).await;
    server.shutdown(WAIT).await;
}
