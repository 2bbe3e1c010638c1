//! The gateway's routes inside an axum application of your own, beside its routes and behind its
//! own sign-in: the application checks its users its own way (here, a key per user) and hands
//! each a short-lived livegate client token; the gateway's WebSocket and REST routes take that
//! token as they take any.
//!
//! `cargo run --example embed_axum -- 127.0.0.1:8080`, then
//! `curl -X POST -H 'x-app-key: ada-key' http://127.0.0.1:8080/app/sign-in` gives a token for
//! `ws://127.0.0.1:8080/ws/ada/SESSION?token=TOKEN`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use livegate::gateway::auth::{AuthMode, Minter, Secret};
use livegate::gateway::{self, ServeArgs};
use serde_json::{json, Value};

/// The application's own users, by the key each signs in with.
const USERS: [(&str, &str); 2] = [("ada-key", "ada"), ("grace-key", "grace")];

struct App {
    minter: Minter,
}

/// The application's sign-in: its own check, then a livegate token for that user.
async fn sign_in(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> Result<Json<Value>, StatusCode> {
    let key = headers.get("x-app-key").and_then(|v| v.to_str().ok());
    let user = USERS
        .iter()
        .find(|(k, _)| Some(*k) == key)
        .map(|(_, user)| *user)
        .ok_or(StatusCode::UNAUTHORIZED)?;
    let minted = app
        .minter
        .mint(user, None, Some(Duration::from_secs(600)))
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok(Json(json!({ "user": user, "token": minted.token })))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into())
        .parse()?;
    livegate::cli::init_logging(Default::default());
    // The gateway's options as code; tokens signed with a secret of this process's own.
    let secret = Secret::new(format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    ));
    let mut args = ServeArgs::defaults();
    args.session_store = Some("memory:".into());
    args.artifact_store = Some("memory:".into());
    args.auth = Some(AuthMode::Token);
    args.secrets.token_secret = Some(secret.clone());
    let gateway = gateway::build(&args, Box::new(Ok)).await?;
    let app = Arc::new(App {
        minter: Minter::new(&secret).map_err(anyhow::Error::msg)?,
    });

    let own = Router::new()
        .route("/app/hello", get(|| async { "hello from the application" }))
        .route("/app/sign-in", post(sign_in))
        .with_state(app);
    let router = own.merge(gateway::router(gateway.clone()));

    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        livegate::cli::shutdown_signal().await;
        // The live sessions end, commit and close their sockets; then axum stops.
        gateway.drain(Duration::from_secs(10)).await;
    })
    .await?;
    Ok(())
}
