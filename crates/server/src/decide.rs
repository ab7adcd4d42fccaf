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
//! rejects every request.

use std::time::Duration;

use tollgate_core::time::nanos_to_ms_ceil;
use tollgate_core::{AlgorithmName, Decision, Limit, LimitKey, Moment, Store, StoreError};
use tollgate_rules::{Resolved, Rule, RuleSet};

use crate::answer::Answer;
use crate::app::App;
use crate::error::ApiError;
use crate::headers::AppliedLimit;
use crate::metrics::Verdict;
use crate::target::{Target, RULES_KEY_PREFIX};
use crate::wire::{DecisionBody, DecisionFields, ReleasedBody, StatusBody};

/// Checks `target` at `at` for `cost`, counting it when admitted.
pub async fn check<S: Store>(
    app: &App<S>,
    target: &Target,
    at: Moment,
    cost: u64,
) -> Result<Answer<DecisionBody>, ApiError> {
    match target {
        Target::Inline { key, limit } => check_inline(app, key, limit, at, cost).await,
        Target::Rules {
            domain,
            descriptors,
        } => check_rules(app, domain, descriptors, at, cost).await,
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
            count_reservation(app, "", "inline", None, &answer);
            Ok(answer)
        }
        Target::Rules {
            domain,
            descriptors,
        } => {
            let rules = app.rules();
            let plan = Plan::resolve(&rules, domain, descriptors, app.settings().shadow)?;
            let enforced = plan.enforced();
            let limits: Vec<(&Limit, &[u8])> = enforced
                .iter()
                .map(|&(_, _, limit, key)| (limit, key))
                .collect();
            let names: Vec<String> = enforced
                .iter()
                .filter_map(|&(d, l, _, _)| Some(plan.descriptors[d].as_ref()?.limit_name(l)))
                .collect();
            let denied = plan.denying_rule();
            let answer = reserve_limits(app, &limits, &names, at, cost, max_wait, denied).await?;
            for p in plan.descriptors.iter().flatten() {
                if (p.counts() && !p.rule.shadow_mode()) || p.rule.denies_all() {
                    count_reservation(app, domain, p.rule.id(), p.detailed.as_deref(), &answer);
                }
            }
            Ok(answer)
        }
    }
}

/// Counts a reservation in a rule's metrics: allowed when booked, rejected
/// when refused.
fn count_reservation<S: Store>(
    app: &App<S>,
    domain: &str,
    rule: &str,
    detailed: Option<&str>,
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
            let plan = Plan::resolve(&rules, domain, descriptors, app.settings().shadow)?;
            for p in plan.descriptors.iter().flatten() {
                for limit in p.rule.limits() {
                    if limit.algorithm == AlgorithmName::Concurrency {
                        let done = app
                            .store()
                            .release(LimitKey { limit, key: &p.key }, lease)
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
    result.map_err(|e| {
        if e.is_outage() {
            app.metrics().store_error();
            tracing::warn!(error = %e, "store operation failed");
        }
        ApiError::from(e)
    })
}

async fn check_inline<S: Store>(
    app: &App<S>,
    key: &[u8],
    limit: &Limit,
    at: Moment,
    cost: u64,
) -> Result<Answer<DecisionBody>, ApiError> {
    let decisions = store(
        app,
        app.store()
            .check(&[LimitKey { limit, key }], at, cost)
            .await,
    )?;
    let decision = decisions.first().copied().unwrap_or_default();
    let shadow = app.settings().shadow;
    let verdict = Verdict::of(&decision, shadow);
    app.metrics().count("", "inline", None, &decision, verdict);
    let mut fields = DecisionFields::of(&decision);
    fields.allowed |= shadow;
    Ok(Answer {
        body: DecisionBody {
            fields,
            wait_ms: None,
            statuses: None,
            shadow_rejected: verdict == Verdict::ShadowRejected,
        },
        applied: vec![AppliedLimit::of(limit.to_string(), limit, decision)],
        top: Some(decision),
        rejected: verdict == Verdict::Rejected,
        headers: app.settings().headers,
    })
}

/// The store key of a resolved descriptor.
fn counter_key(resolved: &Resolved<'_>) -> Vec<u8> {
    let mut key = vec![RULES_KEY_PREFIX];
    resolved.write_counter_key(&mut key);
    key
}

/// One descriptor's rule, store key and metric label.
struct Planned<'r> {
    rule: &'r Rule,
    key: Vec<u8>,
    detailed: Option<String>,
}

impl Planned<'_> {
    /// Whether the rule's limits are counted (not unlimited, not deny-all).
    fn counts(&self) -> bool {
        !self.rule.unlimited() && !self.rule.denies_all()
    }

    /// The header name of limit `l`: the rule's name (or path), with the
    /// limit's rate appended when the rule has several limits.
    fn limit_name(&self, l: usize) -> String {
        let name = self.rule.name().unwrap_or(self.rule.id());
        match self.rule.limits() {
            [_] => name.to_owned(),
            limits => format!("{name}:{}", limits[l].rate),
        }
    }
}

/// How a rules-based request's descriptors are decided: one entry per
/// descriptor, `None` where no rule applies.
struct Plan<'r> {
    descriptors: Vec<Option<Planned<'r>>>,
    global_shadow: bool,
}

