//! [`RateLimitLayer`]: how the middleware is configured and put around a
//! service.

use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate_core::{Limit, Store};
use tollgate_rules::overrides::OverrideTable;
use tollgate_rules::{ResponseCost, RuleSet, StatusFilter};
use tower::Layer;

use crate::client_ip::TrustedProxies;
use crate::inline::{InlinePolicy, KeyExtractor};
use crate::observer::Observer;
use crate::service::{Policy, RateLimitService, Shared};
use crate::settings::Settings;
use crate::shaping::Shaping;

/// Rate-limits an HTTP service through a tollgate [`Store`]: by the
/// `routes:` and rules of a domain ([`RateLimitLayer::new`]), or by one
/// inline limit ([`RateLimitLayer::inline`]).
///
/// Cheap to clone; every service it makes shares the store, the rules
/// handle and the settings.
pub struct RateLimitLayer<St> {
    shared: Arc<Shared<St>>,
}

impl<St> Clone for RateLimitLayer<St> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<St> std::fmt::Debug for RateLimitLayer<St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("settings", &self.shared.settings)
            .field("trusted", &self.shared.trusted)
            .finish_non_exhaustive()
    }
}

impl<St: Store> RateLimitLayer<St> {
    /// Decides by the rules of `domain` in `rules`, a handle a reload may
    /// swap (each request uses the rules in force when it arrived). A
    /// request goes through the first of the domain's `routes:` that
    /// matches it, or, without `routes:`, through one route with the
    /// descriptor `[remote_address]`. Requests no route takes, and every
    /// request while `rules` has no such domain, go on unchecked.
    pub fn new(store: St, rules: Arc<ArcSwap<RuleSet>>, domain: impl Into<String>) -> Self {
        Self::with_policy(
            store,
            Policy::Rules {
                rules,
                domain: domain.into(),
            },
        )
    }

    /// [`RateLimitLayer::new`] with rules that never change.
    pub fn from_rules(store: St, rules: RuleSet, domain: impl Into<String>) -> Self {
        Self::new(store, Arc::new(ArcSwap::from_pointee(rules)), domain)
    }

    /// Decides every request by one `limit`, counted under the key `key`
    /// extracts (a request without one goes on unchecked). The headers
    /// name the limit by its `Display` form (`fixed_window_10_per_s`), as
    /// the decision service names inline limits.
    pub fn inline(store: St, limit: Limit, key: impl KeyExtractor) -> Self {
        Self::with_policy(
            store,
            Policy::Inline(Box::new(InlinePolicy::new(limit, Arc::new(key)))),
        )
    }

    fn with_policy(store: St, policy: Policy) -> Self {
        RateLimitLayer {
            shared: Arc::new(Shared {
                store: Arc::new(store),
                policy,
                trusted: TrustedProxies::none(),
                settings: Settings::default(),
                observer: None,
                overrides: None,
                settle_unsupported: Arc::default(),
            }),
        }
    }

    /// Replaces the settings.
    pub fn with_settings(mut self, settings: Settings) -> Self {
        Arc::make_mut(&mut self.shared).settings = settings;
        self
    }

    /// Honours forwarding headers from these proxies.
    pub fn with_trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        Arc::make_mut(&mut self.shared).trusted = trusted;
        self
    }

    /// Tells `observer` about every decision.
    pub fn with_observer(mut self, observer: impl Observer) -> Self {
        Arc::make_mut(&mut self.shared).observer = Some(Arc::new(observer));
        self
    }

    /// Decides by the runtime overrides in `overrides` too: an override
    /// takes precedence over the rules for its exact descriptor (see
    /// `tollgate_rules::overrides`), counted under its own key. The table
    /// is shared: whoever holds it (an admin API, a Redis sync) may change
    /// it while requests run, and each request reads it as it is when the
    /// request is decided. A check whose domain has no override costs one
    /// atomic load more than without a table. Inline limits ignore it.
    pub fn with_overrides(mut self, overrides: Arc<OverrideTable>) -> Self {
        Arc::make_mut(&mut self.shared).overrides = Some(overrides);
        self
    }

    /// Shaping for an inline `leaky_bucket` limit (rules-based routes carry
    /// their own `nodelay` and `delay`).
    pub fn with_shaping(mut self, shaping: Shaping) -> Self {
        if let Policy::Inline(inline) = &mut Arc::make_mut(&mut self.shared).policy {
            inline.shaping = shaping;
        }
        self
    }

    /// What a request of an inline limit costs: its estimate, and the
    /// response header or trailer holding its actual cost (as a route's
    /// `cost:` says for rules; see `docs/middleware.md`).
    pub fn with_response_cost(mut self, cost: ResponseCost) -> Self {
        if let Policy::Inline(inline) = &mut Arc::make_mut(&mut self.shared).policy {
            inline.cost = cost;
        }
        self
    }

    /// Counts a request of an inline limit only when its answer's status
    /// matches `filter`, refunding the others (a route's `count_if:`).
    pub fn with_count_if(mut self, filter: StatusFilter) -> Self {
        if let Policy::Inline(inline) = &mut Arc::make_mut(&mut self.shared).policy {
            inline.count_if = Some(filter);
        }
        self
    }

    /// The store.
    pub fn store(&self) -> &St {
        &self.shared.store
    }
}

impl<S, St> Layer<S> for RateLimitLayer<St> {
    type Service = RateLimitService<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService::new(inner, Arc::clone(&self.shared))
    }
}
