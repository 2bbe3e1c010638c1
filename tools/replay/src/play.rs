//! One replay: a script's inputs sent to a gateway over its WebSocket protocol, in their order
//! and with their pauses (divided by `speed`), audio in 20 ms frames at real-time pace times
//! `speed`; what the agent does after each input read into a [`Turn`] as the history would be.
//!
//! Three tasks: the writer owns the socket's sink (fed by a bounded channel), the reader reads
//! events and audio, and the caller's task runs the script. The reader files each event under the
//! last input sent, and tells the script how many turns have ended.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep_until, timeout, Instant};
use tokio_tungstenite::tungstenite::Message;

use crate::script::{Anchor, Input, Script};
use crate::turns::Turn;
use livegate::lock::Recover;

/// Longest wait for a turn the script waits on to end.
pub const TURN_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for the socket to open, and for it to close at the end.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(15);
/// Most answer audio kept per turn for the report's players (60 s at 24 kHz).
const MAX_TURN_AUDIO: usize = 60 * 24_000 * 2;
/// A frame of microphone audio.
const FRAME: Duration = Duration::from_millis(20);

/// Where and how to replay.
#[derive(Debug, Clone)]
pub struct Target {
    /// The gateway's WebSocket base, e.g. `ws://127.0.0.1:8080`.
    pub ws_base: String,
    /// Sent as `Authorization: Bearer`.
    pub token: Option<String>,
    /// Pauses and audio this many times faster.
    pub speed: f64,
}

/// What one replay saw.
#[derive(Debug, Default)]
pub struct Played {
    /// After each input.
    pub turns: Vec<Turn>,
    /// Answer audio after each input (PCM16 at `audio_rate`).
    pub audio: Vec<Vec<u8>>,
    /// The answer audio's rate.
    pub audio_rate: u32,
    /// From the first input to the last turn's end, in milliseconds.
    pub length_ms: f64,
    /// What went wrong on the way (turns that never ended, a closed socket).
    pub problems: Vec<String>,
}

/// Why a replay could not start.
#[derive(Debug, thiserror::Error)]
pub enum PlayError {
    /// The WebSocket did not open.
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
}

/// What the reader shares with the script.
#[derive(Debug, Default)]
struct Seen {
    /// When each input started.
    starts: Vec<Instant>,
    turns: Vec<Turn>,
    audio: Vec<Vec<u8>>,
    audio_rate: Option<u32>,
}

impl Seen {
    fn current(&mut self) -> (usize, Option<Instant>) {
        let index = self.starts.len().saturating_sub(1);
        if self.turns.len() <= index {
            self.turns.resize(index + 1, Turn::default());
            self.audio.resize(index + 1, Vec::new());
        }
        (index, self.starts.get(index).copied())
    }

    fn audio(&mut self, pcm: &[u8]) {
        let (index, start) = self.current();
        let turn = &mut self.turns[index];
        if turn.first_audio_ms.is_none() {
            turn.first_audio_ms = start.map(|s| s.elapsed().as_secs_f64() * 1000.0);
        }
        let kept = &mut self.audio[index];
        let room = MAX_TURN_AUDIO.saturating_sub(kept.len());
        kept.extend_from_slice(&pcm[..pcm.len().min(room)]);
    }
}

fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock_or_recover()
}

/// Replays `script` as `user` in a new session `session`.
pub async fn play(
    target: &Target,
    user: &str,
    session: &str,
    script: &Script,
) -> Result<Played, PlayError> {
    let url = format!(
        "{}/ws/{user}/{session}?modality={}&audio=binary",
        target.ws_base.trim_end_matches('/'),
        script.modality
    );
    let socket = connect(&url, target.token.as_deref()).await?;
    let (mut sink, stream) = socket.split();
    let (tx, mut rx) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            let close = matches!(message, Message::Close(_));
            if sink.send(message).await.is_err() || close {
                break;
            }
        }
    });
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (ended_tx, ended) = watch::channel(0usize);
    let mut reader = tokio::spawn(read(stream, seen.clone(), ended_tx));
    let mut run = Run {
        target,
        tx: &tx,
        seen: &seen,
        ended,
        problems: Vec::new(),
    };
    let first = run.script(script).await;
    let problems = run.problems;
    let length_ms = first.map_or(0.0, |f| f.elapsed().as_secs_f64() * 1000.0);
    let _ = tx.send(Message::Close(None)).await;
    drop(tx);
    let closed = timeout(SOCKET_TIMEOUT, &mut reader).await;
    // A gateway that never closes leaves neither task behind.
    reader.abort();
    writer.abort();
    let mut problems = problems;
    match closed {
        Ok(Ok(Some(reason))) if !reason.starts_with("1000") => {
            problems.push(format!("the socket closed: {reason}"));
        }
        Err(_) => problems.push("the gateway did not close the socket".into()),
        _ => {}
    }
    let mut seen = lock(&seen);
    let count = script.actions.len().max(1);
    seen.turns.resize(count, Turn::default());
    seen.audio.resize(count, Vec::new());
    Ok(Played {
        turns: std::mem::take(&mut seen.turns),
        audio: std::mem::take(&mut seen.audio),
        audio_rate: seen.audio_rate.unwrap_or(24_000),
        length_ms,
        problems,
    })
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the WebSocket, with the token as `Authorization: Bearer`.
async fn connect(url: &str, token: Option<&str>) -> Result<Socket, PlayError> {
    let failed = |reason: String| PlayError::Connect {
        url: url.to_owned(),
        reason,
    };
    let request = crate::client::request(url, token).map_err(|e| failed(e.to_string()))?;
    let (socket, _) = timeout(SOCKET_TIMEOUT, tokio_tungstenite::connect_async(request))
        .await
        .map_err(|_| failed("timed out".into()))?
        .map_err(|e| failed(e.to_string()))?;
    Ok(socket)
}

