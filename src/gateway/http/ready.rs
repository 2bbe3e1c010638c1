//! `/readyz`: ready when the session store and the artifact store can write (a tiny write each),
//! every MCP server of the agent tree is connected, and, with `--ready-checks-model`, when the model can be reached. The answer is cached briefly,
//! so a probe polled often costs one write per store a second at most.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::lock::Recover;
use crate::runner::Runner;

/// How long an answer is reused.
const CACHE_FOR: Duration = Duration::from_secs(1);
/// Longest a store's write probe or the model's connect may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How the model is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ModelCheck {
    /// Not at all, or an embedded model that is always there.
    None,
    /// A TCP connect to the model's host.
    Connect {
        /// `host:port`.
        authority: String,
    },
}

impl ModelCheck {
    /// The check for a model name and its WebSocket URL (`ws://` or `wss://`), if asked for.
    pub(crate) fn new(enabled: bool, model: &str, url: &str) -> Self {
        if !enabled || model == "sim" || model.is_empty() {
            return ModelCheck::None;
        }
        let (rest, port) = if let Some(rest) = url.strip_prefix("wss://") {
            (rest, 443)
        } else if let Some(rest) = url.strip_prefix("ws://") {
            (rest, 80)
        } else {
            (url, 443)
        };
        let host = rest.split(['/', '?']).next().unwrap_or(rest);
        let has_port = match host.rsplit_once(':') {
            Some((_, p)) => !p.contains(']') && p.parse::<u16>().is_ok(),
            None => false,
        };
        let authority = if has_port {
            host.to_owned()
        } else {
            format!("{host}:{port}")
        };
        ModelCheck::Connect { authority }
    }
}

/// Why the node is not ready (the body of `/readyz`'s 503). Each store's or the model's error
/// is kept as its message: the answer is cached and shared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotReady {
    /// The session store refused a write.
    #[error("session store cannot write: {0}")]
    Sessions(String),
    /// The session store did not answer.
    #[error("session store did not answer in time")]
    SessionsSlow,
    /// The artifact store refused a write.
    #[error("artifact store cannot write: {0}")]
    Artifacts(String),
    /// The artifact store did not answer.
    #[error("artifact store did not answer in time")]
    ArtifactsSlow,
    /// A toolset (an MCP server) is down.
    #[error("{0}")]
    Toolset(String),
    /// The model's host cannot be reached.
    #[error("model unreachable ({authority}): {reason}")]
    Model {
        /// Its host and port.
        authority: String,
        /// Why.
        reason: String,
    },
}

/// Answers `/readyz`.
#[derive(Debug)]
pub(crate) struct Readiness {
    model: ModelCheck,
    cached: Mutex<Option<(Instant, Result<(), NotReady>)>>,
}

impl Readiness {
    pub(crate) fn new(model: ModelCheck) -> Self {
        Readiness {
            model,
            cached: Mutex::new(None),
        }
    }

    /// Ready, or why not.
    pub(crate) async fn check(&self, runner: &Runner) -> Result<(), NotReady> {
        if let Some((at, answer)) = self.cached.lock_or_recover().as_ref() {
            if at.elapsed() < CACHE_FOR {
                return answer.clone();
            }
        }
        let answer = self.check_now(runner).await;
        *self.cached.lock_or_recover() = Some((Instant::now(), answer.clone()));
        answer
    }

    async fn check_now(&self, runner: &Runner) -> Result<(), NotReady> {
        let sessions = tokio::time::timeout(CHECK_TIMEOUT, runner.sessions.check_writable());
        let artifacts = tokio::time::timeout(CHECK_TIMEOUT, runner.artifacts.check_writable());
        let (sessions, artifacts) = tokio::join!(sessions, artifacts);
        match sessions {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(NotReady::Sessions(error.to_string())),
            Err(_) => return Err(NotReady::SessionsSlow),
        }
        match artifacts {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(NotReady::Artifacts(error.to_string())),
            Err(_) => return Err(NotReady::ArtifactsSlow),
        }
        // An MCP server that is down does not stop the gateway from starting, but it is not ready.
        for toolset in runner.agent.toolsets() {
            toolset.health().map_err(NotReady::Toolset)?;
        }
        if let ModelCheck::Connect { authority } = &self.model {
            let connect = tokio::net::TcpStream::connect(authority.as_str());
            let unreachable = |reason: String| NotReady::Model {
                authority: authority.clone(),
                reason,
            };
            match tokio::time::timeout(CHECK_TIMEOUT, connect).await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => return Err(unreachable(error.to_string())),
                Err(_) => return Err(unreachable("timed out".into())),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_check_connects_to_the_urls_host() {
        let check = |url| ModelCheck::new(true, "gemini-live-2.5-flash", url);
        let authority = |a: &str| ModelCheck::Connect {
            authority: a.into(),
        };
        assert_eq!(
            check("wss://generativelanguage.googleapis.com/ws/x"),
            authority("generativelanguage.googleapis.com:443")
        );
        assert_eq!(check("ws://127.0.0.1:9300"), authority("127.0.0.1:9300"));
        assert_eq!(check("ws://[::1]:9300/x"), authority("[::1]:9300"));
        assert_eq!(ModelCheck::new(true, "sim", "ws://x"), ModelCheck::None);
        assert_eq!(
            ModelCheck::new(false, "gemini-x", "ws://x"),
            ModelCheck::None
        );
    }
}
