//! Recordings in an S3 bucket (moto's S3 server, named by `LIVEGATE_TEST_S3_ENDPOINT`): a live
//! run's recordings land in the bucket and download over REST from another node, a long
//! recording's parts go up while its turn runs, and an upload that fails keeps the recording on
//! local disk and saves it later, by the same process or the next one started on the folder.
//! Skipped when the variable is unset; `.ci/run` sets it. A bucket that accepts connections and
//! never answers needs no server: those tests (a turn's bounded wait, a failure told once and
//! never stored, `/readyz` on a full spool disk) always run.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use livegate::gateway::ServeArgs;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The environment is the process's: gateways read their S3 settings from it when they start,
/// one test at a time.
static ENVIRONMENT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts a gateway whose recordings go to `store` on the S3 server at `endpoint`, spooled in
/// `data_dir`.
async fn start_on_s3(
    mut args: ServeArgs,
    endpoint: &str,
    store: &str,
    data_dir: &std::path::Path,
) -> livegate::gateway::Server {
    args.artifact_store = Some(store.to_owned());
    args.data_dir = data_dir.to_path_buf();
    let _env = ENVIRONMENT.lock().await;
    // The standard variables, as a deployment sets them (the server takes any credentials).
    std::env::set_var("AWS_ENDPOINT_URL", endpoint);
    std::env::set_var("AWS_ALLOW_HTTP", "true");
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    std::env::set_var("AWS_DEFAULT_REGION", "us-east-1");
    // The store reads the variables while the gateway starts, before the lock is released.
    start(args).await
}

/// The keys under `prefix` in the bucket, from the server's own listing.
async fn keys(endpoint: &str, bucket: &str, prefix: &str) -> Vec<String> {
    let listing = reqwest::get(format!(
        "{endpoint}/{bucket}?list-type=2&max-keys=1000&prefix={prefix}"
    ))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    listing
        .split("<Key>")
        .skip(1)
        .filter_map(|k| k.split_once("</Key>").map(|(k, _)| k.to_owned()))
        .collect()
}

/// `(name, version)` of every recording the events reference.
fn recordings(events: &[Value]) -> Vec<(String, u64)> {
    events
        .iter()
        .filter_map(|e| e["content"]["parts"][0]["fileData"]["fileUri"].as_str())
        .map(|uri| {
            let reference = uri
                .strip_prefix("artifact://livegate/u1/s1/_adk_live/")
                .expect("ADK's live recording URI");
            let (name, version) = reference.split_once('#').expect("a version");
            (name.to_owned(), version.parse().expect("numeric version"))
        })
        .collect()
}

