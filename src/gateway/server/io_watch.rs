//! The socket under every HTTP connection, watched, so that a client cannot pin memory by never
//! finishing what it began:
//!
//! - **Writes.** A write that makes no progress for the write timeout (`--slow-client-timeout`)
//!   fails the connection, so a response (and whatever holds it in memory) is never kept for a
//!   client that stopped reading. A WebSocket has its writer's own send timeout instead, which
//!   closes with 1008 first.
//! - **Reads.** The time the first byte after the last whole WebSocket message arrived is noted,
//!   so that [`MessageDeadline`] can close a socket whose client began a message and does not
//!   finish it (each byte of a 1.5 MiB message trickled just inside the idle timeout would hold
//!   the buffer for hours otherwise).
//! - **The kernel's send buffer.** HTTP keeps the kernel's own (autotuned) size: a fixed small
//!   one leaves one segment in flight and makes bulk responses crawl (64 MiB over loopback took
//!   38 s with 32 KiB against 0.2 s). A WebSocket gets a small one, so what a client that stopped
//!   reading leaves unseen in the kernel, and so the writer's send-timeout slack, stays about a
//!   second of audio (146 KB against 4 MB unset); a write bigger than an audio frame (a large
//!   event) widens it while it lasts.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ws::Message;
use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// What the watched socket of one connection tells its handlers.
#[derive(Debug)]
pub struct IoWatch {
    /// The connection became a WebSocket, whose writer times its own sends.
    upgraded: AtomicBool,
    /// Milliseconds after `epoch` (plus one, so 0 means none) at which the first byte after the
    /// last whole message arrived.
    reading_since: AtomicU64,
    epoch: Instant,
}

impl Default for IoWatch {
    fn default() -> Self {
        IoWatch {
            upgraded: AtomicBool::new(false),
            reading_since: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl IoWatch {
    /// The connection is a WebSocket now: its writer's send timeout applies, not this one's.
    pub fn upgraded(&self) {
        self.upgraded.store(true, Ordering::Relaxed);
        // The request's own bytes began no message.
        self.message_done();
    }

    /// Bytes arrived: the first since the last whole message starts the message's clock.
    fn read(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1;
        let _ = self
            .reading_since
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// A whole message was taken: nothing is under way.
    fn message_done(&self) {
        self.reading_since.store(0, Ordering::Relaxed);
    }

    /// When the bytes of the message under way began to arrive, if any have.
    fn reading_since(&self) -> Option<Instant> {
        match self.reading_since.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.epoch + Duration::from_millis(ms - 1)),
        }
    }
}

/// Kernel send buffer of a WebSocket's socket (Linux doubles it for its own bookkeeping): room
/// for about a second of answer audio.
const PACED_SEND_BUFFER: usize = 32 * 1024;
/// A write bigger than this is bulk (audio frames and their events are far smaller).
const BULK_WRITE: usize = 64 * 1024;
/// Kernel send buffer while a WebSocket writes bulk.
const BULK_SEND_BUFFER: usize = 1024 * 1024;

/// A socket whose kernel send buffer can be sized.
pub trait SendBuffer {
    /// Asks the kernel for a send buffer of `bytes`.
    fn set_send_buffer(&self, bytes: usize) -> std::io::Result<()>;
}

impl SendBuffer for tokio::net::TcpStream {
    fn set_send_buffer(&self, bytes: usize) -> std::io::Result<()> {
        socket2::SockRef::from(self).set_send_buffer_size(bytes)
    }
}

impl SendBuffer for tokio_rustls::server::TlsStream<tokio::net::TcpStream> {
    fn set_send_buffer(&self, bytes: usize) -> std::io::Result<()> {
        self.get_ref().0.set_send_buffer(bytes)
    }
}

impl SendBuffer for tokio::io::DuplexStream {
    fn set_send_buffer(&self, _bytes: usize) -> std::io::Result<()> {
        Ok(())
    }
}

/// A socket whose writes time out and whose reads are noted in an [`IoWatch`].
#[derive(Debug)]
pub struct Watched<IO> {
    io: IO,
    /// The send buffer asked for (0: the kernel's own).
    send_buffer: usize,
    watch: Arc<IoWatch>,
    /// `None`: writes may wait for ever.
    write_timeout: Option<Duration>,
    /// Running while a write waits for the client to read.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<IO> Watched<IO> {
    /// Watches `io`, its writes bounded by `write_timeout`.
    pub fn new(io: IO, watch: Arc<IoWatch>, write_timeout: Option<Duration>) -> Self {
        Watched {
            io,
            send_buffer: 0,
            watch,
            write_timeout,
            stalled: None,
        }
    }

    /// Called when a write is pending: an error once it has waited the whole timeout.
    fn poll_stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        let Some(timeout) = self.write_timeout else {
            return Poll::Pending;
        };
        if self.watch.upgraded.load(Ordering::Relaxed) {
            self.stalled = None;
            return Poll::Pending;
        }
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client did not read the response in time",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// A write's outcome: progress stops the stall clock.
    fn wrote<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        match poll {
            Poll::Ready(done) => {
                self.stalled = None;
                Poll::Ready(done)
            }
            Poll::Pending => self.poll_stalled(cx),
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.watch.read();
        }
        polled
    }
}

impl<IO: SendBuffer> Watched<IO> {
    /// Sizes the kernel's send buffer for a write of `bytes` (see the module's notes).
    fn size_send_buffer(&mut self, bytes: usize) {
        if !self.watch.upgraded.load(Ordering::Relaxed) {
            return;
        }
        let wanted = if bytes > BULK_WRITE {
            BULK_SEND_BUFFER
        } else {
            PACED_SEND_BUFFER
        };
        if wanted != self.send_buffer {
            self.send_buffer = wanted;
            if let Err(error) = self.io.set_send_buffer(wanted) {
                tracing::debug!(%error, "could not set SO_SNDBUF");
            }
        }
    }
}

impl<IO: AsyncWrite + SendBuffer + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.size_send_buffer(buf.len());
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.size_send_buffer(bufs.iter().map(|b| b.len()).sum());
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.wrote(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_shutdown(cx);
        this.wrote(cx, polled)
    }
}

