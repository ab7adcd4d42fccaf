//! Decisions, independent of the transport: a validated [`Target`] goes to
//! the store and comes back as an [`Answer`] (body, applied limits, verdict)
//! with every rule's metrics counted.
//!
//! # Rules-based requests
//!
//! Each descriptor is resolved against the domain's rules (`replaces`
//! applied across the request). The limits of every enforced rule — not in
//! shadow mode — are checked together, all-or-nothing: the request is
//! admitted only when all admit, and a rejection counts nothing anywhere.
//! Each shadow-mode rule is checked on its own, so its verdict is reported
//! and counted but never blocks the request or the other rules. With the
//! global shadow switch every rejection is reported and none enforced.
//! `unlimited` rules are never counted; a rule with `requests_per_unit: 0`
//! rejects every request. That decision is `tollgate_rules::check`, shared
//! with the gateway and the tower middleware; this module turns its outcome
//! into the JSON answer and counts it in the metrics. Reservations keep
//! their own code here.

use std::cell::RefCell;
use std::time::Duration;

use tollgate_core::algorithm::Settled;
use tollgate_core::policy::QuotaPolicy;
use tollgate_core::time::nanos_to_ms_ceil;
use tollgate_core::{AlgorithmName, Decision, Limit, LimitKey, Moment, Store, StoreError};
use tollgate_rules::check::{denied, limit_name, DescriptorOutcome, Outcome, Plan};
use tollgate_rules::overrides::{Found, OverrideTable};
use tollgate_rules::{Rule, RuleSet};

use crate::answer::{Answer, Applied};
use crate::app::App;
use crate::error::ApiError;
use crate::headers::AppliedLimit;
use crate::metrics::Verdict;
use crate::settings::Settings;
use crate::target::Target;
use crate::tickets::{Charged, Ticket, TicketId};
use crate::wire::{
    DecisionBody, DecisionFields, ReleasedBody, SettleBody, SettledLimit, StatusBody,
};

/// Checks `target` at `at` for `cost`, counting it when admitted.
pub async fn check<S: Store>(
    app: &App<S>,
    target: &Target,
    at: Moment,
    cost: u64,
) -> Result<Answer<DecisionBody>, ApiError> {
    match target {
        Target::Inline { key, limit } => check_inline(app, key, limit, at, cost, None).await,
        Target::Rules {
            domain,
            descriptors,
        } => check_rules(app, domain, descriptors, at, cost, None).await,
    }
}

/// Checks `target` at `at` for an estimated `cost` to be settled later:
/// when admitted, the answer carries a ticket naming every limit that
/// counted the estimate (none when no limit counted it, or when the
/// failure policy decided: the shared store then never counted it).
///
/// Refused before anything is counted: a cost of 0 (a peek counts
/// nothing to settle), an inline `concurrency` limit (a lease is
/// released, not settled), a store that cannot settle, and a full ticket
/// table. The check is decided at an explicit instant (the store's time
/// when `at` is now), the ticket's admission instant.
pub async fn check_to_settle<S: Store>(
    app: &App<S>,
    target: &Target,
    at: Moment,
    cost: u64,
) -> Result<Answer<DecisionBody>, ApiError> {
    if cost == 0 {
        return Err(ApiError::bad_request(
            "invalid_request",
            "\"settle\" needs an estimated cost of at least 1: a cost of 0 counts nothing",
        ));
    }
    if let Target::Inline { limit, .. } = target {
        if limit.algorithm == AlgorithmName::Concurrency {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("limit {limit} is a concurrency limit: a lease is released, not settled"),
            ));
        }
    }
    if !app.store().settles() {
        return Err(ApiError::from(StoreError::Unsupported("settle")));
    }
    let now = match at {
        Moment::At(now) => now,
        Moment::Now => store(app, app.store().now().await)?,
    };
    let place = app
        .tickets()
        .reserve(now)
        .map_err(|full| ApiError::tickets_full(full, app.tickets().ttl()))?;
    let mut charged = Vec::new();
    let at = Moment::At(now);
    let mut answer = match target {
        Target::Inline { key, limit } => {
            check_inline(app, key, limit, at, cost, Some(&mut charged)).await?
        }
        Target::Rules {
            domain,
            descriptors,
        } => check_rules(app, domain, descriptors, at, cost, Some(&mut charged)).await?,
    };
    if !answer.rejected && !charged.is_empty() {
        let id = place.issue(Ticket {
            admitted_at: now,
            estimate: cost,
            limits: charged,
        });
        answer.body.ticket = Some(id.to_string());
    }
    Ok(answer)
}

