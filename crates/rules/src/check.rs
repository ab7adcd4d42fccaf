//! The rules decision, independent of any transport: a request's
//! descriptors resolved against a domain, checked through a
//! [`Store`], and summed up in an [`Outcome`].
//!
//! The decision service (`/v1/check`), the gateway and the tower middleware
//! all decide through this module, so they agree on every answer:
//!
//! - the limits of every enforced rule (not in `shadow_mode`) are checked
//!   together, all-or-nothing: the request is admitted only when all admit,
//!   and a rejection counts nothing anywhere;
//! - each `shadow_mode` rule is checked on its own, so its verdict is
//!   reported and counted but never blocks the request or the other rules;
//! - `unlimited` rules are never counted; a rule with `requests_per_unit: 0`
//!   rejects every request (the other rules are then only peeked, so a
//!   denied request counts nowhere);
//! - each quota rule (`quota_mode: true`, or every rule under the global
//!   quota switch) is checked and debited on its own, like a shadow rule,
//!   and its rejection decides the request only when every quota rule of
//!   the request rejects it: the request is over the limit when an ordinary
//!   enforced rule is, or when all its quota rules are ([`over_limit`], the
//!   one place that combines verdicts, shared with the Envoy API);
//! - with the global shadow switch, every rejection is reported and none
//!   enforced;
//! - the top decision is the most constrained one of the enforced rules (of
//!   the shadow ones when no enforced rule applied).
//!
//! This module owns no wire format and counts no metrics: callers turn an
//! [`Outcome`] into JSON, protobuf or HTTP headers and feed their own
//! metrics from its per-descriptor results. The outcome types are
//! `outcome`; [`DescriptorRules`] finds the rules for a caller that decides
//! descriptors one by one (the Envoy API), as a [`Plan`] would;
//! [`OneLimit`] says when a request is decided by one limit alone, so a
//! front door can ask the store without a plan.

use std::borrow::Cow;

use tollgate_core::{Decision, Limit, LimitKey, Moment, Store, StoreError};

use crate::error::UnknownDomain;
use crate::matcher::Domain;
use crate::overrides::Found;
use crate::resolve::{resolve_rules, Descriptor};
use crate::rule::Rule;
use crate::ruleset::RuleSet;

mod descriptor_rules;
mod one_limit;
mod outcome;

pub use descriptor_rules::DescriptorRules;
pub use one_limit::{OneLimit, PlainDecided, PlainRule};
pub use outcome::{denied, limit_name, AppliedLimit, DescriptorOutcome, Outcome};

/// Store keys of rules counters start with this byte (inline keys start
/// with another), so no client-chosen inline key can name a rule's counter.
pub const RULES_KEY_PREFIX: u8 = b'r';

/// Room for most store keys (a rule path and a few values) in one
/// allocation.
const COUNTER_KEY_CAPACITY: usize = 128;

/// Whether a request is over the limit, from the verdicts of its enforced
/// descriptors (those whose rejection is not shadowed), each given as
/// `(over, quota)`: over when an ordinary (non-quota) descriptor is over,
/// or when there are quota descriptors and every one of them is over.
///
/// This is the one rule every surface (`/v1/check`, the Envoy API over gRPC
/// and `/json`, the gateway, the tower middleware) combines verdicts with.
///
/// ```
/// use tollgate_rules::check::over_limit;
/// // One quota descriptor over, another not: still within the limit.
/// assert!(!over_limit([(true, true), (false, true)]));
/// // Every quota descriptor over: over the limit.
/// assert!(over_limit([(true, true), (true, true), (false, false)]));
/// // An ordinary descriptor over: over the limit, whatever the quotas say.
/// assert!(over_limit([(true, false), (false, true)]));
/// assert!(!over_limit([]));
/// ```
pub fn over_limit(verdicts: impl IntoIterator<Item = (bool, bool)>) -> bool {
    let mut tally = Verdicts::default();
    for (over, quota) in verdicts {
        tally.add(over, quota);
    }
    tally.over_limit()
}

/// [`over_limit`] counted as the verdicts come, without keeping them: what
/// a check that decides its descriptors one by one holds.
///
/// ```
/// use tollgate_rules::check::Verdicts;
/// let mut verdicts = Verdicts::default();
/// verdicts.add(true, true);
/// assert!(verdicts.over_limit() && verdicts.quotas_exhausted());
/// verdicts.add(false, true);
/// assert!(!verdicts.over_limit() && !verdicts.quotas_exhausted());
/// verdicts.add(true, false);
/// assert!(verdicts.over_limit());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdicts {
    ordinary_over: bool,
    quotas: usize,
    quotas_over: usize,
}

