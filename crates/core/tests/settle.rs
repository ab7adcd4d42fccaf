//! Settling a cost (`Algorithm::settle`, issue 24's "reserve, then
//! settle"): property tests of every algorithm that settles against its
//! reference model, and worked examples of the rule per algorithm
//! (docs/semantics.md, "Settling a cost").
//!
//! - A check of an estimate settled with the actual cost decides, from
//!   then on, exactly as the model in which the actual cost was admitted
//!   at the check's instant, when the window has not moved (and the
//!   actual cost was admissible then).
//! - A refund never creates quota that did not exist: after a check and a
//!   refund, at any later instant, the state admits no cost the model that
//!   never saw the request refuses, and has no more remaining.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reference;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate_core::algorithm::{
    Concurrency, FixedWindow, Gcra, LeakyBucket, Settled, SlidingWindowCounter, SlidingWindowLog,
    SteppedWindow, TokenBucket, Wide,
};
use tollgate_core::time::NANOS_PER_SEC as S;
use tollgate_core::{Algorithm, Rate};

use reference::buckets::{LeakyBucketModel, TokenBucketModel};
use reference::fixed_window::FixedWindowModel;
use reference::harness::check;
use reference::sliding_counter::SlidingCounterModel;
use reference::sliding_log::SlidingLogModel;
use reference::stepped_window::SteppedWindowModel;
use reference::strategy::{records, Capacity, RecordOp, Setup, MS, NS};
use reference::{expected_check, Model};

/// The request settled after a history: admitted `gap` after the history's
/// last instant with cost `estimate`, settled with cost `actual` a fraction
/// (`per_mille`) of the way to the end of its admission's span (property
/// 1), or `late` after its admission (property 2).
#[derive(Debug, Clone, Copy)]
struct Case {
    gap: u64,
    estimate: u64,
    actual: u64,
    per_mille: u64,
    late: u64,
}

fn case(s: &Setup, cap: u64) -> impl Strategy<Value = Case> {
    let actual = prop_oneof![Just(0), 0..=cap];
    let late = prop_oneof![Just(0), 0..=s.p / s.n, 0..=3 * s.p];
    (0..=2 * s.p, 1..=cap, actual, 0..=1000u64, late).prop_map(
        |(gap, estimate, actual, per_mille, late)| Case {
            gap,
            estimate,
            actual,
            per_mille,
            late,
        },
    )
}

/// A limit, a history of checks and forced records, and a settled request.
fn settles(gran: u64, capacity: Capacity) -> impl Strategy<Value = (Setup, Vec<RecordOp>, Case)> {
    records(gran, capacity).prop_flat_map(move |(s, ops)| {
        let cap = match capacity {
            Capacity::Burst => s.burst,
            Capacity::Limit => s.n,
        };
        (Just(s), Just(ops), case(&s, cap))
    })
}

/// Replays `ops` on a fresh state and on `model` alike; returns the state
/// and the last instant.
fn replay<A: Algorithm, M: Model>(
    alg: &A,
    model: &mut M,
    s: &Setup,
    ops: &[RecordOp],
) -> Result<(A::State, u64), TestCaseError> {
    let mut state = alg.new_state();
    let mut now = s.start;
    for op in ops {
        match *op {
            RecordOp::Record(e) => {
                now += e.dt;
                alg.record(&mut state, now, e.cost);
                model.record(now, e.cost);
            }
            RecordOp::Check(e) => {
                now += e.dt;
                if e.cost <= alg.capacity() {
                    let want = expected_check(model, now, e.cost);
                    prop_assert_eq!(check(alg, &mut state, now, e.cost)?, want);
                }
            }
        }
    }
    Ok((state, now))
}

/// Instants from `from` on at which two states are compared: the first
/// few nanoseconds, then every seventh of a period for three periods.
fn probes(s: &Setup, from: u64) -> impl Iterator<Item = u64> + '_ {
    (0..3)
        .map(move |d| from + d)
        .chain((0..=21).map(move |k| from + k * s.p / 7))
}