/// Settles the ticket `id` with the `actual` cost at `at`: the difference
/// charged or refunded in every limit its check counted, each in one
/// atomic step of the store. A ticket is settled once; when the store
/// fails part way, what is left stays open to be retried.
pub async fn settle<S: Store>(
    app: &App<S>,
    id: TicketId,
    at: Moment,
    actual: u64,
) -> Result<SettleBody, ApiError> {
    let now = match at {
        Moment::At(now) => now,
        Moment::Now => store(app, app.store().now().await)?,
    };
    let ticket = app
        .tickets()
        .take(id, now)
        .map_err(|refusal| ApiError::ticket_refused(refusal, id, app.tickets().ttl()))?;
    let mut settled = Vec::with_capacity(ticket.limits.len());
    for (i, charged) in ticket.limits.iter().enumerate() {
        let request = LimitKey {
            limit: &charged.limit,
            key: &charged.key,
        };
        let done = app
            .store()
            .settle(
                request,
                ticket.admitted_at,
                Moment::At(now),
                ticket.estimate,
                actual,
            )
            .await;
        match done {
            Ok(outcome) => settled.push(SettledLimit {
                name: charged.name.clone(),
                outcome: settle_outcome(outcome),
            }),
            Err(e) => {
                let left = Ticket {
                    limits: ticket.limits[i..].to_vec(),
                    ..ticket.clone()
                };
                app.tickets().reopen(id, left);
                return Err(store_error(app, e));
            }
        }
    }
    Ok(SettleBody {
        estimate: ticket.estimate,
        cost: actual,
        settled,
    })
}

fn settle_outcome(settled: Settled) -> &'static str {
    match settled {
        Settled::Exact => "exact",
        Settled::Charged => "charged",
        Settled::Refunded { dropped: false } => "refunded",
        Settled::Refunded { dropped: true } => "refund_dropped",
    }
}

/// Books the earliest slot for `cost` within `max_wait`.
pub async fn reserve<S: Store>(
    app: &App<S>,
    target: &Target,
    at: Moment,
    cost: u64,
    max_wait: Option<Duration>,
) -> Result<Answer<DecisionBody>, ApiError> {
    match target {
        Target::Inline { key, limit } => {
            let names = [limit.to_string()];
            let limits = [(limit, key.as_slice())];
            let answer = reserve_limits(app, &limits, &names, at, cost, max_wait, None).await?;
            count_reservation(app, "", "inline", None, key, &answer);
            Ok(answer)
        }
        Target::Rules {
            domain,
            descriptors,
        } => {
            let rules = app.rules();
            let found = app.overrides().find(domain, descriptors);
            let plan = resolve(&rules, &found, domain, descriptors, app.settings())?;
            let enforced = plan.enforced();
            let limits: Vec<(&Limit, &[u8])> = enforced
                .iter()
                .map(|&(_, _, limit, key)| (limit, key))
                .collect();
            let names: Vec<String> = enforced
                .iter()
                .filter_map(|&(d, l, _, _)| {
                    Some(plan.descriptors()[d].as_ref()?.limit_name(l).into_owned())
                })
                .collect();
            let denied = plan.denying_rule();
            let answer = reserve_limits(app, &limits, &names, at, cost, max_wait, denied).await?;
            for p in plan.descriptors().iter().flatten() {
                let rule = p.rule();
                if (p.counts() && !rule.shadow_mode()) || rule.denies_all() {
                    count_reservation(app, domain, rule.id(), p.detailed_label(), p.key(), &answer);
                }
            }
            Ok(answer)
        }
    }
}