impl<'r> Plan<'r> {
    /// Resolves `descriptors` against `domain` (an unknown domain is a bad
    /// request here). The plan keeps only rules and keys: a `Resolved`
    /// borrows the request's descriptors and is not held across the store's
    /// `.await`.
    fn resolve(
        rules: &'r RuleSet,
        domain: &str,
        descriptors: &'r [Vec<(String, String)>],
        global_shadow: bool,
    ) -> Result<Plan<'r>, ApiError> {
        let resolved = rules
            .resolve(domain, descriptors)
            .map_err(|e| ApiError::bad_request("unknown_domain", e.to_string()))?;
        Ok(Plan::of(&resolved, global_shadow))
    }

    fn of(resolved: &[Option<Resolved<'r>>], global_shadow: bool) -> Plan<'r> {
        let descriptors = resolved
            .iter()
            .map(|r| {
                r.as_ref().map(|r| Planned {
                    rule: r.rule(),
                    key: counter_key(r),
                    detailed: r.rule().detailed_metric().then(|| r.metric_label()),
                })
            })
            .collect();
        Plan {
            descriptors,
            global_shadow,
        }
    }

    /// (descriptor, limit index, limit, key) of every enforced limit: those
    /// of counted rules not in shadow mode, checked together.
    fn enforced(&self) -> Vec<(usize, usize, &'r Limit, &[u8])> {
        let mut out = Vec::new();
        for (d, p) in self.descriptors.iter().enumerate() {
            if let Some(p) = p.as_ref().filter(|p| p.counts() && !p.rule.shadow_mode()) {
                let rule: &'r Rule = p.rule;
                out.extend(
                    rule.limits()
                        .iter()
                        .enumerate()
                        .map(|(l, limit)| (d, l, limit, p.key.as_slice())),
                );
            }
        }
        out
    }

    /// The first enforced rule that rejects every request, if any.
    fn denying_rule(&self) -> Option<&'r Rule> {
        self.descriptors
            .iter()
            .flatten()
            .map(|p| p.rule)
            .find(|r| r.denies_all() && !r.shadow_mode())
    }
}

/// The decision of a rule that rejects every request.
fn denied(rule: &Rule) -> Decision {
    let unit = rule
        .reported_limits()
        .first()
        .map_or(1, |r| r.unit.seconds());
    Decision {
        allowed: false,
        limit: 0,
        remaining: 0,
        retry_after: Duration::from_secs(unit),
        reset_after: Duration::from_secs(unit),
        ..Decision::default()
    }
}

