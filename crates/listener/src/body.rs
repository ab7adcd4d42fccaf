//! [`TimedBody`]: a request body whose reader gives up when the client
//! pauses too long, and [`BodyTimeout`], the error it gives up with.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::BoxError;

/// The client sent no part of a request body for the body read timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTimeout {
    /// The body read timeout.
    pub timeout: Duration,
}

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the client sent no part of the request body for {} ms",
            self.timeout.as_millis()
        )
    }
}

impl std::error::Error for BodyTimeout {}

impl BodyTimeout {
    /// The `BodyTimeout` in `error` or among its sources, if any: a body
    /// error reaches the service wrapped by whatever read the body.
    pub fn find(error: &(dyn std::error::Error + 'static)) -> Option<BodyTimeout> {
        let mut current = Some(error);
        while let Some(error) = current {
            if let Some(timeout) = error.downcast_ref::<BodyTimeout>() {
                return Some(*timeout);
            }
            current = error.source();
        }
        None
    }
}

pin_project! {
    /// A request body that fails with [`BodyTimeout`] when no frame comes
    /// for `timeout` while it is being read. The clock runs only while a
    /// reader waits: a service that has not started reading is not timed.
    /// Once timed out it keeps failing, so a reader can never take a
    /// truncated body for a whole one.
    #[derive(Debug)]
    pub struct TimedBody<B> {
        #[pin]
        inner: B,
        timeout: Duration,
        // One timer per body, reset for each wait.
        deadline: Option<Pin<Box<Sleep>>>,
        waiting: bool,
        timed_out: bool,
    }
}

impl<B> TimedBody<B> {
    /// `inner`, read under `timeout`.
    pub fn new(inner: B, timeout: Duration) -> TimedBody<B> {
        TimedBody {
            inner,
            timeout,
            deadline: None,
            waiting: false,
            timed_out: false,
        }
    }
}

impl<B> Body for TimedBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let timeout = BodyTimeout {
            timeout: *this.timeout,
        };
        if *this.timed_out {
            return Poll::Ready(Some(Err(Box::new(timeout))));
        }
        match this.inner.poll_frame(cx) {
            Poll::Ready(frame) => {
                *this.waiting = false;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                if !*this.waiting {
                    *this.waiting = true;
                    let at = Instant::now() + *this.timeout;
                    match this.deadline {
                        Some(sleep) => sleep.as_mut().reset(at),
                        None => *this.deadline = Some(Box::pin(tokio::time::sleep_until(at))),
                    }
                }
                let expired = match this.deadline {
                    Some(sleep) => sleep.as_mut().poll(cx).is_ready(),
                    None => false,
                };
                if expired {
                    *this.timed_out = true;
                    return Poll::Ready(Some(Err(Box::new(timeout))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.timed_out && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http_body_util::BodyExt;
    use tokio::sync::mpsc;

    use super::*;

    /// A body fed through a channel, frame by frame; it ends when the
    /// sender is dropped.
    struct Fed(mpsc::Receiver<Bytes>);

    impl Body for Fed {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    fn fed(timeout: Duration) -> (mpsc::Sender<Bytes>, TimedBody<Fed>) {
        let (tx, rx) = mpsc::channel(8);
        (tx, TimedBody::new(Fed(rx), timeout))
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_keeps_coming_is_read_whole_however_long_it_takes() {
        let (tx, body) = fed(Duration::from_secs(1));
        tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(900)).await;
                tx.send(Bytes::from_static(b"ab")).await.unwrap();
            }
        });
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"ababababab");
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_longer_than_the_timeout_fails_the_read_and_every_later_one() {
        let (tx, mut body) = fed(Duration::from_secs(1));
        tx.send(Bytes::from_static(b"half")).await.unwrap();
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), Bytes::from_static(b"half"));
        let started = Instant::now();
        let error = body.frame().await.unwrap().unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert_eq!(
            BodyTimeout::find(&*error),
            Some(BodyTimeout {
                timeout: Duration::from_secs(1)
            })
        );
        // Data that comes too late does not make the body whole.
        tx.send(Bytes::from_static(b"rest")).await.unwrap();
        drop(tx);
        assert!(body.frame().await.unwrap().is_err());
        assert!(!body.is_end_stream());
    }

    #[test]
    fn a_body_timeout_is_found_among_the_sources_of_an_error() {
        #[derive(Debug)]
        struct Wrapper(BoxError);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "reading failed")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&*self.0)
            }
        }
        let timeout = BodyTimeout {
            timeout: Duration::from_millis(200),
        };
        let wrapped = Wrapper(Box::new(timeout));
        assert_eq!(BodyTimeout::find(&wrapped), Some(timeout));
        assert_eq!(BodyTimeout::find(&Wrapper("other".into())), None);
        assert!(timeout.to_string().contains("200 ms"));
    }
}
