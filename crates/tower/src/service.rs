//! [`RateLimitService`]: the service [`RateLimitLayer`](crate::RateLimitLayer)
//! wraps around an HTTP service, and the state its requests share.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use http::{Request, Response};
use tollgate_core::{LimitKey, Moment, Store, StoreError};
use tollgate_rules::overrides::OverrideTable;
use tollgate_rules::RuleSet;
use tower::Service;

use crate::body::RateLimitBody;
use crate::client_ip::TrustedProxies;
use crate::cost::{CostOutcome, Counted, Settler, Settling};
use crate::future::{at_once, respond, ResponseFuture};
use crate::inline::InlinePolicy;
use crate::lease::{Lease, Releaser, Releasing};
use crate::observer::Observer;
use crate::settings::Settings;

/// What decides: the rules of a domain (swappable by a reload), or one
/// inline limit.
#[derive(Clone)]
pub(crate) enum Policy {
    Rules {
        rules: Arc<ArcSwap<RuleSet>>,
        domain: String,
    },
    Inline(Box<InlinePolicy>),
}

/// Everything a request needs besides the inner service; one `Arc` clone
/// per request.
pub(crate) struct Shared<St> {
    pub(crate) store: Arc<St>,
    pub(crate) policy: Policy,
    pub(crate) trusted: TrustedProxies,
    pub(crate) settings: Settings,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    /// Runtime overrides, when the layer was given a table: they take
    /// precedence over the rules for their exact descriptors.
    pub(crate) overrides: Option<Arc<OverrideTable>>,
    /// Set once the store has answered that it does not settle: later
    /// requests neither ask it nor read its clock for settling.
    pub(crate) settle_unsupported: Arc<AtomicBool>,
}

impl<St> Clone for Shared<St> {
    fn clone(&self) -> Self {
        Shared {
            store: Arc::clone(&self.store),
            policy: self.policy.clone(),
            trusted: self.trusted.clone(),
            settings: self.settings,
            observer: self.observer.clone(),
            overrides: self.overrides.clone(),
            settle_unsupported: Arc::clone(&self.settle_unsupported),
        }
    }
}

impl<St> Shared<St> {
    /// Whether a request's cost can be settled through the store (as far
    /// as is known).
    pub(crate) fn settles(&self) -> bool {
        !self.settle_unsupported.load(Ordering::Relaxed)
    }
}

impl<St: Store> Settler for Shared<St> {
    fn settle(self: Arc<Self>, counted: Counted, actual: u64, outcome: CostOutcome) -> Settling {
        Box::pin(async move {
            let outcome = self.settle_counted(&counted, actual, outcome).await;
            self.report(outcome);
        })
    }

    fn report(&self, outcome: CostOutcome) {
        if let Some(observer) = &self.observer {
            observer.cost_settled(outcome);
        }
    }
}

impl<St: Store> Shared<St> {
    /// Settles every counted limit; `outcome` when the store took them.
    async fn settle_counted(
        &self,
        counted: &Counted,
        actual: u64,
        outcome: CostOutcome,
    ) -> CostOutcome {
        if !self.settles() {
            return CostOutcome::Unsupported;
        }
        let Some(admitted_at) = counted.admitted_at else {
            return CostOutcome::Failed;
        };
        let mut result = outcome;
        for (limit, key) in &counted.limits {
            let request = LimitKey { limit, key };
            match self
                .store
                .settle(request, admitted_at, Moment::Now, counted.estimate, actual)
                .await
            {
                Ok(_) => {}
                Err(StoreError::Unsupported(_)) => {
                    self.settle_unsupported.store(true, Ordering::Relaxed);
                    return CostOutcome::Unsupported;
                }
                Err(error) => {
                    if let Some(observer) = &self.observer {
                        observer.store_failed(&error);
                    }
                    result = CostOutcome::Failed;
                }
            }
        }
        result
    }
}

impl<St: Store> Releaser for Shared<St> {
    fn release(self: Arc<Self>, leases: Vec<Lease>) -> Releasing {
        Box::pin(async move {
            for lease in &leases {
                let key = LimitKey {
                    limit: &lease.limit,
                    key: &lease.key,
                };
                if let Err(error) = self.store.release(key, lease.id).await {
                    if let Some(observer) = &self.observer {
                        observer.store_failed(&error);
                    }
                }
            }
        })
    }
}

/// Rate-limits the requests of an HTTP service: each request is decided
/// before the inner service sees it; rejected ones are answered `429`
/// here, admitted ones go on (held first when a `leaky_bucket` limit
/// shapes them), and their responses carry the rate-limit headers.
pub struct RateLimitService<S, St> {
    inner: S,
    shared: Arc<Shared<St>>,
    /// The address of the connection this service serves, if it was made
    /// for one.
    peer: Option<SocketAddr>,
}

impl<S, St> RateLimitService<S, St> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<St>>) -> Self {
        RateLimitService {
            inner,
            shared,
            peer: None,
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The same limits (store, rules, settings, observer) around `inner`:
    /// for a server that makes a service per connection.
    pub fn with_inner<T>(&self, inner: T) -> RateLimitService<T, St> {
        RateLimitService {
            inner,
            shared: Arc::clone(&self.shared),
            peer: self.peer,
        }
    }

    /// This service for the connection from `peer`: its requests' client
    /// address is `peer` (or, when `peer` is a trusted proxy, read from
    /// the forwarding header) when they carry no [`PeerAddr`](crate::PeerAddr)
    /// of their own. A server that makes a service per connection tells
    /// it the address once, rather than in every request's extensions.
    pub fn with_peer(mut self, peer: SocketAddr) -> Self {
        self.peer = Some(peer);
        self
    }
}

impl<S: Clone, St> Clone for RateLimitService<S, St> {
    fn clone(&self) -> Self {
        RateLimitService {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
            peer: self.peer,
        }
    }
}

impl<S: std::fmt::Debug, St> std::fmt::Debug for RateLimitService<S, St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl<S, St, B, R> Service<Request<B>> for RateLimitService<S, St>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    B: Send + 'static,
    R: Send + 'static,
    St: Store,
{
    type Response = Response<RateLimitBody<R>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, R, S::Error>;

    /// Always ready: a request may be held (shaping) or answered here
    /// before it reaches the inner service, so the inner service's
    /// readiness is awaited when the request goes on, not reserved now.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        Poll::Ready(Ok(()))
    }

    /// Decides the request now when it can (see [`ResponseFuture`]).
    fn call(&mut self, request: Request<B>) -> Self::Future {
        let shared = &self.shared;
        if let Policy::Rules { rules, domain } = &shared.policy {
            if shared.store.answers_at_once()
                && shared.overrides.as_ref().is_none_or(|t| t.is_empty())
            {
                let loaded = rules.load_full();
                return at_once(shared, &mut self.inner, self.peer, loaded, domain, request);
            }
        }
        ResponseFuture::boxed(respond(
            Arc::clone(&self.shared),
            self.inner.clone(),
            self.peer,
            request,
        ))
    }
}
