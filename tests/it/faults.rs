//! The fault suite: two gateway nodes in child processes on a PostgreSQL server of the test's
//! own, broken as an operator's bad day would break them: a node paused past its lease (SIGSTOP)
//! then resumed, a store outage for one node (a proxy that refuses or black-holes), a store
//! stopped for longer than the lease TTL, both nodes opening the same sessions at once, and
//! `kill -9`. What each asserts: one writer per session, a close the client understands, and
//! no committed event lost. Run when `LIVEGATE_TEST_FAULTS` is set (`.ci/run` sets it).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::common::faults::{faults_enabled, spawn_node, spawn_node_on, Node, Proxy, TestPostgres};
use crate::common::*;
use livegate::gateway::close::{TAKEN_OVER, TRY_AGAIN_LATER};
use serde_json::Value;
use sqlx::{PgPool, Row};
use tokio::time::timeout;

/// The nodes' lease time to live: short, so each fault plays out in seconds.
const TTL_MS: &str = "2000";

/// The server of one test, with its own folder for the nodes' files.
struct Setup {
    pg: TestPostgres,
    dir: tempfile::TempDir,
}

impl Setup {
    /// `None` when the suite is not asked for.
    fn new() -> Option<Setup> {
        if !faults_enabled() {
            return None;
        }
        Some(Setup {
            pg: TestPostgres::start(),
            dir: tempfile::tempdir().expect("a temporary folder"),
        })
    }

    /// A node on the store at `store` (the server's URL, or a proxy's).
    async fn node(&self, store: &str) -> Node {
        spawn_node(store, self.dir.path(), &["--lease-ttl-ms", TTL_MS]).await
    }

    /// A node whose sim answers in real time (an answer lasts seconds).
    async fn realtime_node(&self, store: &str) -> Node {
        spawn_node(
            store,
            self.dir.path(),
            &["--lease-ttl-ms", TTL_MS, "--sim-pacing", "realtime"],
        )
        .await
    }

    async fn pool(&self) -> PgPool {
        PgPool::connect(&self.pg.url()).await.expect("connects")
    }
}

/// A session's stored events as (invocation id, event id), in commit order.
async fn stored_events(pool: &PgPool, session: &str) -> Vec<(String, String)> {
    sqlx::query("SELECT invocation_id, id FROM events WHERE session_id = $1 ORDER BY seq")
        .bind(session)
        .fetch_all(pool)
        .await
        .expect("events read")
        .iter()
        .map(|row| (row.get("invocation_id"), row.get("id")))
        .collect()
}

/// True if each invocation's events are contiguous: no two runs ever interleaved their commits.
fn one_run_at_a_time(events: &[(String, String)]) -> bool {
    let mut seen: Vec<&str> = Vec::new();
    for (invocation, _) in events {
        match seen.last() {
            Some(last) if *last == invocation => {}
            _ if seen.contains(&invocation.as_str()) => return false,
            _ => seen.push(invocation),
        }
    }
    true
}

/// The invocation id of the events a client received.
fn invocation_of(client: &Client) -> String {
    client
        .events
        .iter()
        .find_map(|e| e["invocationId"].as_str().filter(|id| !id.is_empty()))
        .expect("an event with an invocation id")
        .to_owned()
}

/// Waits until a node runs no live run (every run ended and flushed what it had).
async fn no_live_runs(addr: std::net::SocketAddr) {
    metric_reaches(addr, "livegate_live_runs", 0.0).await;
}

