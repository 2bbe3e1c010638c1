//! The gateway's accept loop: hyper's HTTP/1 connections (with upgrades, for WebSockets) over
//! plain TCP or rustls, with the limits a server on an open network needs before any route runs.
//!
//! - A header-read timeout: a connection that does not finish its request's head in time (and a
//!   keep-alive connection idle that long) is closed.
//! - A cap on connections that have not finished their first request (slowloris): past it, the
//!   oldest such connection is closed to make room, so silent sockets can never crowd out a real
//!   request. The cap is kept below the process's file descriptor limit, and when accepting still
//!   fails for want of descriptors the oldest unfinished connection is shed and accepting backs
//!   off, logging at most once a second. With none to shed, a reserve descriptor is given up to
//!   let one waiting connection in: a probe is answered, anything else refused with 503.
//! - Requests per client address per second, requests in flight per client address, and the
//!   client address itself (see [`crate::gateway::server::limits`]).
//! - A request's body is read whole, within the body-read timeout and the size limit, before any
//!   handler runs; a response's writes time out when the client stops reading (see
//!   [`crate::gateway::server::io_watch`]).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_service::Service;

use crate::gateway::server::io_watch::{IoWatch, SendBuffer, Watched};
use crate::gateway::server::limits::{ClientAddr, Limits, Refused};
use crate::gateway::server::tls::ReloadingTls;
use crate::latch::Latch;
use crate::lock::Recover;

/// Descriptors kept out of the unfinished-connection budget: open connections that did finish a
/// request, the stores' files, and the process's own.
const FD_RESERVE_SHARE: u64 = 2;
/// Longest wait between accept attempts while accepting fails.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
/// First wait after an accept error.
const MIN_ACCEPT_BACKOFF: Duration = Duration::from_millis(5);
/// How long to wait for the connection the reserve descriptor makes room for.
const RESERVE_ACCEPT_WAIT: Duration = Duration::from_millis(10);
/// How often an accept error may be logged.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(1);

/// How the accept loop serves connections.
#[derive(Debug)]
pub(crate) struct ServeOptions {
    /// Longest a client may take to send a request's head (and its TLS handshake).
    pub header_read_timeout: Duration,
    /// Most connections that have not finished their first request.
    pub max_unfinished: usize,
    /// Serve TLS with this certificate, reloaded when its files change.
    pub tls: Option<Arc<ReloadingTls>>,
    /// How long in-flight requests may run on after shutdown before their connections are closed.
    pub grace: Duration,
    /// Longest a client may take to send a request's whole body (`None`: no limit).
    pub body_read_timeout: Option<Duration>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Longest a response's write may wait for the client to read (`None`: no limit).
    pub write_timeout: Option<Duration>,
}

/// Connections accepted that have not finished their first request, oldest first.
#[derive(Debug, Default)]
struct Unfinished {
    next_id: AtomicU64,
    waiting: Mutex<BTreeMap<u64, CancellationToken>>,
}

impl Unfinished {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, CancellationToken>> {
        self.waiting.lock_or_recover()
    }

    /// Registers a new connection; if that makes more than `max`, the oldest is told to close.
    fn add(&self, max: usize) -> (u64, CancellationToken, bool) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let token = CancellationToken::new();
        let mut waiting = self.lock();
        let shed = waiting.len() >= max.max(1) && Self::shed_locked(&mut waiting);
        waiting.insert(id, token.clone());
        (id, token, shed)
    }

    fn finish(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Closes the oldest unfinished connection; false if there is none.
    fn shed_oldest(&self) -> bool {
        Self::shed_locked(&mut self.lock())
    }

    fn shed_locked(waiting: &mut BTreeMap<u64, CancellationToken>) -> bool {
        match waiting.pop_first() {
            Some((_, token)) => {
                token.cancel();
                true
            }
            None => false,
        }
    }
}

/// What every connection task shares.
#[derive(Debug)]
struct Shared {
    app: Router,
    limits: Arc<Limits>,
    options: ServeOptions,
    unfinished: Unfinished,
    shutdown: Latch,
}

/// The most unfinished connections for a configured cap: at most half the descriptors the
/// process may open, so the other half stays for connections that did send a request.
pub(crate) fn unfinished_cap(configured: usize) -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let budget = usize::try_from(limit / FD_RESERVE_SHARE).unwrap_or(usize::MAX);
    configured.min(budget).max(1)
}

