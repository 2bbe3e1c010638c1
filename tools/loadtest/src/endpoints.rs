//! The gateway's HTTP endpoints, found from its WebSocket URL.

/// The gateway's `/metrics` URL for a WebSocket base URL: the endpoint beside `/ws`, under the
/// same path prefix (`ws://host:port/ws` ⇒ `http://host:port/metrics`, `wss://host/live/ws` ⇒
/// `https://host/live/metrics`).
pub fn metrics_url(ws_url: &str) -> Option<String> {
    let (scheme, rest) = if let Some(rest) = ws_url.strip_prefix("ws://") {
        ("http", rest)
    } else {
        ("https", ws_url.strip_prefix("wss://")?)
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() {
        return None;
    }
    // The gateway serves `/metrics` beside `/ws`: whatever stands before the last segment is a
    // proxy's prefix, which the metrics sit under too.
    let prefix = path
        .trim_end_matches('/')
        .rsplit_once('/')
        .map_or("", |(prefix, _)| prefix);
    let slash = if prefix.is_empty() { "" } else { "/" };
    Some(format!("{scheme}://{host}/{prefix}{slash}metrics"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_url_follows_the_websocket_url() {
        for (ws, metrics) in [
            (
                "ws://127.0.0.1:8080/ws",
                Some("http://127.0.0.1:8080/metrics"),
            ),
            // A proxy's prefix is kept; the query is not.
            (
                "wss://example.com/live/ws?x=1",
                Some("https://example.com/live/metrics"),
            ),
            (
                "ws://example.com/a/b/ws/",
                Some("http://example.com/a/b/metrics"),
            ),
            (
                "ws://example.com:9000",
                Some("http://example.com:9000/metrics"),
            ),
            ("ws://example.com?/x/ws", Some("http://example.com/metrics")),
            ("http://example.com/ws", None),
            ("ws:///ws", None),
        ] {
            assert_eq!(metrics_url(ws).as_deref(), metrics, "{ws}");
        }
    }
}
