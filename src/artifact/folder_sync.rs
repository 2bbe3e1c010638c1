//! Folder syncs shared by the saves that need them at once.
//!
//! A save that creates or renames a name in a folder must sync that folder before it reports the
//! version saved. Every recording is a folder of its own in its session's folder, so the two
//! recordings a turn saves together (the user's and the model's) both need the session's folder
//! synced. One sync covers every change made in the folder before it *started*; so a save takes a
//! [`Ticket`] right after its change, and at its end is satisfied by any sync of that folder that
//! started after the ticket — its own, or one another save ran (or is running) meanwhile.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::lock::Recover;

/// Folders remembered past their last sync before idle ones are forgotten (a forgotten folder
/// only costs its next save a sync of its own).
const REMEMBERED: usize = 1024;

/// The moment a change was made in a folder: a sync started later covers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Ticket(u64);

/// The folder syncs of one store.
#[derive(Debug, Default)]
pub(super) struct FolderSyncs {
    state: Mutex<State>,
    /// Woken when a sync ends.
    ended: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Counts every sync started, and stamps tickets with the count so far.
    clock: u64,
    folders: HashMap<PathBuf, Folder>,
    /// Syncs run (not shared), for tests.
    #[cfg(test)]
    run: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Folder {
    /// A sync of the folder is running.
    running: bool,
    /// The stamp of the latest sync that started and succeeded (0: none known).
    synced: u64,
}

impl FolderSyncs {
    /// A ticket for a change just made (in any folder).
    pub(super) fn ticket(&self) -> Ticket {
        Ticket(self.lock().clock)
    }

    /// Returns once `folder` has been synced by a sync that started after `ticket`: at once if
    /// one already ended, after the running one if it started late enough, else after running
    /// one itself with `sync` (blocking).
    pub(super) fn sync(
        &self,
        folder: &Path,
        ticket: Ticket,
        sync: impl Fn(&Path) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut state = self.lock();
        loop {
            let known = state.folders.get(folder).copied().unwrap_or_default();
            if known.synced > ticket.0 {
                return Ok(());
            }
            if !known.running {
                break;
            }
            state = self
                .ended
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        state.clock += 1;
        let stamp = state.clock;
        if state.folders.len() >= REMEMBERED {
            state.folders.retain(|_, f| f.running);
        }
        state
            .folders
            .entry(folder.to_path_buf())
            .or_default()
            .running = true;
        #[cfg(test)]
        {
            state.run += 1;
        }
        drop(state);
        let result = sync(folder);
        let mut state = self.lock();
        if let Some(known) = state.folders.get_mut(folder) {
            known.running = false;
            if result.is_ok() {
                known.synced = known.synced.max(stamp);
            }
        }
        drop(state);
        self.ended.notify_all();
        result
    }

    /// No sync runs while the lock is held, so a poisoned one holds consistent state.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock_or_recover()
    }

    #[cfg(test)]
    fn run(&self) -> u64 {
        self.lock().run
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(_: &Path) -> std::io::Result<()> {
        Ok(())
    }

    #[test]
    fn a_sync_started_after_a_change_covers_it_and_one_before_does_not() {
        let syncs = FolderSyncs::default();
        let session = Path::new("/root/app/user/session");
        // Both recordings of a turn made their folders in the session's folder.
        let first = syncs.ticket();
        let second = syncs.ticket();
        syncs.sync(session, first, ok).unwrap();
        assert_eq!(syncs.run(), 1);
        // The second save's change came before that sync started: covered.
        syncs.sync(session, second, ok).unwrap();
        assert_eq!(syncs.run(), 1);
        // A change after it needs a sync of its own, and another folder is not covered by it.
        let later = syncs.ticket();
        syncs.sync(session, later, ok).unwrap();
        assert_eq!(syncs.run(), 2);
        syncs
            .sync(Path::new("/root/app/user/other"), later, ok)
            .unwrap();
        assert_eq!(syncs.run(), 3);
    }

    #[test]
    fn a_failed_sync_covers_nothing() {
        let syncs = FolderSyncs::default();
        let folder = Path::new("/root/f");
        let first = syncs.ticket();
        let second = syncs.ticket();
        let failed = syncs.sync(folder, first, |_| Err(std::io::ErrorKind::Other.into()));
        assert!(failed.is_err());
        syncs.sync(folder, second, ok).unwrap();
        assert_eq!(syncs.run(), 2);
    }

    #[test]
    fn a_save_waiting_on_a_running_sync_that_started_late_enough_shares_it() {
        let syncs = std::sync::Arc::new(FolderSyncs::default());
        let folder = Path::new("/root/f");
        let waiter_ticket = syncs.ticket();
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let runner = {
            let syncs = syncs.clone();
            std::thread::spawn(move || {
                syncs.sync(folder, waiter_ticket, |_| {
                    entered_tx.send(()).unwrap();
                    release_rx
                        .recv_timeout(std::time::Duration::from_secs(10))
                        .unwrap();
                    Ok(())
                })
            })
        };
        entered_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        // The sync is running and started after the ticket: a second save with the same ticket
        // waits for it instead of running its own (its own sync would panic).
        let sharer = {
            let syncs = syncs.clone();
            std::thread::spawn(move || {
                syncs.sync(folder, waiter_ticket, |_| panic!("ran a second sync"))
            })
        };
        release_tx.send(()).unwrap();
        runner.join().unwrap().unwrap();
        sharer.join().unwrap().unwrap();
        assert_eq!(syncs.run(), 1);
    }
}
