//! Trace runners shared by the property tests: each replays a trace through
//! an algorithm and fails the case on the first disagreement.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate_core::{Algorithm, Decision, LimitError};

use super::strategy::{Event, Op, RecordOp, Setup};
use super::{expected_check, Model};

/// `check`, failing the case on an error.
pub(crate) fn check<A: Algorithm>(
    alg: &A,
    state: &mut A::State,
    now: u64,
    cost: u64,
) -> Result<Decision, TestCaseError> {
    alg.check(state, now, cost)
        .map_err(|e| TestCaseError::fail(format!("check({now}, {cost}): {e}")))
}

/// A cost above capacity is an error everywhere and changes nothing.
pub(crate) fn assert_cost_too_large<A>(
    alg: &A,
    state: &mut A::State,
    now: u64,
    cost: u64,
) -> Result<(), TestCaseError>
where
    A: Algorithm,
    A::State: PartialEq,
{
    let before = state.clone();
    let err = Err(LimitError::CostTooLarge {
        cost,
        capacity: alg.capacity(),
    });
    prop_assert_eq!(alg.check(state, now, cost), err.clone());
    prop_assert_eq!(alg.try_evaluate(state, now, cost), err.clone());
    prop_assert_eq!(
        alg.earliest(state, now, cost),
        err.clone().map(|_: Decision| 0)
    );
    let reserved = alg.reserve(state, now, cost, None).map(|r| r.decision);
    prop_assert_eq!(reserved, err);
    prop_assert_eq!(&*state, &before);
    Ok(())
}

/// Property 1: every decision, and `next_available` before it, equals the
/// model's. Returns the admitted requests (instant, cost).
pub(crate) fn run_against_model<A, M>(
    alg: &A,
    mut model: M,
    s: &Setup,
    trace: &[Event],
) -> Result<Vec<(u64, u64)>, TestCaseError>
where
    A: Algorithm,
    A::State: PartialEq,
    M: Model,
{
    let mut state = alg.new_state();
    let mut now = s.start;
    let mut admitted = Vec::new();
    for (i, e) in trace.iter().enumerate() {
        now += e.dt;
        let step = format!("event {i}");
        if let Some(got) = check_step(alg, &mut state, &mut model, now, e.cost, &step)? {
            if got.allowed && e.cost > 0 {
                admitted.push((now, e.cost));
            }
        }
    }
    Ok(admitted)
}

/// One check of a trace: a cost above capacity is refused everywhere
/// (`None`); otherwise `next_available` and then the decision equal the
/// model's, and the decision is returned. `step` names it in failures.
fn check_step<A, M>(
    alg: &A,
    state: &mut A::State,
    model: &mut M,
    now: u64,
    cost: u64,
    step: &str,
) -> Result<Option<Decision>, TestCaseError>
where
    A: Algorithm,
    A::State: PartialEq,
    M: Model,
{
    if cost > alg.capacity() {
        assert_cost_too_large(alg, state, now, cost)?;
        return Ok(None);
    }
    prop_assert_eq!(
        alg.next_available(state, now, cost),
        model.first_admit(now, cost),
        "next_available, {} at {} cost {}",
        step,
        now,
        cost
    );
    let before = state.clone();
    let expected = expected_check(model, now, cost);
    let got = check(alg, state, now, cost)?;
    prop_assert_eq!(
        got,
        expected,
        "{} at {} cost {}, state before {:?}",
        step,
        now,
        cost,
        before
    );
    Ok(Some(got))
}

/// Property 3: a rejected request is admitted at `now + retry_after` and not
/// a nanosecond (nor, when `gran` is a millisecond, a millisecond) earlier.
pub(crate) fn check_retry_exact<A: Algorithm>(
    alg: &A,
    s: &Setup,
    trace: &[Event],
    gran: u64,
) -> Result<(), TestCaseError> {
    let mut state = alg.new_state();
    let mut now = s.start;
    for e in trace {
        now += e.dt;
        if e.cost > alg.capacity() {
            continue;
        }
        let d = check(alg, &mut state, now, e.cost)?;
        if d.allowed {
            prop_assert_eq!(d.retry_after, Duration::ZERO);
            continue;
        }
        let retry = u64::try_from(d.retry_after.as_nanos()).expect("retry fits");
        prop_assert!(retry > 0, "rejected with no wait at {}", now);
        let at = |t: u64| check(alg, &mut state.clone(), t, e.cost).map(|d| d.allowed);
        prop_assert!(
            at(now + retry)?,
            "rejected at now + retry_after ({} + {})",
            now,
            retry
        );
        prop_assert!(!at(now + retry - 1)?, "admitted 1 ns before retry_after");
        if retry >= gran {
            prop_assert!(
                !at(now + retry - gran)?,
                "admitted {} ns before retry_after",
                gran
            );
        }
    }
    Ok(())
}

