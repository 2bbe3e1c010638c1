//! The media shortcut: while a live flow's send loop runs, a media-only request (a microphone
//! frame) goes from the task that read it straight into the model connection's input, instead of
//! through the request queue and a wake-up of the send loop's task. Everything else (text, tool
//! responses, activity signals, close) takes the queue, and media takes it too whenever a queued
//! request is still on its way, when the model's input is full, or while the loop is stopping, so
//! the model sees requests in the order they were sent. It spares every microphone frame a
//! wake-up of the send loop's task, the hottest path of a live run.
//!
//! The queue side (`LiveRequestQueue::send` / `try_send`) asks [`try_forward`]; the send loop
//! opens the shortcut with a [`MediaShortcut`] and marks each request it takes [`in_hand`] until it
//! is through, which keeps the two paths in order.

use std::sync::{Arc, Mutex, MutexGuard};

use super::flow::send::{Inbox, SendContext};
use super::LiveRequest;

/// A way past the queue and the send loop for realtime media, which the send loop opens while it
/// runs: a microphone frame then reaches the model from the task that read it, without waking
/// the send loop's task (one task hop less per 20 ms frame).
pub(crate) trait Shortcut: Send + Sync + std::fmt::Debug {
    /// Does for a media-only request what the send loop would, or gives it back untouched when
    /// the model has no room or the loop is stopping.
    fn try_forward(&self, request: LiveRequest) -> Option<LiveRequest>;
}

/// What keeps the shortcut from overtaking queued requests.
#[derive(Debug, Default)]
pub(crate) struct Order {
    /// Requests put in the queue.
    queued: u64,
    /// Requests the send loop has finished with (forwarded, committed or dropped).
    done: u64,
    shortcut: Option<Arc<dyn Shortcut>>,
}

fn lock(order: &Mutex<Order>) -> MutexGuard<'_, Order> {
    // The counters stay consistent whatever panicked: each change is a single store.
    order.lock().unwrap_or_else(|e| e.into_inner())
}

/// Hands a media-only request to the open shortcut if nothing queued is still on its way (so it
/// cannot overtake one sent before it); gives it back otherwise.
pub(crate) fn try_forward(order: &Mutex<Order>, request: LiveRequest) -> Option<LiveRequest> {
    // Held while forwarding, so the loop cannot close the shortcut halfway (it never waits).
    let order = lock(order);
    match &order.shortcut {
        Some(shortcut) if order.queued == order.done => shortcut.try_forward(request),
        _ => Some(request),
    }
}

/// Counts a request put in the queue.
pub(crate) fn queued(order: &Mutex<Order>) {
    lock(order).queued += 1;
}

/// Opens the shortcut until the returned guard is dropped.
pub(crate) fn open(order: &Arc<Mutex<Order>>, shortcut: Arc<dyn Shortcut>) -> ShortcutOpen {
    lock(order).shortcut = Some(shortcut);
    ShortcutOpen(Arc::clone(order))
}

/// A guard that counts a received request as done when dropped.
pub(crate) fn in_hand(order: &Arc<Mutex<Order>>) -> InHand {
    InHand(Arc::clone(order))
}

/// Keeps a queue's media shortcut open (see `LiveRequestReceiver::open_shortcut`).
#[derive(Debug)]
pub(crate) struct ShortcutOpen(Arc<Mutex<Order>>);

impl Drop for ShortcutOpen {
    fn drop(&mut self) {
        lock(&self.0).shortcut = None;
    }
}

/// A received request the send loop is still working on (see `LiveRequestReceiver::in_hand`).
#[derive(Debug)]
pub(crate) struct InHand(Arc<Mutex<Order>>);

impl Drop for InHand {
    fn drop(&mut self) {
        lock(&self.0).done += 1;
    }
}

/// What the send loop does with a media-only request, done by the task that sends it.
#[derive(Debug)]
pub(crate) struct MediaShortcut {
    pub(crate) model: Arc<Inbox>,
    pub(crate) ctx: SendContext,
}

impl Shortcut for MediaShortcut {
    fn try_forward(&self, request: LiveRequest) -> Option<LiveRequest> {
        if self.ctx.stop.is_fired() {
            return Some(request);
        }
        // Room first: a request given back must not have been copied or recorded yet.
        let size = request.blob.as_ref().map_or(0, |b| b.data.len());
        if !self.model.has_room(size) {
            return Some(request);
        }
        let Ok(permit) = self.model.tx.try_reserve() else {
            return Some(request);
        };
        self.ctx.hooks.fan_out(&request);
        if let Some(blob) = request.blob {
            self.model.send(permit, self.ctx.media(blob), size);
        }
        None
    }
}
