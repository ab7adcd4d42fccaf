//! The decision on one request: which route takes it, what descriptors it
//! makes, and what the store says — as a [`Step`] for the response future.
//!
//! This module owns the order of those steps and the observer calls; the
//! rules decision itself is `tollgate_rules::check`, shared with the
//! decision service.

use std::cell::OnceCell;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Instant;

use http::request::Parts;
use smallvec::SmallVec;
use tollgate_core::{AlgorithmName, LimitKey, Moment, Store, StoreError};
use tollgate_rules::check::{OneLimit, PlainDecided, PlainRule, Plan};
use tollgate_rules::overrides::Found;
use tollgate_rules::{Action, Descriptor, Domain, OnMissing, Route, RuleSet};

use crate::client_ip::client_ip_or;
use crate::cost::{ChargePlan, Counted};
use crate::descriptors::RequestView;
use crate::inline::{InlinePolicy, INLINE_KEY_PREFIX};
use crate::route;
use crate::ruling::Ruling;
use crate::service::Shared;
use crate::shaping::Shaping;

/// What happens to a request next.
// `Ruled` is by far the most common step: boxing it to even the sizes out
// would allocate on every decided request.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Step<'r> {
    /// No check applies (no route, a disabled route, no descriptor, an
    /// unknown domain): on to the inner service as it is.
    Forward,
    /// The store failed: `503`.
    Unavailable,
    /// A descriptor of a route with `on_missing: deny` could not be built:
    /// answered with this status, unchecked.
    KeyMissing {
        /// The answer's status.
        status: u16,
        /// The route's name, if it has one.
        route: Option<&'r str>,
    },
    /// Decided.
    Ruled(Ruling<'r>),
    /// Not decided, and nothing counted: a decision asked for at once
    /// (without the runtime overrides) found a route whose cost is
    /// settled from the response, which the response future decides.
    Later,
}

/// Decides a request by the rules of `domain` and the runtime overrides
/// of its descriptors, which are put in `found` (the caller keeps them as
/// long as the ruling, which may borrow their rules).
///
/// Without `found`, the decision is asked for at once (see
/// [`crate::future`]): the overrides are not looked up (the caller has
/// seen that there are none), and a route whose cost is settled from the
/// response is left to the response future ([`Step::Later`]).
pub(crate) async fn by_rules<'r, St: Store>(
    shared: &Shared<St>,
    rules: &'r RuleSet,
    found: Option<&'r mut Found>,
    domain_name: &str,
    parts: &Parts,
    peer: Option<SocketAddr>,
) -> Step<'r> {
    let Some(domain) = rules.domain(domain_name) else {
        return Step::Forward;
    };
    // The client address, found once if a route's match or descriptors
    // need it: matching uses the address itself, keys its network.
    let client = OnceCell::new();
    let client_address = || *client.get_or_init(|| client_ip_or(parts, peer, &shared.trusted));
    let Some(route) = route::select(domain, parts, client_address).filter(|r| r.enabled) else {
        return Step::Forward;
    };
    let shadow = shared.settings.shadow || route.shadow;
    let started = shared.observer.as_ref().map(|_| Instant::now());
    let charging = route.cost.settles() || route.count_if.is_some();
    if charging && found.is_none() {
        return Step::Later;
    }
    let needs_ip = route
        .descriptors
        .iter()
        .flatten()
        .any(|a| *a == Action::RemoteAddress);
    let view = RequestView {
        parts,
        // Keys hold the client's network, not its address.
        client_ip: needs_ip
            .then(client_address)
            .flatten()
            .map(|ip| shared.settings.address_grouping.group(ip)),
        max_value_bytes: shared.settings.max_value_bytes,
    };
    // The common case, one descriptor decided by one limit, without a
    // plan's lists; anything else (an override, shadow, a response cost, a
    // missing value) through the plan.
    let overrides = shared
        .overrides
        .as_ref()
        .filter(|t| found.is_some() && !t.is_empty());
    let plain = !shadow && !charging && overrides.is_none();
    if plain {
        let quota_mode = shared.settings.quota_mode;
        if let [actions] = route.descriptors.as_slice() {
            if let Some((one, key)) = one_limit(domain, &view, actions, quota_mode) {
                return by_one_limit(shared, domain_name, route, one, key, started).await;
            }
        }
        // Several descriptors, or limits, each by a plain rule: one store
        // call, its decisions summed without a plan's lists.
        let mut keys = Vec::with_capacity(KEY_CAPACITY);
        if let Some(found) = plain_rules(domain, &view, &route.descriptors, quota_mode, &mut keys) {
            return by_plain_rules(shared, domain_name, route, &found, &keys, started).await;
        }
    }
    let plan = {
        let built = view.descriptors(&route.descriptors);
        if built.missing && !shadow {
            if let OnMissing::Deny { status } = route.on_missing {
                if let Some(observer) = &shared.observer {
                    observer.key_missing(domain_name, route.name.as_deref());
                }
                return Step::KeyMissing {
                    status,
                    route: route.name.as_deref(),
                };
            }
        }
        if built.descriptors.is_empty() {
            return Step::Forward;
        }
        let found: &'r Found = match (overrides, found) {
            (Some(table), Some(found)) => {
                *found = table.find(domain_name, &built.descriptors);
                found
            }
            _ => &NO_OVERRIDES,
        };
        Plan::new_with(domain, &built.descriptors, found, shadow)
            .with_global_quota(shared.settings.quota_mode)
    };
    let admitted_at = admission(shared, charging).await;
    let estimate = route.cost.estimate;
    let outcome = match plan.check(&*shared.store, Moment::Now, estimate).await {
        Ok(outcome) => outcome,
        Err(error) => return unavailable(shared, &error),
    };
    let counted = (charging && outcome.allowed).then(|| Counted {
        limits: outcome
            .counted()
            .map(|(limit, key)| (*limit, key.to_vec()))
            .collect(),
        admitted_at,
        estimate,
    });
    if let (Some(observer), Some(started)) = (&shared.observer, started) {
        observer.rules_decided(
            domain_name,
            route.name.as_deref(),
            &outcome,
            started.elapsed(),
        );
    }
    let mut ruling = Ruling::of_rules(outcome, Shaping::of(route), shadow);
    ruling.charge = counted.filter(|c| !c.limits.is_empty()).map(|counted| {
        Box::new(ChargePlan {
            cost: &route.cost,
            count_if: route.count_if.as_ref(),
            counted,
        })
    });
    Step::Ruled(ruling)
}

