//! Who may do what: the one place requests to the WebSocket, the REST API and the run routes are
//! authenticated (operator API keys, client tokens), checked for a browser's origin, and given a
//! [`Principal`] that the handlers ask before touching a user's data.
//!
//! With `--auth none` (the default on a loopback bind only) every caller is [`Principal::Anonymous`]
//! and may do everything, but only through a loopback `Host`, so a web page that rebinds its DNS
//! name to 127.0.0.1 cannot reach the gateway.

pub mod keys;
pub mod origin;
pub mod token;

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use clap::ValueEnum;
use serde_json::{json, Map, Value};

pub use crate::model::gemini::Secret;
pub use keys::{ApiKeys, InvalidKeys};
pub use origin::{AllowedOrigins, InvalidOrigins};
pub use token::{Grant, IdentityProvider, KeyError, Minter, TokenError, Verifier};

use super::ids::PathId;

/// The WebSocket subprotocol of this gateway's protocol; echoed when a client offers it.
pub const SUBPROTOCOL: &str = "livegate.v1";
/// The prefix of the subprotocol entry that carries a token (browsers cannot set headers on a
/// WebSocket).
pub const BEARER_PROTOCOL_PREFIX: &str = "livegate.bearer.";
/// Environment variable holding the HS256 secret for client tokens.
pub const TOKEN_SECRET_ENV: &str = "LIVEGATE_TOKEN_SECRET";
/// Environment variable holding operator API keys (comma- or newline-separated).
pub const API_KEYS_ENV: &str = "LIVEGATE_API_KEYS";

/// Whether requests must authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// Anyone who reaches the port may do everything (loopback only, unless `--allow-anonymous`).
    None,
    /// Operator API keys and client tokens.
    Token,
}

/// The secrets auth reads from the environment or files, never from flags (a flag's value shows
/// in `ps`). Kept apart from the flags so they never reach a log line.
#[derive(Debug, Clone, Default)]
pub struct AuthSecrets {
    /// The HS256 secret client tokens are minted and verified with.
    pub token_secret: Option<Secret>,
    /// Operator API keys as a comma- or newline-separated list.
    pub api_keys: Option<Secret>,
}

impl AuthSecrets {
    /// `LIVEGATE_TOKEN_SECRET` and `LIVEGATE_API_KEYS`, when set and not blank.
    pub fn from_env() -> Self {
        let env = secret_from_env;
        AuthSecrets {
            token_secret: env(TOKEN_SECRET_ENV),
            api_keys: env(API_KEYS_ENV),
        }
    }
}

/// An environment variable as a secret, when it is set and not blank.
pub fn secret_from_env(name: &str) -> Option<Secret> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(Secret::new)
}

/// What auth is built from (the `serve` options that concern it).
#[derive(Debug, Clone)]
pub struct AuthOptions<'a> {
    /// The listen address.
    pub bind: SocketAddr,
    /// `--auth`, if given.
    pub mode: Option<AuthMode>,
    /// `--allow-anonymous`.
    pub allow_anonymous: bool,
    /// `--api-keys-file`.
    pub api_keys_file: Option<&'a PathBuf>,
    /// `--auth-public-key`, `--auth-issuer`, `--auth-audience`.
    pub provider: Option<IdentityProvider>,
    /// `--allowed-origins`.
    pub allowed_origins: Option<&'a str>,
    /// The secrets.
    pub secrets: &'a AuthSecrets,
}

/// Why the gateway must not start with its auth settings.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No authentication on an address others can reach, and anonymous use not allowed.
    #[error(
        "refusing to serve {0} without authentication: set --auth token (LIVEGATE_AUTH=token) \
         with operator keys (--api-keys-file or LIVEGATE_API_KEYS) and LIVEGATE_TOKEN_SECRET \
         (or --auth-public-key), bind a loopback address, or pass --allow-anonymous to let anyone \
         who reaches {0} use it"
    )]
    AnonymousRefused(SocketAddr),
    /// `LIVEGATE_API_KEYS` holds a bad key.
    #[error("{API_KEYS_ENV}: {0}")]
    Keys(InvalidKeys),
    /// The API keys file cannot be read.
    #[error("cannot read --api-keys-file {}: {source}", path.display())]
    ReadKeysFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The API keys file holds a bad key.
    #[error("--api-keys-file {}: {source}", path.display())]
    KeysFile {
        /// The file.
        path: PathBuf,
        /// The key that is wrong.
        source: InvalidKeys,
    },
    /// The token secret or the identity provider's key cannot be used.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// `--auth token` with nothing to check a request against.
    #[error(
        "--auth token needs operator API keys (--api-keys-file or LIVEGATE_API_KEYS), \
         LIVEGATE_TOKEN_SECRET, or --auth-public-key"
    )]
    NoCredentials,
    /// A bad allowed origin.
    #[error("--allowed-origins: {0}")]
    Origins(InvalidOrigins),
}

