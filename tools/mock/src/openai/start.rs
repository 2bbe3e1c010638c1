//! Binding the mock's listener and serving its routes until shutdown.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{server, MockOpenAi, MockOpenAiConfig, Shared};

/// Binds `bind` and serves the Realtime endpoint until `shutdown`.
pub async fn start(bind: SocketAddr, config: MockOpenAiConfig) -> std::io::Result<MockOpenAi> {
    let listener = TcpListener::bind(bind).await?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared {
        config,
        shutdown: CancellationToken::new(),
        connections: TaskTracker::new(),
        next_connection: AtomicU64::new(1),
        truncations: Mutex::new(Vec::new()),
        appends: Mutex::default(),
        truncated: watch::channel(0).0,
    });
    let app = server::router(shared.clone());
    let token = shared.shutdown.clone();
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "mock-openai server failed");
        }
    });
    Ok(MockOpenAi { addr, shared, task })
}
