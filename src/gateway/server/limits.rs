//! Admission limits for live connections: a cap on WebSocket connections in total, a cap on the
//! live sessions of one user, and a per-address rate of new connections, each answered before
//! the upgrade. Also where a request's client address comes from (`X-Forwarded-For` only when
//! the peer is a trusted proxy).

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::http::HeaderMap;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use ipnet::IpNet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

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
    /// The address opened too many connections in the last second (429).
    Rate,
}

impl Refused {
    /// The `reason` label in `livegate_limit_refusals_total`.
    pub fn label(self) -> &'static str {
        match self {
            Refused::Connections => "connections",
            Refused::UserSessions => "user_sessions",
            Refused::Rate => "rate",
        }
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
            "Requests refused by a limit before any work, by reason (connections, user_sessions, rate)",
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
}

impl Drop for LiveSlot {
    fn drop(&mut self) {
        let mut live = self.limits.lock();
        live.connections = live.connections.saturating_sub(1);
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
            rate,
            checks: AtomicU64::new(0),
            counters,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        // Every change below is a whole counter update; a panic elsewhere cannot tear one.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a live connection to a session, or says which cap it is over. A connection that
    /// takes over a session the user already has live does not count as another session.
    pub fn admit(self: &Arc<Self>, user_id: &str, session_id: &str) -> Result<LiveSlot, Refused> {
        let mut live = self.lock();
        let max = self.settings.max_connections;
        if max != 0 && live.connections >= max {
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
        live.connections += 1;
        Ok(LiveSlot {
            limits: self.clone(),
            user_id: user_id.to_owned(),
            session_id: session_id.to_owned(),
        })
    }

    /// WebSocket connections open now.
    pub fn live_connections(&self) -> usize {
        self.lock().connections
    }

    /// Counts a new connection from `client`; false when the address is over its rate. Loopback
    /// addresses are never limited: they are local tools, load tests, or a proxy on the same host
    /// (declare it in `--trusted-proxies` so its clients are told apart).
    pub fn allow_new_connection(&self, client: IpAddr) -> bool {
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
        let _b = l.admit("u", "s2").unwrap();
        assert_eq!(l.admit("u", "s3").unwrap_err(), Refused::UserSessions);
        // Taking over a live session is not another session.
        let _c = l.admit("u", "s1").unwrap();
        assert_eq!(l.admit("v", "s1").unwrap_err(), Refused::Connections);
        drop(a);
        let _d = l.admit("v", "s1").unwrap();
        assert_eq!(l.live_connections(), 3);
    }

    #[test]
    fn the_rate_limits_each_address_but_never_loopback() {
        let l = limits(LimitSettings {
            connections_per_second: 1,
            ..LimitSettings::default()
        });
        let a: IpAddr = "203.0.113.7".parse().unwrap();
        let b: IpAddr = "203.0.113.8".parse().unwrap();
        assert!(l.allow_new_connection(a) && l.allow_new_connection(a));
        assert!(!l.allow_new_connection(a), "a burst of twice the rate");
        assert!(l.allow_new_connection(b));
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        assert!((0..100).all(|_| l.allow_new_connection(local)));
        // One IPv6 /64 is one bucket.
        let v6 = |a: &str| a.parse::<IpAddr>().unwrap();
        assert!(l.allow_new_connection(v6("2001:db8::1")));
        assert!(l.allow_new_connection(v6("2001:db8::2")));
        assert!(!l.allow_new_connection(v6("2001:db8::3")));
        assert!(l.allow_new_connection(v6("2001:db8:0:1::1")));
    }
}
