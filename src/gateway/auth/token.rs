//! Client tokens: short-lived JWTs whose subject is a user id, optionally bound to one session.
//! Minted here with HS256 and `LIVEGATE_TOKEN_SECRET`, or issued by the operator's own identity
//! provider and verified with its public key (RS256, ES256 or EdDSA), issuer and audience.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::super::ids::{InvalidId, PathId};
use super::Secret;

/// The issuer of tokens this gateway mints; only those are accepted with the shared secret.
pub const ISSUER: &str = "livegate";
/// A token's lifetime when the request names none.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// The longest lifetime a minted token may have: a leaked client token stops working within a day.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// The shortest shared secret accepted (HS256 is only as strong as its key).
pub const MIN_SECRET_BYTES: usize = 32;
/// Longest token read from a request; JWTs this gateway accepts are a few hundred bytes, and an
/// identity provider's rarely pass a few KiB.
const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// Clock skew tolerated on `exp` and `nbf`.
const LEEWAY_SECONDS: u64 = 30;

/// The claims of a client token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user id.
    pub sub: String,
    /// Expiry, seconds since the epoch.
    pub exp: u64,
    /// Issued at, seconds since the epoch.
    #[serde(default)]
    pub iat: u64,
    /// Who issued it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// The one session the token may reach (named so it cannot clash with OpenID's `sid`, the
    /// identity provider's own login session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// Who a verified token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The user.
    pub user: PathId,
    /// The session it is bound to, if any.
    pub session: Option<PathId>,
    /// Every claim of the verified token, the identity provider's own (`email`, `roles`, …)
    /// included: MCP servers with `forward_identity` are told them.
    pub claims: Arc<Map<String, Value>>,
}

/// Why a token was refused; each is a 401.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a JWT, an algorithm or claim this gateway does not take, or a bad id.
    #[error("malformed token")]
    Malformed,
    /// Past its expiry.
    #[error("token expired")]
    Expired,
    /// Its `nbf` (not before) is still to come.
    #[error("token not valid yet")]
    NotYetValid,
    /// The signature does not verify, or no key here could verify it.
    #[error("token signature does not verify")]
    BadSignature,
    /// Signed by the identity provider, but for another issuer or audience.
    #[error("token issuer or audience not accepted")]
    WrongIssuer,
}

impl TokenError {
    /// The `reason` label in `livegate_auth_failures_total`.
    pub fn reason(self) -> &'static str {
        match self {
            TokenError::Malformed => "malformed",
            TokenError::Expired => "expired",
            TokenError::NotYetValid => "not_yet_valid",
            TokenError::BadSignature => "bad_signature",
            TokenError::WrongIssuer => "wrong_issuer",
        }
    }
}

/// Why the token secret or the identity provider's key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The shared secret is too short to sign with.
    #[error(
        "LIVEGATE_TOKEN_SECRET must be at least {MIN_SECRET_BYTES} bytes (e.g. `openssl rand -hex 32`)"
    )]
    ShortSecret,
    /// The provider's public key file cannot be read.
    #[error("cannot read --auth-public-key {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no key of a kind the gateway verifies with.
    #[error(
        "--auth-public-key {}: not an RSA, EC (P-256) or Ed25519 public key in PEM",
        .0.display()
    )]
    NotAPublicKey(PathBuf),
    /// A provider without the issuer and audience its tokens must name.
    #[error("--auth-public-key needs --auth-issuer and --auth-audience")]
    NoIssuerOrAudience,
}

/// Why a token lifetime was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTtl {
    /// No number where it begins.
    #[error("invalid ttl {0:?} (e.g. 3600, 90s, 30m, 1h)")]
    Number(String),
    /// A unit other than s, m, h or d.
    #[error("invalid ttl unit {0:?} (s, m, h or d)")]
    Unit(String),
}

/// A token request that cannot be minted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MintError {
    /// A bad user or session id.
    #[error(transparent)]
    Id(#[from] InvalidId),
    /// A lifetime out of range.
    #[error("ttl must be 1 to {} seconds", MAX_TTL.as_secs())]
    Ttl,
    /// The signing library failed (should not happen with an HMAC key).
    #[error("could not sign the token: {0}")]
    Sign(String),
}

/// Signs client tokens with the shared secret.
pub struct Minter {
    key: EncodingKey,
}

