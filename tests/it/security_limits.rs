//! The HTTP side of the gateway's limits against the real server: header timeout and silent
//! sockets, the fd limit, connection and per-user caps, the per-address rate limit behind trusted
//! proxies, paged history reads, artifact listing by metadata, `/readyz` write checks, and TLS.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use futures::{SinkExt, StreamExt};
use livegate::artifact::{Artifact, ArtifactScope};
use livegate::event::{Content, Event};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_tungstenite::tungstenite::Message;

/// One HTTP/1.1 request on a fresh connection; returns the status code and the body.
async fn request(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut stream = timeout(WAIT, TcpStream::connect(addr))
        .await
        .expect("connect in time")
        .expect("connects");
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .expect("request sent");
    let mut response = Vec::new();
    timeout(WAIT, stream.read_to_end(&mut response))
        .await
        .expect("response in time")
        .expect("response read");
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {text:?}"));
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// Waits (bounded) until the server closes a socket that never sent anything.
async fn closed_by_server(socket: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    let read = timeout(within, async {
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                // A 408 or similar before the close is fine.
                Ok(_) => continue,
            }
        }
    })
    .await;
    read.is_ok()
}

/// The status a WebSocket upgrade is answered with (101 when it succeeds).
async fn upgrade_status(addr: SocketAddr, user: &str, session: &str) -> u16 {
    let url = format!("ws://{addr}/ws/{user}/{session}");
    match timeout(WAIT, tokio_tungstenite::connect_async(url))
        .await
        .expect("answered in time")
    {
        Ok((_, response)) => response.status().as_u16(),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("upgrade failed without an HTTP answer: {other}"),
    }
}

#[tokio::test]
async fn silent_sockets_are_closed_by_the_header_timeout_while_healthz_answers() {
    let mut args = test_args();
    args.header_read_timeout_secs = 1;
    let server = start(args).await;
    let mut silent = Vec::new();
    for _ in 0..50 {
        silent.push(TcpStream::connect(server.addr).await.expect("connects"));
    }
    // A half-sent request head counts as silent too.
    let mut partial = TcpStream::connect(server.addr).await.expect("connects");
    partial
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (status, body) = request(server.addr, "/healthz", &[]).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    for socket in silent.iter_mut().chain([&mut partial]) {
        assert!(
            closed_by_server(socket, Duration::from_secs(5)).await,
            "a silent socket is closed after the 1 s header timeout"
        );
    }
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn past_the_unfinished_cap_the_oldest_silent_socket_makes_room() {
    let mut args = test_args();
    // Long enough that only the cap can explain a close.
    args.header_read_timeout_secs = 120;
    args.max_unfinished_connections = 10;
    let server = start(args).await;
    let mut first = TcpStream::connect(server.addr).await.expect("connects");
    let mut rest = Vec::new();
    for _ in 0..30 {
        rest.push(TcpStream::connect(server.addr).await.expect("connects"));
    }
    assert!(
        closed_by_server(&mut first, Duration::from_secs(5)).await,
        "the oldest silent socket is shed"
    );
    let (status, _) = request(server.addr, "/healthz", &[]).await;
    assert_eq!(status, 200);
    let metrics = http_get(server.addr, "/metrics").await;
    let shed = metric(&metrics, "livegate_unfinished_connections_shed_total").unwrap_or(0.0);
    assert!(shed >= 20.0, "shed counted: {shed}");
    server.shutdown(WAIT).await;
}

/// Raises this process's soft fd limit to its hard limit (the test opens more than 1,024).
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    setrlimit(Resource::Nofile, limit).expect("fd limit raised");
}

/// A `livegate serve` child under an fd limit of `fds`, and its address.
async fn serve_with_fd_limit(fds: u32) -> (tokio::process::Child, SocketAddr) {
    let binary = env!("CARGO_BIN_EXE_livegate");
    let script = format!(
        "ulimit -n {fds} && exec '{binary}' serve --bind 127.0.0.1:0 --session-store memory: \
         --artifact-store memory: --header-read-timeout-secs 120"
    );
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", &script])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("livegate starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let addr: SocketAddr = timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.expect("stdout readable") {
            if let Some(addr) = line.strip_prefix("livegate listening on http://") {
                return addr.trim().parse().expect("an address");
            }
        }
        panic!("livegate exited before listening");
    })
    .await
    .expect("listening in time");
    (child, addr)
}

