//! [`ResponseFuture`]: one request through the middleware, from decision to
//! response.
//!
//! Most requests are decided while they come in, in the service's `call`:
//! when the store answers at once ([`Store::answers_at_once`], the memory
//! store) and the runtime overrides hold nothing, the decision's future is
//! polled once, without a task ([`at_once`]). A rejection (or an outage, or
//! a missing key) is then answered there; an admitted request is handed to
//! the inner service at once, and the response future is the inner
//! service's future beside a [`Stamp`]: the limits the answer's headers
//! show and the leases its body holds. Nothing is boxed and the request is
//! not kept: a few hundred bytes per request, where the boxed path's future
//! held the request, the rules and every piece of the ruling across its
//! awaits (over 2 KiB, built and then copied into its box).
//!
//! The rest is boxed, in `respond`: a store that answers later (Redis),
//! inline limits, runtime overrides in force, a route whose cost is settled
//! from the response, and, after a decision at once, a request held for
//! shaping or an inner service that is not ready yet. The store's futures
//! are `impl Future` types that a hand-written state machine cannot name.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{Request, Response};
use pin_project_lite::pin_project;
use tollgate_core::{Decision, Store, StoreError};
use tollgate_rules::overrides::Found;
use tollgate_rules::RuleSet;
use tower::Service;
use yoke::Yoke;

use crate::body::RateLimitBody;
use crate::cost::{AtHead, CostOutcome, Settler, TrailersWanted};
use crate::decide::{self, Step};
use crate::headers::add_rate_limit_headers;
use crate::lease::{Leases, Releaser, Releasing};
use crate::problem;
use crate::ruling::{Applied, Ruling};
use crate::service::{Policy, Shared};

type BoxedResponse<R, E> =
    Pin<Box<dyn Future<Output = Result<Response<RateLimitBody<R>>, E>> + Send>>;

pin_project! {
    /// The response future of [`RateLimitService`](crate::RateLimitService):
    /// the inner service's future `F` and what its answer is stamped with,
    /// an answer made here, or the boxed path (see the module's doc).
    pub struct ResponseFuture<F, R, E> {
        #[pin]
        state: State<F, R, E>,
    }
}

pin_project! {
    #[project = StateProjection]
    enum State<F, R, E> {
        // The inner service's answer, stamped when it comes (no stamp: no
        // check applied).
        Called {
            #[pin]
            future: F,
            stamp: Option<Stamp>,
        },
        // Answered here, once `pending` (releasing leases) is done. Boxed:
        // a response is larger than the rest of the future, and only
        // rejections, outages and inner errors come here.
        Answered {
            pending: Option<Releasing>,
            answer: Option<Box<Result<Response<RateLimitBody<R>>, E>>>,
        },
        Boxed {
            future: BoxedResponse<R, E>,
        },
    }
}

impl<F, R, E> ResponseFuture<F, R, E> {
    pub(crate) fn boxed(
        future: impl Future<Output = Result<Response<RateLimitBody<R>>, E>> + Send + 'static,
    ) -> Self {
        ResponseFuture {
            state: State::Boxed {
                future: Box::pin(future),
            },
        }
    }

    /// `answer`, once `leases` (if any) are released.
    fn answered(answer: Result<Response<RateLimitBody<R>>, E>, leases: Option<Leases>) -> Self {
        ResponseFuture {
            state: State::Answered {
                pending: leases.map(Leases::release),
                answer: Some(Box::new(answer)),
            },
        }
    }
}