/// Item 1: a node paused past its lease TTL while its sessions' turns were under way, the
/// sessions taken over by the other node, then resumed, writes nothing more into them: the
/// interrupted turns' events and recordings it flushes on resuming are refused by the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_writes_nothing_into_the_sessions_taken_from_it() {
    let Some(setup) = Setup::new() else { return };
    const SESSIONS: usize = 5;
    let url = setup.pg.url();
    let a = setup.realtime_node(&url).await;
    let b = setup.node(&url).await;
    let ids: Vec<String> = (0..SESSIONS).map(|i| format!("paused-{i}")).collect();

    let mut on_a = Vec::new();
    for id in &ids {
        let mut client = Client::connect(a.addr, "u1", id, "").await;
        client.send_text("hello").await;
        client.events_until_turn_complete().await;
        client.send_text("tell me a very long story").await;
        first_audio(&mut client).await;
        // Read on, so that node A never finds its client too slow.
        on_a.push(tokio::spawn(async move {
            let code = close_code(&mut client).await;
            (code, invocation_of(&client))
        }));
    }
    a.pause();
    // Node B takes each session once A's lease has expired (A cannot let go: it is stopped).
    let mut on_b = Vec::new();
    for id in &ids {
        let mut client = Client::connect(b.addr, "u1", id, "modality=TEXT").await;
        client.send_text("I moved to node B").await;
        client.events_until_turn_complete().await;
        on_b.push(client);
    }
    a.resume();
    let mut stale_runs = Vec::new();
    for reader in on_a {
        let (code, invocation) = timeout(WAIT, reader)
            .await
            .expect("closed in time")
            .unwrap();
        assert_eq!(code, Some(TAKEN_OVER));
        stale_runs.push(invocation);
    }
    no_live_runs(a.addr).await;

    let pool = setup.pool().await;
    for (id, (stale, b_client)) in ids.iter().zip(stale_runs.iter().zip(&on_b)) {
        let events = stored_events(&pool, id).await;
        let fresh = invocation_of(b_client);
        let b_starts = events
            .iter()
            .position(|(inv, _)| *inv == fresh)
            .expect("node B's run committed");
        let late: Vec<_> = events[b_starts..]
            .iter()
            .filter(|(inv, _)| inv == stale)
            .collect();
        assert!(
            late.is_empty(),
            "{id}: the paused node committed {} events after the takeover",
            late.len()
        );
        assert!(one_run_at_a_time(&events), "{id}: runs interleaved");
    }
    for client in on_b {
        client.close().await;
    }
}

/// Item 2: a node that cannot reach the store does not start a run without its lease: its
/// client is told to try again (1013) while the session goes on undisturbed on the other node,
/// and once the store is back the session moves over properly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_during_an_outage_never_runs_beside_the_other_nodes() {
    let Some(setup) = Setup::new() else { return };
    let proxy = Proxy::start(setup.pg.addr()).await;
    let a = setup.node(&setup.pg.url()).await;
    let b = setup.node(&TestPostgres::url_via(proxy.addr())).await;

    let mut on_a = Client::connect(a.addr, "u1", "outage", "modality=TEXT").await;
    on_a.send_text("first, on node A").await;
    on_a.events_until_turn_complete().await;

    proxy.refuse();
    let mut on_b = Client::connect(b.addr, "u1", "outage", "modality=TEXT").await;
    on_b.send_text("during the outage, on node B").await;
    assert_eq!(
        close_code(&mut on_b).await,
        Some(TRY_AGAIN_LATER),
        "no lease, no run: the client is told to try again"
    );
    on_a.send_text("still on node A").await;
    on_a.events_until_turn_complete().await;

    proxy.pass();
    let mut on_b = Client::connect(b.addr, "u1", "outage", "modality=TEXT").await;
    assert_eq!(close_code(&mut on_a).await, Some(TAKEN_OVER));
    on_b.send_text("after the outage, on node B").await;
    on_b.events_until_turn_complete().await;

    let events = stored_events(&setup.pool().await, "outage").await;
    assert!(one_run_at_a_time(&events), "runs interleaved: {events:?}");
    let pool = setup.pool().await;
    let said: Vec<String> = sqlx::query_scalar(
        "SELECT event_json FROM events WHERE session_id = 'outage' AND author = 'user' ORDER BY seq",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        !said.iter().any(|e| e.contains("during the outage")),
        "the refused connection ran nothing"
    );
    on_b.close().await;
}

/// How one client of the race ended.
#[derive(Debug)]
enum Outcome {
    /// Its turn was answered; it still holds the session.
    Answered(Box<Client>),
    /// Closed with this frame's code (`None`: no close frame at all).
    Closed(Option<u16>),
}

