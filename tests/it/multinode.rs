//! Several gateway nodes sharing one PostgreSQL database and one artifact folder: sessions that
//! move between nodes, takeover across nodes, a node killed mid-turn, and a rolling restart's
//! drain, in small and under load. Run when `LIVEGATE_TEST_POSTGRES_URL` names a server
//! (`.ci/run` sets it); set but unreachable, they fail.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::process::Node;
use crate::common::*;
use futures::FutureExt;
use livegate::event::Event;
use livegate::gateway::close::{SERVICE_RESTART, TAKEN_OVER};
use livegate::gateway::config::Pacing;
use livegate::gateway::ServeArgs;
use livegate::session::{GetSessionConfig, PostgresSessionService, Session, SessionService};
use serde_json::Value;
use sqlx::Connection;
use tokio::time::timeout;

/// Lease time to live of the nodes killed in these tests.
const TEST_LEASE_TTL: Duration = Duration::from_millis(2000);

/// A fresh schema on the test server, so tests that run at once never see each other's rows.
struct TestDatabase {
    base: String,
    schema: String,
    /// A URL whose connections use the schema.
    url: String,
}

impl TestDatabase {
    /// `None` when no server is configured; set but unreachable fails the test.
    async fn fresh() -> Option<TestDatabase> {
        let base = std::env::var("LIVEGATE_TEST_POSTGRES_URL")
            .ok()
            .filter(|url| !url.trim().is_empty())?;
        let mut conn = sqlx::PgConnection::connect(&base)
            .await
            .expect("LIVEGATE_TEST_POSTGRES_URL is set but PostgreSQL is unreachable");
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        sqlx::raw_sql(&format!("CREATE SCHEMA {schema}"))
            .execute(&mut conn)
            .await
            .unwrap();
        let separator = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{separator}options=-c%20search_path%3D{schema}");
        Some(TestDatabase { base, schema, url })
    }

    /// Drops the schema (a failed test leaves it behind, to look at).
    async fn drop(self) {
        if let Ok(mut conn) = sqlx::PgConnection::connect(&self.base).await {
            let _ = sqlx::raw_sql(&format!("DROP SCHEMA {} CASCADE", self.schema))
                .execute(&mut conn)
                .await;
        }
    }
}

/// Args of an in-process node on the shared database and artifact folder.
fn node_args(url: &str, artifacts: &Path) -> ServeArgs {
    let mut args = test_args();
    args.session_store = Some(url.to_owned());
    args.artifact_store = Some(format!("file://{}", artifacts.display()));
    args.lease_ttl_ms = TEST_LEASE_TTL.as_millis() as u64;
    args
}

/// The session as the shared database has it.
async fn stored(url: &str, session: &str) -> Session {
    let store = PostgresSessionService::open(url).await.unwrap();
    store
        .get_session("livegate", "u1", session, &GetSessionConfig::default())
        .await
        .unwrap()
        .expect("session stored")
}

fn ids(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| e.id.clone()).collect()
}

/// True if each invocation's events are contiguous: no two runs ever interleaved their commits.
fn one_run_at_a_time(events: &[Event]) -> bool {
    let mut seen: Vec<&str> = Vec::new();
    for event in events {
        match seen.last() {
            Some(last) if *last == event.invocation_id => {}
            _ if seen.contains(&event.invocation_id.as_str()) => return false,
            _ => seen.push(&event.invocation_id),
        }
    }
    true
}

fn said(events: &[Event], text: &str) -> bool {
    events.iter().any(|e| {
        e.author == "user"
            && e.content
                .as_ref()
                .is_some_and(|c| c.joined_text().contains(text))
    })
}

/// Names of the session's artifacts as a node serves them over REST.
async fn artifact_names(addr: SocketAddr, session: &str) -> Vec<String> {
    let response = http_get(addr, &format!("/api/sessions/u1/{session}/artifacts")).await;
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    let body: Value = serde_json::from_str(body.trim()).unwrap_or(Value::Null);
    let list = body
        .get("artifacts")
        .or(body.get("names"))
        .unwrap_or(&body)
        .as_array()
        .cloned()
        .unwrap_or_default();
    list.iter()
        .filter_map(|a| {
            a.as_str()
                .map(str::to_owned)
                .or_else(|| a["name"].as_str().map(str::to_owned))
        })
        .collect()
}

