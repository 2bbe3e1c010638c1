//! The model's resumption handles on their way to the session store, off the run's path.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::task::TaskTracker;

use crate::lock::Recover;
use crate::session::{Fence, Session, SessionError, SessionService};

/// Keeps a live run's latest resumption handle with its session without holding up the run: a
/// store that is slow (a busy SQLite writer, a far PostgreSQL) must not stall the answer being
/// streamed. One write at a time per run, in order; a handle that a newer one overtakes while
/// the write before it is under way is skipped, since only the latest can resume the model. A
/// failed write costs only that handle (logged): the next turn brings another.
#[derive(Clone)]
pub(super) struct HandleKeeper(Arc<Keeper>);

struct Keeper {
    sessions: Arc<dyn SessionService>,
    /// Where the writes run.
    tasks: TaskTracker,
    app_name: String,
    user_id: String,
    session_id: String,
    /// The run's fence: a handle is the run's write like its events.
    fence: Fence,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The handle to store next, if any.
    next: Option<String>,
    /// Whether a task is writing.
    writing: bool,
}

impl HandleKeeper {
    pub(super) fn new(
        sessions: Arc<dyn SessionService>,
        session: &Session,
        tasks: TaskTracker,
    ) -> Self {
        HandleKeeper(Arc::new(Keeper {
            sessions,
            tasks,
            app_name: session.app_name.clone(),
            user_id: session.user_id.clone(),
            session_id: session.id.clone(),
            fence: session.fence.clone(),
            state: Mutex::default(),
        }))
    }

    /// Stores `handle` soon, in a task of its own.
    pub(super) fn keep(&self, handle: &str) {
        let mut state = self.0.lock();
        state.next = Some(handle.to_owned());
        if !state.writing {
            state.writing = true;
            self.0.tasks.spawn(Arc::clone(&self.0).write());
        }
    }
}

impl Keeper {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Each change is a single assignment: the state stays whole whatever panicked.
        self.state.lock_or_recover()
    }

    /// Writes the newest handle until none is waiting.
    async fn write(self: Arc<Self>) {
        loop {
            let handle = {
                let mut state = self.lock();
                match state.next.take() {
                    Some(handle) => handle,
                    None => {
                        state.writing = false;
                        return;
                    }
                }
            };
            let stored = self
                .sessions
                .set_resumption_handle(
                    &self.app_name,
                    &self.user_id,
                    &self.session_id,
                    Some(&handle),
                    &self.fence,
                )
                .await;
            match stored {
                Ok(()) => {}
                // The store fired the fence's latch: the run is ending.
                Err(SessionError::Fenced(_)) => {
                    self.lock().writing = false;
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "could not store the model's resumption handle")
                }
            }
        }
    }
}