/// The gateway's auth settings.
#[derive(Debug)]
pub struct Auth {
    mode: AuthMode,
    keys: ApiKeys,
    verifier: Verifier,
    pub(crate) minter: Option<Minter>,
    origins: AllowedOrigins,
    /// `--auth none` on loopback: only loopback `Host` names are answered.
    pub(crate) loopback_hosts_only: bool,
}

impl Auth {
    /// Auth as configured, or why the gateway must not start with it.
    pub fn new(options: &AuthOptions<'_>) -> Result<Self, AuthError> {
        let loopback = options.bind.ip().is_loopback();
        let mode = match (options.mode, loopback, options.allow_anonymous) {
            (Some(AuthMode::None), false, false) => {
                return Err(AuthError::AnonymousRefused(options.bind))
            }
            (Some(mode), _, _) => mode,
            (None, true, _) | (None, false, true) => AuthMode::None,
            (None, false, false) => AuthMode::Token,
        };
        let mut keys = match &options.secrets.api_keys {
            Some(list) => ApiKeys::parse(list).map_err(AuthError::Keys)?,
            None => ApiKeys::default(),
        };
        if let Some(path) = options.api_keys_file {
            let text = std::fs::read_to_string(path).map_err(|source| AuthError::ReadKeysFile {
                path: path.clone(),
                source,
            })?;
            keys.extend(ApiKeys::parse(&Secret::new(text)).map_err(|source| {
                AuthError::KeysFile {
                    path: path.clone(),
                    source,
                }
            })?);
        }
        let secret = options.secrets.token_secret.as_ref();
        let verifier = Verifier::new(secret, options.provider.as_ref())?;
        let minter = secret.map(Minter::new).transpose()?;
        if mode == AuthMode::Token && keys.is_empty() && verifier.is_empty() {
            return Err(if options.mode.is_none() {
                AuthError::AnonymousRefused(options.bind)
            } else {
                AuthError::NoCredentials
            });
        }
        let origins = AllowedOrigins::parse(options.allowed_origins.unwrap_or_default())
            .map_err(AuthError::Origins)?;
        Ok(Auth {
            mode,
            keys,
            verifier,
            minter,
            origins,
            loopback_hosts_only: mode == AuthMode::None && loopback,
        })
    }

    /// Whether requests must authenticate.
    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// The allowed origins (for CORS).
    pub fn allowed_origins(&self) -> &AllowedOrigins {
        &self.origins
    }

    /// Verifies a client token presented some other way than a header (a call's stream token,
    /// in its URL's path).
    pub fn verify_token(&self, token: &str) -> Result<Grant, TokenError> {
        self.verifier.verify(token)
    }

    /// A token for `user`'s session `session` living `ttl`, if this gateway mints tokens
    /// (`LIVEGATE_TOKEN_SECRET`).
    pub fn mint_for_session(
        &self,
        user: &str,
        session: &str,
        ttl: std::time::Duration,
    ) -> Option<Result<token::Minted, token::MintError>> {
        let minter = self.minter.as_ref()?;
        Some(minter.mint(user, Some(session), Some(ttl)))
    }

    /// True when `request`'s bearer credential is an operator API key.
    pub(crate) fn is_operator(&self, headers: &HeaderMap) -> bool {
        bearer(headers).is_some_and(|key| self.keys.matches(key))
    }

