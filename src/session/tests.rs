//! One conformance suite run against every session backend.

use serde_json::{json, Map, Value};

use super::*;
use crate::event::{Content, Event, FileData, Part};

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn event_with_delta(delta: Value, timestamp: f64) -> Event {
    let mut event = Event::new("e-1", "agent");
    event.actions.state_delta = obj(delta);
    event.timestamp = timestamp;
    event
}

async fn get(svc: &dyn SessionService, user: &str, id: &str) -> Session {
    get_in(svc, "app", user, id).await
}

async fn get_in(svc: &dyn SessionService, app: &str, user: &str, id: &str) -> Session {
    svc.get_session(app, user, id, &GetSessionConfig::default())
        .await
        .unwrap()
        .unwrap()
}

async fn timestamps(svc: &dyn SessionService, id: &str, config: GetSessionConfig) -> Vec<f64> {
    svc.get_session("app", "u1", id, &config)
        .await
        .unwrap()
        .unwrap()
        .events
        .iter()
        .map(|e| e.timestamp)
        .collect()
}

async fn conformance(svc: &dyn SessionService) {
    let t0 = 1_760_000_000.0;

    // Create: initial state split by scope (temp dropped), duplicates refused, ids generated.
    let s1 = svc
        .create_session(
            "app",
            "u1",
            Some(" s1 "),
            obj(json!({"k": 1, "temp:t": 2, "user:seed": true})),
        )
        .await
        .unwrap();
    assert_eq!(s1.id, "s1", "ids are trimmed");
    assert_eq!(s1.state, obj(json!({"k": 1, "user:seed": true})));
    assert!(s1.events.is_empty());
    assert!(matches!(
        svc.create_session("app", "u1", Some("s1"), obj(json!({"app:x": 1})))
            .await,
        Err(SessionError::AlreadyExists(id)) if id == "s1"
    ));
    assert!(
        !get(svc, "u1", "s1").await.state.contains_key("app:x"),
        "a refused create writes nothing"
    );
    let generated = svc
        .create_session("app", "u1", None, Map::new())
        .await
        .unwrap();
    assert!(uuid::Uuid::parse_str(&generated.id).is_ok());
    assert_eq!(get(svc, "u1", &generated.id).await.id, generated.id);
    assert!(svc
        .get_session("app", "u1", "nope", &GetSessionConfig::default())
        .await
        .unwrap()
        .is_none());
    assert!(
        svc.get_session("app", "u2", "s1", &GetSessionConfig::default())
            .await
            .unwrap()
            .is_none(),
        "sessions belong to one user"
    );

    // Partial events are returned untouched and change nothing.
    let mut session = get(svc, "u1", "s1").await;
    let mut partial = event_with_delta(json!({"p": 1, "temp:p": 1}), t0);
    partial.partial = Some(true);
    let back = svc
        .append_event(&mut session, partial.clone())
        .await
        .unwrap();
    assert_eq!(back, partial);
    assert!(session.events.is_empty() && !session.state.contains_key("p"));
    assert!(get(svc, "u1", "s1").await.events.is_empty());

    // temp: applied to the caller's session only; scopes routed; the stored event is stripped.
    let delta = json!({"mood": "ok", "temp:scratch": 1, "app:theme": "dark", "user:lang": "en"});
    let stored = svc
        .append_event(&mut session, event_with_delta(delta, t0 + 1.0))
        .await
        .unwrap();
    assert_eq!(
        stored.actions.state_delta,
        obj(json!({"mood": "ok", "app:theme": "dark", "user:lang": "en"}))
    );
    assert_eq!(session.state.get("temp:scratch"), Some(&json!(1)));
    assert_eq!(session.state.get("app:theme"), Some(&json!("dark")));
    assert_eq!(session.events, vec![stored.clone()]);
    assert_eq!(session.last_update_time, t0 + 1.0);

    // An equal re-delivery is a no-op.
    let again = svc
        .append_event(&mut session, stored.clone())
        .await
        .unwrap();
    assert_eq!(again, stored);
    assert_eq!(session.events.len(), 1, "not pushed twice");

    // Insertion order wins over timestamps (file_data events carry older timestamps).
    svc.append_event(&mut session, event_with_delta(json!({"n": 2}), t0 + 3.0))
        .await
        .unwrap();
    let mut file_event = event_with_delta(json!({}), t0 + 2.0);
    file_event.content = Some(Content {
        parts: vec![Part {
            file_data: Some(FileData {
                display_name: None,
                file_uri: "artifact://app/u1/s1/_adk_live/a.pcm#0".into(),
                mime_type: Some("audio/pcm;rate=16000".into()),
            }),
            ..Part::default()
        }],
        role: Some("user".into()),
    });
    svc.append_event(&mut session, file_event.clone())
        .await
        .unwrap();

    let read = get(svc, "u1", "s1").await;
    assert_eq!(
        read.events.iter().map(|e| e.timestamp).collect::<Vec<_>>(),
        vec![t0 + 1.0, t0 + 3.0, t0 + 2.0]
    );
    assert_eq!(read.events[0], stored, "events round-trip exactly");
    assert_eq!(read.events[2], file_event);
    assert_eq!(read.last_update_time, t0 + 2.0, "last event's timestamp");
    assert_eq!(
        read.state,
        obj(json!({"k": 1, "mood": "ok", "n": 2, "app:theme": "dark",
                   "user:lang": "en", "user:seed": true}))
    );
    assert!(
        !read.state.contains_key("temp:scratch"),
        "temp never stored"
    );

    // Scopes: app state is shared by every user, user state by one user's sessions.
    let other_user = svc
        .create_session("app", "u2", Some("x"), Map::new())
        .await
        .unwrap();
    assert_eq!(other_user.state, obj(json!({"app:theme": "dark"})));
    let same_user = get(svc, "u1", &generated.id).await;
    assert_eq!(
        same_user.state,
        obj(json!({"app:theme": "dark", "user:lang": "en", "user:seed": true}))
    );
    let other_app = svc
        .create_session("other", "u1", Some("s1"), Map::new())
        .await
        .unwrap();
    assert!(other_app.state.is_empty(), "scopes are per app");
    let mut u2 = get(svc, "u2", "x").await;
    svc.append_event(
        &mut u2,
        event_with_delta(json!({"app:theme": "light"}), t0 + 4.0),
    )
    .await
    .unwrap();
    assert_eq!(
        get(svc, "u1", "s1").await.state.get("app:theme"),
        Some(&json!("light"))
    );

    // Event filters.
    let recent = |n| GetSessionConfig {
        num_recent_events: Some(n),
        after_timestamp: None,
    };
    assert_eq!(
        timestamps(svc, "s1", recent(2)).await,
        vec![t0 + 3.0, t0 + 2.0]
    );
    assert!(timestamps(svc, "s1", recent(0)).await.is_empty());
    assert_eq!(timestamps(svc, "s1", recent(9)).await.len(), 3);
    let after = GetSessionConfig {
        num_recent_events: None,
        after_timestamp: Some(t0 + 2.0),
    };
    assert_eq!(
        timestamps(svc, "s1", after).await,
        vec![t0 + 3.0, t0 + 2.0],
        "after_timestamp is inclusive"
    );
    let both = GetSessionConfig {
        num_recent_events: Some(1),
        after_timestamp: Some(t0 + 1.5),
    };
    assert_eq!(timestamps(svc, "s1", both).await, vec![t0 + 2.0]);

    // List: most recently updated first, state merged, no events.
    let listed = svc.list_sessions("app", "u1").await.unwrap();
    assert_eq!(
        listed.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        vec![generated.id.as_str(), "s1"],
        "the generated session was created now, after s1's last event"
    );
    assert!(listed.iter().all(|s| s.events.is_empty()));
    assert_eq!(listed[1].state, get(svc, "u1", "s1").await.state);
    assert!(svc.list_sessions("app", "nobody").await.unwrap().is_empty());
    assert_eq!(svc.count_sessions("app", "u1").await.unwrap(), 2);
    assert_eq!(svc.count_sessions("app", "nobody").await.unwrap(), 0);

    // Delete: session and events go, app and user state stay; a missing session is fine.
    svc.delete_session("app", "u1", "s1").await.unwrap();
    svc.delete_session("app", "u1", "s1").await.unwrap();
    assert!(svc
        .get_session("app", "u1", "s1", &GetSessionConfig::default())
        .await
        .unwrap()
        .is_none());
    assert_eq!(svc.list_sessions("app", "u1").await.unwrap().len(), 1);
    assert_eq!(
        get(svc, "u1", &generated.id).await.state.get("user:lang"),
        Some(&json!("en"))
    );
    let before = session.clone();
    assert!(matches!(
        svc.append_event(&mut session, event_with_delta(json!({"temp:z": 1}), t0 + 5.0))
            .await,
        Err(SessionError::NotFound(id)) if id == "s1"
    ));
    assert_eq!(session, before, "a failed append leaves the session alone");
    let recreated = svc
        .create_session("app", "u1", Some("s1"), Map::new())
        .await
        .unwrap();
    assert!(get(svc, "u1", &recreated.id).await.events.is_empty());

    // Events without an id get one instead of colliding.
    let mut blank = get(svc, "u1", "s1").await;
    for ts in [t0 + 6.0, t0 + 7.0] {
        let mut e = event_with_delta(json!({}), ts);
        e.id.clear();
        assert!(!svc.append_event(&mut blank, e).await.unwrap().id.is_empty());
    }
    assert_eq!(get(svc, "u1", "s1").await.events.len(), 2);

    // Insertion order survives deleting the session that held the newest events (whose numbers
    // the store may hand out again).
    let mut older = svc
        .create_session("app", "u3", Some("older"), Map::new())
        .await
        .unwrap();
    let mut newer = svc
        .create_session("app", "u3", Some("newer"), Map::new())
        .await
        .unwrap();
    for (session, ts) in [(&mut older, t0 + 10.0), (&mut newer, t0 + 11.0)] {
        svc.append_event(session, event_with_delta(json!({}), ts))
            .await
            .unwrap();
    }
    svc.delete_session("app", "u3", "newer").await.unwrap();
    svc.append_event(&mut older, event_with_delta(json!({}), t0 + 9.0))
        .await
        .unwrap();
    let read = get_in(svc, "app", "u3", "older").await;
    assert_eq!(
        read.events.iter().map(|e| e.timestamp).collect::<Vec<_>>(),
        vec![t0 + 10.0, t0 + 9.0]
    );

    // The model's resumption handle: kept with the session, never in its state, gone with it.
    assert_eq!(
        svc.resumption_handle("app", "u1", "s1").await.unwrap(),
        None
    );
    svc.set_resumption_handle("app", "u1", "s1", Some("h-1"), &Fence::none())
        .await
        .unwrap();
    svc.set_resumption_handle("app", "u1", "s1", Some("h-2"), &Fence::none())
        .await
        .unwrap();
    assert_eq!(
        svc.resumption_handle("app", "u1", "s1").await.unwrap(),
        Some("h-2".to_owned())
    );
    assert_eq!(
        svc.resumption_handle("app", "u2", "s1").await.unwrap(),
        None,
        "handles belong to one user's session"
    );
    let read = get(svc, "u1", "s1").await;
    assert!(
        !serde_json::to_string(&read).unwrap().contains("h-2"),
        "not visible as state: {read:?}"
    );
    svc.set_resumption_handle("app", "u1", "s1", None, &Fence::none())
        .await
        .unwrap();
    assert_eq!(
        svc.resumption_handle("app", "u1", "s1").await.unwrap(),
        None
    );
    svc.set_resumption_handle("app", "u1", "s1", Some("h-3"), &Fence::none())
        .await
        .unwrap();
    svc.delete_session("app", "u1", "s1").await.unwrap();
    svc.create_session("app", "u1", Some("s1"), Map::new())
        .await
        .unwrap();
    assert_eq!(
        svc.resumption_handle("app", "u1", "s1").await.unwrap(),
        None,
        "a deleted session's handle goes with it"
    );
    svc.set_resumption_handle("app", "u1", "nope", Some("h"), &Fence::none())
        .await
        .unwrap();
    assert_eq!(
        svc.resumption_handle("app", "u1", "nope").await.unwrap(),
        None
    );

    svc.ping().await.unwrap();
}

