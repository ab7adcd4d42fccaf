//! [`Ruling`]: what the middleware does with one request, drawn from a
//! decision — reject it or let it through, which limits its headers show,
//! how long to hold it, which leases it holds.
//!
//! This module owns the middleware's reading of a decision:
//!
//! - the request is rejected when an enforced rule rejected it;
//! - the headers show the limits of enforced rules only; in shadow mode
//!   (global or the route's) they show nothing, so a dry run never changes
//!   what clients see or how well-behaved clients pace themselves;
//! - an admitted request is held for the longest shaping delay of its
//!   enforced `leaky_bucket` limits (see [`Shaping`]), never in shadow
//!   mode;
//! - every `concurrency` lease granted — shadow-mode rules included — is
//!   held until the response ends.

use std::borrow::Cow;
use std::time::Duration;

use tollgate_core::{Decision, Limit};
use tollgate_rules::check::{limit_name, AppliedLimit, OneLimit, Outcome, PlainDecided};

use crate::cost::ChargePlan;
use crate::lease::Lease;
use crate::shaping::Shaping;

/// The limits a ruling's headers show: most often one, held without a
/// list. `Yokeable`: an admitted request's response future keeps them
/// beside the rules they borrow from ([`crate::future`]).
#[derive(Debug, yoke::Yokeable)]
pub(crate) enum Applied<'r> {
    None,
    One(AppliedLimit<'r>),
    Several(Vec<AppliedLimit<'r>>),
}

impl<'r> Applied<'r> {
    pub(crate) fn as_slice(&self) -> &[AppliedLimit<'r>] {
        match self {
            Applied::None => &[],
            Applied::One(one) => std::slice::from_ref(one),
            Applied::Several(several) => several,
        }
    }
}

/// What to do with a request.
#[derive(Debug)]
pub(crate) struct Ruling<'r> {
    /// Answer `429`.
    pub(crate) rejected: bool,
    /// The name of the limit that rejected it.
    pub(crate) policy: Cow<'r, str>,
    /// The limits the headers show.
    pub(crate) applied: Applied<'r>,
    /// The most constrained decision they show.
    pub(crate) top: Option<Decision>,
    /// How long to hold the request before it goes on.
    pub(crate) hold: Duration,
    /// The leases it holds.
    pub(crate) leases: Vec<Lease>,
    /// How its actual cost is settled, when its route reads it from the
    /// response or counts only some answers (set by the decision).
    pub(crate) charge: Option<Box<ChargePlan<'r>>>,
}

