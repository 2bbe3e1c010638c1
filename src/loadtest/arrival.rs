//! A TCP stream that notes when the kernel received the bytes each read returns, so an answer is
//! timed from its arrival rather than from when a busy load generator got round to reading it.

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
    /// The monotonic clock and the time since the epoch, read together: kernel stamps are
    /// wall-clock times.
    anchor: (Instant, Duration),
    /// Nanoseconds from `anchor.0` to the latest stamped arrival, plus one (0: none yet).
    latest: AtomicU64,
}

impl Arrivals {
    /// A clock with nothing stamped yet.
    pub fn new() -> Arc<Self> {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Arc::new(Arrivals {
            anchor: (Instant::now(), since_epoch),
            latest: AtomicU64::new(0),
        })
    }

    /// When the bytes of the latest read reached the socket, never later than now; `now` when
    /// the kernel stamps nothing (another OS, or no read yet).
    pub fn latest_or_now(&self) -> Instant {
        let now = Instant::now();
        match self.latest.load(Ordering::Relaxed) {
            0 => now,
            nanos => (self.anchor.0 + Duration::from_nanos(nanos - 1)).min(now),
        }
    }

    /// Notes a kernel arrival stamp (time since the epoch).
    fn note(&self, since_epoch: Duration) {
        // A stamp before the anchor (a wall clock stepped back) counts as the anchor: the
        // latency it times comes out longer, never shorter.
        let after = since_epoch.saturating_sub(self.anchor.1);
        let nanos = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX - 1);
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
    /// Asks the kernel to stamp what `tcp` receives.
    pub fn new(tcp: TcpStream, arrivals: Arc<Arrivals>) -> io::Result<Self> {
        #[cfg(target_os = "linux")]
        nix::sys::socket::setsockopt(&tcp, nix::sys::socket::sockopt::ReceiveTimestampns, &true)?;
        Ok(StampedTcp { tcp, arrivals })
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
            match this
                .tcp
                .try_io(tokio::io::Interest::READABLE, || recv_stamped(fd, unfilled))
            {
                Ok((read, stamp)) => {
                    if let Some(stamp) = stamp {
                        this.arrivals.note(stamp);
                    }
                    buf.advance(read);
                    return Poll::Ready(Ok(()));
                }
                // Readiness was stale; `try_io` cleared it, so the next poll waits.
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
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

    #[tokio::test]
    async fn a_read_is_stamped_with_when_its_bytes_arrived_not_when_they_were_read() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let arrivals = Arrivals::new();
        let client = TcpStream::connect(addr).await.unwrap();
        let mut stamped = StampedTcp::new(client, arrivals.clone()).unwrap();
        let (mut server, _) = listener.accept().await.unwrap();

        // The kernel turns stamping on shortly after the first socket asks for it (deferred
        // work), so a first read may come unstamped: exchange bytes until one is stamped.
        for _ in 0..100 {
            server.write_all(b"x").await.unwrap();
            let mut one = [0u8; 1];
            tokio::time::timeout(Duration::from_secs(5), stamped.read_exact(&mut one))
                .await
                .unwrap()
                .unwrap();
            if arrivals.latest.load(Ordering::Relaxed) != 0 || !cfg!(target_os = "linux") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            arrivals.latest.load(Ordering::Relaxed) != 0 || !cfg!(target_os = "linux"),
            "the kernel never stamped a read"
        );

        let before_send = Instant::now();
        server.write_all(b"hello").await.unwrap();
        let after_send = Instant::now();
        // Read well after the bytes arrived: the stamp must still say when they arrived.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), stamped.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..read], b"hello");
        let arrived = arrivals.latest_or_now();
        if cfg!(target_os = "linux") {
            // Loopback delivers within the send; allow for the two clocks being read apart.
            let slack = Duration::from_millis(5);
            assert!(arrived + slack >= before_send, "stamped before the send");
            assert!(
                arrived <= after_send + slack,
                "stamped at the read, not the arrival"
            );
        }

        // Writes go through untouched.
        stamped.write_all(b"back").await.unwrap();
        let mut back = [0u8; 4];
        server.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"back");
    }

    #[test]
    fn a_stamp_before_the_anchor_counts_as_the_anchor() {
        let arrivals = Arrivals::new();
        arrivals.note(Duration::from_secs(1));
        assert!(arrivals.latest_or_now() >= arrivals.anchor.0);
        assert!(arrivals.latest_or_now() <= Instant::now());
    }
}
