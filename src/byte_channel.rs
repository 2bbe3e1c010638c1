//! A bounded channel that also bounds the bytes its messages carry: the path up from a client
//! to the model (the live request queue, and the model connection's input) holds at most so many
//! messages and so many bytes of media and text, however the messages are sized.
//!
//! The bytes are counted with one atomic: a send that finds room takes no lock, a receive gives
//! its bytes back with one subtraction, and only a sender that found no room registers to be woken.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Notify};

pub use tokio::sync::mpsc::error::{SendError, TryRecvError, TrySendError};

/// What a message costs to hold, in bytes.
pub trait Weigh {
    /// Bytes of media and text the message carries.
    fn weight(&self) -> usize;
}

impl<T: Weigh> Weigh for Box<T> {
    fn weight(&self) -> usize {
        (**self).weight()
    }
}

/// Creates a channel holding at most `capacity` messages and `max_bytes` of their weight. One
/// message heavier than the whole bound waits for an empty channel, then goes alone.
pub fn channel<T: Weigh>(capacity: usize, max_bytes: usize) -> (Sender<T>, Receiver<T>) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let budget = Arc::new(Budget {
        max: max_bytes,
        used: AtomicUsize::new(0),
        waiting: AtomicUsize::new(0),
        room: Notify::new(),
    });
    (
        Sender {
            tx,
            budget: Arc::clone(&budget),
        },
        Receiver { rx, budget },
    )
}

/// The bytes a channel holds, and the senders waiting for room.
#[derive(Debug)]
struct Budget {
    max: usize,
    used: AtomicUsize,
    /// Senders waiting for bytes: a receive wakes them only when there are some.
    waiting: AtomicUsize,
    room: Notify,
}

impl Budget {
    /// Takes `weight` bytes if they fit now (anything fits into an empty channel).
    fn try_take(&self, weight: usize) -> bool {
        if weight == 0 {
            return true;
        }
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            if used != 0 && used.saturating_add(weight) > self.max {
                return false;
            }
            match self.used.compare_exchange_weak(
                used,
                used + weight,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => used = now,
            }
        }
    }

    /// Takes `weight` bytes, waiting for room.
    async fn take(&self, weight: usize) {
        if self.try_take(weight) {
            return;
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.waiting);
        loop {
            // Made before the check: a give between the check and the wait still wakes it.
            let room = self.room.notified();
            if self.try_take(weight) {
                return;
            }
            room.await;
        }
    }

    fn give(&self, weight: usize) {
        if weight == 0 {
            return;
        }
        self.used.fetch_sub(weight, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.room.notify_waiters();
        }
    }
}

/// Counts a sender as waiting for as long as it lives (a send given up on stops counting).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Bytes taken for a message not yet in the channel: given back if the send does not happen.
#[derive(Debug)]
struct Taken<'a> {
    budget: &'a Budget,
    weight: usize,
}

impl Taken<'_> {
    /// The message is in the channel: its receiver gives the bytes back.
    fn sent(self) {
        std::mem::forget(self);
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        self.budget.give(self.weight);
    }
}

/// The sending side; cheap to clone.
#[derive(Debug)]
pub struct Sender<T> {
    tx: mpsc::Sender<(T, usize)>,
    budget: Arc<Budget>,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender {
            tx: self.tx.clone(),
            budget: Arc::clone(&self.budget),
        }
    }
}

impl<T: Weigh> Sender<T> {
    /// Sends a message, waiting for room for its bytes, then for a slot. Cancel-safe: a send
    /// dropped while waiting has taken nothing.
    pub async fn send(&self, message: T) -> Result<(), SendError<T>> {
        let weight = message.weight();
        self.budget.take(weight).await;
        let taken = Taken {
            budget: &self.budget,
            weight,
        };
        match self.tx.send((message, weight)).await {
            Ok(()) => {
                taken.sent();
                Ok(())
            }
            Err(SendError((message, _))) => Err(SendError(message)),
        }
    }