impl<F, R, E> Future for ResponseFuture<F, R, E>
where
    F: Future<Output = Result<Response<R>, E>>,
{
    type Output = Result<Response<RateLimitBody<R>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            let next = match state.as_mut().project() {
                StateProjection::Called { future, stamp } => {
                    match std::task::ready!(future.poll(cx)) {
                        Ok(response) => {
                            return Poll::Ready(Ok(Stamp::answer(stamp.take(), response)));
                        }
                        // The leases go back before the error does.
                        Err(error) => match stamp.take().and_then(|s| s.leases) {
                            Some(leases) => State::Answered {
                                pending: Some(leases.release()),
                                answer: Some(Box::new(Err(error))),
                            },
                            None => return Poll::Ready(Err(error)),
                        },
                    }
                }
                StateProjection::Answered { pending, answer } => {
                    if let Some(releasing) = pending {
                        std::task::ready!(releasing.as_mut().poll(cx));
                        *pending = None;
                    }
                    return match answer.take() {
                        Some(answer) => Poll::Ready(*answer),
                        None => panic!("`ResponseFuture` polled after it completed"),
                    };
                }
                StateProjection::Boxed { future } => return future.as_mut().poll(cx),
            };
            state.set(next);
        }
    }
}

impl<F, R, E> std::fmt::Debug for ResponseFuture<F, R, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// What an admitted request's answer gets from its decision: the limits
/// its headers show (borrowing the rules that decided it, which it keeps),
/// the most constrained decision, and the leases its body holds.
pub(crate) struct Stamp {
    applied: Yoke<Applied<'static>, Arc<RuleSet>>,
    top: Option<Decision>,
    leases: Option<Leases>,
    /// Whether the rate-limit headers are written (the settings').
    headers: bool,
}

impl Stamp {
    /// The inner service's `response`, with the headers and the leases of
    /// `stamp`, if there is one.
    fn answer<R>(stamp: Option<Stamp>, response: Response<R>) -> Response<RateLimitBody<R>> {
        let Some(stamp) = stamp else {
            return response.map(|body| RateLimitBody::inner(body, None, None));
        };
        let (mut head, body) = response.into_parts();
        if stamp.headers {
            add_rate_limit_headers(
                &mut head.headers,
                stamp.applied.get().as_slice(),
                stamp.top.as_ref(),
                false,
            );
        }
        Response::from_parts(head, RateLimitBody::inner(body, stamp.leases, None))
    }
}

/// What a decision at once leaves the request to.
// A local of `at_once`, never stored: boxing the answer would only add an
// allocation to every rejection.
#[allow(clippy::large_enum_variant)]
enum Next<R> {
    /// No check applied: on to the inner service as it is.
    Forward,
    /// Answered here, once the leases (if any) are released.
    Answer(Response<RateLimitBody<R>>, Option<Leases>),
    /// Admitted: on to the inner service after `hold`, its answer stamped.
    Admitted {
        top: Option<Decision>,
        leases: Option<Leases>,
        hold: Duration,
    },
    /// Not decided: the boxed path decides.
    Later,
}

/// The response future of a request whose decision can be had at once:
/// the store [answers at once](Store::answers_at_once) and no runtime
/// override is in force (the caller has seen both). The decision is
/// `by_rules`' on the rules `loaded` now, polled once without a task.
pub(crate) fn at_once<S, St, B, R>(
    shared: &Arc<Shared<St>>,
    inner: &mut S,
    peer: Option<SocketAddr>,
    loaded: Arc<RuleSet>,
    domain: &str,
    request: Request<B>,
) -> ResponseFuture<S::Future, R, S::Error>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    B: Send + 'static,
    R: Send + 'static,
    St: Store,
{
    let (parts, body) = request.into_parts();
    let mut next = Next::Forward;
    let applied: Yoke<Applied<'static>, Arc<RuleSet>> = Yoke::attach_to_cart(loaded, |rules| {
        let decided = poll_once(decide::by_rules(shared, rules, None, domain, &parts, peer));
        let step = decided.unwrap_or_else(|| {
            // The store said it answers at once and did not: an outage,
            // reported as one (nothing is known to be counted).
            let error = StoreError::Unavailable("the store did not answer at once".into());
            decide::unavailable(shared, &error)
        });
        match step {
            Step::Forward => Applied::None,
            Step::Later => {
                next = Next::Later;
                Applied::None
            }
            Step::Unavailable => {
                next = Next::Answer(
                    problem::store_unavailable().map(RateLimitBody::problem),
                    None,
                );
                Applied::None
            }
            Step::KeyMissing { status, route } => {
                let answer = problem::key_missing(status, route).map(RateLimitBody::problem);
                next = Next::Answer(answer, None);
                Applied::None
            }
            Step::Ruled(ruling) => {
                let leases = Leases::new(ruling.leases, Arc::clone(shared) as Arc<dyn Releaser>);
                if ruling.rejected {
                    next = Next::Answer(
                        rejection(&ruling.policy, &ruling.applied, ruling.top),
                        leases,
                    );
                    Applied::None
                } else {
                    next = Next::Admitted {
                        top: ruling.top,
                        leases,
                        hold: ruling.hold,
                    };
                    ruling.applied
                }
            }
        }
    });
    let request = Request::from_parts(parts, body);
    match next {
        Next::Forward => call(inner, request, None, Duration::ZERO),
        Next::Answer(answer, leases) => ResponseFuture::answered(Ok(answer), leases),
        Next::Admitted { top, leases, hold } => {
            let stamp = Stamp {
                applied,
                top,
                leases,
                headers: shared.settings.headers,
            };
            call(inner, request, Some(stamp), hold)
        }
        Next::Later => {
            ResponseFuture::boxed(respond(Arc::clone(shared), inner.clone(), peer, request))
        }
    }
}

