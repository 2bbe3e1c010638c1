//! One live run per session: a newer connection takes the session over from an older one, on
//! this node (an in-process map) and, with a shared store, across nodes (`SharedLeases`).

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::latch::Latch;
use crate::session::Fence;

/// A connection's hold on a session.
#[derive(Debug, Clone)]
pub struct Lease {
    id: u64,
    /// Fires when a newer connection (on this node or another) takes the session over, or the
    /// store refuses one of the run's writes because another run holds the session now.
    pub taken_over: Latch,
    /// Fires when this node can no longer prove it holds the session: the store has been
    /// unreachable for the lease's time to live (an outage, not a takeover).
    pub store_lost: Latch,
    /// Fired once the holder's run has ended and flushed (when its guard drops).
    pub finished: Latch,
}

impl Lease {
    /// This node's id for the lease.
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// Why a connection did not get its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// The shared store could not be reached for the hand-over grace: the run does not
    /// start without its lease (the client is told to try again).
    #[error("the session store is unreachable: the session's lease cannot be taken")]
    Unavailable,
    /// A newer connection took the session over while this one waited for it.
    #[error("a newer connection took the session over")]
    Superseded,
}

/// The part of a session lease that other nodes see: implemented over PostgreSQL, absent on a
/// single node (the in-process map is the whole story there).
#[async_trait]
pub trait SharedLeases: Send + Sync + Debug {
    /// Takes the session for this node's `lease` and returns its fencing token: another node's
    /// holder is told to stop and this waits for it to let go, at most `grace`, then takes the
    /// session anyway. Never returns without the lease: a store unreachable for `grace` (or the
    /// time to live if longer) is `Unavailable`, and the lease's `taken_over` firing meanwhile `Superseded`.
    /// Later, `taken_over` fires if another node takes the session, `store_lost` if this node
    /// can no longer prove it holds it.
    async fn acquire(
        &self,
        user_id: &str,
        session_id: &str,
        lease: &Lease,
        grace: Duration,
    ) -> Result<i64, LeaseError>;

    /// Gives the session back, if `lease` still holds it.
    async fn release(&self, user_id: &str, session_id: &str, lease: u64);
}

/// Who drives each session's live run.
#[derive(Debug, Clone, Default)]
pub struct SessionRegistry(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    next_id: AtomicU64,
    leases: Mutex<HashMap<(String, String), Lease>>,
    released: tokio::sync::Notify,
    shared: Option<Arc<dyn SharedLeases>>,
    /// Shared releases under way (a guard drops in sync code and hands its release to a task).
    releasing: AtomicUsize,
}

/// A session held by one connection, given back when dropped.
#[derive(Debug)]
pub struct LeaseGuard {
    registry: SessionRegistry,
    user_id: String,
    session_id: String,
    lease: Lease,
    /// What the store checks the run's writes with.
    fence: Fence,
}

impl LeaseGuard {
    /// The fence of the run this lease allows (trivially held on a single node).
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }
}

impl std::ops::Deref for LeaseGuard {
    type Target = Lease;

    fn deref(&self) -> &Lease {
        &self.lease
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.registry
            .release(&self.user_id, &self.session_id, &self.lease);
    }
}

impl SessionRegistry {
    /// A registry for this node alone.
    pub fn local() -> Self {
        Self::default()
    }

    /// A registry whose leases other nodes also respect.
    pub fn shared(shared: Arc<dyn SharedLeases>) -> Self {
        SessionRegistry(Arc::new(Inner {
            shared: Some(shared),
            ..Inner::default()
        }))
    }

    /// Takes the session: the previous holder (if any, on any node) is told to stop, and this
    /// waits (bounded) until its run has ended, so two runs never write one session at once.
    /// Across nodes the store also fences each run's writes with the lease's token.
    pub async fn acquire(
        &self,
        user_id: &str,
        session_id: &str,
        grace: Duration,
    ) -> Result<LeaseGuard, LeaseError> {
        let inner = &self.0;
        let lease = Lease {
            id: inner.next_id.fetch_add(1, Ordering::Relaxed),
            taken_over: Latch::new(),
            store_lost: Latch::new(),
            finished: Latch::new(),
        };
        let previous = inner.leases.lock().ok().and_then(|mut leases| {
            leases.insert((user_id.to_owned(), session_id.to_owned()), lease.clone())
        });
        // From here on the guard gives the session back however this call ends.
        let mut guard = LeaseGuard {
            registry: self.clone(),
            user_id: user_id.to_owned(),
            session_id: session_id.to_owned(),
            lease: lease.clone(),
            fence: Fence::none(),
        };
        if let Some(previous) = previous {
            previous.taken_over.fire();
            let finished = tokio::select! {
                finished = tokio::time::timeout(grace, previous.finished.fired()) => finished,
                () = lease.taken_over.fired() => return Err(LeaseError::Superseded),
            };
            if finished.is_err() {
                tracing::warn!(
                    user_id,
                    session_id,
                    "previous connection did not finish in time; taking over anyway"
                );
            }
        }
        if let Some(shared) = &inner.shared {
            // A release of the previous local lease still under way is for an older lease id
            // and cannot undo this one.
            let epoch = shared.acquire(user_id, session_id, &lease, grace).await?;
            guard.fence = Fence::held(epoch, lease.taken_over.clone());
        }
        Ok(guard)
    }

    /// Gives the session back (if this lease still holds it) and marks the run finished.
    fn release(&self, user_id: &str, session_id: &str, lease: &Lease) {
        let inner = &self.0;
        if let Ok(mut leases) = inner.leases.lock() {
            let key = (user_id.to_owned(), session_id.to_owned());
            if leases.get(&key).is_some_and(|held| held.id == lease.id) {
                leases.remove(&key);
            }
        }
        if let Some(shared) = inner.shared.clone() {
            let (user_id, session_id, id) = (user_id.to_owned(), session_id.to_owned(), lease.id);
            // No runtime means the process is ending; the lease then expires by itself.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                inner.releasing.fetch_add(1, Ordering::AcqRel);
                let registry = self.clone();
                runtime.spawn(async move {
                    shared.release(&user_id, &session_id, id).await;
                    registry.0.releasing.fetch_sub(1, Ordering::AcqRel);
                    registry.0.released.notify_waiters();
                });
            }
        }
        lease.finished.fire();
        inner.released.notify_waiters();
    }

    /// Waits until no session has a live connection (every run ended and flushed) and every
    /// shared lease given back so far has reached the store.
    pub async fn idle(&self) {
        loop {
            let released = self.0.released.notified();
            if self.active() == 0 && self.0.releasing.load(Ordering::Acquire) == 0 {
                return;
            }
            released.await;
        }
    }

    /// Number of sessions with a live connection on this node.
    pub fn active(&self) -> usize {
        self.0.leases.lock().map(|l| l.len()).unwrap_or(0)
    }
}
