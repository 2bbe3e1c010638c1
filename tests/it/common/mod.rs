//! Shared harness for the integration tests: a real gateway on 127.0.0.1:0, a real WebSocket
//! client, fixture audio, and a checker that every JSON event has ADK's field set.

#![allow(dead_code)]

pub mod adk_schema;
pub mod faults;
pub mod hostile;
pub mod process;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use livegate::gateway::config::Pacing;
use livegate::gateway::{self, ServeArgs, Server};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Longest any single wait in a test may take.
pub const WAIT: Duration = Duration::from_secs(20);

/// How often [`eventually`] looks again.
pub const POLL: Duration = Duration::from_millis(20);

/// What a probe of [`eventually`] says: `true` or `Some(value)` once it holds.
pub trait Holds {
    /// What `eventually` returns.
    type Value;
    /// `Some` once the condition holds.
    fn holds(self) -> Option<Self::Value>;
}

impl Holds for bool {
    type Value = ();
    fn holds(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Holds for Option<T> {
    type Value = T;
    fn holds(self) -> Option<T> {
        self
    }
}

/// Runs `probe` until it holds, every [`POLL`], for at most `within`; panics with `what` if it
/// never does. For what the gateway does on its own time and tells no one about (a count going
/// down, a cache expiring, a file reloaded), where there is nothing to await.
pub async fn eventually<F, Fut>(
    within: Duration,
    what: &str,
    probe: F,
) -> <Fut::Output as Holds>::Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future,
    Fut::Output: Holds,
{
    eventually_every(within, POLL, what, probe).await
}

/// [`eventually`], looking again every `every`: for a probe that costs the system under test
/// (a query against a loaded database).
pub async fn eventually_every<F, Fut>(
    within: Duration,
    every: Duration,
    what: &str,
    mut probe: F,
) -> <Fut::Output as Holds>::Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future,
    Fut::Output: Holds,
{
    let polled = timeout(within, async {
        loop {
            if let Some(value) = probe().await.holds() {
                return value;
            }
            tokio::time::sleep(every).await;
        }
    });
    match polled.await {
        Ok(value) => value,
        Err(_) => panic!("not within {within:?}: {what}"),
    }
}

/// Server args for tests: loopback, any port, in-memory stores, instant `sim` answers.
pub fn test_args() -> ServeArgs {
    let mut args = ServeArgs::defaults();
    args.bind = SocketAddr::from(([127, 0, 0, 1], 0));
    args.session_store = Some("memory:".into());
    args.artifact_store = Some("memory:".into());
    args.sim_pacing = Pacing::Burst;
    args.sim_reply_delay_ms = Some(0);
    args
}

/// Starts a gateway with these args.
pub async fn start(args: ServeArgs) -> Server {
    let _ = tracing_subscriber_init();
    gateway::start(&args).await.expect("gateway starts")
}

fn tracing_subscriber_init() -> Option<()> {
    None
}

/// One frame from the gateway, decoded.
#[derive(Debug, Clone)]
pub enum Frame {
    /// A JSON event (already checked against ADK's field set).
    Event(Value),
    /// Raw PCM audio.
    Audio(Bytes),
    /// The server closed the socket.
    Closed(Option<(u16, String)>),
}

/// A client WebSocket over TCP.
pub type WsStream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A WebSocket client of the gateway.
pub struct Client {
    ws: WsStream,
    /// Every JSON event received so far.
    pub events: Vec<Value>,
    /// Total bytes of binary audio received so far.
    pub audio_bytes: usize,
}

impl Client {
    /// Connects to `/ws/{user}/{session}?{query}`.
    pub async fn connect(addr: SocketAddr, user: &str, session: &str, query: &str) -> Client {
        let url = format!("ws://{addr}/ws/{user}/{session}?{query}");
        let (ws, _) = timeout(WAIT, tokio_tungstenite::connect_async(url))
            .await
            .expect("connect in time")
            .expect("websocket connects");
        Client {
            ws,
            events: Vec::new(),
            audio_bytes: 0,
        }
    }

    /// Wraps a socket connected some other way (e.g. with auth headers).
    pub fn from_stream(ws: WsStream) -> Client {
        Client {
            ws,
            events: Vec::new(),
            audio_bytes: 0,
        }
    }

    /// Sends a JSON text frame.
    pub async fn send_json(&mut self, value: Value) {
        self.ws
            .send(Message::Text(value.to_string().into()))
            .await
            .expect("send");
    }

    /// Sends a raw text frame.
    pub async fn send_raw_text(&mut self, text: &str) {
        self.ws
            .send(Message::Text(text.to_owned().into()))
            .await
            .expect("send");
    }

    /// Sends a binary frame.
    pub async fn send_binary(&mut self, data: Vec<u8>) {
        self.ws
            .send(Message::Binary(data.into()))
            .await
            .expect("send");
    }

    /// Sends a user text turn.
    pub async fn send_text(&mut self, text: &str) {
        self.send_json(serde_json::json!({"type": "text", "text": text}))
            .await;
    }

    /// Streams PCM as 20 ms binary frames (640 bytes at 16 kHz), as fast as the socket takes them.
    pub async fn stream_pcm(&mut self, pcm: &[u8]) {
        for chunk in pcm.chunks(640) {
            self.send_binary(chunk.to_vec()).await;
        }
    }

    /// The next frame, within `WAIT`.
    pub async fn next_frame(&mut self) -> Frame {
        loop {
            let message = timeout(WAIT, self.ws.next())
                .await
                .expect("a frame in time");
            match message {
                Some(Ok(Message::Text(text))) => {
                    let value: Value = serde_json::from_str(text.as_str()).expect("event is JSON");
                    adk_schema::check_event(&value);
                    self.events.push(value.clone());
                    return Frame::Event(value);
                }
                Some(Ok(Message::Binary(data))) => {
                    self.audio_bytes += data.len();
                    return Frame::Audio(data);
                }
                Some(Ok(Message::Close(frame))) => {
                    return Frame::Closed(frame.map(|f| (u16::from(f.code), f.reason.to_string())))
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return Frame::Closed(None),
            }
        }
    }

    /// The next JSON event, skipping audio frames.
    pub async fn next_event(&mut self) -> Value {
        loop {
            match self.next_frame().await {
                Frame::Event(e) => return e,
                Frame::Audio(_) => continue,
                Frame::Closed(c) => panic!("socket closed while waiting for an event: {c:?}"),
            }
        }
    }

    /// Frames until (and including) the first event matching `done`.
    pub async fn frames_until(&mut self, done: impl Fn(&Value) -> bool) -> Vec<Frame> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next_frame().await;
            let stop = matches!(&frame, Frame::Event(e) if done(e));
            if let Frame::Closed(c) = &frame {
                panic!("socket closed before the expected event: {c:?}; got {frames:?}");
            }
            frames.push(frame);
            if stop {
                return frames;
            }
        }
    }

    /// Events until (and including) the next `turnComplete`.
    pub async fn events_until_turn_complete(&mut self) -> Vec<Value> {
        self.frames_until(is_turn_complete)
            .await
            .into_iter()
            .filter_map(|f| match f {
                Frame::Event(e) => Some(e),
                _ => None,
            })
            .collect()
    }

    /// Closes the socket and waits for the server's close.
    pub async fn close(mut self) {
        let _ = self
            .ws
            .close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
                code: CloseCode::Normal,
                reason: "bye".into(),
            }))
            .await;
        let _ = timeout(WAIT, async {
            while let Some(Ok(_)) = self.ws.next().await {}
        })
        .await;
    }
}

