//! ADK's state prefixes and how a state delta is routed and merged.
//!
//! App and user state live in their own tables (maps) with the prefix removed, so one write is
//! seen by every session of the app (or of the user); reads merge them back with the prefix.

use serde_json::{Map, Value};

/// Keys shared by every user and session of the app.
pub const APP_PREFIX: &str = "app:";
/// Keys shared by one user's sessions.
pub const USER_PREFIX: &str = "user:";
/// Keys that live only for the current invocation and are never persisted.
pub const TEMP_PREFIX: &str = "temp:";

/// A state delta split by scope; app and user keys are stored without their prefix.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScopedDelta {
    /// `app:` keys, prefix removed.
    pub app: Map<String, Value>,
    /// `user:` keys, prefix removed.
    pub user: Map<String, Value>,
    /// Unprefixed keys.
    pub session: Map<String, Value>,
}

impl ScopedDelta {
    /// True if no scope has a key.
    pub fn is_empty(&self) -> bool {
        self.app.is_empty() && self.user.is_empty() && self.session.is_empty()
    }
}

/// Splits a delta (or an initial state) by scope, dropping `temp:` keys.
pub fn split_delta(delta: &Map<String, Value>) -> ScopedDelta {
    let mut scoped = ScopedDelta::default();
    for (key, value) in delta {
        if let Some(k) = key.strip_prefix(APP_PREFIX) {
            scoped.app.insert(k.to_owned(), value.clone());
        } else if let Some(k) = key.strip_prefix(USER_PREFIX) {
            scoped.user.insert(k.to_owned(), value.clone());
        } else if !key.starts_with(TEMP_PREFIX) {
            scoped.session.insert(key.clone(), value.clone());
        }
    }
    scoped
}

/// Merges stored app, user and session state into one map, prefixes re-added.
pub fn merge_state(
    app: &Map<String, Value>,
    user: &Map<String, Value>,
    session: &Map<String, Value>,
) -> Map<String, Value> {
    let mut merged = session.clone();
    for (k, v) in app {
        merged.insert(format!("{APP_PREFIX}{k}"), v.clone());
    }
    for (k, v) in user {
        merged.insert(format!("{USER_PREFIX}{k}"), v.clone());
    }
    merged
}

/// Removes `temp:` keys from a delta.
pub fn strip_temp(delta: &mut Map<String, Value>) {
    delta.retain(|k, _| !k.starts_with(TEMP_PREFIX));
}

/// ADK's rules before an event is stored: `None` for a partial event (never stored); otherwise
/// fills a missing id, strips `temp:` keys from the event's delta and returns the full delta
/// (temp keys included), which the running invocation still sees.
pub fn prepare_append(event: &mut crate::event::Event) -> Option<Map<String, Value>> {
    if event.is_partial() {
        return None;
    }
    if event.id.is_empty() {
        // ADK's Event always has an id; an empty one would make idempotency checks collide.
        event.id = crate::event::new_event_id();
    }
    let full_delta = event.actions.state_delta.clone();
    strip_temp(&mut event.actions.state_delta);
    Some(full_delta)
}

/// Applies a committed event to the caller's copy of the session (temp keys included).
pub fn apply_committed(
    session: &mut super::Session,
    full_delta: Map<String, Value>,
    event: &crate::event::Event,
) {
    session.state.extend(full_delta);
    session.last_update_time = event.timestamp;
    session.events.push(event.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn split_routes_each_prefix_and_drops_temp() {
        let delta = obj(json!({
            "app:theme": "dark", "user:lang": "en", "temp:x": 1, "mood": "ok", "apple": 2
        }));
        let scoped = split_delta(&delta);
        assert_eq!(scoped.app, obj(json!({"theme": "dark"})));
        assert_eq!(scoped.user, obj(json!({"lang": "en"})));
        assert_eq!(scoped.session, obj(json!({"mood": "ok", "apple": 2})));
        assert!(!scoped.is_empty());
        assert!(split_delta(&obj(json!({"temp:only": 1}))).is_empty());
    }

    #[test]
    fn merge_re_adds_prefixes_and_round_trips_a_split() {
        let state = obj(json!({"app:a": 1, "user:u": [2], "s": {"n": 3}}));
        let scoped = split_delta(&state);
        assert_eq!(
            merge_state(&scoped.app, &scoped.user, &scoped.session),
            state
        );
        let empty = Map::new();
        assert!(merge_state(&empty, &empty, &empty).is_empty());
    }

    #[test]
    fn strip_temp_keeps_everything_else() {
        let mut delta = obj(json!({"temp:x": 1, "temp:": 2, "app:t": 3, "k": 4, "tempo": 5}));
        strip_temp(&mut delta);
        assert_eq!(delta, obj(json!({"app:t": 3, "k": 4, "tempo": 5})));
    }
}
