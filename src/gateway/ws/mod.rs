//! The WebSocket transport: the route (`upgrade`), one `Connection` per socket (a reader loop and
//! the writer task that owns the sink), the client frame codec, pacing, live settings and every
//! close code the gateway sends.

pub mod close;
pub mod codec;
pub mod connection;
pub mod live_settings;
pub mod pacing;
pub mod upgrade;
pub mod writer;
