//! Recordings a file store could not save when their run ended (its disk was full), kept by the
//! process and saved as soon as the disk has room again: in their spool file when it holds them
//! whole, else in memory, up to [`MAX_IN_MEMORY`] in all. They are lost if the process stops
//! first (a bucket's outbox, on another disk, outlives its process; a full disk has no room for
//! one).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::{Artifact, ArtifactError, ArtifactScope, ArtifactService, SpoolFile};
use crate::lock::Recover;

/// Most bytes of recordings held in memory for a later save, in all: what is over it is lost
/// (logged), so a disk that stays full cannot take the process's memory.
pub(super) const MAX_IN_MEMORY: usize = 256 * 1024 * 1024;
/// The first wait before the saves are tried again; it doubles up to the maximum.
const BACKOFF: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// A recording waiting for its save: where it goes, and its bytes.
#[derive(Debug)]
struct Unsaved {
    to: Destination,
    bytes: Kept,
}

/// Where a recording goes: the artifact it becomes a version of, and its type.
#[derive(Debug)]
struct Destination {
    app_name: String,
    user_id: String,
    session_id: String,
    filename: String,
    mime_type: String,
}

impl Destination {
    fn scope(&self) -> ArtifactScope<'_> {
        ArtifactScope {
            app_name: &self.app_name,
            user_id: &self.user_id,
            session_id: &self.session_id,
        }
    }
}

#[derive(Debug)]
enum Kept {
    /// Whole in its spool file.
    File(SpoolFile),
    /// Whole in memory.
    Memory(Bytes),
}

impl Unsaved {
    fn new(scope: ArtifactScope<'_>, filename: &str, mime_type: String, bytes: Kept) -> Self {
        let to = Destination {
            app_name: scope.app_name.to_owned(),
            user_id: scope.user_id.to_owned(),
            session_id: scope.session_id.to_owned(),
            filename: filename.to_owned(),
            mime_type,
        };
        Unsaved { to, bytes }
    }

    fn in_memory(&self) -> usize {
        match &self.bytes {
            Kept::Memory(data) => data.len(),
            Kept::File(_) => 0,
        }
    }
}

/// The recordings waiting for a save, shared by a store and the task saving them.
#[derive(Debug, Default)]
pub(super) struct Later {
    queue: Mutex<Queue>,
}

#[derive(Debug, Default)]
struct Queue {
    held: VecDeque<Unsaved>,
    /// A task is saving them.
    running: bool,
}

impl Queue {
    fn in_memory(&self) -> usize {
        self.held.iter().map(Unsaved::in_memory).sum()
    }
}

impl Later {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Every change is a whole push or swap; a panic elsewhere cannot tear one.
        self.queue.lock_or_recover()
    }

    /// Takes a recording whole in its spool file.
    pub(super) fn hold_file(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        spool: SpoolFile,
    ) {
        let held = Unsaved::new(scope, filename, mime_type, Kept::File(spool));
        self.lock().held.push_back(held);
    }

    /// Takes a recording whole in memory, unless that would take the memory held past
    /// [`MAX_IN_MEMORY`].
    pub(super) fn hold_bytes(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        data: Bytes,
    ) -> Result<(), ArtifactError> {
        let mut queue = self.lock();
        if queue.in_memory().saturating_add(data.len()) > MAX_IN_MEMORY {
            return Err(ArtifactError::InvalidArgument(format!(
                "{MAX_IN_MEMORY} bytes of recordings already wait in memory for room on the disk"
            )));
        }
        queue
            .held
            .push_back(Unsaved::new(scope, filename, mime_type, Kept::Memory(data)));
        Ok(())
    }

    /// Starts the task that saves the recordings with `store` unless it runs already (or there
    /// is no runtime to run it on: they then wait for the next recording held). It tries with
    /// backoff until none is left or `stop` fires.
    pub(super) fn run<S: ArtifactService + 'static>(
        self: &Arc<Self>,
        store: S,
        stop: CancellationToken,
    ) {
        let mut queue = self.lock();
        if queue.running {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        queue.running = true;
        runtime.spawn(save_held(Arc::clone(self), store, stop));
    }
}

/// Saves the held recordings, oldest first, with backoff, until none is left or `stop` fires.
async fn save_held<S: ArtifactService>(later: Arc<Later>, store: S, stop: CancellationToken) {
    let mut backoff = BACKOFF;
    loop {
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stop.cancelled() => {
                let mut queue = later.lock();
                let lost = queue.held.len();
                queue.held.clear();
                queue.running = false;
                if lost > 0 {
                    tracing::error!(lost, "the store closed with recordings still waiting for room on its disk");
                }
                return;
            }
        }
        let batch = std::mem::take(&mut later.lock().held);
        let mut failed = VecDeque::new();
        for held in batch {
            if let Some(held) = save_one(&store, held).await {
                failed.push_back(held);
            }
        }
        let mut queue = later.lock();
        failed.append(&mut queue.held);
        queue.held = failed;
        if queue.held.is_empty() {
            queue.running = false;
            return;
        }
        drop(queue);
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Saves one recording; it comes back if the save failed.
async fn save_one<S: ArtifactService>(store: &S, held: Unsaved) -> Option<Unsaved> {
    let Unsaved { to, bytes } = held;
    let (scope, filename, mime_type) = (to.scope(), &to.filename, &to.mime_type);
    let saved = match bytes {
        Kept::File(spool) => store
            .save_spooled(scope, filename, mime_type.clone(), spool)
            .await
            .map_err(|(error, spool)| (error, Kept::File(spool))),
        Kept::Memory(data) => {
            let artifact = Artifact {
                data: data.clone(),
                mime_type: mime_type.clone(),
            };
            store
                .save(scope, filename, artifact)
                .await
                .map_err(|error| (error, Kept::Memory(data)))
        }
    };
    match saved {
        Ok(version) => {
            tracing::info!(
                filename,
                version,
                "a recording kept for a full disk is saved"
            );
            None
        }
        Err((error, bytes)) => {
            tracing::debug!(%error, filename, "a recording kept for a full disk is still not saved");
            Some(Unsaved { to, bytes })
        }
    }
}