/// `future`'s output if it has one the first time it is polled (without
/// a task: it must not wait on anything).
fn poll_once<F: Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}

/// The `429` of a rejected request: the limit `policy` that rejected it,
/// the `applied` limits' headers.
fn rejection<R>(
    policy: &str,
    applied: &Applied<'_>,
    top: Option<Decision>,
) -> Response<RateLimitBody<R>> {
    let retry_after = top.map(|t| t.retry_after).unwrap_or_default();
    let mut response = problem::too_many_requests(policy, retry_after);
    add_rate_limit_headers(
        response.headers_mut(),
        applied.as_slice(),
        top.as_ref(),
        true,
    );
    response.map(RateLimitBody::problem)
}

/// `request` handed to `inner`, its answer stamped: at once when `inner`
/// is ready now and nothing holds the request, else in a boxed future
/// that holds it `hold` and awaits readiness.
fn call<S, B, R>(
    inner: &mut S,
    request: Request<B>,
    stamp: Option<Stamp>,
    hold: Duration,
) -> ResponseFuture<S::Future, R, S::Error>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    B: Send + 'static,
    R: Send + 'static,
{
    let mut waiting = None;
    if hold.is_zero() {
        // Asked without a task: an inner service that is not ready now is
        // asked again, with the task's context, in the boxed future.
        match inner.poll_ready(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(())) => {
                return ResponseFuture {
                    state: State::Called {
                        future: inner.call(request),
                        stamp,
                    },
                }
            }
            Poll::Ready(Err(error)) => {
                return ResponseFuture::answered(Err(error), stamp.and_then(|s| s.leases))
            }
            // The service that was asked goes with the request, and a clone
            // stays for the next one: what it reserved while not ready (a
            // place in a semaphore's queue, say) is the boxed future's to
            // wait on, not left with a noop waker where no one waits.
            Poll::Pending => waiting = Some(std::mem::replace(inner, inner.clone())),
        }
    }
    let mut inner = waiting.unwrap_or_else(|| inner.clone());
    ResponseFuture::boxed(async move {
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        let answered = match std::future::poll_fn(|cx| inner.poll_ready(cx)).await {
            Ok(()) => inner.call(request).await,
            Err(error) => Err(error),
        };
        match answered {
            Ok(response) => Ok(Stamp::answer(stamp, response)),
            Err(error) => {
                if let Some(leases) = stamp.and_then(|s| s.leases) {
                    leases.release().await;
                }
                Err(error)
            }
        }
    })
}

