//! Property 5: cost 0 is a peek (always allowed, changes nothing, and its
//! `remaining` says whether a unit request would pass); a cost above capacity
//! is `LimitError::CostTooLarge` from every operation and changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reference;

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::algorithm::{
    Concurrency, FixedWindow, Gcra, LeakyBucket, SlidingWindowCounter, SlidingWindowLog,
    SteppedWindow, TokenBucket,
};
use tollgate_core::{Algorithm, LimitError};

use reference::harness::check_cost_rules;
use reference::strategy::{trace, Capacity, NS};

macro_rules! cost_rules {
    ($($name:ident: $capacity:expr, |$s:ident| $alg:expr;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]
            $(
                #[test]
                fn $name(($s, t) in trace(NS, $capacity)) {
                    check_cost_rules(&$alg, &$s, &t)?;
                }
            )*
        }
    };
}

cost_rules! {
    token_bucket: Capacity::Burst, |s| TokenBucket::new(s.rate(), s.burst).unwrap();
    gcra: Capacity::Burst, |s| Gcra::new(s.rate(), s.burst).unwrap();
    leaky_bucket: Capacity::Burst, |s| LeakyBucket::new(s.rate(), s.burst).unwrap();
    fixed_window: Capacity::Limit, |s| FixedWindow::new(s.rate());
    sliding_log: Capacity::Limit, |s| SlidingWindowLog::new(s.rate());
    sliding_counter: Capacity::Limit, |s| SlidingWindowCounter::new(s.rate());
    stepped_window: Capacity::Limit,
        |s| SteppedWindow::new(s.rate(), Some(Duration::from_nanos(s.step))).unwrap();
    concurrency: Capacity::Limit, |s| Concurrency::new(s.n, s.rate().period()).unwrap();
}

#[test]
fn concurrency_takes_no_reservations() {
    let alg = Concurrency::new(3, Duration::from_secs(1)).unwrap();
    let mut state = alg.new_state();
    let before = state.clone();
    assert_eq!(
        alg.reserve(&mut state, 0, 1, None),
        Err(LimitError::ReservationUnsupported)
    );
    assert_eq!(state, before);
}
