//! [`ResponseFuture`]: one request through the middleware, from decision to
//! response.
//!
//! The future is boxed: it awaits the store, whose futures are
//! `impl Future` types that cannot be named in a hand-written state
//! machine. The steps are `respond`: decide, answer a rejection here or
//! hold the request as shaping says, call the inner service, add the
//! headers and hand the leases to the response body.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tollgate_core::Store;
use tollgate_rules::overrides::Found;
use tower::Service;

use crate::body::RateLimitBody;
use crate::cost::{AtHead, CostOutcome, Settler, TrailersWanted};
use crate::decide::{self, Step};
use crate::headers::add_rate_limit_headers;
use crate::lease::{Leases, Releaser};
use crate::problem;
use crate::ruling::Ruling;
use crate::service::{Policy, Shared};

type BoxedResponse<R, E> =
    Pin<Box<dyn Future<Output = Result<Response<RateLimitBody<R>>, E>> + Send>>;

/// The response future of [`RateLimitService`](crate::RateLimitService).
pub struct ResponseFuture<R, E> {
    inner: BoxedResponse<R, E>,
}

impl<R, E> ResponseFuture<R, E> {
    pub(crate) fn new(
        future: impl Future<Output = Result<Response<RateLimitBody<R>>, E>> + Send + 'static,
    ) -> Self {
        ResponseFuture {
            inner: Box::pin(future),
        }
    }
}

impl<R, E> Future for ResponseFuture<R, E> {
    type Output = Result<Response<RateLimitBody<R>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<R, E> std::fmt::Debug for ResponseFuture<R, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
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
            decide::by_rules(&shared, rules, &mut found, domain, &parts, peer).await
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
        Step::Unavailable => return Ok(problem::store_unavailable().map(RateLimitBody::problem)),
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
        let retry_after = top.map(|t| t.retry_after).unwrap_or_default();
        let mut response = problem::too_many_requests(&policy, retry_after);
        add_rate_limit_headers(
            response.headers_mut(),
            applied.as_slice(),
            top.as_ref(),
            true,
        );
        return Ok(response.map(RateLimitBody::problem));
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
