//! Admission limits: a cap on WebSocket connections in total, a cap on the live sessions of one
//! user (WebSockets and `/run` turns), a per-address rate of requests and a per-address cap on
//! requests in flight, each answered before any work. Also where a request's client address
//! comes from (`X-Forwarded-For` only when the peer is a trusted proxy).

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::http::HeaderMap;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use ipnet::IpNet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::lock::Recover;

/// Rate-limiter checks between two sweeps of addresses whose bucket has refilled, so the keyed
/// state stays as small as the set of recently active addresses.
const SWEEP_EVERY: u64 = 1024;

/// The address a request is counted against, as the gateway determined it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// Why a live connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The gateway holds its most WebSocket connections (503).
    Connections,
    /// The user has its most live sessions (429).
    UserSessions,
    /// The address sent too many requests in the last second (429).
    Rate,
    /// The address has its most requests in flight (429).
    InFlight,
    /// The request's body did not arrive in time (408).
    BodyTimeout,
    /// The request's body is over the size limit (413).
    BodyTooLarge,
    /// The user has its most stored sessions (429).
    StoredSessions,
    /// The session's state would be over its size limit (413).
    StateBytes,
}

impl Refused {
    /// The `reason` label in `livegate_limit_refusals_total`.
    pub fn label(self) -> &'static str {
        match self {
            Refused::Connections => "connections",
            Refused::UserSessions => "user_sessions",
            Refused::Rate => "rate",
            Refused::InFlight => "in_flight",
            Refused::BodyTimeout => "body_timeout",
            Refused::BodyTooLarge => "body_size",
            Refused::StoredSessions => "stored_sessions",
            Refused::StateBytes => "state_bytes",
        }
    }
}