    /// Who is asking, or why the request is refused before it reaches a handler.
    pub(crate) fn authenticate(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<Principal, Denied> {
        let upgrade = is_websocket_upgrade(headers);
        // A browser says where the page that sends a request comes from; pages of other sites
        // must not open sockets or change anything with the user's credentials or network.
        if upgrade || !method.is_safe() {
            if let Some(origin) = headers.get(header::ORIGIN) {
                let origin = origin.to_str().unwrap_or_default();
                let host = host_of(headers, uri).unwrap_or_default();
                if !origin::same_origin(origin, host) && !self.origins.allows(origin) {
                    return Err(Denied::new(
                        StatusCode::FORBIDDEN,
                        "origin",
                        "this page's origin may not use the gateway (see --allowed-origins)",
                    ));
                }
            }
        }
        let offered = if upgrade {
            offered_bearer(headers)?
        } else {
            None
        };
        if self.mode == AuthMode::None {
            return Ok(Principal::Anonymous);
        }
        // `?token=` only where a browser cannot send a header: a WebSocket, and the GETs behind
        // `<audio src>` and download links.
        let query = (upgrade || method == Method::GET || method == Method::HEAD)
            .then(|| query_token(uri))
            .flatten();
        let sent = bearer(headers).or(offered);
        let credential = sent.or(query.as_deref());
        let Some(credential) = credential else {
            return Err(Denied::new(
                StatusCode::UNAUTHORIZED,
                "missing",
                "authentication required: send Authorization: Bearer <token>",
            ));
        };
        if self.keys.matches(credential) {
            // An operator key reaches everything and lives long: in a URL it would end up in
            // proxies' logs and browser histories. Only a recording's download link may carry one.
            if sent.is_none() && !is_recording_download(uri.path()) {
                return Err(Denied::new(
                    StatusCode::UNAUTHORIZED,
                    "key_in_query",
                    "operator API keys go in Authorization: Bearer, not in the URL",
                ));
            }
            return Ok(Principal::Operator);
        }
        self.verifier
            .verify(credential)
            .map(Principal::Client)
            .map_err(|e| Denied::new(StatusCode::UNAUTHORIZED, e.reason(), e.to_string()))
    }
}

/// Who a request speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// `--auth none`: anyone, with every right.
    Anonymous,
    /// An operator API key: every right, including minting tokens.
    Operator,
    /// A client token: its own user's data only (one session, if bound).
    Client(Grant),
}

impl Principal {
    /// The user a client token is limited to.
    pub fn user(&self) -> Option<&PathId> {
        match self {
            Principal::Client(grant) => Some(&grant.user),
            _ => None,
        }
    }

    /// Every claim of a client token.
    pub fn claims(&self) -> Option<std::sync::Arc<Map<String, Value>>> {
        match self {
            Principal::Client(grant) => Some(grant.claims.clone()),
            _ => None,
        }
    }

    /// The session a session-bound client token is limited to.
    pub fn session(&self) -> Option<&PathId> {
        match self {
            Principal::Client(grant) => grant.session.as_ref(),
            _ => None,
        }
    }

    /// May this principal act for `user` at all (list, create)?
    pub fn check_user(&self, user: &str) -> Result<(), Denied> {
        match self.user() {
            Some(own) if own.as_str() != user => Err(Denied::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "this token is for another user",
            )),
            _ => Ok(()),
        }
    }

    /// May this principal reach `user`'s session `session`?
    pub fn check_session(&self, user: &str, session: &str) -> Result<(), Denied> {
        self.check_user(user)?;
        match self.session() {
            Some(bound) if bound.as_str() != session => Err(Denied::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "this token is for another session",
            )),
            _ => Ok(()),
        }
    }

    /// May this principal write `state` into a session of its own user? `app:` keys are shared by
    /// every user of the app, so only the operator writes them. `user:` keys are shared by every
    /// session of the user: a token bound to one session reaches that session only, so it may
    /// not write them (it may read them, as they show in its session's state).
    pub fn check_state(&self, state: &Map<String, Value>) -> Result<(), Denied> {
        let Principal::Client(grant) = self else {
            return Ok(());
        };
        if state.keys().any(|k| k.starts_with("app:")) {
            return Err(Denied::new(
                StatusCode::FORBIDDEN,
                "app_state",
                "clients may not write app: state",
            ));
        }
        if grant.session.is_some() && state.keys().any(|k| k.starts_with("user:")) {
            return Err(Denied::new(
                StatusCode::FORBIDDEN,
                "user_state",
                "a token bound to one session may not write user: state, which the user's other sessions share",
            ));
        }
        Ok(())
    }
}