/// Bytes of every version of the session's input and output recordings, listed and downloaded
/// over the gateway's REST API.
async fn recorded_over_rest(addr: SocketAddr) -> (usize, usize) {
    let listed: Value = reqwest::get(format!("http://{addr}/api/sessions/u1/s1/artifacts"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut recorded = (0, 0);
    for artifact in listed["artifacts"].as_array().expect("a list") {
        let name = artifact["name"].as_str().unwrap();
        for version in artifact["versions"].as_array().unwrap() {
            let bytes = download(addr, name, version.as_u64().unwrap()).await.len();
            if name.contains("_input_audio_") {
                recorded.0 += bytes;
            } else if name.contains("_output_audio_") {
                recorded.1 += bytes;
            }
        }
    }
    recorded
}

/// A recording's bytes, downloaded over the gateway's REST API.
async fn download(addr: SocketAddr, name: &str, version: u64) -> Vec<u8> {
    let response = reqwest::get(format!(
        "http://{addr}/api/sessions/u1/s1/artifacts/{name}?version={version}&format=raw"
    ))
    .await
    .unwrap();
    assert_eq!(response.status(), 200, "{name}#{version}");
    response.bytes().await.unwrap().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_runs_recordings_land_in_the_bucket_and_another_node_serves_them() {
    let Some((endpoint, bucket)) = s3_bucket().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut args = test_args();
    // The sessions outlive node A for node B's REST API to find them.
    args.session_store = Some(format!("sqlite://{}", dir.path().join("s.db").display()));
    let store = format!("s3://{bucket}/recordings");
    let node_a = start_on_s3(args.clone(), &endpoint, &store, dir.path()).await;

    let mut client = Client::connect(node_a.addr, "u1", "s1", "").await;
    // Longer than one spill: the input recording goes through a spool file.
    let mut pcm = fixture_pcm("count.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    client.events_until_turn_complete().await;
    let received = client.audio_bytes;
    let saved = recordings(&client.events);
    client.close().await;
    tokio::time::timeout(WAIT, node_a.gateway().registry.idle())
        .await
        .expect("connections finish");
    let input: Vec<_> = saved
        .iter()
        .filter(|(n, _)| n.contains("_input_"))
        .collect();
    let output: Vec<_> = saved
        .iter()
        .filter(|(n, _)| n.contains("_output_"))
        .collect();
    assert!(!input.is_empty() && !output.is_empty(), "{saved:?}");

    // In the bucket, under the prefix, in the file store's layout.
    let stored = keys(&endpoint, &bucket, "recordings/livegate/u1/s1/").await;
    for (name, version) in &saved {
        let key = format!("recordings/livegate/u1/s1/{name}/{version}");
        assert!(stored.contains(&key), "{key} in {stored:?}");
    }
    let spool = node_a.gateway().runner.artifacts.spool_dir().unwrap();
    assert!(
        spool.starts_with(dir.path().join("spool")),
        "on the data disk"
    );
    let left = std::fs::read_dir(spool).map_or(0, |d| d.count());
    assert_eq!(left, 0, "no spool file left behind");
    node_a.shutdown(WAIT).await;

    // Node B, sharing the database and the bucket, serves them byte for byte.
    let node_b = start_on_s3(args, &endpoint, &store, dir.path()).await;
    for (name, version) in &saved {
        assert!(!download(node_b.addr, name, *version).await.is_empty());
    }
    let (input_bytes, output_bytes) = recorded_over_rest(node_b.addr).await;
    assert_eq!(input_bytes, pcm.len(), "every byte sent was recorded");
    assert_eq!(output_bytes, received, "every byte received was recorded");
    node_b.shutdown(WAIT).await;
}

/// A TCP relay to the S3 server that can be cut: while down it drops every connection, open or
/// new, as a server that stopped or a network that failed would.
struct Relay {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(to: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        let accept = tokio::spawn({
            let up = up.clone();
            let connections = connections.clone();
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if !up.load(Ordering::SeqCst) {
                        continue;
                    }
                    let mut guard = connections.lock().unwrap();
                    guard.spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(to).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                }
            }
        });
        Relay {
            addr,
            up,
            connections,
            accept,
        }
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            self.connections.lock().unwrap().abort_all();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.connections.lock().unwrap().abort_all();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upload_keeps_the_recording_on_disk_and_saves_it_later() {
    let Some((endpoint, bucket)) = s3_bucket().await else {
        return;
    };
    let target: SocketAddr = endpoint
        .trim_start_matches("http://")
        .parse()
        .expect("LIVEGATE_TEST_S3_ENDPOINT is http://IP:PORT");
    let relay = Relay::start(target).await;
    let store = format!("s3://{bucket}/outage");
    let data = tempfile::tempdir().unwrap();
    let relay_url = format!("http://{}", relay.addr);
    let server = start_on_s3(test_args(), &relay_url, &store, data.path()).await;
    let spool = server
        .gateway()
        .runner
        .artifacts
        .spool_dir()
        .unwrap()
        .to_path_buf();

    // The bucket is out of reach for the whole first turn.
    relay.set_up(false);
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    let mut first = fixture_pcm("count.wav");
    first.extend(silence(1000));
    client.stream_pcm(&first).await;
    let events = client.events_until_turn_complete().await;
    let errors: Vec<_> = events
        .iter()
        .filter(|e| e["errorCode"] == "UNAVAILABLE")
        .collect();
    assert!(!errors.is_empty(), "the client is told: {events:?}");
    assert!(recordings(&events).is_empty(), "nothing saved: {events:?}");
    let held = std::fs::read_dir(&spool).unwrap().count();
    assert!(held >= 1, "the spooled recording waits on local disk");
    assert!(keys(&endpoint, &bucket, "outage/").await.is_empty());

    // Back: the next turn's flush saves the held recordings first, then its own.
    relay.set_up(true);
    let mut second = fixture_pcm("hello.wav");
    second.extend(silence(1000));
    client.stream_pcm(&second).await;
    client.events_until_turn_complete().await;
    let saved = recordings(&client.events);
    client.close().await;
    tokio::time::timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("connections finish");
    let (input, _) = recorded_over_rest(server.addr).await;
    // Everything up to the second turn's end is recorded. Of the silence after it, what reached
    // the flow after that turn's recording was cut is the session's silent tail, which is never
    // a recording: how much of it there is depends on how busy the machine is.
    let tail = silence(1000).len();
    let sent = first.len() + second.len();
    assert!(
        (sent - tail..=sent).contains(&input),
        "both turns' input recorded whole: {input} of {sent} bytes: {saved:?}"
    );
    assert_eq!(
        std::fs::read_dir(&spool).unwrap().count(),
        0,
        "spool files gone"
    );
    server.shutdown(WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recordings_a_run_could_not_save_are_saved_once_the_bucket_is_back() {
    let Some((endpoint, bucket)) = s3_bucket().await else {
        return;
    };
    let target: SocketAddr = endpoint
        .trim_start_matches("http://")
        .parse()
        .expect("LIVEGATE_TEST_S3_ENDPOINT is http://IP:PORT");
    let relay = Relay::start(target).await;
    let store = format!("s3://{bucket}/later");
    let data = tempfile::tempdir().unwrap();
    let relay_url = format!("http://{}", relay.addr);
    let server = start_on_s3(test_args(), &relay_url, &store, data.path()).await;
    let outbox = data.path().join("spool").join("outbox");

    // The bucket is out of reach for the whole session: its run ends with nothing saved.
    relay.set_up(false);
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    let events = client.events_until_turn_complete().await;
    assert!(events.iter().any(|e| e["errorCode"] == "UNAVAILABLE"));
    let received = client.audio_bytes;
    client.close().await;
    tokio::time::timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("connections finish");
    assert_eq!(waiting(&outbox), 2, "both sides wait on local disk");
    assert!(keys(&endpoint, &bucket, "later/").await.is_empty());

    // Back: the gateway saves them by itself.
    relay.set_up(true);
    eventually(
        WAIT,
        "the outbox empties once the bucket is back",
        || async { std::fs::read_dir(&outbox).map_or(0, |d| d.count()) == 0 },
    )
    .await;
    let (input, output) = recorded_over_rest(server.addr).await;
    assert_eq!(input, pcm.len(), "the input recording, whole");
    assert_eq!(output, received, "the output recording, whole");
    server.shutdown(WAIT).await;
}

/// Recordings waiting in an outbox folder: their entries (each beside its bytes), which go
/// last when a recording is saved.
fn waiting(outbox: &std::path::Path) -> usize {
    std::fs::read_dir(outbox).map_or(0, |d| {
        d.flatten()
            .filter(|f| f.path().extension().is_some_and(|e| e == "json"))
            .count()
    })
}

/// True when no store holds an entry of the outbox (the lock on each is free).
fn unlocked(outbox: &std::path::Path) -> bool {
    std::fs::read_dir(outbox).map_or(true, |d| {
        d.flatten()
            .filter(|f| f.path().extension().is_some_and(|e| e == "json"))
            .all(|f| {
                std::fs::File::open(f.path()).is_ok_and(|file| {
                    let free = rustix::fs::FlockOperation::NonBlockingLockExclusive;
                    rustix::fs::flock(&file, free).is_ok()
                })
            })
    })
}

/// Versions of every recording of session `u1/s1` in the bucket, from its listing.
async fn versions_in_bucket(endpoint: &str, bucket: &str, prefix: &str) -> Vec<String> {
    keys(endpoint, bucket, &format!("{prefix}/livegate/u1/s1/"))
        .await
        .into_iter()
        .filter(|k| {
            k.rsplit('/')
                .next()
                .is_some_and(|v| v.parse::<u64>().is_ok())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recordings_a_stopped_process_left_in_its_outbox_are_saved_by_the_next() {
    let Some((endpoint, bucket)) = s3_bucket().await else {
        return;
    };
    let target: SocketAddr = endpoint
        .trim_start_matches("http://")
        .parse()
        .expect("LIVEGATE_TEST_S3_ENDPOINT is http://IP:PORT");
    let relay = Relay::start(target).await;
    let store = format!("s3://{bucket}/restart");
    let data = tempfile::tempdir().unwrap();
    let mut args = test_args();
    // The session outlives the first process for the second's REST API.
    args.session_store = Some(format!("sqlite://{}", data.path().join("s.db").display()));
    let relay_url = format!("http://{}", relay.addr);
    let outbox = data.path().join("spool").join("outbox");

    // The bucket is out of reach for the first process's whole life.
    relay.set_up(false);
    let first = start_on_s3(args.clone(), &relay_url, &store, data.path()).await;
    let mut client = Client::connect(first.addr, "u1", "s1", "").await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    let events = client.events_until_turn_complete().await;
    assert!(events.iter().any(|e| e["errorCode"] == "UNAVAILABLE"));
    let received = client.audio_bytes;
    client.close().await;
    tokio::time::timeout(WAIT, first.gateway().registry.idle())
        .await
        .expect("connections finish");
    first.shutdown(WAIT).await;
    assert_eq!(
        waiting(&outbox),
        2,
        "both sides outlive the process on disk"
    );
    // Gone, its store lets go of them once an upload it may be trying has failed.
    eventually(WAIT, "a stopped store lets go of its outbox", || async {
        unlocked(&outbox)
    })
    .await;

    // Another store on the same folder while the first entries are held: it leaves them alone.
    let entries: Vec<_> = std::fs::read_dir(&outbox)
        .unwrap()
        .flatten()
        .map(|f| f.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(entries.len(), 2);
    let held = std::fs::File::open(&entries[0]).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();

    // The bucket is back, and the next process starts on the same folder.
    relay.set_up(true);
    let second = start_on_s3(args, &relay_url, &store, data.path()).await;
    eventually(WAIT, "the entry nobody held is saved", || async {
        waiting(&outbox) <= 1
    })
    .await;
    assert!(entries[0].exists(), "the held entry is left to its holder");
    assert_eq!(
        versions_in_bucket(&endpoint, &bucket, "restart")
            .await
            .len(),
        1
    );
    second.shutdown(WAIT).await;

    // Its holder gone, a third process takes it up: each recording saved once, whole.
    drop(held);
    let third = start_on_s3(test_args_on(&data), &relay_url, &store, data.path()).await;
    eventually(WAIT, "the outbox empties", || async {
        waiting(&outbox) == 0
    })
    .await;
    assert_eq!(
        versions_in_bucket(&endpoint, &bucket, "restart")
            .await
            .len(),
        2,
        "one version per recording"
    );
    let (input, output) = recorded_over_rest(third.addr).await;
    assert_eq!(input, pcm.len(), "the input recording, whole");
    assert_eq!(output, received, "the output recording, whole");
    third.shutdown(WAIT).await;
}

/// Test settings whose sessions live in SQLite inside `data`.
fn test_args_on(data: &tempfile::TempDir) -> ServeArgs {
    let mut args = test_args();
    args.session_store = Some(format!("sqlite://{}", data.path().join("s.db").display()));
    args
}

/// Multipart uploads in progress in the bucket: `(key, upload id)`.
async fn uploads_in_progress(endpoint: &str, bucket: &str) -> Vec<(String, String)> {
    let listing = reqwest::get(format!("{endpoint}/{bucket}?uploads"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let field = |upload: &str, name: &str| {
        let open = format!("<{name}>");
        let close = format!("</{name}>");
        upload
            .split_once(&open)
            .and_then(|(_, rest)| rest.split_once(&close))
            .map(|(value, _)| value.to_owned())
    };
    listing
        .split("<Upload>")
        .skip(1)
        .filter_map(|upload| Some((field(upload, "Key")?, field(upload, "UploadId")?)))
        .collect()
}

/// Parts uploaded so far in a multipart upload.
async fn parts_uploaded(endpoint: &str, bucket: &str, key: &str, upload_id: &str) -> usize {
    // The key as listed, escaped for a URL path (the store's keys may hold `%`).
    let key = key.replace('%', "%25").replace('#', "%23");
    let listing = reqwest::get(format!("{endpoint}/{bucket}/{key}?uploadId={upload_id}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    listing.matches("<PartNumber>").count()
}

/// Pushes `bytes` of answer audio in 40 ms chunks of 24 kHz, each different, and keeps a copy.
fn answer(cache: &livegate::live::flow::AudioCache, recorded: &mut Vec<u8>, bytes: usize) {
    for _ in 0..bytes / 1920 {
        let n = recorded.len() / 1920;
        let chunk = vec![(n % 251) as u8; 1920];
        recorded.extend_from_slice(&chunk);
        let blob = livegate::event::Blob {
            data: chunk.into(),
            mime_type: "audio/pcm;rate=24000".into(),
            ..Default::default()
        };
        cache.push(livegate::live::flow::AudioSide::Output, &blob);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_recordings_parts_go_up_while_its_turn_runs() {
    use livegate::artifact::{ArtifactScope, ArtifactService, ObjectArtifactService, PART_BYTES};
    use livegate::live::flow::{AudioCache, RecordingTarget};

    let Some((endpoint, bucket)) = s3_bucket().await else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let store: Arc<dyn ArtifactService> = Arc::new(
        ObjectArtifactService::open_with(
            &format!("s3://{bucket}/long"),
            [
                ("aws_endpoint", endpoint.as_str()),
                ("aws_allow_http", "true"),
                ("aws_access_key_id", "test"),
                ("aws_secret_access_key", "test"),
                ("aws_region", "us-east-1"),
            ],
        )
        .unwrap()
        .with_spool_root(data.path()),
    );
    // The live flow's recorder, as a run makes it.
    let cache = AudioCache::new(store.spool_dir().cloned());
    let mut recorded = Vec::new();

    // The answer streams on (64 KiB at a time) until its first part is in the bucket, which
    // must happen well before the turn ends.
    let during = tokio::time::timeout(WAIT, async {
        loop {
            answer(&cache, &mut recorded, 64 * 1024);
            assert!(
                recorded.len() < 3 * PART_BYTES,
                "no part went up during three parts' worth of a turn"
            );
            if recorded.len() <= PART_BYTES {
                continue;
            }
            for (key, id) in uploads_in_progress(&endpoint, &bucket).await {
                if parts_uploaded(&endpoint, &bucket, &key, &id).await > 0 {
                    return key;
                }
            }
        }
    })
    .await
    .expect("a part is in the bucket before the turn ends");
    assert!(during.contains("staging"), "{during}");

    // The rest of the answer, then the turn ends: one recording, every byte.
    answer(&cache, &mut recorded, PART_BYTES / 2);
    let target = RecordingTarget {
        artifacts: Some(store.clone()),
        app_name: "livegate".into(),
        user_id: "u1".into(),
        session_id: "s1".into(),
        invocation_id: "e-1".into(),
        agent_name: "agent".into(),
    };
    let events = cache.flush(&target, true, true).await;
    let saved = recordings(
        &events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect::<Vec<_>>(),
    );
    assert_eq!(saved.len(), 1, "{events:?}");
    let scope = ArtifactScope {
        app_name: "livegate",
        user_id: "u1",
        session_id: "s1",
    };
    let (name, version) = &saved[0];
    let artifact = store
        .load(scope, name, Some(*version))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(artifact.data.len(), recorded.len());
    assert!(
        artifact.data == recorded,
        "the saved bytes are the recorded ones"
    );
    assert_eq!(artifact.mime_type, "audio/pcm;rate=24000");
    assert!(
        uploads_in_progress(&endpoint, &bucket).await.is_empty(),
        "the upload is complete"
    );
    let staged = keys(&endpoint, &bucket, "long/").await;
    assert!(
        staged.iter().all(|k| !k.contains("staging")),
        "nothing staged is left: {staged:?}"
    );
}

/// A gateway whose bucket accepts connections and never answers, its saves bounded by `bound`,
/// spooling in `data`.
async fn start_on_black_hole(data: &std::path::Path, bound: Duration) -> livegate::gateway::Server {
    let hole = black_hole().await;
    let mut args = test_args();
    args.recording_save_timeout = bound;
    start_on_s3(args, &format!("http://{hole}"), "s3://silent/rec", data).await
}

/// Speaks a turn on `client` and reads up to its end: the events, and how long the end took
/// after the last audio frame went out.
async fn spoken_turn(client: &mut Client) -> (Vec<Value>, Duration) {
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    let sent = Instant::now();
    let events = client.events_until_turn_complete().await;
    (events, sent.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_that_never_answers_holds_a_turn_no_longer_than_the_save_timeout() {
    let data = tempfile::tempdir().unwrap();
    let bound = Duration::from_secs(2);
    let server = start_on_black_hole(data.path(), bound).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    let (events, waited) = spoken_turn(&mut client).await;
    assert!(
        events.iter().any(|e| e["errorCode"] == "UNAVAILABLE"),
        "the client is told: {events:?}"
    );
    // Each of the turn's flushes waits at most the bound (its recordings are saved at once).
    assert!(
        waited < bound * 2 + Duration::from_secs(6),
        "turnComplete after {waited:?}"
    );
    client.close().await;
    tokio::time::timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("connections finish");
    let outbox = data.path().join("spool").join("outbox");
    assert_eq!(waiting(&outbox), 2, "both recordings are kept for later");
    server.shutdown(WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recordings_failure_is_told_once_and_never_stored_in_the_history() {
    let data = tempfile::tempdir().unwrap();
    let server = start_on_black_hole(data.path(), Duration::from_secs(1)).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    let mut told = Vec::new();
    for _ in 0..3 {
        let (events, _) = spoken_turn(&mut client).await;
        told.push(
            events
                .iter()
                .filter(|e| e["errorCode"] == "UNAVAILABLE")
                .count(),
        );
    }
    // The held recordings are tried again at every turn's end, silently: each turn tells of
    // its own recordings only, never of the earlier ones again.
    assert!(told.iter().all(|n| *n <= 2), "errors per turn: {told:?}");
    assert!(told.iter().sum::<usize>() >= 3, "errors per turn: {told:?}");
    client.close().await;
    tokio::time::timeout(WAIT, server.gateway().registry.idle())
        .await
        .expect("connections finish");
    let page: Value = reqwest::get(format!(
        "http://{}/api/sessions/u1/s1?limit=1000",
        server.addr
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let events = page["events"].as_array().expect("events");
    assert!(!events.is_empty());
    let stored: Vec<_> = events
        .iter()
        .filter(|e| !e["errorCode"].is_null())
        .collect();
    assert!(stored.is_empty(), "notices are not history: {stored:?}");
    server.shutdown(WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_not_ready_while_the_spool_disk_is_full() {
    let Some(disk) = Tmpfs::mount("1m") else {
        return;
    };
    let hole = black_hole().await;
    let mut args = test_args();
    args.spool_dir = Some(disk.path().join("spool"));
    let data = tempfile::tempdir().unwrap();
    let server = start_on_s3(
        args,
        &format!("http://{hole}"),
        "s3://silent/ready",
        data.path(),
    )
    .await;
    let readyz = || async { http_get(server.addr, "/readyz").await };
    let filler = disk.fill();
    // The answer is cached for a second: poll (bounded) for one that has seen the disk.
    let full = eventually(WAIT, "not ready for its spool disk", || async {
        let answer = readyz().await;
        answer.contains("spool folder").then_some(answer)
    })
    .await;
    assert!(full.starts_with("HTTP/1.1 503"), "{full}");
    std::fs::remove_file(filler).unwrap();
    eventually(
        WAIT,
        "the spool disk counts as writable once it has room",
        || async { !readyz().await.contains("spool folder") },
    )
    .await;
    server.shutdown(WAIT).await;
    drop(disk);
}