/// Counts a reservation in a rule's metrics: allowed when booked, rejected
/// when refused (and then `key` among the rule's top offenders).
fn count_reservation<S: Store>(
    app: &App<S>,
    domain: &str,
    rule: &str,
    detailed: Option<&str>,
    key: &[u8],
    answer: &Answer<DecisionBody>,
) {
    let decision = answer.top.unwrap_or_default();
    let verdict = if answer.rejected {
        Verdict::Rejected
    } else {
        Verdict::Allowed
    };
    app.metrics()
        .count(domain, rule, detailed, &decision, verdict);
    if answer.rejected {
        app.metrics().count_refusal(domain, rule, key);
    }
}

/// Ends a `concurrency` lease held under `target`.
pub async fn release<S: Store>(
    app: &App<S>,
    target: &Target,
    lease: u64,
) -> Result<ReleasedBody, ApiError> {
    let mut released = false;
    match target {
        Target::Inline { key, limit } => {
            if limit.algorithm != AlgorithmName::Concurrency {
                return Err(ApiError::bad_request(
                    "not_a_lease",
                    format!("limit {limit} is not a concurrency limit; only leases are released"),
                ));
            }
            released = store(
                app,
                app.store().release(LimitKey { limit, key }, lease).await,
            )?;
        }
        Target::Rules {
            domain,
            descriptors,
        } => {
            let rules = app.rules();
            let found = app.overrides().find(domain, descriptors);
            let plan = resolve(&rules, &found, domain, descriptors, app.settings())?;
            for p in plan.descriptors().iter().flatten() {
                for limit in p.rule().limits() {
                    if limit.algorithm == AlgorithmName::Concurrency {
                        let done = app
                            .store()
                            .release(
                                LimitKey {
                                    limit,
                                    key: p.key(),
                                },
                                lease,
                            )
                            .await;
                        released |= store(app, done)?;
                    }
                }
            }
        }
    }
    Ok(ReleasedBody { released })
}

/// Passes a store result on, counting an outage.
pub fn store<S: Store, T>(app: &App<S>, result: Result<T, StoreError>) -> Result<T, ApiError> {
    result.map_err(|e| store_error(app, e))
}

/// A store error as answered, an outage counted.
fn store_error<S: Store>(app: &App<S>, e: StoreError) -> ApiError {
    if e.is_outage() {
        app.metrics().store_error();
        tracing::warn!(error = %e, "store operation failed");
    }
    ApiError::from(e)
}

/// One inline limit's check; with `charged`, the limit goes there when
/// the check counted `cost` in it (for a settle ticket).
async fn check_inline<S: Store>(
    app: &App<S>,
    key: &[u8],
    limit: &Limit,
    at: Moment,
    cost: u64,
    charged: Option<&mut Vec<Charged>>,
) -> Result<Answer<DecisionBody>, ApiError> {
    let decision = store(
        app,
        app.store()
            .check_one(LimitKey { limit, key }, at, cost)
            .await,
    )?;
    if let Some(charged) = charged {
        if decision.allowed && !decision.degraded {
            charged.push(Charged {
                name: inline_name(limit),
                limit: *limit,
                key: key.to_vec(),
            });
        }
    }
    let shadow = app.settings().shadow;
    let verdict = Verdict::of(&decision, shadow);
    app.metrics().count_inline(&decision, verdict);
    if !decision.allowed {
        app.metrics().count_refusal("", "inline", key);
    }
    let mut fields = DecisionFields::of(&decision);
    fields.allowed |= shadow;
    Ok(Answer {
        body: DecisionBody {
            fields,
            wait_ms: None,
            statuses: None,
            shadow_rejected: verdict == Verdict::ShadowRejected,
            ticket: None,
        },
        applied: Applied::Inline(*limit),
        top: Some(decision),
        rejected: verdict == Verdict::Rejected,
        headers: app.settings().headers,
    })
}