impl std::fmt::Debug for Minter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Minter(..)")
    }
}

/// A minted token and when it expires (seconds since the epoch).
#[derive(Debug, Clone)]
pub struct Minted {
    /// The JWT.
    pub token: String,
    /// Its `exp`.
    pub expires_at: u64,
}

impl Minter {
    /// A minter for this secret (at least [`MIN_SECRET_BYTES`]).
    pub fn new(secret: &Secret) -> Result<Self, KeyError> {
        check_secret(secret)?;
        Ok(Minter {
            key: EncodingKey::from_secret(secret.expose().as_bytes()),
        })
    }

    /// A token for `user` (and only `session`, if given) that lives `ttl` (default one hour, at
    /// most [`MAX_TTL`]).
    pub fn mint(
        &self,
        user: &str,
        session: Option<&str>,
        ttl: Option<Duration>,
    ) -> Result<Minted, MintError> {
        let user = PathId::parse("user id", user)?;
        let session = session.map(PathId::new_session).transpose()?;
        let ttl = ttl.unwrap_or(DEFAULT_TTL);
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(MintError::Ttl);
        }
        let now = now_seconds();
        let claims = Claims {
            sub: user.as_str().to_owned(),
            exp: now + ttl.as_secs().max(1),
            iat: now,
            iss: Some(ISSUER.to_owned()),
            session_id: session.map(|s| s.as_str().to_owned()),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.key)
            .map_err(|e| MintError::Sign(e.to_string()))?;
        Ok(Minted {
            token,
            expires_at: claims.exp,
        })
    }
}

/// Where an identity provider's tokens come from.
#[derive(Debug, Clone)]
pub struct IdentityProvider {
    /// PEM file of its public key.
    pub public_key: std::path::PathBuf,
    /// The `iss` its tokens carry.
    pub issuer: String,
    /// The `aud` its tokens for this gateway carry.
    pub audience: String,
}

/// Checks client tokens against the shared secret and the identity provider's key.
pub struct Verifier {
    shared: Option<(DecodingKey, Validation)>,
    provider: Option<(DecodingKey, Validation)>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("shared", &self.shared.is_some())
            .field("provider", &self.provider.is_some())
            .finish()
    }
}

impl Verifier {
    /// A verifier for tokens minted with `secret` and/or issued by `provider`.
    pub fn new(
        secret: Option<&Secret>,
        provider: Option<&IdentityProvider>,
    ) -> Result<Self, KeyError> {
        let shared = match secret {
            Some(secret) => {
                check_secret(secret)?;
                let mut validation = validation(&[Algorithm::HS256]);
                // Only tokens minted here: a token signed with the secret by anything else
                // (another tool sharing it), with another issuer or none, is refused.
                validation.set_issuer(&[ISSUER]);
                validation.set_required_spec_claims(&["exp", "sub", "iss"]);
                validation.validate_aud = false;
                Some((
                    DecodingKey::from_secret(secret.expose().as_bytes()),
                    validation,
                ))
            }
            None => None,
        };
        let provider = provider.map(load_provider).transpose()?;
        Ok(Verifier { shared, provider })
    }

    /// True when no token could ever verify.
    pub fn is_empty(&self) -> bool {
        self.shared.is_none() && self.provider.is_none()
    }

    /// The user (and session) a token grants, or why it is refused.
    pub fn verify(&self, token: &str) -> Result<Grant, TokenError> {
        if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::Malformed);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Malformed)?;
        // The header picks the key, and each key accepts only its own algorithms: a token cannot
        // pass the public key off as an HMAC secret.
        let (key, validation) = match header.alg {
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => self.shared.as_ref(),
            _ => self.provider.as_ref(),
        }
        .ok_or(TokenError::BadSignature)?;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, key, validation).map_err(
            |e| match e.kind() {
                ErrorKind::ExpiredSignature => TokenError::Expired,
                ErrorKind::ImmatureSignature => TokenError::NotYetValid,
                ErrorKind::InvalidSignature | ErrorKind::InvalidAlgorithm => {
                    TokenError::BadSignature
                }
                ErrorKind::InvalidIssuer | ErrorKind::InvalidAudience => TokenError::WrongIssuer,
                ErrorKind::MissingRequiredClaim(claim) if claim == "iss" || claim == "aud" => {
                    TokenError::WrongIssuer
                }
                _ => TokenError::Malformed,
            },
        )?;
        let all = data.claims;
        let claims =
            Claims::deserialize(&Value::Object(all.clone())).map_err(|_| TokenError::Malformed)?;
        let user = PathId::parse("user id", &claims.sub).map_err(|_| TokenError::Malformed)?;
        let session = claims
            .session_id
            .as_deref()
            .map(|s| PathId::parse("session id", s))
            .transpose()
            .map_err(|_| TokenError::Malformed)?;
        Ok(Grant {
            user,
            session,
            claims: Arc::new(all),
        })
    }
}