/// Creates sessions `{prefix}0`… of user `u` in `app`.
async fn new_sessions(svc: &dyn SessionService, app: &str, prefix: &str, n: usize) -> Vec<Session> {
    let mut sessions = Vec::new();
    for i in 0..n {
        let id = format!("{prefix}{i}");
        let session = svc.create_session(app, "u", Some(&id), Map::new()).await;
        sessions.push(session.unwrap());
    }
    sessions
}

/// Concurrent appends to one session and to sibling sessions lose no event and no state key
/// (the SQLite writer merges a batch's deltas per session), and appends with state to a deleted
/// session in the same bursts fail alone.
async fn concurrent_appends(svc: &dyn SessionService) {
    let sessions = new_sessions(svc, "capp", "c", 4).await;
    let mut gone = svc
        .create_session("capp", "u", Some("gone"), Map::new())
        .await
        .unwrap();
    svc.delete_session("capp", "u", "gone").await.unwrap();
    let missing = async {
        for j in 0..5 {
            let refused = svc
                .append_event(&mut gone, event_with_delta(json!({"app:gone": j}), 1.0))
                .await;
            assert!(
                matches!(refused, Err(SessionError::NotFound(_))),
                "{refused:?}"
            );
        }
    };
    let writers = sessions
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| async move {
            for j in 0..10 {
                let delta = json!({format!("app:k{i}_{j}"): j, format!("k{j}"): i});
                svc.append_event(&mut s, event_with_delta(delta, j as f64))
                    .await
                    .unwrap();
            }
        });
    futures::future::join(futures::future::join_all(writers), missing).await;
    let read = svc
        .get_session("capp", "u", "c3", &GetSessionConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.events.len(), 10);
    let app_keys = read.state.keys().filter(|k| k.starts_with("app:")).count();
    assert_eq!(app_keys, 40, "no lost update of the shared app state");
    assert!(
        !read.state.contains_key("app:gone"),
        "a refused event changed state"
    );
    for i in 0..4 {
        let read = get_in(svc, "capp", "u", &format!("c{i}")).await;
        let keys: Vec<_> = (0..10).map(|j| format!("k{j}")).collect();
        assert!(
            keys.iter().all(|k| read.state.get(k) == Some(&json!(i))),
            "session c{i} has each of its own keys: {:?}",
            read.state
        );
    }
}