impl Refused {
    /// The answer: its status, `Retry-After` where trying again soon may work, and `{"error"}`.
    /// Refusals made before the request was read whole close the connection (its unread body
    /// would otherwise be taken for the next request).
    pub fn response(self) -> axum::response::Response {
        use axum::http::{header, StatusCode};
        use axum::response::IntoResponse;
        let (status, message) = match self {
            Refused::Connections => (
                StatusCode::SERVICE_UNAVAILABLE,
                "the gateway has its most connections; try again later",
            ),
            Refused::UserSessions => (
                StatusCode::TOO_MANY_REQUESTS,
                "this user has its most live sessions",
            ),
            Refused::Rate => (
                StatusCode::TOO_MANY_REQUESTS,
                "too many requests from this address",
            ),
            Refused::InFlight => (
                StatusCode::TOO_MANY_REQUESTS,
                "too many requests in flight from this address",
            ),
            Refused::BodyTimeout => (
                StatusCode::REQUEST_TIMEOUT,
                "the request's body did not arrive in time",
            ),
            Refused::BodyTooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request's body is over the size limit (--max-message-bytes)",
            ),
            Refused::StoredSessions => (
                StatusCode::TOO_MANY_REQUESTS,
                "this user has its most stored sessions (--max-stored-sessions-per-user); delete one first",
            ),
            Refused::StateBytes => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "the session's state would be over its size limit (--max-state-bytes)",
            ),
        };
        let body = axum::Json(serde_json::json!({ "error": message }));
        let mut response = (status, body).into_response();
        if matches!(
            self,
            Refused::Connections | Refused::UserSessions | Refused::Rate | Refused::InFlight
        ) {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        if matches!(
            self,
            Refused::Rate | Refused::InFlight | Refused::BodyTimeout | Refused::BodyTooLarge
        ) {
            response.headers_mut().insert(
                header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

/// Counters of what the limits turned away, registered under `livegate_`.
#[derive(Debug, Clone, Default)]
pub struct LimitCounters {
    refusals: Family<[(&'static str, &'static str); 1], Counter>,
    shed: Counter,
    accept_errors: Counter,
    header_timeouts: Counter,
    /// Certificate reloads that failed (the previous certificate stayed in service).
    pub tls_reload_failures: Counter,
}

impl LimitCounters {
    /// Counters registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let counters = LimitCounters::default();
        registry.register(
            "limit_refusals",
            "Requests refused by a limit or quota before any work, by reason (connections, user_sessions, rate, in_flight, body_timeout, body_size, stored_sessions, state_bytes)",
            counters.refusals.clone(),
        );
        registry.register(
            "unfinished_connections_shed",
            "Connections closed before their first request to make room for newer ones",
            counters.shed.clone(),
        );
        registry.register(
            "accept_errors",
            "Errors accepting a connection (out of file descriptors and the like)",
            counters.accept_errors.clone(),
        );
        registry.register(
            "connection_errors",
            "Connections that ended with an HTTP error (header timeout, bad request, reset)",
            counters.header_timeouts.clone(),
        );
        registry.register(
            "tls_reload_failures",
            "Changed TLS certificate or key files that could not be loaded (the previous pair stays in service)",
            counters.tls_reload_failures.clone(),
        );
        counters
    }

    /// Counts a refusal.
    pub(crate) fn refused(&self, why: Refused) {
        self.refusals
            .get_or_create(&[("reason", why.label())])
            .inc();
    }

    pub(crate) fn shed(&self) {
        self.shed.inc();
    }

    pub(crate) fn accept_error(&self) {
        self.accept_errors.inc();
    }

    pub(crate) fn connection_error(&self) {
        self.header_timeouts.inc();
    }
}

/// The limits' settings (0 turns a cap off).
#[derive(Debug, Clone, Default)]
pub struct LimitSettings {
    /// Most WebSocket connections at once.
    pub max_connections: usize,
    /// Most live sessions of one user at once.
    pub max_sessions_per_user: usize,
    /// New connections per client address per second (bursts of twice this).
    pub connections_per_second: u32,
    /// Peers whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Vec<IpNet>,
    /// Most requests of one client address in flight at once.
    pub max_requests_in_flight: usize,
}

#[derive(Debug, Default)]
struct Live {
    connections: usize,
    /// Per user, the sessions with a live connection and how many connections each has (a
    /// takeover briefly has two).
    users: HashMap<String, HashMap<String, usize>>,
}

/// The gateway's admission limits.
#[derive(Debug)]
pub struct Limits {
    settings: LimitSettings,
    live: Mutex<Live>,
    /// Requests in flight per client address (its rate key), those with any.
    in_flight: Mutex<HashMap<IpAddr, usize>>,
    rate: Option<DefaultKeyedRateLimiter<IpAddr>>,
    checks: AtomicU64,
    /// What the limits refused.
    pub counters: LimitCounters,
}

/// A live connection's place under the caps, given back when dropped.
#[derive(Debug)]
pub struct LiveSlot {
    limits: Arc<Limits>,
    user_id: String,
    session_id: String,
    /// It counts under the cap on WebSocket connections (a `/run` turn does not).
    connection: bool,
}

impl Drop for LiveSlot {
    fn drop(&mut self) {
        let mut live = self.limits.lock();
        if self.connection {
            live.connections = live.connections.saturating_sub(1);
        }
        if let Some(sessions) = live.users.get_mut(&self.user_id) {
            if let Some(count) = sessions.get_mut(&self.session_id) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    sessions.remove(&self.session_id);
                }
            }
            if sessions.is_empty() {
                live.users.remove(&self.user_id);
            }
        }
    }
}

/// A request's place under its address's cap on requests in flight, given back when dropped.
#[derive(Debug)]
pub struct RequestSlot {
    counted: Option<(Arc<Limits>, IpAddr)>,
}

impl Drop for RequestSlot {
    fn drop(&mut self) {
        let Some((limits, key)) = &self.counted else {
            return;
        };
        let mut in_flight = limits.in_flight.lock_or_recover();
        if let Some(count) = in_flight.get_mut(key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                in_flight.remove(key);
            }
        }
    }
}