async fn check_rules<S: Store>(
    app: &App<S>,
    domain: &str,
    descriptors: &[Vec<(String, String)>],
    at: Moment,
    cost: u64,
) -> Result<Answer<DecisionBody>, ApiError> {
    let rules = app.rules();
    let plan = Plan::resolve(&rules, domain, descriptors, app.settings().shadow)?;
    // decisions[d][l]: descriptor d's limit l.
    let mut decisions: Vec<Vec<Decision>> = plan
        .descriptors
        .iter()
        .map(|p| {
            p.as_ref().map_or(Vec::new(), |p| {
                vec![Decision::default(); p.rule.limits().len()]
            })
        })
        .collect();

    // A deny-all rule rejects the request: the others are only peeked.
    let group_cost = if plan.denying_rule().is_some() {
        0
    } else {
        cost
    };
    let enforced = plan.enforced();
    if !enforced.is_empty() {
        let requests: Vec<LimitKey<'_>> = enforced
            .iter()
            .map(|&(_, _, limit, key)| LimitKey { limit, key })
            .collect();
        let got = store(app, app.store().check(&requests, at, group_cost).await)?;
        for (&(d, l, _, _), decision) in enforced.iter().zip(got) {
            decisions[d][l] = decision;
        }
    }
    for (d, p) in plan.descriptors.iter().enumerate() {
        if let Some(p) = p.as_ref().filter(|p| p.counts() && p.rule.shadow_mode()) {
            let requests: Vec<LimitKey<'_>> = p
                .rule
                .limits()
                .iter()
                .map(|limit| LimitKey { limit, key: &p.key })
                .collect();
            decisions[d] = store(app, app.store().check(&requests, at, cost).await)?;
        }
    }

    let mut statuses = Vec::with_capacity(plan.descriptors.len());
    let mut applied = Vec::new();
    let mut top_enforced: Option<Decision> = None;
    let mut top_shadow: Option<Decision> = None;
    let mut shadow_rejected = false;
    let mut allowed = true;
    for (p, limits) in plan.descriptors.iter().zip(&decisions) {
        let Some(p) = p else {
            statuses.push(StatusBody {
                name: None,
                fields: DecisionFields::unlimited(),
                shadow: false,
                unlimited: false,
            });
            continue;
        };
        let rule = p.rule;
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
        let decision = if rule.denies_all() {
            denied(rule)
        } else {
            limits
                .iter()
                .copied()
                .reduce(Decision::most_constrained)
                .unwrap_or_default()
        };
        let verdict = Verdict::of(&decision, rule.shadow_mode() || plan.global_shadow);
        app.metrics()
            .count(domain, rule.id(), p.detailed.as_deref(), &decision, verdict);
        let top = if rule.shadow_mode() {
            shadow_rejected |= !decision.allowed;
            &mut top_shadow
        } else {
            allowed &= decision.allowed;
            &mut top_enforced
        };
        *top = Some(top.map_or(decision, |t| t.most_constrained(decision)));
        if rule.denies_all() {
            applied.push(AppliedLimit {
                name: name.clone(),
                window_secs: decision.reset_after.as_secs(),
                decision,
            });
        }
        for (l, (limit, decision)) in rule.limits().iter().zip(limits).enumerate() {
            applied.push(AppliedLimit::of(p.limit_name(l), limit, *decision));
        }
        let mut fields = DecisionFields::of(&decision);
        fields.lease = limits.iter().find_map(|x| x.lease);
        statuses.push(StatusBody {
            name: Some(name),
            fields,
            shadow: rule.shadow_mode() || plan.global_shadow,
            unlimited: false,
        });
    }
    if plan.global_shadow && !allowed {
        shadow_rejected = true;
        allowed = true;
    }
    let top = top_enforced.or(top_shadow);
    let mut fields = top
        .as_ref()
        .map_or_else(DecisionFields::unlimited, DecisionFields::of);
    fields.allowed = allowed;
    if allowed {
        fields.retry_after_ms = 0;
    }
    fields.lease = None;
    Ok(Answer {
        body: DecisionBody {
            fields,
            wait_ms: None,
            statuses: Some(statuses),
            shadow_rejected,
        },
        applied,
        top,
        rejected: !allowed,
        headers: app.settings().headers,
    })
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
            },
            applied: Vec::new(),
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
            },
            applied: Vec::new(),
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
        },
        applied,
        top: Some(top_for_headers),
        rejected: !booking.booked,
        headers: app.settings().headers,
    })
}
