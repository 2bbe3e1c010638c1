//! One conformance suite run against every artifact backend.

use bytes::Bytes;

use super::*;

fn audio(data: &'static [u8]) -> Artifact {
    Artifact {
        data: Bytes::from_static(data),
        mime_type: "audio/pcm;rate=16000".into(),
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

async fn conformance(svc: &dyn ArtifactService) {
    assert_eq!(svc.save(S1, "rec.pcm", audio(b"ab")).await.unwrap(), 0);
    assert_eq!(svc.save(S1, "rec.pcm", audio(b"cdef")).await.unwrap(), 1);
    assert_eq!(svc.list_versions(S1, "rec.pcm").await.unwrap(), vec![0, 1]);
    assert_eq!(
        svc.load(S1, "rec.pcm", None).await.unwrap().unwrap().data,
        Bytes::from_static(b"cdef")
    );
    let first = svc.load(S1, "rec.pcm", Some(0)).await.unwrap().unwrap();
    assert_eq!(first, audio(b"ab"), "bytes and mime type kept");
    assert_eq!(svc.load(S1, "rec.pcm", Some(7)).await.unwrap(), None);
    assert_eq!(
        svc.load(S2, "rec.pcm", None).await.unwrap(),
        None,
        "session scoped"
    );
    assert!(svc.list_versions(S2, "rec.pcm").await.unwrap().is_empty());

    svc.save(S1, "user:profile.json", audio(b"{}"))
        .await
        .unwrap();
    assert!(
        svc.load(S2, "user:profile.json", None)
            .await
            .unwrap()
            .is_some(),
        "user scoped across sessions"
    );
    assert_eq!(
        svc.list_names(S1).await.unwrap(),
        vec!["rec.pcm".to_owned(), "user:profile.json".to_owned()]
    );
    assert_eq!(
        svc.list_names(S2).await.unwrap(),
        vec!["user:profile.json".to_owned()]
    );

    svc.delete(S1, "rec.pcm").await.unwrap();
    svc.delete(S1, "rec.pcm").await.unwrap();
    assert_eq!(svc.load(S1, "rec.pcm", None).await.unwrap(), None);

    for bad in ["../x", "a/b", "", "..", "a\\b", "user:", "user:../x"] {
        assert!(
            matches!(
                svc.save(S1, bad, audio(b"x")).await,
                Err(ArtifactError::InvalidName(_))
            ),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn in_memory_store_conforms() {
    conformance(&InMemoryArtifactService::default()).await;
}

#[tokio::test]
async fn filesystem_store_conforms_rejects_traversal_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let svc = FileArtifactService::open(dir.path().join("artifacts"))
        .await
        .unwrap();
    conformance(&svc).await;
    let evil = ArtifactScope {
        app_name: "app",
        user_id: "..",
        session_id: "s1",
    };
    assert!(svc.save(evil, "x", audio(b"x")).await.is_err());
    let evil = ArtifactScope {
        app_name: "app",
        user_id: "u1",
        session_id: "../../etc",
    };
    assert!(svc.save(evil, "x", audio(b"x")).await.is_err());
    svc.save(S2, "keep.pcm", audio(b"kk")).await.unwrap();
    let reopened = FileArtifactService::open(dir.path().join("artifacts"))
        .await
        .unwrap();
    assert_eq!(
        reopened.load(S2, "keep.pcm", None).await.unwrap(),
        Some(audio(b"kk"))
    );
    assert_eq!(
        reopened.save(S2, "keep.pcm", audio(b"k2")).await.unwrap(),
        1
    );
}
