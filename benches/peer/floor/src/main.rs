//! The floor of the peer benchmark: a bare WebSocket relay between a client and a Gemini Live
//! server, with nothing a gateway adds — no runtime, sessions, events, recordings, limits, auth,
//! pacing or metrics. One task per session: each client binary frame (PCM16 16 kHz) is written
//! upstream as the same `realtimeInput` message livegate sends, and each server message is parsed
//! just enough to forward its audio as a binary frame and its `turnComplete` as
//! `{"turnComplete":true}`, which is all `livegate loadtest` reads. What it spends on that work is
//! the least any WebSocket gateway can spend on this machine.
//!
//! ```text
//! livegate-floor BIND UPSTREAM_URL MODEL
//!   BIND          e.g. 127.0.0.1:8093 (clients connect to ws://BIND/ws/USER/SESSION)
//!   UPSTREAM_URL  the BidiGenerateContent URL with its key, e.g.
//!                 wss://127.0.0.1:9300/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=test-key
//!   MODEL         e.g. gemini-2.5-flash-native-audio-preview-12-2025
//! ```
//! `SSL_CERT_FILE` names the upstream's certificate (the mock's), as for livegate.

use std::sync::Arc;

use base64::Engine;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::Connector;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let [_, bind, upstream, model] = args.as_slice() else {
        return Err("usage: livegate-floor BIND UPSTREAM_URL MODEL".into());
    };
    let relay = Arc::new(Relay {
        upstream: upstream.clone(),
        // The setup livegate's gemini backend sends for the benchmark's run: audio answers, both
        // transcriptions and resumption, so the server sends the floor the same messages.
        setup: serde_json::json!({"setup": {
            "model": format!("models/{model}"),
            "generationConfig": {"responseModalities": ["AUDIO"]},
            "sessionResumption": {},
            "inputAudioTranscription": {},
            "outputAudioTranscription": {},
        }})
        .to_string(),
        tls: Connector::Rustls(tls()?),
    });
    let listener = TcpListener::bind(bind).await?;
    println!(
        "livegate-floor listening on http://{}",
        listener.local_addr()?
    );
    loop {
        let (socket, _) = listener.accept().await?;
        let relay = relay.clone();
        tokio::spawn(async move {
            if let Err(error) = relay.session(socket).await {
                eprintln!("session ended: {error}");
            }
        });
    }
}

/// The TLS roots: `SSL_CERT_FILE`'s certificates (the benchmark's mock).
fn tls() -> Result<Arc<ClientConfig>, Error> {
    let mut roots = RootCertStore::empty();
    if let Some(path) = std::env::var_os("SSL_CERT_FILE") {
        for cert in CertificateDer::pem_file_iter(path)? {
            roots.add(cert?)?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

struct Relay {
    upstream: String,
    setup: String,
    tls: Connector,
}

/// What the floor reads of a server message: the answer's audio and the turn's end.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServerMessage<'a> {
    #[serde(borrow)]
    server_content: Option<ServerContent<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServerContent<'a> {
    #[serde(borrow)]
    model_turn: Option<Turn<'a>>,
    #[serde(default)]
    turn_complete: bool,
}

#[derive(Deserialize)]
struct Turn<'a> {
    #[serde(borrow, default)]
    parts: Vec<Part<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(borrow)]
    inline_data: Option<InlineData<'a>>,
}

#[derive(Deserialize)]
struct InlineData<'a> {
    data: &'a str,
}

impl Relay {
    /// One client session: upgrade, dial and set up the model, then relay both ways until either
    /// side ends.
    async fn session(&self, socket: TcpStream) -> Result<(), Error> {
        socket.set_nodelay(true)?;
        let client = tokio_tungstenite::accept_async(socket).await?;
        let (model, _) = tokio_tungstenite::connect_async_tls_with_config(
            self.upstream.as_str(),
            None,
            true,
            Some(self.tls.clone()),
        )
        .await?;
        let (mut model_tx, mut model_rx) = model.split();
        model_tx.send(Message::text(self.setup.clone())).await?;
        // setupComplete comes first; nothing in it matters here.
        model_rx.next().await.ok_or("no setupComplete")??;
        let (mut client_tx, mut client_rx) = client.split();
        let up = async {
            while let Some(message) = client_rx.next().await {
                if let Message::Binary(pcm) = message? {
                    model_tx.send(Message::text(realtime_input(&pcm))).await?;
                }
            }
            Ok::<(), Error>(())
        };
        let down = async {
            while let Some(message) = model_rx.next().await {
                let text = match message? {
                    Message::Text(text) => text,
                    Message::Binary(data) => String::from_utf8(data.to_vec())?.into(),
                    _ => continue,
                };
                let Ok(message) = serde_json::from_str::<ServerMessage<'_>>(&text) else {
                    continue;
                };
                let Some(content) = message.server_content else {
                    continue;
                };
                for part in content.model_turn.iter().flat_map(|t| &t.parts) {
                    if let Some(data) = &part.inline_data {
                        let pcm = base64::engine::general_purpose::STANDARD.decode(data.data)?;
                        client_tx.send(Message::binary(pcm)).await?;
                    }
                }
                if content.turn_complete {
                    client_tx
                        .send(Message::text(r#"{"turnComplete":true}"#))
                        .await?;
                }
            }
            Ok::<(), Error>(())
        };
        tokio::select! {
            result = up => result,
            result = down => result,
        }
    }
}

/// A microphone frame's `realtimeInput` message, as livegate's gemini backend writes it.
fn realtime_input(pcm: &[u8]) -> String {
    const HEAD: &str = r#"{"realtimeInput":{"audio":{"data":""#;
    const TAIL: &str = r#"","mimeType":"audio/pcm;rate=16000"}}}"#;
    // Sized exactly, as livegate's: the text becomes the frame's bytes without a reallocation.
    let mut text = String::with_capacity(HEAD.len() + pcm.len().div_ceil(3) * 4 + TAIL.len());
    text.push_str(HEAD);
    base64::engine::general_purpose::STANDARD.encode_string(pcm, &mut text);
    text.push_str(TAIL);
    text
}