/// The reader task: audio and events into `seen` until the socket ends; how it closed.
async fn read(
    mut stream: futures::stream::SplitStream<Socket>,
    seen: Arc<Mutex<Seen>>,
    ended: watch::Sender<usize>,
) -> Option<String> {
    while let Some(message) = stream.next().await {
        match message {
            Ok(Message::Binary(pcm)) => lock(&seen).audio(&pcm),
            Ok(Message::Text(text)) => {
                if let Ok(event) = serde_json::from_str::<Value>(text.as_str()) {
                    on_event(&seen, &event, &ended);
                }
            }
            Ok(Message::Close(frame)) => {
                return frame.map(|f| format!("{} {}", u16::from(f.code), f.reason));
            }
            Ok(_) => {}
            Err(e) => return Some(e.to_string()),
        }
    }
    None
}

/// Files an event under the current input; counts ended turns; notes the audio's rate.
fn on_event(seen: &Mutex<Seen>, event: &Value, ended: &watch::Sender<usize>) {
    let mut seen = lock(seen);
    let (index, _) = seen.current();
    if let Some(parts) = event["content"]["parts"].as_array() {
        for part in parts {
            let blob = &part["inlineData"];
            let Some(mime) = blob["mimeType"].as_str() else {
                continue;
            };
            if mime.starts_with("audio/") {
                seen.audio_rate = Some(crate::bundle::pcm_rate(mime, 24_000));
                if let Some(data) = blob["data"].as_str() {
                    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
                    let trimmed = data.trim_end_matches('=');
                    let pcm = engine.decode(trimmed.replace('+', "-").replace('/', "_"));
                    if let Ok(pcm) = pcm {
                        seen.audio(&pcm);
                    }
                }
            }
        }
    }
    seen.turns[index].add(event);
    if event["turnComplete"] == Value::Bool(true) {
        ended.send_modify(|n| *n += 1);
    }
}

/// The script's side of one replay.
struct Run<'a> {
    target: &'a Target,
    tx: &'a mpsc::Sender<Message>,
    seen: &'a Mutex<Seen>,
    ended: watch::Receiver<usize>,
    problems: Vec<String>,
}

impl Run<'_> {
    /// Sends every input when it is due, then waits for the turns the call ended; the first
    /// input's start.
    async fn script(&mut self, script: &Script) -> Option<Instant> {
        let mut first = None;
        let mut previous: Option<Instant> = None;
        for (index, action) in script.actions.iter().enumerate() {
            let due = match action.anchor {
                Anchor::AfterInput { pause } => {
                    previous.map_or_else(Instant::now, |p| p + self.scaled(pause))
                }
                Anchor::AfterTurn { turns, pause } => {
                    self.turns_ended(turns, index).await;
                    Instant::now() + self.scaled(pause)
                }
            };
            sleep_until(due).await;
            let start = Instant::now();
            first.get_or_insert(start);
            previous = Some(start);
            lock(self.seen).starts.push(start);
            if !self.send(&action.input, start).await {
                self.problems
                    .push(format!("input {}: the socket closed", index + 1));
                return first;
            }
        }
        self.turns_ended(script.turns_ended, script.actions.len())
            .await;
        first
    }

    fn scaled(&self, seconds: f64) -> Duration {
        Duration::from_secs_f64((seconds / self.target.speed).clamp(0.0, 3600.0))
    }

    /// Waits (bounded) until the agent has ended `turns` turns.
    async fn turns_ended(&mut self, turns: usize, before: usize) {
        let reached = timeout(TURN_TIMEOUT, self.ended.wait_for(|&n| n >= turns))
            .await
            .is_ok_and(|r| r.is_ok());
        if !reached {
            let now = *self.ended.borrow();
            self.problems.push(format!(
                "before input {}: {now} of the call's {turns} turns ended within {} s",
                before + 1,
                TURN_TIMEOUT.as_secs()
            ));
        }
    }

    /// Sends one input; audio paced from `start`. False when the socket is gone.
    async fn send(&self, input: &Input, start: Instant) -> bool {
        match input {
            Input::Text(text) => self.message(json!({"type": "text", "text": text})).await,
            Input::Image { data, mime } => {
                self.message(json!({"type": "image", "data": data, "mimeType": mime}))
                    .await
            }
            Input::Audio { pcm, rate } => {
                let frame_bytes = (*rate as usize / 50) * 2;
                let period = FRAME.div_f64(self.target.speed);
                for (n, chunk) in pcm.chunks(frame_bytes.max(2)).enumerate() {
                    sleep_until(start + period * n as u32).await;
                    let message = if *rate == 16_000 {
                        Message::Binary(chunk.to_vec().into())
                    } else {
                        let data = base64::engine::general_purpose::STANDARD.encode(chunk);
                        let mime = format!("audio/pcm;rate={rate}");
                        let body = json!({"type": "audio", "data": data, "mimeType": mime});
                        Message::Text(body.to_string().into())
                    };
                    if self.tx.send(message).await.is_err() {
                        return false;
                    }
                }
                true
            }
        }
    }

    async fn message(&self, body: Value) -> bool {
        self.tx
            .send(Message::Text(body.to_string().into()))
            .await
            .is_ok()
    }
}
