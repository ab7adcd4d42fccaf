//! Forced records (`Algorithm::record`, issue 22's "usage is recorded even
//! when the limit is exceeded"): property tests of every algorithm that can
//! merge usage against its reference model, extended with `record`. After
//! any interleaving of checks and records every decision equals the
//! model's, and a refused check passes exactly at `now + retry_after` — a
//! debt is paid back exactly when the model says. Worked examples below pin
//! down what a record does to each state (docs/semantics.md, "Recording
//! usage").

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reference;

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::algorithm::{
    Concurrency, FixedWindow, Gcra, LeakyBucket, SlidingWindowCounter, SlidingWindowLog,
    SteppedWindow, TokenBucket, Wide,
};
use tollgate_core::time::NANOS_PER_SEC as S;
use tollgate_core::{Algorithm, Decision, Rate};

use reference::buckets::{LeakyBucketModel, TokenBucketModel};
use reference::fixed_window::FixedWindowModel;
use reference::harness::{check, run_records_against_model};
use reference::sliding_counter::SlidingCounterModel;
use reference::sliding_log::SlidingLogModel;
use reference::stepped_window::SteppedWindowModel;
use reference::strategy::{records, Capacity, RecordOp, Setup, MS, NS};

fn stepped(s: &Setup) -> SteppedWindow {
    SteppedWindow::new(s.rate(), Some(Duration::from_nanos(s.step))).unwrap()
}

fn tb_model(s: &Setup) -> TokenBucketModel {
    TokenBucketModel::new(s.n, s.p, s.burst)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fixed_window_records_as_the_model((s, ops) in records(MS, Capacity::Limit)) {
        let model = FixedWindowModel::new(s.n, s.p);
        run_records_against_model(&FixedWindow::new(s.rate()), model, &s, &ops, true)?;
    }

    #[test]
    fn sliding_counter_records_as_the_model((s, ops) in records(NS, Capacity::Limit)) {
        let model = SlidingCounterModel::new(s.n, s.p);
        run_records_against_model(&SlidingWindowCounter::new(s.rate()), model, &s, &ops, true)?;
    }

    #[test]
    fn sliding_log_records_as_the_model((s, ops) in records(NS, Capacity::Limit)) {
        let model = SlidingLogModel::new(s.n, s.p);
        run_records_against_model(&SlidingWindowLog::new(s.rate()), model, &s, &ops, false)?;
    }

    #[test]
    fn sliding_log_records_as_the_model_ms((s, ops) in records(MS, Capacity::Limit)) {
        let model = SlidingLogModel::new(s.n, s.p);
        run_records_against_model(&SlidingWindowLog::new(s.rate()), model, &s, &ops, false)?;
    }

    #[test]
    fn stepped_window_records_as_the_model((s, ops) in records(MS, Capacity::Limit)) {
        let model = SteppedWindowModel::new(s.n, s.p, s.step);
        run_records_against_model(&stepped(&s), model, &s, &ops, true)?;
    }

    #[test]
    fn token_bucket_records_as_the_model((s, ops) in records(NS, Capacity::Burst)) {
        let alg = TokenBucket::new(s.rate(), s.burst).unwrap();
        run_records_against_model(&alg, tb_model(&s), &s, &ops, true)?;
    }

    #[test]
    fn wide_token_bucket_records_as_the_model((s, ops) in records(NS, Capacity::Burst)) {
        let alg = TokenBucket::<Wide>::with_storage(s.rate(), s.burst).unwrap();
        run_records_against_model(&alg, tb_model(&s), &s, &ops, true)?;
    }

    #[test]
    fn gcra_records_as_the_token_bucket_model((s, ops) in records(NS, Capacity::Burst)) {
        let alg = Gcra::new(s.rate(), s.burst).unwrap();
        run_records_against_model(&alg, tb_model(&s), &s, &ops, true)?;
    }

    #[test]
    fn gcra_records_as_the_token_bucket_model_ms((s, ops) in records(MS, Capacity::Burst)) {
        let alg = Gcra::new(s.rate(), s.burst).unwrap();
        run_records_against_model(&alg, tb_model(&s), &s, &ops, true)?;
    }

    #[test]
    fn leaky_bucket_records_as_the_model((s, ops) in records(NS, Capacity::Burst)) {
        let alg = LeakyBucket::new(s.rate(), s.burst).unwrap();
        let model = LeakyBucketModel::new(s.n, s.p, s.burst);
        run_records_against_model(&alg, model, &s, &ops, true)?;
    }

    /// Property 2 with records: token bucket and GCRA report the same
    /// usage and decide alike in debt; the leaky bucket admits the same.
    #[test]
    fn buckets_in_debt_decide_alike((s, ops) in records(NS, Capacity::Burst)) {
        let tb = TokenBucket::new(s.rate(), s.burst).unwrap();
        let g = Gcra::new(s.rate(), s.burst).unwrap();
        let lb = LeakyBucket::new(s.rate(), s.burst).unwrap();
        let (mut tbs, mut gs, mut lbs) = (tb.new_state(), g.new_state(), lb.new_state());
        let mut now = s.start;
        for op in &ops {
            match *op {
                RecordOp::Record(e) => {
                    now += e.dt;
                    let a = tb.record(&mut tbs, now, e.cost);
                    prop_assert_eq!(a, g.record(&mut gs, now, e.cost));
                    prop_assert_eq!(a, lb.record(&mut lbs, now, e.cost));
                }
                RecordOp::Check(e) => {
                    now += e.dt;
                    if e.cost > s.burst {
                        continue;
                    }
                    let a = check(&tb, &mut tbs, now, e.cost)?;
                    let b = check(&g, &mut gs, now, e.cost)?;
                    let c = check(&lb, &mut lbs, now, e.cost)?;
                    prop_assert_eq!(a, b, "gcra disagrees at {}", now);
                    prop_assert_eq!(a, Decision { delay: a.delay, ..c }, "leaky bucket at {}", now);
                }
            }
        }
    }
}