impl Limits {
    /// Limits with these settings, counting into `counters`.
    pub fn new(settings: LimitSettings, counters: LimitCounters) -> Self {
        let rate = NonZeroU32::new(settings.connections_per_second).map(|per_second| {
            let burst = per_second.saturating_mul(NonZeroU32::MIN.saturating_add(1));
            RateLimiter::keyed(Quota::per_second(per_second).allow_burst(burst))
        });
        Limits {
            settings,
            live: Mutex::new(Live::default()),
            in_flight: Mutex::default(),
            rate,
            checks: AtomicU64::new(0),
            counters,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        // Every change below is a whole counter update; a panic elsewhere cannot tear one.
        self.live.lock_or_recover()
    }

    /// Admits a live connection to a session, or says which cap it is over. A connection that
    /// takes over a session the user already has live does not count as another session.
    pub fn admit(self: &Arc<Self>, user_id: &str, session_id: &str) -> Result<LiveSlot, Refused> {
        self.admit_as(user_id, session_id, true)
    }

    /// Admits a turn-based run (`/run`, `/run_sse`) on a session: it counts as the user's live
    /// session while it runs, not as a WebSocket connection.
    pub fn admit_run(
        self: &Arc<Self>,
        user_id: &str,
        session_id: &str,
    ) -> Result<LiveSlot, Refused> {
        self.admit_as(user_id, session_id, false)
    }

    fn admit_as(
        self: &Arc<Self>,
        user_id: &str,
        session_id: &str,
        connection: bool,
    ) -> Result<LiveSlot, Refused> {
        let mut live = self.lock();
        let max = self.settings.max_connections;
        if connection && max != 0 && live.connections >= max {
            drop(live);
            self.counters.refused(Refused::Connections);
            return Err(Refused::Connections);
        }
        let per_user = self.settings.max_sessions_per_user;
        let sessions = live.users.entry(user_id.to_owned()).or_default();
        if per_user != 0 && !sessions.contains_key(session_id) && sessions.len() >= per_user {
            drop(live);
            self.counters.refused(Refused::UserSessions);
            return Err(Refused::UserSessions);
        }
        *sessions.entry(session_id.to_owned()).or_default() += 1;
        if connection {
            live.connections += 1;
        }
        Ok(LiveSlot {
            limits: self.clone(),
            user_id: user_id.to_owned(),
            session_id: session_id.to_owned(),
            connection,
        })
    }

    /// Counts a request of `client` in flight until the returned slot drops, or refuses it when
    /// the address has its most (loopback addresses are not limited, as for the rate).
    pub fn begin_request(self: &Arc<Self>, client: IpAddr) -> Result<RequestSlot, Refused> {
        let max = self.settings.max_requests_in_flight;
        if max == 0 || client.is_loopback() {
            return Ok(RequestSlot { counted: None });
        }
        let key = rate_key(client);
        let mut in_flight = self.in_flight.lock_or_recover();
        let count = in_flight.entry(key).or_default();
        if *count >= max {
            drop(in_flight);
            self.counters.refused(Refused::InFlight);
            return Err(Refused::InFlight);
        }
        *count += 1;
        Ok(RequestSlot {
            counted: Some((self.clone(), key)),
        })
    }

    /// WebSocket connections open now.
    pub fn live_connections(&self) -> usize {
        self.lock().connections
    }

    /// Counts a request (a new connection's first, or any after it) from `client`; false when the
    /// address is over its rate. Loopback addresses are never limited: they are local tools, load
    /// tests, or a proxy on the same host (declare it in `--trusted-proxies` so its clients are
    /// told apart).
    pub fn allow_request(&self, client: IpAddr) -> bool {
        let Some(rate) = &self.rate else {
            return true;
        };
        if client.is_loopback() {
            return true;
        }
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            rate.retain_recent();
            rate.shrink_to_fit();
        }
        let allowed = rate.check_key(&rate_key(client)).is_ok();
        if !allowed {
            self.counters.refused(Refused::Rate);
        }
        allowed
    }

    /// The client's address: the peer's, or, when the peer is a trusted proxy, the last address
    /// in `X-Forwarded-For` that is not itself a trusted proxy (earlier entries are whatever the
    /// client chose to send).
    pub fn client_addr(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer);
        if !self.is_trusted(peer) {
            return peer;
        }
        let mut client = peer;
        for value in headers.get_all("x-forwarded-for").iter().rev() {
            let Ok(value) = value.to_str() else {
                return client;
            };
            for entry in value.rsplit(',') {
                let Some(addr) = parse_forwarded(entry) else {
                    return client;
                };
                client = addr;
                if !self.is_trusted(addr) {
                    return addr;
                }
            }
        }
        client
    }

    fn is_trusted(&self, addr: IpAddr) -> bool {
        self.settings
            .trusted_proxies
            .iter()
            .any(|net| net.contains(&addr))
    }
}

/// The bucket an address counts against: itself, or for IPv6 its /64, which one subscriber
/// usually holds whole (counting single addresses would give them 2^64 buckets).
fn rate_key(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(std::net::Ipv6Addr::from(bits))
        }
        v4 => v4,
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is, so one CIDR list covers both.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// One `X-Forwarded-For` entry: an address, possibly with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_forwarded(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    if let Ok(addr) = entry.parse::<IpAddr>() {
        return Some(canonical(addr));
    }
    entry
        .parse::<std::net::SocketAddr>()
        .ok()
        .map(|a| canonical(a.ip()))
}

