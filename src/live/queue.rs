//! `LiveRequestQueue`: what a client sends to a live run, bounded, with a close that always gets through.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::byte_channel::{self, TrySendError, Weigh};
use crate::latch::Latch;
use serde_json::{Map, Value};

use crate::event::{Blob, Content};
use crate::lock::Recover;

/// Default capacity of a live request queue.
pub const DEFAULT_QUEUE_CAPACITY: usize = 256;

/// Default bound on the bytes of media and text a live request queue holds.
pub const DEFAULT_QUEUE_MAX_BYTES: usize = 2 * 1024 * 1024;

/// One request from the client side of a live run (ADK's `LiveRequest`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveRequest {
    /// A turn of content (text, image, function responses).
    pub content: Option<Content>,
    /// A realtime media chunk (audio or an image frame).
    pub blob: Option<Blob>,
    /// Manual voice activity start.
    pub activity_start: bool,
    /// Manual voice activity end.
    pub activity_end: bool,
    /// The audio stream paused (microphone muted).
    pub audio_stream_end: bool,
    /// Close the run.
    pub close: bool,
    /// The content is a partial turn (the model should not answer yet).
    pub partial: bool,
    /// Session state changes to commit with this request.
    pub state_delta: Option<Map<String, Value>>,
}

/// The request that closes a run.
const CLOSE: LiveRequest = LiveRequest {
    content: None,
    blob: None,
    activity_start: false,
    activity_end: false,
    audio_stream_end: false,
    close: true,
    partial: false,
    state_delta: None,
};

/// Sending after the queue was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the live request queue is closed")]
pub struct QueueClosed;

/// The sending side of a live request queue; cheap to clone.
///
/// Unlike ADK's unbounded asyncio queue, sends wait when the queue is full (backpressure from a
/// slow model reaches the socket reader), and sending after `close` is an error.
#[derive(Debug, Clone)]
pub struct LiveRequestQueue {
    // Boxed: a channel allocates room for 32 messages up front, which unboxed requests would
    // cost every connection while idle.
    tx: byte_channel::Sender<Box<LiveRequest>>,
    closed: Latch,
    order: Arc<Mutex<Order>>,
}

/// The receiving side of a live request queue, owned by the live flow.
#[derive(Debug)]
pub struct LiveRequestReceiver {
    rx: byte_channel::Receiver<Box<LiveRequest>>,
    closed: Latch,
    order: Arc<Mutex<Order>>,
}

/// A way past the queue for realtime media, which the live flow's send loop opens while it runs
/// (`flow::send::MediaShortcut`): a microphone frame then reaches the model from the task that
/// read it, without waking the send loop's task (one task hop less per 20 ms frame).
pub(crate) trait Shortcut: Send + Sync + std::fmt::Debug {
    /// Does for a media-only request what the send loop would, or gives it back untouched when
    /// the model has no room or the loop is stopping.
    fn try_forward(&self, request: LiveRequest) -> Option<LiveRequest>;
}

/// What keeps the shortcut from overtaking queued requests: media takes it only while every
/// request put in the queue is done with, so the model sees requests in the order they were sent.
#[derive(Debug, Default)]
struct Order {
    /// Requests put in the queue.
    queued: u64,
    /// Requests the send loop has finished with (forwarded, committed or dropped).
    done: u64,
    shortcut: Option<Arc<dyn Shortcut>>,
}

fn lock(order: &Mutex<Order>) -> MutexGuard<'_, Order> {
    // The counters stay consistent whatever panicked: each change is a single store.
    order.lock_or_recover()
}

impl LiveRequest {
    /// Bytes of media and text it carries: what it costs to hold.
    pub fn payload_bytes(&self) -> usize {
        let content: usize = self
            .content
            .iter()
            .flat_map(|c| &c.parts)
            .map(|p| {
                p.text.as_ref().map_or(0, String::len)
                    + p.inline_data.as_ref().map_or(0, |b| b.data.len())
            })
            .sum();
        content + self.blob.as_ref().map_or(0, |b| b.data.len())
    }

    /// Carries realtime media and nothing else.
    fn is_media_only(&self) -> bool {
        self.blob.is_some()
            && self.content.is_none()
            && self.state_delta.is_none()
            && !(self.activity_start
                || self.activity_end
                || self.audio_stream_end
                || self.close
                || self.partial)
    }
}

impl Weigh for LiveRequest {
    fn weight(&self) -> usize {
        self.payload_bytes()
    }
}

/// Creates a live request queue holding at most `capacity` requests.
pub fn live_request_queue(capacity: usize) -> (LiveRequestQueue, LiveRequestReceiver) {
    bounded_live_request_queue(capacity, usize::MAX)
}