/// Property 1: check(estimate) + settle(actual) decides as the model that
/// admitted `actual` at the check's instant, when the settle comes before
/// `span_end(admitted_at)` (exclusive: the window has not moved).
fn settles_as_the_model<A: Algorithm, M: Model>(
    alg: &A,
    mut model: M,
    s: &Setup,
    ops: &[RecordOp],
    c: Case,
    span_end: impl Fn(u64) -> u64,
) -> Result<(), TestCaseError> {
    let (mut state, last) = replay(alg, &mut model, s, ops)?;
    let at = last + c.gap;
    let admits = |cost| alg.try_evaluate(&state, at, cost).map(|d| d.allowed);
    if !admits(c.estimate)? || !admits(c.actual)? {
        return Ok(());
    }
    prop_assert!(check(alg, &mut state, at, c.estimate)?.allowed);
    if c.actual > 0 {
        model.admit(at, c.actual);
    }
    let span = span_end(at).saturating_sub(at).max(1) - 1;
    let settle_at = at + span * c.per_mille / 1000;
    let settled = alg.settle(&mut state, at, settle_at, c.estimate, c.actual);
    prop_assert!(
        !matches!(settled, None | Some(Settled::Refunded { dropped: true })),
        "settle at {} answered {:?}",
        settle_at,
        settled
    );
    for t in probes(s, settle_at) {
        for cost in 0..=alg.capacity() {
            let got = alg.try_evaluate(&state, t, cost).unwrap();
            let want = expected_check(&mut model.clone(), t, cost);
            prop_assert_eq!(
                got,
                want,
                "at {} cost {}, settled at {}",
                t,
                cost,
                settle_at
            );
        }
    }
    Ok(())
}

/// Property 2: after check(estimate) and a refund settled any time later,
/// no later decision admits more than the model that never saw the request.
fn refunds_create_no_quota<A: Algorithm, M: Model>(
    alg: &A,
    mut model: M,
    s: &Setup,
    ops: &[RecordOp],
    c: Case,
) -> Result<(), TestCaseError> {
    let (mut state, last) = replay(alg, &mut model, s, ops)?;
    let at = last + c.gap;
    if !check(alg, &mut state, at, c.estimate)?.allowed {
        return Ok(());
    }
    let actual = c.actual.min(c.estimate);
    let settle_at = at + c.late;
    let settled = alg.settle(&mut state, at, settle_at, c.estimate, actual);
    prop_assert!(settled.is_some());
    for t in probes(s, settle_at) {
        for cost in 1..=alg.capacity() {
            let got = alg.try_evaluate(&state, t, cost).unwrap();
            let never_saw = expected_check(&mut model.clone(), t, cost);
            prop_assert!(
                !got.allowed || never_saw.allowed,
                "cost {} admitted at {} after a refund at {}, refused without the request",
                cost,
                t,
                settle_at
            );
        }
        let got = alg.peek(&state, t).remaining;
        let never_saw = expected_check(&mut model.clone(), t, 0).remaining;
        prop_assert!(
            got <= never_saw,
            "remaining {} > {} at {}",
            got,
            never_saw,
            t
        );
    }
    Ok(())
}

fn window_end(s: &Setup) -> impl Fn(u64) -> u64 + '_ {
    |t| (t / s.p + 1) * s.p
}

fn stepped(s: &Setup) -> SteppedWindow {
    SteppedWindow::new(s.rate(), Some(Duration::from_nanos(s.step))).unwrap()
}