/// A refused request: 401 or 403 with `{"error": …}`, counted under `reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    status: StatusCode,
    reason: &'static str,
    message: String,
}

/// Marks a response as an auth refusal, so the middleware counts it wherever it was decided.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AuthFailure(pub(crate) &'static str);

impl Denied {
    pub(crate) fn new(
        status: StatusCode,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Denied {
            status,
            reason,
            message: message.into(),
        }
    }

    /// The status it is answered with.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(json!({ "error": self.message }))).into_response();
        response.extensions_mut().insert(AuthFailure(self.reason));
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// May this caller read `/metrics`? Loopback callers and operator keys may; a request relayed by
/// a proxy (which connects from loopback on everyone's behalf) counts as not loopback.
pub fn metrics_allowed(peer: Option<SocketAddr>, headers: &HeaderMap, operator: bool) -> bool {
    let relayed = ["x-forwarded-for", "forwarded", "x-real-ip"]
        .iter()
        .any(|name| headers.contains_key(*name));
    operator || (!relayed && peer.is_some_and(|peer| peer.ip().to_canonical().is_loopback()))
}

/// True for a WebSocket upgrade request.
fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// The request's host: the `Host` header, or the URI's authority (HTTP/2).
pub(crate) fn host_of<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> Option<&'a str> {
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
}

/// The credential of `Authorization: Bearer X`.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, credential) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credential.trim())
        .filter(|c| !c.is_empty())
}

/// The token a WebSocket client offers as a `livegate.bearer.<token>` subprotocol. Such a client
/// must offer `livegate.v1` too: the server may only echo a protocol the client offered, and the
/// token is never echoed.
fn offered_bearer(headers: &HeaderMap) -> Result<Option<&str>, Denied> {
    let mut token = None;
    let mut v1 = false;
    for value in headers.get_all(header::SEC_WEBSOCKET_PROTOCOL) {
        let Ok(value) = value.to_str() else {
            continue;
        };
        for protocol in value.split(',').map(str::trim) {
            if protocol == SUBPROTOCOL {
                v1 = true;
            } else if let Some(t) = protocol.strip_prefix(BEARER_PROTOCOL_PREFIX) {
                token = Some(t);
            }
        }
    }
    if token.is_some() && !v1 {
        return Err(Denied::new(
            StatusCode::UNAUTHORIZED,
            "malformed",
            format!("offer the {SUBPROTOCOL} subprotocol beside {BEARER_PROTOCOL_PREFIX}<token>"),
        ));
    }
    Ok(token)
}

/// True for `GET /api/sessions/{user}/{session}/artifacts/{name}`: a recording's download, the
/// one place a link (`<audio src>`, a download) may carry an operator key.
fn is_recording_download(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').collect();
    matches!(
        segments.as_slice(),
        ["", "api", "sessions", user, session, "artifacts", name]
            if !user.is_empty() && !session.is_empty() && !name.is_empty()
    )
}

