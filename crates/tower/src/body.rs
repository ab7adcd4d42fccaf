//! [`RateLimitBody`]: the body of every response that passes through the
//! middleware — the inner service's body, holding the request's
//! `concurrency` leases and its cost still to settle (a trailer's) until it
//! ends, or the problem+json body of a `429` or `503` the middleware
//! answered itself.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::cost::{BodyCharge, Settling};
use crate::lease::{Leases, Releasing};

pin_project! {
    /// A response body from [`RateLimitService`](crate::RateLimitService).
    ///
    /// Wrapping the inner body: when it ends, the request's cost is
    /// settled (from a trailer) and its leases are released before the end
    /// is reported; when it fails or is dropped before its end (the client
    /// went away), the leases are released too, and the cost settled with
    /// what is known (see `cost`).
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
            // `None` for most answers: nothing to do but pass the frames on.
            duty: Option<Box<Duty>>,
        },
        Problem {
            data: Option<Bytes>,
        },
    }
}

/// What an inner body does besides passing its frames on: the leases it
/// holds and the cost it settles until it ends, and then that end being
/// finished. Boxed: few answers have any (a `concurrency` limit, a cost
/// read from the response), and every answer's body is moved whole several
/// times on its way to the client; without the box each move carried
/// these fields too (a header map among them).
struct Duty {
    leases: Option<Leases>,
    charge: Option<BodyCharge>,
    // Settling the cost, then releasing the leases, once the inner body
    // has ended; or settling the cost from the trailers, which are held
    // until it is done.
    finishing: Option<Releasing>,
    held: Option<HeaderMap>,
}

impl Duty {
    /// Whether nothing is left to do.
    fn is_done(&self) -> bool {
        self.leases.is_none()
            && self.charge.is_none()
            && self.finishing.is_none()
            && self.held.is_none()
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for Kind<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::Inner { body, duty } => f
                .debug_struct("Inner")
                .field("body", body)
                .field("leases", &duty.as_ref().and_then(|d| d.leases.as_ref()))
                .field("charge", &duty.as_ref().and_then(|d| d.charge.as_ref()))
                .finish(),
            Kind::Problem { data } => f.debug_struct("Problem").field("data", data).finish(),
        }
    }
}

impl<B> RateLimitBody<B> {
    /// The inner service's body, holding `leases` and `charge` until it
    /// ends.
    pub(crate) fn inner(
        body: B,
        leases: Option<Leases>,
        charge: Option<BodyCharge>,
    ) -> RateLimitBody<B> {
        let duty = (leases.is_some() || charge.is_some()).then(|| {
            Box::new(Duty {
                leases,
                charge,
                finishing: None,
                held: None,
            })
        });
        RateLimitBody {
            kind: Kind::Inner { body, duty },
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
            KindProj::Inner { body, duty } => {
                let Some(duty) = duty.as_deref_mut() else {
                    return body.poll_frame(cx);
                };
                let Duty {
                    leases,
                    charge,
                    finishing,
                    held,
                } = duty;
                if let Some(finish) = finishing {
                    ready!(finish.as_mut().poll(cx));
                    *finishing = None;
                    return Poll::Ready(held.take().map(|t| Ok(Frame::trailers(t))));
                }
                match ready!(body.poll_frame(cx)) {
                    Some(Ok(frame)) => {
                        // Trailers are the body's last frame, and a server
                        // may not poll past them: the cost is settled
                        // before they go on.
                        let settle = match (charge.take(), frame.trailers_ref()) {
                            (Some(mut charge), Some(trailers)) => {
                                charge.trailers(trailers);
                                charge.end()
                            }
                            (taken, _) => {
                                *charge = taken;
                                None
                            }
                        };
                        if let Some(settle) = settle {
                            let mut finish = finish(Some(settle), None);
                            if finish.as_mut().poll(cx).is_pending() {
                                *held = frame.into_trailers().ok();
                                *finishing = Some(finish);
                                return Poll::Pending;
                            }
                        }
                        Poll::Ready(Some(Ok(frame)))
                    }
                    Some(Err(error)) => {
                        // Dropping them spawns the release, and settles
                        // what is known.
                        leases.take();
                        charge.take();
                        Poll::Ready(Some(Err(error)))
                    }
                    None => {
                        let settle = charge.take().and_then(BodyCharge::end);
                        let release = leases.take().map(Leases::release);
                        if settle.is_none() && release.is_none() {
                            return Poll::Ready(None);
                        }
                        let mut finish = finish(settle, release);
                        if finish.as_mut().poll(cx).is_pending() {
                            *finishing = Some(finish);
                            return Poll::Pending;
                        }
                        Poll::Ready(None)
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            // Not ended while leases are held or a cost is to settle: the
            // poll that sees the end settles and releases them.
            Kind::Inner { body, duty } => {
                body.is_end_stream() && duty.as_ref().is_none_or(|d| d.is_done())
            }
            Kind::Problem { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            // A cost to settle at the end: no exact size, so that the
            // server marks the end itself (a chunked HTTP/1.1 body's last
            // chunk, HTTP/2's end of stream) once the settle is done.
            Kind::Inner { body, duty } if duty.as_ref().is_some_and(|d| d.charge.is_some()) => {
                let mut hint = SizeHint::new();
                hint.set_lower(body.size_hint().lower());
                hint
            }
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Problem { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

/// The settle, then the release, as one future.
fn finish(settle: Option<Settling>, release: Option<Releasing>) -> Releasing {
    Box::pin(async move {
        if let Some(settle) = settle {
            settle.await;
        }
        if let Some(release) = release {
            release.await;
        }
    })
}