fn validation(algorithms: &[Algorithm]) -> Validation {
    let mut validation = Validation::new(algorithms[0]);
    validation.algorithms = algorithms.to_vec();
    validation.leeway = LEEWAY_SECONDS;
    validation.validate_nbf = true;
    validation.set_required_spec_claims(&["exp", "sub"]);
    validation
}

fn check_secret(secret: &Secret) -> Result<(), KeyError> {
    if secret.expose().len() < MIN_SECRET_BYTES {
        return Err(KeyError::ShortSecret);
    }
    Ok(())
}

/// The provider's key, read from its PEM file; the key's type decides the algorithm.
fn load_provider(provider: &IdentityProvider) -> Result<(DecodingKey, Validation), KeyError> {
    let path: &Path = &provider.public_key;
    let pem = std::fs::read(path).map_err(|source| KeyError::Read {
        path: path.to_owned(),
        source,
    })?;
    let (key, algorithms) = if let Ok(key) = DecodingKey::from_rsa_pem(&pem) {
        (key, vec![Algorithm::RS256])
    } else if let Ok(key) = DecodingKey::from_ec_pem(&pem) {
        (key, vec![Algorithm::ES256])
    } else if let Ok(key) = DecodingKey::from_ed_pem(&pem) {
        (key, vec![Algorithm::EdDSA])
    } else {
        return Err(KeyError::NotAPublicKey(path.to_owned()));
    };
    if provider.issuer.trim().is_empty() || provider.audience.trim().is_empty() {
        return Err(KeyError::NoIssuerOrAudience);
    }
    let mut validation = validation(&algorithms);
    validation.set_issuer(&[provider.issuer.as_str()]);
    validation.set_audience(&[provider.audience.as_str()]);
    validation.set_required_spec_claims(&["exp", "sub", "iss", "aud"]);
    Ok((key, validation))
}

