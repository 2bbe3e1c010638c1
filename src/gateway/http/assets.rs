//! The web client: embedded in the binary, or read from `--web-root` (e.g. ADK's bidi-demo page).

use std::path::{Component, Path as FsPath};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::gateway::state::Gateway;

#[derive(rust_embed::RustEmbed)]
#[folder = "static/"]
struct Assets;

/// Serves `/`: the web client's page.
pub async fn index(State(gateway): State<Arc<Gateway>>) -> Response {
    serve(&gateway, "index.html").await
}

/// Serves `/{file}` and `/static/{*path}`: the web client's scripts, styles and worklets.
pub async fn file(State(gateway): State<Arc<Gateway>>, Path(path): Path<String>) -> Response {
    serve(&gateway, &path).await
}

async fn serve(gateway: &Gateway, path: &str) -> Response {
    let data = match &gateway.web_root {
        Some(root) => read_under(root, path).await,
        None => Assets::get(path).map(|file| file.data.into_owned()),
    };
    match data {
        Some(data) => {
            // Module scripts and worklets only load with a JavaScript mime type.
            let mime = mime_guess::from_path(path).first_or_octet_stream();
            (
                [
                    (header::CONTENT_TYPE, mime.as_ref().to_owned()),
                    (header::CACHE_CONTROL, "no-cache".to_owned()),
                ],
                data,
            )
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "not found").into_response(),
    }
}

/// Reads `path` below `root`; paths that would leave it (`..`, absolute) read as missing.
async fn read_under(root: &FsPath, path: &str) -> Option<Vec<u8>> {
    let relative = FsPath::new(path);
    if !relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
    {
        return None;
    }
    tokio::fs::read(root.join(relative)).await.ok()
}