/// Plain appends (no state) from many writers at once, which the SQLite writer batches into one
/// statement: a re-delivery and an append to a deleted session in the same burst fail alone.
async fn concurrent_plain_appends(svc: &dyn SessionService) {
    let sessions = new_sessions(svc, "papp", "p", 4).await;
    let mut gone = svc
        .create_session("papp", "u", Some("gone"), Map::new())
        .await
        .unwrap();
    svc.delete_session("papp", "u", "gone").await.unwrap();
    let mut again = sessions[0].clone();
    let first = svc
        .append_event(&mut again, event_with_delta(json!({}), 0.5))
        .await
        .unwrap();
    let writers = sessions.into_iter().map(|mut s| async move {
        for j in 1..=10 {
            svc.append_event(&mut s, event_with_delta(json!({}), j as f64))
                .await
                .unwrap();
        }
    });
    let redelivery = async {
        for _ in 0..3 {
            let stored = svc.append_event(&mut again, first.clone()).await.unwrap();
            assert_eq!(stored, first);
        }
    };
    let missing = async {
        for _ in 0..3 {
            let refused = svc
                .append_event(&mut gone, event_with_delta(json!({}), 1.0))
                .await;
            assert!(
                matches!(refused, Err(SessionError::NotFound(_))),
                "{refused:?}"
            );
        }
    };
    futures::future::join3(futures::future::join_all(writers), redelivery, missing).await;
    for i in 0..4 {
        let read = get_in(svc, "papp", "u", &format!("p{i}")).await;
        let want: Vec<f64> = if i == 0 { vec![0.5] } else { vec![] }
            .into_iter()
            .chain((1..=10).map(f64::from))
            .collect();
        let got: Vec<f64> = read.events.iter().map(|e| e.timestamp).collect();
        assert_eq!(got, want, "session p{i}: every event once, in order");
        assert_eq!(read.last_update_time, 10.0);
    }
}

