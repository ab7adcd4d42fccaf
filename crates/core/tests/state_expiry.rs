//! `expires_at` is safe for eviction: from that instant on, a state decides
//! exactly as a fresh one (every cost, and `next_available`), so a store may
//! forget it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reference;

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::algorithm::{
    Concurrency, FixedWindow, Gcra, LeakyBucket, SlidingWindowCounter, SlidingWindowLog,
    SteppedWindow, TokenBucket,
};

use reference::harness::check_expiry;
use reference::strategy::{trace, Capacity, NS};

macro_rules! expiry {
    ($($name:ident: $capacity:expr, |$s:ident| $alg:expr;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]
            $(
                #[test]
                fn $name(($s, t) in trace(NS, $capacity)) {
                    check_expiry(&$alg, &$s, &t)?;
                }
            )*
        }
    };
}

expiry! {
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
