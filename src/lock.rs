//! Taking a `std::sync::Mutex` or `RwLock` whose holder may have panicked.
//!
//! The gateway's mutexes guard state that every change leaves whole (a counter update, a push,
//! a swap; nothing that can panic runs while one is held), so a poisoned lock still guards
//! consistent data: recovering it beats failing every later caller. One place says so, instead
//! of `unwrap_or_else(PoisonError::into_inner)` at each lock.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `lock_or_recover` on a mutex.
pub trait Recover<T: ?Sized> {
    /// Locks, taking the guard over even if a holder panicked.
    fn lock_or_recover(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> Recover<T> for Mutex<T> {
    fn lock_or_recover(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `read_or_recover` and `write_or_recover` on a read-write lock.
pub trait RecoverRw<T: ?Sized> {
    /// Locks for reading, taking the guard over even if a writer panicked.
    fn read_or_recover(&self) -> RwLockReadGuard<'_, T>;
    /// Locks for writing, taking the guard over even if a writer panicked.
    fn write_or_recover(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RecoverRw<T> for RwLock<T> {
    fn read_or_recover(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_or_recover(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_taken_over_with_its_data() {
        let mutex = Mutex::new(1);
        let _ = std::panic::catch_unwind(|| {
            let mut guard = mutex.lock().unwrap();
            *guard = 2;
            panic!("a holder panics");
        });
        assert!(mutex.is_poisoned());
        assert_eq!(*mutex.lock_or_recover(), 2);
    }

    #[test]
    fn a_poisoned_rwlock_is_taken_over_with_its_data() {
        let lock = RwLock::new(1);
        let _ = std::panic::catch_unwind(|| {
            let mut guard = lock.write().unwrap();
            *guard = 2;
            panic!("a writer panics");
        });
        assert!(lock.is_poisoned());
        assert_eq!(*lock.read_or_recover(), 2);
        *lock.write_or_recover() = 3;
        assert_eq!(*lock.read_or_recover(), 3);
    }
}
