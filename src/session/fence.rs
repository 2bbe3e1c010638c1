//! `Fence`: a run's proof that it still holds its session's lease, carried with the run's copy
//! of the session and checked by the store with every write the run makes.
//!
//! Several nodes share one PostgreSQL store; each session's lease (in the gateway's cluster
//! layer) hands out a fencing token, an epoch from one sequence that grows with every acquire
//! and takeover. The run claims the session with it before reading it; the session row keeps the
//! highest epoch claimed, and a fenced write commits only while the row still has the run's own
//! epoch, checked in the statement that writes. A run whose lease was taken (a node paused past
//! its lease, a lost notice) has its writes refused with [`SessionError::Fenced`]
//! (super::SessionError::Fenced) and the fence's latch fired, which ends the run.
//!
//! A store of one process (memory, SQLite) has one node and no other writer to fence out: its
//! runs carry the trivially held [`Fence::none`], and so do writes that are not a leased run's
//! (a `/run` turn, the REST API).

use std::sync::Arc;

use crate::latch::Latch;

/// A run's hold on its session, as the store checks it.
#[derive(Debug, Clone, Default)]
pub struct Fence(Option<Arc<Token>>);

#[derive(Debug)]
struct Token {
    epoch: i64,
    /// Fired when the store refuses a write made with this token.
    refused: Latch,
}

impl Fence {
    /// No token: the write is not fenced (a store of one process, or no leased run).
    pub fn none() -> Self {
        Fence(None)
    }

    /// The lease's token `epoch`; `refused` fires when a write with it is refused.
    pub fn held(epoch: i64, refused: Latch) -> Self {
        Fence(Some(Arc::new(Token { epoch, refused })))
    }

    /// The fencing token, if any.
    pub fn epoch(&self) -> Option<i64> {
        self.0.as_ref().map(|token| token.epoch)
    }

    /// The store refused a write with this token: the lease is someone else's now.
    pub fn refuse(&self) {
        if let Some(token) = &self.0 {
            if token.refused.fire() {
                tracing::warn!(
                    epoch = token.epoch,
                    "session write refused: another run holds the session's lease now"
                );
            }
        }
    }
}

/// A fence is how a session copy may be written, not part of the session's value.
impl PartialEq for Fence {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusing_fires_the_latch_once() {
        let refused = Latch::new();
        let fence = Fence::held(7, refused.clone());
        assert_eq!(fence.epoch(), Some(7));
        fence.refuse();
        assert!(refused.is_fired());
        assert_eq!(Fence::none().epoch(), None);
        Fence::none().refuse();
    }
}
