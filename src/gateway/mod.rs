//! The gateway: the axum app that pairs browser WebSockets with live runs, serves the web client
//! and the REST API, and runs until shut down. Its folders are its roles:
//!
//! - `ws/`: the WebSocket transport (the route, one `Connection` per socket, the client frame
//!   codec, the writer and its pacing, live settings, close codes);
//! - `http/`: the routes and the REST, `/run` and readiness handlers, the web client's files;
//! - `server/`: starting and stopping (`start`), the accept loop, TLS, limits, configuration;
//! - `cluster/`: one live run per session (the registry), shared through PostgreSQL leases;
//! - `telemetry/`: `/metrics` and the process's own figures;
//! - `telephony/`: phone calls: carriers' webhooks and media streams, one call session per call;
//! - `auth/`: who may do what.

pub mod auth;
pub mod cluster;
pub mod http;
mod ids;
mod media;
pub mod server;
mod state;
pub mod telemetry;
pub mod telephony;
pub mod ws;

pub use cluster::pg_leases::PgLeases;
pub use cluster::registry::{Lease, LeaseError, LeaseGuard, SessionRegistry, SharedLeases};
pub use http::router::router;
pub use ids::{InvalidId, PathId};
pub use server::config::{self, ServeArgs};
pub use server::limits;
pub use server::limits::SessionLimits;
pub use server::start::{
    build, start, start_with, Customize, CustomizeError, Server, StartError, DEFAULT_INSTRUCTION,
};
pub use state::Gateway;
pub use telemetry::{metrics, process};
pub use ws::close;
pub use ws::codec::{
    decode_binary, decode_text, encode_event, AudioEncoding, EncodedEvent, FrameError, FrameLimits,
    InputAudioBlocks,
};
pub use ws::live_settings::{self, ConnectOptions};
pub use ws::writer::{run_writer, WriterCommand, WriterConfig, WriterExit, SOCKET_WRITE_BUFFER};
