//! ADK's state prefixes and how a state delta is routed and merged.

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

/// Splits a delta by scope, dropping `temp:` keys.
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn splits_merges_and_strips() {
        let delta = json!({"app:theme": "dark", "user:lang": "en", "temp:x": 1, "mood": "ok"});
        let delta = delta.as_object().unwrap();
        let scoped = split_delta(delta);
        assert_eq!(scoped.app, *json!({"theme": "dark"}).as_object().unwrap());
        assert_eq!(scoped.user, *json!({"lang": "en"}).as_object().unwrap());
        assert_eq!(scoped.session, *json!({"mood": "ok"}).as_object().unwrap());
        let merged = merge_state(&scoped.app, &scoped.user, &scoped.session);
        assert_eq!(merged.len(), 3);
        assert_eq!(merged["app:theme"], "dark");
        let mut d = delta.clone();
        strip_temp(&mut d);
        assert!(!d.contains_key("temp:x"));
    }
}
