//! `POST /v1/dashboard/peek`: "why was this refused?" — every limit that
//! applies to a request, with what it has left, without counting anything.
//!
//! The request is the body of `POST /v1/check` (rules-based or inline).
//! Each applying limit is asked with the store's peek (a check of cost 0,
//! which changes nothing) for its remaining and reset, and with
//! [`Store::next_available`] (which books nothing) for how long a request
//! of the body's `cost` (default 1) would wait. Nothing is counted in the
//! metrics either.

use serde::Serialize;
use tollgate_core::time::nanos_to_ms_ceil;
use tollgate_core::{Limit, LimitKey, Moment, Store, StoreError};
use tollgate_rules::check::{over_limit, Plan};

use crate::dashboard::{describe, Source};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::target::{cost, moment, Target};
use crate::wire::DecisionRequest;

/// The answer of the peek.
#[derive(Debug, Serialize)]
pub(crate) struct PeekBody {
    /// Whether a request of `cost` would be admitted now by every
    /// enforced limit (shadow-mode rules never refuse).
    allowed: bool,
    /// The cost the peek asked about.
    cost: u64,
    /// One entry per applying limit, in request order; a descriptor no
    /// rule matches has one entry with `matched: false`.
    limits: Vec<PeekLimit>,
}

#[derive(Debug, Serialize, Default)]
struct PeekLimit {
    /// The descriptor's index in the request; null for an inline limit.
    descriptor: Option<usize>,
    /// Whether a rule matched the descriptor (always for inline limits).
    matched: bool,
    /// The rule's path; null for an inline limit or no match.
    rule: Option<String>,
    /// The rule's name, or the limit's stable name.
    name: Option<String>,
    /// The limit in plain words.
    description: Option<String>,
    /// A shadow-mode rule: reported, never enforced.
    shadow: bool,
    /// An `unlimited` rule: nothing is counted.
    unlimited: bool,
    /// A quota rule (its own `quota_mode`, or the global quota mode): it
    /// refuses a request only when every quota rule applying to it does.
    quota: bool,
    /// The limit's maximum.
    limit: Option<u64>,
    /// Unit-cost requests still admitted now.
    remaining: Option<u64>,
    /// Until the limit is back to its untouched state.
    reset_after_ms: Option<u64>,
    /// How long a request of `cost` would wait now (0: it would pass);
    /// null when the limit cannot tell (concurrency leases).
    retry_after_ms: Option<u64>,
}

