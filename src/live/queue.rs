//! `LiveRequestQueue`: what a client sends to a live run, bounded, with a close that always gets through.

use crate::signal::Signal;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::event::{Blob, Content};

/// Default capacity of a live request queue.
pub const DEFAULT_QUEUE_CAPACITY: usize = 256;

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
    // Boxed: a channel allocates room for 32 messages up front, which for 168-byte requests
    // cost every connection 5 KiB while idle.
    tx: mpsc::Sender<Box<LiveRequest>>,
    closed: Signal,
}

/// The receiving side of a live request queue, owned by the live flow.
#[derive(Debug)]
pub struct LiveRequestReceiver {
    rx: mpsc::Receiver<Box<LiveRequest>>,
    closed: Signal,
}

/// Creates a live request queue holding at most `capacity` requests.
pub fn live_request_queue(capacity: usize) -> (LiveRequestQueue, LiveRequestReceiver) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let closed = Signal::new();
    (
        LiveRequestQueue {
            tx,
            closed: closed.clone(),
        },
        LiveRequestReceiver { rx, closed },
    )
}

impl LiveRequestQueue {
    /// Sends a request, waiting for space; a request with `close` set closes the queue.
    pub async fn send(&self, request: LiveRequest) -> Result<(), QueueClosed> {
        if request.close {
            self.close();
            return Ok(());
        }
        if self
            .closed
            .send_unless_fired(&self.tx, Box::new(request))
            .await
        {
            Ok(())
        } else {
            Err(QueueClosed)
        }
    }

    /// Sends a request if there is room now; a full queue drops it (returns false).
    pub fn try_send(&self, request: LiveRequest) -> bool {
        if request.close {
            self.close();
            return true;
        }
        !self.closed.is_fired() && self.tx.try_send(Box::new(request)).is_ok()
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
        self.closed.fire();
        // Wakes a receiver waiting on an empty queue. If the queue is full, the receiver has
        // requests to take and sees the flag once it has taken them.
        let _ = self.tx.try_send(Box::new(CLOSE));
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::timeout;

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
        let (first, second, mut rx) = timeout(Duration::from_secs(5), receiving)
            .await
            .expect("the close woke the receiver")
            .unwrap();
        assert!(first.activity_start);
        assert!(second.close);
        assert!(rx.recv().await.close, "close is sticky");
        assert_eq!(other.send_activity_end().await, Err(QueueClosed));
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
