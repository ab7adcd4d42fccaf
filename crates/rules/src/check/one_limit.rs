//! [`OneLimit`]: the decision of a request whose one descriptor meets one
//! ordinary limit, the common case at an HTTP front door (a route keyed by
//! the client address, one limit), decided without a [`Plan`](super::Plan)'s
//! lists.
//!
//! A [`Plan`](super::Plan) is built for any mix of rules: it allocates a
//! list of descriptors, a key for each, a list of decisions per descriptor,
//! and [`Outcome`] sums them into more lists. When the request has one
//! descriptor and its rule is counted, enforced and not a quota, with one
//! limit, all of that reduces to one store call and its decision:
//! [`OneLimit::find`] says when that holds, and the caller then asks the
//! store itself. [`OneLimit::outcome`] gives the [`Outcome`] a plan would
//! have summed, for the rare caller that needs it whole.

use std::borrow::Cow;

use tollgate_core::{Decision, Limit};

use super::{AppliedLimit, DescriptorOutcome, Outcome, RULES_KEY_PREFIX};
use crate::matcher::Domain;
use crate::resolve::Descriptor;
use crate::rule::Rule;

/// The rule of a request's only descriptor, when that rule decides the
/// request by one limit alone, as a [`Plan`](super::Plan) would.
///
/// ```
/// use tollgate_rules::check::OneLimit;
/// use tollgate_rules::RuleSet;
///
/// let rules = RuleSet::from_yaml(
///     "domain: api\n\
///      descriptors:\n\
///      \x20 - key: user\n\
///      \x20   rate_limit: {name: per_user, unit: minute, requests_per_unit: 60}\n\
///      \x20 - key: trial\n\
///      \x20   shadow_mode: true\n\
///      \x20   rate_limit: {unit: minute, requests_per_unit: 1}\n",
///     "api.yaml",
/// )
/// .unwrap();
/// let domain = rules.domain("api").unwrap();
/// let one = OneLimit::find(domain, &[("user", "42")], false, false).unwrap();
/// assert_eq!(one.limit().rate.limit(), 60);
/// assert_eq!(one.applied(Default::default()).name, "per_user");
/// // A shadow-mode rule is checked on its own terms: through a plan.
/// assert!(OneLimit::find(domain, &[("trial", "x")], false, false).is_none());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct OneLimit<'r> {
    rule: &'r Rule,
    limit: &'r Limit,
}

impl<'r> OneLimit<'r> {
    /// The rule of `descriptor` in `domain`, when a request made of that
    /// one descriptor, with no runtime override found for it, is decided
    /// by one limit: the domain has no `replaces`, and the rule is counted
    /// (neither `unlimited` nor deny-all), enforced (no `shadow_mode`, no
    /// `global_shadow`), not a quota (no `quota_mode`, no `global_quota`),
    /// has one limit, and its metric label carries no request value.
    /// `None` otherwise (no rule included): decide through a plan.
    pub fn find<D: Descriptor + ?Sized>(
        domain: &'r Domain,
        descriptor: &D,
        global_shadow: bool,
        global_quota: bool,
    ) -> Option<OneLimit<'r>> {
        let rule = PlainRule::find(domain, descriptor, global_shadow, global_quota)?.rule;
        match rule.limits() {
            [limit] => Some(OneLimit { rule, limit }),
            _ => None,
        }
    }

    /// The rule.
    pub fn rule(&self) -> &'r Rule {
        self.rule
    }

    /// Its one limit.
    pub fn limit(&self) -> &'r Limit {
        self.limit
    }

    /// Appends the store key of `descriptor` (the one this was found for)
    /// to `key`: [`RULES_KEY_PREFIX`], then the rule's counter key, as a
    /// plan keys it.
    pub fn write_key<D: Descriptor + ?Sized>(&self, descriptor: &D, key: &mut Vec<u8>) {
        key.push(RULES_KEY_PREFIX);
        self.rule.write_counter_key(descriptor, key);
    }

    /// The limit with the store's `decision`, for the rate-limit headers.
    pub fn applied(&self, decision: Decision) -> AppliedLimit<'r> {
        AppliedLimit {
            name: Cow::Borrowed(self.rule.limit_header_name(0)),
            policy: self.rule.limit_policy(0),
            decision,
        }
    }

    /// The [`Outcome`] a plan would have summed from the store's
    /// `decision`, counted under `key`: the request is admitted when the
    /// limit admitted it, and that decision is the top one.
    pub fn outcome(&self, key: Vec<u8>, decision: Decision) -> Outcome<'r> {
        Outcome {
            descriptors: vec![Some(DescriptorOutcome {
                rule: self.rule,
                key,
                decisions: vec![decision],
                decision,
                shadow: false,
                quota: false,
                detailed: None,
            })],
            allowed: decision.allowed,
            shadow_rejected: false,
            quotas_exhausted: false,
            top: Some(decision),
        }
    }
}

