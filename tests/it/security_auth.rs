//! Authentication, authorization and origin checks against the real server over real sockets:
//! what a hostile client or a hostile web page tries, and what each gets.

use std::net::SocketAddr;

use crate::common::*;
use livegate::gateway::auth::{AuthMode, AuthSecrets, Secret};
use livegate::gateway::{self, ServeArgs, Server};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

const SECRET: &str = "test-secret-0123456789abcdef-0123456789";
const OPERATOR: &str = "operator-key-0123456789abcdef";

/// A gateway with tokens on: one operator key and the shared secret.
fn token_args() -> ServeArgs {
    let mut args = test_args();
    args.auth = Some(AuthMode::Token);
    args.secrets = AuthSecrets {
        token_secret: Some(Secret::new(SECRET)),
        api_keys: Some(Secret::new(OPERATOR)),
    };
    args
}

/// One HTTP request: method, path, bearer credential (if any), extra headers, JSON body.
async fn call(
    addr: SocketAddr,
    method: reqwest::Method,
    path: &str,
    bearer: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method, format!("http://{addr}{path}"));
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = timeout(WAIT, request.send())
        .await
        .expect("answer in time")
        .expect("request sent");
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get(addr: SocketAddr, path: &str, bearer: Option<&str>) -> (u16, Value) {
    call(addr, reqwest::Method::GET, path, bearer, &[], None).await
}

async fn post(addr: SocketAddr, path: &str, bearer: Option<&str>, body: Value) -> (u16, Value) {
    call(addr, reqwest::Method::POST, path, bearer, &[], Some(body)).await
}