/// Peeks at every limit applying to `request`.
pub(crate) async fn peek<S: Store>(
    source: &Source<'_, S>,
    request: &DecisionRequest<'_>,
) -> Result<PeekBody, ApiError> {
    for (field, given) in [
        ("max_wait_ms", request.max_wait_ms.is_some()),
        ("lease", request.lease.is_some()),
    ] {
        if given {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("field \"{field}\" does not belong to a peek"),
            ));
        }
    }
    let settings = source.settings;
    let target = Target::of(request, settings)?;
    let at = moment(settings, request.at_ms)?;
    let cost = cost(request.cost);
    let now = match at {
        Moment::At(t) => t,
        Moment::Now => outage(source.metrics, source.store.now().await)?,
    };
    let at = Moment::At(now);
    let mut limits = Vec::new();
    match &target {
        Target::Inline { key, limit } => {
            let mut entry = ask(source, limit, key, at, now, cost).await?;
            entry.matched = true;
            entry.name = Some(limit.to_string());
            limits.push(entry);
        }
        Target::Rules {
            domain,
            descriptors,
        } => {
            let rules = &source.rules;
            let found = source
                .overrides
                .map(|table| table.find(domain, descriptors))
                .unwrap_or_default();
            let plan = Plan::resolve_with(rules, domain, descriptors, &found, settings.shadow)
                .map_err(|e| ApiError::bad_request("unknown_domain", e.to_string()))?
                .with_global_quota(settings.quota_mode);
            for (d, planned) in plan.descriptors().iter().enumerate() {
                let Some(planned) = planned else {
                    limits.push(PeekLimit {
                        descriptor: Some(d),
                        ..PeekLimit::default()
                    });
                    continue;
                };
                let rule = planned.rule();
                let named = |entry: PeekLimit, l: Option<usize>| PeekLimit {
                    descriptor: Some(d),
                    matched: true,
                    rule: Some(rule.id().to_owned()),
                    name: Some(rule.name().map_or_else(
                        || rule.limit_header_name(l.unwrap_or(0)).to_owned(),
                        ToOwned::to_owned,
                    )),
                    shadow: rule.shadow_mode() || plan.global_shadow(),
                    unlimited: rule.unlimited(),
                    quota: plan.is_quota(rule) && !rule.shadow_mode(),
                    ..entry
                };
                if rule.unlimited() || rule.limits().is_empty() {
                    let description = if rule.unlimited() {
                        "unlimited"
                    } else {
                        "refuses every request"
                    };
                    let refuses = !rule.unlimited();
                    limits.push(named(
                        PeekLimit {
                            description: Some(description.to_owned()),
                            limit: refuses.then_some(0),
                            remaining: refuses.then_some(0),
                            ..PeekLimit::default()
                        },
                        None,
                    ));
                    continue;
                }
                for (l, limit) in rule.limits().iter().enumerate() {
                    let entry = ask(source, limit, planned.key(), at, now, cost).await?;
                    limits.push(named(entry, Some(l)));
                }
            }
        }
    }
    // As a check combines verdicts: per descriptor, over when any of its
    // rule's limits would refuse; shadow rules never count, unlimited ones
    // are never over, and quota rules refuse only all together.
    let would_refuse = |l: &PeekLimit| match l.retry_after_ms {
        Some(wait) => wait > 0 || l.limit == Some(0),
        None => l.remaining.unwrap_or(0) < cost,
    };
    let mut verdicts: Vec<(Option<usize>, bool, bool)> = Vec::new();
    for l in limits.iter().filter(|l| l.matched && !l.shadow) {
        let over = !l.unlimited && would_refuse(l);
        match verdicts.last_mut() {
            Some(last) if l.descriptor.is_some() && last.0 == l.descriptor => last.1 |= over,
            _ => verdicts.push((l.descriptor, over, l.quota)),
        }
    }
    let allowed = !over_limit(verdicts.iter().map(|&(_, over, quota)| (over, quota)));
    Ok(PeekBody {
        allowed,
        cost,
        limits,
    })
}

/// One limit's state for `key` at `now`, counting nothing.
async fn ask<S: Store>(
    source: &Source<'_, S>,
    limit: &Limit,
    key: &[u8],
    at: Moment,
    now: u64,
    cost: u64,
) -> Result<PeekLimit, ApiError> {
    let algorithm = limit.build().map_err(ApiError::from)?;
    algorithm.validate_cost(cost).map_err(ApiError::from)?;
    let (store, metrics) = (source.store, source.metrics);
    let request = LimitKey { limit, key };
    let state = outage(metrics, store.check_one(request, at, 0).await)?;
    let retry_after_ms = if algorithm.takes_reservations() {
        let next = outage(metrics, store.next_available(request, at, cost).await)?;
        Some(nanos_to_ms_ceil(next.saturating_sub(now)))
    } else {
        None
    };
    Ok(PeekLimit {
        description: Some(describe(limit)),
        limit: Some(state.limit),
        remaining: Some(state.remaining),
        reset_after_ms: Some(nanos_to_ms_ceil(tollgate_core::time::duration_to_nanos(
            state.reset_after,
        ))),
        retry_after_ms,
        ..PeekLimit::default()
    })
}

/// Passes a store result on, counting an outage in `metrics` (as a
/// decision's would be).
fn outage<T>(metrics: &Metrics, result: Result<T, StoreError>) -> Result<T, ApiError> {
    result.map_err(|e| {
        if e.is_outage() {
            metrics.store_error();
            tracing::warn!(error = %e, "store operation failed");
        }
        ApiError::from(e)
    })
}
