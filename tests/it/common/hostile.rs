//! A model server that misbehaves on purpose: a small Gemini Live or OpenAI Realtime stand-in
//! that answers the setup as the real ones do, then breaks the rules (hangs up, goes away, goes
//! silent, floods, sends too much) as each test asks. It records when each connection came, so
//! tests can count reconnects and their spacing.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// A server socket whose client messages are logged.
struct Logged {
    ws: WebSocketStream<TcpStream>,
    n: usize,
    log: Received,
}

type Ws = Logged;

/// Which server the stand-in plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Gemini,
    OpenAi,
}

/// What one connection does once set up.
#[derive(Debug, Clone)]
pub enum Act {
    /// Answers each turn with a short text, then the turn's end.
    Answer,
    /// Says `goAway` at once, then only reads.
    GoAway,
    /// Sends a resumption update, then closes with 1011.
    HandleThenClose,
    /// (Gemini) sends a resumption handle, waits for the user's turn, then does this.
    OnTurn(Fault),
    /// Answers the first turn (with no handle), then says `goAway`.
    AnswerThenGoAway,
}

/// What a connection does to the user's turn.
#[derive(Debug, Clone)]
pub enum Fault {
    /// A message over the gateway's 16 MiB limit.
    Oversize,
    /// A text frame that is not UTF-8.
    BadUtf8,
    /// A 1011 close.
    Close1011,
    /// Nothing more: the socket is held and never read (pings go unanswered).
    Dead,
    /// Keeps reading (so pings are answered) and never answers.
    Mute,
    /// `parts` text parts of `bytes` each, then the turn's end.
    Text { parts: usize, bytes: usize },
    /// `parts` output transcriptions of `bytes` each, then the turn's end.
    Transcript { parts: usize, bytes: usize },
    /// `count` resumption handles of `bytes` each, then an answer.
    Handles { count: usize, bytes: usize },
    /// `count` in-band errors, then an answer (OpenAI).
    Errors { count: usize },
    /// A tool call for every turn and every tool response, for ever (Gemini).
    ToolLoop,
    /// (Gemini) one message calling `echo` (id `call-echo`) and `slow` (id `call-slow`); once
    /// the test says so, `toolCallCancellation` of `call-slow` alone; then the answer after the
    /// tool response.
    CancelOneOfTwo(Arc<tokio::sync::Notify>),
}

/// A running stand-in.
pub struct Hostile {
    pub addr: SocketAddr,
    connections: Arc<Mutex<Vec<Instant>>>,
    received: Received,
}

/// Every client message, with the number of the connection it came on.
type Received = Arc<Mutex<Vec<(usize, Value)>>>;