/// A WebSocket message was begun and not finished within the message read timeout.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("a message was not finished within the message read timeout")]
pub struct MessageTimedOut;

/// A WebSocket's messages, each of which must arrive whole within `limit` of its first byte:
/// past it the stream yields [`MessageTimedOut`] (and the connection closes with 1008). Without
/// a watch or a limit, the messages as they come.
///
/// The clock starts at the first read after the last whole message, so while the connection
/// does not read (the model is behind, and the socket's window closes) no clock runs.
pub struct MessageDeadline<S> {
    inner: S,
    watch: Option<Arc<IoWatch>>,
    limit: Option<Duration>,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<S> MessageDeadline<S> {
    /// `inner`'s messages, each due within `limit` of its first byte as `watch` saw it.
    pub fn new(inner: S, watch: Option<Arc<IoWatch>>, limit: Option<Duration>) -> Self {
        MessageDeadline {
            inner,
            watch,
            limit,
            timer: None,
        }
    }
}

impl<S> Stream for MessageDeadline<S>
where
    S: Stream<Item = Result<Message, axum::Error>> + Unpin,
{
    type Item = Result<Message, axum::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_next(cx);
        let (Some(watch), Some(limit)) = (&this.watch, this.limit) else {
            return polled;
        };
        if polled.is_ready() {
            watch.message_done();
            this.timer = None;
            return polled;
        }
        let Some(since) = watch.reading_since() else {
            this.timer = None;
            return Poll::Pending;
        };
        let due = since + limit;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if timer.deadline() != due {
            timer.as_mut().reset(due);
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                this.timer = None;
                Poll::Ready(Some(Err(axum::Error::new(MessageTimedOut))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_that_waits_past_the_timeout_fails_and_progress_resets_it() {
        let (client, server) = tokio::io::duplex(16);
        let watch = Arc::new(IoWatch::default());
        let mut watched = Watched::new(server, watch.clone(), Some(Duration::from_secs(1)));
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        watched.write_all(&[0; 16]).await.unwrap();
        let error = watched.write_all(&[0; 16]).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        let mut client = client;
        let mut read = [0; 16];
        client.read_exact(&mut read).await.unwrap();
        // A WebSocket's writer times its own sends.
        watch.upgraded();
        let blocked = tokio::time::timeout(Duration::from_secs(5), async {
            watched.write_all(&[0; 32]).await
        });
        assert!(blocked.await.is_err(), "no write timeout once upgraded");
    }

    // Real loopback sockets: what is asserted is the size the kernel gives the socket.
    #[tokio::test]
    async fn a_websocket_s_send_buffer_is_wide_for_a_bulk_write_only() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        // The client reads all it gets, so no write waits for room.
        tokio::spawn(async move {
            let mut read = vec![0; 64 * 1024];
            while client.read(&mut read).await.is_ok_and(|n| n > 0) {}
        });
        let watch = Arc::new(IoWatch::default());
        let mut watched = Watched::new(server, watch.clone(), None);
        let kernel = |watched: &Watched<tokio::net::TcpStream>| {
            socket2::SockRef::from(&watched.io)
                .send_buffer_size()
                .unwrap()
        };
        watch.upgraded();
        watched.write_all(&[0; 1024]).await.unwrap();
        let paced = kernel(&watched);
        // A large event in one write: the buffer is wide while it goes out.
        let event = vec![0; 4 * BULK_WRITE];
        assert!(watched.write(&event).await.unwrap() > 0);
        let wide = kernel(&watched);
        assert!(wide > paced, "a bulk write widens it: {paced} then {wide}");
        watched.write_all(&[0; 1024]).await.unwrap();
        assert_eq!(
            kernel(&watched),
            paced,
            "an audio-sized write narrows it again"
        );
    }

    #[test]
    fn the_message_clock_starts_at_the_first_byte_and_stops_at_the_message() {
        let watch = IoWatch::default();
        assert_eq!(watch.reading_since(), None);
        watch.read();
        let first = watch.reading_since().unwrap();
        watch.read();
        assert_eq!(
            watch.reading_since(),
            Some(first),
            "later bytes do not move it"
        );
        watch.message_done();
        assert_eq!(watch.reading_since(), None);
    }
}
