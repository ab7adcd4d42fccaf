//! What the rules decided: [`Outcome`] for a request, [`DescriptorOutcome`]
//! for each of its descriptors, and [`AppliedLimit`]s, the limits the
//! rate-limit headers describe — summed up from the store's decisions by
//! [`Plan::check`](super::Plan::check).

use std::borrow::Cow;
use std::time::Duration;

use tollgate_core::policy::QuotaPolicy;
use tollgate_core::time::duration_to_secs_ceil;
use tollgate_core::{AlgorithmName, Decision, Limit};

use super::Plan;
use crate::rule::Rule;

/// One limit that applied to a request, with its decision: what the
/// rate-limit headers describe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedLimit<'a> {
    /// The rule's name (see [`limit_name`]), or a name derived from
    /// the limit for inline limits.
    pub name: Cow<'a, str>,
    /// What `RateLimit-Policy` announces: a quota a client can follow
    /// without being refused by this limit alone (see
    /// [`Limit::policy`]).
    pub policy: QuotaPolicy,
    /// Its decision for this request.
    pub decision: Decision,
}

impl<'a> AppliedLimit<'a> {
    /// `limit`'s decision, named `name`.
    pub fn of(
        name: impl Into<Cow<'a, str>>,
        limit: &Limit,
        decision: Decision,
    ) -> AppliedLimit<'a> {
        AppliedLimit {
            name: name.into(),
            policy: limit.policy(),
            decision,
        }
    }

    /// The same, owning its name.
    pub fn into_owned(self) -> AppliedLimit<'static> {
        AppliedLimit {
            name: Cow::Owned(self.name.into_owned()),
            policy: self.policy,
            decision: self.decision,
        }
    }
}

/// The header name of `rule`'s limit `l`: the rule's `name` (or its path),
/// with the limit's rate appended when the rule has several limits.
pub fn limit_name(rule: &Rule, l: usize) -> Cow<'_, str> {
    Cow::Borrowed(rule.limit_header_name(l))
}

/// What the rules decided for one request descriptor.
#[derive(Debug, Clone)]
pub struct DescriptorOutcome<'r> {
    /// The rule that applied.
    pub rule: &'r Rule,
    /// The store key it counted under.
    pub key: Vec<u8>,
    /// One decision per limit of the rule, in the order of
    /// [`Rule::limits`]; empty for `unlimited` and deny-all rules.
    pub decisions: Vec<Decision>,
    /// The descriptor's decision: the most constrained of its limits; for a
    /// deny-all rule, a rejection for one unit; for an `unlimited` rule, an
    /// admission with no limit (`limit` 0).
    pub decision: Decision,
    /// The rule's rejection is not enforced: it is in `shadow_mode`, or the
    /// global shadow switch is on.
    pub shadow: bool,
    /// The rule is a quota (`quota_mode`, or the global quota switch): its
    /// rejection decides the request only when every quota rule of the
    /// request rejects it.
    pub quota: bool,
    /// With `detailed_metric`, the metric label with the request's values.
    pub detailed: Option<String>,
}

impl<'r> DescriptorOutcome<'r> {
    /// The metric label: the detailed one, or the rule's path.
    pub fn metric_label(&self) -> &str {
        self.detailed.as_deref().unwrap_or(self.rule.id())
    }

    /// Whether the rule's decision is worth reporting (every rule but an
    /// `unlimited` one).
    pub fn decided(&self) -> bool {
        !self.rule.unlimited()
    }

    /// The limits that applied, with their decisions and header names (a
    /// deny-all rule reports one limit of 0 over its unit).
    pub fn applied(&self) -> impl Iterator<Item = AppliedLimit<'r>> + '_ {
        let rule: &'r Rule = self.rule;
        let denied = rule.denies_all().then(|| AppliedLimit {
            name: Cow::Borrowed(rule.name().unwrap_or(rule.id())),
            // Nothing is ever admitted: a quota of 0 over the time the
            // rejection lasts.
            policy: QuotaPolicy {
                quota: 0,
                window_secs: duration_to_secs_ceil(self.decision.reset_after).max(1),
            },
            decision: self.decision,
        });
        let limits = self
            .decisions
            .iter()
            .take(rule.limits().len())
            .enumerate()
            .map(move |(l, decision)| AppliedLimit {
                name: limit_name(rule, l),
                policy: rule.limit_policy(l),
                decision: *decision,
            });
        denied.into_iter().chain(limits)
    }
}

/// What the rules decided for a request.
#[derive(Debug, Clone)]
pub struct Outcome<'r> {
    /// One entry per request descriptor, in order; `None` where no rule
    /// applied.
    pub descriptors: Vec<Option<DescriptorOutcome<'r>>>,
    /// The request is admitted: every enforced rule admitted it (always,
    /// under the global shadow switch).
    pub allowed: bool,
    /// A rule whose rejection is not enforced rejected the request.
    pub shadow_rejected: bool,
    /// Every quota rule of the request rejected it (false when it had
    /// none), which makes the request over the limit.
    pub quotas_exhausted: bool,
    /// The most constrained decision of the enforced rules (of the
    /// `shadow_mode` rules when no enforced rule applied); `None` when no
    /// counted rule applied.
    pub top: Option<Decision>,
}

