//! `debt` is what its definition says, for every algorithm, on random traces
//! that mix checks with reservations: a fresh state owes nothing; a state
//! owes exactly the unit-cost requests a fresh state would admit right now
//! and it would refuse; it is refusing exactly when a request of cost 1 is
//! refused now; and a state that owes nothing decides every cost as a fresh
//! one does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reference;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate_core::algorithm::{
    Concurrency, Debt, FixedWindow, Gcra, LeakyBucket, SlidingWindowCounter, SlidingWindowLog,
    SteppedWindow, TokenBucket,
};
use tollgate_core::Algorithm;

use reference::strategy::{reservations, Capacity, Op, Setup, MS, NS};

/// The largest cost `state` admits at `now` (admission is monotone in cost).
fn admits<A: Algorithm>(alg: &A, state: &A::State, now: u64) -> u64 {
    let (mut lo, mut hi) = (0, alg.capacity());
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if alg.evaluate(state, now, mid).allowed {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

fn holds_to_its_definition<A: Algorithm>(
    alg: &A,
    state: &A::State,
    now: u64,
    at: &str,
) -> Result<(), TestCaseError> {
    let fresh = alg.new_state();
    prop_assert_eq!(alg.debt(&fresh, now), Debt::NONE, "fresh, {}", at);
    let debt = alg.debt(state, now);
    let units = admits(alg, &fresh, now) - admits(alg, state, now);
    prop_assert_eq!(debt.units, units, "units, {}", at);
    let refuses_one = alg.capacity() > 0 && !alg.evaluate(state, now, 1).allowed;
    prop_assert_eq!(debt.refusing, refuses_one, "refusing, {}", at);
    if debt == Debt::NONE {
        for cost in 1..=alg.capacity().min(8) {
            prop_assert_eq!(
                alg.evaluate(state, now, cost).allowed,
                alg.evaluate(&fresh, now, cost).allowed,
                "owing nothing, cost {} is decided as fresh, {}",
                cost,
                at
            );
        }
    }
    Ok(())
}

fn debt_on_trace<A: Algorithm>(alg: &A, s: &Setup, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut state = alg.new_state();
    let mut now = s.start;
    for (i, op) in ops.iter().enumerate() {
        let e = match *op {
            Op::Check(e) | Op::Reserve(e, _) => e,
        };
        now += e.dt;
        holds_to_its_definition(alg, &state, now, &format!("before op {i} at {now}"))?;
        if e.cost > alg.capacity() {
            continue;
        }
        match *op {
            Op::Check(_) => {
                alg.check(&mut state, now, e.cost).unwrap();
            }
            Op::Reserve(_, max_wait) => {
                let _ = alg.reserve(&mut state, now, e.cost, max_wait.map(Duration::from_nanos));
            }
        }
        holds_to_its_definition(alg, &state, now, &format!("after op {i} at {now}"))?;
    }
    Ok(())
}

macro_rules! debt {
    ($($name:ident: $gran:expr, $capacity:expr, |$s:ident| $alg:expr;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]
            $(
                #[test]
                fn $name(($s, ops) in reservations($gran, $capacity)) {
                    debt_on_trace(&$alg, &$s, &ops)?;
                }
            )*
        }
    };
}

debt! {
    token_bucket: NS, Capacity::Burst, |s| TokenBucket::new(s.rate(), s.burst).unwrap();
    gcra: NS, Capacity::Burst, |s| Gcra::new(s.rate(), s.burst).unwrap();
    leaky_bucket: NS, Capacity::Burst, |s| LeakyBucket::new(s.rate(), s.burst).unwrap();
    fixed_window: NS, Capacity::Limit, |s| FixedWindow::new(s.rate());
    sliding_log: MS, Capacity::Limit, |s| SlidingWindowLog::new(s.rate());
    sliding_counter: NS, Capacity::Limit, |s| SlidingWindowCounter::new(s.rate());
    stepped_window: MS, Capacity::Limit,
        |s| SteppedWindow::new(s.rate(), Some(Duration::from_nanos(s.step))).unwrap();
    concurrency: NS, Capacity::Limit, |s| Concurrency::new(s.n, s.rate().period()).unwrap();
}
