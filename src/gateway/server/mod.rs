//! Running a gateway: configuration, start and shutdown, the accept loop with its TLS and the
//! limits it enforces before a request reaches a route.

pub mod config;
pub mod io_watch;
pub mod limits;
pub mod quota;
pub mod serve;
pub mod start;
pub mod tls;
