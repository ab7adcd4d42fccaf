//! The clocks of a connection: [`ActiveIo`] marks the time whenever a
//! byte moves either way, and [`Activity`] tells when that last happened
//! (the idle timeout) and since when the connection has been waiting for
//! a request head (the header read timeout, see [`Answering`]).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// When a connection last moved a byte, and whether it is waiting for a
/// request head.
#[derive(Debug)]
pub(crate) struct Activity {
    origin: Instant,
    /// Nanoseconds from `origin` to the last byte moved.
    last: AtomicU64,
    /// HTTP/1 requests being answered (from their head to the end of
    /// their answer): at most one, as HTTP/1 reads the next head only
    /// once the answer is sent. None: the connection waits for a head.
    answering: AtomicU32,
    /// Nanoseconds from `origin` to when the connection last started
    /// waiting for a head: its start, or the end of its last answer.
    waiting_since: AtomicU64,
    /// Whether the wait for a head is timed: it is until the connection
    /// turns out to speak HTTP/2, whose streams are not HTTP/1 heads.
    heads_timed: AtomicBool,
}

impl Activity {
    /// A clock started now, as if a byte had just moved; `heads_timed`
    /// when the connection may speak HTTP/1.
    pub(crate) fn new(heads_timed: bool) -> Activity {
        Activity {
            origin: Instant::now(),
            last: AtomicU64::new(0),
            answering: AtomicU32::new(0),
            waiting_since: AtomicU64::new(0),
            heads_timed: AtomicBool::new(heads_timed),
        }
    }

    fn since_origin(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last.store(self.since_origin(), Ordering::Relaxed);
    }

    /// When the last byte moved.
    pub(crate) fn last(&self) -> Instant {
        self.origin + Duration::from_nanos(self.last.load(Ordering::Relaxed))
    }

    /// Where the connection's head clock stands, with heads due `timeout`
    /// after the connection starts waiting for them.
    pub(crate) fn head_clock(&self, timeout: Duration) -> HeadClock {
        if !self.heads_timed.load(Ordering::Relaxed) {
            return HeadClock::Untimed;
        }
        if self.answering.load(Ordering::Acquire) > 0 {
            return HeadClock::Answering;
        }
        let since = Duration::from_nanos(self.waiting_since.load(Ordering::Acquire));
        HeadClock::Due(self.origin + since + timeout)
    }

    /// The connection speaks HTTP/2: its heads are no longer timed.
    pub(crate) fn untime_heads(&self) {
        self.heads_timed.store(false, Ordering::Relaxed);
    }
}

/// Where a connection's head clock stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadClock {
    /// Heads are not timed: the connection speaks HTTP/2.
    Untimed,
    /// A request is being answered: no head is due until its answer ends.
    Answering,
    /// The connection waits for a head, due by then.
    Due(Instant),
}

/// A request of an HTTP/1 connection being answered, from its head to the
/// end of its answer (when the answer's body is dropped, hyper having
/// taken all of it, or the request is dropped unanswered): meanwhile the
/// connection waits for no head; after, it does again, from then.
///
/// This is the header read timeout on the connection's one timer (the
/// idle timer, which [`serve`](crate::serve) also wakes for the head's
/// deadline) rather than a timer per request, as hyper's own timeout
/// makes: registering and removing that timer cost about 900
/// instructions on each request.
#[derive(Debug)]
pub(crate) struct Answering {
    activity: Arc<Activity>,
}

impl Answering {
    pub(crate) fn new(activity: &Arc<Activity>) -> Answering {
        activity.answering.fetch_add(1, Ordering::AcqRel);
        Answering {
            activity: Arc::clone(activity),
        }
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        let activity = &self.activity;
        activity
            .waiting_since
            .store(activity.since_origin(), Ordering::Release);
        activity.answering.fetch_sub(1, Ordering::AcqRel);
    }
}

pin_project! {
    /// A connection's stream that tells `activity` of every byte read or
    /// written, and holds the connection's place under the cap (`held`)
    /// for as long as the stream lives: an upgraded connection (a
    /// WebSocket) keeps it after hyper has handed the stream over.
    pub(crate) struct ActiveIo<T, H> {
        #[pin]
        inner: T,
        activity: Arc<Activity>,
        held: H,
    }
}

impl<T, H> ActiveIo<T, H> {
    pub(crate) fn new(inner: T, activity: Arc<Activity>, held: H) -> ActiveIo<T, H> {
        ActiveIo {
            inner,
            activity,
            held,
        }
    }
}

impl<T: AsyncRead, H> AsyncRead for ActiveIo<T, H> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let read = this.inner.poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.touch();
        }
        read
    }
}

impl<T: AsyncWrite, H> AsyncWrite for ActiveIo<T, H> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let written = this.inner.poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let written = this.inner.poll_write_vectored(cx, bufs);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }
}
