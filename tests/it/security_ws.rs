//! The WebSocket's limits and the closing handshake against the real server: sizes by kind, the
//! idle timeout and maximum duration, the close codes a real client sees (1000, 1002, 1007, 1008,
//! 1009, 1011, 1013), a client that stops reading, and logs that a burst of bad frames cannot flood.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::*;
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpSocket;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame as RawFrame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

async fn socket(addr: std::net::SocketAddr, session: &str) -> Socket {
    let url = format!("ws://{addr}/ws/u1/{session}?modality=TEXT");
    timeout(WAIT, tokio_tungstenite::connect_async(url))
        .await
        .expect("connect in time")
        .expect("websocket connects")
        .0
}

/// Reads until the server's close frame; its code and reason (`None`: the socket ended without
/// one, which a browser reports as 1006).
async fn close_of(ws: &mut Socket) -> Option<(u16, String)> {
    timeout(WAIT, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => {
                    return frame.map(|f| (u16::from(f.code), f.reason.to_string()))
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await
    .expect("the server closes in time")
}

/// Sends one raw frame, unchecked by the client library.
async fn send_raw(ws: &mut Socket, opcode: OpCode, payload: &[u8]) {
    let frame = RawFrame::message(payload.to_vec(), opcode, true);
    ws.send(Message::Frame(frame))
        .await
        .expect("raw frame sent");
}

#[tokio::test]
async fn a_clients_close_is_echoed_so_it_sees_1000() {
    let server = start(test_args()).await;
    let mut ws = socket(server.addr, "s1").await;
    ws.send(Message::Text(
        json!({"type":"text","text":"hi"}).to_string().into(),
    ))
    .await
    .unwrap();
    // The answer has started: the close overtakes a run in progress.
    assert!(matches!(ws.next().await, Some(Ok(Message::Text(_)))));
    ws.close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    }))
    .await
    .unwrap();
    assert_eq!(close_of(&mut ws).await, Some((1000, "bye".into())));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn invalid_utf8_text_closes_with_1007() {
    let server = start(test_args()).await;
    let mut ws = socket(server.addr, "s1").await;
    send_raw(&mut ws, OpCode::Data(Data::Text), &[b'{', 0xff, 0xfe, b'}']).await;
    let (code, _) = close_of(&mut ws).await.expect("a close frame");
    assert_eq!(code, 1007);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_reserved_opcode_closes_with_1002() {
    let server = start(test_args()).await;
    let mut ws = socket(server.addr, "s1").await;
    send_raw(&mut ws, OpCode::Data(Data::Reserved(3)), b"??").await;
    let (code, _) = close_of(&mut ws).await.expect("a close frame");
    assert_eq!(code, 1002);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_message_over_the_socket_limit_closes_with_1009() {
    let mut args = test_args();
    args.max_message_bytes = 64 * 1024;
    let server = start(args).await;
    let mut ws = socket(server.addr, "s1").await;
    ws.send(Message::Binary(vec![0; 100 * 1024].into()))
        .await
        .unwrap();
    let (code, _) = close_of(&mut ws).await.expect("a close frame");
    assert_eq!(code, 1009);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn the_default_limit_takes_the_largest_message_the_protocol_has_and_no_more() {
    let server = start(test_args()).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    // An image at --max-media-bytes (1 MiB), in base64 in its JSON: about 1.34 MiB.
    let image = base64_of(&vec![0xff; 1024 * 1024]);
    client
        .send_json(json!({"type": "image", "data": image, "mimeType": "image/jpeg"}))
        .await;
    client.send_text("still here?").await;
    let events = client.events_until_turn_complete().await;
    assert!(
        events.iter().all(|e| e["errorCode"].is_null()),
        "{events:?}"
    );
    client.close().await;
    let mut ws = socket(server.addr, "s2").await;
    ws.send(Message::Binary(vec![0; 1600 * 1024].into()))
        .await
        .unwrap();
    let (code, _) = close_of(&mut ws).await.expect("a close frame");
    assert_eq!(code, 1009, "1.6 MiB is over the default 1.5 MiB");
    server.shutdown(WAIT).await;
}

/// A WebSocket opened by hand over TCP, its upgrade answer read: frames can be written raw.
async fn raw_socket(addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET /ws/u1/s1?modality=TEXT HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        timeout(WAIT, tcp.read_exact(&mut byte))
            .await
            .unwrap()
            .unwrap();
        answer.push(byte[0]);
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 101"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    tcp
}

/// Reads server frames until a close frame; its code and reason.
async fn raw_close<R: tokio::io::AsyncRead + Unpin>(tcp: &mut R) -> (u16, String) {
    use tokio::io::AsyncReadExt;
    timeout(WAIT, async {
        loop {
            let mut head = [0u8; 2];
            tcp.read_exact(&mut head).await.expect("a frame");
            let len = match head[1] & 0x7f {
                126 => u64::from(tcp.read_u16().await.unwrap()),
                127 => tcp.read_u64().await.unwrap(),
                n => u64::from(n),
            };
            let mut payload = vec![0u8; len as usize];
            tcp.read_exact(&mut payload).await.unwrap();
            if head[0] & 0x0f == 0x8 {
                let code = u16::from_be_bytes([payload[0], payload[1]]);
                return (code, String::from_utf8_lossy(&payload[2..]).into_owned());
            }
        }
    })
    .await
    .expect("a close frame in time")
}

#[tokio::test]
async fn a_message_begun_and_not_finished_in_time_closes_with_1008() {
    use tokio::io::AsyncWriteExt;
    let mut args = test_args();
    args.message_read_timeout = Duration::from_millis(500);
    let server = start(args).await;
    let mut tcp = raw_socket(server.addr).await;
    // A binary frame announcing a MiB, masked, then its first bytes...
    let mut frame = vec![0x82, 0x80 | 127];
    frame.extend_from_slice(&(1024u64 * 1024).to_be_bytes());
    frame.extend_from_slice(&[1, 2, 3, 4]);
    frame.extend_from_slice(&[0; 1000]);
    tcp.write_all(&frame).await.unwrap();
    // ...and a byte now and then, well inside the idle timeout.
    let (mut reader, mut writer) = tcp.into_split();
    let trickle = tokio::spawn(async move {
        while writer.write_all(&[0]).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let (code, reason) = raw_close(&mut reader).await;
    trickle.abort();
    assert_eq!(code, 1008);
    assert!(reason.contains("not finished in time"), "{reason}");
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn media_of_a_type_a_client_may_not_send_is_refused_and_never_recorded() {
    let server = start(test_args()).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    let page = base64_of(b"<html><script>alert(1)</script></html>..");
    client
        .send_json(json!({"type": "audio", "mimeType": "audio/pcm,text/html", "data": page}))
        .await;
    assert!(next_error(&mut client).await.contains("mimeType"));
    client
        .send_json(json!({"type": "image", "mimeType": "image/svg+xml", "data": page}))
        .await;
    assert!(next_error(&mut client).await.contains("mimeType"));
    client
        .send_json(
            json!({"type": "audio", "mimeType": "audio/pcm;rate=16000\r\nX-Evil: 1", "data": page}),
        )
        .await;
    assert!(next_error(&mut client).await.contains("mimeType"));
    let speech = base64_of(&fixture_pcm("hello.wav"));
    client
        .send_json(json!({"type": "audio", "mimeType": "audio/pcm;rate=16000", "data": speech}))
        .await;
    client
        .send_json(
            json!({"type": "audio", "mimeType": "audio/pcm", "data": base64_of(&silence(1000))}),
        )
        .await;
    client.events_until_turn_complete().await;
    client.close().await;
    timeout(WAIT, server.gateway().registry.idle())
        .await
        .unwrap();
    let artifacts = &server.gateway().runner.artifacts;
    let scope = livegate::artifact::ArtifactScope {
        app_name: "livegate",
        user_id: "u1",
        session_id: "s1",
    };
    let names = artifacts.list_names(scope).await.unwrap();
    assert!(!names.is_empty(), "the speech was recorded");
    for name in names {
        let info = artifacts.describe(scope, &name).await.unwrap().unwrap();
        assert!(
            info.mime_type.starts_with("audio/pcm;rate="),
            "{name}: {}",
            info.mime_type
        );
    }
    server.shutdown(WAIT).await;
}

/// The next error event's message, skipping anything else.
async fn next_error(client: &mut Client) -> String {
    let frames = client.frames_until(|e| e.get("errorCode").is_some()).await;
    let Some(Frame::Event(error)) = frames.last() else {
        unreachable!()
    };
    assert_eq!(error["errorCode"], "INVALID_ARGUMENT", "{error}");
    error["errorMessage"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn each_kind_over_its_limit_is_an_error_event_and_the_connection_goes_on() {
    let mut args = test_args();
    args.max_text_bytes = 1000;
    args.max_audio_frame_bytes = 4000;
    args.max_media_bytes = 3000;
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;

    client.send_text(&"word ".repeat(300)).await;
    assert!(next_error(&mut client).await.contains("--max-text-bytes"));
    client.send_binary(vec![0; 4002]).await;
    assert!(next_error(&mut client)
        .await
        .contains("--max-audio-frame-bytes"));
    let image = base64_of(&[0; 3003]);
    client
        .send_json(json!({"type": "image", "data": image, "mimeType": "image/jpeg"}))
        .await;
    assert!(next_error(&mut client).await.contains("--max-media-bytes"));

    // Within the limits the conversation goes on.
    client.send_text(&"word ".repeat(190)).await;
    let events = client.events_until_turn_complete().await;
    assert!(events.iter().any(|e| text_of(e).contains("190 words")));
    let metrics = http_get(server.addr, "/metrics").await;
    let counted = metric(
        &metrics,
        r#"livegate_errors_total{code="INVALID_ARGUMENT"}"#,
    );
    assert_eq!(counted, Some(3.0), "{metrics}");
    client.close().await;
    server.shutdown(WAIT).await;
}

fn base64_of(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[tokio::test]
async fn an_idle_client_is_closed_with_1008_counted_from_its_last_frame() {
    let mut args = test_args();
    args.idle_timeout = Duration::from_millis(400);
    let server = start(args).await;
    let mut ws = socket(server.addr, "s1").await;
    let opened = Instant::now();
    // A second of microphone frames, 100 ms apart: never idle for the timeout.
    for _ in 0..10 {
        ws.send(Message::Binary(vec![0; 640].into())).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, reason) = close_of(&mut ws).await.expect("a close frame");
    assert_eq!(code, 1008);
    assert!(reason.contains("idle"), "{reason}");
    let open_for = opened.elapsed();
    assert!(
        open_for >= Duration::from_millis(1300) && open_for < Duration::from_secs(5),
        "closed after {open_for:?}"
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn pings_are_answered_but_do_not_keep_an_idle_session_open() {
    let mut args = test_args();
    args.idle_timeout = Duration::from_millis(500);
    let server = start(args).await;
    let ws = socket(server.addr, "s1").await;
    let (mut tx, mut rx) = ws.split();
    // A client library's keep-alive: a ping every 100 ms, and nothing else.
    let pinger = tokio::spawn(async move {
        while tx.send(Message::Ping(vec![1].into())).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut pongs = 0;
    let closed = timeout(WAIT, async {
        loop {
            match rx.next().await {
                Some(Ok(Message::Pong(_))) => pongs += 1,
                Some(Ok(Message::Close(frame))) => {
                    return frame.map(|f| (u16::from(f.code), f.reason.to_string()))
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await
    .expect("an idle session is closed in time, pings or not");
    pinger.abort();
    let (code, reason) = closed.expect("a close frame");
    assert_eq!(code, 1008);
    assert!(reason.contains("idle"), "{reason}");
    assert!(pongs > 0, "the pings were answered");
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn zero_turns_the_time_limits_off() {
    let mut args = test_args();
    args.idle_timeout = Duration::ZERO;
    args.max_session_duration = Duration::ZERO;
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    client.send_text("still here").await;
    let events = client.events_until_turn_complete().await;
    assert!(events.iter().any(|e| text_of(e).contains("still here")));
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_session_is_closed_at_its_maximum_duration() {
    let mut args = test_args();
    args.max_session_duration = Duration::from_millis(500);
    let server = start(args).await;
    let mut ws = socket(server.addr, "s1").await;
    let (code, reason) = close_of(&mut ws).await.expect("a close frame");
    assert_eq!(code, 1008);
    assert!(reason.contains("maximum session duration"), "{reason}");
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_run_whose_model_cannot_be_reached_closes_with_1013() {
    // A Gemini model whose upstream refuses connections: the run cannot start, the model is
    // unavailable (try again later).
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = unused.local_addr().unwrap();
    drop(unused);
    let mut args = test_args();
    args.model = "gemini-2.5-flash-native-audio-preview-12-2025".into();
    args.gemini_base_url = format!("ws://{dead}");
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "modality=TEXT").await;
    let error = client.next_event().await;
    assert_eq!(error["errorCode"], "UNAVAILABLE", "{error}");
    loop {
        if let Frame::Closed(close) = client.next_frame().await {
            let (code, _) = close.expect("a close frame");
            assert_eq!(code, 1013);
            break;
        }
    }
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off_with_1008_within_the_timeout() {
    let mut args = test_args();
    args.slow_client_timeout = Duration::from_secs(1);
    args.sim_pacing = livegate::gateway::config::Pacing::RealTime;
    let server = start(args).await;
    // A client with a small receive buffer, like a phone that stopped reading: what it holds
    // unread is the client's own, beyond what the gateway can see.
    let tcp = TcpSocket::new_v4().unwrap();
    tcp.set_recv_buffer_size(4096).unwrap();
    let tcp = tcp.connect(server.addr).await.unwrap();
    let url = format!("ws://{}/ws/u1/s1?modality=AUDIO", server.addr);
    let (mut ws, _) = tokio_tungstenite::client_async(url, MaybeTlsStream::Plain(tcp))
        .await
        .unwrap();
    let words = "tell me something long please ".repeat(6);
    ws.send(Message::Text(
        json!({"type":"text","text":words}).to_string().into(),
    ))
    .await
    .unwrap();
    // Read until the answer's audio flows, then stop reading.
    timeout(WAIT, async {
        while let Some(Ok(message)) = ws.next().await {
            if matches!(message, Message::Binary(_)) {
                break;
            }
        }
    })
    .await
    .expect("audio in time");
    let stopped = Instant::now();
    metric_reaches(server.addr, "livegate_slow_client_disconnects_total", 1.0).await;
    let cut_after = stopped.elapsed();
    // The timeout, plus what a second of audio takes to fill the socket's buffers.
    assert!(
        cut_after < Duration::from_secs(5),
        "cut off {cut_after:?} after it stopped reading"
    );
    // Reading again, the client gets what was queued, then a close frame: not a reset.
    let (code, reason) = close_of(&mut ws).await.expect("a close frame");
    assert_eq!(code, 1008);
    assert!(reason.contains("stopped reading"), "{reason}");
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_burst_of_bad_frames_is_counted_but_logged_at_most_once_a_second() {
    let mut gateway = tokio::process::Command::new(env!("CARGO_BIN_EXE_livegate"))
        .args([
            "--bind",
            "127.0.0.1:0",
            "--session-store",
            "memory:",
            "--artifact-store",
            "memory:",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("livegate runs");
    let mut lines = BufReader::new(gateway.stdout.take().unwrap()).lines();
    let addr = timeout(WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(addr) = line.rsplit("listening on http://").next() {
                if line.contains("listening on http://") {
                    return addr.trim().parse::<std::net::SocketAddr>().unwrap();
                }
            }
        }
        panic!("no address printed")
    })
    .await
    .expect("starts in time");
    // One task reads each stream to the end, so the child never blocks on a full pipe; logs go
    // to stderr, but a line is counted wherever it shows up.
    let log = tokio::spawn(bad_frame_lines(lines));
    let stderr = BufReader::new(gateway.stderr.take().unwrap()).lines();
    let error_log = tokio::spawn(bad_frame_lines(stderr));

    const CONNECTIONS: usize = 3;
    const FRAMES: usize = 1000;
    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..CONNECTIONS {
        clients.push(tokio::spawn(async move {
            let mut client = Client::connect(addr, "u1", &format!("s{c}"), "").await;
            for i in 0..FRAMES {
                client.send_raw_text(&format!("not json {i}")).await;
            }
            // Every bad frame is answered with an error event: all were read.
            let mut errors = 0;
            while errors < FRAMES {
                if let Frame::Event(e) = client.next_frame().await {
                    errors += usize::from(e.get("errorCode").is_some());
                }
            }
            client.close().await;
        }));
    }
    for client in clients {
        timeout(WAIT, client).await.unwrap().unwrap();
    }
    let seconds = started.elapsed().as_secs() as usize;
    let metrics = http_get(addr, "/metrics").await;
    let counted = metric(
        &metrics,
        r#"livegate_errors_total{code="INVALID_ARGUMENT"}"#,
    );
    assert_eq!(counted, Some((CONNECTIONS * FRAMES) as f64), "{metrics}");
    let _ = gateway.start_kill();
    let _ = timeout(WAIT, gateway.wait()).await;
    let logged = timeout(WAIT, log).await.unwrap().unwrap()
        + timeout(WAIT, error_log).await.unwrap().unwrap();
    // Once per connection, then at most once a second each.
    assert!(
        logged >= CONNECTIONS && logged <= CONNECTIONS * (seconds + 2),
        "{logged} log lines for {} bad frames in {seconds} s",
        CONNECTIONS * FRAMES
    );
}

/// Counts the "bad client frame" lines of a log stream, to its end.
async fn bad_frame_lines<R: tokio::io::AsyncRead + Unpin>(
    mut lines: tokio::io::Lines<BufReader<R>>,
) -> usize {
    let mut bad = 0;
    while let Ok(Some(line)) = lines.next_line().await {
        bad += usize::from(line.contains("bad client frame"));
    }
    bad
}
