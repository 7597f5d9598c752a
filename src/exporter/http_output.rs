//! A connection's output as the server sees it: whether its client reads
//! what it is sent. The connection's stream is wrapped in [`Watched`],
//! which notes when a write could not go out (the socket's send buffer is
//! full: the client does not read) and when one goes out again.
//!
//! The server uses it three ways: an answer is not begun while the
//! previous one still waits to go out (so a client that pipelines requests
//! and reads nothing has at most one answer waiting and one request
//! waiting for it), a connection whose output has waited longer than
//! [`Limits::write_stall_timeout`](super::Limits) is closed, and a
//! connection whose output waits now may be closed to make room for a new
//! one even while it is being answered.

use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// Whether a connection's output waits for its client to read.
#[derive(Default)]
pub(crate) struct Output {
    state: Mutex<State>,
    /// Notified when a write goes out after waiting.
    drained: Notify,
}

#[derive(Default)]
struct State {
    /// Since when a write could not go out; None once one went out.
    blocked_since: Option<Instant>,
    /// Since when the socket has held bytes its client has not taken
    /// (first seen so); None once it held none.
    unsent_since: Option<Instant>,
    /// The connection's socket while it is open, to ask how much of what
    /// was written its client has not taken.
    fd: Option<RawFd>,
}

impl State {
    /// Bytes written to the socket that its client has not acknowledged
    /// (`SIOCOUTQ`): an answer the kernel holds because the client does
    /// not read.
    fn unsent(&self) -> usize {
        let Some(fd) = self.fd else {
            return 0;
        };
        let mut n: libc::c_int = 0;
        // SAFETY: the descriptor is open while `fd` is Some (cleared under
        // the same lock before the socket is closed); the ioctl writes an
        // int.
        let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) };
        if r == 0 {
            usize::try_from(n).unwrap_or(0)
        } else {
            0
        }
    }
}

impl Output {
    /// The output of a connection on socket `fd`.
    pub(crate) fn of_socket(fd: RawFd) -> Self {
        let o = Self::default();
        o.state().fd = Some(fd);
        o
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long the output has waited for the client to read, if it waits
    /// now: a write could not go out, or the socket holds bytes the
    /// client has not taken.
    pub(crate) fn waiting_for(&self) -> Option<Duration> {
        let mut s = self.state();
        if let Some(t) = s.blocked_since {
            return Some(t.elapsed());
        }
        if s.unsent() == 0 {
            s.unsent_since = None;
            return None;
        }
        Some(s.unsent_since.get_or_insert_with(Instant::now).elapsed())
    }

    /// Notes that a write could not go out (kept from the first such).
    pub(crate) fn block(&self) {
        self.state().blocked_since.get_or_insert_with(Instant::now);
    }

    fn progress(&self) {
        if self.state().blocked_since.take().is_some() {
            self.drained.notify_waiters();
        }
    }

    /// The socket is being closed: it is not asked any more.
    fn closing(&self) {
        self.state().fd = None;
    }

    /// Returns once no output waits (at once if none does).
    pub(crate) async fn drained(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.waiting_for().is_none() {
                return;
            }
            if self.state().blocked_since.is_some() {
                notified.await;
            } else {
                // Held by the kernel: no write of ours to wake us.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// Returns once the output has waited `limit` for its client (checked
    /// every quarter of `limit`).
    pub(crate) async fn stalled(&self, limit: Duration) {
        let step = (limit / 4).max(Duration::from_millis(10));
        loop {
            if self.waiting_for().is_some_and(|d| d >= limit) {
                return;
            }
            tokio::time::sleep(step).await;
        }
    }
}

/// A connection's stream, its writes noted in an [`Output`].
pub(crate) struct Watched<I> {
    pub(crate) io: I,
    pub(crate) output: Arc<Output>,
}

impl<I> Drop for Watched<I> {
    fn drop(&mut self) {
        // Before the stream (and its descriptor) goes.
        self.output.closing();
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I> Watched<I> {
    fn noted(&self, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match &r {
            Poll::Pending => self.output.block(),
            Poll::Ready(Ok(n)) if *n > 0 => self.output.progress(),
            Poll::Ready(_) => {}
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.noted(r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.noted(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn a_client_that_does_not_read_is_seen_and_one_that_reads_again_too() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let output = Arc::new(Output::default());
            let (server, mut client) = tokio::io::duplex(64);
            let mut w = Watched {
                io: server,
                output: output.clone(),
            };
            // 64 bytes fit; the rest waits for the client.
            let sent = tokio::time::timeout(Duration::from_millis(50), w.write_all(&[1; 200]));
            assert!(sent.await.is_err(), "the write waits");
            assert!(output.waiting_for().is_some());
            tokio::time::timeout(
                Duration::from_secs(5),
                output.stalled(Duration::from_millis(20)),
            )
            .await
            .expect("stalled");
            let mut buf = [0; 64];
            client.read_exact(&mut buf).await.unwrap();
            w.write_all(&[2; 8]).await.unwrap();
            assert!(output.waiting_for().is_none());
            tokio::time::timeout(Duration::from_secs(1), output.drained())
                .await
                .expect("drained at once");
        });
    }
}