/// Property 5: cost 0 is always allowed and changes nothing (and its
/// `remaining` says whether a unit request would pass); a cost above capacity
/// is an error and changes nothing. Checked before every event of the trace.
pub(crate) fn check_cost_rules<A>(alg: &A, s: &Setup, trace: &[Event]) -> Result<(), TestCaseError>
where
    A: Algorithm,
    A::State: PartialEq,
{
    let mut state = alg.new_state();
    let mut now = s.start;
    for e in trace {
        now += e.dt;
        let before = state.clone();
        let peek = check(alg, &mut state, now, 0)?;
        prop_assert!(peek.allowed);
        prop_assert_eq!(peek.retry_after, Duration::ZERO);
        prop_assert_eq!(peek.delay, Duration::ZERO);
        prop_assert_eq!(peek.lease, None);
        prop_assert_eq!(&state, &before, "cost 0 changed the state");
        prop_assert_eq!(alg.peek(&state, now), peek);
        let unit = check(alg, &mut state.clone(), now, 1)?;
        prop_assert_eq!(peek.remaining >= 1, unit.allowed, "peek {:?}", peek);
        prop_assert_eq!(alg.earliest(&state, now, 0), Ok(now));
        if let Ok(r) = alg.reserve(&mut state, now, 0, None) {
            prop_assert_eq!(r.wait, Duration::ZERO);
            prop_assert_eq!(r.decision, peek);
            prop_assert_eq!(&state, &before, "reserving cost 0 changed the state");
        }
        assert_cost_too_large(alg, &mut state, now, alg.capacity() + 1)?;
        assert_cost_too_large(alg, &mut state, now, u64::MAX)?;
        if e.cost <= alg.capacity() {
            check(alg, &mut state, now, e.cost)?;
        }
    }
    Ok(())
}

/// `expires_at` is safe for eviction: from then on the state decides exactly
/// as a fresh one.
pub(crate) fn check_expiry<A: Algorithm>(
    alg: &A,
    s: &Setup,
    trace: &[Event],
) -> Result<(), TestCaseError> {
    let mut state = alg.new_state();
    let fresh = alg.new_state();
    let mut now = s.start;
    for e in trace {
        now += e.dt;
        if e.cost <= alg.capacity() {
            check(alg, &mut state, now, e.cost)?;
        }
        let t = now.max(alg.expires_at(&state));
        for cost in 0..=alg.capacity() {
            prop_assert_eq!(
                alg.evaluate(&state, t, cost),
                alg.evaluate(&fresh, t, cost),
                "at expires_at {}, cost {}, state {:?}",
                t,
                cost,
                state
            );
            prop_assert_eq!(
                alg.next_available(&state, t, cost),
                alg.next_available(&fresh, t, cost)
            );
        }
    }
    Ok(())
}

/// Property 6 for every algorithm but `leaky_bucket` (which shapes instead):
/// `next_available` and each reservation's wait are the model's earliest
/// admitting instant, no earlier than what is already booked; a plain check
/// before the latest booked instant is rejected; and everything admitted or
/// booked, replayed as a trace through a fresh state, is admitted. Returns
/// that history (instant, cost).
pub(crate) fn run_reservations<A, M>(
    alg: &A,
    mut model: M,
    s: &Setup,
    ops: &[Op],
) -> Result<Vec<(u64, u64)>, TestCaseError>
where
    A: Algorithm,
    A::State: PartialEq,
    M: Model,
{
    let mut state = alg.new_state();
    let mut now = s.start;
    let mut history: Vec<(u64, u64)> = Vec::new();
    let mut booked_until = 0;
    for (i, op) in ops.iter().enumerate() {
        let (e, max_wait) = match *op {
            Op::Check(e) => (e, None),
            Op::Reserve(e, w) => (e, w),
        };
        now += e.dt;
        let cost = e.cost;
        if cost > alg.capacity() {
            assert_cost_too_large(alg, &mut state, now, cost)?;
            continue;
        }
        let from = now.max(booked_until);
        let earliest = if cost == 0 {
            now
        } else {
            model.first_admit(from, cost)
        };
        prop_assert_eq!(alg.earliest(&state, now, cost), Ok(earliest));
        // Cost 0 is always admitted; the raw `next_available` may place it
        // behind booked slots.
        if cost > 0 {
            prop_assert_eq!(
                alg.next_available(&state, now, cost),
                earliest,
                "next_available, op {} at {} cost {}, state {:?}",
                i,
                now,
                cost,
                state
            );
        }
        let wait = earliest - now;
        match *op {
            Op::Check(_) => {
                let d = check(alg, &mut state, now, cost)?;
                if cost == 0 {
                    prop_assert!(d.allowed);
                    continue;
                }
                prop_assert!(
                    !(d.allowed && now < booked_until),
                    "op {}: check at {} jumped ahead of a slot booked at {}",
                    i,
                    now,
                    booked_until
                );
                prop_assert_eq!(d.allowed, wait == 0, "op {} at {} cost {}", i, now, cost);
                prop_assert_eq!(d.retry_after, Duration::from_nanos(wait));
                if d.allowed {
                    model.admit(now, cost);
                    history.push((now, cost));
                }
            }
            Op::Reserve(..) => {
                let before = state.clone();
                let bound = max_wait.map(Duration::from_nanos);
                let r = alg
                    .reserve(&mut state, now, cost, bound)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                if cost == 0 {
                    prop_assert_eq!(r.wait, Duration::ZERO);
                    prop_assert!(r.decision.allowed);
                    prop_assert_eq!(&state, &before, "reserving cost 0 changed the state");
                    continue;
                }
                prop_assert_eq!(r.wait, Duration::from_nanos(wait), "op {} at {}", i, now);
                if max_wait.is_some_and(|w| wait > w) {
                    prop_assert!(!r.decision.allowed);
                    let over = wait - max_wait.unwrap_or(0);
                    prop_assert_eq!(r.decision.retry_after, Duration::from_nanos(over));
                    prop_assert_eq!(&state, &before, "an unbooked reservation changed the state");
                } else {
                    prop_assert!(r.decision.allowed);
                    model.admit(earliest, cost);
                    history.push((earliest, cost));
                    booked_until = booked_until.max(earliest);
                }
            }
        }
    }
    replay(alg, &history)?;
    Ok(history)
}