/// A gateway in a child process (so it can be killed or sent SIGTERM), its sim answering in real
/// time.
async fn child_node(url: &str, artifacts: &Path, data: &Path) -> Node {
    let args = [
        "--bind".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--session-store".to_owned(),
        url.to_owned(),
        "--artifact-store".to_owned(),
        format!("file://{}", artifacts.display()),
        "--data-dir".to_owned(),
        data.display().to_string(),
        "--sim-pacing".to_owned(),
        "realtime".to_owned(),
        "--sim-reply-delay-ms".to_owned(),
        "0".to_owned(),
        "--lease-ttl-ms".to_owned(),
        TEST_LEASE_TTL.as_millis().to_string(),
    ];
    Node::spawn(&args, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_begun_on_one_node_continues_on_another() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let url = db.url.clone();
    let artifacts = tempfile::tempdir().unwrap();
    let a = start(node_args(&url, artifacts.path())).await;
    let b = start(node_args(&url, artifacts.path())).await;
    a.gateway()
        .runner
        .sessions
        .create_session(
            "livegate",
            "u1",
            Some("moving"),
            serde_json::json!({"mood": "curious"})
                .as_object()
                .cloned()
                .unwrap(),
        )
        .await
        .unwrap();

    let mut client = Client::connect(a.addr, "u1", "moving", "modality=TEXT").await;
    client.send_text("my name is Ada").await;
    client.events_until_turn_complete().await;
    client.close().await;

    let mut client = Client::connect(b.addr, "u1", "moving", "modality=TEXT").await;
    client.send_text("what is my name").await;
    let answer = client.events_until_turn_complete().await;
    assert!(!answer.is_empty());
    client.close().await;
    timeout(WAIT, b.gateway().registry.idle()).await.unwrap();

    let session = stored(&url, "moving").await;
    assert!(
        said(&session.events, "my name is Ada"),
        "node A's turn is there"
    );
    assert!(
        said(&session.events, "what is my name"),
        "node B's turn too"
    );
    assert_eq!(
        session.state.get("mood"),
        Some(&serde_json::json!("curious"))
    );
    let runs: std::collections::HashSet<&str> = session
        .events
        .iter()
        .map(|e| e.invocation_id.as_str())
        .collect();
    assert_eq!(runs.len(), 2, "one run on each node");
    a.shutdown(WAIT).await;
    b.shutdown(WAIT).await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_another_node_takes_the_session_over() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let url = db.url.clone();
    let artifacts = tempfile::tempdir().unwrap();
    let mut slow = node_args(&url, artifacts.path());
    slow.sim_pacing = Pacing::RealTime;
    let a = start(slow).await;
    let b = start(node_args(&url, artifacts.path())).await;

    let mut first = Client::connect(a.addr, "u1", "contested", "").await;
    first
        .send_text("tell me a long story about the sea and the ships upon it")
        .await;
    first_audio(&mut first).await;
    assert_eq!(a.gateway().registry.active(), 1);

    let asked = Instant::now();
    let mut second = Client::connect(b.addr, "u1", "contested", "modality=TEXT").await;
    second.send_text("hello from the other node").await;
    assert_eq!(close_code(&mut first).await, Some(TAKEN_OVER));
    let closed_after = asked.elapsed();
    let first_event = second.next_event().await;
    let answered_after = asked.elapsed();
    let mut answer = vec![first_event];
    if !is_turn_complete(&answer[0]) {
        answer.extend(second.events_until_turn_complete().await);
    }
    assert!(answer.iter().any(|e| !text_of(e).is_empty()), "{answer:?}");
    eprintln!(
        "takeover across nodes: old client closed after {} ms, new client's first event after {} ms",
        closed_after.as_millis(),
        answered_after.as_millis()
    );

    // Node A let go; node B holds the one lease; the runs never interleaved their commits.
    timeout(WAIT, a.gateway().registry.idle()).await.unwrap();
    assert_eq!(b.gateway().registry.active(), 1);
    let store = PostgresSessionService::open(&url).await.unwrap();
    let leases: Vec<(String,)> = sqlx::query_as(
        "SELECT node FROM session_leases WHERE user_id = 'u1' AND session_id = 'contested'",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(leases.len(), 1, "one lease: {leases:?}");
    let session = stored(&url, "contested").await;
    assert!(one_run_at_a_time(&session.events), "{:?}", session.events);
    assert!(said(&session.events, "hello from the other node"));

    // A third node takes it from the second in turn.
    let c = start(node_args(&url, artifacts.path())).await;
    let mut third = Client::connect(c.addr, "u1", "contested", "modality=TEXT").await;
    third.send_text("and hello from a third").await;
    assert_eq!(close_code(&mut second).await, Some(TAKEN_OVER));
    third.events_until_turn_complete().await;
    timeout(WAIT, b.gateway().registry.idle()).await.unwrap();
    assert_eq!(c.gateway().registry.active(), 1);
    let session = stored(&url, "contested").await;
    assert!(one_run_at_a_time(&session.events), "{:?}", session.events);
    assert!(said(&session.events, "and hello from a third"));
    third.close().await;
    timeout(WAIT, c.gateway().registry.idle()).await.unwrap();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM session_leases")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(left, 0, "every lease given back");
    a.shutdown(WAIT).await;
    b.shutdown(WAIT).await;
    c.shutdown(WAIT).await;
    db.drop().await;
}

/// A node that finds at renewal that it no longer holds a session (its row expired and was
/// taken, here: handed to another node by hand) stops the run rather than run it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_lost_its_lease_stops_the_run() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let url = db.url.clone();
    let artifacts = tempfile::tempdir().unwrap();
    let a = start(node_args(&url, artifacts.path())).await;
    let mut client = Client::connect(a.addr, "u1", "lost", "modality=TEXT").await;
    client.send_text("hello").await;
    client.events_until_turn_complete().await;
    let store = PostgresSessionService::open(&url).await.unwrap();
    let moved =
        sqlx::query("UPDATE session_leases SET node = 'elsewhere' WHERE session_id = 'lost'")
            .execute(store.pool())
            .await
            .unwrap();
    assert_eq!(moved.rows_affected(), 1);
    let lost = Instant::now();
    assert_eq!(close_code(&mut client).await, Some(TAKEN_OVER));
    assert!(
        lost.elapsed() < TEST_LEASE_TTL,
        "noticed at the next renewal"
    );
    timeout(WAIT, a.gateway().registry.idle()).await.unwrap();
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM session_leases WHERE node = 'elsewhere'")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(rows, 1, "the other node's lease is left alone");
    a.shutdown(WAIT).await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_turn_loses_its_sessions_within_the_lease_ttl() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let url = db.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("artifacts");
    let mut a = child_node(&url, &artifacts, &dir.path().join("a")).await;
    let b = start(node_args(&url, &artifacts)).await;

    let mut client = Client::connect(a.addr, "u1", "orphan", "").await;
    client.send_text("remember the number seven").await;
    client.events_until_turn_complete().await;
    client
        .send_text("now tell me a very long story about the number seven")
        .await;
    first_audio(&mut client).await;
    let committed = stored(&url, "orphan").await.events;
    assert!(said(&committed, "remember the number seven"));

    a.child.start_kill().unwrap();
    let killed = Instant::now();
    a.child.wait().await.unwrap();
    assert_eq!(
        close_code(&mut client).await,
        None,
        "no close frame from a killed node"
    );

    let mut client = Client::connect(b.addr, "u1", "orphan", "modality=TEXT").await;
    client.send_text("are you still there").await;
    client.events_until_turn_complete().await;
    let resumed_after = killed.elapsed();
    eprintln!(
        "kill -9: the session answered on another node after {} ms (lease TTL {} ms)",
        resumed_after.as_millis(),
        TEST_LEASE_TTL.as_millis()
    );
    // Within the TTL and the renewal period, well short of the 10 s a holder gets to let go.
    assert!(resumed_after < TEST_LEASE_TTL + Duration::from_secs(5));
    client.close().await;
    timeout(WAIT, b.gateway().registry.idle()).await.unwrap();

    let session = stored(&url, "orphan").await;
    assert_eq!(
        ids(&session.events[..committed.len()]),
        ids(&committed),
        "every event node A committed is there, in order"
    );
    assert!(said(&session.events, "are you still there"));
    let names = artifact_names(b.addr, "orphan").await;
    assert!(
        names.iter().any(|n| n.contains("_output_audio_")),
        "node B serves node A's recordings: {names:?}"
    );
    b.shutdown(WAIT).await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_with_1012_after_saving_and_the_client_continues_elsewhere() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let url = db.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("artifacts");
    let mut a = child_node(&url, &artifacts, &dir.path().join("a")).await;
    let b = start(node_args(&url, &artifacts)).await;

    let mut client = Client::connect(a.addr, "u1", "restart", "").await;
    client.send_text("remember the colour blue").await;
    client.events_until_turn_complete().await;
    client
        .send_text("and now tell me a very long story about the colour blue")
        .await;
    first_audio(&mut client).await;

    a.signal("TERM");
    let signalled = Instant::now();
    assert_eq!(close_code(&mut client).await, Some(SERVICE_RESTART));
    let drained_after = signalled.elapsed();
    eprintln!("SIGTERM: 1012 after {} ms", drained_after.as_millis());
    // Saved before the close: both answers' recordings, the cut-off one too.
    let names = artifact_names(b.addr, "restart").await;
    let recordings = names
        .iter()
        .filter(|n| n.contains("_output_audio_"))
        .count();
    assert!(recordings >= 2, "{names:?}");
    let status = timeout(WAIT, a.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "a drained node exits cleanly: {status}");

    let mut client = Client::connect(b.addr, "u1", "restart", "modality=TEXT").await;
    client.send_text("what colour was it").await;
    client.events_until_turn_complete().await;
    client.close().await;
    timeout(WAIT, b.gateway().registry.idle()).await.unwrap();
    let session = stored(&url, "restart").await;
    for text in [
        "remember the colour blue",
        "very long story",
        "what colour was it",
    ] {
        assert!(said(&session.events, text), "{text:?} is there");
    }
    assert!(one_run_at_a_time(&session.events));
    b.shutdown(WAIT).await;
    db.drop().await;
}

/// The next `liveSessionResumptionUpdate`'s handle (it follows a turn's `turnComplete`).
async fn next_handle(client: &mut Client) -> String {
    loop {
        let event = client.next_event().await;
        if let Some(handle) = event["liveSessionResumptionUpdate"]["newHandle"].as_str() {
            return handle.to_owned();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_moving_to_another_node_resumes_the_models_own_context() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let url = db.url.clone();
    // Both nodes talk to one Gemini Live server (here `mock-gemini`), as a deployment does.
    let upstream = livegate_mock::gemini::start(
        "127.0.0.1:0".parse().unwrap(),
        livegate_mock::gemini::MockGeminiConfig {
            sim: livegate::model::sim::SimConfig::instant(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let artifacts = tempfile::tempdir().unwrap();
    let gemini = |mut args: ServeArgs| {
        args.model = "gemini-2.5-flash-native-audio-preview-12-2025".into();
        args.gemini_base_url = format!("ws://{}", upstream.addr);
        args
    };
    let a = start(gemini(node_args(&url, artifacts.path()))).await;
    let b = start(gemini(node_args(&url, artifacts.path()))).await;

    let mut client = Client::connect(a.addr, "u1", "travels", "modality=TEXT").await;
    client.send_text("hello from node a").await;
    let first = next_handle(&mut client).await;
    client.close().await;

    let mut client = Client::connect(b.addr, "u1", "travels", "modality=TEXT").await;
    client.send_text("hello from node b").await;
    let second = next_handle(&mut client).await;
    client.close().await;
    let model_session = |h: &str| h.rsplit_once('-').map(|(id, _)| id.to_owned());
    assert_eq!(
        model_session(&second),
        model_session(&first),
        "node B resumed node A's model session: {first} then {second}"
    );
    timeout(WAIT, b.gateway().registry.idle()).await.unwrap();
    let store = PostgresSessionService::open(&url).await.unwrap();
    assert_eq!(
        store
            .resumption_handle("livegate", "u1", "travels")
            .await
            .unwrap(),
        Some(second)
    );
    a.shutdown(WAIT).await;
    b.shutdown(WAIT).await;
    upstream.shutdown().await;
    db.drop().await;
}

/// A rolling restart in small: many sessions mid-answer on a node that gets SIGTERM. Every
/// client hears 1012, every recording is saved, and each session carries on at the other node
/// with everything the first node committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_hands_every_session_to_the_next() {
    const SESSIONS: usize = 12;
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let url = db.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("artifacts");
    let mut a = child_node(&url, &artifacts, &dir.path().join("a")).await;
    let b = start(node_args(&url, &artifacts)).await;

    let mut clients = futures::future::join_all((0..SESSIONS).map(|i| async move {
        let session = format!("roll-{i}");
        let mut client = Client::connect(a.addr, "u1", &session, "").await;
        client.send_text(&format!("remember item {i}")).await;
        client.events_until_turn_complete().await;
        client
            .send_text(&format!("now tell me a long story about item {i}"))
            .await;
        first_audio(&mut client).await;
        (session, client)
    }))
    .await;

    a.signal("TERM");
    let signalled = Instant::now();
    for (_, client) in &mut clients {
        assert_eq!(close_code(client).await, Some(SERVICE_RESTART));
    }
    eprintln!(
        "SIGTERM with {SESSIONS} sessions mid-answer: every client closed with 1012 after {} ms",
        signalled.elapsed().as_millis()
    );
    let status = timeout(WAIT, a.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");

    let mut recordings = 0;
    for (session, _) in &clients {
        let committed = stored(&url, session).await.events;
        let names = artifact_names(b.addr, session).await;
        recordings += names
            .iter()
            .filter(|n| n.contains("_output_audio_"))
            .count();
        let mut client = Client::connect(b.addr, "u1", session, "modality=TEXT").await;
        client.send_text("still there").await;
        client.events_until_turn_complete().await;
        client.close().await;
        timeout(WAIT, b.gateway().registry.idle()).await.unwrap();
        let events = stored(&url, session).await.events;
        assert_eq!(
            ids(&events[..committed.len()]),
            ids(&committed),
            "{session}: nothing node A committed is lost"
        );
        assert!(said(&events, "still there"), "{session} went on");
    }
    assert_eq!(
        recordings,
        2 * SESSIONS,
        "each session's two answers recorded, the cut-off one too"
    );
    b.shutdown(WAIT).await;
    db.drop().await;
}

/// The load generator (`livegate loadtest`'s library) on a task of its own: `sessions` sessions
/// over the nodes at `urls`, each saying a short clip in 100 ms frames again and again until
/// `stop` fires, reconnecting after 1012/1001, with each session's record in the JSON report at
/// `report`.
fn spawn_load(
    urls: &[String],
    sessions: usize,
    report: &Path,
    stop: livegate::latch::Latch,
) -> tokio::task::JoinHandle<Result<livegate_loadtest::Report, livegate_loadtest::LoadtestError>> {
    let args = livegate_loadtest::LoadtestArgs {
        url: urls.to_vec(),
        sessions,
        duration: Duration::from_secs(600),
        ramp: 50.0,
        audio: vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hello.wav")],
        replay: None,
        turns: 0,
        idle: false,
        in_phase: false,
        // A fifth of the frames of 20 ms ones: 200 sessions fit a debug build on 2 cores.
        frame_ms: 100,
        query: String::new(),
        model_delay_ms: None,
        server_pid: None,
        metrics_url: None,
        report: Some(report.to_path_buf()),
        plot: None,
        quiet: true,
        session_report: true,
        api_key: None,
        token: None,
        protocol: Default::default(),
        twilio_auth_token: None,
    };
    tokio::spawn(async move { livegate_loadtest::run_until(&args, stop).await })
}

/// How often a wait here looks again: a few times a second, the probes query a loaded node or
/// database.
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// Sessions of the load's user that have a committed `turnComplete` later than `since` (Unix
/// seconds).
async fn sessions_answered_since(pool: &sqlx::PgPool, since: f64) -> i64 {
    sqlx::query_scalar(
        "SELECT count(DISTINCT session_id) FROM events \
         WHERE timestamp > $1 AND event_json LIKE '%\"turnComplete\":true%'",
    )
    .bind(since)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// True once `GET /readyz` answers 200.
async fn ready(addr: SocketAddr) -> bool {
    let Ok(Ok(mut stream)) =
        timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await
    else {
        return false;
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut response = Vec::new();
    let read = timeout(Duration::from_secs(5), stream.read_to_end(&mut response)).await;
    read.is_ok() && response.starts_with(b"HTTP/1.1 200")
}

/// Versions of each of a session's recordings, as a node serves them over REST:
/// `(input, output)` counts.
async fn recordings_of(addr: SocketAddr, user: &str, session: &str) -> (u64, u64) {
    let response = http_get(addr, &format!("/api/sessions/{user}/{session}/artifacts")).await;
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    let body: Value = serde_json::from_str(body.trim()).expect("an artifact listing");
    let mut counts = (0, 0);
    for artifact in body["artifacts"].as_array().expect("artifacts") {
        let name = artifact["name"].as_str().unwrap_or_default();
        let versions = artifact["versions"].as_array().map_or(0, Vec::len) as u64;
        if name.contains("_input_audio_") {
            counts.0 += versions;
        } else if name.contains("_output_audio_") {
            counts.1 += versions;
        }
    }
    counts
}

/// Drains each node in turn with SIGTERM and starts it again on its port and folder
/// (`args(node, port)`), waiting for it to report ready before the next.
async fn restart_each(
    nodes: &mut [Node],
    args: impl Fn(usize, u16) -> Vec<String>,
    env: &[(&str, &str)],
) {
    for (index, node) in nodes.iter_mut().enumerate() {
        let addr = node.addr;
        node.signal("TERM");
        let status = timeout(Duration::from_secs(30), node.child.wait())
            .await
            .expect("a drained node exits")
            .unwrap();
        assert!(status.success(), "node {index} drained cleanly: {status}");
        *node = Node::spawn(&args(index, addr.port()), env).await;
        assert_eq!(node.addr, addr);
        eventually_every(
            Duration::from_secs(30),
            CHECK_EVERY,
            "the restarted node is ready",
            || ready(addr),
        )
        .await;
    }
}

/// Checks each session's record in the load's report: it moved, it carried on after its last
/// move, and every event it saw committed is in `stored`. Returns each session's turns.
fn check_session_records(
    report: &Value,
    sessions: usize,
    stored: &std::collections::HashSet<(String, String)>,
) -> std::collections::HashMap<String, u64> {
    let records = report["session_records"]
        .as_array()
        .expect("session records");
    assert_eq!(records.len(), sessions);
    let mut turns = std::collections::HashMap::new();
    for record in records {
        let session = record["session"].as_str().unwrap().to_owned();
        let per_connection: Vec<u64> = record["turns_per_connection"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        assert!(
            per_connection.len() >= 2,
            "{session} moved: {per_connection:?}"
        );
        assert!(
            per_connection.last().is_some_and(|t| *t > 0),
            "{session} carried on after its last reconnect: {per_connection:?}"
        );
        let ids = record["committed_event_ids"].as_array().unwrap();
        // A turn's turnComplete, at least, is committed before the client sees it.
        let answered: u64 = per_connection.iter().sum();
        assert!(ids.len() as u64 >= answered, "{session}: {} ids", ids.len());
        for id in ids {
            let id = id.as_str().unwrap().to_owned();
            assert!(
                stored.contains(&(session.clone(), id.clone())),
                "{session}: event {id}, which a client saw committed, is in the database"
            );
        }
        turns.insert(session, per_connection.iter().sum::<u64>());
    }
    turns
}

/// A rolling restart under load: three nodes sharing PostgreSQL and an artifact folder, 200
/// sessions from the load generator spread over them, and each node in turn drained with SIGTERM
/// and started again on its port and folder. No client sees an error, every session moves and
/// carries on, every event a client saw committed is in the database, and every turn's
/// recordings are saved.
///
/// Three gateway processes and 200 sessions fill two cores, so it runs with the fault suite, one
/// test at a time (`LIVEGATE_TEST_FAULTS`), not beside 250 others where its minute of answers
/// starves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_loses_nothing() {
    const NODES: usize = 3;
    const SESSIONS: usize = 200;
    if !crate::common::faults::faults_enabled() {
        return;
    }
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = db.url.clone();
    let artifacts = dir.path().join("artifacts");
    let args = |node: usize, port: u16| -> Vec<String> {
        let data = dir.path().join(format!("node-{node}"));
        [
            &format!("--bind=127.0.0.1:{port}"),
            &format!("--session-store={url}"),
            &format!("--artifact-store=file://{}", artifacts.display()),
            &format!("--data-dir={}", data.display()),
            "--sim-pacing=burst",
            "--sim-reply-delay-ms=0",
            &format!("--lease-ttl-ms={}", TEST_LEASE_TTL.as_millis()),
        ]
        .map(str::to_owned)
        .into()
    };
    let env = [];
    let mut nodes = Vec::new();
    for node in 0..NODES {
        nodes.push(Node::spawn(&args(node, 0), &env).await);
    }
    let urls: Vec<String> = nodes
        .iter()
        .map(|n| format!("ws://{}/ws", n.addr))
        .collect();
    let pool = PostgresSessionService::open(&url)
        .await
        .unwrap()
        .pool()
        .clone();
    let report_path = dir.path().join("load.json");
    let started = Instant::now();
    let stop = livegate::latch::Latch::new();
    let load = spawn_load(&urls, SESSIONS, &report_path, stop.clone());

    // Every session has answered before the first restart, and again after the last one.
    eventually_every(
        Duration::from_secs(60),
        CHECK_EVERY,
        "every session answered",
        || sessions_answered_since(&pool, 0.0).map(|n| n as usize == SESSIONS),
    )
    .await;
    restart_each(&mut nodes, &args, &env).await;
    let restarted = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let again = "every session answered after the restarts";
    eventually_every(Duration::from_secs(60), CHECK_EVERY, again, || {
        sessions_answered_since(&pool, restarted).map(|n| n as usize == SESSIONS)
    })
    .await;

    // The load ends (as on SIGINT: the turns under way finish).
    stop.fire();
    let outcome = timeout(Duration::from_secs(60), load)
        .await
        .expect("the load ends")
        .expect("the load's task");
    let report: Value =
        serde_json::from_slice(&std::fs::read(&report_path).expect("a report")).unwrap();
    eprintln!(
        "rolling restart of {NODES} nodes under {SESSIONS} sessions: {} turns, {} reconnects (p50 {} ms, max {} ms), {:.0} s",
        report["turns_completed"],
        report["reconnects"],
        report["reconnect_ms"]["p50"],
        report["reconnect_ms"]["max"],
        started.elapsed().as_secs_f64()
    );
    assert_eq!(report["errors"], 0, "{}", report["error_samples"]);
    assert_eq!(report["unexpected_closes"], 0);
    assert!(
        outcome.is_ok(),
        "the load generator ran: {:?}",
        outcome.err()
    );
    assert!(
        report["reconnects"].as_u64().unwrap() >= SESSIONS as u64,
        "every node was drained, so every session moved at least once"
    );

    // Every committed event a client saw is in the database.
    let user = format!("load-{}", report["run_id"].as_str().unwrap());
    let stored: std::collections::HashSet<(String, String)> =
        sqlx::query_as("SELECT session_id, id FROM events WHERE user_id = $1")
            .bind(&user)
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    let turns = check_session_records(&report, SESSIONS, &stored);

    // Every turn's recordings are saved: its input and its answer.
    let mut recordings = 0;
    for (session, turns) in &turns {
        let (input, output) = recordings_of(nodes[0].addr, &user, session).await;
        assert!(
            input >= *turns,
            "{session}: {input} input recordings, {turns} turns"
        );
        assert!(
            output >= *turns,
            "{session}: {output} answer recordings, {turns} turns"
        );
        recordings += input + output;
    }
    eprintln!(
        "{} events in the database, {recordings} recordings for {} turns",
        stored.len(),
        turns.values().sum::<u64>()
    );
    for node in &nodes {
        node.signal("TERM");
    }
    for node in &mut nodes {
        let _ = timeout(WAIT, node.child.wait()).await;
    }
    db.drop().await;
}