/// Creates a live request queue holding at most `capacity` requests and `max_bytes` of their
/// media and text (see [`LiveRequest::payload_bytes`]): a sender waits for room in both.
pub fn bounded_live_request_queue(
    capacity: usize,
    max_bytes: usize,
) -> (LiveRequestQueue, LiveRequestReceiver) {
    let (tx, rx) = byte_channel::channel(capacity, max_bytes);
    let closed = Latch::new();
    let order = Arc::default();
    (
        LiveRequestQueue {
            tx,
            closed: closed.clone(),
            order: Arc::clone(&order),
        },
        LiveRequestReceiver { rx, closed, order },
    )
}

impl LiveRequestQueue {
    /// Sends a request, waiting for space; a request with `close` set closes the queue.
    pub async fn send(&self, request: LiveRequest) -> Result<(), QueueClosed> {
        if request.close {
            self.close();
            return Ok(());
        }
        let Some(request) = self.try_shortcut(request) else {
            return Ok(());
        };
        if self.closed.is_fired() {
            return Err(QueueClosed);
        }
        let request = match self.tx.try_send(Box::new(request)) {
            Ok(()) => {
                self.queued();
                return Ok(());
            }
            Err(TrySendError::Closed(_)) => return Err(QueueClosed),
            Err(TrySendError::Full(request)) => request,
        };
        let sent = tokio::select! {
            biased;
            () = self.closed.fired() => false,
            sent = self.tx.send(request) => sent.is_ok(),
        };
        if !sent {
            return Err(QueueClosed);
        }
        self.queued();
        Ok(())
    }

    /// Sends a request if there is room now; a full queue drops it (returns false).
    pub fn try_send(&self, request: LiveRequest) -> bool {
        if request.close {
            self.close();
            return true;
        }
        let Some(request) = self.try_shortcut(request) else {
            return true;
        };
        let sent = !self.closed.is_fired() && self.tx.try_send(Box::new(request)).is_ok();
        if sent {
            self.queued();
        }
        sent
    }

    /// Hands a media-only request to the send loop's shortcut if it is open and nothing queued
    /// is still on its way; gives it back otherwise.
    fn try_shortcut(&self, request: LiveRequest) -> Option<LiveRequest> {
        if !request.is_media_only() || self.closed.is_fired() {
            return Some(request);
        }
        // Held while forwarding, so the loop cannot close the shortcut halfway (it never waits).
        let order = lock(&self.order);
        match &order.shortcut {
            Some(shortcut) if order.queued == order.done => shortcut.try_forward(request),
            _ => Some(request),
        }
    }

    /// Counts a request put in the queue. Counted after it went in: the same task checks the
    /// count before its next shortcut, and another task's sends have no order to keep with it.
    fn queued(&self) {
        lock(&self.order).queued += 1;
    }

    /// Sends a complete user turn.
    pub async fn send_content(&self, content: Content) -> Result<(), QueueClosed> {
        self.send(LiveRequest {
            content: Some(content),
            ..LiveRequest::default()
        })
        .await
    }

    /// Sends a realtime media chunk.
    pub async fn send_realtime(&self, blob: Blob) -> Result<(), QueueClosed> {
        self.send(LiveRequest {
            blob: Some(blob),
            ..LiveRequest::default()
        })
        .await
    }

    /// Signals the start of user activity (manual voice activity detection).
    pub async fn send_activity_start(&self) -> Result<(), QueueClosed> {
        self.send(LiveRequest {
            activity_start: true,
            ..LiveRequest::default()
        })
        .await
    }

    /// Signals the end of user activity (manual voice activity detection).
    pub async fn send_activity_end(&self) -> Result<(), QueueClosed> {
        self.send(LiveRequest {
            activity_end: true,
            ..LiveRequest::default()
        })
        .await
    }

    /// Signals that the audio stream paused.
    pub async fn send_audio_stream_end(&self) -> Result<(), QueueClosed> {
        self.send(LiveRequest {
            audio_stream_end: true,
            ..LiveRequest::default()
        })
        .await
    }

    /// Closes the queue. Never waits and always gets through, even when the queue is full;
    /// requests already queued are still delivered before the close.
    pub fn close(&self) {
        if self.closed.fire() {
            // Wakes a receiver waiting on an empty queue. If the queue is full, the receiver has
            // requests to take and sees the flag once it has taken them.
            let _ = self.tx.try_send(Box::new(CLOSE));
        }
    }

    /// Whether the queue was closed.
    pub fn is_closed(&self) -> bool {
        self.closed.is_fired()
    }
}