/// One client of the race: connects, says something, and reads until answered or closed.
async fn race_client(addr: std::net::SocketAddr, id: String, round: usize) -> Outcome {
    let mut client = Client::connect(addr, "u1", &id, "modality=TEXT").await;
    client.send_text(&format!("round {round}")).await;
    loop {
        match client.next_frame().await {
            Frame::Closed(close) => return Outcome::Closed(close.map(|(code, _)| code)),
            Frame::Event(e) if is_turn_complete(&e) => return Outcome::Answered(Box::new(client)),
            _ => {}
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

/// Item 3: both nodes open the same sessions at once, round after round: every loser gets a
/// close frame (4000), no round waits for a forced takeover, and no two runs interleave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_nodes_opening_the_same_sessions_at_once_leave_one_run_each() {
    let Some(setup) = Setup::new() else { return };
    const SESSIONS: usize = 10;
    const ROUNDS: usize = 3;
    let url = setup.pg.url();
    let a = setup.node(&url).await;
    let b = setup.node(&url).await;
    let ids: Vec<String> = (0..SESSIONS).map(|i| format!("race-{i}")).collect();
    let mut holders = Vec::new();
    for round in 0..ROUNDS {
        let started = Instant::now();
        let mut tasks = Vec::new();
        for id in &ids {
            tasks.push(tokio::spawn(race_client(a.addr, id.clone(), round)));
            tasks.push(tokio::spawn(race_client(b.addr, id.clone(), round)));
        }
        for task in tasks {
            match timeout(WAIT, task).await.expect("ends in time").unwrap() {
                Outcome::Answered(client) => holders.push(*client),
                Outcome::Closed(code) => {
                    assert_eq!(code, Some(TAKEN_OVER), "a loser gets a close frame")
                }
            }
        }
        let elapsed = started.elapsed();
        assert!(
            elapsed < Duration::from_secs(8),
            "round {round} took {elapsed:?}: a takeover waited for the 10 s grace"
        );
        for client in holders.drain(..) {
            client.close().await;
        }
    }
    no_live_runs(a.addr).await;
    no_live_runs(b.addr).await;
    let pool = setup.pool().await;
    for id in &ids {
        let events = stored_events(&pool, id).await;
        assert!(one_run_at_a_time(&events), "{id}: runs interleaved");
    }
}

/// Item 4: a store outage longer than the lease TTL is not a takeover: the client is closed
/// with 1013 (reconnect later), and once the store is back it reconnects and carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_longer_than_the_ttl_closes_with_try_again_later() {
    let Some(setup) = Setup::new() else { return };
    let a = setup.node(&setup.pg.url()).await;
    let mut client = Client::connect(a.addr, "u1", "down", "modality=TEXT").await;
    client.send_text("remember the number seven").await;
    client.events_until_turn_complete().await;

    setup.pg.stop();
    let code = close_code(&mut client).await;
    setup.pg.start_again();
    assert_eq!(code, Some(TRY_AGAIN_LATER), "an outage is not a takeover");

    let mut client = Client::connect(a.addr, "u1", "down", "modality=TEXT").await;
    client.send_text("are you back").await;
    client.events_until_turn_complete().await;
    let events = stored_events(&setup.pool().await, "down").await;
    assert!(events.len() >= 4, "both turns stored: {events:?}");
    client.close().await;
}

/// `kill -9` mid-turn loses no event the node had committed (every event a client receives
/// was committed before it was sent), and the other node carries the session on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_committed_event() {
    let Some(setup) = Setup::new() else { return };
    let url = setup.pg.url();
    let a = setup.realtime_node(&url).await;
    let b = setup.node(&url).await;
    let mut client = Client::connect(a.addr, "u1", "killed", "").await;
    for turn in ["one", "two"] {
        client.send_text(turn).await;
        client.events_until_turn_complete().await;
    }
    client.send_text("tell me a very long story").await;
    first_audio(&mut client).await;
    a.kill().await;
    assert_eq!(
        close_code(&mut client).await,
        None,
        "a killed node sends no close frame"
    );
    // What a live run stores: final events without inline media (audio goes as binary frames,
    // each announced by an event of its own that is not stored) and without a resumption update
    // (the session row keeps the latest handle instead).
    let seen: HashSet<String> = client
        .events
        .iter()
        .filter(|e| e["partial"] != Value::Bool(true))
        .filter(|e| !e.to_string().contains("\"inlineData\""))
        .filter(|e| e.get("liveSessionResumptionUpdate").is_none())
        .filter_map(|e| e["id"].as_str().map(str::to_owned))
        .collect();
    assert!(!seen.is_empty());

    let mut client = Client::connect(b.addr, "u1", "killed", "modality=TEXT").await;
    client.send_text("are you still there").await;
    client.events_until_turn_complete().await;
    client.close().await;
    let stored: HashSet<String> = stored_events(&setup.pool().await, "killed")
        .await
        .into_iter()
        .map(|(_, id)| id)
        .collect();
    let missing: Vec<_> = seen.difference(&stored).collect();
    assert!(
        missing.is_empty(),
        "events the client received but the store lost: {missing:?}"
    );
}