fn tb_model(s: &Setup) -> TokenBucketModel {
    TokenBucketModel::new(s.n, s.p, s.burst)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn fixed_window_settles_as_the_model((s, ops, c) in settles(MS, Capacity::Limit)) {
        let model = FixedWindowModel::new(s.n, s.p);
        settles_as_the_model(&FixedWindow::new(s.rate()), model, &s, &ops, c, window_end(&s))?;
    }

    #[test]
    fn sliding_counter_settles_as_the_model((s, ops, c) in settles(NS, Capacity::Limit)) {
        let model = SlidingCounterModel::new(s.n, s.p);
        let alg = SlidingWindowCounter::new(s.rate());
        settles_as_the_model(&alg, model, &s, &ops, c, window_end(&s))?;
    }

    #[test]
    fn sliding_log_settles_as_the_model((s, ops, c) in settles(NS, Capacity::Limit)) {
        let model = SlidingLogModel::new(s.n, s.p);
        let alg = SlidingWindowLog::new(s.rate());
        settles_as_the_model(&alg, model, &s, &ops, c, |t| t + s.p)?;
    }

    #[test]
    fn stepped_window_settles_as_the_model((s, ops, c) in settles(MS, Capacity::Limit)) {
        let model = SteppedWindowModel::new(s.n, s.p, s.step);
        // Still in play: the request's step has not left the window.
        let end = |t: u64| (t + s.p).saturating_sub(2 * s.step);
        settles_as_the_model(&stepped(&s), model, &s, &ops, c, end)?;
    }

    #[test]
    fn token_bucket_settles_as_the_model((s, ops, c) in settles(NS, Capacity::Burst)) {
        let alg = TokenBucket::new(s.rate(), s.burst).unwrap();
        settles_as_the_model(&alg, tb_model(&s), &s, &ops, c, |t| t + 3 * s.p)?;
    }

    #[test]
    fn wide_token_bucket_settles_as_the_model((s, ops, c) in settles(NS, Capacity::Burst)) {
        let alg = TokenBucket::<Wide>::with_storage(s.rate(), s.burst).unwrap();
        settles_as_the_model(&alg, tb_model(&s), &s, &ops, c, |t| t + 3 * s.p)?;
    }

    #[test]
    fn gcra_settles_as_the_token_bucket_model((s, ops, c) in settles(NS, Capacity::Burst)) {
        let alg = Gcra::new(s.rate(), s.burst).unwrap();
        settles_as_the_model(&alg, tb_model(&s), &s, &ops, c, |t| t + 3 * s.p)?;
    }

    #[test]
    fn leaky_bucket_settles_as_the_model((s, ops, c) in settles(NS, Capacity::Burst)) {
        let alg = LeakyBucket::new(s.rate(), s.burst).unwrap();
        let model = LeakyBucketModel::new(s.n, s.p, s.burst);
        settles_as_the_model(&alg, model, &s, &ops, c, |t| t + 3 * s.p)?;
    }

    #[test]
    fn fixed_window_refunds_create_no_quota((s, ops, c) in settles(MS, Capacity::Limit)) {
        let model = FixedWindowModel::new(s.n, s.p);
        refunds_create_no_quota(&FixedWindow::new(s.rate()), model, &s, &ops, c)?;
    }

    #[test]
    fn sliding_counter_refunds_create_no_quota((s, ops, c) in settles(NS, Capacity::Limit)) {
        let model = SlidingCounterModel::new(s.n, s.p);
        refunds_create_no_quota(&SlidingWindowCounter::new(s.rate()), model, &s, &ops, c)?;
    }

    #[test]
    fn sliding_log_refunds_create_no_quota((s, ops, c) in settles(NS, Capacity::Limit)) {
        let model = SlidingLogModel::new(s.n, s.p);
        refunds_create_no_quota(&SlidingWindowLog::new(s.rate()), model, &s, &ops, c)?;
    }

    #[test]
    fn stepped_window_refunds_create_no_quota((s, ops, c) in settles(MS, Capacity::Limit)) {
        let model = SteppedWindowModel::new(s.n, s.p, s.step);
        refunds_create_no_quota(&stepped(&s), model, &s, &ops, c)?;
    }

    #[test]
    fn token_bucket_refunds_create_no_quota((s, ops, c) in settles(NS, Capacity::Burst)) {
        let alg = TokenBucket::new(s.rate(), s.burst).unwrap();
        refunds_create_no_quota(&alg, tb_model(&s), &s, &ops, c)?;
    }

    #[test]
    fn gcra_refunds_create_no_quota((s, ops, c) in settles(NS, Capacity::Burst)) {
        let alg = Gcra::new(s.rate(), s.burst).unwrap();
        refunds_create_no_quota(&alg, tb_model(&s), &s, &ops, c)?;
    }

    #[test]
    fn leaky_bucket_refunds_create_no_quota((s, ops, c) in settles(NS, Capacity::Burst)) {
        let alg = LeakyBucket::new(s.rate(), s.burst).unwrap();
        let model = LeakyBucketModel::new(s.n, s.p, s.burst);
        refunds_create_no_quota(&alg, model, &s, &ops, c)?;
    }
}