/// Per-connection time limits (`None`: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionLimits {
    /// Close a connection whose client sent no frame for this long.
    pub idle: Option<Duration>,
    /// Close a connection this long after it opened.
    pub max_duration: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(settings: LimitSettings) -> Arc<Limits> {
        Arc::new(Limits::new(settings, LimitCounters::default()))
    }

    fn xff(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", value.parse().unwrap());
        headers
    }

    #[test]
    fn forwarded_addresses_count_only_from_trusted_proxies() {
        let l = limits(LimitSettings {
            trusted_proxies: vec!["10.0.0.0/8".parse().unwrap()],
            ..LimitSettings::default()
        });
        let proxy: IpAddr = "10.1.2.3".parse().unwrap();
        let stranger: IpAddr = "198.51.100.1".parse().unwrap();
        let client: IpAddr = "203.0.113.7".parse().unwrap();
        assert_eq!(l.client_addr(stranger, &xff("203.0.113.7")), stranger);
        assert_eq!(l.client_addr(proxy, &xff("203.0.113.7")), client);
        // A client's own forged entries sit left of what the proxies appended.
        assert_eq!(
            l.client_addr(proxy, &xff("1.1.1.1, 203.0.113.7, 10.9.9.9")),
            client
        );
        assert_eq!(l.client_addr(proxy, &xff("garbage")), proxy);
        assert_eq!(l.client_addr(proxy, &HeaderMap::new()), proxy);
        assert_eq!(l.client_addr(proxy, &xff("[2001:db8::1]:443")), {
            "2001:db8::1".parse::<IpAddr>().unwrap()
        });
    }

    #[test]
    fn caps_count_sessions_per_user_and_connections_in_total() {
        let l = limits(LimitSettings {
            max_connections: 3,
            max_sessions_per_user: 2,
            ..LimitSettings::default()
        });
        let a = l.admit("u", "s1").unwrap();
        let b = l.admit("u", "s2").unwrap();
        assert_eq!(l.admit("u", "s3").unwrap_err(), Refused::UserSessions);
        // Taking over a live session is not another session.
        let _c = l.admit("u", "s1").unwrap();
        assert_eq!(l.admit("v", "s1").unwrap_err(), Refused::Connections);
        drop(a);
        let _d = l.admit("v", "s1").unwrap();
        assert_eq!(l.live_connections(), 3);
        // A turn-based run counts as the user's live session, not as a connection.
        drop(b);
        let run = l.admit_run("u", "s9").unwrap();
        assert_eq!(l.admit_run("u", "s10").unwrap_err(), Refused::UserSessions);
        assert_eq!(l.live_connections(), 2);
        drop(run);
    }

    #[test]
    fn requests_in_flight_are_capped_per_address_but_never_loopback() {
        let l = limits(LimitSettings {
            max_requests_in_flight: 2,
            ..LimitSettings::default()
        });
        let a: IpAddr = "203.0.113.7".parse().unwrap();
        let first = l.begin_request(a).unwrap();
        let _second = l.begin_request(a).unwrap();
        assert_eq!(l.begin_request(a).unwrap_err(), Refused::InFlight);
        assert!(l.begin_request("203.0.113.8".parse().unwrap()).is_ok());
        drop(first);
        assert!(l.begin_request(a).is_ok(), "a finished request makes room");
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let held: Vec<_> = (0..10).map(|_| l.begin_request(local).unwrap()).collect();
        assert_eq!(held.len(), 10);
    }

    #[test]
    fn the_rate_limits_each_address_but_never_loopback() {
        let l = limits(LimitSettings {
            connections_per_second: 1,
            ..LimitSettings::default()
        });
        let a: IpAddr = "203.0.113.7".parse().unwrap();
        let b: IpAddr = "203.0.113.8".parse().unwrap();
        assert!(l.allow_request(a) && l.allow_request(a));
        assert!(!l.allow_request(a), "a burst of twice the rate");
        assert!(l.allow_request(b));
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        assert!((0..100).all(|_| l.allow_request(local)));
        // One IPv6 /64 is one bucket.
        let v6 = |a: &str| a.parse::<IpAddr>().unwrap();
        assert!(l.allow_request(v6("2001:db8::1")));
        assert!(l.allow_request(v6("2001:db8::2")));
        assert!(!l.allow_request(v6("2001:db8::3")));
        assert!(l.allow_request(v6("2001:db8:0:1::1")));
    }
}
