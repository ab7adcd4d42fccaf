//! The idle clock of a connection: [`ActiveIo`] marks the time whenever a
//! byte moves either way, and [`Activity`] tells when that last happened.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// When a connection last moved a byte.
#[derive(Debug)]
pub(crate) struct Activity {
    origin: Instant,
    /// Nanoseconds from `origin` to the last byte moved.
    last: AtomicU64,
}

impl Activity {
    /// A clock started now, as if a byte had just moved.
    pub(crate) fn new() -> Activity {
        Activity {
            origin: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let since = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.store(since, Ordering::Relaxed);
    }

    /// When the last byte moved.
    pub(crate) fn last(&self) -> Instant {
        self.origin + Duration::from_nanos(self.last.load(Ordering::Relaxed))
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
        activity: std::sync::Arc<Activity>,
        held: H,
    }
}

impl<T, H> ActiveIo<T, H> {
    pub(crate) fn new(inner: T, activity: std::sync::Arc<Activity>, held: H) -> ActiveIo<T, H> {
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
