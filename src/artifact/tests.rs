//! One conformance suite run against every artifact backend.

use bytes::Bytes;

use super::*;

fn audio(data: &'static [u8]) -> Artifact {
    Artifact {
        data: Bytes::from_static(data),
        mime_type: "audio/pcm;rate=16000".into(),
    }
}

fn json(data: &'static [u8]) -> Artifact {
    Artifact {
        data: Bytes::from_static(data),
        mime_type: "application/json".into(),
    }
}

const S1: ArtifactScope<'static> = ArtifactScope {
    app_name: "app",
    user_id: "u1",
    session_id: "s1",
};
const S2: ArtifactScope<'static> = ArtifactScope {
    app_name: "app",
    user_id: "u1",
    session_id: "s2",
};
const OTHER_USER: ArtifactScope<'static> = ArtifactScope {
    app_name: "app",
    user_id: "u2",
    session_id: "s1",
};

async fn conformance(svc: &dyn ArtifactService) {
    // Versions start at 0; latest and specific versions load with their mime type.
    assert!(svc.list_versions(S1, "rec.pcm").await.unwrap().is_empty());
    assert_eq!(svc.load(S1, "rec.pcm", None).await.unwrap(), None);
    assert_eq!(svc.save(S1, "rec.pcm", audio(b"ab")).await.unwrap(), 0);
    assert_eq!(svc.save(S1, "rec.pcm", json(b"cdef")).await.unwrap(), 1);
    assert_eq!(svc.list_versions(S1, "rec.pcm").await.unwrap(), vec![0, 1]);
    assert_eq!(
        svc.load(S1, "rec.pcm", None).await.unwrap(),
        Some(json(b"cdef"))
    );
    assert_eq!(
        svc.load(S1, "rec.pcm", Some(0)).await.unwrap(),
        Some(audio(b"ab")),
        "bytes and mime type kept per version"
    );
    assert_eq!(svc.load(S1, "rec.pcm", Some(7)).await.unwrap(), None);
    // What a listing shows: every version, and the latest one's type and size.
    let info = svc.describe(S1, "rec.pcm").await.unwrap().unwrap();
    assert_eq!(info.versions, vec![0, 1]);
    assert_eq!(
        (info.mime_type, info.size),
        (json(b"").mime_type, 4),
        "the latest version's"
    );
    assert_eq!(svc.describe(S1, "missing.pcm").await.unwrap(), None);
    let empty = Artifact {
        data: Bytes::new(),
        mime_type: "text/plain".into(),
    };
    assert_eq!(svc.save(S1, "empty.txt", empty.clone()).await.unwrap(), 0);
    assert_eq!(
        svc.load(S1, "empty.txt", None).await.unwrap(),
        Some(empty),
        "an empty artifact is still a version"
    );

    // Session scope vs user scope.
    assert_eq!(svc.load(S2, "rec.pcm", None).await.unwrap(), None);
    assert!(svc.list_versions(S2, "rec.pcm").await.unwrap().is_empty());
    assert_eq!(
        svc.save(S1, "user:profile.json", json(b"{}"))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        svc.save(S2, "user:profile.json", json(b"{\"a\":1}"))
            .await
            .unwrap(),
        1,
        "one version sequence across the user's sessions"
    );
    assert_eq!(
        svc.load(S1, "user:profile.json", Some(1)).await.unwrap(),
        Some(json(b"{\"a\":1}"))
    );
    assert_eq!(
        svc.load(OTHER_USER, "user:profile.json", None)
            .await
            .unwrap(),
        None,
        "user scope is per user"
    );
    let sessionless = ArtifactScope {
        session_id: "",
        ..S1
    };
    assert_eq!(
        svc.list_versions(sessionless, "user:profile.json")
            .await
            .unwrap(),
        vec![0, 1],
        "user: names need no session"
    );
    svc.save(S2, "zeta", audio(b"z")).await.unwrap();
    svc.save(S2, "a:b c", audio(b"z")).await.unwrap();
    assert_eq!(
        svc.list_names(S1).await.unwrap(),
        vec!["empty.txt", "rec.pcm", "user:profile.json"]
    );
    assert_eq!(
        svc.list_names(S2).await.unwrap(),
        vec!["a:b c", "user:profile.json", "zeta"]
    );
    assert!(svc.list_names(OTHER_USER).await.unwrap().is_empty());

    // Delete removes every version; deleting a missing artifact is fine; numbering restarts.
    svc.delete(S1, "rec.pcm").await.unwrap();
    svc.delete(S1, "rec.pcm").await.unwrap();
    svc.delete(S1, "never-saved").await.unwrap();
    assert_eq!(svc.load(S1, "rec.pcm", None).await.unwrap(), None);
    assert_eq!(svc.load(S1, "rec.pcm", Some(0)).await.unwrap(), None);
    assert!(svc.list_versions(S1, "rec.pcm").await.unwrap().is_empty());
    assert_eq!(
        svc.list_names(S1).await.unwrap(),
        vec!["empty.txt", "user:profile.json"]
    );
    assert_eq!(svc.save(S1, "rec.pcm", audio(b"new")).await.unwrap(), 0);
    svc.delete(S2, "user:profile.json").await.unwrap();
    assert_eq!(
        svc.list_names(S1).await.unwrap(),
        vec!["empty.txt", "rec.pcm"]
    );

    // Rejected names, for every operation.
    for bad in [
        "../x",
        "a/b",
        "",
        ".",
        "..",
        "a\\b",
        "nul\0",
        "tab\t",
        "user:",
        "user:..",
        "user:../x",
        "user:a/b",
    ] {
        let invalid =
            |r: Result<(), ArtifactError>| matches!(r, Err(ArtifactError::InvalidName(_)));
        assert!(
            invalid(svc.save(S1, bad, audio(b"x")).await.map(drop)),
            "{bad:?}"
        );
        assert!(invalid(svc.load(S1, bad, None).await.map(drop)), "{bad:?}");
        assert!(
            invalid(svc.list_versions(S1, bad).await.map(drop)),
            "{bad:?}"
        );
        assert!(invalid(svc.delete(S1, bad).await), "{bad:?}");
    }
    assert!(matches!(
        svc.save(S1, &"x".repeat(256), audio(b"x")).await,
        Err(ArtifactError::InvalidName(_))
    ));
    assert_eq!(
        svc.save(S1, &"x".repeat(255), audio(b"x")).await.unwrap(),
        0
    );

    // Rejected scope ids.
    let long = "a".repeat(129);
    let bad_scopes = [
        ("", "u1", "s1"),
        ("..", "u1", "s1"),
        ("app", ".", "s1"),
        ("app", "..", "s1"),
        ("app", "u/1", "s1"),
        ("app", "u1", ""),
        ("app", "u1", "../../etc"),
        ("app", "u1", "s 1"),
        ("app", "u1", "s\\1"),
        ("app", "u1", long.as_str()),
        ("a/pp", "u1", "s1"),
    ];
    for (app_name, user_id, session_id) in bad_scopes {
        let scope = ArtifactScope {
            app_name,
            user_id,
            session_id,
        };
        let invalid =
            |r: Result<(), ArtifactError>| matches!(r, Err(ArtifactError::InvalidArgument(_)));
        assert!(
            invalid(svc.save(scope, "x", audio(b"x")).await.map(drop)),
            "{scope:?}"
        );
        assert!(
            invalid(svc.load(scope, "x", None).await.map(drop)),
            "{scope:?}"
        );
        assert!(invalid(svc.list_names(scope).await.map(drop)), "{scope:?}");
        assert!(
            invalid(svc.list_versions(scope, "x").await.map(drop)),
            "{scope:?}"
        );
        assert!(invalid(svc.delete(scope, "x").await), "{scope:?}");
    }
    let ok = ArtifactScope {
        app_name: "my_app-1.0",
        user_id: "someone@example.com",
        session_id: &"s".repeat(128),
    };
    assert_eq!(svc.save(ok, "x", audio(b"x")).await.unwrap(), 0);
    let colon = ArtifactScope {
        session_id: "e:1",
        ..ok
    };
    assert_eq!(svc.save(colon, "x", audio(b"x")).await.unwrap(), 0);

    // Concurrent saves of one artifact get distinct versions.
    let saves = (0..8).map(|_| svc.save(S2, "race", audio(b"r")));
    let mut versions: Vec<u64> = futures::future::join_all(saves)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    versions.sort_unstable();
    assert_eq!(versions, (0..8).collect::<Vec<_>>());
    assert_eq!(
        svc.list_versions(S2, "race").await.unwrap(),
        (0..8).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn in_memory_store_conforms() {
    conformance(&InMemoryArtifactService::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_store_conforms_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("nested/artifacts");
    let svc = FileArtifactService::open(&root).await.unwrap();
    conformance(&svc).await;

    // Layout, and nothing escapes the root.
    assert!(root.join("app/u1/s1/rec.pcm/0").is_file());
    assert!(root.join("app/u1/s1/rec.pcm/0.meta.json").is_file());
    assert!(root.join("app/u1/_user").is_dir());
    assert!(!dir.path().join("etc").exists() && !dir.path().join("x").exists());
    let reserved = ArtifactScope {
        session_id: "_user",
        ..S1
    };
    assert!(matches!(
        svc.save(reserved, "x", audio(b"x")).await,
        Err(ArtifactError::InvalidArgument(_))
    ));

    // A crash's leftovers (a temp file, an orphan sidecar, an empty folder) are not versions.
    let leftovers = root.join("app/u1/s2/crashed");
    std::fs::create_dir_all(&leftovers).unwrap();
    std::fs::write(leftovers.join(".tmp-123"), b"half").unwrap();
    std::fs::write(leftovers.join("0.meta.json"), b"{\"mime").unwrap();
    std::fs::create_dir_all(root.join("app/u1/s2/empty")).unwrap();
    assert!(svc.list_versions(S2, "crashed").await.unwrap().is_empty());
    assert_eq!(svc.load(S2, "crashed", None).await.unwrap(), None);
    assert!(!svc
        .list_names(S2)
        .await
        .unwrap()
        .contains(&"crashed".into()));
    assert!(!svc.list_names(S2).await.unwrap().contains(&"empty".into()));
    assert_eq!(svc.save(S2, "crashed", audio(b"ok")).await.unwrap(), 1);
    assert_eq!(svc.list_versions(S2, "crashed").await.unwrap(), vec![1]);
    // A folder that already exists is read for its highest version, never assumed new.
    let gap = root.join("app/u1/s2/gap");
    std::fs::create_dir_all(&gap).unwrap();
    std::fs::write(gap.join("3"), b"v3").unwrap();
    std::fs::write(gap.join("3.meta.json"), b"{\"mimeType\":\"audio/pcm\"}").unwrap();
    assert_eq!(svc.save(S2, "gap", audio(b"v4")).await.unwrap(), 4);

    // A version whose sidecar is lost still loads, as generic bytes.
    svc.save(S2, "bare", audio(b"b")).await.unwrap();
    std::fs::remove_file(root.join("app/u1/s2/bare/0.meta.json")).unwrap();
    assert_eq!(
        svc.load(S2, "bare", None).await.unwrap().unwrap().mime_type,
        "application/octet-stream"
    );

    // Durable across a reopen.
    svc.save(S2, "keep.pcm", audio(b"kk")).await.unwrap();
    drop(svc);
    let reopened = FileArtifactService::open(&root).await.unwrap();
    assert_eq!(
        reopened.load(S2, "keep.pcm", None).await.unwrap(),
        Some(audio(b"kk"))
    );
    assert_eq!(
        reopened.save(S2, "keep.pcm", audio(b"k2")).await.unwrap(),
        1
    );
    assert_eq!(
        reopened.list_names(S1).await.unwrap(),
        vec!["empty.txt", "rec.pcm", "x".repeat(255).as_str()]
    );
}

#[tokio::test]
async fn store_urls_open_the_right_backend() {
    let dir = tempfile::tempdir().unwrap();
    let memory = open_artifact_service("memory:").await.unwrap();
    assert_eq!(memory.save(S1, "a", audio(b"a")).await.unwrap(), 0);
    let root = dir.path().join("store");
    let files = open_artifact_service(&format!("file://{}", root.display()))
        .await
        .unwrap();
    assert_eq!(files.save(S1, "a", audio(b"a")).await.unwrap(), 0);
    assert!(root.join("app/u1/s1/a/0").is_file());
    for unsupported in ["ftp://bucket", "s3://", "s3:///prefix", "gs://"] {
        assert!(
            matches!(
                open_artifact_service(unsupported).await,
                Err(ArtifactError::InvalidArgument(_))
            ),
            "{unsupported}"
        );
    }
    // A bucket opens without a request (credentials are only asked for by the first one).
    let bucket = ObjectArtifactService::open_with(
        "s3://bucket/some/prefix",
        [
            ("aws_access_key_id", "id"),
            ("aws_secret_access_key", "secret"),
        ],
    )
    .unwrap();
    let shown = format!("{bucket:?}");
    assert!(shown.contains("s3://bucket/some/prefix"), "{shown}");
    assert!(
        !shown.contains("secret"),
        "credentials never shown: {shown}"
    );
    assert!(matches!(
        ObjectArtifactService::open_with("s3://bucket", [("no_such_setting", "x")]),
        Err(ArtifactError::InvalidArgument(_))
    ));
    assert!(matches!(
        open_artifact_service("file://").await,
        Err(ArtifactError::InvalidArgument(_))
    ));
}

/// Fills a spool in `dir` with `pieces`, appended one call each.
fn spooled(dir: &std::path::Path, pieces: &[&'static [u8]]) -> SpoolFile {
    let mut spool = SpoolFile::create(&dir.into()).unwrap();
    for piece in pieces {
        let chunks = [Bytes::from_static(piece), Bytes::from_static(b"|")];
        spool.append(&chunks).unwrap();
    }
    spool
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spooled_save_moves_the_file_in_as_the_next_version() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let svc = FileArtifactService::open(&root).await.unwrap();
    let spool_dir = svc.spool_dir().unwrap().to_path_buf();
    assert!(spool_dir.starts_with(&root) && spool_dir.is_dir());
    svc.save(S1, "rec.pcm", audio(b"v0")).await.unwrap();

    let spool = spooled(&spool_dir, &[b"ab", b"cde"]);
    assert_eq!(spool.len(), 7);
    let version = svc
        .save_spooled(S1, "rec.pcm", "audio/pcm;rate=16000".into(), spool)
        .await
        .unwrap();
    assert_eq!(version, 1);
    assert_eq!(
        svc.load(S1, "rec.pcm", None).await.unwrap(),
        Some(audio(b"ab|cde|"))
    );
    assert_eq!(
        std::fs::read_dir(&spool_dir).unwrap().count(),
        0,
        "moved, not copied"
    );

    // A bad name gives the spool back, whole, and a dropped spool leaves no file.
    let spool = spooled(&spool_dir, &[b"keep"]);
    let (error, spool) = svc
        .save_spooled(S1, "../x", "audio/pcm".into(), spool)
        .await
        .unwrap_err();
    assert!(matches!(error, ArtifactError::InvalidName(_)));
    assert_eq!(spool.len(), 5);
    assert_eq!(std::fs::read_dir(&spool_dir).unwrap().count(), 1);
    drop(spool);
    assert_eq!(std::fs::read_dir(&spool_dir).unwrap().count(), 0);

    // A spool folder removed behind the store's back comes back with the next spool.
    std::fs::remove_dir(&spool_dir).unwrap();
    assert_eq!(spooled(&spool_dir, &[b"again"]).len(), 6);

    // A second store on the same root (another process) has a spool folder of its own, and
    // leaves this one's alone.
    let beside = FileArtifactService::open(&root).await.unwrap();
    assert_ne!(beside.spool_dir().unwrap().path(), spool_dir.as_path());
    let live = spooled(&spool_dir, &[b"live"]);
    drop(beside);
    let _third = FileArtifactService::open(&root).await.unwrap();
    assert_eq!(live.read().await.unwrap(), b"live|");
    assert!(spool_dir.is_dir(), "a live store's spool folder stays");
    drop(live);

    // Spool files a stopped process left behind are swept when the next store opens.
    std::mem::forget(spooled(&spool_dir, &[b"orphan"]));
    drop(svc);
    let reopened = FileArtifactService::open(&root).await.unwrap();
    assert!(!spool_dir.exists(), "swept");
    assert_eq!(reopened.list_names(S1).await.unwrap(), vec!["rec.pcm"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_files_saves_a_spool_by_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let svc = InMemoryArtifactService::default();
    assert!(svc.spool_dir().is_none());
    let spool = spooled(dir.path(), &[b"xy", b"z"]);
    assert_eq!(
        svc.save_spooled(S1, "rec.pcm", "audio/pcm;rate=16000".into(), spool)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        svc.load(S1, "rec.pcm", None).await.unwrap(),
        Some(audio(b"xy|z|"))
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// An object store over `object_store`'s in-memory bucket, spooling in `dir`.
fn in_memory_bucket(dir: &std::path::Path) -> ObjectArtifactService {
    ObjectArtifactService::with_store(
        std::sync::Arc::new(object_store::memory::InMemory::new()),
        object_store::path::Path::from("deploy/recordings"),
        dir.join("spool"),
        "memory-bucket".into(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_folders_a_stopped_process_left_are_swept_and_a_live_stores_kept() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("spool").join("live");
    let running = in_memory_bucket(dir.path());
    let recording = spooled(running.spool_dir().unwrap(), &[b"being recorded"]);
    // What a process killed mid-recording leaves: its folder, and a lock no one holds.
    let crashed = live.join(uuid::Uuid::new_v4().to_string());
    std::fs::create_dir_all(&crashed).unwrap();
    std::fs::write(crashed.join("spool-1"), b"never saved").unwrap();
    std::fs::write(crashed.with_extension("lock"), b"").unwrap();

    let next = in_memory_bucket(dir.path());
    assert!(!crashed.exists(), "the stopped process's folder is swept");
    assert!(!crashed.with_extension("lock").exists());
    assert_eq!(
        recording.len(),
        15,
        "the running store's recording is untouched"
    );
    assert!(running.spool_dir().unwrap().exists());
    let next_folder = next.spool_dir().unwrap().to_path_buf();
    drop(next);
    assert!(!next_folder.exists() && !next_folder.with_extension("lock").exists());
    drop(recording);
    drop(running);
    assert_eq!(std::fs::read_dir(&live).unwrap().count(), 0, "nothing left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_store_conforms_over_an_in_memory_bucket() {
    let dir = tempfile::tempdir().unwrap();
    conformance(&in_memory_bucket(dir.path())).await;
}

/// Saves spools into `svc` (one at a time) and checks they come back whole: one that fits in a
/// part, one uploaded in several parts; the spool files are gone once saved.
async fn spooled_saves_stream_from_disk(svc: &dyn ArtifactService) {
    let spool_dir = svc.spool_dir().unwrap().clone();
    let small = spooled(&spool_dir, &[b"ab", b"cde"]);
    let version = svc
        .save_spooled(S1, "rec.pcm", "audio/pcm;rate=16000".into(), small)
        .await
        .unwrap();
    assert_eq!(version, 0);
    assert_eq!(
        svc.load(S1, "rec.pcm", None).await.unwrap(),
        Some(audio(b"ab|cde|"))
    );

    // Two and a half parts, each byte telling where it is.
    let big: Vec<u8> = (0..PART_BYTES * 5 / 2).map(|i| (i % 251) as u8).collect();
    let mut spool = SpoolFile::create(&spool_dir).unwrap();
    for piece in big.chunks(1 << 20) {
        spool.append(&[Bytes::copy_from_slice(piece)]).unwrap();
    }
    let version = svc
        .save_spooled(S1, "rec.pcm", "audio/pcm;rate=24000".into(), spool)
        .await
        .unwrap();
    assert_eq!(version, 1);
    let loaded = svc.load(S1, "rec.pcm", Some(1)).await.unwrap().unwrap();
    assert_eq!(loaded.mime_type, "audio/pcm;rate=24000");
    assert!(loaded.data == big, "the parts come back in order, whole");
    assert_eq!(svc.list_versions(S1, "rec.pcm").await.unwrap(), vec![0, 1]);
    assert_eq!(
        std::fs::read_dir(&spool_dir).unwrap().count(),
        0,
        "uploaded spools leave the disk"
    );

    // A bad name gives the spool back, whole, still on disk.
    let spool = spooled(&spool_dir, &[b"keep"]);
    let (error, spool) = svc
        .save_spooled(S1, "../x", "audio/pcm".into(), spool)
        .await
        .unwrap_err();
    assert!(matches!(error, ArtifactError::InvalidName(_)));
    assert_eq!(spool.read().await.unwrap(), b"keep|");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_store_uploads_a_spool_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    spooled_saves_stream_from_disk(&in_memory_bucket(dir.path())).await;
}

/// The S3 test server (moto) named by `LIVEGATE_TEST_S3_ENDPOINT`, with a fresh bucket in it; `None`
/// when the variable is unset (a machine without the server skips these tests).
async fn s3_bucket() -> Option<(String, String)> {
    let endpoint = std::env::var("LIVEGATE_TEST_S3_ENDPOINT").ok()?;
    let endpoint = endpoint.trim_end_matches('/').to_owned();
    let bucket = format!("unit-{}", uuid::Uuid::new_v4().simple());
    // The test server creates buckets on an unsigned PUT.
    let created = reqwest::Client::new()
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("LIVEGATE_TEST_S3_ENDPOINT={endpoint} unreachable: {e}"));
    assert!(
        created.status().is_success(),
        "bucket: {}",
        created.status()
    );
    Some((endpoint, bucket))
}

fn s3_store(endpoint: &str, bucket: &str) -> ObjectArtifactService {
    ObjectArtifactService::open_with(
        &format!("s3://{bucket}/a/prefix"),
        [
            ("aws_endpoint", endpoint),
            ("aws_allow_http", "true"),
            ("aws_access_key_id", "test"),
            ("aws_secret_access_key", "test"),
            ("aws_region", "us-east-1"),
        ],
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_store_conforms_against_the_test_server() {
    let Some((endpoint, bucket)) = s3_bucket().await else {
        eprintln!("LIVEGATE_TEST_S3_ENDPOINT unset: skipped");
        return;
    };
    let svc = s3_store(&endpoint, &bucket);
    conformance(&svc).await;
    svc.check_writable().await.unwrap();
    let empty = ArtifactInfo {
        versions: vec![0],
        mime_type: "text/plain".into(),
        size: 0,
    };
    assert_eq!(svc.describe(S1, "empty.txt").await.unwrap(), Some(empty));
    let (_, fresh) = s3_bucket().await.unwrap();
    spooled_saves_stream_from_disk(&s3_store(&endpoint, &fresh)).await;
    // The keys are where the layout says, under the URL's prefix.
    let listing = reqwest::get(format!(
        "{endpoint}/{bucket}?list-type=2&prefix=a/prefix/app/u1/s1/empty.txt/"
    ))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(
        listing.contains("<Key>a/prefix/app/u1/s1/empty.txt/0</Key>")
            && listing.contains("<Key>a/prefix/app/u1/s1/empty.txt/0.meta.json</Key>"),
        "{listing}"
    );
}

/// An in-memory bucket that counts the objects whose bytes are read, and can be out of reach
/// (`down`: every request fails).
#[derive(Debug, Default)]
struct CountingBucket {
    inner: object_store::memory::InMemory,
    reads: std::sync::atomic::AtomicUsize,
    down: std::sync::atomic::AtomicBool,
}

impl CountingBucket {
    fn reachable(&self) -> object_store::Result<()> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "CountingBucket",
                source: "out of reach".into(),
            });
        }
        Ok(())
    }
}

impl std::fmt::Display for CountingBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CountingBucket")
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for CountingBucket {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.reachable()?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.reachable()?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.reachable()?;
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.get_opts(location, options).await
    }

    async fn delete(&self, location: &object_store::path::Path) -> object_store::Result<()> {
        self.inner.delete(location).await
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
    ) -> object_store::Result<()> {
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
    ) -> object_store::Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}

#[tokio::test]
async fn an_object_store_lists_from_the_bucket_listing_without_reading_an_object() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = std::sync::Arc::new(CountingBucket::default());
    let svc = ObjectArtifactService::with_store(
        bucket.clone(),
        object_store::path::Path::from("p"),
        dir.path().join("spool"),
        "counting-bucket".into(),
    );
    for name in ["a.pcm", "b.pcm", "user:c.json"] {
        svc.save(S1, name, audio(b"recording")).await.unwrap();
        svc.save(S1, name, audio(b"recording")).await.unwrap();
    }
    let reads = || bucket.reads.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(reads(), 0, "saving reads nothing back");
    assert_eq!(
        svc.list_names(S1).await.unwrap(),
        vec!["a.pcm", "b.pcm", "user:c.json"]
    );
    assert_eq!(svc.list_versions(S1, "a.pcm").await.unwrap(), vec![0, 1]);
    assert_eq!(reads(), 0, "listing reads no object");
    svc.load(S1, "a.pcm", None).await.unwrap().unwrap();
    assert_eq!(reads(), 2, "a load reads the version and its sidecar");

    // A description reads the latest sidecar only; the size comes from the listing.
    svc.save(S1, "a.pcm", json(b"{\"k\":1}")).await.unwrap();
    let described = svc.describe(S1, "a.pcm").await.unwrap();
    let expected = ArtifactInfo {
        versions: vec![0, 1, 2],
        mime_type: "application/json".into(),
        size: 7,
    };
    assert_eq!(described, Some(expected));
    assert_eq!(reads(), 3, "one sidecar read");
    assert_eq!(svc.describe(S1, "none").await.unwrap(), None);

    // The write probe leaves nothing behind, and no artifact name can meet it.
    svc.check_writable().await.unwrap();
    let keys: Vec<object_store::ObjectMeta> =
        futures::TryStreamExt::try_collect(object_store::ObjectStore::list(&*bucket, None))
            .await
            .unwrap();
    assert!(!keys.is_empty());
    assert!(
        keys.iter().all(|m| !m.location.as_ref().contains("probe")),
        "{keys:?}"
    );
}

/// Recordings waiting in an outbox folder: their entries, which go last when one is saved.
fn in_outbox(root: &std::path::Path) -> usize {
    std::fs::read_dir(root.join("outbox")).map_or(0, |d| {
        d.flatten()
            .filter(|f| f.path().extension().is_some_and(|e| e == "json"))
            .count()
    })
}

/// Waits (bounded) until the outbox folder under `root` holds `count` recordings.
async fn outbox_holds(root: &std::path::Path, count: usize) {
    let emptied = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while in_outbox(root) != count {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        emptied.is_ok(),
        "the outbox holds {count}, not {}",
        in_outbox(root)
    );
}

/// Waits (bounded) until no store holds an entry of the outbox under `root`: a store that is
/// dropped lets go of them once its outbox task has finished the upload it may be in.
async fn outbox_released(root: &std::path::Path) {
    let free = || {
        std::fs::read_dir(root.join("outbox")).map_or(true, |d| {
            d.flatten()
                .filter(|f| f.path().extension().is_some_and(|e| e == "json"))
                .all(|f| {
                    std::fs::File::open(f.path()).is_ok_and(|file| {
                        rustix::fs::flock(
                            &file,
                            rustix::fs::FlockOperation::NonBlockingLockExclusive,
                        )
                        .is_ok()
                    })
                })
        })
    };
    let released = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while !free() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(released.is_ok(), "a dropped store lets go of its outbox");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_left_behind_is_saved_once_by_the_next_store_on_its_folder() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("spool");
    let bucket = std::sync::Arc::new(CountingBucket::default());
    let open = |url: &str| {
        ObjectArtifactService::with_store(
            bucket.clone(),
            object_store::path::Path::from("p"),
            root.clone(),
            url.into(),
        )
    };
    async fn keep_for_later(svc: &ObjectArtifactService, bytes: &'static [u8]) {
        let spool = spooled(svc.spool_dir().unwrap(), &[bytes]);
        svc.save_later(S1, "rec.pcm", "audio/pcm;rate=16000".into(), spool)
            .await
            .unwrap();
    }

    // The bucket is out of reach: the recording waits in the outbox, held by its store.
    bucket.down.store(true, Ordering::SeqCst);
    let first = open("mem://b");
    keep_for_later(&first, b"first").await;
    assert_eq!(in_outbox(&root), 1);
    bucket.down.store(false, Ordering::SeqCst);
    let beside = open("mem://b");
    assert_eq!(beside.outbox_len(), 0, "a live store's entries are its own");
    drop(beside);

    // Its store gone (a process stopped), the next store on the folder saves it, once.
    drop(first);
    outbox_released(&root).await;
    let other_bucket = open("mem://other");
    assert_eq!(
        other_bucket.outbox_len(),
        0,
        "another bucket's store leaves it alone"
    );
    let next = open("mem://b");
    outbox_holds(&root, 0).await;
    assert_eq!(
        next.load(S1, "rec.pcm", None).await.unwrap(),
        Some(audio(b"first|"))
    );
    assert_eq!(next.list_versions(S1, "rec.pcm").await.unwrap(), vec![0]);
    drop(next);

    // A store stopped after the upload, before removing the entry: the version it claimed is
    // there already, so the entry is removed without a second version.
    bucket.down.store(true, Ordering::SeqCst);
    let stopped = open("mem://b");
    keep_for_later(&stopped, b"second").await;
    drop(stopped);
    outbox_released(&root).await;
    let entry = std::fs::read_dir(root.join("outbox"))
        .unwrap()
        .flatten()
        .map(|f| f.path())
        .find(|p| p.extension().is_some_and(|e| e == "data"))
        .unwrap();
    std::fs::write(entry.with_extension("version"), "0").unwrap();
    bucket.down.store(false, Ordering::SeqCst);
    let after = open("mem://b");
    outbox_holds(&root, 0).await;
    assert_eq!(after.list_versions(S1, "rec.pcm").await.unwrap(), vec![0]);
    assert!(!entry.with_extension("json").exists());
}