fn per_10s(n: u64) -> Rate {
    Rate::new(n, Duration::from_secs(10)).unwrap()
}

/// The first instant at or after `from` at which `alg` admits a unit
/// request, found by trying every millisecond (the examples' granularity).
fn first_unit_admit<A: Algorithm>(alg: &A, state: &A::State, from: u64) -> u64 {
    let ms = S / 1_000;
    (0..)
        .map(|i| from + i * ms)
        .find(|&t| alg.evaluate(state, t, 1).allowed)
        .unwrap()
}

#[test]
fn a_window_counts_beyond_its_limit_until_it_ends() {
    let alg = FixedWindow::new(per_10s(5));
    let mut state = alg.new_state();
    assert_eq!(alg.record(&mut state, S, 3), Some(3));
    assert_eq!(alg.record(&mut state, 2 * S, 9), Some(12));
    let refused = alg.check(&mut state, 3 * S, 1).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.remaining, 0);
    assert_eq!(refused.retry_after, Duration::from_secs(7));
    assert_eq!(first_unit_admit(&alg, &state, 3 * S), 10 * S);
    // Usage in a window that has ended changes nothing.
    alg.check(&mut state, 11 * S, 1).unwrap();
    assert_eq!(alg.record(&mut state, 9 * S, 50), Some(1));
}

#[test]
fn a_sliding_counter_in_debt_waits_for_the_weighted_count_to_fall() {
    // 10 per 10 s; 20 recorded in the first window.
    let alg = SlidingWindowCounter::new(per_10s(10));
    let mut state = alg.new_state();
    assert_eq!(alg.record(&mut state, S, 20), Some(20));
    // In the next window, floor(20 × (10 − e) / 10) + 1 ≤ 10 once e > 5 s.
    assert_eq!(first_unit_admit(&alg, &state, 2 * S), 15_001 * (S / 1_000));
    assert_eq!(alg.record(&mut state, 15 * S, 0), Some(10));
}

#[test]
fn a_gcra_debt_is_its_tat_past_the_burst() {
    // One a second, burst 4: 10 recorded at 0 leave the TAT at 10 s, six
    // intervals past the tolerance.
    let alg = Gcra::new(per_10s(10), 4).unwrap();
    let mut state = alg.new_state();
    assert_eq!(alg.record(&mut state, 0, 10), Some(10));
    // Time in units of 1/n ns, with n reduced to 1 here.
    assert_eq!(state.tat(), u128::from(10 * S));
    assert_eq!(first_unit_admit(&alg, &state, 0), 7 * S);
    assert_eq!(alg.record(&mut state, 7 * S, 0), Some(3));
}

