//! `Latch`: a one-way "it happened" flag that tasks share and wait on (run ended, client gone,
//! queue closed, shutting down).
//!
//! It replaces `tokio_util`'s `CancellationToken` on the per-frame paths. A token's
//! `is_cancelled` takes a mutex, and each `cancelled()` future registers and then unregisters a
//! waiter under another, several times per 20 ms audio frame on every session. Here a check is
//! an atomic load, and a wait polled again by the same
//! task does not touch the waiter list at all.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use pin_project_lite::pin_project;
use tokio::sync::futures::Notified;
use tokio::sync::{mpsc, Notify};

/// A one-way flag, cloned to share, that tasks can check and wait on.
#[derive(Debug, Clone, Default)]
pub struct Latch(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    fired: AtomicBool,
    notify: Notify,
}

impl Latch {
    /// A latch that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires the latch, waking every waiter; true if this call fired it (firing again does
    /// nothing).
    pub fn fire(&self) -> bool {
        let first = !self.0.fired.swap(true, Ordering::AcqRel);
        if first {
            self.0.notify.notify_waiters();
        }
        first
    }

    /// Whether the latch has fired.
    pub fn is_fired(&self) -> bool {
        self.0.fired.load(Ordering::Acquire)
    }

    /// Sends `value` on `tx`, waiting for room unless the latch fires first: false if it has
    /// fired or the receiver is gone. Tries at once first, so a send that finds room never
    /// touches the waiter list.
    pub async fn send_unless_fired<T>(&self, tx: &mpsc::Sender<T>, value: T) -> bool {
        if self.is_fired() {
            return false;
        }
        let value = match tx.try_send(value) {
            Ok(()) => return true,
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
            Err(mpsc::error::TrySendError::Full(value)) => value,
        };
        tokio::select! {
            biased;
            () = self.fired() => false,
            sent = tx.send(value) => sent.is_ok(),
        }
    }

    /// Completes once the latch fires (at once if it already has).
    pub fn fired(&self) -> Fired<'_> {
        FlagWait {
            flag: self,
            wait: self.0.notify.notified(),
            waker: None,
        }
    }
}

/// Something a wait can check without touching a waiter list: true once what it waits for has
/// happened.
pub trait Flag {
    /// Whether what the wait is for has happened.
    fn is_set(&self) -> bool;
}

impl Flag for &Latch {
    fn is_set(&self) -> bool {
        self.is_fired()
    }
}

impl<T> Flag for &mpsc::Sender<T> {
    fn is_set(&self) -> bool {
        self.is_closed()
    }
}

pin_project! {
    /// A wait whose outcome a flag also shows. Polled again by the task it already registered,
    /// it checks the flag (an atomic load) instead of polling the wait, which for tokio's
    /// `Notified` takes the waiter list's mutex each time.
    #[must_use = "futures do nothing unless polled"]
    pub struct FlagWait<F, G> {
        flag: G,
        // Created with the future, so what happens between creation and first poll still
        // reaches it (`notify_waiters` counts futures that exist, polled or not).
        #[pin]
        wait: F,
        // The waker the wait was registered with.
        waker: Option<Waker>,
    }
}

impl<F: Future<Output = ()>, G: Flag> Future for FlagWait<F, G> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        if this.flag.is_set() {
            return Poll::Ready(());
        }
        if this.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            // Registered with this very waker already: what sets the flag will wake it.
            return Poll::Pending;
        }
        if this.wait.poll(cx).is_ready() {
            return Poll::Ready(());
        }
        *this.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// The future returned by [`Latch::fired`].
pub type Fired<'a> = FlagWait<Notified<'a>, &'a Latch>;

/// Completes once `tx`'s receiver is gone (closed or dropped); polled again in a loop, it costs an
/// atomic load where `Sender::closed` locks the channel's waiter list.
pub fn receiver_gone<T>(
    tx: &mpsc::Sender<T>,
) -> FlagWait<impl Future<Output = ()> + '_, &mpsc::Sender<T>> {
    FlagWait {
        flag: tx,
        wait: tx.closed(),
        waker: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::timeout;

    #[tokio::test]
    async fn a_waiter_wakes_when_the_latch_fires_and_late_waiters_complete_at_once() {
        let latch = Latch::new();
        assert!(!latch.is_fired());
        let waiter = tokio::spawn({
            let latch = latch.clone();
            async move { latch.fired().await }
        });
        // Not fired: the waiter must still be waiting.
        assert!(timeout(Duration::from_millis(20), latch.fired())
            .await
            .is_err());
        latch.fire();
        latch.fire();
        timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("joined");
        assert!(latch.is_fired());
        timeout(Duration::from_secs(5), latch.fired())
            .await
            .expect("already fired");
    }

    /// Polls `wait` in a select loop beside a channel fed 100 values, then calls `end`; returns how
    /// many values the loop took before `wait` completed.
    async fn seen_before(wait: impl Future<Output = ()>, end: impl FnOnce()) -> u32 {
        let (tx, mut rx) = mpsc::channel::<u32>(4);
        tokio::pin!(wait);
        let looping = async {
            let mut seen = 0;
            loop {
                tokio::select! {
                    biased;
                    () = &mut wait => return seen,
                    Some(_) = rx.recv() => seen += 1,
                }
            }
        };
        let feeding = async {
            for n in 0..100 {
                tx.send(n).await.expect("receiver alive");
            }
            end();
        };
        let (seen, ()) = timeout(Duration::from_secs(5), async {
            tokio::join!(looping, feeding)
        })
        .await
        .expect("the loop saw the wait complete");
        seen
    }

    #[tokio::test]
    async fn a_wait_polled_many_times_in_a_select_loop_still_wakes() {
        let latch = Latch::new();
        let seen = seen_before(latch.fired(), || {
            latch.fire();
        })
        .await;
        // The feeder can only finish its sends once the loop has taken all but a queue's worth.
        assert!(seen >= 96, "{seen}");
    }

    #[tokio::test]
    async fn receiver_gone_polled_many_times_in_a_select_loop_still_wakes() {
        let (out_tx, out_rx) = mpsc::channel::<u32>(1);
        let seen = seen_before(receiver_gone(&out_tx), move || drop(out_rx)).await;
        assert!(seen >= 96, "{seen}");
        // A receiver already gone: at once.
        timeout(Duration::from_secs(5), receiver_gone(&out_tx))
            .await
            .expect("completes");
    }

    #[tokio::test]
    async fn a_fire_between_creating_and_polling_a_wait_is_not_missed() {
        let latch = Latch::new();
        let fired = latch.fired();
        latch.fire();
        timeout(Duration::from_secs(5), fired)
            .await
            .expect("completes");
    }

    #[tokio::test]
    async fn a_send_waits_for_room_until_the_latch_fires() {
        let latch = Latch::new();
        let (tx, mut rx) = mpsc::channel::<u32>(1);
        assert!(latch.send_unless_fired(&tx, 1).await, "room: sent at once");
        // Full: the second send waits, and gives up when the latch fires.
        let waiting = latch.send_unless_fired(&tx, 2);
        let firing = async {
            tokio::task::yield_now().await;
            latch.fire();
        };
        let (sent, ()) = timeout(Duration::from_secs(5), async {
            tokio::join!(waiting, firing)
        })
        .await
        .expect("the send gave up");
        assert!(!sent);
        assert_eq!(rx.recv().await, Some(1));
        // Fired: nothing is sent even with room.
        assert!(!latch.send_unless_fired(&tx, 3).await);
        assert!(rx.try_recv().is_err());
    }
}