impl Verdicts {
    /// One enforced descriptor's verdict: whether it is over, and whether
    /// it is a quota descriptor.
    #[inline]
    pub fn add(&mut self, over: bool, quota: bool) {
        if quota {
            self.quotas += 1;
            self.quotas_over += usize::from(over);
        } else {
            self.ordinary_over |= over;
        }
    }

    /// Whether the request is over the limit ([`over_limit`]).
    #[inline]
    pub fn over_limit(&self) -> bool {
        self.ordinary_over || self.quotas_exhausted()
    }

    /// Whether there are quota descriptors and every one is over.
    #[inline]
    pub fn quotas_exhausted(&self) -> bool {
        self.quotas > 0 && self.quotas == self.quotas_over
    }
}

/// One request descriptor's rule and store key.
#[derive(Debug, Clone)]
pub struct Planned<'r> {
    rule: &'r Rule,
    key: Vec<u8>,
    detailed: Option<String>,
}

impl<'r> Planned<'r> {
    /// The rule that applies.
    pub fn rule(&self) -> &'r Rule {
        self.rule
    }

    /// The store key: [`RULES_KEY_PREFIX`], then the rule's counter key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// With `detailed_metric` or `value_to_metric`, the metric label
    /// carrying the request's values ([`Rule::metric_label`]); `None`
    /// otherwise.
    pub fn detailed_label(&self) -> Option<&str> {
        self.detailed.as_deref()
    }

    /// Whether the rule's limits are counted (it is neither `unlimited` nor
    /// deny-all).
    pub fn counts(&self) -> bool {
        counts(self.rule)
    }

    /// The header name of the rule's limit `l`: see [`limit_name`].
    pub fn limit_name(&self, l: usize) -> Cow<'r, str> {
        limit_name(self.rule, l)
    }
}

fn counts(rule: &Rule) -> bool {
    !rule.unlimited() && !rule.denies_all()
}

/// One enforced limit of a [`Plan`]: its descriptor, its index among the
/// rule's limits, the limit and the store key.
pub type EnforcedLimit<'p, 'r> = (usize, usize, &'r Limit, &'p [u8]);

/// How a request's descriptors are decided, before the store is asked: one
/// entry per descriptor, `None` where no rule applies. A plan borrows the
/// rules, not the request's descriptors, so it can be kept across an
/// `.await` after the request has moved on.
#[derive(Debug, Clone)]
pub struct Plan<'r> {
    descriptors: Vec<Option<Planned<'r>>>,
    global_shadow: bool,
    global_quota: bool,
}