#[test]
fn a_token_bucket_goes_below_zero_and_refills_from_there() {
    let alg = TokenBucket::new(per_10s(10), 4).unwrap();
    let mut state = alg.new_state();
    assert_eq!(alg.record(&mut state, 0, 10), Some(10));
    // −6 tokens: a unit request needs 7 s of refill.
    let refused = alg.check(&mut state, 0, 1).unwrap();
    assert_eq!(refused.retry_after, Duration::from_secs(7));
    assert_eq!(refused.reset_after, Duration::from_secs(10));
    assert_eq!(first_unit_admit(&alg, &state, 0), 7 * S);
}

#[test]
fn a_leaky_queue_above_its_burst_delays_the_next_admission() {
    let alg = LeakyBucket::new(per_10s(10), 4).unwrap();
    let mut state = alg.new_state();
    assert_eq!(alg.record(&mut state, 0, 10), Some(10));
    assert_eq!(first_unit_admit(&alg, &state, 0), 7 * S);
    let admitted = alg.check(&mut state, 7 * S, 1).unwrap();
    assert!(admitted.allowed);
    // Three queued ahead of it.
    assert_eq!(admitted.delay, Duration::from_secs(3));
}

#[test]
fn concurrency_cannot_record() {
    let alg = Concurrency::new(3, Duration::from_secs(10)).unwrap();
    let mut state = alg.new_state();
    assert_eq!(alg.record(&mut state, 0, 1), None);
    assert_eq!(state, alg.new_state());
}

#[test]
fn huge_records_saturate_and_still_decide() {
    let big = u64::MAX;
    let fixed = FixedWindow::new(per_10s(5));
    let mut state = fixed.new_state();
    fixed.record(&mut state, 0, big);
    fixed.record(&mut state, 0, big);
    assert!(!fixed.check(&mut state, 0, 5).unwrap().allowed);
    assert!(fixed.check(&mut state, 10 * S, 5).unwrap().allowed);

    let counter = SlidingWindowCounter::new(per_10s(5));
    let mut state = counter.new_state();
    counter.record(&mut state, 0, big);
    counter.record(&mut state, 0, big);
    assert!(!counter.check(&mut state, 15 * S, 5).unwrap().allowed);
    assert!(counter.check(&mut state, 20 * S, 5).unwrap().allowed);

    let log = SlidingWindowLog::new(per_10s(5));
    let mut state = log.new_state();
    log.record(&mut state, 0, big);
    log.record(&mut state, 1, big);
    assert!(!log.check(&mut state, 2, 1).unwrap().allowed);

    let stepped = SteppedWindow::new(per_10s(5), Some(Duration::from_secs(1))).unwrap();
    let mut state = stepped.new_state();
    stepped.record(&mut state, 0, big);
    stepped.record(&mut state, 0, big);
    assert!(!stepped.check(&mut state, S, 1).unwrap().allowed);

    let tb = TokenBucket::new(per_10s(10), 4).unwrap();
    let mut state = tb.new_state();
    tb.record(&mut state, 0, big);
    tb.record(&mut state, 0, big);
    assert!(!tb.check(&mut state, 0, 1).unwrap().allowed);
    let wide = TokenBucket::<Wide>::with_storage(per_10s(10), 4).unwrap();
    let mut state = wide.new_state();
    wide.record(&mut state, 0, big);
    wide.record(&mut state, 0, big);
    assert!(!wide.check(&mut state, 0, 1).unwrap().allowed);

    let g = Gcra::new(per_10s(10), 4).unwrap();
    let mut state = g.new_state();
    g.record(&mut state, 0, big);
    g.record(&mut state, 0, big);
    assert!(!g.check(&mut state, u64::MAX / 2, 1).unwrap().allowed);

    let lb = LeakyBucket::new(per_10s(10), 4).unwrap();
    let mut state = lb.new_state();
    lb.record(&mut state, 0, big);
    lb.record(&mut state, 0, big);
    assert!(!lb.check(&mut state, u64::MAX / 2, 1).unwrap().allowed);
}
