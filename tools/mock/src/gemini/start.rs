//! Binding the mock's listener (plain or TLS) and serving its routes until shutdown.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use axum::serve::Listener;
use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{server, tls, MockGemini, MockGeminiConfig, Shared};

/// Binds `bind` and serves the Gemini Live endpoints until `shutdown`.
pub async fn start(bind: SocketAddr, config: MockGeminiConfig) -> std::io::Result<MockGemini> {
    let acceptor = config.tls.as_ref().map(tls::acceptor).transpose()?;
    let listener = TcpListener::bind(bind).await?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared {
        config,
        shutdown: CancellationToken::new(),
        connections: TaskTracker::new(),
        next_connection: AtomicU64::new(1),
        vertex_connections: AtomicU64::new(0),
        setups: Mutex::new(VecDeque::new()),
        inputs: Mutex::new(VecDeque::new()),
    });
    let app = server::router(shared.clone());
    let token = shared.shutdown.clone();
    let task = match acceptor {
        Some(acceptor) => serve(tls::TlsListener::new(listener, acceptor)?, app, token),
        None => serve(listener, app, token),
    };
    Ok(MockGemini { addr, shared, task })
}

fn serve<L>(listener: L, app: Router, shutdown: CancellationToken) -> JoinHandle<()>
where
    L: Listener,
    L::Addr: fmt::Debug,
{
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "mock-gemini server failed");
        }
    })
}
