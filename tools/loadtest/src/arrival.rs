//! A TCP stream that notes when the kernel received the bytes each read returns (`SO_TIMESTAMPNS`),
//! so an answer is timed from its arrival rather than from when a busy load generator got round to
//! reading it.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// When the bytes of the latest read arrived, shared by a socket and whoever reads from it.
#[derive(Debug)]
pub struct Arrivals {
    /// What `latest` counts from.
    anchor: Instant,
    /// Nanoseconds from `anchor` to the latest read's arrival, plus one (0: no read yet).
    latest: AtomicU64,
}

impl Arrivals {
    /// A clock with nothing read yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Arrivals {
            anchor: Instant::now(),
            latest: AtomicU64::new(0),
        })
    }

    /// When the bytes of the latest read reached the socket, never later than now; `now` before
    /// the first read.
    pub fn latest_or_now(&self) -> Instant {
        let now = Instant::now();
        match self.latest.load(Ordering::Relaxed) {
            0 => now,
            nanos => (self.anchor + Duration::from_nanos(nanos - 1)).min(now),
        }
    }

    /// Notes a read whose bytes the kernel stamped `since_epoch` (wall-clock time).
    fn note_stamp(&self, since_epoch: Duration) {
        // The stamp's age on the wall clock, taken from the monotonic clock now: the two clocks
        // are read together, so a wall clock slewed or stepped since the socket opened does not
        // move the result. A stamp from the future (a clock stepped back) counts as now.
        let wall_now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let age = wall_now.saturating_sub(since_epoch);
        let now = Instant::now();
        self.store(now.checked_sub(age).unwrap_or(self.anchor));
    }

    /// Notes a read the kernel did not stamp: its bytes count as arriving now.
    fn note_unstamped(&self) {
        self.store(Instant::now());
    }

    fn store(&self, arrived: Instant) {
        let since = arrived.saturating_duration_since(self.anchor);
        let nanos = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX - 1);
        self.latest.store(nanos + 1, Ordering::Relaxed);
    }
}

/// A TCP stream whose reads note the kernel's arrival stamp in an [`Arrivals`].
#[derive(Debug)]
pub struct StampedTcp {
    tcp: TcpStream,
    arrivals: Arc<Arrivals>,
}

impl StampedTcp {
    /// Asks the kernel to stamp what `tcp` receives. Where it cannot, reads count as arriving
    /// when they are made.
    pub fn new(tcp: TcpStream, arrivals: Arc<Arrivals>) -> Self {
        #[cfg(target_os = "linux")]
        if let Err(error) =
            nix::sys::socket::setsockopt(&tcp, nix::sys::socket::sockopt::ReceiveTimestampns, &true)
        {
            tracing::warn!(%error, "no kernel receive timestamps: reads are timed when made");
        }
        StampedTcp { tcp, arrivals }
    }
}