/// The rule of one of a request's descriptors, when every descriptor of
/// the request can be decided without a [`Plan`](super::Plan) if each has
/// one: the domain has no `replaces` (which apply across the request), and
/// the rule is counted (neither `unlimited` nor deny-all), enforced (no
/// `shadow_mode`, no `global_shadow`), not a quota (no `quota_mode`, no
/// `global_quota`), and its metric label carries no request value. Its
/// limits, however many, are then checked all-or-nothing with those of
/// the request's other descriptors, and [`PlainDecided`] sums their
/// decisions as a plan's [`Outcome`] would.
#[derive(Debug, Clone, Copy)]
pub struct PlainRule<'r> {
    /// The rule.
    pub rule: &'r Rule,
}

impl<'r> PlainRule<'r> {
    /// `descriptor`'s rule in `domain`, when it is plain (see the type's
    /// doc); `None` otherwise, rule or not: decide through a plan.
    pub fn find<D: Descriptor + ?Sized>(
        domain: &'r Domain,
        descriptor: &D,
        global_shadow: bool,
        global_quota: bool,
    ) -> Option<PlainRule<'r>> {
        if global_shadow || global_quota || domain.has_replaces() {
            return None;
        }
        let rule = domain.find(descriptor)?;
        if rule.unlimited()
            || rule.denies_all()
            || rule.shadow_mode()
            || rule.quota_mode()
            || rule.metric_has_values()
            || rule.limits().is_empty()
        {
            return None;
        }
        Some(PlainRule { rule })
    }

    /// Appends the store key of `descriptor` (the one this was found for)
    /// to `key`, as a plan keys it.
    pub fn write_key<D: Descriptor + ?Sized>(&self, descriptor: &D, key: &mut Vec<u8>) {
        key.push(RULES_KEY_PREFIX);
        self.rule.write_counter_key(descriptor, key);
    }
}

/// One descriptor of a request decided by [`PlainRule`]s: its rule, its
/// store key, the decisions of the rule's limits (in the rule's order) and
/// the descriptor's own, the most constrained of them.
#[derive(Debug, Clone, Copy)]
pub struct PlainDecided<'a, 'r> {
    /// The rule.
    pub rule: &'r Rule,
    /// The store key its limits counted under.
    pub key: &'a [u8],
    /// One decision per limit of the rule.
    pub decisions: &'a [Decision],
    /// The most constrained of `decisions`.
    pub decision: Decision,
}

impl<'a, 'r> PlainDecided<'a, 'r> {
    /// The descriptor's rule, key and its limits' `decisions`.
    pub fn new(rule: &'r Rule, key: &'a [u8], decisions: &'a [Decision]) -> PlainDecided<'a, 'r> {
        PlainDecided {
            rule,
            key,
            decisions,
            decision: decisions
                .iter()
                .copied()
                .reduce(Decision::most_constrained)
                .unwrap_or_default(),
        }
    }

    /// The [`Outcome`] a plan would have summed for a request whose
    /// descriptors were decided as `decided`, in order.
    pub fn outcome(decided: &[PlainDecided<'_, 'r>]) -> Outcome<'r> {
        let allowed = decided.iter().all(|d| d.decision.allowed);
        Outcome {
            descriptors: decided
                .iter()
                .map(|d| {
                    Some(DescriptorOutcome {
                        rule: d.rule,
                        key: d.key.to_vec(),
                        decisions: d.decisions.to_vec(),
                        decision: d.decision,
                        shadow: false,
                        quota: false,
                        detailed: None,
                    })
                })
                .collect(),
            allowed,
            shadow_rejected: false,
            quotas_exhausted: false,
            top: decided
                .iter()
                .map(|d| d.decision)
                .reduce(Decision::most_constrained),
        }
    }
}
