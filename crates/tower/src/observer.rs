//! [`Observer`]: a hook that hears every decision the middleware takes, so
//! a server can count metrics per rule or log, without this crate
//! depending on any metrics library.

use std::time::Duration;

use tollgate_core::{Decision, StoreError};
use tollgate_rules::check::{OneLimit, Outcome, PlainDecided};

use crate::cost::CostOutcome;

/// Hears the middleware's decisions. Every method has an empty default;
/// they run on the request's task, so they should be quick (count, don't
/// block).
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use tollgate_rules::check::Outcome;
/// use tollgate_tower::Observer;
///
/// /// Counts rejections per rule, the way a metrics registry would.
/// #[derive(Default)]
/// struct Rejections(AtomicU64);
///
/// impl Observer for Rejections {
///     fn rules_decided(&self, _domain: &str, _route: Option<&str>, outcome: &Outcome<'_>, _took: Duration) {
///         for d in outcome.descriptors.iter().flatten() {
///             if d.decided() && !d.decision.allowed && !d.shadow {
///                 self.0.fetch_add(1, Ordering::Relaxed);
///             }
///         }
///     }
/// }
/// ```
pub trait Observer: Send + Sync + 'static {
    /// A request was decided by the rules of `domain` under `route` (its
    /// name, when it has one). `outcome` holds each descriptor's rule,
    /// decision, shadow flag and metric label; `took` is the time the
    /// decision took, store included.
    fn rules_decided(
        &self,
        domain: &str,
        route: Option<&str>,
        outcome: &Outcome<'_>,
        took: Duration,
    ) {
        let _ = (domain, route, outcome, took);
    }

    /// A request was decided by the rules of `domain` under `route`
    /// through `one` limit (see [`OneLimit`]): `decision`, counted under
    /// `key`. The same as [`rules_decided`](Observer::rules_decided) with
    /// the outcome that stands for it ([`OneLimit::outcome`]), which is
    /// what the default does; an observer that counts per rule can read
    /// the rule and the decision here without that outcome's lists.
    fn one_limit_decided(
        &self,
        domain: &str,
        route: Option<&str>,
        one: &OneLimit<'_>,
        key: &[u8],
        decision: &Decision,
        took: Duration,
    ) {
        self.rules_decided(domain, route, &one.outcome(key.to_vec(), *decision), took);
    }

    /// A request was decided by the rules of `domain` under `route`
    /// through [`PlainRule`](tollgate_rules::check::PlainRule)s: each of
    /// its descriptors as `decided`, in order. The same as
    /// [`rules_decided`](Observer::rules_decided) with the outcome that
    /// stands for it ([`PlainDecided::outcome`]), which is what the default
    /// does; an observer that counts per rule can read each rule and
    /// decision here without that outcome's lists.
    fn plain_decided(
        &self,
        domain: &str,
        route: Option<&str>,
        decided: &[PlainDecided<'_, '_>],
        took: Duration,
    ) {
        self.rules_decided(domain, route, &PlainDecided::outcome(decided), took);
    }

    /// A request was decided by an inline limit named `name`; `shadow`
    /// when the global shadow switch is on (a rejection is reported, not
    /// enforced).
    fn inline_decided(&self, name: &str, decision: &Decision, shadow: bool, took: Duration) {
        let _ = (name, decision, shadow, took);
    }

    /// A request was refused because a descriptor of its route (`route`,
    /// by name when it has one, in `domain`) could not be built and the
    /// route says `on_missing: deny`.
    fn key_missing(&self, domain: &str, route: Option<&str>) {
        let _ = (domain, route);
    }

    /// The store failed: the request was answered `503` (for a check), or a
    /// lease is left to expire (for a release).
    fn store_failed(&self, error: &StoreError) {
        let _ = error;
    }

    /// A request's actual cost, read from its response (a route's `cost:`
    /// or `count_if:`), was settled, or could not be and the estimate
    /// stands: how it went. Heard once per settled request.
    fn cost_settled(&self, outcome: CostOutcome) {
        let _ = outcome;
    }
}

/// The observer that hears nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl Observer for NoObserver {}
