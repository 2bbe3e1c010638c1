//! Path ids (`user_id`, `session_id`), parsed at the edge.

/// Why an id was refused (the message names the id and what is allowed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidId {
    /// Outside the alphabet, empty, too long, or `.`/`..`.
    #[error("invalid {kind} {raw:?}: use 1-128 characters of A-Z a-z 0-9 . _ : @ -")]
    Alphabet {
        /// What the id is (`user id`, `session id`).
        kind: &'static str,
        /// The id as given.
        raw: String,
    },
    /// A session id beginning with `_`, which the stores keep for themselves.
    #[error("invalid session id {raw:?}: ids beginning with _ are reserved")]
    Reserved {
        /// The id as given.
        raw: String,
    },
}

/// A validated user or session id: 1–128 characters of `A-Za-z0-9._:@-`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathId(String);

impl PathId {
    /// Parses an id, explaining what is wrong with a bad one.
    pub fn parse(kind: &'static str, raw: &str) -> Result<Self, InvalidId> {
        let ok_char = |c: char| c.is_ascii_alphanumeric() || "._:@-".contains(c);
        if raw.is_empty()
            || raw.len() > 128
            || !raw.chars().all(ok_char)
            || raw == "."
            || raw == ".."
        {
            return Err(InvalidId::Alphabet {
                kind,
                raw: raw.to_owned(),
            });
        }
        Ok(PathId(raw.to_owned()))
    }

    /// Parses the id of a session to create or connect to. Ids beginning with `_` are reserved:
    /// the stores keep their own folders beside the sessions' (the filesystem artifact store's
    /// `_user`), so such a session could not keep its recordings.
    pub fn new_session(raw: &str) -> Result<Self, InvalidId> {
        let id = Self::parse("session id", raw)?;
        if raw.starts_with('_') {
            return Err(InvalidId::Reserved {
                raw: raw.to_owned(),
            });
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
            assert!(error.to_string().contains("reserved"), "{error}");
        }
    }
}
