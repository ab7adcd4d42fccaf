//! `admit` is exactly `evaluate` then, when admitted, `commit`: the same
//! decision and the same state afterwards, for every algorithm, on random
//! traces that mix checks with reservations (which put the states of the
//! windows ahead of `now`). Algorithms may override `admit` to share work
//! between the two; this holds them to it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reference;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate_core::algorithm::{
    Concurrency, FixedWindow, Gcra, LeakyBucket, SlidingWindowCounter, SlidingWindowLog,
    SteppedWindow, TokenBucket,
};
use tollgate_core::Algorithm;

use reference::strategy::{reservations, Capacity, Op, Setup, MS, NS};

fn same_as_evaluate_then_commit<A: Algorithm>(
    alg: &A,
    s: &Setup,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let mut state = alg.new_state();
    let mut now = s.start;
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Check(e) => {
                now += e.dt;
                if e.cost == 0 || e.cost > alg.capacity() {
                    continue;
                }
                let mut by_parts = state.clone();
                let mut expected = alg.evaluate(&by_parts, now, e.cost);
                if expected.allowed {
                    expected.lease = alg.commit(&mut by_parts, now, e.cost);
                }
                let decision = alg.admit(&mut state, now, e.cost);
                prop_assert_eq!(decision, expected, "op {} at {} cost {}", i, now, e.cost);
                prop_assert_eq!(
                    format!("{state:?}"),
                    format!("{by_parts:?}"),
                    "state after op {}",
                    i
                );
            }
            Op::Reserve(e, max_wait) => {
                now += e.dt;
                if e.cost <= alg.capacity() {
                    let _ =
                        alg.reserve(&mut state, now, e.cost, max_wait.map(Duration::from_nanos));
                }
            }
        }
    }
    Ok(())
}

macro_rules! admit {
    ($($name:ident: $gran:expr, $capacity:expr, |$s:ident| $alg:expr;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]
            $(
                #[test]
                fn $name(($s, ops) in reservations($gran, $capacity)) {
                    same_as_evaluate_then_commit(&$alg, &$s, &ops)?;
                }
            )*
        }
    };
}

admit! {
    token_bucket: NS, Capacity::Burst, |s| TokenBucket::new(s.rate(), s.burst).unwrap();
    gcra: NS, Capacity::Burst, |s| Gcra::new(s.rate(), s.burst).unwrap();
    leaky_bucket: NS, Capacity::Burst, |s| LeakyBucket::new(s.rate(), s.burst).unwrap();
    fixed_window: NS, Capacity::Limit, |s| FixedWindow::new(s.rate());
    sliding_log_ns: NS, Capacity::Limit, |s| SlidingWindowLog::new(s.rate());
    sliding_log_ms: MS, Capacity::Limit, |s| SlidingWindowLog::new(s.rate());
    sliding_counter: NS, Capacity::Limit, |s| SlidingWindowCounter::new(s.rate());
    stepped_window_ns: NS, Capacity::Limit,
        |s| SteppedWindow::new(s.rate(), Some(Duration::from_nanos(s.step))).unwrap();
    stepped_window_ms: MS, Capacity::Limit,
        |s| SteppedWindow::new(s.rate(), Some(Duration::from_nanos(s.step))).unwrap();
    concurrency: NS, Capacity::Limit, |s| Concurrency::new(s.n, s.rate().period()).unwrap();
}