    /// Sends a message if there is room for it now, or gives it back.
    pub fn try_send(&self, message: T) -> Result<(), TrySendError<T>> {
        let weight = message.weight();
        if !self.budget.try_take(weight) {
            return Err(if self.tx.is_closed() {
                TrySendError::Closed(message)
            } else {
                TrySendError::Full(message)
            });
        }
        let taken = Taken {
            budget: &self.budget,
            weight,
        };
        match self.tx.try_send((message, weight)) {
            Ok(()) => {
                taken.sent();
                Ok(())
            }
            Err(TrySendError::Full((message, _))) => Err(TrySendError::Full(message)),
            Err(TrySendError::Closed((message, _))) => Err(TrySendError::Closed(message)),
        }
    }

    /// Room for one message of `weight` bytes now, kept until the permit sends it or is dropped:
    /// for a caller that must not change anything before it knows the message goes in.
    pub fn try_reserve(&self, weight: usize) -> Result<Permit<'_, T>, TrySendError<()>> {
        if !self.budget.try_take(weight) {
            return Err(if self.tx.is_closed() {
                TrySendError::Closed(())
            } else {
                TrySendError::Full(())
            });
        }
        let taken = Taken {
            budget: &self.budget,
            weight,
        };
        let slot = self.tx.try_reserve()?;
        Ok(Permit { slot, taken })
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Completes once the receiver is gone.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }
}

/// Room for one message, reserved (see [`Sender::try_reserve`]).
#[derive(Debug)]
pub struct Permit<'a, T> {
    slot: mpsc::Permit<'a, (T, usize)>,
    taken: Taken<'a>,
}

impl<T> Permit<'_, T> {
    /// Sends the message (counted at the weight reserved).
    pub fn send(self, message: T) {
        self.slot.send((message, self.taken.weight));
        self.taken.sent();
    }
}

/// The receiving side.
#[derive(Debug)]
pub struct Receiver<T> {
    rx: mpsc::Receiver<(T, usize)>,
    budget: Arc<Budget>,
}

impl<T> Receiver<T> {
    /// Receives the next message; `None` once every sender is gone and the channel is empty.
    /// Cancel-safe.
    pub async fn recv(&mut self) -> Option<T> {
        let (message, weight) = self.rx.recv().await?;
        self.budget.give(weight);
        Some(message)
    }

    /// Receives a message if one is waiting.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let (message, weight) = self.rx.try_recv()?;
        self.budget.give(weight);
        Ok(message)
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    /// Whether no message is waiting.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use std::time::Duration;
    use tokio::time::timeout;

    impl Weigh for Vec<u8> {
        fn weight(&self) -> usize {
            self.len()
        }
    }

    #[tokio::test]
    async fn holds_no_more_bytes_than_its_bound_and_wakes_a_waiting_sender() {
        let (tx, mut rx) = channel::<Vec<u8>>(256, 1000);
        for _ in 0..4 {
            tx.try_send(vec![0; 250]).unwrap();
        }
        assert!(matches!(
            tx.try_send(vec![0; 1]),
            Err(TrySendError::Full(_))
        ));
        // Weightless messages are bounded by the count alone.
        tx.try_send(Vec::new()).unwrap();
        let blocked = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(vec![1; 250]).await }
        });
        tokio::task::yield_now().await;
        assert!(!blocked.is_finished());
        assert_eq!(rx.recv().await.map(|m| m.len()), Some(250));
        timeout(Duration::from_secs(5), blocked)
            .await
            .expect("woken by the receive")
            .unwrap()
            .unwrap();
        // One message heavier than the bound goes alone, into an empty channel.
        while rx.try_recv().is_ok() {}
        tx.try_send(vec![0; 5000]).unwrap();
        assert!(tx.try_send(vec![0; 1]).is_err());
        rx.recv().await;
        tx.try_send(vec![0; 1]).unwrap();
    }

    #[tokio::test]
    async fn a_send_given_up_on_takes_nothing() {
        let (tx, mut rx) = channel::<Vec<u8>>(1, 1000);
        tx.try_send(vec![0; 10]).unwrap();
        // No slot: the bytes are taken, then given back when the send is dropped.
        assert!(tx.send(vec![0; 990]).now_or_never().is_none());
        rx.recv().await;
        tx.try_send(vec![0; 1000]).unwrap();
        drop(rx);
        assert!(matches!(
            tx.try_send(vec![0; 1]),
            Err(TrySendError::Closed(_))
        ));
        assert!(tx.send(Vec::new()).await.is_err());
    }
}