impl LiveRequestReceiver {
    /// Receives the next request; after the queue is closed and drained, returns a close request.
    pub async fn recv(&mut self) -> LiveRequest {
        // No wait on the close flag here: this runs for every audio frame, and a fresh wait on
        // the flag would register and unregister a waiter each time. `close` puts a close request
        // in the queue instead, behind what was queued before it.
        if let Ok(request) = self.rx.try_recv() {
            return *request;
        }
        if !self.closed.is_fired() {
            if let Some(request) = self.rx.recv().await {
                return *request;
            }
        }
        self.closed.fire();
        CLOSE
    }

    /// Whether the client closed the queue (sticky: stays true after the close was received).
    pub fn is_closed(&self) -> bool {
        self.closed.is_fired()
    }

    /// Opens the shortcut for media until the returned guard is dropped.
    pub(crate) fn open_shortcut(&self, shortcut: Arc<dyn Shortcut>) -> ShortcutOpen {
        lock(&self.order).shortcut = Some(shortcut);
        ShortcutOpen(Arc::clone(&self.order))
    }

    /// Marks a received request as finished with once the returned guard is dropped (after it
    /// reached the model, or when the loop gave up on it); until then media waits in the queue.
    pub(crate) fn in_hand(&self) -> InHand {
        InHand(Arc::clone(&self.order))
    }
}

/// Keeps a queue's media shortcut open (see [`LiveRequestReceiver::open_shortcut`]).
#[derive(Debug)]
pub(crate) struct ShortcutOpen(Arc<Mutex<Order>>);

impl Drop for ShortcutOpen {
    fn drop(&mut self) {
        lock(&self.0).shortcut = None;
    }
}

/// A received request the send loop is still working on (see [`LiveRequestReceiver::in_hand`]).
#[derive(Debug)]
pub(crate) struct InHand(Arc<Mutex<Order>>);

