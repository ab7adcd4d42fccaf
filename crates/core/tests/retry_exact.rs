//! Property 3: `retry_after` is exact. A rejected request retried at
//! `now + retry_after` (on a copy of the state) is admitted; 1 ms earlier
//! (ms-granular traces) and 1 ns earlier (ns-granular traces) it is not.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reference;

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::algorithm::{
    Concurrency, FixedWindow, Gcra, LeakyBucket, SlidingWindowCounter, SlidingWindowLog,
    SteppedWindow, TokenBucket,
};

use reference::harness::check_retry_exact;
use reference::strategy::{trace, Capacity, MS, NS};

macro_rules! retry_exact {
    ($($name:ident: $capacity:expr, $gran:expr, |$s:ident| $alg:expr;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(192))]
            $(
                #[test]
                fn $name(($s, t) in trace($gran, $capacity)) {
                    check_retry_exact(&$alg, &$s, &t, $gran)?;
                }
            )*
        }
    };
}

retry_exact! {
    token_bucket_ms: Capacity::Burst, MS, |s| TokenBucket::new(s.rate(), s.burst).unwrap();
    token_bucket_ns: Capacity::Burst, NS, |s| TokenBucket::new(s.rate(), s.burst).unwrap();
    gcra_ms: Capacity::Burst, MS, |s| Gcra::new(s.rate(), s.burst).unwrap();
    gcra_ns: Capacity::Burst, NS, |s| Gcra::new(s.rate(), s.burst).unwrap();
    leaky_bucket_ms: Capacity::Burst, MS, |s| LeakyBucket::new(s.rate(), s.burst).unwrap();
    leaky_bucket_ns: Capacity::Burst, NS, |s| LeakyBucket::new(s.rate(), s.burst).unwrap();
    fixed_window_ms: Capacity::Limit, MS, |s| FixedWindow::new(s.rate());
    fixed_window_ns: Capacity::Limit, NS, |s| FixedWindow::new(s.rate());
    sliding_log_ms: Capacity::Limit, MS, |s| SlidingWindowLog::new(s.rate());
    sliding_log_ns: Capacity::Limit, NS, |s| SlidingWindowLog::new(s.rate());
    sliding_counter_ms: Capacity::Limit, MS, |s| SlidingWindowCounter::new(s.rate());
    sliding_counter_ns: Capacity::Limit, NS, |s| SlidingWindowCounter::new(s.rate());
    stepped_window_ms: Capacity::Limit, MS,
        |s| SteppedWindow::new(s.rate(), Some(Duration::from_nanos(s.step))).unwrap();
    stepped_window_ns: Capacity::Limit, NS,
        |s| SteppedWindow::new(s.rate(), Some(Duration::from_nanos(s.step))).unwrap();
    concurrency_ms: Capacity::Limit, MS, |s| Concurrency::new(s.n, s.rate().period()).unwrap();
    concurrency_ns: Capacity::Limit, NS, |s| Concurrency::new(s.n, s.rate().period()).unwrap();
}
