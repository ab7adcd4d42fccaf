//! Reference models of SPEC §2, written to be obviously correct rather than
//! fast, and the harnesses that compare the real algorithms against them.
//!
//! Every model answers the same few questions from first principles (exact
//! fractions for the buckets, the full list of admitted requests for the
//! windows), and [`expected_check`] derives every field of a decision from
//! those answers by definition:
//!
//! - `allowed`: the model admits the cost now;
//! - `remaining`: the largest unit count the model would still admit now;
//! - `retry_after`: the earliest instant the model admits the same cost;
//! - `reset_after`: the earliest instant from which the model can no longer
//!   be told apart from a fresh one;
//! - `delay`: the shaping delay (leaky bucket only).
//!
//! Each test crate includes this module and uses part of it.

#![allow(dead_code)]

pub(crate) mod buckets;
pub(crate) mod concurrency;
pub(crate) mod fixed_window;
pub(crate) mod harness;
pub(crate) mod ratio;
pub(crate) mod sliding_counter;
pub(crate) mod sliding_log;
pub(crate) mod stepped_window;
pub(crate) mod strategy;

use std::time::Duration;

use tollgate_core::Decision;

/// A limiter model: the questions every decision is derived from.
///
/// Queries are made at instants no earlier than the last admitted request.
pub(crate) trait Model: Clone + std::fmt::Debug {
    /// `N` for windows, `burst` for buckets: the largest admissible cost.
    fn capacity(&self) -> u64;

    /// Whether `cost` would be admitted at `t`.
    fn admits(&self, t: u64, cost: u64) -> bool;

    /// Records a request of `cost` admitted at `t`.
    fn admit(&mut self, t: u64, cost: u64);

    /// The earliest instant at or after `t` at which `cost` is admitted.
    fn first_admit(&self, t: u64, cost: u64) -> u64;

    /// The earliest instant at or after `t` from which nothing distinguishes
    /// the model from a fresh one.
    fn first_quiet(&self, t: u64) -> u64;

    /// How long a request admitted at `t` is held back (shaping only).
    fn delay(&self, _t: u64) -> u64 {
        0
    }

    /// Counts `cost` at `t` whatever the limit says (`Algorithm::record`):
    /// the windows log it like an admitted request, the buckets take it
    /// below zero tokens (or above a full queue).
    fn record(&mut self, t: u64, cost: u64);

    /// The usage `Algorithm::record` reports at `t`: the count in the
    /// window, or the whole tokens missing from a full bucket (rounded up).
    fn usage(&self, t: u64) -> u64;
}

/// The earliest of `candidates` (plus `t` itself) that is at or after `t` and
/// satisfies `holds`. Window models list every instant at which their answer
/// can change, so this search is exact.
pub(crate) fn earliest(
    t: u64,
    candidates: impl IntoIterator<Item = u64>,
    holds: impl Fn(u64) -> bool,
) -> u64 {
    std::iter::once(t)
        .chain(candidates)
        .filter(|&c| c >= t)
        .filter(|&c| holds(c))
        .min()
        .unwrap_or_else(|| panic!("model has no admitting instant after {t}"))
}

/// The decision SPEC §2 prescribes for `cost` at `now`, derived from the
/// model by definition; records the request in the model when admitted.
pub(crate) fn expected_check<M: Model>(model: &mut M, now: u64, cost: u64) -> Decision {
    let allowed = cost == 0 || model.admits(now, cost);
    let retry_after = if allowed {
        0
    } else {
        model.first_admit(now, cost) - now
    };
    let mut delay = 0;
    if allowed && cost > 0 {
        delay = model.delay(now);
        model.admit(now, cost);
    }
    let remaining = (0..=model.capacity())
        .rev()
        .find(|&r| model.admits(now, r))
        .unwrap_or(0);
    Decision {
        allowed,
        limit: model.capacity(),
        remaining,
        retry_after: Duration::from_nanos(retry_after),
        reset_after: Duration::from_nanos(model.first_quiet(now) - now),
        delay: Duration::from_nanos(delay),
        lease: None,
        degraded: false,
        asynchronous: false,
        ban: None,
    }
}

/// The most cost any span `(t − P, t]` holds among `admitted` requests
/// (instant, cost); the worst span ends at one of the instants.
pub(crate) fn heaviest_span(admitted: &[(u64, u64)], p: u64) -> u64 {
    admitted
        .iter()
        .map(|&(end, _)| {
            admitted
                .iter()
                .filter(|&&(a, _)| a <= end && a + p > end)
                .map(|&(_, c)| c)
                .sum()
        })
        .max()
        .unwrap_or(0)
}