/// The header name of an inline limit: its `Display` form (e.g.
/// `gcra_1000000_per_s`), formatted once per limit and thread and then
/// copied. Clients send the same few limits over and over, and formatting
/// cost more than the rest of the headers.
pub fn inline_name(limit: &Limit) -> String {
    with_inline_header(limit, |name, _| name.to_owned())
}

/// Calls `f` with `limit`'s decision as the headers describe it: its name
/// ([`inline_name`]) and its policy, the thread's kept ones lent rather
/// than copied.
pub fn with_inline_applied<R>(
    limit: &Limit,
    decision: Decision,
    f: impl FnOnce(&AppliedLimit<'_>) -> R,
) -> R {
    with_inline_header(limit, |name, policy| {
        f(&AppliedLimit {
            name: name.into(),
            policy,
            decision,
        })
    })
}

/// Calls `f` with what the headers say of an inline limit, its name and
/// its `RateLimit-Policy` quota: worked out once per limit and thread (the
/// policy of a bucket or a sliding window takes divisions) and lent after.
fn with_inline_header<R>(limit: &Limit, f: impl FnOnce(&str, QuotaPolicy) -> R) -> R {
    /// Limits kept per thread: a client's few limits, without a lock.
    const KEPT: usize = 8;
    /// A limit, its name and its policy.
    type Kept = (Limit, String, QuotaPolicy);
    thread_local! {
        static NAMES: RefCell<(usize, Vec<Kept>)> = const { RefCell::new((0, Vec::new())) };
    }
    NAMES.with(|names| {
        let Ok(mut names) = names.try_borrow_mut() else {
            return f(&limit.to_string(), limit.policy());
        };
        let (next, kept) = &mut *names;
        let i = match kept.iter().position(|(l, _, _)| l == limit) {
            Some(i) => i,
            None => {
                let made = (*limit, limit.to_string(), limit.policy());
                if kept.len() < KEPT {
                    kept.push(made);
                    kept.len() - 1
                } else {
                    let i = *next;
                    kept[i] = made;
                    *next = (i + 1) % KEPT;
                    i
                }
            }
        };
        let (_, name, policy) = &kept[i];
        f(name, *policy)
    })
}

/// Resolves `descriptors` against `domain`, a descriptor with a runtime
/// override (`found`) taking it; an unknown domain is a bad request here.
fn resolve<'r>(
    rules: &'r RuleSet,
    found: &'r Found,
    domain: &str,
    descriptors: &[Vec<(String, String)>],
    settings: &Settings,
) -> Result<Plan<'r>, ApiError> {
    Plan::resolve_with(rules, domain, descriptors, found, settings.shadow)
        .map(|plan| plan.with_global_quota(settings.quota_mode))
        .map_err(|e| ApiError::bad_request("unknown_domain", e.to_string()))
}

/// No runtime override: what the plan built ahead of them borrows.
static NO_OVERRIDES: Found = Found::EMPTY;

/// [`resolve`] with `descriptors`' runtime overrides, found into `found`.
/// The plan the rules files give is built while the overrides' filter
/// words are fetched ([`OverrideTable::find_while`]): it stands when no
/// descriptor has an override (the common request); otherwise it is
/// built again with them.
fn resolve_overridden<'r>(
    rules: &'r RuleSet,
    overrides: &OverrideTable,
    found: &'r mut Found,
    domain: &str,
    descriptors: &[Vec<(String, String)>],
    settings: &Settings,
) -> Result<Plan<'r>, ApiError> {
    let from_rules;
    (*found, from_rules) = overrides.find_while(domain, descriptors, || {
        resolve(rules, &NO_OVERRIDES, domain, descriptors, settings)
    });
    match from_rules {
        Ok(plan) if found.is_empty() => Ok(plan),
        _ => resolve(rules, found, domain, descriptors, settings),
    }
}