/// What a decision without the runtime overrides finds.
static NO_OVERRIDES: Found = Found::EMPTY;

/// The one limit and store key of a request whose route makes one
/// descriptor, `actions`, when that descriptor's rule decides it by one
/// limit ([`OneLimit::find`]); `None`: decide through a plan.
fn one_limit<'r>(
    domain: &'r Domain,
    view: &RequestView<'_>,
    actions: &[Action],
    global_quota: bool,
) -> Option<(OneLimit<'r>, Vec<u8>)> {
    fn keyed<'r, D: Descriptor + ?Sized>(
        domain: &'r Domain,
        descriptor: &D,
        global_quota: bool,
    ) -> Option<(OneLimit<'r>, Vec<u8>)> {
        let one = OneLimit::find(domain, descriptor, false, global_quota)?;
        let mut key = Vec::with_capacity(KEY_CAPACITY);
        one.write_key(descriptor, &mut key);
        Some((one, key))
    }
    match actions {
        // One action, the most common descriptor: its entry on the stack.
        [action] => {
            let entry = [(action.descriptor_key(), view.value(action)?)];
            keyed(domain, &entry, global_quota)
        }
        _ => keyed(domain, &view.descriptor(actions).ok()??, global_quota),
    }
}

/// Room for most store keys (a rule path and a value or two) in one
/// allocation.
const KEY_CAPACITY: usize = 128;

/// Room on the stack for the plain rules of a request, and their limits.
const PLAIN: usize = 4;

/// A request's plain rules, each with where its store key is.
type PlainRules<'r> = SmallVec<[(PlainRule<'r>, Range<usize>); PLAIN]>;

/// A request's plain rules ([`PlainRule`]), one per descriptor of its
/// route, each with the range of `keys` its store key was written to;
/// `None` when a descriptor has no plain rule or a value is missing (or
/// skipped), or the route makes no descriptor: decide through a plan.
fn plain_rules<'r>(
    domain: &'r Domain,
    view: &RequestView<'_>,
    descriptors: &[Vec<Action>],
    global_quota: bool,
    keys: &mut Vec<u8>,
) -> Option<PlainRules<'r>> {
    fn keyed<'r, D: Descriptor + ?Sized>(
        domain: &'r Domain,
        descriptor: &D,
        global_quota: bool,
        keys: &mut Vec<u8>,
    ) -> Option<(PlainRule<'r>, Range<usize>)> {
        let plain = PlainRule::find(domain, descriptor, false, global_quota)?;
        let start = keys.len();
        plain.write_key(descriptor, keys);
        Some((plain, start..keys.len()))
    }
    if descriptors.is_empty() {
        return None;
    }
    descriptors
        .iter()
        .map(|actions| match actions.as_slice() {
            [action] => {
                let entry = [(action.descriptor_key(), view.value(action)?)];
                keyed(domain, &entry, global_quota, keys)
            }
            _ => keyed(domain, &view.descriptor(actions).ok()??, global_quota, keys),
        })
        .collect()
}

/// Decides a request by the one limit of its one descriptor, counted under
/// `key`: what [`by_rules`] decides through a plan, the same observer
/// call included.
async fn by_one_limit<'r, St: Store>(
    shared: &Shared<St>,
    domain_name: &str,
    route: &'r Route,
    one: OneLimit<'r>,
    key: Vec<u8>,
    started: Option<Instant>,
) -> Step<'r> {
    let request = LimitKey {
        limit: one.limit(),
        key: &key,
    };
    let decision = match shared
        .store
        .check_one(request, Moment::Now, route.cost.estimate)
        .await
    {
        Ok(decision) => decision,
        Err(error) => return unavailable(shared, &error),
    };
    if let (Some(observer), Some(started)) = (&shared.observer, started) {
        observer.one_limit_decided(
            domain_name,
            route.name.as_deref(),
            &one,
            &key,
            &decision,
            started.elapsed(),
        );
    }
    Step::Ruled(Ruling::of_one_limit(one, key, decision, Shaping::of(route)))
}