/// Serves `app` on `listener` until `shutdown` fires, then lets requests in flight finish
/// (bounded by the grace period) and returns.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Arc<Limits>,
    options: ServeOptions,
    shutdown: Latch,
) {
    let shared = Arc::new(Shared {
        app,
        limits,
        options,
        unfinished: Unfinished::default(),
        shutdown: shutdown.clone(),
    });
    let connections = TaskTracker::new();
    let mut backoff = MIN_ACCEPT_BACKOFF;
    let mut log = LogThrottle::default();
    let mut reserve = reserve_descriptor();
    loop {
        if reserve.is_none() {
            reserve = reserve_descriptor();
        }
        let accepted = tokio::select! {
            biased;
            _ = shutdown.fired() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => {
                backoff = MIN_ACCEPT_BACKOFF;
                accepted
            }
            Err(error) => {
                shared.limits.counters.accept_error();
                if let Some(suppressed) = log.ready(Instant::now()) {
                    tracing::warn!(%error, suppressed, "could not accept a connection; backing off");
                }
                // Out of descriptors. Linux says so before it looks for a waiting connection, so
                // first see whether one waits: the reserve descriptor, given back, makes room to
                // take it. If an unfinished connection can be shed for it, it is served as usual;
                // if not (every descriptor holds a connection that sent a request), it may only
                // ask a probe, anything else is refused with 503, and it is closed either way.
                if is_out_of_descriptors(&error) && reserve.take().is_some() {
                    let waiting = tokio::time::timeout(RESERVE_ACCEPT_WAIT, listener.accept());
                    if let Ok(Ok((tcp, peer))) = waiting.await {
                        let _ = tcp.set_nodelay(true);
                        let shed = shared.unfinished.shed_oldest();
                        if shed {
                            shared.limits.counters.shed();
                        }
                        let (id, cancel, _) = shared.unfinished.add(usize::MAX);
                        let serve = serve_tcp(shared.clone(), tcp, peer, id, cancel, !shed);
                        connections.spawn(serve);
                        continue;
                    }
                }
                tokio::select! {
                    _ = shutdown.fired() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_ACCEPT_BACKOFF);
                continue;
            }
        };
        // Audio frames are small and latency-critical: Nagle's algorithm would hold each one
        // behind the previous one's (delayed) ACK.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
        // The kernel send buffer is sized per write by `Watched` (HTTP bulk or paced WebSocket).
        let (id, cancel, shed) = shared.unfinished.add(shared.options.max_unfinished);
        if shed {
            shared.limits.counters.shed();
        }
        connections.spawn(serve_tcp(shared.clone(), tcp, peer, id, cancel, false));
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(shared.options.grace, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("HTTP connections did not finish within the grace period");
    }
}

/// Lets a repeated log line out at most once per [`ACCEPT_LOG_EVERY`].
#[derive(Debug, Default)]
struct LogThrottle {
    last: Option<Instant>,
    suppressed: u64,
}

impl LogThrottle {
    /// `Some(lines held back since the last one)` if a line may be logged at `now`.
    fn ready(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < ACCEPT_LOG_EVERY)
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// A descriptor held back to be given up when the process runs out, so a probe can still get in.
fn reserve_descriptor() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

fn is_out_of_descriptors(error: &std::io::Error) -> bool {
    let emfile = rustix::io::Errno::MFILE.raw_os_error();
    let enfile = rustix::io::Errno::NFILE.raw_os_error();
    matches!(error.raw_os_error(), Some(code) if code == emfile || code == enfile)
}

async fn serve_tcp(
    shared: Arc<Shared>,
    tcp: TcpStream,
    peer: SocketAddr,
    id: u64,
    cancel: CancellationToken,
    probes_only: bool,
) {
    let Some(tls) = shared.options.tls.clone() else {
        serve_io(shared, tcp, peer, id, cancel, probes_only).await;
        return;
    };
    let handshake = tokio::time::timeout(
        shared.options.header_read_timeout,
        tls.acceptor().accept(tcp),
    );
    let stream = tokio::select! {
        _ = cancel.cancelled() => None,
        done = handshake => match done {
            Ok(Ok(stream)) => Some(stream),
            Ok(Err(error)) => {
                tracing::debug!(%error, %peer, "TLS handshake failed");
                None
            }
            Err(_) => None,
        },
    };
    match stream {
        Some(stream) => serve_io(shared, stream, peer, id, cancel, probes_only).await,
        None => shared.unfinished.finish(id),
    }
}

async fn serve_io<IO>(
    shared: Arc<Shared>,
    io: IO,
    peer: SocketAddr,
    id: u64,
    cancel: CancellationToken,
    probes_only: bool,
) where
    IO: AsyncRead + AsyncWrite + SendBuffer + Unpin + Send + 'static,
{
    let first = Arc::new(AtomicBool::new(true));
    let watch = Arc::new(IoWatch::default());
    let io = Watched::new(io, watch.clone(), shared.options.write_timeout);
    let service = {
        let shared = shared.clone();
        hyper::service::service_fn(move |mut request: Request<Incoming>| {
            let shared = shared.clone();
            let first = first.swap(false, Ordering::Relaxed);
            if first {
                shared.unfinished.finish(id);
            }
            request.extensions_mut().insert(watch.clone());
            async move {
                if probes_only {
                    return Ok::<_, Infallible>(probe_only(&shared, request, peer).await);
                }
                Ok(handle(&shared, request, peer).await)
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.options.header_read_timeout);
    let connection = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(connection);
    let served = tokio::select! {
        served = connection.as_mut() => Some(served),
        // Shed to make room: dropping the connection closes the socket.
        _ = cancel.cancelled() => None,
        _ = shared.shutdown.fired() => {
            connection.as_mut().graceful_shutdown();
            tokio::select! {
                served = connection.as_mut() => Some(served),
                _ = tokio::time::sleep(shared.options.grace) => None,
            }
        }
    };
    shared.unfinished.finish(id);
    if let Some(Err(error)) = served {
        shared.limits.counters.connection_error();
        tracing::debug!(%error, %peer, "HTTP connection ended with an error");
    }
}

/// Paths that answer whatever the limits say: probes must see the process, not its clients.
fn is_probe(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// The web client's own files (`/`, `/static/…`, `/lib/…`, `/examples/…`, `/app.js`): served from
/// memory, fetched many at once by every page load, and not counted by the rate.
fn is_asset(path: &str) -> bool {
    path == "/"
        || ["/static/", "/lib/", "/examples/"]
            .iter()
            .any(|folder| path.starts_with(folder))
        || (path.len() > 1 && !path[1..].contains('/') && path.contains('.'))
}

async fn handle(shared: &Shared, mut request: Request<Incoming>, peer: SocketAddr) -> Response {
    let client = shared.limits.client_addr(peer.ip(), request.headers());
    request.extensions_mut().insert(ConnectInfo(peer));
    request.extensions_mut().insert(ClientAddr(client));
    let (probe, asset) = (
        is_probe(request.uri().path()),
        is_asset(request.uri().path()),
    );
    if probe {
        return call(shared, request.map(Body::new)).await;
    }
    // Every request counts, not only a connection's first: requests pipelined on one
    // keep-alive connection cost as much as requests on new ones.
    if !asset && !shared.limits.allow_request(client) {
        return Refused::Rate.response();
    }
    let _in_flight = match shared.limits.begin_request(client) {
        Ok(slot) => slot,
        Err(refused) => return refused.response(),
    };
    let request = match read_body(&shared.options, request).await {
        Ok(request) => request,
        Err(refused) => {
            shared.limits.counters.refused(refused);
            return refused.response();
        }
    };
    call(shared, request).await
}

async fn call(shared: &Shared, request: Request<Body>) -> Response {
    let mut app = shared.app.clone();
    match app.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// The request with its body read whole, within the body-read timeout and the size limit, so
/// that a client trickling a body holds neither a handler nor its descriptor for long.
async fn read_body(
    options: &ServeOptions,
    request: Request<Incoming>,
) -> Result<Request<Body>, Refused> {
    use http_body_util::BodyExt;
    use hyper::body::Body as _;
    if request.body().is_end_stream() {
        return Ok(request.map(Body::new));
    }
    // A length announced over the limit is refused before a byte of it is read.
    let announced = request.body().size_hint().lower();
    if announced > u64::try_from(options.max_body_bytes).unwrap_or(u64::MAX) {
        return Err(Refused::BodyTooLarge);
    }
    let (parts, body) = request.into_parts();
    let limited = http_body_util::Limited::new(body, options.max_body_bytes).collect();
    let collected = match options.body_read_timeout {
        Some(timeout) => tokio::time::timeout(timeout, limited)
            .await
            .map_err(|_| Refused::BodyTimeout)?,
        None => limited.await,
    };
    match collected {
        Ok(body) => Ok(Request::from_parts(parts, Body::from(body.to_bytes()))),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(Refused::BodyTooLarge),
        // The client broke the body off: a timeout's answer is as good as any.
        Err(_) => Err(Refused::BodyTimeout),
    }
}

/// A connection let in on the reserve descriptor: probes are answered, anything else refused,
/// and the connection is closed after the answer to give the descriptor back.
async fn probe_only(shared: &Shared, request: Request<Incoming>, peer: SocketAddr) -> Response {
    let mut response = if is_probe(request.uri().path()) {
        handle(shared, request, peer).await
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            axum::Json(serde_json::json!({"error": "the gateway is at its connection limit"})),
        )
            .into_response()
    };
    response.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_errors_are_logged_at_most_once_a_second() {
        let mut log = LogThrottle::default();
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        assert_eq!(log.ready(at(0)), Some(0));
        let logged: Vec<_> = (1..2_000).filter_map(|ms| log.ready(at(ms))).collect();
        assert_eq!(
            logged,
            vec![999],
            "one more line after a second, with the count held back"
        );
    }

    #[test]
    fn the_oldest_unfinished_connection_makes_room() {
        let unfinished = Unfinished::default();
        let (a, first, shed) = unfinished.add(2);
        assert!(!shed);
        let (_, second, _) = unfinished.add(2);
        let (_, _, shed) = unfinished.add(2);
        assert!(shed && first.is_cancelled() && !second.is_cancelled());
        unfinished.finish(a);
        assert!(unfinished.shed_oldest() && second.is_cancelled());
    }
}
