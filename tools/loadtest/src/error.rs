//! Why a load test could not run.

/// Why a load test could not run.
#[derive(Debug, thiserror::Error)]
pub enum LoadtestError {
    /// An audio file is unusable.
    #[error("audio {name}: {reason}")]
    Audio {
        /// The file.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Bad options.
    #[error("{0}")]
    Invalid(String),
    /// Writing the report or plot failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A command-line value the load test cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadArgument {
    /// A frame length that is not a multiple of 20 ms up to a second.
    #[error("invalid frame length {0:?} (a multiple of 20 ms up to 1000)")]
    FrameMs(String),
    /// A duration that is not a number (or too large).
    #[error("invalid duration {0:?} (e.g. 60s, 2m, 500ms)")]
    Duration(String),
    /// A duration in a unit there is not.
    #[error("invalid duration unit in {0:?} (ms, s or m)")]
    DurationUnit(String),
}

/// Why a session or a call failed (one of the run's errors).
#[derive(Debug, thiserror::Error)]
pub enum SessionFailure {
    /// The gateway could not be asked for a token.
    #[error("minting a token failed: {0}")]
    MintRequest(reqwest::Error),
    /// The gateway's answer to a token request is not JSON.
    #[error("minting a token: {status}: {source}")]
    MintAnswer {
        /// The answer's status.
        status: reqwest::StatusCode,
        /// Why it could not be read.
        source: reqwest::Error,
    },
    /// The gateway refused to mint a token.
    #[error("minting a token: {status}: {error}")]
    MintRefused {
        /// The answer's status.
        status: reqwest::StatusCode,
        /// Its `error`.
        error: serde_json::Value,
    },
    /// The upgrade request cannot be made (a bad URL or token).
    #[error(transparent)]
    Request(#[from] livegate_replay::client::RequestError),
    /// The WebSocket URL has no host.
    #[error("the URL has no host")]
    NoHost,
    /// The TCP connection failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The WebSocket handshake failed.
    #[error("{0}")]
    Handshake(tungstenite::Error),
    /// The first connection failed.
    #[error("connect failed: {0}")]
    Connect(Box<SessionFailure>),
    /// A connection took longer than the connect timeout.
    #[error("connect timed out")]
    ConnectTimeout,
    /// The run was stopped while the session waited to reconnect.
    #[error("stopped while reconnecting")]
    Stopped,
    /// No node took the session back after a restart close.
    #[error("reconnect failed after a restart close ({tries} tries): {last}")]
    Reconnect {
        /// Connections tried.
        tries: u32,
        /// Why the last failed.
        last: Box<SessionFailure>,
    },
    /// A frame could not be sent.
    #[error("send failed: {0}")]
    Send(tungstenite::Error),
    /// The carrier webhook could not be called or read.
    #[error("webhook: {0}")]
    Webhook(reqwest::Error),
    /// The carrier webhook refused the call.
    #[error("webhook answered {status}: {body}")]
    WebhookRefused {
        /// Its status.
        status: reqwest::StatusCode,
        /// Its body.
        body: String,
    },
    /// The webhook's TwiML names no stream.
    #[error("no <Stream> in the TwiML: {0}")]
    NoStream(String),
    /// The call's stream could not be opened.
    #[error("stream connect: {0}")]
    StreamConnect(tungstenite::Error),
    /// The call's stream refused a message.
    #[error("stream send: {0}")]
    StreamSend(tungstenite::Error),
    /// The call ended before the caller finished speaking.
    #[error("the call ended while speaking")]
    EndedWhileSpeaking,
    /// The gateway closed the call.
    #[error("the gateway closed the call ({0:?})")]
    CallClosed(Option<u16>),
    /// The gateway closed the call while it answered.
    #[error("the gateway closed the call mid-answer ({0:?})")]
    ClosedMidAnswer(Option<u16>),
    /// The gateway sent what Twilio's protocol has not (its first 120 characters).
    #[error("not Twilio's protocol: {0}")]
    NotTwilio(String),
    /// No answer came in time.
    #[error("no answer audio within {0:?}")]
    NoAnswer(std::time::Duration),
}
