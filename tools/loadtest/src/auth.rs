//! How load-test sessions authenticate to a gateway with tokens on: one token for all
//! (`--token`, whose subject becomes every session's user), or an operator key (`--api-key`)
//! that mints a token per session through `POST /api/tokens`, as a real deployment's backend
//! would. Only the gateway's HTTP protocol is used.

use std::time::Duration;

use base64::Engine;

use super::error::{LoadtestError, SessionFailure};

/// How long minting one token may take.
const MINT_TIMEOUT: Duration = Duration::from_secs(10);

/// What each session presents.
#[derive(Default)]
pub enum Credentials {
    /// Nothing (a gateway without auth).
    #[default]
    None,
    /// One token for every session.
    Token {
        /// The token.
        token: String,
        /// Its subject: the user every session connects as.
        user: String,
    },
    /// An operator key that mints a token per session.
    ApiKey {
        /// The key.
        key: String,
        /// `POST` here to mint.
        tokens_url: String,
        /// The HTTP client.
        http: reqwest::Client,
    },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credentials::None => "None",
            Credentials::Token { .. } => "Token(..)",
            Credentials::ApiKey { .. } => "ApiKey(..)",
        })
    }
}

impl Credentials {
    /// The credentials `--token` or `--api-key` ask for; `ws_url` locates `/api/tokens`.
    pub fn new(
        token: Option<&str>,
        api_key: Option<&str>,
        ws_url: &str,
    ) -> Result<Self, LoadtestError> {
        match (token, api_key) {
            (Some(_), Some(_)) => Err(LoadtestError::Invalid(
                "give --token or --api-key, not both".into(),
            )),
            (Some(token), None) => {
                let user = subject(token).ok_or_else(|| {
                    LoadtestError::Invalid("--token is not a JWT with a subject".into())
                })?;
                Ok(Credentials::Token {
                    token: token.to_owned(),
                    user,
                })
            }
            (None, Some(key)) => {
                let tokens_url = super::endpoints::metrics_url(ws_url)
                    .and_then(|m| {
                        m.strip_suffix("metrics")
                            .map(|base| format!("{base}api/tokens"))
                    })
                    .ok_or_else(|| LoadtestError::Invalid(format!("no HTTP base for {ws_url}")))?;
                Ok(Credentials::ApiKey {
                    key: key.to_owned(),
                    tokens_url,
                    http: reqwest::Client::new(),
                })
            }
            (None, None) => Ok(Credentials::None),
        }
    }

    /// The user sessions must connect as, when the credentials fix it.
    pub fn user(&self) -> Option<&str> {
        match self {
            Credentials::Token { user, .. } => Some(user),
            _ => None,
        }
    }

    /// The bearer token for `user`'s session `session` (minted now with an operator key).
    pub async fn bearer(
        &self,
        user: &str,
        session: &str,
    ) -> Result<Option<String>, SessionFailure> {
        match self {
            Credentials::None => Ok(None),
            Credentials::Token { token, .. } => Ok(Some(token.clone())),
            Credentials::ApiKey {
                key,
                tokens_url,
                http,
            } => {
                let response = http
                    .post(tokens_url)
                    .bearer_auth(key)
                    .json(&serde_json::json!({"userId": user, "sessionId": session}))
                    .timeout(MINT_TIMEOUT)
                    .send()
                    .await
                    .map_err(SessionFailure::MintRequest)?;
                let status = response.status();
                let body: serde_json::Value = response
                    .json()
                    .await
                    .map_err(|source| SessionFailure::MintAnswer { status, source })?;
                match body["token"].as_str() {
                    Some(token) if status.is_success() => Ok(Some(token.to_owned())),
                    _ => Err(SessionFailure::MintRefused {
                        status,
                        error: body["error"].clone(),
                    }),
                }
            }
        }
    }
}

/// The `sub` claim of a JWT, read without verifying it (the gateway verifies).
fn subject(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims["sub"].as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_the_user_and_a_key_finds_the_mint_beside_the_websocket() {
        // {"sub":"alice","exp":1}
        let token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSIsImV4cCI6MX0.c2ln";
        let credentials = Credentials::new(Some(token), None, "ws://127.0.0.1:1/ws").unwrap();
        assert_eq!(credentials.user(), Some("alice"));
        assert!(Credentials::new(Some("nope"), None, "ws://127.0.0.1:1/ws").is_err());
        assert!(Credentials::new(Some(token), Some("k"), "ws://127.0.0.1:1/ws").is_err());
        match Credentials::new(None, Some("k"), "wss://host/live/ws").unwrap() {
            Credentials::ApiKey { tokens_url, .. } => {
                assert_eq!(tokens_url, "https://host/live/api/tokens")
            }
            other => panic!("{other:?}"),
        }
    }
}