/// The `token` parameter of the query string.
fn query_token(uri: &Uri) -> Option<String> {
    let query = uri.query()?;
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        (name == "token" && !value.is_empty()).then(|| value.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn metrics_go_to_loopback_and_operators_only() {
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5000".parse().unwrap();
        let remote: SocketAddr = "203.0.113.7:5000".parse().unwrap();
        let none = HeaderMap::new();
        assert!(metrics_allowed(Some(local), &none, false));
        assert!(metrics_allowed(Some(mapped), &none, false));
        assert!(!metrics_allowed(Some(remote), &none, false));
        assert!(!metrics_allowed(None, &none, false));
        assert!(metrics_allowed(Some(remote), &none, true));
        let proxied = headers(&[("x-forwarded-for", "203.0.113.7")]);
        assert!(!metrics_allowed(Some(local), &proxied, false));
    }

    #[test]
    fn credentials_come_from_the_header_the_subprotocol_or_the_query() {
        assert_eq!(
            bearer(&headers(&[("authorization", "Bearer abc")])),
            Some("abc")
        );
        assert_eq!(
            bearer(&headers(&[("authorization", "bearer  abc ")])),
            Some("abc")
        );
        assert_eq!(bearer(&headers(&[("authorization", "Basic abc")])), None);
        let offered = headers(&[("sec-websocket-protocol", "livegate.v1, livegate.bearer.t0k")]);
        assert_eq!(offered_bearer(&offered), Ok(Some("t0k")));
        let alone = headers(&[("sec-websocket-protocol", "livegate.bearer.t0k")]);
        assert!(offered_bearer(&alone).is_err());
        assert!(is_recording_download("/api/sessions/u/s/artifacts/a.pcm"));
        assert!(!is_recording_download("/api/sessions/u/s/artifacts"));
        assert!(!is_recording_download("/api/sessions/u/s"));
        let uri: Uri = "/ws/u/s?audio=pcm&token=abc.def&x=1".parse().unwrap();
        assert_eq!(query_token(&uri).as_deref(), Some("abc.def"));
        assert_eq!(query_token(&"/ws/u/s?tokens=1".parse().unwrap()), None);
    }

    #[test]
    fn clients_reach_their_own_user_and_bound_session_only() {
        let grant = |session: Option<&str>| {
            Principal::Client(Grant {
                user: PathId::parse("user", "alice").unwrap(),
                session: session.map(|s| PathId::parse("session", s).unwrap()),
                claims: Default::default(),
            })
        };
        let alice = grant(None);
        assert!(alice.check_session("alice", "any").is_ok());
        assert_eq!(
            alice.check_session("bob", "any").unwrap_err().status(),
            StatusCode::FORBIDDEN
        );
        let bound = grant(Some("s1"));
        assert!(bound.check_session("alice", "s1").is_ok());
        assert!(bound.check_session("alice", "s2").is_err());
        assert!(Principal::Operator.check_session("bob", "s").is_ok());
        let mut state = Map::new();
        state.insert("user:name".into(), json!("A"));
        assert!(alice.check_state(&state).is_ok());
        assert_eq!(
            bound.check_state(&state).unwrap_err().reason,
            "user_state",
            "user: state is shared by the user's other sessions"
        );
        state.insert("app:flag".into(), json!(true));
        assert!(alice.check_state(&state).is_err());
        assert!(Principal::Operator.check_state(&state).is_ok());
        assert!(Principal::Anonymous.check_state(&state).is_ok());
    }

    fn options<'a>(
        bind: &str,
        mode: Option<AuthMode>,
        secrets: &'a AuthSecrets,
    ) -> AuthOptions<'a> {
        AuthOptions {
            bind: bind.parse().unwrap(),
            mode,
            allow_anonymous: false,
            api_keys_file: None,
            provider: None,
            allowed_origins: None,
            secrets,
        }
    }

    #[test]
    fn anonymous_is_the_default_on_loopback_only() {
        let none = AuthSecrets::default();
        let auth = Auth::new(&options("127.0.0.1:0", None, &none)).unwrap();
        assert_eq!(auth.mode(), AuthMode::None);
        assert!(auth.loopback_hosts_only);
        let error = Auth::new(&options("0.0.0.0:8080", None, &none))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--auth token") && error.contains("--allow-anonymous"),
            "{error}"
        );
        assert!(Auth::new(&options("0.0.0.0:8080", Some(AuthMode::None), &none)).is_err());
        let mut anonymous = options("0.0.0.0:8080", None, &none);
        anonymous.allow_anonymous = true;
        let auth = Auth::new(&anonymous).unwrap();
        assert_eq!(auth.mode(), AuthMode::None);
        assert!(!auth.loopback_hosts_only);
        let secrets = AuthSecrets {
            token_secret: Some(Secret::new("0123456789abcdef0123456789abcdef")),
            api_keys: None,
        };
        let auth = Auth::new(&options("0.0.0.0:8080", None, &secrets)).unwrap();
        assert_eq!(
            auth.mode(),
            AuthMode::Token,
            "token is the default off loopback"
        );
        assert!(Auth::new(&options("127.0.0.1:0", Some(AuthMode::Token), &none)).is_err());
    }
}