/// Events handed over together are committed as one after the other would be: in order, each
/// with its own outcome (a partial one untouched, a re-delivery unchanged, state applied).
async fn appends_together(svc: &dyn SessionService) {
    let mut session = svc
        .create_session("tapp", "u", Some("t"), Map::new())
        .await
        .unwrap();
    let earlier = svc
        .append_event(&mut session, event_with_delta(json!({}), 1.0))
        .await
        .unwrap();
    let mut partial = event_with_delta(json!({}), 2.5);
    partial.partial = Some(true);
    let outcomes = svc
        .append_events(
            &mut session,
            vec![
                event_with_delta(json!({}), 2.0),
                partial.clone(),
                event_with_delta(json!({"a": 1, "temp:x": 2, "user:u": 3}), 3.0),
                earlier.clone(),
                event_with_delta(json!({"a": 4}), 4.0),
            ],
        )
        .await;
    assert_eq!(outcomes.len(), 5, "{outcomes:?}");
    let outcomes: Vec<Event> = outcomes.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        outcomes[1], partial,
        "a partial event is returned untouched"
    );
    assert_eq!(outcomes[3], earlier, "a re-delivery changes nothing");
    assert!(!outcomes[2].actions.state_delta.contains_key("temp:x"));
    let times = |s: &Session| s.events.iter().map(|e| e.timestamp).collect::<Vec<_>>();
    assert_eq!(times(&session), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(
        session.state,
        obj(json!({"a": 4, "temp:x": 2, "user:u": 3}))
    );
    let read = get_in(svc, "tapp", "u", "t").await;
    assert_eq!(
        times(&read),
        vec![1.0, 2.0, 3.0, 4.0],
        "stored once each, in order"
    );
    assert_eq!(read.state, obj(json!({"a": 4, "user:u": 3})));
    assert_eq!(read.last_update_time, 4.0);

    // More than one statement can hold (nine parameters an event, SQLite allows 32,766): all
    // stored, in order.
    let many: Vec<Event> = (0..4000)
        .map(|i| event_with_delta(json!({}), 10.0 + f64::from(i)))
        .collect();
    let outcomes = svc.append_events(&mut session, many).await;
    assert!(
        outcomes.iter().all(Result::is_ok),
        "{:?}",
        outcomes.iter().find(|o| o.is_err())
    );
    let read = get_in(svc, "tapp", "u", "t").await;
    assert_eq!(read.events.len(), 4004);
    assert!(read
        .events
        .windows(2)
        .all(|w| w[0].timestamp < w[1].timestamp));

    // Without the session every event fails, each with its own error.
    svc.delete_session("tapp", "u", "t").await.unwrap();
    let refused = svc
        .append_events(
            &mut session,
            vec![
                event_with_delta(json!({}), 5.0),
                event_with_delta(json!({"b": 1}), 6.0),
            ],
        )
        .await;
    assert_eq!(refused.len(), 2);
    assert!(
        refused
            .iter()
            .all(|r| matches!(r, Err(SessionError::NotFound(_)))),
        "{refused:?}"
    );
}