/// Every request of `history` (in time order) is admitted by a fresh state.
pub(crate) fn replay<A: Algorithm>(alg: &A, history: &[(u64, u64)]) -> Result<(), TestCaseError> {
    let mut fresh = alg.new_state();
    for (i, &(t, cost)) in history.iter().enumerate() {
        if i > 0 {
            prop_assert!(
                history[i - 1].0 <= t,
                "booked instants out of order: {:?}",
                history
            );
        }
        let d = check(alg, &mut fresh, t, cost)?;
        prop_assert!(
            d.allowed,
            "replay rejects request {} at {} cost {}: {:?}",
            i,
            t,
            cost,
            history
        );
    }
    Ok(())
}

/// Forced records: after any interleaving of checks and records, every
/// decision (and `next_available` before it) equals the model's, and each
/// record reports the model's usage (`exact_usage`; otherwise, for the
/// sliding log whose folded marks may leave late, never less than the
/// model's and the same once capped at `limit + 1`). Every refused check is
/// probed at `now + retry_after`, where it must pass, and 1 ns earlier,
/// where it must not: a debt is paid back exactly when the model says.
pub(crate) fn run_records_against_model<A, M>(
    alg: &A,
    mut model: M,
    s: &Setup,
    ops: &[RecordOp],
    exact_usage: bool,
) -> Result<(), TestCaseError>
where
    A: Algorithm,
    A::State: PartialEq,
    M: Model,
{
    let mut state = alg.new_state();
    let mut now = s.start;
    for (i, op) in ops.iter().enumerate() {
        match *op {
            RecordOp::Record(e) => {
                now += e.dt;
                let got = alg.record(&mut state, now, e.cost);
                model.record(now, e.cost);
                let want = model.usage(now);
                let got = got.ok_or_else(|| TestCaseError::fail("record unsupported"))?;
                if exact_usage {
                    prop_assert_eq!(got, want, "op {} record at {} cost {}", i, now, e.cost);
                } else {
                    let cap = alg.limit() + 1;
                    prop_assert!(got >= want, "op {}: usage {} below {}", i, got, want);
                    prop_assert_eq!(got.min(cap), want.min(cap), "op {}", i);
                }
            }
            RecordOp::Check(e) => {
                now += e.dt;
                let before = state.clone();
                let step = format!("op {i}");
                let Some(got) = check_step(alg, &mut state, &mut model, now, e.cost, &step)? else {
                    continue;
                };
                if !got.allowed {
                    let retry = u64::try_from(got.retry_after.as_nanos()).expect("retry fits");
                    let at = |t: u64| check(alg, &mut before.clone(), t, e.cost).map(|d| d.allowed);
                    prop_assert!(at(now + retry)?, "op {}: refused at now + retry_after", i);
                    prop_assert!(
                        !at(now + retry - 1)?,
                        "op {}: admitted before retry_after",
                        i
                    );
                }
            }
        }
    }
    Ok(())
}
