//! One conformance suite run against every session backend.

use serde_json::{json, Map, Value};

use super::*;
use crate::event::Event;

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn event_with_delta(delta: Value, timestamp: f64) -> Event {
    let mut event = Event::new("e-1", "agent");
    event.actions.state_delta = obj(delta);
    event.timestamp = timestamp;
    event
}

async fn conformance(svc: &dyn SessionService) {
    let t0 = crate::event::now_timestamp();
    // Create, get, duplicate, generated ids.
    let s1 = svc
        .create_session("app", "u1", Some("s1"), obj(json!({"k": 1, "temp:t": 2})))
        .await
        .unwrap();
    assert_eq!(s1.state.get("k"), Some(&json!(1)));
    assert!(
        !s1.state.contains_key("temp:t"),
        "temp keys are not stored at creation"
    );
    assert!(matches!(
        svc.create_session("app", "u1", Some("s1"), Map::new())
            .await,
        Err(SessionError::AlreadyExists(_))
    ));
    let generated = svc
        .create_session("app", "u1", None, Map::new())
        .await
        .unwrap();
    assert_eq!(generated.id.len(), 36);

    // Append: partial skipped, temp applied in memory only, scopes routed.
    let mut session = svc
        .get_session("app", "u1", "s1", &GetSessionConfig::default())
        .await
        .unwrap()
        .unwrap();
    let mut partial = Event::new("e-1", "agent");
    partial.partial = Some(true);
    svc.append_event(&mut session, partial).await.unwrap();
    assert!(session.events.is_empty(), "partial events are not stored");
    let delta = json!({"mood": "ok", "temp:scratch": 1, "app:theme": "dark", "user:lang": "en"});
    let stored = svc
        .append_event(&mut session, event_with_delta(delta, t0 + 1.0))
        .await
        .unwrap();
    assert!(!stored.actions.state_delta.contains_key("temp:scratch"));
    assert_eq!(
        session.state.get("temp:scratch"),
        Some(&json!(1)),
        "temp visible to the invocation"
    );
    let again = svc
        .append_event(&mut session, stored.clone())
        .await
        .unwrap();
    assert_eq!(again.id, stored.id);
    svc.append_event(&mut session, event_with_delta(json!({}), t0 + 2.0))
        .await
        .unwrap();

    let read = svc
        .get_session("app", "u1", "s1", &GetSessionConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.events.len(), 2, "re-delivery is idempotent");
    assert_eq!(read.events[0], stored);
    assert!(!read.state.contains_key("temp:scratch"));
    assert_eq!(read.state.get("mood"), Some(&json!("ok")));
    assert_eq!(read.state.get("app:theme"), Some(&json!("dark")));
    assert_eq!(read.state.get("user:lang"), Some(&json!("en")));

    // Scopes: app state is shared by everyone, user state by one user's sessions.
    let other_user = svc
        .create_session("app", "u2", Some("x"), Map::new())
        .await
        .unwrap();
    assert_eq!(other_user.state.get("app:theme"), Some(&json!("dark")));
    assert!(!other_user.state.contains_key("user:lang"));
    assert!(!other_user.state.contains_key("mood"));
    let same_user = svc
        .get_session("app", "u1", &generated.id, &GetSessionConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(same_user.state.get("user:lang"), Some(&json!("en")));

    // Filters.
    let recent = GetSessionConfig {
        num_recent_events: Some(1),
        after_timestamp: None,
    };
    let read = svc
        .get_session("app", "u1", "s1", &recent)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.events.len(), 1);
    assert_eq!(read.events[0].timestamp, t0 + 2.0);
    let none = GetSessionConfig {
        num_recent_events: Some(0),
        after_timestamp: None,
    };
    assert!(svc
        .get_session("app", "u1", "s1", &none)
        .await
        .unwrap()
        .unwrap()
        .events
        .is_empty());
    let after = GetSessionConfig {
        num_recent_events: None,
        after_timestamp: Some(t0 + 1.5),
    };
    assert_eq!(
        svc.get_session("app", "u1", "s1", &after)
            .await
            .unwrap()
            .unwrap()
            .events
            .len(),
        1
    );

    // List and delete.
    let listed = svc.list_sessions("app", "u1").await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].id, "s1", "most recently updated first");
    assert!(listed.iter().all(|s| s.events.is_empty()));
    svc.delete_session("app", "u1", "s1").await.unwrap();
    svc.delete_session("app", "u1", "s1").await.unwrap();
    assert!(svc
        .get_session("app", "u1", "s1", &GetSessionConfig::default())
        .await
        .unwrap()
        .is_none());
    assert!(matches!(
        svc.append_event(&mut session, Event::new("e", "a")).await,
        Err(SessionError::NotFound(_))
    ));
    svc.ping().await.unwrap();
}

#[tokio::test]
async fn in_memory_store_conforms() {
    conformance(&InMemorySessionService::default()).await;
}

#[tokio::test]
async fn sqlite_store_conforms_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/livegate.db");
    let path = path.to_str().unwrap();
    let svc = SqliteSessionService::open(path).await.unwrap();
    conformance(&svc).await;
    let mut session = svc
        .create_session("app", "u9", Some("keep"), Map::new())
        .await
        .unwrap();
    svc.append_event(&mut session, event_with_delta(json!({"n": 7}), 5.0))
        .await
        .unwrap();
    drop(svc);
    let reopened = SqliteSessionService::open(path).await.unwrap();
    let read = reopened
        .get_session("app", "u9", "keep", &GetSessionConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.events.len(), 1);
    assert_eq!(read.state.get("n"), Some(&json!(7)));
    assert_eq!(
        read.state.get("app:theme"),
        Some(&json!("dark")),
        "app state survives too"
    );
}
