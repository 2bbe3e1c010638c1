//! Phone calls: a carrier's voice webhook answered with a bidirectional media stream to this
//! gateway, and each stream served as one live run (one call = one session).
//!
//! | file | owns |
//! |---|---|
//! | `carrier.rs` | the [`Carrier`] trait every adapter implements, and what they share (forms, XML, bounds) |
//! | `twilio.rs`, `telnyx.rs` | one carrier each: its stream messages, its webhook signature, its XML answer |
//! | `routes.rs` | the routes: the webhook, and the stream (by its token, or anonymous) upgraded to a call |
//! | `webhook.rs` | `POST /telephony/{carrier}/voice`: signature checked, a short-lived stream token minted, the XML |
//! | `call.rs` | one call whatever the carrier: start, state, audio in, DTMF, marks, the ends |
//! | `output.rs` | the run's events as carrier messages: audio to 8 kHz μ-law with marks, `clear` on barge-in |
//!
//! Adding a carrier is a file implementing [`Carrier`] and its line in [`carrier()`].

mod call;
pub mod carrier;
mod output;
mod routes;
pub mod telnyx;
pub mod twilio;
mod webhook;

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use clap::ValueEnum;

use carrier::CallStart;
pub use carrier::Carrier;
pub use routes::routes;

use super::auth::{Grant, Secret};
use super::ids::{InvalidId, PathId};

/// The session state key an interrupted answer's heard part is committed under (session scope,
/// so it stays in the session's record): `{"heardMs", "sentMs", "transcript"}`.
pub const HEARD_STATE_KEY: &str = "interrupted_answer";
/// How long a stream token minted by the webhook stays valid: the carrier opens the stream at
/// once.
const STREAM_TOKEN_TTL: Duration = Duration::from_secs(60);

/// The carrier of that name in the routes.
pub fn carrier(name: &str) -> Option<&'static dyn Carrier> {
    match name {
        "twilio" => Some(&twilio::Twilio),
        "telnyx" => Some(&telnyx::Telnyx),
        _ => None,
    }
}

/// How the keys a caller presses reach the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum DtmfMode {
    /// Gathered until `#` or a pause, then a user turn `DTMF: 123#`.
    #[default]
    Turn,
    /// Kept in `temp:dtmf`, for the agent's `get_keypad_digits` tool.
    Tool,
    /// Ignored.
    Off,
}

/// Where a call's session id comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SessionFrom {
    /// The carrier's call id: one session per call.
    #[default]
    Call,
    /// The caller's number: a caller's calls continue one session.
    Caller,
    /// A custom parameter of the stream (`parameter:NAME`), else the call id.
    Parameter(String),
}

/// A session id source other than `call`, `caller` or `parameter:NAME`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid session id source {0:?} (call, caller or parameter:NAME)")]
pub struct InvalidSessionFrom(String);

impl std::str::FromStr for SessionFrom {
    type Err = InvalidSessionFrom;

    fn from_str(s: &str) -> Result<Self, InvalidSessionFrom> {
        match s {
            "call" => Ok(SessionFrom::Call),
            "caller" => Ok(SessionFrom::Caller),
            _ => match s.strip_prefix("parameter:") {
                Some(name) if !name.is_empty() => Ok(SessionFrom::Parameter(name.to_owned())),
                _ => Err(InvalidSessionFrom(s.to_owned())),
            },
        }
    }
}