/// One non-blocking `recvmsg`: the bytes read and the kernel's arrival stamp, if it gave one.
#[cfg(target_os = "linux")]
fn recv_stamped(fd: std::os::fd::RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<Duration>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use nix::sys::time::TimeSpec;

    let mut iov = [io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(TimeSpec);
    let message = recvmsg::<()>(fd, &mut iov, Some(&mut space), MsgFlags::MSG_DONTWAIT)?;
    let stamp = message.cmsgs()?.find_map(|cmsg| match cmsg {
        ControlMessageOwned::ScmTimestampns(ts) => Some(
            Duration::from_secs(u64::try_from(ts.tv_sec()).unwrap_or(0))
                + Duration::from_nanos(u64::try_from(ts.tv_nsec()).unwrap_or(0)),
        ),
        _ => None,
    });
    Ok((message.bytes, stamp))
}

impl AsyncRead for StampedTcp {
    #[cfg(target_os = "linux")]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        use std::os::fd::AsRawFd;

        let this = self.get_mut();
        let fd = this.tcp.as_raw_fd();
        loop {
            std::task::ready!(this.tcp.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let wanted = unfilled.len();
            let mut short = None;
            let result = this.tcp.try_io(tokio::io::Interest::READABLE, || {
                let (read, stamp) = recv_stamped(fd, unfilled)?;
                if read > 0 && read < wanted {
                    // The socket is drained: report "would block" so `try_io` clears readiness
                    // (what tokio's own reads do), or the next read is a wasted system call.
                    short = Some((read, stamp));
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok((read, stamp))
            });
            let (read, stamp) = match (result, short) {
                (_, Some(short)) => short,
                (Ok(full), None) => full,
                // Readiness was stale; `try_io` cleared it, so the next poll waits.
                (Err(error), None) if error.kind() == io::ErrorKind::WouldBlock => continue,
                (Err(error), None) => return Poll::Ready(Err(error)),
            };
            match stamp {
                Some(stamp) => this.arrivals.note_stamp(stamp),
                None if read > 0 => this.arrivals.note_unstamped(),
                None => {}
            }
            buf.advance(read);
            return Poll::Ready(Ok(()));
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.arrivals.note_unstamped();
        }
        polled
    }
}

impl AsyncWrite for StampedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// How long the bytes wait in the socket before they are read.
    const WAIT: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn a_read_is_stamped_with_when_its_bytes_arrived_not_when_they_were_read() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let arrivals = Arrivals::new();
        let client = TcpStream::connect(addr).await.unwrap();
        let mut stamped = StampedTcp::new(client, arrivals.clone());
        let (mut server, _) = listener.accept().await.unwrap();

        // The sleeps are the subject, not synchronisation: the bytes must wait in the socket
        // so that their arrival and their read are apart.
        let mut stamped_once = false;
        // The kernel turns stamping on shortly after the first socket asks for it (deferred
        // work), so a first read may come unstamped, counting as arriving when read.
        for _ in 0..20 {
            let before_send = Instant::now();
            server.write_all(b"hello").await.unwrap();
            let after_send = Instant::now();
            tokio::time::sleep(WAIT).await;
            let before_read = Instant::now();
            let mut buf = [0u8; 16];
            let read = tokio::time::timeout(Duration::from_secs(5), stamped.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&buf[..read], b"hello");
            let arrived = arrivals.latest_or_now();
            // Loopback delivers within the send; allow for the clocks being read apart.
            let slack = Duration::from_millis(5);
            assert!(arrived + slack >= before_send, "stamped before the send");
            if arrived <= after_send + slack {
                stamped_once = true;
                break;
            }
            assert!(
                arrived >= before_read,
                "an unstamped read counts as made now"
            );
            if !cfg!(target_os = "linux") {
                break;
            }
        }
        assert!(
            stamped_once || !cfg!(target_os = "linux"),
            "the kernel never stamped a read"
        );

        // Writes go through untouched.
        stamped.write_all(b"back").await.unwrap();
        let mut back = [0u8; 4];
        server.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"back");
    }

    /// A read that drains the socket clears its readiness; bytes arriving later wake it again.
    #[tokio::test]
    async fn a_drained_socket_is_read_again_when_more_arrives() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let mut stamped = StampedTcp::new(client, Arrivals::new());
        let (mut server, _) = listener.accept().await.unwrap();
        for round in 0..50u8 {
            server.write_all(&[round; 3]).await.unwrap();
            let mut buf = [0u8; 64];
            let read = tokio::time::timeout(Duration::from_secs(5), stamped.read(&mut buf))
                .await
                .expect("bytes sent after a draining read must wake the reader")
                .unwrap();
            assert_eq!(&buf[..read], &[round; 3]);
        }
    }

    #[test]
    fn a_stamp_before_the_clock_began_counts_as_its_start() {
        let arrivals = Arrivals::new();
        arrivals.note_stamp(Duration::from_secs(1));
        assert_eq!(arrivals.latest_or_now(), arrivals.anchor);
    }

    #[test]
    fn a_stamp_from_the_future_counts_as_now() {
        let arrivals = Arrivals::new();
        let before = Instant::now();
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        arrivals.note_stamp(wall + Duration::from_secs(3600));
        let noted = arrivals.latest_or_now();
        assert!(noted >= before && noted <= Instant::now());
    }

    #[test]
    fn a_stamp_is_placed_on_the_monotonic_clock_by_its_age() {
        // A clock begun a second ago, so a stamp 10 ms old falls after its start.
        let arrivals = Arrivals {
            anchor: Instant::now() - Duration::from_secs(1),
            latest: AtomicU64::new(0),
        };
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let now = Instant::now();
        arrivals.note_stamp(wall - Duration::from_millis(10));
        let noted = arrivals.latest_or_now();
        let ago = now.saturating_duration_since(noted);
        // 10 ms before `now`, give or take the clocks being read apart.
        assert!(ago <= Duration::from_millis(15), "{ago:?}");
        assert!(ago >= Duration::from_millis(5), "{ago:?}");
    }
}
