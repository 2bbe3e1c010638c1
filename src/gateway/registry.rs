//! One live run per session: a newer connection takes the session over from an older one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::signal::Signal;

/// A connection's hold on a session.
#[derive(Debug, Clone)]
pub struct Lease {
    id: u64,
    /// Fires when a newer connection takes the session over.
    pub taken_over: Signal,
    /// Fired by the holder once its run has ended and flushed.
    pub finished: Signal,
}

/// Who drives each session's live run.
#[derive(Debug, Default)]
pub struct SessionRegistry {
    next_id: AtomicU64,
    leases: Mutex<HashMap<(String, String), Lease>>,
    released: tokio::sync::Notify,
}

impl SessionRegistry {
    /// Takes the session: the previous holder (if any) is told to stop, and this waits (bounded)
    /// until its run has ended, so two runs never write one session at once.
    pub async fn acquire(&self, user_id: &str, session_id: &str, grace: Duration) -> Lease {
        let lease = Lease {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            taken_over: Signal::new(),
            finished: Signal::new(),
        };
        let previous = self.leases.lock().ok().and_then(|mut leases| {
            leases.insert((user_id.to_owned(), session_id.to_owned()), lease.clone())
        });
        if let Some(previous) = previous {
            previous.taken_over.fire();
            if tokio::time::timeout(grace, previous.finished.fired())
                .await
                .is_err()
            {
                tracing::warn!(
                    user_id,
                    session_id,
                    "previous connection did not finish in time; taking over anyway"
                );
            }
        }
        lease
    }

    /// Gives the session back (if this lease still holds it) and marks the run finished.
    pub fn release(&self, user_id: &str, session_id: &str, lease: &Lease) {
        if let Ok(mut leases) = self.leases.lock() {
            let key = (user_id.to_owned(), session_id.to_owned());
            if leases.get(&key).is_some_and(|held| held.id == lease.id) {
                leases.remove(&key);
            }
        }
        lease.finished.fire();
        self.released.notify_waiters();
    }

    /// Waits until no session has a live connection (every run ended and flushed).
    pub async fn idle(&self) {
        loop {
            let released = self.released.notified();
            if self.active() == 0 {
                return;
            }
            released.await;
        }
    }

    /// Number of sessions with a live connection.
    pub fn active(&self) -> usize {
        self.leases.lock().map(|l| l.len()).unwrap_or(0)
    }
}