/// Pages of events: the page, the total, the counter of events read, and a missing session.
async fn paged_reads(svc: &dyn SessionService) {
    let mut session = svc
        .create_session("app", "pager", Some("p"), Map::new())
        .await
        .unwrap();
    let events: Vec<Event> = (0..25)
        .map(|i| Event {
            content: Some(Content::text("user", format!("m{i}"))),
            ..Event::new("e-1", "user")
        })
        .collect();
    for outcome in svc.append_events(&mut session, events.clone()).await {
        outcome.unwrap();
    }
    let before = svc.events_read();
    let page = svc
        .list_events("app", "pager", "p", 20, 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.total, 25);
    assert_eq!(page.events, events[20..23].to_vec());
    assert_eq!(svc.events_read() - before, 3);
    let tail = svc
        .list_events("app", "pager", "p", 24, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tail.events, events[24..].to_vec());
    let past = svc
        .list_events("app", "pager", "p", 99, 10)
        .await
        .unwrap()
        .unwrap();
    assert!(past.events.is_empty() && past.total == 25);
    assert!(svc
        .list_events("app", "pager", "nope", 0, 10)
        .await
        .unwrap()
        .is_none());
    // Reading a session without its events reads none.
    let before = svc.events_read();
    let config = GetSessionConfig {
        num_recent_events: Some(0),
        after_timestamp: None,
    };
    let bare = svc.get_session("app", "pager", "p", &config).await.unwrap();
    assert!(bare.unwrap().events.is_empty());
    assert_eq!(svc.events_read(), before);
    svc.check_writable().await.unwrap();
}