/// The telephony options of `livegate serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct TelephonyArgs {
    /// The gateway's public base URL as carriers reach it (`https://voice.example.com`): the URL
    /// their webhooks are signed over and the base of the stream URL [default: the request's
    /// `Host`, with this gateway's own scheme].
    #[arg(long, env = "LIVEGATE_TELEPHONY_PUBLIC_URL")]
    pub telephony_public_url: Option<String>,
    /// How keys pressed on the phone reach the agent: `turn` (a user turn `DTMF: 12#` after `#`
    /// or a pause), `tool` (kept for the `get_keypad_digits` tool), `off`.
    #[arg(long, env = "LIVEGATE_TELEPHONY_DTMF", value_enum, default_value_t = DtmfMode::Turn)]
    pub telephony_dtmf: DtmfMode,
    /// The pause after which keys pressed go to the agent without a `#`, in milliseconds.
    #[arg(long, env = "LIVEGATE_TELEPHONY_DTMF_GAP_MS", default_value_t = 1500)]
    pub telephony_dtmf_gap_ms: u64,
    /// Prefix of the session state keys a call sets (`caller`, `called`, `call_id`, `carrier`,
    /// `stream_id`, `dtmf` and each custom parameter): `temp:` keeps them out of the stored
    /// session, `user:` or an empty prefix keeps them.
    #[arg(long, env = "LIVEGATE_TELEPHONY_STATE_PREFIX", default_value = "temp:")]
    pub telephony_state_prefix: String,
    /// Where a call's session id comes from: `call` (the carrier's call id), `caller` (the
    /// caller's number), or `parameter:NAME` (a parameter of the webhook URL's query).
    #[arg(long, env = "LIVEGATE_TELEPHONY_SESSION_ID", default_value = "call")]
    pub telephony_session_id: SessionFrom,
    /// Raw 8 kHz μ-law audio said to the caller when the agent fails, before the call ends
    /// (`sox message.wav -t ul -r 8000 -c 1 goodbye.ulaw`) [default: none].
    #[arg(long, env = "LIVEGATE_TELEPHONY_GOODBYE")]
    pub telephony_goodbye: Option<PathBuf>,
    /// The carriers' webhook secrets, read from the environment by
    /// [`TelephonySecrets::from_env`], never from flags.
    #[arg(skip)]
    pub secrets: TelephonySecrets,
}

impl Default for TelephonyArgs {
    /// The declared defaults, as with no flags and no environment.
    fn default() -> Self {
        crate::cli::defaults_of()
    }
}

/// The carriers' webhook secrets (from the environment; never logged).
#[derive(Debug, Clone, Default)]
pub struct TelephonySecrets {
    /// `TWILIO_AUTH_TOKEN`: Twilio signs its webhooks with it.
    pub twilio_auth_token: Option<Secret>,
    /// `TELNYX_PUBLIC_KEY`: Telnyx's webhooks verify with it.
    pub telnyx_public_key: Option<Secret>,
}

impl TelephonySecrets {
    /// Each carrier's secret, when its variable is set and not blank.
    pub fn from_env() -> Self {
        let env = super::auth::secret_from_env;
        TelephonySecrets {
            twilio_auth_token: env(twilio::AUTH_TOKEN_ENV),
            telnyx_public_key: env(telnyx::PUBLIC_KEY_ENV),
        }
    }

    fn for_carrier(&self, carrier: &dyn Carrier) -> Option<&Secret> {
        match carrier.name() {
            "twilio" => self.twilio_auth_token.as_ref(),
            "telnyx" => self.telnyx_public_key.as_ref(),
            _ => None,
        }
    }
}

/// The settings a call reads.
#[derive(Debug, Clone)]
pub struct CallSettings {
    /// How keys reach the agent.
    pub dtmf: DtmfMode,
    /// The pause that sends gathered keys.
    pub dtmf_gap: Duration,
    /// The state keys' prefix.
    pub state_prefix: String,
    /// Where session ids come from.
    pub session_from: SessionFrom,
    /// The public base URL, if set (no trailing slash).
    pub public_url: Option<String>,
}

/// Why the telephony options cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TelephonyError {
    /// The goodbye message cannot be read.
    #[error("cannot read --telephony-goodbye {}: {source}", path.display())]
    ReadGoodbye {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The goodbye message is empty or too long.
    #[error("--telephony-goodbye must hold up to 30 s of 8 kHz μ-law")]
    GoodbyeSize,
    /// The public URL is not an http(s) URL.
    #[error("--telephony-public-url must be an http(s) URL, not {0:?}")]
    PublicUrl(String),
}

/// Why a call has no user and session ids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallIdError {
    /// A stream token for a user but no session.
    #[error("the stream token is not bound to a session")]
    Unbound,
    /// The ids the call would have are not valid ids.
    #[error(transparent)]
    Id(#[from] InvalidId),
}

/// The gateway's telephony: settings, secrets and the goodbye message.
#[derive(Debug)]
pub struct Telephony {
    /// What calls read.
    pub settings: CallSettings,
    secrets: TelephonySecrets,
    /// Said when the agent fails (μ-law, 8 kHz).
    pub goodbye: Option<Bytes>,
    /// How long a call may go on once the node drains.
    pub drain_time: Duration,
}