impl Drop for InHand {
    fn drop(&mut self) {
        lock(&self.0).done += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Blob;
    use std::time::Duration;
    use tokio::sync::mpsc;
    use tokio::time::timeout;

    fn text_turn(bytes: usize) -> LiveRequest {
        LiveRequest {
            content: Some(Content::text("user", "x".repeat(bytes))),
            ..LiveRequest::default()
        }
    }

    #[tokio::test]
    async fn the_queue_holds_no_more_bytes_than_its_bound() {
        // Room for 256 requests, but only 1 MiB: 64 KiB turns stop at 16.
        let (queue, mut rx) = bounded_live_request_queue(256, 1024 * 1024);
        let mut accepted = 0;
        while queue.try_send(text_turn(64 * 1024)) {
            accepted += 1;
            assert!(accepted <= 256, "never refused");
        }
        assert_eq!(accepted, 16);
        // A blocked sender goes on once the receiver takes a request, and not before.
        let blocked = tokio::spawn({
            let queue = queue.clone();
            async move { queue.send(text_turn(64 * 1024)).await }
        });
        tokio::task::yield_now().await;
        assert!(!blocked.is_finished());
        assert!(rx.recv().await.content.is_some());
        timeout(Duration::from_secs(5), blocked)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        // Requests without a payload are not held back by the bytes.
        assert!(queue.try_send(LiveRequest {
            activity_start: true,
            ..LiveRequest::default()
        }));
        // One request bigger than the whole bound waits for an empty queue, then goes alone.
        for _ in 0..17 {
            rx.recv().await;
        }
        assert!(queue.try_send(text_turn(4 * 1024 * 1024)));
        assert!(!queue.try_send(text_turn(1)));
        // A sender waiting for bytes is released by a close.
        let blocked = tokio::spawn({
            let queue = queue.clone();
            async move { queue.send(text_turn(10)).await }
        });
        queue.close();
        assert_eq!(
            timeout(Duration::from_secs(5), blocked)
                .await
                .unwrap()
                .unwrap(),
            Err(QueueClosed)
        );
    }

    #[tokio::test]
    async fn close_gets_through_a_full_queue_and_unblocks_senders() {
        let (queue, mut rx) = live_request_queue(1);
        queue.send_audio_stream_end().await.unwrap();
        let blocked = tokio::spawn({
            let queue = queue.clone();
            async move { queue.send_activity_start().await }
        });
        queue.close();
        let res = timeout(Duration::from_secs(1), blocked)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(res, Err(QueueClosed));
        // The request queued before the close is still delivered, then the close.
        assert!(rx.recv().await.audio_stream_end);
        assert!(rx.recv().await.close);
        assert!(rx.recv().await.close, "close is sticky");
        assert_eq!(queue.send_activity_end().await, Err(QueueClosed));
    }

    #[tokio::test]
    async fn a_close_wakes_a_receiver_waiting_on_an_empty_queue() {
        let (queue, mut rx) = live_request_queue(4);
        queue.send_activity_start().await.unwrap();
        let receiving = tokio::spawn(async move {
            let first = rx.recv().await;
            // The queue is empty now: this waits until the close arrives.
            let second = rx.recv().await;
            (first, second, rx)
        });
        // Another sender stays alive: only the close itself can end the wait.
        let other = queue.clone();
        tokio::task::yield_now().await;
        queue.close();
        other.close();
        let (first, second, mut rx) = timeout(Duration::from_secs(5), receiving)
            .await
            .expect("the close woke the receiver")
            .unwrap();
        assert!(first.activity_start);
        assert!(second.close);
        assert!(
            rx.rx.try_recv().is_err(),
            "closing twice queues one close request"
        );
        assert!(rx.recv().await.close, "close is sticky");
        assert_eq!(other.send_activity_end().await, Err(QueueClosed));
    }

    /// A shortcut that takes media while `open`, and says what it took.
    #[derive(Debug)]
    struct Taker {
        open: std::sync::atomic::AtomicBool,
        took: mpsc::UnboundedSender<LiveRequest>,
    }

    impl Shortcut for Taker {
        fn try_forward(&self, request: LiveRequest) -> Option<LiveRequest> {
            if !self.open.load(std::sync::atomic::Ordering::SeqCst) {
                return Some(request);
            }
            self.took.send(request).err().map(|e| e.0)
        }
    }

    fn media(n: u8) -> LiveRequest {
        LiveRequest {
            blob: Some(Blob::new(bytes::Bytes::from(vec![n; 4]), "audio/pcm")),
            ..LiveRequest::default()
        }
    }

    fn byte(request: &LiveRequest) -> u8 {
        request.blob.as_ref().map_or(0, |b| b.data[0])
    }

    #[tokio::test]
    async fn media_takes_the_shortcut_only_when_nothing_queued_is_on_its_way() {
        let (queue, mut rx) = live_request_queue(8);
        let (took, mut taken) = mpsc::unbounded_channel();
        let taker = Arc::new(Taker {
            open: true.into(),
            took,
        });
        // No shortcut yet: media is queued.
        queue.send(media(1)).await.unwrap();
        let open = rx.open_shortcut(taker.clone());
        // Media 1 is still queued: media 2 must not overtake it.
        queue.send(media(2)).await.unwrap();
        assert!(taken.try_recv().is_err());
        let first = rx.recv().await;
        let in_hand = rx.in_hand();
        queue.send(media(3)).await.unwrap();
        assert!(taken.try_recv().is_err(), "media 1 is still in hand");
        drop(in_hand);
        for want in [2, 3] {
            let request = rx.recv().await;
            let _in_hand = rx.in_hand();
            assert_eq!(byte(&request), want);
        }
        assert_eq!(byte(&first), 1);
        // Everything queued is through: now media goes past the queue.
        queue.send(media(4)).await.unwrap();
        assert_eq!(taken.try_recv().map(|r| byte(&r)), Ok(4));
        // Anything else is queued, and holds the media behind it back until it is through.
        queue.send_activity_end().await.unwrap();
        queue.send(media(5)).await.unwrap();
        assert!(taken.try_recv().is_err());
        assert!(rx.recv().await.activity_end);
        drop(rx.in_hand());
        assert_eq!(byte(&rx.recv().await), 5);
        drop(rx.in_hand());
        // A shortcut that gives the request back: it is queued, whole.
        taker.open.store(false, std::sync::atomic::Ordering::SeqCst);
        assert!(queue.try_send(media(6)));
        assert_eq!(byte(&rx.recv().await), 6);
        drop(rx.in_hand());
        taker.open.store(true, std::sync::atomic::Ordering::SeqCst);
        // Closed by the loop: queued again.
        drop(open);
        queue.send(media(7)).await.unwrap();
        assert_eq!(byte(&rx.recv().await), 7);
        assert!(taken.try_recv().is_err());
        // After a close nothing goes anywhere.
        let _open = rx.open_shortcut(taker);
        queue.close();
        assert_eq!(queue.send(media(8)).await, Err(QueueClosed));
        assert!(taken.try_recv().is_err());
    }

    #[tokio::test]
    async fn dropping_every_sender_reads_as_close() {
        let (queue, mut rx) = live_request_queue(4);
        queue.send_activity_end().await.unwrap();
        drop(queue);
        assert!(rx.recv().await.activity_end);
        assert!(
            timeout(Duration::from_secs(1), rx.recv())
                .await
                .unwrap()
                .close
        );
        assert!(rx.is_closed());
    }
}
