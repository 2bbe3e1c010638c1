//! The gateway's routes, and the small handlers that belong to no resource: health, readiness,
//! metrics.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::gateway::auth;
use crate::gateway::http::{access, assets, export, live_info, rest, run_api};
use crate::gateway::state::Gateway;
use crate::gateway::ws::upgrade::ws_upgrade;

/// The gateway's routes.
pub fn router(gateway: Arc<Gateway>) -> Router {
    let sessions = "/api/sessions/{user_id}/{session_id}";
    let protected = Router::new()
        .route("/ws/{user_id}/{session_id}", get(ws_upgrade))
        .route(
            "/api/sessions",
            get(rest::list_sessions).post(rest::create_session),
        )
        .route(
            sessions,
            get(rest::get_session).delete(rest::delete_session),
        )
        .route(&format!("{sessions}/artifacts"), get(rest::list_artifacts))
        .route(&format!("{sessions}/export"), get(export::export_session))
        .route("/api/users/{user_id}/usage", get(rest::user_usage))
        .route(
            &format!("{sessions}/artifacts/{{name}}"),
            get(rest::download_artifact),
        )
        .route("/run", post(run_api::run))
        .route("/run_sse", post(run_api::run_sse))
        .route(
            "/apps/{app_name}/users/{user_id}/sessions",
            post(run_api::create_session),
        )
        .route(
            "/apps/{app_name}/users/{user_id}/sessions/{session_id}",
            post(run_api::create_session),
        )
        .route("/api/tokens", post(access::mint_token))
        .route("/api/live", get(live_info::live_info))
        .route_layer(axum::middleware::from_fn_with_state(
            gateway.clone(),
            access::authorize,
        ));
    let cors = cors(gateway.auth.allowed_origins());
    let app = Router::new()
        .route("/", get(assets::index))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/api/config", get(access::config))
        .merge(protected)
        .merge(crate::gateway::telephony::routes())
        .route("/static/{*path}", get(assets::file))
        .route("/lib/{*path}", get(assets::library))
        .route("/examples/", get(assets::examples_index))
        .route("/examples/{*path}", get(assets::example))
        .route("/{file}", get(assets::file))
        .layer(axum::middleware::from_fn_with_state(
            gateway.clone(),
            access::guard_host,
        ))
        .with_state(gateway);
    match cors {
        Some(cors) => app.layer(cors),
        None => app,
    }
}

/// CORS for the operator's allowed origins only; none without them (same-origin pages need none).
fn cors(origins: &auth::AllowedOrigins) -> Option<tower_http::cors::CorsLayer> {
    use axum::http::{header, Method};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let origins = origins.clone();
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::predicate(move |origin, _| {
                origin.to_str().is_ok_and(|o| origins.allows(o))
            }))
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
            .max_age(Duration::from_secs(600)),
    )
}

async fn healthz() -> &'static str {
    "ok"
}

async fn metrics(
    State(gateway): State<Arc<Gateway>>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<SocketAddr>>>,
    headers: axum::http::HeaderMap,
) -> Response {
    let peer = peer.map(|axum::Extension(info)| info.0);
    if let Some(refused) = access::refuse_metrics(&gateway, peer, &headers) {
        return refused;
    }
    metrics_open(State(gateway)).await
}

/// `/metrics` without an access check (the separate `--metrics-bind` listener).
pub(crate) async fn metrics_open(State(gateway): State<Arc<Gateway>>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        gateway.metrics.render(),
    )
        .into_response()
}

async fn readyz(State(gateway): State<Arc<Gateway>>) -> Response {
    // A draining node takes no new sessions: the load balancer sends them elsewhere.
    if gateway.shutdown.is_fired() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    match gateway.readiness.check(&gateway.runner).await {
        Ok(()) => "ready".into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why.to_string()).into_response(),
    }
}