fn per_10s(n: u64) -> Rate {
    Rate::new(n, Duration::from_secs(10)).unwrap()
}

#[test]
fn a_refund_into_a_window_that_has_ended_is_dropped() {
    let w = FixedWindow::new(per_10s(10));
    let mut state = w.new_state();
    assert!(w.check(&mut state, S, 8).unwrap().allowed);
    // Settled in the next window: the 8 stand in the old one, which no
    // longer counts; nothing goes into the new one.
    let settled = w.settle(&mut state, S, 11 * S, 8, 1);
    assert_eq!(settled, Some(Settled::Refunded { dropped: true }));
    assert_eq!(w.peek(&state, 11 * S).remaining, 10);
    assert!(w.check(&mut state, 11 * S, 10).unwrap().allowed);
}

#[test]
fn an_extra_charge_after_the_window_goes_to_the_current_one() {
    let w = FixedWindow::new(per_10s(10));
    let mut state = w.new_state();
    assert!(w.check(&mut state, S, 2).unwrap().allowed);
    assert_eq!(
        w.settle(&mut state, S, 12 * S, 2, 15),
        Some(Settled::Charged)
    );
    // 13 over in the window [10 s, 20 s): in debt until it ends.
    let refused = w.check(&mut state, 13 * S, 1).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Duration::from_secs(7));
}

#[test]
fn a_charge_in_debt_gives_the_exact_retry_after_on_a_bucket() {
    // 1 a second, 5 at once: estimated 2, used 9 — 4 over the burst.
    let g = Gcra::new(Rate::per_second(1).unwrap(), 5).unwrap();
    let mut state = g.new_state();
    assert!(g.check(&mut state, 0, 2).unwrap().allowed);
    assert_eq!(g.settle(&mut state, 0, S / 2, 2, 9), Some(Settled::Charged));
    let refused = g.check(&mut state, S, 1).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Duration::from_secs(4));
    assert!(g.check(&mut state, 5 * S, 1).unwrap().allowed);
}

#[test]
fn a_bucket_refund_never_fills_beyond_the_burst() {
    let tb = TokenBucket::new(Rate::per_second(1).unwrap(), 5).unwrap();
    let mut state = tb.new_state();
    assert!(tb.check(&mut state, 0, 3).unwrap().allowed);
    // Three seconds later the bucket is full again: the refund adds nothing.
    assert_eq!(
        tb.settle(&mut state, 0, 3 * S, 3, 0),
        Some(Settled::Refunded { dropped: false })
    );
    assert_eq!(tb.peek(&state, 3 * S).remaining, 5);
    assert!(tb.check(&mut state, 3 * S, 5).unwrap().allowed);
    assert!(!tb.check(&mut state, 3 * S, 1).unwrap().allowed);
}

#[test]
fn a_sliding_log_refund_comes_off_the_admission_mark() {
    let log = SlidingWindowLog::new(per_10s(10));
    let mut state = log.new_state();
    assert!(log.check(&mut state, S, 6).unwrap().allowed);
    assert!(log.check(&mut state, 2 * S, 4).unwrap().allowed);
    assert_eq!(
        log.settle(&mut state, S, 3 * S, 6, 1),
        Some(Settled::Refunded { dropped: false })
    );
    // 5 in the window; at 11 s the 1 s mark (now holding 1) leaves.
    assert_eq!(log.peek(&state, 3 * S).remaining, 5);
    assert_eq!(log.peek(&state, 11 * S).remaining, 6);
    // Settled once the mark has left the window: dropped.
    let mut later = log.new_state();
    assert!(log.check(&mut later, S, 6).unwrap().allowed);
    assert_eq!(
        log.settle(&mut later, S, 11 * S, 6, 0),
        Some(Settled::Refunded { dropped: true })
    );
}

#[test]
fn concurrency_does_not_settle() {
    let c = Concurrency::new(2, Duration::from_secs(60)).unwrap();
    let mut state = c.new_state();
    assert!(c.check(&mut state, 0, 1).unwrap().allowed);
    let before = state.clone();
    assert_eq!(c.settle(&mut state, 0, S, 1, 0), None);
    assert_eq!(c.settle(&mut state, 0, S, 1, 1), None);
    assert_eq!(state, before);
}