/// Seconds since the epoch.
pub fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Parses a lifetime: `3600`, `90s`, `30m`, `1h`, `1d`.
pub fn parse_ttl(text: &str) -> Result<Duration, InvalidTtl> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| InvalidTtl::Number(text.to_owned()))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(InvalidTtl::Unit(unit.to_owned())),
    };
    Ok(Duration::from_secs(number.saturating_mul(scale)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret::new("0123456789abcdef0123456789abcdef")
    }

    fn verifier() -> Verifier {
        Verifier::new(Some(&secret()), None).unwrap()
    }

    #[test]
    fn a_minted_token_verifies_to_its_user_and_session() {
        let minter = Minter::new(&secret()).unwrap();
        let minted = minter.mint("alice", Some("s1"), None).unwrap();
        let grant = verifier().verify(&minted.token).unwrap();
        assert_eq!(grant.user.as_str(), "alice");
        assert_eq!(grant.session.as_ref().map(PathId::as_str), Some("s1"));
        let now = now_seconds();
        assert!(minted.expires_at >= now + 3590 && minted.expires_at <= now + 3600);
        let unbound = minter.mint("bob", None, None).unwrap();
        assert_eq!(verifier().verify(&unbound.token).unwrap().session, None);
    }

    #[test]
    fn bad_tokens_are_refused_with_their_reason() {
        let minted = Minter::new(&secret())
            .unwrap()
            .mint("alice", None, None)
            .unwrap();
        let other = Secret::new("another secret that is long enough!!");
        let foreign = Verifier::new(Some(&other), None).unwrap();
        assert_eq!(foreign.verify(&minted.token), Err(TokenError::BadSignature));
        // The claims of another token under this one's signature.
        let bob = Minter::new(&secret())
            .unwrap()
            .mint("bob", None, None)
            .unwrap();
        let part = |t: &str, i: usize| t.split('.').nth(i).unwrap().to_owned();
        let tampered = format!(
            "{}.{}.{}",
            part(&minted.token, 0),
            part(&bob.token, 1),
            part(&minted.token, 2)
        );
        assert_eq!(verifier().verify(&tampered), Err(TokenError::BadSignature));
        assert_eq!(verifier().verify("not.a.jwt"), Err(TokenError::Malformed));
        assert_eq!(verifier().verify(""), Err(TokenError::Malformed));
        assert_eq!(
            verifier().verify(&"a".repeat(MAX_TOKEN_BYTES + 1)),
            Err(TokenError::Malformed)
        );
        let expired = Claims {
            sub: "alice".into(),
            exp: now_seconds() - 3600,
            iat: now_seconds() - 7200,
            iss: Some(ISSUER.into()),
            session_id: None,
        };
        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &expired,
            &EncodingKey::from_secret(secret().expose().as_bytes()),
        )
        .unwrap();
        assert_eq!(verifier().verify(&token), Err(TokenError::Expired));
        let bad_user = Claims {
            sub: "../etc".into(),
            exp: now_seconds() + 60,
            ..expired
        };
        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &bad_user,
            &EncodingKey::from_secret(secret().expose().as_bytes()),
        )
        .unwrap();
        assert_eq!(verifier().verify(&token), Err(TokenError::Malformed));
    }

    #[test]
    fn a_token_signed_with_the_secret_but_another_issuer_is_refused() {
        let claims = Claims {
            sub: "alice".into(),
            exp: now_seconds() + 60,
            iat: now_seconds(),
            iss: Some("someone-else".into()),
            session_id: None,
        };
        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret().expose().as_bytes()),
        )
        .unwrap();
        assert_eq!(verifier().verify(&token), Err(TokenError::WrongIssuer));
    }

    /// A token signed with the shared secret carrying exactly `claims`.
    fn signed(claims: serde_json::Value) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret().expose().as_bytes()),
        )
        .unwrap()
    }

    #[test]
    fn a_grant_keeps_every_claim_of_its_token() {
        let exp = now_seconds() + 600;
        let claims = serde_json::json!({
            "sub": "alice", "exp": exp, "iss": ISSUER, "email": "a@example.com", "roles": ["admin"],
        });
        let grant = verifier().verify(&signed(claims.clone())).unwrap();
        assert_eq!(Value::Object(grant.claims.as_ref().clone()), claims);
    }

    #[test]
    fn a_shared_secret_token_needs_the_livegate_issuer_and_to_be_valid_now() {
        let now = now_seconds();
        let exp = now + 600;
        let without_iss = signed(serde_json::json!({"sub": "alice", "exp": exp}));
        assert_eq!(
            verifier().verify(&without_iss),
            Err(TokenError::WrongIssuer)
        );
        let later = signed(
            serde_json::json!({"sub": "alice", "exp": exp, "iss": ISSUER, "nbf": now + 300}),
        );
        assert_eq!(verifier().verify(&later), Err(TokenError::NotYetValid));
        let skewed =
            signed(serde_json::json!({"sub": "alice", "exp": exp, "iss": ISSUER, "nbf": now + 10}));
        assert!(verifier().verify(&skewed).is_ok(), "within the clock skew");
    }

    #[test]
    fn asymmetric_tokens_need_the_provider_key() {
        // With only the shared secret configured, an RS256 header has no key to verify with.
        let token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIiwiZXhwIjo5OTk5OTk5OTk5fQ.c2ln";
        assert_eq!(verifier().verify(token), Err(TokenError::BadSignature));
    }

    #[test]
    fn minting_bounds_the_lifetime_and_ids() {
        let minter = Minter::new(&secret()).unwrap();
        assert!(minter
            .mint("alice", None, Some(MAX_TTL + Duration::from_secs(1)))
            .is_err());
        assert!(minter.mint("alice", None, Some(Duration::ZERO)).is_err());
        assert!(minter.mint("a/b", None, None).is_err());
        assert!(Minter::new(&Secret::new("short")).is_err());
    }

    #[test]
    fn ttls_parse_with_units() {
        assert_eq!(parse_ttl("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_ttl("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_ttl("30m"), Ok(Duration::from_secs(1800)));
        assert!(parse_ttl("1w").is_err() && parse_ttl("h").is_err());
    }
}
