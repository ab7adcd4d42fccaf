//! [`RateLimitBody`]: the body of every response that passes through the
//! middleware — the inner service's body, holding the request's
//! `concurrency` leases until it ends, or the problem+json body of a `429`
//! or `503` the middleware answered itself.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::lease::{Leases, Releasing};

pin_project! {
    /// A response body from [`RateLimitService`](crate::RateLimitService).
    ///
    /// Wrapping the inner body: when it ends, the request's leases are
    /// released before the end is reported; when it fails or is dropped
    /// before its end (the client went away), they are released too.
    #[derive(Debug)]
    pub struct RateLimitBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
            leases: Option<Leases>,
            releasing: Option<Releasing>,
        },
        Problem {
            data: Option<Bytes>,
        },
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for Kind<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::Inner { body, leases, .. } => f
                .debug_struct("Inner")
                .field("body", body)
                .field("leases", leases)
                .finish(),
            Kind::Problem { data } => f.debug_struct("Problem").field("data", data).finish(),
        }
    }
}

impl<B> RateLimitBody<B> {
    /// The inner service's body, holding `leases` until it ends.
    pub(crate) fn inner(body: B, leases: Option<Leases>) -> RateLimitBody<B> {
        RateLimitBody {
            kind: Kind::Inner {
                body,
                leases,
                releasing: None,
            },
        }
    }

    /// A body the middleware wrote (a problem details document).
    pub(crate) fn problem(data: Bytes) -> RateLimitBody<B> {
        RateLimitBody {
            kind: Kind::Problem { data: Some(data) },
        }
    }
}

impl<B: Body<Data = Bytes>> Body for RateLimitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Problem { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            KindProj::Inner {
                body,
                leases,
                releasing,
            } => {
                if let Some(release) = releasing {
                    ready!(release.as_mut().poll(cx));
                    *releasing = None;
                    return Poll::Ready(None);
                }
                match ready!(body.poll_frame(cx)) {
                    Some(Ok(frame)) => Poll::Ready(Some(Ok(frame))),
                    Some(Err(error)) => {
                        // Dropping them spawns the release.
                        leases.take();
                        Poll::Ready(Some(Err(error)))
                    }
                    None => {
                        if let Some(held) = leases.take() {
                            let mut release = held.release();
                            if release.as_mut().poll(cx).is_pending() {
                                *releasing = Some(release);
                                return Poll::Pending;
                            }
                        }
                        Poll::Ready(None)
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            // Not ended while leases are held: the poll that sees the end
            // releases them.
            Kind::Inner {
                body,
                leases,
                releasing,
            } => body.is_end_stream() && leases.is_none() && releasing.is_none(),
            Kind::Problem { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Problem { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