/// A token minted through `POST /api/tokens` with the operator key.
async fn mint(addr: SocketAddr, user: &str, session: Option<&str>) -> String {
    let (status, body) = post(
        addr,
        "/api/tokens",
        Some(OPERATOR),
        json!({"userId": user, "sessionId": session}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().expect("a token").to_owned()
}

/// Creates a session as the operator.
async fn create_session(addr: SocketAddr, user: &str, session: &str) {
    let (status, body) = post(
        addr,
        "/api/sessions",
        Some(OPERATOR),
        json!({"userId": user, "sessionId": session}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

/// The outcome of a WebSocket upgrade: the socket and its agreed subprotocol, or the HTTP status.
async fn upgrade(
    url: &str,
    headers: &[(&str, &str)],
) -> Result<(crate::common::WsStream, Option<String>), u16> {
    let mut request = url.into_client_request().expect("a request");
    for (name, value) in headers {
        let value = HeaderValue::from_str(value).expect("a header value");
        request.headers_mut().insert(
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value,
        );
    }
    let connected = timeout(WAIT, tokio_tungstenite::connect_async(request))
        .await
        .expect("an answer in time");
    match connected {
        Ok((ws, response)) => {
            let protocol = response
                .headers()
                .get("sec-websocket-protocol")
                .map(|v| v.to_str().unwrap_or_default().to_owned());
            Ok((ws, protocol))
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(other) => panic!("upgrade failed without an HTTP answer: {other}"),
    }
}

/// One raw HTTP/1.1 request with exactly these headers; returns the status code.
async fn raw_status(addr: SocketAddr, head: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    let request = format!("{head}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("sent");
    let mut response = Vec::new();
    timeout(WAIT, stream.read_to_end(&mut response))
        .await
        .expect("answer in time")
        .expect("read");
    let text = String::from_utf8_lossy(&response);
    text.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"))
}

/// A text turn on an open socket gets its answer (the connection is alive and usable).
async fn answers(ws: crate::common::WsStream) {
    let mut client = Client::from_stream(ws);
    client.send_text("hello").await;
    client.events_until_turn_complete().await;
    client.close().await;
}

fn run_body(user: &str, session: &str, state: Option<Value>) -> Value {
    json!({
        "appName": "livegate",
        "userId": user,
        "sessionId": session,
        "newMessage": {"role": "user", "parts": [{"text": "hi"}]},
        "stateDelta": state,
    })
}

async fn failures(addr: SocketAddr, reason: &str) -> f64 {
    let metrics = http_get(addr, "/metrics").await;
    metric(
        &metrics,
        &format!("livegate_auth_failures_total{{reason=\"{reason}\"}}"),
    )
    .unwrap_or(0.0)
}

async fn start_token() -> Server {
    start(token_args()).await
}

#[tokio::test]
async fn another_users_sessions_cannot_be_read_deleted_or_taken_over() {
    let server = start_token().await;
    let addr = server.addr;
    create_session(addr, "alice", "s1").await;
    let alice = mint(addr, "alice", None).await;
    let mallory = mint(addr, "mallory", None).await;

    let ws = format!("ws://{addr}/ws/alice/s1");
    let (socket, _) = upgrade(&ws, &[("authorization", &format!("Bearer {alice}"))])
        .await
        .expect("alice connects to her session");
    let before = failures(addr, "forbidden").await;
    assert_eq!(
        get(addr, "/api/sessions/alice/s1", Some(&mallory)).await.0,
        403
    );
    let (status, body) = call(
        addr,
        reqwest::Method::DELETE,
        "/api/sessions/alice/s1",
        Some(&mallory),
        &[],
        None,
    )
    .await;
    assert_eq!(status, 403);
    assert!(body["error"].is_string(), "{body}");
    assert_eq!(
        get(addr, "/api/sessions/alice/s1/artifacts", Some(&mallory))
            .await
            .0,
        403
    );
    let takeover = upgrade(&ws, &[("authorization", &format!("Bearer {mallory}"))]).await;
    assert_eq!(
        takeover.err(),
        Some(403),
        "mallory cannot take the session over"
    );
    assert_eq!(
        post(addr, "/run", Some(&mallory), run_body("alice", "s1", None))
            .await
            .0,
        403
    );
    assert_eq!(failures(addr, "forbidden").await, before + 5.0);
    // Alice's connection was not taken over: it still answers, and her session is still there.
    answers(socket).await;
    assert_eq!(
        get(addr, "/api/sessions/alice/s1", Some(&alice)).await.0,
        200
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_session_bound_token_reaches_that_session_only() {
    let server = start_token().await;
    let addr = server.addr;
    create_session(addr, "alice", "s1").await;
    create_session(addr, "alice", "s2").await;
    let bound = mint(addr, "alice", Some("s1")).await;
    assert_eq!(
        get(addr, "/api/sessions/alice/s1", Some(&bound)).await.0,
        200
    );
    assert_eq!(
        get(addr, "/api/sessions/alice/s2", Some(&bound)).await.0,
        403
    );
    let other = upgrade(&format!("ws://{addr}/ws/alice/s2?token={bound}"), &[]).await;
    assert_eq!(other.err(), Some(403));
    let (status, listed) = get(addr, "/api/sessions", Some(&bound)).await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, ["s1"]);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn listing_returns_the_clients_own_sessions_only() {
    let server = start_token().await;
    let addr = server.addr;
    create_session(addr, "alice", "a1").await;
    create_session(addr, "bob", "b1").await;
    let alice = mint(addr, "alice", None).await;
    let (status, listed) = get(addr, "/api/sessions", Some(&alice)).await;
    assert_eq!(status, 200);
    let users: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["userId"].as_str())
        .collect();
    assert_eq!(users, ["alice"]);
    assert_eq!(
        get(addr, "/api/sessions?user_id=bob", Some(&alice)).await.0,
        403
    );
    let (status, listed) = get(addr, "/api/sessions?user_id=bob", Some(OPERATOR)).await;
    assert_eq!(
        (status, listed["sessions"].as_array().unwrap().len()),
        (200, 1)
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn missing_expired_and_tampered_tokens_are_401() {
    let server = start_token().await;
    let addr = server.addr;
    create_session(addr, "alice", "s1").await;
    let (status, body) = get(addr, "/api/sessions/alice/s1", None).await;
    assert_eq!(status, 401);
    assert!(body["error"].as_str().unwrap().contains("Bearer"), "{body}");
    let ws = format!("ws://{addr}/ws/alice/s1");
    assert_eq!(upgrade(&ws, &[]).await.err(), Some(401));

    // Alice's token with Mallory's token's claims: the signature no longer matches.
    let token = mint(addr, "alice", None).await;
    let mallory = mint(addr, "mallory", None).await;
    let part = |t: &str, i: usize| t.split('.').nth(i).unwrap().to_owned();
    let tampered = format!(
        "{}.{}.{}",
        part(&token, 0),
        part(&mallory, 1),
        part(&token, 2)
    );
    assert_eq!(
        get(addr, "/api/sessions/mallory/s1", Some(&tampered))
            .await
            .0,
        401
    );
    assert_eq!(
        get(addr, "/api/sessions/alice/s1", Some(&tampered)).await.0,
        401
    );
    let protocols = format!("livegate.v1, livegate.bearer.{tampered}");
    assert_eq!(
        upgrade(&ws, &[("sec-websocket-protocol", &protocols)])
            .await
            .err(),
        Some(401)
    );

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let expired = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &json!({"sub": "alice", "iss": "livegate", "iat": now - 7200, "exp": now - 3600}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    let (status, body) = get(addr, "/api/sessions/alice/s1", Some(&expired)).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"], "token expired");
    assert_eq!(
        upgrade(&format!("{ws}?token={expired}"), &[]).await.err(),
        Some(401)
    );
    assert_eq!(
        get(addr, "/api/sessions/alice/s1", Some("garbage")).await.0,
        401
    );

    assert_eq!(failures(addr, "missing").await, 2.0);
    assert_eq!(failures(addr, "bad_signature").await, 3.0);
    assert_eq!(failures(addr, "expired").await, 2.0);
    assert_eq!(failures(addr, "malformed").await, 1.0);
    server.shutdown(WAIT).await;
}

/// A token signed with the shared secret carrying exactly `claims`.
fn signed(claims: Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn tokens_not_valid_yet_or_not_minted_here_are_401() {
    let server = start_token().await;
    let addr = server.addr;
    create_session(addr, "alice", "s1").await;
    let now = now_seconds();
    // Signed with the secret, but not by this gateway: no issuer at all.
    let no_issuer = signed(json!({"sub": "alice", "iat": now, "exp": now + 600}));
    let (status, body) = get(addr, "/api/sessions/alice/s1", Some(&no_issuer)).await;
    assert_eq!(status, 401, "{body}");
    let later = signed(
        json!({"sub": "alice", "iss": "livegate", "iat": now, "nbf": now + 3600, "exp": now + 7200}),
    );
    let (status, body) = get(addr, "/api/sessions/alice/s1", Some(&later)).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"], "token not valid yet");
    let ws = format!("ws://{addr}/ws/alice/s1?token={later}");
    assert_eq!(upgrade(&ws, &[]).await.err(), Some(401));
    let now_valid = signed(
        json!({"sub": "alice", "iss": "livegate", "iat": now, "nbf": now, "exp": now + 600}),
    );
    assert_eq!(
        get(addr, "/api/sessions/alice/s1", Some(&now_valid))
            .await
            .0,
        200
    );
    assert_eq!(failures(addr, "wrong_issuer").await, 1.0);
    assert_eq!(failures(addr, "not_yet_valid").await, 2.0);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_session_bound_token_may_not_write_the_users_shared_state() {
    let server = start_token().await;
    let addr = server.addr;
    create_session(addr, "alice", "s1").await;
    let bound = mint(addr, "alice", Some("s1")).await;
    let user_state = Some(json!({"user:name": "Mallory"}));
    let (status, body) = post(
        addr,
        "/run",
        Some(&bound),
        run_body("alice", "s1", user_state.clone()),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"].as_str().unwrap().contains("user:"), "{body}");
    let created = json!({"userId": "alice", "sessionId": "s9", "state": {"user:name": "Mallory"}});
    let bound_s9 = mint(addr, "alice", Some("s9")).await;
    assert_eq!(
        post(addr, "/api/sessions", Some(&bound_s9), created)
            .await
            .0,
        403
    );
    // Its own session's state it may write, and a token for the whole user may write user: state.
    let own = Some(json!({"topic": "weather"}));
    assert_eq!(
        post(addr, "/run", Some(&bound), run_body("alice", "s1", own))
            .await
            .0,
        200
    );
    let user = mint(addr, "alice", None).await;
    assert_eq!(
        post(
            addr,
            "/run",
            Some(&user),
            run_body("alice", "s1", user_state)
        )
        .await
        .0,
        200
    );
    assert_eq!(failures(addr, "user_state").await, 2.0);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn operator_keys_in_the_url_open_recording_downloads_only() {
    let server = start_token().await;
    let addr = server.addr;
    create_session(addr, "bob", "b1").await;
    let (status, body) = get(
        addr,
        &format!("/api/sessions?user_id=bob&token={OPERATOR}"),
        None,
    )
    .await;
    assert_eq!(status, 401, "{body}");
    let (status, _) = get(
        addr,
        &format!("/api/sessions/bob/b1?token={OPERATOR}"),
        None,
    )
    .await;
    assert_eq!(status, 401);
    let ws = format!("ws://{addr}/ws/bob/b1?token={OPERATOR}");
    assert_eq!(upgrade(&ws, &[]).await.err(), Some(401));
    // A download link may carry it (the recording does not exist: 404, past authentication).
    let download = format!("/api/sessions/bob/b1/artifacts/x.pcm?token={OPERATOR}");
    assert_eq!(get(addr, &download, None).await.0, 404);
    // In the header it reaches everything, as before.
    assert_eq!(
        get(addr, "/api/sessions/bob/b1", Some(OPERATOR)).await.0,
        200
    );
    assert_eq!(failures(addr, "key_in_query").await, 3.0);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn the_token_rides_in_the_subprotocol_and_only_livegate_v1_is_echoed() {
    let server = start_token().await;
    let addr = server.addr;
    let token = mint(addr, "alice", Some("s1")).await;
    let ws = format!("ws://{addr}/ws/alice/s1");
    let protocols = format!("livegate.v1, livegate.bearer.{token}");
    let (socket, protocol) = upgrade(&ws, &[("sec-websocket-protocol", &protocols)])
        .await
        .expect("the subprotocol token is accepted");
    assert_eq!(protocol.as_deref(), Some("livegate.v1"));
    answers(socket).await;
    // Offering the token without livegate.v1 leaves nothing the server may echo.
    let alone = format!("livegate.bearer.{token}");
    assert_eq!(
        upgrade(&ws, &[("sec-websocket-protocol", &alone)])
            .await
            .err(),
        Some(401)
    );
    // The query works too, for clients that can set neither.
    let (socket, protocol) = upgrade(&format!("{ws}?token={token}"), &[])
        .await
        .expect("the query token is accepted");
    assert_eq!(protocol, None);
    drop(socket);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn clients_may_not_write_app_state() {
    let server = start_token().await;
    let addr = server.addr;
    let alice = mint(addr, "alice", None).await;
    let app_state = json!({"app:owned": "mallory"});
    let (status, body) = post(
        addr,
        "/api/sessions",
        Some(&alice),
        json!({"userId": "alice", "sessionId": "s1", "state": app_state}),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let (status, _) = post(
        addr,
        "/apps/livegate/users/alice/sessions/s1",
        Some(&alice),
        json!({"state": app_state}),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = post(
        addr,
        "/api/sessions",
        Some(&alice),
        json!({"userId": "alice", "sessionId": "s1", "state": {"user:name": "Alice"}}),
    )
    .await;
    assert_eq!(status, 201, "user: state of her own user is hers to write");
    let (status, _) = post(
        addr,
        "/run",
        Some(&alice),
        run_body("alice", "s1", Some(app_state.clone())),
    )
    .await;
    assert_eq!(status, 403);
    let (status, body) = post(addr, "/run", Some(&alice), run_body("alice", "s1", None)).await;
    assert_eq!(status, 200, "{body}");
    // Nobody's session shows the write that was refused; the operator may write app: state.
    create_session(addr, "bob", "b1").await;
    let (_, bob) = get(addr, "/api/sessions/bob/b1", Some(OPERATOR)).await;
    assert!(bob["session"]["state"].get("app:owned").is_none(), "{bob}");
    let (status, _) = post(
        addr,
        "/api/sessions",
        Some(OPERATOR),
        json!({"userId": "bob", "sessionId": "b2", "state": {"app:motd": "hi"}}),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(failures(addr, "app_state").await, 3.0);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn only_operator_keys_mint_tokens() {
    let server = start_token().await;
    let addr = server.addr;
    let alice = mint(addr, "alice", None).await;
    let request = json!({"userId": "bob"});
    assert_eq!(
        post(addr, "/api/tokens", None, request.clone()).await.0,
        401
    );
    assert_eq!(
        post(addr, "/api/tokens", Some(&alice), request.clone())
            .await
            .0,
        403
    );
    let (status, body) = post(
        addr,
        "/api/tokens",
        Some(OPERATOR),
        json!({"userId": "bob", "ttlSeconds": 999_999}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(addr, "/api/tokens", Some(OPERATOR), request).await;
    assert_eq!(status, 200);
    let expires = body["expiresAt"].as_u64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!((now + 3500..=now + 3600).contains(&expires), "{body}");
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn pages_of_other_origins_cannot_open_sockets_or_post() {
    // Without auth (the loopback default): the origin check is all that stops a page.
    let server = start(test_args()).await;
    let addr = server.addr;
    let ws = format!("ws://{addr}/ws/u1/s1");
    let evil = [("origin", "https://evil.example")];
    assert_eq!(upgrade(&ws, &evil).await.err(), Some(403));
    let (status, _) = call(
        addr,
        reqwest::Method::POST,
        "/run",
        None,
        &[
            ("origin", "https://evil.example"),
            ("content-type", "text/plain"),
        ],
        None,
    )
    .await;
    assert_eq!(status, 403, "a cross-origin text/plain POST /run");
    let same = format!("http://{addr}");
    let (socket, _) = upgrade(&ws, &[("origin", &same)])
        .await
        .expect("the gateway's own page connects");
    answers(socket).await;
    assert_eq!(failures(addr, "origin").await, 2.0);
    server.shutdown(WAIT).await;

    // With tokens, a valid token does not help a foreign page; an allowed origin gets CORS.
    let mut args = token_args();
    args.allowed_origins = Some("https://app.example.com".into());
    let server = start(args).await;
    let addr = server.addr;
    let alice = mint(addr, "alice", None).await;
    let bearer = format!("Bearer {alice}");
    let ws = format!("ws://{addr}/ws/alice/s1");
    let forged = [
        ("authorization", bearer.as_str()),
        ("origin", "https://evil.example"),
    ];
    assert_eq!(upgrade(&ws, &forged).await.err(), Some(403));
    let allowed = [
        ("authorization", bearer.as_str()),
        ("origin", "https://app.example.com"),
    ];
    let (socket, _) = upgrade(&ws, &allowed)
        .await
        .expect("an allowed origin connects");
    drop(socket);
    let (status, _) = call(
        addr,
        reqwest::Method::POST,
        "/api/sessions",
        Some(&alice),
        &[("origin", "https://evil.example")],
        Some(json!({"userId": "alice"})),
    )
    .await;
    assert_eq!(status, 403);
    let preflight = |origin: &'static str| {
        reqwest::Client::new()
            .request(
                reqwest::Method::OPTIONS,
                format!("http://{addr}/api/sessions"),
            )
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization")
            .send()
    };
    let allowed = timeout(WAIT, preflight("https://app.example.com"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        allowed
            .headers()
            .get("access-control-allow-origin")
            .map(|v| v.to_str().unwrap()),
        Some("https://app.example.com")
    );
    let refused = timeout(WAIT, preflight("https://evil.example"))
        .await
        .unwrap()
        .unwrap();
    assert!(refused
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn without_auth_only_loopback_host_names_are_answered() {
    let server = start(test_args()).await;
    let addr = server.addr;
    let port = addr.port();
    let request = |host: &str| format!("GET /api/sessions?user_id=u1 HTTP/1.1\r\nHost: {host}");
    assert_eq!(
        raw_status(addr, &request(&format!("evil.example:{port}"))).await,
        403
    );
    assert_eq!(raw_status(addr, &request("evil.example")).await, 403);
    let upgrade_request = format!(
        "GET /ws/u1/s1 HTTP/1.1\r\nHost: evil.example:{port}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
    );
    assert_eq!(raw_status(addr, &upgrade_request).await, 403);
    assert_eq!(
        raw_status(addr, &request(&format!("localhost:{port}"))).await,
        200
    );
    assert_eq!(
        raw_status(addr, &request(&format!("127.0.0.1:{port}"))).await,
        200
    );
    assert_eq!(failures(addr, "host").await, 3.0);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn an_anonymous_non_loopback_bind_refuses_to_start() {
    let mut args = test_args();
    args.bind = SocketAddr::from(([0, 0, 0, 0], 0));
    let error = gateway::start(&args).await.expect_err("refuses to start");
    let message = error.to_string();
    assert!(
        message.contains("--auth token") && message.contains("LIVEGATE_TOKEN_SECRET"),
        "{message}"
    );
    args.auth = Some(AuthMode::None);
    assert!(gateway::start(&args).await.is_err(), "explicit none too");
    // Tokens without any way to verify one cannot start either.
    let mut args = test_args();
    args.auth = Some(AuthMode::Token);
    assert!(gateway::start(&args).await.is_err());
}

#[tokio::test]
async fn metrics_are_for_loopback_callers_and_operators() {
    let server = start_token().await;
    let addr = server.addr;
    assert_eq!(
        get(addr, "/metrics", None).await.0,
        200,
        "a loopback caller"
    );
    // A proxy on this machine relays everyone's requests from loopback: what it relays is not.
    let relayed = [("x-forwarded-for", "203.0.113.9")];
    let (status, _) = call(addr, reqwest::Method::GET, "/metrics", None, &relayed, None).await;
    assert_eq!(status, 403);
    let alice = mint(addr, "alice", None).await;
    let (status, _) = call(
        addr,
        reqwest::Method::GET,
        "/metrics",
        Some(&alice),
        &relayed,
        None,
    )
    .await;
    assert_eq!(status, 403, "a client token is not enough");
    let (status, _) = call(
        addr,
        reqwest::Method::GET,
        "/metrics",
        Some(OPERATOR),
        &relayed,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(failures(addr, "metrics").await, 2.0);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn metrics_bind_serves_metrics_alone() {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let metrics_addr = probe.local_addr().unwrap();
    drop(probe);
    let mut args = test_args();
    args.metrics_bind = Some(metrics_addr);
    let server = start(args).await;
    assert!(http_get(metrics_addr, "/metrics")
        .await
        .contains("livegate_connections"));
    assert!(http_get(metrics_addr, "/api/config")
        .await
        .starts_with("HTTP/1.1 404"));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn the_page_learns_the_auth_mode_without_a_token() {
    let server = start_token().await;
    assert_eq!(
        get(server.addr, "/api/config", None).await,
        (200, json!({"auth": "token"}))
    );
    server.shutdown(WAIT).await;
    let server = start(test_args()).await;
    assert_eq!(
        get(server.addr, "/api/config", None).await,
        (200, json!({"auth": "none"}))
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn livegate_token_prints_a_token_the_gateway_accepts() {
    let server = start_token().await;
    let addr = server.addr;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_livegate"))
        .args([
            "token",
            "--user",
            "alice",
            "--session",
            "s1",
            "--ttl",
            "10m",
        ])
        .args(["--url", &format!("http://{addr}")])
        .env("LIVEGATE_TOKEN_SECRET", SECRET)
        .kill_on_drop(true)
        .output();
    let output = timeout(WAIT, output).await.expect("in time").expect("runs");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let mut lines = stdout.lines();
    let token = lines.next().expect("the token");
    let url = lines.next().expect("the URL");
    assert_eq!(url, format!("http://{addr}/?user=alice#token={token}"));
    create_session(addr, "alice", "s1").await;
    assert_eq!(
        get(addr, "/api/sessions/alice/s1", Some(token)).await.0,
        200
    );
    assert_eq!(
        get(addr, "/api/sessions/alice/s2", Some(token)).await.0,
        403
    );
    let without = tokio::process::Command::new(env!("CARGO_BIN_EXE_livegate"))
        .args(["token", "--user", "alice"])
        .env_remove("LIVEGATE_TOKEN_SECRET")
        .kill_on_drop(true)
        .output();
    let without = timeout(WAIT, without)
        .await
        .expect("in time")
        .expect("runs");
    assert!(!without.status.success());
    assert!(String::from_utf8_lossy(&without.stderr).contains("LIVEGATE_TOKEN_SECRET"));
    server.shutdown(WAIT).await;
}

/// Tokens signed by an operator's identity provider: each key type, checked for issuer and
/// audience, and refused when signed by another key.
#[tokio::test]
async fn identity_provider_tokens_verify_with_its_public_key() {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let fixture = |name: &str| {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/idp")
            .join(name)
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = |iss: &str, aud: &str| json!({"sub": "carol", "iss": iss, "aud": aud, "iat": now, "exp": now + 600});
    type Load = fn(&[u8]) -> jsonwebtoken::errors::Result<EncodingKey>;
    let kinds: [(&str, Algorithm, Load); 3] = [
        ("ec", Algorithm::ES256, EncodingKey::from_ec_pem),
        ("ed25519", Algorithm::EdDSA, EncodingKey::from_ed_pem),
        ("rsa", Algorithm::RS256, EncodingKey::from_rsa_pem),
    ];
    for (kind, algorithm, load) in kinds {
        let mut args = test_args();
        args.auth = Some(AuthMode::Token);
        args.auth_public_key = Some(fixture(&format!("{kind}-public.pem")));
        args.auth_issuer = Some("https://id.example.com/".into());
        args.auth_audience = Some("livegate".into());
        let server = start(args).await;
        let addr = server.addr;
        let private = std::fs::read(fixture(&format!("{kind}-private.pem"))).unwrap();
        let key = load(&private).unwrap();
        let sign =
            |claims: Value| jsonwebtoken::encode(&Header::new(algorithm), &claims, &key).unwrap();
        let good = sign(claims("https://id.example.com/", "livegate"));
        let (status, body) = get(addr, "/api/sessions", Some(&good)).await;
        assert_eq!(status, 200, "{kind}: {body}");
        let mut later = claims("https://id.example.com/", "livegate");
        later["nbf"] = json!(now + 3600);
        let (status, body) = get(addr, "/api/sessions", Some(&sign(later))).await;
        assert_eq!(
            (status, &body["error"]),
            (401, &json!("token not valid yet")),
            "{kind}"
        );
        assert_eq!(
            get(addr, "/api/sessions?user_id=dave", Some(&good)).await.0,
            403
        );
        let wrong_audience = sign(claims("https://id.example.com/", "another-app"));
        assert_eq!(
            get(addr, "/api/sessions", Some(&wrong_audience)).await.0,
            401,
            "{kind}"
        );
        let wrong_issuer = sign(claims("https://evil.example/", "livegate"));
        assert_eq!(
            get(addr, "/api/sessions", Some(&wrong_issuer)).await.0,
            401,
            "{kind}"
        );
        assert_eq!(failures(addr, "wrong_issuer").await, 2.0, "{kind}");
        // The same claims signed with the shared-secret algorithm and the public key as the
        // "secret" (the classic algorithm confusion) verify with nothing here.
        let public = std::fs::read(fixture(&format!("{kind}-public.pem"))).unwrap();
        let confused = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims("https://id.example.com/", "livegate"),
            &EncodingKey::from_secret(&public),
        )
        .unwrap();
        assert_eq!(
            get(addr, "/api/sessions", Some(&confused)).await.0,
            401,
            "{kind}"
        );
        server.shutdown(WAIT).await;
    }
    // Another provider's key signs nothing this gateway accepts.
    let mut args = test_args();
    args.auth = Some(AuthMode::Token);
    args.auth_public_key = Some(fixture("ec-public.pem"));
    args.auth_issuer = Some("https://id.example.com/".into());
    args.auth_audience = Some("livegate".into());
    let server = start(args).await;
    let other =
        EncodingKey::from_ed_pem(&std::fs::read(fixture("ed25519-private.pem")).unwrap()).unwrap();
    let foreign = jsonwebtoken::encode(
        &Header::new(Algorithm::EdDSA),
        &claims("https://id.example.com/", "livegate"),
        &other,
    )
    .unwrap();
    assert_eq!(
        get(server.addr, "/api/sessions", Some(&foreign)).await.0,
        401
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn client_tokens_are_held_to_per_user_quotas() {
    let mut args = token_args();
    args.max_stored_sessions_per_user = Some(2);
    args.max_state_bytes = Some(1024);
    let server = start(args).await;
    let addr = server.addr;
    let alice = mint(addr, "alice", None).await;
    let big = json!({"notes": "n".repeat(2048)});
    let created = json!({"userId": "alice", "sessionId": "s0", "state": big});
    let (status, body) = post(addr, "/api/sessions", Some(&alice), created).await;
    assert_eq!(status, 413, "{body}");
    for session in ["s1", "s2"] {
        let created = json!({"userId": "alice", "sessionId": session, "state": {"n": 1}});
        assert_eq!(
            post(addr, "/api/sessions", Some(&alice), created).await.0,
            201
        );
    }
    let third = json!({"userId": "alice", "sessionId": "s3"});
    let (status, body) = post(addr, "/api/sessions", Some(&alice), third.clone()).await;
    assert_eq!(status, 429, "{body}");
    // A live run would create its session: refused before the upgrade; an existing one opens.
    let refused = upgrade(&format!("ws://{addr}/ws/alice/s3?token={alice}"), &[]).await;
    assert_eq!(refused.err(), Some(429));
    let (ws, _) = upgrade(&format!("ws://{addr}/ws/alice/s1?token={alice}"), &[])
        .await
        .expect("an existing session opens");
    answers(ws).await;
    // State grows by turns too: a delta that takes it past the quota is refused.
    let (status, _) = post(
        addr,
        "/run",
        Some(&alice),
        run_body("alice", "s2", Some(big)),
    )
    .await;
    assert_eq!(status, 413);
    let small = Some(json!({"mood": "fine"}));
    assert_eq!(
        post(addr, "/run", Some(&alice), run_body("alice", "s2", small))
            .await
            .0,
        200
    );
    // The operator's servers are not held to them.
    assert_eq!(
        post(addr, "/api/sessions", Some(OPERATOR), third).await.0,
        201
    );
    let metrics = http_get(addr, "/metrics").await;
    let refused = |reason: &str| {
        metric(
            &metrics,
            &format!("livegate_limit_refusals_total{{reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(refused("stored_sessions"), Some(2.0));
    assert_eq!(refused("state_bytes"), Some(2.0));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn with_tokens_a_user_has_ten_live_sessions_by_default() {
    let server = start_token().await;
    let addr = server.addr;
    let alice = mint(addr, "alice", None).await;
    let mut open = Vec::new();
    for n in 0..10 {
        let url = format!("ws://{addr}/ws/alice/s{n}?token={alice}");
        open.push(upgrade(&url, &[]).await.expect("within the cap").0);
    }
    let eleventh = upgrade(&format!("ws://{addr}/ws/alice/s10?token={alice}"), &[]).await;
    assert_eq!(eleventh.err(), Some(429));
    let bob = mint(addr, "bob", None).await;
    let other = upgrade(&format!("ws://{addr}/ws/bob/s0?token={bob}"), &[]).await;
    assert!(other.is_ok(), "another user is not affected");
    drop(open);
    server.shutdown(WAIT).await;
}
