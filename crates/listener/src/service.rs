//! [`Served`]: a connection's `tower::Service` as hyper calls it, with its
//! request bodies under the body read timeout.
//!
//! hyper-util's own adapter (`TowerToHyperService`) hands each request to
//! a `tower::util::Oneshot`, which holds the service's clone and the
//! request until its first poll, awaits readiness there, and only then
//! calls the service: the request is moved twice more, and the future
//! grows by the request's size. Here readiness is asked for as the request
//! comes; a service that is ready (every service of this project always
//! is) is called at once, so the future is the service's own. A service
//! that is not ready still gets its readiness awaited, in the future.
//!
//! Each HTTP/1 request is also marked as being answered ([`Answering`])
//! from its head until its answer's body is done: the connection's head
//! clock runs only between answers.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{Request, Response, Version};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;

use crate::activity::{Activity, Answering};
use crate::body::TimedBody;
use crate::BoxError;

/// A connection's service for hyper.
#[derive(Debug, Clone)]
pub(crate) struct Served<S> {
    /// Called in place (see [`start`]).
    pub(crate) service: RefCell<S>,
    pub(crate) body_read_timeout: Duration,
    /// The connection's clocks.
    pub(crate) activity: Arc<Activity>,
}

impl<S, B> hyper::service::Service<Request<Incoming>> for Served<S>
where
    S: tower::Service<Request<TimedBody<Incoming>>, Response = Response<B>> + Clone,
    S::Error: Into<BoxError>,
{
    type Response = Response<AnswerBody<B>>;
    type Error = BoxError;
    type Future = Answered<Calling<S, Request<TimedBody<Incoming>>>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let answering = if request.version() == Version::HTTP_2 {
            self.activity.untime_heads();
            None
        } else {
            Some(Answering::new(&self.activity))
        };
        let timeout = self.body_read_timeout;
        Answered {
            calling: start(
                &self.service,
                request.map(|body| TimedBody::new(body, timeout)),
            ),
            answering,
        }
    }
}

pin_project! {
    /// The answer to one request, which holds the request's
    /// [`Answering`] and hands it to the answer's body.
    pub(crate) struct Answered<F> {
        #[pin]
        calling: F,
        answering: Option<Answering>,
    }
}

impl<F, B> Future for Answered<F>
where
    F: Future<Output = Result<Response<B>, BoxError>>,
{
    type Output = Result<Response<AnswerBody<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = std::task::ready!(this.calling.poll(cx))?;
        let answering = this.answering.take();
        Poll::Ready(Ok(response.map(|inner| AnswerBody { inner, answering })))
    }
}

pin_project! {
    /// An answer's body, holding its request's [`Answering`] until hyper
    /// drops it, having sent all of it (or given up on the connection).
    pub(crate) struct AnswerBody<B> {
        #[pin]
        inner: B,
        answering: Option<Answering>,
    }
}

impl<B: Body> Body for AnswerBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `service` called with `request` now if it is ready, else a clone of it
/// once it is.
///
/// The connection's own service is called while it is ready, not a clone
/// per request: cloning a layered service and dropping the clone cost
/// an atomic increment and decrement for each `Arc` it holds. One that
/// is not ready goes with the request, and a clone stays for the next:
/// what it reserved while not ready is the future's to wait on.
fn start<S, R>(service: &RefCell<S>, request: R) -> Calling<S, R>
where
    S: tower::Service<R> + Clone,
    S::Error: Into<BoxError>,
{
    // Borrowed only within this call, which never reenters itself; a
    // clone is asked should that ever change.
    let mut held;
    let mut clone;
    let service = match service.try_borrow_mut() {
        Ok(borrowed) => {
            held = borrowed;
            &mut *held
        }
        Err(_) => {
            clone = service.borrow().clone();
            &mut clone
        }
    };
    // Asked without a task: a service that is not ready yet is asked
    // again, with the task's context, when the future is polled.
    let mut cx = Context::from_waker(Waker::noop());
    match service.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => Calling::Called {
            future: service.call(request),
        },
        Poll::Ready(Err(error)) => Calling::Failed {
            error: Some(error.into()),
        },
        Poll::Pending => {
            let next = service.clone();
            Calling::Waiting {
                service: std::mem::replace(service, next),
                request: Some(request),
            }
        }
    }
}

pin_project! {
    /// The answer to one request: the service's future, or readiness
    /// awaited first.
    #[project = CallingProjection]
    pub(crate) enum Calling<S: tower::Service<R>, R> {
        Called { #[pin] future: S::Future },
        Waiting { service: S, request: Option<R> },
        Failed { error: Option<BoxError> },
    }
}

impl<S, R> Future for Calling<S, R>
where
    S: tower::Service<R>,
    S::Error: Into<BoxError>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let future = match self.as_mut().project() {
                CallingProjection::Called { future } => return future.poll(cx).map_err(Into::into),
                CallingProjection::Failed { error } => match error.take() {
                    Some(error) => return Poll::Ready(Err(error)),
                    None => panic!("`Calling` polled after it completed"),
                },
                CallingProjection::Waiting { service, request } => {
                    if let Err(error) = std::task::ready!(service.poll_ready(cx)) {
                        return Poll::Ready(Err(error.into()));
                    }
                    match request.take() {
                        Some(request) => service.call(request),
                        None => panic!("`Calling` polled after it completed"),
                    }
                }
            };
            self.set(Calling::Called { future });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// Ready only from its second `poll_ready` on; answers with how many
    /// calls it has had.
    #[derive(Clone, Default)]
    struct SlowToStart {
        asked: Arc<AtomicUsize>,
        calls: Arc<AtomicUsize>,
    }

    impl tower::Service<u32> for SlowToStart {
        type Response = (u32, usize);
        type Error = Infallible;
        type Future = std::future::Ready<Result<(u32, usize), Infallible>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            if self.asked.fetch_add(1, Ordering::SeqCst) == 0 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: u32) -> Self::Future {
            let calls = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            std::future::ready(Ok((request, calls)))
        }
    }

    #[tokio::test]
    async fn a_service_not_ready_yet_is_called_once_it_is() {
        let service = SlowToStart::default();
        let service = RefCell::new(service);
        let calling = start(&service, 7);
        assert!(matches!(calling, Calling::Waiting { .. }));
        let counts = service.borrow().clone();
        assert_eq!(counts.calls.load(Ordering::SeqCst), 0);
        assert_eq!(calling.await.unwrap(), (7, 1));
        assert_eq!(counts.asked.load(Ordering::SeqCst), 2);
        // Ready now: called at once, before any poll.
        let called = start(&service, 8);
        assert!(matches!(called, Calling::Called { .. }));
        assert_eq!(counts.calls.load(Ordering::SeqCst), 2);
        assert_eq!(called.await.unwrap(), (8, 2));
    }
}
