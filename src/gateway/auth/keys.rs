//! Operator API keys: long random strings shared with the operator's own servers, read from a
//! file (`--api-keys-file`) or the environment (`LIVEGATE_API_KEYS`), never from a flag value that
//! `ps` would show.

use subtle::ConstantTimeEq;

use super::Secret;

/// The shortest API key accepted: anything shorter could be guessed.
pub const MIN_KEY_BYTES: usize = 24;
/// Most keys one gateway holds (enough for rotation across a few services).
const MAX_KEYS: usize = 256;
/// Longest key accepted.
const MAX_KEY_BYTES: usize = 512;

/// The operator's API keys.
#[derive(Default)]
pub struct ApiKeys {
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys)", self.keys.len())
    }
}

/// Why a list of API keys was refused (it names a key by its position only).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidKeys {
    /// The key at this position (from 1) is too short or too long.
    #[error(
        "API key #{0} must be {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes (e.g. `openssl rand -hex 32`)"
    )]
    Length(usize),
    /// More keys than the gateway keeps.
    #[error("more than {MAX_KEYS} API keys")]
    TooMany,
}

impl ApiKeys {
    /// Parses keys separated by commas or newlines; blank entries and `#` comment lines are
    /// skipped. A key that is too short or too long is an error naming its position only.
    pub fn parse(text: &Secret) -> Result<Self, InvalidKeys> {
        let mut keys = Vec::new();
        let entries = text
            .expose()
            .lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .flat_map(|line| line.split(','))
            .map(str::trim)
            .filter(|key| !key.is_empty());
        for (index, key) in entries.enumerate() {
            if key.len() < MIN_KEY_BYTES || key.len() > MAX_KEY_BYTES {
                return Err(InvalidKeys::Length(index + 1));
            }
            if keys.len() == MAX_KEYS {
                return Err(InvalidKeys::TooMany);
            }
            keys.push(key.as_bytes().to_vec());
        }
        Ok(ApiKeys { keys })
    }

    /// Adds the keys of `other`.
    pub fn extend(&mut self, other: ApiKeys) {
        self.keys.extend(other.keys);
    }

    /// True with no keys.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// True when `candidate` is one of the keys. Every key is compared, each in constant time,
    /// so the answer's timing tells nothing about which key came close.
    pub fn matches(&self, candidate: &str) -> bool {
        let candidate = candidate.as_bytes();
        let mut found = subtle::Choice::from(0);
        for key in &self.keys {
            found |= key.as_slice().ct_eq(candidate);
        }
        found.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn keys_parse_from_lists_and_match_exactly() {
        let keys =
            ApiKeys::parse(&Secret::new(format!("# operator keys\n{A},\n\n  {B}  \n"))).unwrap();
        assert!(keys.matches(A) && keys.matches(B));
        assert!(!keys.matches(&A[1..]) && !keys.matches("") && !keys.matches(&format!("{A}a")));
        assert!(ApiKeys::parse(&Secret::new("")).unwrap().is_empty());
        assert!(!ApiKeys::default().matches(""));
    }

    #[test]
    fn short_keys_are_refused_without_echoing_them() {
        let error = ApiKeys::parse(&Secret::new(format!("{A},hunter2")))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("#2") && !error.contains("hunter2"),
            "{error}"
        );
    }
}