/// True for a `turnComplete: true` event.
pub fn is_turn_complete(e: &Value) -> bool {
    e["turnComplete"] == Value::Bool(true)
}

/// The text of an event's content parts.
pub fn text_of(e: &Value) -> String {
    e["content"]["parts"]
        .as_array()
        .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect())
        .unwrap_or_default()
}

/// Raw PCM16 of a fixture clip in tests/fixtures.
pub fn fixture_pcm(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let mut reader = hound::WavReader::open(&path).expect("fixture wav opens");
    let spec = reader.spec();
    assert_eq!(
        (spec.sample_rate, spec.channels, spec.bits_per_sample),
        (16_000, 1, 16)
    );
    reader
        .samples::<i16>()
        .flat_map(|s| s.expect("sample").to_le_bytes())
        .collect()
}

/// Connects to `addr` as `u1` / `s1`, says "hello" then a second of silence in 20 ms frames, and
/// reads up to the end of the answer; the client, and the audio it sent.
pub async fn say_hello(addr: SocketAddr) -> (Client, Vec<u8>) {
    let mut client = Client::connect(addr, "u1", "s1", "").await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    client.frames_until(is_turn_complete).await;
    (client, pcm)
}

/// `ms` milliseconds of 16 kHz PCM16 silence.
pub fn silence(ms: usize) -> Vec<u8> {
    vec![0; ms * 32]
}

/// Bytes of the input and output audio recordings of one session, once every connection has
/// finished flushing.
pub async fn recorded_audio(server: &Server, user: &str, session: &str) -> (usize, usize) {
    timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("connections finish");
    let artifacts = &server.gateway().runner.artifacts;
    let scope = livegate::artifact::ArtifactScope {
        app_name: &server.gateway().runner.app_name,
        user_id: user,
        session_id: session,
    };
    let mut recorded = (0, 0);
    for name in artifacts.list_names(scope).await.expect("artifacts listed") {
        let artifact = artifacts
            .load(scope, &name, None)
            .await
            .expect("artifact loads");
        let bytes = artifact.map_or(0, |a| a.data.len());
        if name.contains("_input_audio_") {
            recorded.0 += bytes;
        } else if name.contains("_output_audio_") {
            recorded.1 += bytes;
        }
    }
    recorded
}