impl<'r> Ruling<'r> {
    /// A ruling that rejects the request or not, naming `policy`, with
    /// nothing shown, held or leased yet: for the caller to fill in.
    fn to_fill(rejected: bool, policy: Cow<'r, str>) -> Ruling<'r> {
        Ruling {
            rejected,
            policy,
            applied: Applied::None,
            top: None,
            hold: Duration::ZERO,
            leases: Vec::new(),
            charge: None,
        }
    }

    /// The ruling on a rules decision; `shadow` when the global or the
    /// route's shadow mode is on.
    pub(crate) fn of_rules(outcome: Outcome<'r>, shaping: Shaping, shadow: bool) -> Ruling<'r> {
        let policy = outcome.rejecting_rule().map_or(Cow::Borrowed(""), |d| {
            let rule = d.rule;
            Cow::Borrowed(rule.name().unwrap_or(rule.id()))
        });
        let mut applied = Vec::new();
        let mut ruling = Ruling::to_fill(!outcome.allowed, policy);
        let quotas_exhausted = outcome.quotas_exhausted;
        for d in outcome.descriptors.into_iter().flatten() {
            let limits = d.rule.limits().iter().zip(&d.decisions);
            // A quota rule's rejection shows only when it decided the request.
            let shown = !d.quota || d.decision.allowed || quotas_exhausted;
            if !shadow && !d.rule.shadow_mode() && d.decided() && shown {
                applied.extend(d.applied());
                ruling.top = Some(
                    ruling
                        .top
                        .map_or(d.decision, |t| t.most_constrained(d.decision)),
                );
                for (limit, decision) in limits.clone().filter(|(_, x)| x.allowed) {
                    ruling.hold = ruling.hold.max(shaping.hold(decision.delay, limit));
                }
            }
            for (limit, decision) in limits {
                if let Some(id) = decision.lease {
                    ruling.leases.push(Lease {
                        limit: *limit,
                        key: d.key.clone(),
                        id,
                    });
                }
            }
        }
        if !applied.is_empty() {
            ruling.applied = Applied::Several(applied);
        }
        ruling
    }

    /// The ruling on a request whose descriptors plain rules decided, as
    /// `decided` (the ruling [`of_rules`](Ruling::of_rules) gives the
    /// outcome [`PlainDecided::outcome`] stands for, without its lists).
    pub(crate) fn of_plain(decided: &[PlainDecided<'_, 'r>], shaping: Shaping) -> Ruling<'r> {
        let allowed = decided.iter().all(|d| d.decision.allowed);
        // The rejecting rule with the longest wait (the last of equals,
        // as a plan's outcome names it).
        let policy = decided
            .iter()
            .filter(|d| !d.decision.allowed)
            .max_by_key(|d| d.decision.retry_after)
            .map_or(Cow::Borrowed(""), |d| {
                Cow::Borrowed(d.rule.name().unwrap_or(d.rule.id()))
            });
        let mut applied = Vec::with_capacity(decided.iter().map(|d| d.decisions.len()).sum());
        let mut ruling = Ruling::to_fill(!allowed, policy);
        for d in decided {
            let rule = d.rule;
            ruling.top = Some(
                ruling
                    .top
                    .map_or(d.decision, |t| t.most_constrained(d.decision)),
            );
            for (l, (limit, decision)) in rule.limits().iter().zip(d.decisions).enumerate() {
                applied.push(AppliedLimit {
                    name: limit_name(rule, l),
                    policy: rule.limit_policy(l),
                    decision: *decision,
                });
                if decision.allowed {
                    ruling.hold = ruling.hold.max(shaping.hold(decision.delay, limit));
                }
                if let Some(id) = decision.lease {
                    ruling.leases.push(Lease {
                        limit: *limit,
                        key: d.key.to_vec(),
                        id,
                    });
                }
            }
        }
        if !applied.is_empty() {
            ruling.applied = Applied::Several(applied);
        }
        ruling
    }

    /// The ruling on a request that `one` limit decided: `decision`,
    /// counted under `key` (the ruling [`of_rules`](Ruling::of_rules)
    /// gives the outcome [`OneLimit::outcome`] stands for, without its
    /// lists).
    pub(crate) fn of_one_limit(
        one: OneLimit<'r>,
        key: Vec<u8>,
        decision: Decision,
        shaping: Shaping,
    ) -> Ruling<'r> {
        let rule = one.rule();
        let limit = one.limit();
        Ruling {
            rejected: !decision.allowed,
            policy: Cow::Borrowed(if decision.allowed {
                ""
            } else {
                rule.name().unwrap_or(rule.id())
            }),
            applied: Applied::One(one.applied(decision)),
            top: Some(decision),
            hold: held(shaping, limit, &decision, true),
            leases: leased(limit, key, &decision),
            charge: None,
        }
    }

    /// The ruling on an inline limit named `name`, counted under `key`.
    pub(crate) fn of_inline(
        limit: &Limit,
        name: &'r str,
        key: Vec<u8>,
        decision: Decision,
        shaping: Shaping,
        shadow: bool,
    ) -> Ruling<'r> {
        let shown = !shadow;
        Ruling {
            rejected: shown && !decision.allowed,
            policy: Cow::Borrowed(name),
            applied: if shown {
                Applied::One(AppliedLimit::of(name, limit, decision))
            } else {
                Applied::None
            },
            top: shown.then_some(decision),
            hold: held(shaping, limit, &decision, shown),
            leases: leased(limit, key, &decision),
            charge: None,
        }
    }
}

/// How long one `limit`'s `decision` holds a request: its shaping delay
/// when the limit is `shown` (enforced) and admitted the request.
fn held(shaping: Shaping, limit: &Limit, decision: &Decision, shown: bool) -> Duration {
    if shown && decision.allowed {
        shaping.hold(decision.delay, limit)
    } else {
        Duration::ZERO
    }
}

/// The lease one `limit`'s `decision` granted under `key`, if any.
fn leased(limit: &Limit, key: Vec<u8>, decision: &Decision) -> Vec<Lease> {
    decision
        .lease
        .map(|id| Lease {
            limit: *limit,
            key,
            id,
        })
        .into_iter()
        .collect()
}