/// Item 5, with a real node process: its bucket (the S3 test server, behind a proxy) goes
/// silent mid-call, accepting connections and answering nothing. The turn that ends meanwhile
/// waits no longer than the save bound and tells the client; once the bucket answers again the
/// next turn's end saves the held recording too, and every recording the session's history
/// names is in the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_bucket_holds_no_turn_past_its_bound_and_loses_no_recording() {
    let Some(setup) = Setup::new() else { return };
    let Some((endpoint, bucket)) = s3_bucket().await else {
        return;
    };
    let s3: std::net::SocketAddr = endpoint
        .trim_start_matches("http://")
        .parse()
        .expect("LIVEGATE_TEST_S3_ENDPOINT is http://IP:PORT");
    let proxy = Proxy::start(s3).await;
    let via = format!("http://{}", proxy.addr());
    let env = [
        ("AWS_ENDPOINT_URL", via.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ];
    let bound = Duration::from_secs(2);
    let node = spawn_node_on(
        &setup.pg.url(),
        &format!("s3://{bucket}/silent"),
        setup.dir.path(),
        &["--lease-ttl-ms", TTL_MS, "--recording-save-timeout", "2s"],
        &env,
    )
    .await;
    let mut client = Client::connect(node.addr, "u1", "silent", "").await;
    client.send_text("one").await;
    client.events_until_turn_complete().await;

    proxy.black_hole();
    client.send_text("two").await;
    let sent = Instant::now();
    let events = client.events_until_turn_complete().await;
    let waited = sent.elapsed();
    assert!(
        events.iter().any(|e| e["errorCode"] == "UNAVAILABLE"),
        "the client is told: {events:?}"
    );
    assert!(
        waited < bound * 2 + Duration::from_secs(6),
        "turnComplete after {waited:?}"
    );

    proxy.pass();
    client.send_text("three").await;
    client.events_until_turn_complete().await;
    client.close().await;
    no_live_runs(node.addr).await;

    let pool = setup.pool().await;
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT event_json FROM events WHERE session_id = 'silent'")
            .fetch_all(&pool)
            .await
            .expect("events read");
    let named = stored.iter().filter(|e| e.contains("\"fileData\"")).count();
    assert_eq!(
        named, 3,
        "each turn's answer is recorded, the silent one's late"
    );
    assert!(
        unreferenced_recordings(node.addr, &pool, "silent")
            .await
            .is_empty(),
        "every saved recording is named by the history"
    );
    for event in stored.iter().filter(|e| e.contains("\"fileData\"")) {
        let uri = event
            .split("artifact://")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("a recording's URI");
        let (path, version) = uri.split_once('#').expect("a version");
        let name = path.rsplit('/').next().expect("a name");
        let download = reqwest::get(format!(
            "http://{}/api/sessions/u1/silent/artifacts/{name}?version={version}",
            node.addr
        ))
        .await
        .expect("a download");
        assert_eq!(download.status(), 200, "{name}#{version} is in the bucket");
    }
}
/// The recording versions in a session's artifacts that no stored event names: a run that
/// lost its lease saved them (a run that held it stores each one's `fileData` event).
async fn unreferenced_recordings(
    addr: std::net::SocketAddr,
    pool: &PgPool,
    session: &str,
) -> Vec<String> {
    let listed: Value = reqwest::get(format!("http://{addr}/api/sessions/u1/{session}/artifacts"))
        .await
        .expect("artifacts listed")
        .json()
        .await
        .expect("a JSON listing");
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT event_json FROM events WHERE session_id = $1")
            .bind(session)
            .fetch_all(pool)
            .await
            .expect("events read");
    let mut orphans = Vec::new();
    for artifact in listed["artifacts"].as_array().expect("artifacts") {
        let name = artifact["name"].as_str().expect("a name");
        for version in artifact["versions"].as_array().expect("versions") {
            let uri = format!("/_adk_live/{name}#{version}");
            if !stored.iter().any(|event| event.contains(&uri)) {
                orphans.push(format!("{name}#{version}"));
            }
        }
    }
    orphans
}