/// A rules-based check; with `charged`, every limit the check counted
/// `cost` in goes there (for a settle ticket).
async fn check_rules<S: Store>(
    app: &App<S>,
    domain: &str,
    descriptors: &[Vec<(String, String)>],
    at: Moment,
    cost: u64,
    charged: Option<&mut Vec<Charged>>,
) -> Result<Answer<DecisionBody>, ApiError> {
    let rules = app.rules();
    let mut found = Found::EMPTY;
    let plan = resolve_overridden(
        &rules,
        app.overrides(),
        &mut found,
        domain,
        descriptors,
        app.settings(),
    )?;
    let outcome = store(app, plan.check(app.store(), at, cost).await)?;
    if let Some(charged) = charged {
        charged_limits(&outcome, charged);
    }

    let mut statuses = Vec::with_capacity(outcome.descriptors.len());
    for d in &outcome.descriptors {
        let Some(d) = d else {
            statuses.push(StatusBody {
                name: None,
                fields: DecisionFields::unlimited(),
                shadow: false,
                unlimited: false,
            });
            continue;
        };
        let rule = d.rule;
        let name = rule.name().unwrap_or(rule.id()).to_owned();
        if rule.unlimited() {
            statuses.push(StatusBody {
                name: Some(name),
                fields: DecisionFields::unlimited(),
                shadow: rule.shadow_mode(),
                unlimited: true,
            });
            continue;
        }
        let verdict = Verdict::of(&d.decision, d.shadow);
        app.metrics().count(
            domain,
            rule.id(),
            d.detailed.as_deref(),
            &d.decision,
            verdict,
        );
        if !d.decision.allowed {
            app.metrics().count_refusal(domain, rule.id(), &d.key);
        }
        let mut fields = DecisionFields::of(&d.decision);
        fields.lease = d.decisions.iter().find_map(|x| x.lease);
        statuses.push(StatusBody {
            name: Some(name),
            fields,
            shadow: d.shadow,
            unlimited: false,
        });
    }
    let applied = outcome
        .applied()
        .into_iter()
        .map(AppliedLimit::into_owned)
        .collect();
    let top = outcome.top;
    let mut fields = top
        .as_ref()
        .map_or_else(DecisionFields::unlimited, DecisionFields::of);
    fields.allowed = outcome.allowed;
    if outcome.allowed {
        fields.retry_after_ms = 0;
    }
    fields.lease = None;
    Ok(Answer {
        body: DecisionBody {
            fields,
            wait_ms: None,
            statuses: Some(statuses),
            shadow_rejected: outcome.shadow_rejected,
            ticket: None,
        },
        applied: Applied::Limits(applied),
        top,
        rejected: !outcome.allowed,
        headers: app.settings().headers,
    })
}

/// The limits a rules check counted its cost in (`Plan::check`'s
/// grouping): the ordinary enforced rules' limits when the group admitted
/// the request and no deny-all rule stopped it, and each shadow or quota
/// rule's limits when that rule admitted it. `concurrency` limits are left
/// out (their lease is released, not settled), and so is everything when
/// the failure policy decided any of it.
fn charged_limits(outcome: &Outcome<'_>, out: &mut Vec<Charged>) {
    let decided: Vec<&DescriptorOutcome<'_>> = outcome.descriptors.iter().flatten().collect();
    if decided
        .iter()
        .any(|d| d.decisions.iter().any(|x| x.degraded))
    {
        return;
    }
    let grouped = |d: &DescriptorOutcome<'_>| !d.rule.shadow_mode() && !d.quota;
    let counts = |d: &DescriptorOutcome<'_>| !d.rule.unlimited() && !d.rule.denies_all();
    let admitted = |d: &DescriptorOutcome<'_>| d.decisions.iter().all(|x| x.allowed);
    let group_denied = decided.iter().any(|d| d.rule.denies_all() && grouped(d));
    let group_admitted = !group_denied
        && decided
            .iter()
            .filter(|d| counts(d) && grouped(d))
            .all(|d| admitted(d));
    for d in decided.into_iter().filter(|d| counts(d)) {
        let counted = if grouped(d) {
            group_admitted
        } else {
            admitted(d)
        };
        if !counted {
            continue;
        }
        for (l, limit) in d.rule.limits().iter().enumerate() {
            if limit.algorithm != AlgorithmName::Concurrency {
                out.push(Charged {
                    name: limit_name(d.rule, l).into_owned(),
                    limit: *limit,
                    key: d.key.clone(),
                });
            }
        }
    }
}