/// One HTTP/1.1 GET over a real socket; returns the status line, headers and body as text.
pub async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    timeout(WAIT, stream.read_to_end(&mut response))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&response).into_owned()
}

/// Waits until a metric has `value`. The server notices a close on its own time and tells no
/// one, so this polls, bounded by [`WAIT`].
pub async fn metric_reaches(addr: std::net::SocketAddr, name: &str, value: f64) {
    eventually(WAIT, &format!("{name} reached {value}"), || async {
        metric(&http_get(addr, "/metrics").await, name) == Some(value)
    })
    .await;
}

/// The value of one sample line of a metrics text, named with its labels if it has any.
pub fn metric(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// A small tmpfs mounted on a fresh folder, unmounted when dropped: a real disk a test can fill.
/// Mounting needs root (CAP_SYS_ADMIN): without it the test is skipped (`None`), unless
/// `LIVEGATE_TEST_TMPFS` is set, which makes it a failure (`.ci/run` sets it).
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// A tmpfs of `size` (`mount`'s syntax: `4m`).
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("a folder to mount on");
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status();
        if matches!(&mounted, Ok(status) if status.success()) {
            return Some(Tmpfs { dir });
        }
        assert!(
            std::env::var_os("LIVEGATE_TEST_TMPFS").is_none(),
            "LIVEGATE_TEST_TMPFS is set but a tmpfs cannot be mounted: {mounted:?}"
        );
        eprintln!("cannot mount a tmpfs (not root?): skipped");
        None
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the disk with one file, grown until the disk takes no byte more; its path.
    pub fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.path().join("filler");
        let mut file = std::fs::File::create(&path).expect("the filler file");
        let block = vec![0u8; 64 * 1024];
        loop {
            match file.write(&block) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        loop {
            match file.write(&block[..1]) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a file the gateway still holds open would make a plain unmount fail.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// A listener that accepts connections and never answers, nor closes them (a black-holed
/// server); its address. It lives until the runtime ends.
pub async fn black_hole() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    addr
}

/// Reads frames until the socket closes; its close code.
pub async fn close_code(client: &mut Client) -> Option<u16> {
    loop {
        if let Frame::Closed(close) = client.next_frame().await {
            return close.map(|(code, _)| code);
        }
    }
}

/// Waits for the first audio frame of an answer in progress.
pub async fn first_audio(client: &mut Client) {
    loop {
        match client.next_frame().await {
            Frame::Audio(_) => return,
            Frame::Closed(close) => panic!("closed before any audio: {close:?}"),
            Frame::Event(_) => {}
        }
    }
}

/// The S3 test server's endpoint with a fresh bucket in it, or `None` (the test is skipped).
pub async fn s3_bucket() -> Option<(String, String)> {
    let Ok(endpoint) = std::env::var("LIVEGATE_TEST_S3_ENDPOINT") else {
        eprintln!("LIVEGATE_TEST_S3_ENDPOINT unset: skipped");
        return None;
    };
    let endpoint = endpoint.trim_end_matches('/').to_owned();
    let bucket = format!("it-{}", uuid::Uuid::new_v4().simple());
    // The test server creates a bucket on an unsigned PUT.
    let created = reqwest::Client::new()
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("LIVEGATE_TEST_S3_ENDPOINT={endpoint} unreachable: {e}"));
    assert!(
        created.status().is_success(),
        "bucket: {}",
        created.status()
    );
    Some((endpoint, bucket))
}

/// `args` pointed at a `mock-gemini` of its own, whose sim answers at once: the server (keep it
/// while the gateway runs) and the arguments.
pub async fn on_mock_gemini(mut args: ServeArgs) -> (livegate_mock::gemini::MockGemini, ServeArgs) {
    let upstream = livegate_mock::gemini::start(
        "127.0.0.1:0".parse().expect("an address"),
        livegate_mock::gemini::MockGeminiConfig {
            sim: livegate::model::sim::SimConfig::instant(),
            ..Default::default()
        },
    )
    .await
    .expect("mock-gemini starts");
    args.model = "gemini-2.5-flash-native-audio-preview-12-2025".into();
    args.gemini_base_url = format!("ws://{}", upstream.addr);
    (upstream, args)
}

/// `args` pointed at a `mock-openai` of its own, whose sim answers at once.
pub async fn on_mock_openai(mut args: ServeArgs) -> (livegate_mock::openai::MockOpenAi, ServeArgs) {
    let upstream = livegate_mock::openai::start(
        "127.0.0.1:0".parse().expect("an address"),
        livegate_mock::openai::MockOpenAiConfig {
            sim: livegate::model::sim::SimConfig::instant(),
            ..Default::default()
        },
    )
    .await
    .expect("mock-openai starts");
    args.model = "gpt-realtime".into();
    args.openai_base_url = format!("ws://{}", upstream.addr);
    (upstream, args)
}