impl<'r> Outcome<'r> {
    pub(super) fn sum(plan: Plan<'r>, decisions: Vec<Vec<Decision>>) -> Outcome<'r> {
        let global_shadow = plan.global_shadow;
        let global_quota = plan.global_quota;
        let mut top_enforced: Option<Decision> = None;
        let mut top_shadow: Option<Decision> = None;
        let mut shadow_rejected = false;
        // (over, quota) of every rule whose rejection is not shadowed.
        let mut verdicts = super::Verdicts::default();
        // The quota rules' decisions, kept apart until it is known whether
        // they decide the request.
        let mut quota_decisions: Vec<Decision> = Vec::new();
        let descriptors: Vec<_> = plan
            .descriptors
            .into_iter()
            .zip(decisions)
            .map(|(p, limits)| {
                let p = p?;
                let rule = p.rule;
                let quota = (rule.quota_mode() || global_quota) && !rule.shadow_mode();
                let decision = if rule.unlimited() {
                    if !rule.shadow_mode() {
                        verdicts.add(false, quota);
                    }
                    Decision {
                        allowed: true,
                        ..Decision::default()
                    }
                } else {
                    let decision = if rule.denies_all() {
                        denied(rule)
                    } else {
                        limits
                            .iter()
                            .copied()
                            .reduce(Decision::most_constrained)
                            .unwrap_or_default()
                    };
                    if rule.shadow_mode() {
                        shadow_rejected |= !decision.allowed;
                        top_shadow = Some(most_constrained(top_shadow, decision));
                    } else {
                        verdicts.add(!decision.allowed, quota);
                        if quota {
                            quota_decisions.push(decision);
                        } else {
                            top_enforced = Some(most_constrained(top_enforced, decision));
                        }
                    }
                    decision
                };
                Some(DescriptorOutcome {
                    rule,
                    key: p.key,
                    decisions: limits,
                    decision,
                    shadow: rule.shadow_mode() || global_shadow,
                    quota,
                    detailed: p.detailed,
                })
            })
            .collect();
        let mut allowed = !verdicts.over_limit();
        let quotas_exhausted = verdicts.quotas_exhausted();
        // Quota rules shape the top decision with what they admitted, and
        // with their rejections only when those decide the request.
        for decision in quota_decisions {
            if decision.allowed || quotas_exhausted {
                top_enforced = Some(most_constrained(top_enforced, decision));
            }
        }
        if global_shadow && !allowed {
            shadow_rejected = true;
            allowed = true;
        }
        Outcome {
            descriptors,
            allowed,
            shadow_rejected,
            quotas_exhausted,
            top: top_enforced.or(top_shadow),
        }
    }

    /// Every limit that applied, descriptor by descriptor (shadow-mode rules
    /// included), for the rate-limit headers.
    pub fn applied(&self) -> Vec<AppliedLimit<'r>> {
        self.descriptors
            .iter()
            .flatten()
            .flat_map(DescriptorOutcome::applied)
            .collect()
    }

    /// The limits that counted the request's cost, with their store keys:
    /// every admitting decision of a counted rule (shadow and quota rules
    /// included: they count on their own), except when a deny-all rule
    /// left the ordinary rules peeked, and except decisions a failure
    /// policy answered (nothing, or only this process's memory, counted
    /// them). `concurrency` limits are left out: a lease is released, not
    /// settled. What a settle of the request's actual cost goes to.
    pub fn counted(&self) -> impl Iterator<Item = (&'r Limit, &[u8])> + '_ {
        let peeked = self
            .descriptors
            .iter()
            .flatten()
            .any(|d| d.rule.denies_all() && !d.rule.shadow_mode() && !d.quota);
        self.descriptors
            .iter()
            .flatten()
            .filter(move |d| {
                !d.rule.unlimited()
                    && !d.rule.denies_all()
                    && (!peeked || d.rule.shadow_mode() || d.quota)
            })
            .flat_map(|d| {
                let rule: &'r Rule = d.rule;
                rule.limits()
                    .iter()
                    .zip(&d.decisions)
                    .filter(|(limit, decision)| {
                        decision.allowed
                            && !decision.degraded
                            && limit.algorithm != AlgorithmName::Concurrency
                    })
                    .map(|(limit, _)| (limit, d.key.as_slice()))
            })
    }

    /// The enforced rule that rejected the request (the one with the
    /// longest wait), if any; a quota rule only when every quota rule
    /// rejected it.
    pub fn rejecting_rule(&self) -> Option<&DescriptorOutcome<'r>> {
        self.descriptors
            .iter()
            .flatten()
            .filter(|d| !d.rule.shadow_mode() && !d.decision.allowed)
            .filter(|d| !d.quota || self.quotas_exhausted)
            .max_by_key(|d| d.decision.retry_after)
    }
}

/// `decision` folded into `top`.
fn most_constrained(top: Option<Decision>, decision: Decision) -> Decision {
    top.map_or(decision, |t| t.most_constrained(decision))
}

/// The decision of a rule that rejects every request: wait one unit.
pub fn denied(rule: &Rule) -> Decision {
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