/// One request, from decision to response.
pub(crate) async fn respond<S, St, B, R>(
    shared: Arc<Shared<St>>,
    mut inner: S,
    peer: Option<SocketAddr>,
    request: Request<B>,
) -> Result<Response<RateLimitBody<R>>, S::Error>
where
    S: Service<Request<B>, Response = Response<R>> + Send + 'static,
    S::Future: Send,
    St: Store,
{
    let (mut parts, body) = request.into_parts();
    // The rules in force when the request arrived, kept until its response
    // is built (the ruling borrows them): a reload swaps the handle, not
    // these.
    let loaded = match &shared.policy {
        Policy::Rules { rules, .. } => Some(rules.load_full()),
        Policy::Inline(_) => None,
    };
    // The runtime overrides found for its descriptors, kept as long as the
    // rules (the ruling may borrow an override's rule).
    let mut found = Found::EMPTY;
    let step = match (&shared.policy, &loaded) {
        (Policy::Rules { domain, .. }, Some(rules)) => {
            decide::by_rules(&shared, rules, Some(&mut found), domain, &parts, peer).await
        }
        (Policy::Inline(inline), _) => decide::by_inline(&shared, inline, &parts, peer).await,
        (Policy::Rules { .. }, None) => Step::Forward,
    };
    let ruling = match step {
        Step::Ruled(ruling) => ruling,
        Step::Forward => {
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            let response = inner.call(Request::from_parts(parts, body)).await?;
            return Ok(response.map(|b| RateLimitBody::inner(b, None, None)));
        }
        // `Later` never comes from a decision given `found`; answered as
        // an outage if it ever did, never forwarded unchecked.
        Step::Unavailable | Step::Later => {
            return Ok(problem::store_unavailable().map(RateLimitBody::problem))
        }
        Step::KeyMissing { status, route } => {
            return Ok(problem::key_missing(status, route).map(RateLimitBody::problem))
        }
    };
    let Ruling {
        rejected,
        policy,
        applied,
        top,
        hold,
        leases,
        charge,
    } = ruling;
    let leases = if leases.is_empty() {
        None
    } else {
        Leases::new(leases, Arc::clone(&shared) as Arc<dyn Releaser>)
    };
    if rejected {
        // Leases granted by shadow-mode rules of a rejected request.
        if let Some(leases) = leases {
            leases.release().await;
        }
        return Ok(rejection(&policy, &applied, top));
    }
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
    if charge.as_ref().is_some_and(|c| c.cost.at_body_end()) {
        parts.extensions.insert(TrailersWanted);
    }
    // Readiness awaited, then the request handed straight to `call`: a
    // `Oneshot` held the request in its own state first, one more move of
    // it per request.
    let answered = match std::future::poll_fn(|cx| inner.poll_ready(cx)).await {
        Ok(()) => inner.call(Request::from_parts(parts, body)).await,
        Err(error) => Err(error),
    };
    match answered {
        Ok(response) => {
            let (mut head, body) = response.into_parts();
            let mut at_end = None;
            if let Some(charge) = charge {
                let settler = Arc::clone(&shared) as Arc<dyn Settler>;
                match charge.at_head(head.status.as_u16(), &head.headers, Arc::clone(&settler)) {
                    AtHead::Done => {}
                    // Before the head goes on: the client's next request
                    // sees the charge or the refund.
                    AtHead::Settle(counted, actual, outcome) => {
                        settler.settle(counted, actual, outcome).await;
                    }
                    // The end must reach the client after the settle: with
                    // a length, an HTTP/1.1 client has the whole answer at
                    // its last byte, before the body's end is polled (the
                    // body hides its exact size too, so no length is added).
                    AtHead::AtEnd(body_charge) => {
                        head.headers.remove(http::header::CONTENT_LENGTH);
                        at_end = Some(body_charge);
                    }
                }
            }
            if shared.settings.headers {
                add_rate_limit_headers(&mut head.headers, applied.as_slice(), top.as_ref(), false);
            }
            Ok(Response::from_parts(
                head,
                RateLimitBody::inner(body, leases, at_end),
            ))
        }
        Err(error) => {
            if charge.is_some() {
                Settler::report(&*shared, CostOutcome::Aborted);
            }
            if let Some(leases) = leases {
                leases.release().await;
            }
            Err(error)
        }
    }
}