#[tokio::test]
async fn in_memory_store_conforms() {
    let svc = InMemorySessionService::default();
    paged_reads(&svc).await;
    conformance(&svc).await;
    concurrent_appends(&svc).await;
    concurrent_plain_appends(&svc).await;
    appends_together(&svc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_conforms_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/deeper/livegate.db");
    let svc = SqliteSessionService::open(&path).await.unwrap();
    paged_reads(&svc).await;
    conformance(&svc).await;
    concurrent_appends(&svc).await;
    concurrent_plain_appends(&svc).await;
    appends_together(&svc).await;
    let mut session = svc
        .create_session("app", "u9", Some("keep"), obj(json!({"user:z": 0})))
        .await
        .unwrap();
    let mut with_temp = event_with_delta(json!({"n": 7, "temp:gone": 1}), 5.0);
    with_temp.content = Some(Content::text("model", "hello"));
    let stored = svc.append_event(&mut session, with_temp).await.unwrap();
    drop(svc);

    let reopened = SqliteSessionService::open(&path).await.unwrap();
    let read = reopened
        .get_session("app", "u9", "keep", &GetSessionConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.events, vec![stored]);
    assert_eq!(read.last_update_time, 5.0);
    assert_eq!(read.state.get("n"), Some(&json!(7)));
    assert_eq!(read.state.get("user:z"), Some(&json!(0)));
    assert_eq!(read.state.get("app:theme"), Some(&json!("light")));
    assert!(!read.state.contains_key("temp:gone"));
    assert_eq!(reopened.list_sessions("app", "u1").await.unwrap().len(), 2);
    reopened.ping().await.unwrap();
}

#[tokio::test]
async fn store_urls_open_the_right_backend() {
    let dir = tempfile::tempdir().unwrap();
    let memory = open_session_service("memory:").await.unwrap();
    memory.ping().await.unwrap();
    let url = format!("sqlite://{}", dir.path().join("a/b.db").display());
    let sqlite = open_session_service(&url).await.unwrap();
    sqlite
        .create_session("app", "u", Some("s"), Map::new())
        .await
        .unwrap();
    assert!(dir.path().join("a/b.db").is_file());
    assert!(matches!(
        open_session_service("mysql://user:secret@x/db").await,
        Err(SessionError::InvalidArgument(message)) if !message.contains("secret")
    ));
    assert!(matches!(
        open_session_service("sqlite://").await,
        Err(SessionError::InvalidArgument(_))
    ));
}

/// The PostgreSQL server the tests use, if `LIVEGATE_TEST_POSTGRES_URL` names one. Set but
/// unreachable fails the test (see `fresh_postgres_schema`), never skips it.
fn postgres_test_url() -> Option<String> {
    std::env::var("LIVEGATE_TEST_POSTGRES_URL")
        .ok()
        .filter(|url| !url.trim().is_empty())
}

/// A new, empty schema on the test server, and a URL whose connections use it, so tests that
/// run at once never see each other's rows.
async fn fresh_postgres_schema(base: &str) -> (String, String) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(base)
        .await
        .expect("LIVEGATE_TEST_POSTGRES_URL is set but PostgreSQL is unreachable");
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    sqlx::raw_sql(&format!("CREATE SCHEMA {schema}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{separator}options=-c%20search_path%3D{schema}");
    (url, schema)
}

async fn drop_postgres_schema(base: &str, schema: &str) {
    use sqlx::Connection;
    if let Ok(mut conn) = sqlx::PgConnection::connect(base).await {
        let _ = sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(&mut conn)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_conforms_and_survives_a_reopen() {
    let Some(base) = postgres_test_url() else {
        return;
    };
    let (url, schema) = fresh_postgres_schema(&base).await;
    let svc = open_session_service(&url).await.unwrap();
    paged_reads(svc.as_ref()).await;
    conformance(svc.as_ref()).await;
    concurrent_appends(svc.as_ref()).await;
    concurrent_plain_appends(svc.as_ref()).await;
    appends_together(svc.as_ref()).await;
    let mut session = svc
        .create_session("app", "u9", Some("keep"), obj(json!({"user:z": 0})))
        .await
        .unwrap();
    let stored = svc
        .append_event(
            &mut session,
            event_with_delta(json!({"n": 7.5, "temp:gone": 1}), 5.0),
        )
        .await
        .unwrap();
    drop(svc);
    let reopened = PostgresSessionService::open(&url).await.unwrap();
    let read = get_in(&reopened, "app", "u9", "keep").await;
    assert_eq!(read.events, vec![stored]);
    assert_eq!(read.state.get("n"), Some(&json!(7.5)));
    assert_eq!(read.state.get("user:z"), Some(&json!(0)));
    assert!(!read.state.contains_key("temp:gone"));
    drop_postgres_schema(&base, &schema).await;
}

/// Nodes starting together each run the migrations; each is applied once and every node works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_nodes_starting_at_once_migrate_once() {
    let Some(base) = postgres_test_url() else {
        return;
    };
    let (url, schema) = fresh_postgres_schema(&base).await;
    let nodes = futures::future::join_all((0..4).map(|_| PostgresSessionService::open(&url))).await;
    let nodes: Vec<PostgresSessionService> = nodes.into_iter().map(Result::unwrap).collect();
    let versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM livegate_migrations")
        .fetch_all(nodes[0].pool())
        .await
        .unwrap();
    assert_eq!(versions, vec![1, 2]);
    // Two nodes append to one session at once: every event once, numbered without a clash, and
    // every state key kept (each delta is merged where it is stored).
    let mut a = nodes[0]
        .create_session("app", "u", Some("shared"), Map::new())
        .await
        .unwrap();
    let mut b = get_in(&nodes[1], "app", "u", "shared").await;
    let write = |svc: &PostgresSessionService, session: &mut Session, node: usize| {
        let svc = svc.clone();
        let mut session = session.clone();
        async move {
            for i in 0..25 {
                let delta = json!({format!("n{node}_{i}"): i});
                svc.append_event(&mut session, event_with_delta(delta, f64::from(i)))
                    .await
                    .unwrap();
            }
        }
    };
    futures::future::join(write(&nodes[0], &mut a, 0), write(&nodes[1], &mut b, 1)).await;
    let read = get_in(&nodes[2], "app", "u", "shared").await;
    assert_eq!(read.events.len(), 50);
    assert_eq!(read.state.len(), 50, "no delta lost: {:?}", read.state);
    for node in 0..2 {
        let mine: Vec<f64> = read
            .events
            .iter()
            .filter(|e| {
                e.actions
                    .state_delta
                    .keys()
                    .any(|k| k.starts_with(&format!("n{node}_")))
            })
            .map(|e| e.timestamp)
            .collect();
        assert_eq!(
            mine,
            (0..25).map(f64::from).collect::<Vec<_>>(),
            "node {node}'s order kept"
        );
    }
    drop_postgres_schema(&base, &schema).await;
}

/// A run's writes carry its lease's fencing epoch: once a newer epoch has claimed the session,
/// the older run's events and resumption handles are refused (typed, its latch fired), an
/// older claim cannot take the session back, and unfenced writes (a `/run` turn) still commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refuses_the_writes_of_a_stale_fence() {
    let Some(base) = postgres_test_url() else {
        return;
    };
    let (url, schema) = fresh_postgres_schema(&base).await;
    let svc = open_session_service(&url).await.unwrap();
    let mut old = svc
        .create_session("app", "u1", Some("fenced"), Map::new())
        .await
        .unwrap();
    let old_lost = crate::latch::Latch::new();
    old.fence = Fence::held(1, old_lost.clone());
    svc.claim("app", "u1", "fenced", &old.fence).await.unwrap();
    svc.append_event(&mut old, event_with_delta(json!({"k": "old"}), 1.0))
        .await
        .unwrap();

    let mut new = get(svc.as_ref(), "u1", "fenced").await;
    new.fence = Fence::held(2, crate::latch::Latch::new());
    svc.claim("app", "u1", "fenced", &new.fence).await.unwrap();
    let refused = svc
        .append_event(&mut old, event_with_delta(json!({"k": "stale"}), 2.0))
        .await;
    assert!(
        matches!(refused, Err(SessionError::Fenced(_))),
        "{refused:?}"
    );
    assert!(old_lost.is_fired(), "the stale run is told");
    let handle = svc
        .set_resumption_handle("app", "u1", "fenced", Some("stale"), &old.fence)
        .await;
    assert!(matches!(handle, Err(SessionError::Fenced(_))), "{handle:?}");
    let back = svc.claim("app", "u1", "fenced", &old.fence).await;
    assert!(matches!(back, Err(SessionError::Fenced(_))), "{back:?}");

    svc.append_event(&mut new, event_with_delta(json!({"k": "new"}), 3.0))
        .await
        .unwrap();
    svc.set_resumption_handle("app", "u1", "fenced", Some("h-new"), &new.fence)
        .await
        .unwrap();
    let mut unfenced = get(svc.as_ref(), "u1", "fenced").await;
    svc.append_event(&mut unfenced, event_with_delta(json!({"turn": 1}), 4.0))
        .await
        .unwrap();
    let read = get(svc.as_ref(), "u1", "fenced").await;
    assert_eq!(read.events.len(), 3, "the stale event is not there");
    assert_eq!(read.state.get("k"), Some(&json!("new")));
    assert_eq!(
        svc.resumption_handle("app", "u1", "fenced").await.unwrap(),
        Some("h-new".to_owned())
    );
    drop_postgres_schema(&base, &schema).await;
}