impl Hostile {
    /// Serves `provider` on a free loopback port: connection `i` does `acts[i]`, and every one
    /// past the list does the last.
    pub async fn start(provider: Provider, acts: Vec<Act>) -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("an address");
        let connections = Arc::new(Mutex::new(Vec::new()));
        let seen = connections.clone();
        let received = Received::default();
        let log = received.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(ws) = tokio_tungstenite::accept_async(tcp).await else {
                    continue;
                };
                let n = {
                    let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
                    seen.push(Instant::now());
                    seen.len() - 1
                };
                let act = acts[n.min(acts.len() - 1)].clone();
                let ws = Logged {
                    ws,
                    n,
                    log: log.clone(),
                };
                tokio::spawn(serve(ws, provider, act, n));
            }
        });
        Hostile {
            addr,
            connections,
            received,
        }
    }

    /// The client messages connection `n` received.
    pub fn received(&self, n: usize) -> Vec<Value> {
        let received = self.received.lock().unwrap_or_else(PoisonError::into_inner);
        received
            .iter()
            .filter(|(on, _)| *on == n)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// When each connection came, in order.
    pub fn connections(&self) -> Vec<Instant> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

async fn serve(mut ws: Ws, provider: Provider, act: Act, n: usize) {
    if set_up(&mut ws, provider).await.is_none() {
        return;
    }
    match act {
        Act::Answer => {
            while let Some(turn) = next_turn(&mut ws, provider).await {
                if turn != Turn::Tool && answer(&mut ws, provider, "fine").await.is_none() {
                    return;
                }
            }
        }
        Act::GoAway => {
            let _ = send(&mut ws, json!({"goAway": {"timeLeft": "1s"}})).await;
            while next_turn(&mut ws, provider).await.is_some() {}
        }
        Act::AnswerThenGoAway => {
            if next_turn(&mut ws, provider).await.is_some() {
                let _ = answer(&mut ws, provider, "fine").await;
                let _ = send(&mut ws, json!({"goAway": {"timeLeft": "1s"}})).await;
            }
            while next_turn(&mut ws, provider).await.is_some() {}
        }
        Act::HandleThenClose => {
            let _ = send(&mut ws, handle(&format!("h-{n}"))).await;
            let _ = close(&mut ws, 1011).await;
        }
        Act::OnTurn(fault) => {
            if provider == Provider::Gemini
                && send(&mut ws, handle(&format!("h-{n}"))).await.is_none()
            {
                return;
            }
            if next_turn(&mut ws, provider).await.is_some() {
                let _ = misbehave(&mut ws, provider, fault).await;
            }
        }
    }
}

/// Answers the setup as the provider does; None if the client went away.
async fn set_up(ws: &mut Ws, provider: Provider) -> Option<()> {
    match provider {
        Provider::Gemini => {
            read(ws).await?;
            send(ws, json!({"setupComplete": {}})).await
        }
        Provider::OpenAi => {
            send(ws, json!({"type": "session.created", "session": {}})).await?;
            loop {
                if read(ws).await?["type"] == "session.update" {
                    return send(ws, json!({"type": "session.updated", "session": {}})).await;
                }
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Turn {
    User,
    Tool,
}

/// Reads until the client ends a turn (or sends tool results); None once it is gone.
async fn next_turn(ws: &mut Ws, provider: Provider) -> Option<Turn> {
    loop {
        let message = read(ws).await?;
        match provider {
            Provider::Gemini => {
                if message.get("toolResponse").is_some() {
                    return Some(Turn::Tool);
                }
                let typed = message["clientContent"]["turnComplete"] == true
                    || message["realtimeInput"].get("text").is_some()
                    || message["realtimeInput"].get("activityEnd").is_some();
                if typed {
                    return Some(Turn::User);
                }
            }
            Provider::OpenAi => {
                if message["type"] == "response.create" {
                    return Some(Turn::User);
                }
            }
        }
    }
}

async fn misbehave(ws: &mut Ws, provider: Provider, fault: Fault) -> Option<()> {
    match fault {
        Fault::Oversize => {
            let big = "x".repeat(17 * 1024 * 1024);
            ws.ws
                .send(Message::Binary(big.into_bytes().into()))
                .await
                .ok()
        }
        Fault::BadUtf8 => {
            let frame =
                Frame::message(vec![b'{', 0xff, 0xfe, b'}'], OpCode::Data(Data::Text), true);
            ws.ws.send(Message::Frame(frame)).await.ok()
        }
        Fault::Close1011 => close(ws, 1011).await,
        Fault::Dead => {
            // Hold the socket, unread: the client's pings are never answered.
            std::future::pending::<()>().await;
            Some(())
        }
        Fault::Mute => {
            while read(ws).await.is_some() {}
            Some(())
        }
        Fault::Text { parts, bytes } => {
            for _ in 0..parts {
                send(ws, text_part(provider, &"t".repeat(bytes))).await?;
            }
            send(ws, turn_complete(provider)).await
        }
        Fault::Transcript { parts, bytes } => {
            let text = "s".repeat(bytes);
            for _ in 0..parts {
                send(
                    ws,
                    json!({"serverContent": {"outputTranscription": {"text": text}}}),
                )
                .await?;
            }
            send(ws, turn_complete(provider)).await
        }
        Fault::Handles { count, bytes } => {
            for i in 0..count {
                let mut long = format!("h{i}-");
                long.push_str(&"h".repeat(bytes));
                send(ws, handle(&long)).await?;
            }
            answer(ws, provider, "after handles").await?;
            while read(ws).await.is_some() {}
            Some(())
        }
        Fault::Errors { count } => {
            for i in 0..count {
                let error = json!({"type": "error", "error": {
                    "type": "invalid_request_error", "code": "bad", "message": format!("error {i}"),
                }});
                send(ws, error).await?;
            }
            answer(ws, provider, "after errors").await?;
            while read(ws).await.is_some() {}
            Some(())
        }
        Fault::CancelOneOfTwo(go) => {
            let calls = json!({"toolCall": {"functionCalls": [
                {"id": "call-echo", "name": "echo", "args": {"text": "kept"}},
                {"id": "call-slow", "name": "slow", "args": {}},
            ]}});
            send(ws, calls).await?;
            go.notified().await;
            send(ws, json!({"toolCallCancellation": {"ids": ["call-slow"]}})).await?;
            if next_turn(ws, provider).await? == Turn::Tool {
                answer(ws, provider, "fine").await?;
            }
            while read(ws).await.is_some() {}
            Some(())
        }
        Fault::ToolLoop => {
            for round in 0.. {
                let call = json!({"toolCall": {"functionCalls": [{
                    "id": format!("call-{round}"), "name": "get_current_time",
                    "args": {"timezone": "Asia/Tokyo"},
                }]}});
                send(ws, call).await?;
                next_turn(ws, provider).await?;
            }
            Some(())
        }
    }
}

fn handle(handle: &str) -> Value {
    json!({"sessionResumptionUpdate": {"newHandle": handle, "resumable": true}})
}

fn text_part(provider: Provider, text: &str) -> Value {
    match provider {
        Provider::Gemini => json!({"serverContent": {"modelTurn": {"parts": [{"text": text}]}}}),
        Provider::OpenAi => json!({"type": "response.output_text.delta", "delta": text}),
    }
}

fn turn_complete(provider: Provider) -> Value {
    match provider {
        Provider::Gemini => json!({"serverContent": {"turnComplete": true}}),
        Provider::OpenAi => json!({"type": "response.done",
            "response": {"id": "resp-1", "status": "completed", "output": []}}),
    }
}

async fn answer(ws: &mut Ws, provider: Provider, text: &str) -> Option<()> {
    if provider == Provider::OpenAi {
        send(
            ws,
            json!({"type": "response.created", "response": {"id": "resp-1"}}),
        )
        .await?;
    }
    send(ws, text_part(provider, text)).await?;
    send(ws, turn_complete(provider)).await
}

async fn send(ws: &mut Ws, value: Value) -> Option<()> {
    ws.ws
        .send(Message::Text(value.to_string().into()))
        .await
        .ok()
}

async fn close(ws: &mut Ws, code: u16) -> Option<()> {
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: "hostile".into(),
    };
    ws.ws.send(Message::Close(Some(frame))).await.ok()?;
    while ws.ws.next().await.is_some() {}
    Some(())
}

/// The client's next JSON message; None once it is gone.
async fn read(ws: &mut Ws) -> Option<Value> {
    loop {
        let payload = match ws.ws.next().await?.ok()? {
            Message::Text(text) => text.as_bytes().to_vec(),
            Message::Binary(data) => data.to_vec(),
            Message::Close(_) => return None,
            _ => continue,
        };
        if let Ok(value) = serde_json::from_slice::<Value>(&payload) {
            let mut log = ws.log.lock().unwrap_or_else(PoisonError::into_inner);
            log.push((ws.n, value.clone()));
            return Some(value);
        }
    }
}