/// Decides a request by the plain rules `found` of its descriptors (their
/// store keys in `keys`): every limit of every rule in one store call,
/// all-or-nothing, and the decisions summed as a plan would
/// ([`PlainDecided`]), the same observer call included.
async fn by_plain_rules<'r, St: Store>(
    shared: &Shared<St>,
    domain_name: &str,
    route: &'r Route,
    found: &[(PlainRule<'r>, Range<usize>)],
    keys: &[u8],
    started: Option<Instant>,
) -> Step<'r> {
    let key_of = |range: &Range<usize>| keys.get(range.clone()).unwrap_or_default();
    let requests: SmallVec<[LimitKey<'_>; PLAIN]> = found
        .iter()
        .flat_map(|(plain, range)| {
            let key = key_of(range);
            plain
                .rule
                .limits()
                .iter()
                .map(move |limit| LimitKey { limit, key })
        })
        .collect();
    let decisions = match shared
        .store
        .check(&requests, Moment::Now, route.cost.estimate)
        .await
    {
        Ok(decisions) if decisions.len() == requests.len() => decisions,
        Ok(decisions) => {
            let error = StoreError::Unavailable(format!(
                "the store answered {} decisions for {} limits",
                decisions.len(),
                requests.len()
            ));
            return unavailable(shared, &error);
        }
        Err(error) => return unavailable(shared, &error),
    };
    let mut decided: SmallVec<[PlainDecided<'_, 'r>; PLAIN]> = SmallVec::new();
    let mut at = 0;
    for (plain, range) in found {
        let limits = plain.rule.limits().len();
        let of_rule = decisions.get(at..at + limits).unwrap_or_default();
        decided.push(PlainDecided::new(plain.rule, key_of(range), of_rule));
        at += limits;
    }
    if let (Some(observer), Some(started)) = (&shared.observer, started) {
        observer.plain_decided(
            domain_name,
            route.name.as_deref(),
            &decided,
            started.elapsed(),
        );
    }
    Step::Ruled(Ruling::of_plain(&decided, Shaping::of(route)))
}

/// The store's time just before a check whose cost may be settled (so at
/// or before the admission's instant); `None` when nothing will be
/// settled, or the store cannot tell.
async fn admission<St: Store>(shared: &Shared<St>, charging: bool) -> Option<u64> {
    if !charging || !shared.settles() {
        return None;
    }
    shared.store.now().await.ok()
}

/// Decides a request by an inline limit.
pub(crate) async fn by_inline<'r, St: Store>(
    shared: &Shared<St>,
    inline: &'r InlinePolicy,
    parts: &Parts,
    peer: Option<SocketAddr>,
) -> Step<'r> {
    let started = shared.observer.as_ref().map(|_| Instant::now());
    let mut key = Vec::with_capacity(64);
    key.push(INLINE_KEY_PREFIX);
    let grouped = client_ip_or(parts, peer, &shared.trusted)
        .map(|ip| shared.settings.address_grouping.group(ip));
    if !inline.key.extract(parts, grouped, &mut key) {
        return Step::Forward;
    }
    let request = LimitKey {
        limit: &inline.limit,
        key: &key,
    };
    let charging = inline.cost.settles() || inline.count_if.is_some();
    let admitted_at = admission(shared, charging).await;
    let estimate = inline.cost.estimate;
    let decision = match shared.store.check_one(request, Moment::Now, estimate).await {
        Ok(decision) => decision,
        Err(error) => return unavailable(shared, &error),
    };
    let counts = decision.allowed
        && !decision.degraded
        && inline.limit.algorithm != AlgorithmName::Concurrency;
    let charge = (charging && counts).then(|| {
        Box::new(ChargePlan {
            cost: &inline.cost,
            count_if: inline.count_if.as_ref(),
            counted: Counted {
                limits: vec![(inline.limit, key.clone())],
                admitted_at,
                estimate,
            },
        })
    });
    let shadow = shared.settings.shadow;
    if let (Some(observer), Some(started)) = (&shared.observer, started) {
        observer.inline_decided(&inline.name, &decision, shadow, started.elapsed());
    }
    let mut ruling = Ruling::of_inline(
        &inline.limit,
        &inline.name,
        key,
        decision,
        inline.shaping,
        shadow,
    );
    ruling.charge = charge;
    Step::Ruled(ruling)
}

/// `Step::Unavailable`, the store's `error` reported.
pub(crate) fn unavailable<St>(
    shared: &Shared<St>,
    error: &tollgate_core::StoreError,
) -> Step<'static> {
    if let Some(observer) = &shared.observer {
        observer.store_failed(error);
    }
    Step::Unavailable
}