#[tokio::test]
async fn healthz_answers_while_silent_sockets_exceed_the_fd_limit() {
    raise_fd_limit();
    let (mut child, addr) = serve_with_fd_limit(1024).await;
    let mut silent = Vec::new();
    for _ in 0..1_100 {
        let socket = timeout(WAIT, TcpStream::connect(addr))
            .await
            .expect("connect in time");
        silent.push(socket.expect("connects"));
    }
    let started = std::time::Instant::now();
    let (status, body) = timeout(Duration::from_secs(10), request(addr, "/healthz", &[]))
        .await
        .expect("/healthz answers within 10 s");
    assert_eq!((status, body.as_str()), (200, "ok"));
    eprintln!(
        "/healthz answered in {:?} beside 1,100 silent sockets",
        started.elapsed()
    );
    drop(silent);
    child.kill().await.expect("livegate stopped");
}

#[tokio::test]
async fn the_connection_cap_answers_503_before_the_upgrade() {
    let mut args = test_args();
    args.max_connections = 2;
    let server = start(args).await;
    let a = Client::connect(server.addr, "u1", "s1", "").await;
    let _b = Client::connect(server.addr, "u2", "s2", "").await;
    assert_eq!(upgrade_status(server.addr, "u3", "s3").await, 503);
    a.close().await;
    // The slot is given back when the first connection's task ends.
    eventually(WAIT, "the closed connection leaves the count", || async {
        server.gateway().limits.live_connections() < 2
    })
    .await;
    assert_eq!(upgrade_status(server.addr, "u3", "s3").await, 101);
    let metrics = http_get(server.addr, "/metrics").await;
    assert_eq!(
        metric(
            &metrics,
            "livegate_limit_refusals_total{reason=\"connections\"}"
        ),
        Some(1.0)
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_user_has_at_most_its_cap_of_live_sessions() {
    let mut args = test_args();
    args.max_sessions_per_user = Some(2);
    let server = start(args).await;
    let _a = Client::connect(server.addr, "alice", "s1", "").await;
    let _b = Client::connect(server.addr, "alice", "s2", "").await;
    assert_eq!(upgrade_status(server.addr, "alice", "s3").await, 429);
    // Another user is not affected, and taking over one's own live session is not another one.
    let _c = Client::connect(server.addr, "bob", "s1", "").await;
    let mut again = Client::connect(server.addr, "alice", "s1", "").await;
    again.send_text("still here?").await;
    again.events_until_turn_complete().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn new_connections_are_rate_limited_per_forwarded_address_behind_trusted_proxies() {
    let mut args = test_args();
    args.connections_per_second = 2;
    args.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    let server = start(args).await;
    let path = "/api/sessions?user_id=u1";
    let from = |ip: &'static str| [("X-Forwarded-For", ip)];
    // Bursts of twice the rate pass; the bucket refills at 2 a second, so within ten quick
    // requests one is refused.
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(request(server.addr, path, &from("203.0.113.7")).await.0);
    }
    assert!(statuses[..4].iter().all(|s| *s == 200), "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    // Another client behind the same proxy has its own bucket; probes are never limited.
    assert_eq!(
        request(server.addr, path, &from("203.0.113.8")).await.0,
        200
    );
    assert_eq!(
        request(server.addr, "/healthz", &from("203.0.113.7"))
            .await
            .0,
        200
    );
    server.shutdown(WAIT).await;

    // Without trusted proxies the header is the client's own word and is ignored: the address is
    // the (loopback, unlimited) peer's.
    let mut args = test_args();
    args.connections_per_second = 2;
    let server = start(args).await;
    for _ in 0..10 {
        assert_eq!(
            request(server.addr, path, &from("203.0.113.7")).await.0,
            200
        );
    }
    server.shutdown(WAIT).await;
}

/// Sends a request on a kept-alive connection and reads the answer's status, within `within`.
async fn status_on(socket: &mut TcpStream, path: &str, within: Duration) -> Option<u16> {
    // A loopback Host: without auth, the gateway answers only loopback names (DNS rebinding).
    let head = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    socket.write_all(head.as_bytes()).await.ok()?;
    let mut buf = [0u8; 1024];
    let n = timeout(within, socket.read(&mut buf)).await.ok()?.ok()?;
    let text = String::from_utf8_lossy(&buf[..n]);
    text.split(' ').nth(1)?.parse().ok()
}

#[tokio::test]
async fn healthz_answers_when_every_descriptor_holds_a_served_connection() {
    raise_fd_limit();
    let (mut child, addr) = serve_with_fd_limit(200).await;
    // Keep-alive connections that each finished a request: nothing to shed. Fill until the
    // gateway stops answering them (its descriptors are all in use).
    let mut held = Vec::new();
    let mut refused = None;
    for _ in 0..300 {
        let mut socket = timeout(WAIT, TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("connects");
        match status_on(
            &mut socket,
            "/api/sessions?user_id=u1",
            // The accept loop may be in its longest back-off (1 s) when a filler arrives.
            Duration::from_secs(5),
        )
        .await
        {
            Some(200) => held.push(socket),
            other => {
                refused = Some(other);
                break;
            }
        }
    }
    // Let in on the reserve descriptor, refused rather than left waiting.
    assert_eq!(
        refused,
        Some(Some(503)),
        "the fd limit was reached ({} held)",
        held.len()
    );
    let (status, body) = timeout(Duration::from_secs(10), request(addr, "/healthz", &[]))
        .await
        .expect("/healthz answers within 10 s at the fd limit");
    assert_eq!((status, body.as_str()), (200, "ok"));
    eprintln!(
        "{} connections held, the next answered {:?}, /healthz 200",
        held.len(),
        refused.flatten()
    );
    drop(held);
    child.kill().await.expect("livegate stopped");
}

/// Server args with SQLite sessions and file artifacts under `dir`.
fn durable_args(dir: &Path) -> livegate::gateway::ServeArgs {
    let mut args = test_args();
    args.data_dir = dir.to_owned();
    args.session_store = None;
    args.artifact_store = None;
    args
}

#[tokio::test]
async fn a_page_of_history_reads_only_that_page_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    for args in [test_args(), durable_args(dir.path())] {
        let server = start(args).await;
        let sessions = server.gateway().runner.sessions.clone();
        let mut session = sessions
            .create_session("livegate", "u1", Some("long"), Default::default())
            .await
            .unwrap();
        let events: Vec<Event> = (0..3_000)
            .map(|i| Event {
                content: Some(Content::text("user", format!("message {i}"))),
                ..Event::new("e-1", "user")
            })
            .collect();
        for outcome in sessions.append_events(&mut session, events).await {
            outcome.expect("event stored");
        }
        let before = sessions.events_read();
        let (status, body) = request(
            server.addr,
            "/api/sessions/u1/long?offset=2990&limit=5",
            &[],
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let page: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(page["total"], 3_000);
        let texts: Vec<String> = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(text_of)
            .collect();
        assert_eq!(
            texts,
            (2990..2995)
                .map(|i| format!("message {i}"))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            sessions.events_read() - before,
            5,
            "the store read the page, not the history"
        );
        let metrics = http_get(server.addr, "/metrics").await;
        assert_eq!(
            metric(&metrics, "livegate_session_events_read_total"),
            Some(sessions.events_read() as f64)
        );
        server.shutdown(WAIT).await;
    }
}

#[tokio::test]
async fn a_live_run_reads_only_its_bounded_history() {
    let mut args = test_args();
    args.history_max_events = 40;
    let server = start(args).await;
    let sessions = server.gateway().runner.sessions.clone();
    let mut session = sessions
        .create_session("livegate", "u1", Some("long"), Default::default())
        .await
        .unwrap();
    let events: Vec<Event> = (0..2_000)
        .map(|i| Event {
            content: Some(Content::text("user", format!("message {i}"))),
            ..Event::new("e-1", "user")
        })
        .collect();
    for outcome in sessions.append_events(&mut session, events).await {
        outcome.expect("event stored");
    }
    let before = sessions.events_read();
    let mut client = Client::connect(server.addr, "u1", "long", "modality=TEXT").await;
    client.send_text("what did I say last?").await;
    client.events_until_turn_complete().await;
    client.close().await;
    let read = sessions.events_read() - before;
    assert!(
        read <= 2 * 40,
        "a live run read {read} events of a 2,000-event session"
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn listing_artifacts_reads_metadata_never_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(durable_args(dir.path())).await;
    server
        .gateway()
        .runner
        .sessions
        .create_session("livegate", "u1", Some("s1"), Default::default())
        .await
        .unwrap();
    let scope = ArtifactScope {
        app_name: "livegate",
        user_id: "u1",
        session_id: "s1",
    };
    let artifacts = server.gateway().runner.artifacts.clone();
    let pcm = Artifact {
        data: vec![1u8; 3200].into(),
        mime_type: "audio/pcm;rate=16000".into(),
    };
    artifacts.save(scope, "rec.pcm", pcm).await.unwrap();
    // The recording's bytes become unreadable (a folder where the file was); its metadata stays.
    let version = dir.path().join("artifacts/livegate/u1/s1/rec.pcm/0");
    std::fs::remove_file(&version).unwrap();
    std::fs::create_dir(&version).unwrap();
    let (status, body) = request(server.addr, "/api/sessions/u1/s1/artifacts", &[]).await;
    assert_eq!(status, 200, "{body}");
    let listing: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listing["artifacts"][0]["name"], "rec.pcm");
    assert_eq!(listing["artifacts"][0]["mimeType"], "audio/pcm;rate=16000");
    assert_eq!(listing["artifacts"][0]["versions"], serde_json::json!([0]));
    // Reading the bytes does fail, so the listing above did not read them.
    let (status, _) = request(server.addr, "/api/sessions/u1/s1/artifacts/rec.pcm", &[]).await;
    assert_eq!(status, 500);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn readyz_is_not_ready_when_the_data_dir_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(durable_args(dir.path())).await;
    assert_eq!(request(server.addr, "/readyz", &[]).await.0, 200);
    let spool = server
        .gateway()
        .runner
        .artifacts
        .spool_dir()
        .expect("the file store spools")
        .path()
        .to_path_buf();
    if rustix::process::geteuid().is_root() {
        // Permissions do not stop root: a file where the spool folder was fails every write.
        std::fs::remove_dir_all(&spool).unwrap();
        std::fs::write(&spool, b"").unwrap();
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&spool, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    // The answer is cached for a second; poll (bounded) for the next one.
    let body = eventually(WAIT, "not ready within the wait", || async {
        let (status, body) = request(server.addr, "/readyz", &[]).await;
        (status == 503).then_some(body)
    })
    .await;
    assert!(body.contains("artifact store cannot write"), "{body}");
    assert_eq!(request(server.addr, "/healthz", &[]).await.0, 200);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn readyz_checks_the_model_only_when_asked() {
    // Something listening where the model is: a connect succeeds.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = upstream.local_addr().unwrap();
    let gemini = |check: bool| {
        let mut args = test_args();
        args.model = "gemini-live-2.5-flash-preview".into();
        args.gemini_base_url = format!("ws://{up}");
        args.ready_checks_model = check;
        args
    };
    let server = start(gemini(true)).await;
    let unchecked = start(gemini(false)).await;
    assert_eq!(request(server.addr, "/readyz", &[]).await.0, 200);
    drop(upstream);
    // Cached for a second; poll (bounded) for the next answer.
    let body = eventually(WAIT, "not ready once the model is gone", || async {
        let (status, body) = request(server.addr, "/readyz", &[]).await;
        (status == 503).then_some(body)
    })
    .await;
    assert!(body.contains("model unreachable"), "{body}");
    assert_eq!(request(unchecked.addr, "/readyz", &[]).await.0, 200);
    server.shutdown(WAIT).await;
    unchecked.shutdown(WAIT).await;
}

fn tls_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

/// A TLS client that trusts only this certificate.
fn trusting(cert: &str) -> tokio_rustls::TlsConnector {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(tls_fixture(cert)).expect("cert file") {
        roots.add(c.expect("cert")).expect("root");
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocols")
            .with_root_certificates(roots)
            .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn handshake(
    addr: SocketAddr,
    cert: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::IpAddress(addr.ip().into());
    timeout(WAIT, trusting(cert).connect(name, tcp))
        .await
        .expect("handshake in time")
}

/// `/metrics` over TLS (trusting the renewed certificate).
async fn http_get_tls(addr: SocketAddr) -> String {
    let mut tls = handshake(addr, "cert2.pem").await.expect("handshake");
    let head = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tls.write_all(head.as_bytes()).await.expect("request sent");
    let mut response = Vec::new();
    // A peer that closes without close_notify is an error after the bytes it sent.
    let _ = timeout(WAIT, tls.read_to_end(&mut response))
        .await
        .expect("response in time");
    String::from_utf8_lossy(&response).into_owned()
}

#[tokio::test]
async fn tls_serves_wss_and_follows_renewed_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::copy(tls_fixture("cert.pem"), &cert).unwrap();
    std::fs::copy(tls_fixture("key.pem"), &key).unwrap();
    let mut args = test_args();
    args.tls_cert = Some(cert.clone());
    args.tls_key = Some(key.clone());
    let server = start(args).await;

    let tls = handshake(server.addr, "cert.pem").await.expect("handshake");
    let url = format!("wss://{}/ws/u1/s1", server.addr);
    let (ws, _) = timeout(WAIT, tokio_tungstenite::client_async(url, tls))
        .await
        .expect("upgrade in time")
        .expect("upgrade");
    let (mut sink, mut stream) = ws.split();
    let turn = serde_json::json!({"type": "text", "text": "hello over TLS"});
    sink.send(Message::Text(turn.to_string().into()))
        .await
        .expect("sent");
    timeout(WAIT, async {
        while let Some(message) = stream.next().await {
            if let Message::Text(text) = message.expect("a frame") {
                let event: Value = serde_json::from_str(text.as_str()).expect("JSON");
                if is_turn_complete(&event) {
                    return;
                }
            }
        }
        panic!("closed before the answer ended");
    })
    .await
    .expect("an answer over wss in time");
    assert!(
        handshake(server.addr, "cert2.pem").await.is_err(),
        "the renewed certificate is not served yet"
    );

    // Renewal: new files in place; new connections get the new certificate.
    std::fs::copy(tls_fixture("key2.pem"), &key).unwrap();
    std::fs::copy(tls_fixture("cert2.pem"), &cert).unwrap();
    eventually(WAIT, "the renewed certificate is served", || async {
        handshake(server.addr, "cert2.pem").await.is_ok()
    })
    .await;
    // A broken file keeps the last good certificate in service. The gateway looks at the files
    // on accept, so keep connecting until it has counted the failed reload.
    std::fs::write(&cert, "not a certificate").unwrap();
    eventually(WAIT, "the bad file is noticed", || async {
        handshake(server.addr, "cert2.pem")
            .await
            .expect("still served after a bad file");
        let metrics = http_get_tls(server.addr).await;
        metric(&metrics, "livegate_tls_reload_failures_total") == Some(1.0)
    })
    .await;
    handshake(server.addr, "cert2.pem")
        .await
        .expect("still served after a bad file");
    drop((sink, stream));
    server.shutdown(WAIT).await;
}

/// Writes `bytes` on a fresh connection and reads until the server closes it (bounded): the
/// statuses of every answer it sent.
async fn statuses_of(addr: SocketAddr, bytes: &[u8]) -> Vec<u16> {
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    stream.write_all(bytes).await.expect("sent");
    let mut response = Vec::new();
    timeout(WAIT, stream.read_to_end(&mut response))
        .await
        .expect("the server answers and closes in time")
        .expect("read");
    let text = String::from_utf8_lossy(&response);
    text.match_indices("HTTP/1.1 ")
        .filter_map(|(at, _)| text[at + 9..at + 12].parse().ok())
        .collect()
}

/// A `POST /run` head (and body) from a client behind the trusted proxy at 127.0.0.1.
fn run_request(addr: SocketAddr, client: &str, body: &str, announced: usize) -> String {
    format!(
        "POST /run HTTP/1.1\r\nHost: {addr}\r\nX-Forwarded-For: {client}\r\nContent-Type: application/json\r\nContent-Length: {announced}\r\n\r\n{body}"
    )
}

fn run_body(user: &str, session: &str) -> String {
    serde_json::json!({
        "appName": "livegate",
        "userId": user,
        "sessionId": session,
        "newMessage": {"role": "user", "parts": [{"text": "hi"}]},
    })
    .to_string()
}

/// Creates a session over REST.
async fn create(addr: SocketAddr, user: &str, session: &str) {
    let created = reqwest::Client::new()
        .post(format!("http://{addr}/api/sessions"))
        .json(&serde_json::json!({"userId": user, "sessionId": session}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
}

#[tokio::test]
async fn pipelined_requests_on_one_connection_each_count_against_the_rate() {
    let mut args = test_args();
    args.connections_per_second = 1;
    args.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    let server = start(args).await;
    create(server.addr, "u1", "s1").await;
    let body = run_body("u1", "s1");
    let one = run_request(server.addr, "203.0.113.7", &body, body.len());
    let pipelined = one.repeat(6);
    let statuses = statuses_of(server.addr, pipelined.as_bytes()).await;
    // A burst of twice the rate, then a refusal, which closes the connection.
    assert_eq!(statuses, [200, 200, 429], "{statuses:?}");
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_408_and_frees_its_connection() {
    let mut args = test_args();
    args.body_read_timeout = Duration::from_millis(500);
    let server = start(args).await;
    // A megabyte announced, ten bytes sent, the rest never.
    let head = run_request(server.addr, "203.0.113.7", "{\"appName\":", 1_000_000);
    let statuses = statuses_of(server.addr, head.as_bytes()).await;
    assert_eq!(statuses, [408]);
    let metrics = http_get(server.addr, "/metrics").await;
    assert_eq!(
        metric(
            &metrics,
            "livegate_limit_refusals_total{reason=\"body_timeout\"}"
        ),
        Some(1.0)
    );
    // A body announced over the size limit is refused before it is read.
    let big = run_request(server.addr, "203.0.113.7", "", 2 * 1024 * 1024);
    assert_eq!(statuses_of(server.addr, big.as_bytes()).await, [413]);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_client_address_has_at_most_its_cap_of_requests_in_flight() {
    let mut args = test_args();
    args.max_requests_in_flight = 2;
    args.body_read_timeout = Duration::from_secs(60);
    args.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    let server = start(args).await;
    let slow = run_request(server.addr, "203.0.113.7", "{", 1000);
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(slow.as_bytes()).await.unwrap();
        held.push(stream);
    }
    let path = "/api/sessions?user_id=u1";
    let from = |ip: &'static str| [("X-Forwarded-For", ip)];
    // The two trickling bodies are in flight once their heads are read.
    eventually(
        WAIT,
        "a third request from the address is refused",
        || async { request(server.addr, path, &from("203.0.113.7")).await.0 == 429 },
    )
    .await;
    assert_eq!(
        request(server.addr, path, &from("203.0.113.8")).await.0,
        200
    );
    drop(held);
    eventually(WAIT, "room again once they are gone", || async {
        request(server.addr, path, &from("203.0.113.7")).await.0 == 200
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_client_that_never_reads_its_response_is_cut_off() {
    let mut args = test_args();
    args.slow_client_timeout = Duration::from_millis(500);
    let server = start(args).await;
    create(server.addr, "u1", "s1").await;
    let scope = ArtifactScope {
        app_name: "livegate",
        user_id: "u1",
        session_id: "s1",
    };
    let big = Artifact {
        data: vec![0u8; 16 * 1024 * 1024].into(),
        mime_type: "audio/pcm;rate=16000".into(),
    };
    let artifacts = &server.gateway().runner.artifacts;
    artifacts.save(scope, "big.pcm", big).await.unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(server.addr).await.unwrap();
    let head = format!(
        "GET /api/sessions/u1/s1/artifacts/big.pcm HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.addr
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Never read: the gateway gives up on the write and drops the connection and its response.
    metric_reaches(server.addr, "livegate_connection_errors_total", 1.0).await;
    let mut got = Vec::new();
    let _ = timeout(WAIT, stream.read_to_end(&mut got))
        .await
        .expect("the connection ends");
    assert!(got.len() < 16 * 1024 * 1024, "the response was cut off");
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn turn_based_runs_count_against_the_users_live_sessions() {
    let mut args = test_args();
    args.max_sessions_per_user = Some(1);
    let server = start(args).await;
    let addr = server.addr;
    create(addr, "u1", "s2").await;
    let live = Client::connect(addr, "u1", "s1", "modality=TEXT").await;
    let post = |path: &'static str| {
        reqwest::Client::new()
            .post(format!("http://{addr}{path}"))
            .header("content-type", "application/json")
            .body(run_body("u1", "s2"))
            .send()
    };
    assert_eq!(post("/run_sse").await.unwrap().status().as_u16(), 429);
    assert_eq!(post("/run").await.unwrap().status().as_u16(), 429);
    live.close().await;
    timeout(WAIT, server.gateway().registry.idle())
        .await
        .unwrap();
    eventually(
        WAIT,
        "the user's one live session is free again",
        || async { post("/run_sse").await.unwrap().status().as_u16() == 200 },
    )
    .await;
    server.shutdown(WAIT).await;
}
