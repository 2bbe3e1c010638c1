//! Which web pages may talk to the gateway: same-origin pages and the operator's allowed origins
//! (`--allowed-origins`, exact or `https://*.example.com`), and which `Host` names a loopback
//! gateway without auth answers (loopback ones only, so DNS rebinding cannot reach it).

use std::net::IpAddr;

/// Most allowed origins (a handful is typical; the list is scanned per request).
const MAX_ORIGINS: usize = 64;

/// An origin as a browser sends it: scheme, host, port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    /// Parses `scheme://host[:port]` (no path, query or credentials), lower-casing the scheme
    /// and host and filling in the scheme's default port.
    fn parse(text: &str) -> Option<Origin> {
        let (scheme, rest) = text.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme.is_empty() || rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
            return None;
        }
        let (host, port) = split_host_port(rest)?;
        let port = match port {
            Some(port) => port,
            None => default_port(&scheme)?,
        };
        Some(Origin {
            scheme,
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    }
}

/// Splits `host[:port]` (IPv6 literals in brackets, kept with their brackets).
fn split_host_port(text: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if text.starts_with('[') {
        let end = text.find(']')?;
        let (host, rest) = text.split_at(end + 1);
        match rest {
            "" => (host, None),
            _ => (host, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = port.map(str::parse).transpose().ok()?;
    Some((host, port))
}

/// One entry of `--allowed-origins`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Allowed {
    Exact(Origin),
    /// `scheme://*.suffix[:port]`: any host strictly below `suffix`.
    Subdomains(Origin),
}

/// The operator's allowed origins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedOrigins {
    allowed: Vec<Allowed>,
}

/// Why a list of allowed origins was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidOrigins {
    /// Not an origin, or a wildcard other than a leading `*.`.
    #[error(
        "invalid allowed origin {0:?} (e.g. https://app.example.com or https://*.example.com)"
    )]
    Origin(String),
    /// More origins than the gateway keeps.
    #[error("more than {MAX_ORIGINS} allowed origins")]
    TooMany,
}

impl AllowedOrigins {
    /// Parses a comma-separated list of origins (`https://app.example.com`,
    /// `https://*.example.com`, `http://localhost:3000`).
    pub fn parse(list: &str) -> Result<Self, InvalidOrigins> {
        let mut allowed = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let entry = entry.trim_end_matches('/');
            let invalid = || InvalidOrigins::Origin(entry.to_owned());
            let origin = Origin::parse(entry).ok_or_else(invalid)?;
            let parsed = match origin.host.strip_prefix("*.") {
                Some(suffix) if !suffix.is_empty() && !suffix.contains('*') => {
                    Allowed::Subdomains(Origin {
                        host: suffix.to_owned(),
                        ..origin
                    })
                }
                Some(_) => return Err(invalid()),
                None if origin.host.contains('*') => return Err(invalid()),
                None => Allowed::Exact(origin),
            };
            if allowed.len() == MAX_ORIGINS {
                return Err(InvalidOrigins::TooMany);
            }
            allowed.push(parsed);
        }
        Ok(AllowedOrigins { allowed })
    }

    /// True with no allowed origins.
    pub fn is_empty(&self) -> bool {
        self.allowed.is_empty()
    }

    /// True when `origin` (an `Origin` header's value) is one of the allowed origins.
    pub fn allows(&self, origin: &str) -> bool {
        let Some(origin) = Origin::parse(origin) else {
            return false;
        };
        self.allowed.iter().any(|allowed| match allowed {
            Allowed::Exact(exact) => *exact == origin,
            Allowed::Subdomains(base) => {
                base.scheme == origin.scheme
                    && base.port == origin.port
                    && origin
                        .host
                        .strip_suffix(base.host.as_str())
                        .is_some_and(|label| label.len() > 1 && label.ends_with('.'))
            }
        })
    }
}

/// True when `origin` names the same host and port as the request's `Host` header. A `Host`
/// without a port takes the origin scheme's default (a TLS proxy in front forwards `Host` as the
/// browser sent it).
pub fn same_origin(origin: &str, host: &str) -> bool {
    let Some(origin) = Origin::parse(origin) else {
        return false;
    };
    let Some((host, port)) = split_host_port(host) else {
        return false;
    };
    host.eq_ignore_ascii_case(&origin.host) && port.unwrap_or(origin.port) == origin.port
}

/// True when a `Host` header names this machine's loopback: `localhost`, `*.localhost`,
/// `127.0.0.0/8` or `[::1]`, with any port.
pub fn is_loopback_host(host: &str) -> bool {
    let Some((name, _)) = split_host_port(host) else {
        return false;
    };
    let name = name.to_ascii_lowercase();
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return ip.is_loopback();
    }
    name == "localhost" || name.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_origin_compares_host_and_port() {
        assert!(same_origin("http://127.0.0.1:8080", "127.0.0.1:8080"));
        assert!(same_origin("https://Chat.Example.com", "chat.example.com"));
        assert!(same_origin(
            "https://chat.example.com",
            "chat.example.com:443"
        ));
        assert!(same_origin("http://[::1]:9000", "[::1]:9000"));
        assert!(!same_origin("http://127.0.0.1:8081", "127.0.0.1:8080"));
        assert!(!same_origin("https://evil.example", "127.0.0.1:8080"));
        assert!(!same_origin(
            "http://chat.example.com",
            "chat.example.com:8080"
        ));
        assert!(!same_origin("null", "127.0.0.1:8080"));
        assert!(!same_origin("http://127.0.0.1:8080/x", "127.0.0.1:8080"));
    }

    #[test]
    fn allowed_origins_match_exactly_or_by_subdomain() {
        let allowed = AllowedOrigins::parse(
            "https://app.example.com, https://*.example.org, http://localhost:3000/",
        )
        .unwrap();
        assert!(allowed.allows("https://app.example.com"));
        assert!(allowed.allows("https://app.example.com:443"));
        assert!(allowed.allows("http://localhost:3000"));
        assert!(allowed.allows("https://a.b.example.org"));
        assert!(
            !allowed.allows("https://example.org"),
            "the bare domain is not a subdomain"
        );
        assert!(!allowed.allows("https://evilexample.org"));
        assert!(!allowed.allows("http://a.example.org"), "scheme matters");
        assert!(
            !allowed.allows("https://app.example.com:8443"),
            "port matters"
        );
        assert!(!allowed.allows("http://localhost:3001"));
        assert!(!allowed.allows("null"));
        for bad in [
            "example.com",
            "https://*",
            "https://a.*.com",
            "ftp://x",
            "https://a/b",
        ] {
            assert!(AllowedOrigins::parse(bad).is_err(), "{bad}");
        }
        assert!(AllowedOrigins::parse("").unwrap().is_empty());
    }

    #[test]
    fn loopback_hosts_are_names_and_addresses_of_this_machine() {
        for host in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "127.9.9.9",
            "[::1]:80",
            "app.localhost",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "10.0.0.1",
            "localhost.evil.example",
            "",
            "[::2]",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }
}