impl<'r> Plan<'r> {
    /// Resolves `descriptors` against the domain called `domain`.
    pub fn resolve<D: Descriptor>(
        rules: &'r RuleSet,
        domain: &str,
        descriptors: &[D],
        global_shadow: bool,
    ) -> Result<Plan<'r>, UnknownDomain> {
        Plan::resolve_with(
            rules,
            domain,
            descriptors,
            &crate::overrides::NO_OVERRIDES,
            global_shadow,
        )
    }

    /// [`resolve`](Plan::resolve), a descriptor with a runtime override in
    /// `overrides` (what
    /// [`OverrideTable::find`](crate::overrides::OverrideTable::find) found
    /// for these descriptors) taking the override's rule.
    pub fn resolve_with<D: Descriptor>(
        rules: &'r RuleSet,
        domain: &str,
        descriptors: &[D],
        overrides: &'r Found,
        global_shadow: bool,
    ) -> Result<Plan<'r>, UnknownDomain> {
        let found = rules.domain(domain).ok_or_else(|| UnknownDomain {
            domain: domain.to_string(),
        })?;
        Ok(Plan::new_with(found, descriptors, overrides, global_shadow))
    }

    /// Resolves `descriptors` against `domain` (`replaces` applied). With
    /// `global_shadow`, rejections are reported and none is enforced.
    pub fn new<D: Descriptor>(
        domain: &'r Domain,
        descriptors: &[D],
        global_shadow: bool,
    ) -> Plan<'r> {
        Plan::new_with(
            domain,
            descriptors,
            &crate::overrides::NO_OVERRIDES,
            global_shadow,
        )
    }

    /// [`new`](Plan::new) with the runtime overrides `overrides` found for
    /// these descriptors.
    pub fn new_with<D: Descriptor>(
        domain: &'r Domain,
        descriptors: &[D],
        overrides: &'r Found,
        global_shadow: bool,
    ) -> Plan<'r> {
        let descriptors = resolve_rules(domain, descriptors, overrides)
            .into_iter()
            .zip(descriptors)
            .map(|(rule, d)| {
                rule.map(|rule| {
                    let mut key = Vec::with_capacity(COUNTER_KEY_CAPACITY);
                    key.push(RULES_KEY_PREFIX);
                    rule.write_counter_key(d, &mut key);
                    Planned {
                        rule,
                        key,
                        detailed: rule.metric_has_values().then(|| rule.metric_label(d)),
                    }
                })
            })
            .collect();
        Plan {
            descriptors,
            global_shadow,
            global_quota: false,
        }
    }

    /// With `on`, every rule is a quota rule (the global quota switch,
    /// envoyproxy/ratelimit's `GLOBAL_QUOTA_MODE`): the request is over the
    /// limit only when every rule that applies is.
    pub fn with_global_quota(mut self, on: bool) -> Plan<'r> {
        self.global_quota = on;
        self
    }

    /// Whether the global quota switch is on for this plan.
    pub fn global_quota(&self) -> bool {
        self.global_quota
    }

    /// Whether `rule` is a quota rule in this plan.
    pub fn is_quota(&self, rule: &Rule) -> bool {
        rule.quota_mode() || self.global_quota
    }

    /// Each descriptor's rule and key, in request order.
    pub fn descriptors(&self) -> &[Option<Planned<'r>>] {
        &self.descriptors
    }

    /// Whether the global shadow switch is on for this plan.
    pub fn global_shadow(&self) -> bool {
        self.global_shadow
    }

    /// Every enforced limit: those of counted rules not in shadow mode
    /// (quota rules included: [`check`](Plan::check) checks them on their
    /// own, a reservation books them with the others).
    pub fn enforced(&self) -> Vec<EnforcedLimit<'_, 'r>> {
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
    pub fn denying_rule(&self) -> Option<&'r Rule> {
        self.descriptors
            .iter()
            .flatten()
            .map(|p| p.rule)
            .find(|r| r.denies_all() && !r.shadow_mode())
    }

    /// Asks `store` about every rule at `at` for `cost` and sums up the
    /// answers. Nothing is counted when the store fails.
    pub async fn check<S: Store>(
        self,
        store: &S,
        at: Moment,
        cost: u64,
    ) -> Result<Outcome<'r>, StoreError> {
        // decisions[d][l]: descriptor d's limit l.
        let mut decisions: Vec<Vec<Decision>> = self
            .descriptors
            .iter()
            .map(|p| {
                p.as_ref().map_or(Vec::new(), |p| {
                    vec![Decision::default(); p.rule.limits().len()]
                })
            })
            .collect();

        // A deny-all rule (not a quota) rejects the request: the other
        // ordinary rules are only peeked.
        let group_denied = self
            .descriptors
            .iter()
            .flatten()
            .any(|p| p.rule.denies_all() && !p.rule.shadow_mode() && !self.is_quota(p.rule));
        let group_cost = if group_denied { 0 } else { cost };
        // The enforced limits of ordinary (non-quota) rules, checked
        // together; their decisions go back in the same order.
        let grouped =
            |p: &&Planned<'r>| p.counts() && !p.rule.shadow_mode() && !self.is_quota(p.rule);
        let requests: Vec<LimitKey<'_>> = self
            .descriptors
            .iter()
            .flatten()
            .filter(grouped)
            .flat_map(|p| {
                p.rule
                    .limits()
                    .iter()
                    .map(|limit| LimitKey { limit, key: &p.key })
            })
            .collect();
        if !requests.is_empty() {
            // One limit, the common case, is asked without a list.
            let (mut one, mut several) = (None, Vec::new());
            match requests.as_slice() {
                [only] => one = Some(store.check_one(*only, at, group_cost).await?),
                _ => several = store.check(&requests, at, group_cost).await?,
            }
            let mut got = one.into_iter().chain(several);
            for (d, p) in self.descriptors.iter().enumerate() {
                if p.as_ref().is_some_and(|p| grouped(&p)) {
                    for slot in &mut decisions[d] {
                        if let Some(decision) = got.next() {
                            *slot = decision;
                        }
                    }
                }
            }
        }
        // Shadow and quota rules: each on its own, always debited.
        for (d, p) in self.descriptors.iter().enumerate() {
            if let Some(p) = p
                .as_ref()
                .filter(|p| p.counts() && (p.rule.shadow_mode() || self.is_quota(p.rule)))
            {
                let requests: Vec<LimitKey<'_>> = p
                    .rule
                    .limits()
                    .iter()
                    .map(|limit| LimitKey { limit, key: &p.key })
                    .collect();
                decisions[d] = store.check(&requests, at, cost).await?;
            }
        }
        Ok(Outcome::sum(self, decisions))
    }
}