/// Reserves `limits` together (names for the headers), or refuses when a
/// rule denies everything.
async fn reserve_limits<S: Store>(
    app: &App<S>,
    limits: &[(&Limit, &[u8])],
    names: &[String],
    at: Moment,
    cost: u64,
    max_wait: Option<Duration>,
    denied_by: Option<&Rule>,
) -> Result<Answer<DecisionBody>, ApiError> {
    let requests: Vec<LimitKey<'_>> = limits
        .iter()
        .map(|&(limit, key)| LimitKey { limit, key })
        .collect();
    if let Some(rule) = denied_by {
        let decision = denied(rule);
        let mut fields = DecisionFields::of(&decision);
        fields.allowed = false;
        return Ok(Answer {
            body: DecisionBody {
                fields,
                wait_ms: None,
                statuses: None,
                shadow_rejected: false,
                ticket: None,
            },
            applied: Applied::Limits(Vec::new()),
            top: Some(decision),
            rejected: true,
            headers: app.settings().headers,
        });
    }
    if requests.is_empty() {
        return Ok(Answer {
            body: DecisionBody {
                fields: DecisionFields::unlimited(),
                wait_ms: Some(0),
                statuses: None,
                shadow_rejected: false,
                ticket: None,
            },
            applied: Applied::Limits(Vec::new()),
            top: None,
            rejected: false,
            headers: app.settings().headers,
        });
    }
    let booking = store(
        app,
        app.store().reserve(&requests, at, cost, max_wait).await,
    )?;
    let top = booking
        .decisions
        .iter()
        .copied()
        .reduce(Decision::most_constrained)
        .unwrap_or_default();
    let mut fields = DecisionFields::of(&top);
    fields.allowed = booking.booked;
    fields.retry_after_ms =
        nanos_to_ms_ceil(tollgate_core::time::duration_to_nanos(booking.retry_after));
    let applied = limits
        .iter()
        .zip(names)
        .zip(&booking.decisions)
        .map(|((&(limit, _), name), decision)| AppliedLimit::of(name.clone(), limit, *decision))
        .collect();
    let mut top_for_headers = top;
    top_for_headers.retry_after = booking.retry_after;
    Ok(Answer {
        body: DecisionBody {
            fields,
            wait_ms: Some(nanos_to_ms_ceil(tollgate_core::time::duration_to_nanos(
                booking.wait,
            ))),
            statuses: None,
            shadow_rejected: false,
            ticket: None,
        },
        applied: Applied::Limits(applied),
        top: Some(top_for_headers),
        rejected: !booking.booked,
        headers: app.settings().headers,
    })
}

#[cfg(test)]
mod tests {
    use tollgate_core::Rate;

    use super::*;

    #[test]
    fn inline_names_and_policies_are_the_limits_own_however_many_limits_come() {
        for round in 0..3 {
            for n in 1..=20u64 {
                let algorithm = if n.is_multiple_of(3) {
                    AlgorithmName::TokenBucket
                } else {
                    AlgorithmName::Gcra
                };
                let mut limit = Limit::new(algorithm, Rate::per_second(n).unwrap());
                if n.is_multiple_of(2) {
                    limit.burst = Some(n + round);
                }
                assert_eq!(inline_name(&limit), limit.to_string());
                let applied =
                    with_inline_applied(&limit, Decision::default(), |a| a.clone().into_owned());
                assert_eq!(
                    applied,
                    AppliedLimit::of(limit.to_string(), &limit, Decision::default())
                );
            }
        }
    }
}