impl Telephony {
    /// Telephony as configured; `drain_timeout` is the node's `--drain-timeout` (calls in progress
    /// get it less a margin to flush).
    pub fn new(args: &TelephonyArgs, drain_timeout: Duration) -> Result<Self, TelephonyError> {
        let goodbye = match &args.telephony_goodbye {
            Some(path) => {
                let clip = std::fs::read(path).map_err(|source| TelephonyError::ReadGoodbye {
                    path: path.clone(),
                    source,
                })?;
                if clip.is_empty() || clip.len() > 8_000 * 30 {
                    return Err(TelephonyError::GoodbyeSize);
                }
                Some(Bytes::from(clip))
            }
            None => None,
        };
        let public_url = args
            .telephony_public_url
            .as_deref()
            .map(|url| url.trim().trim_end_matches('/').to_owned())
            .filter(|url| !url.is_empty());
        if let Some(url) = &public_url {
            if !url.starts_with("https://") && !url.starts_with("http://") {
                return Err(TelephonyError::PublicUrl(url.clone()));
            }
        }
        Ok(Telephony {
            settings: CallSettings {
                dtmf: args.telephony_dtmf,
                dtmf_gap: Duration::from_millis(args.telephony_dtmf_gap_ms.clamp(100, 30_000)),
                state_prefix: args.telephony_state_prefix.clone(),
                session_from: args.telephony_session_id.clone(),
                public_url,
            },
            secrets: args.secrets.clone(),
            goodbye,
            drain_time: drain_timeout.saturating_sub(Duration::from_secs(3)),
        })
    }
}

/// A call's user and session ids.
#[derive(Debug, Clone)]
pub struct CallIds {
    /// The user: `tel-` and the caller's digits, else `phone`.
    pub user: PathId,
    /// The session (see [`SessionFrom`]).
    pub session: PathId,
}

impl CallIds {
    /// The ids for a call from its number and id, by the configured rule.
    fn derive(
        settings: &CallSettings,
        call_id: &str,
        caller: Option<&str>,
        parameter: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, CallIdError> {
        let user = match caller.map(digits).filter(|d| !d.is_empty()) {
            Some(digits) => format!("tel-{digits}"),
            None => "phone".to_owned(),
        };
        let session = match &settings.session_from {
            SessionFrom::Call => call_id.to_owned(),
            SessionFrom::Caller => format!("{user}-calls"),
            SessionFrom::Parameter(name) => parameter(name).unwrap_or_else(|| call_id.to_owned()),
        };
        Ok(CallIds {
            user: PathId::parse("user id", &user)?,
            session: PathId::new_session(&session)?,
        })
    }

    /// The ids of a call whose stream has started: a stream token's, else derived from the
    /// start's call id and parameters.
    fn resolve(
        telephony: &Telephony,
        start: &CallStart,
        grant: Option<&Grant>,
    ) -> Result<Self, CallIdError> {
        if let Some(grant) = grant {
            let session = grant.session.clone().ok_or(CallIdError::Unbound)?;
            return Ok(CallIds {
                user: grant.user.clone(),
                session,
            });
        }
        let parameter = |name: &str| {
            start
                .parameters
                .get(name)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        let caller = parameter("From");
        Self::derive(
            &telephony.settings,
            &start.call_id,
            caller.as_deref(),
            parameter,
        )
    }
}

/// The digits of a phone number (`+1 555-0100` → `15550100`), at most 32.
fn digits(number: &str) -> String {
    number
        .chars()
        .filter(char::is_ascii_digit)
        .take(32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_from_the_call_the_caller_or_a_parameter() {
        let mut settings = Telephony::new(&TelephonyArgs::default(), Duration::from_secs(10))
            .unwrap()
            .settings;
        let none = |_: &str| None;
        let ids = CallIds::derive(&settings, "CA123", Some("+1 (555) 010-0999"), none).unwrap();
        assert_eq!(ids.user.as_str(), "tel-15550100999");
        assert_eq!(ids.session.as_str(), "CA123");
        let ids = CallIds::derive(&settings, "CA123", None, none).unwrap();
        assert_eq!(ids.user.as_str(), "phone");
        settings.session_from = "caller".parse().unwrap();
        let ids = CallIds::derive(&settings, "CA9", Some("+15550100"), none).unwrap();
        assert_eq!(ids.session.as_str(), "tel-15550100-calls");
        settings.session_from = "parameter:case".parse().unwrap();
        let ids = CallIds::derive(&settings, "CA9", None, |_| Some("case-42".to_owned())).unwrap();
        assert_eq!(ids.session.as_str(), "case-42");
        assert!(CallIds::derive(&settings, "CA9", None, |_| Some("a/b".into())).is_err());
        assert!("parameter:".parse::<SessionFrom>().is_err());
    }
}
