//! Path ids (`user_id`, `session_id`), parsed at the edge.

/// A validated user or session id: 1–128 characters of `A-Za-z0-9._:@-`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathId(String);

impl PathId {
    /// Parses an id, explaining what is wrong with a bad one.
    pub fn parse(kind: &str, raw: &str) -> Result<Self, String> {
        let ok_char = |c: char| c.is_ascii_alphanumeric() || "._:@-".contains(c);
        if raw.is_empty()
            || raw.len() > 128
            || !raw.chars().all(ok_char)
            || raw == "."
            || raw == ".."
        {
            return Err(format!(
                "invalid {kind} {raw:?}: use 1-128 characters of A-Z a-z 0-9 . _ : @ -"
            ));
        }
        Ok(PathId(raw.to_owned()))
    }

    /// Parses the id of a session to create or connect to. Ids beginning with `_` are reserved:
    /// the stores keep their own folders beside the sessions' (the filesystem artifact store's
    /// `_user`), so such a session could not keep its recordings.
    pub fn new_session(raw: &str) -> Result<Self, String> {
        let id = Self::parse("session id", raw)?;
        if raw.starts_with('_') {
            return Err(format!(
                "invalid session id {raw:?}: ids beginning with _ are reserved"
            ));
        }
        Ok(id)
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PathId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::PathId;

    #[test]
    fn accepts_the_allowed_alphabet_only() {
        assert!(PathId::parse("user", "demo-user_1.a:b@c").is_ok());
        for bad in ["", "..", "a/b", "a b", "é", &"x".repeat(129)] {
            assert!(PathId::parse("user", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn new_sessions_may_not_use_reserved_ids() {
        assert!(PathId::new_session("s_1").is_ok());
        for reserved in ["_user", "_x"] {
            let error = PathId::new_session(reserved).unwrap_err();
            assert!(error.contains("reserved"), "{error}");
        }
    }
}
