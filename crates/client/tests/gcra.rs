//! The GCRA waiter on a manual clock: bursts, then one permit per emission
//! interval, each call at the earliest instant a token bucket with the same
//! rate and burst would have its tokens.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use proptest::prelude::*;
use tollgate_client::clock::ManualClock;
use tollgate_client::waiter::GcraWaiter;
use tollgate_core::Rate;

use support::{call, run, BucketModel, Call, MS, SEC};

fn gcra(limit: u64, period: u64, burst: u64) -> GcraWaiter<ManualClock> {
    GcraWaiter::with_burst(Rate::from_nanos(limit, period).unwrap(), burst)
        .unwrap()
        .with_clock(ManualClock::new(0))
}

#[test]
fn bursts_then_paces_at_the_emission_interval() {
    let waiter = gcra(4, SEC, 2);
    let calls: Vec<Call> = (0..6).map(|_| call(0, 1)).collect();
    assert_eq!(
        run(&waiter, &calls),
        [0, 0, 250 * MS, 500 * MS, 750 * MS, SEC]
    );
}

#[test]
fn the_default_burst_is_the_limit() {
    let waiter = GcraWaiter::new(Rate::per_second(3).unwrap())
        .unwrap()
        .with_clock(ManualClock::new(0));
    assert_eq!(waiter.capacity(), 3);
    let calls: Vec<Call> = (0..5).map(|_| call(0, 1)).collect();
    assert_eq!(run(&waiter, &calls), [0, 0, 0, 333_333_334, 666_666_667]);
}

#[test]
fn exact_rate_over_a_long_run() {
    // 7 per second, bursts of 2, all waiting from the start: after the
    // first two, call k goes at ⌈(k−1)·10⁹/7⌉ ns, with no drift from the
    // rounding to whole nanoseconds.
    let waiter = gcra(7, SEC, 2);
    let calls: Vec<Call> = (0..2_000).map(|_| call(0, 1)).collect();
    let released = run(&waiter, &calls);
    for (k, at) in released.iter().enumerate() {
        let k = k as u64;
        assert_eq!(*at, (k.saturating_sub(1) * SEC).div_ceil(7), "call {k}");
    }
}

fn setup() -> impl Strategy<Value = (u64, u64, u64, Vec<Call>)> {
    (1..=10u64, MS..=50 * MS, 1..=6u64).prop_flat_map(|(limit, period, burst)| {
        let steps = prop::collection::vec((0..=period, 1..=burst, any::<bool>()), 1..60);
        let calls = steps.prop_map(|steps| {
            let mut arrival = 0;
            steps
                .into_iter()
                .map(|(gap, permits, together)| {
                    if !together {
                        arrival += gap;
                    }
                    call(arrival, permits)
                })
                .collect::<Vec<_>>()
        });
        (Just(limit), Just(period), Just(burst), calls)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Against the reference token bucket: first come, first served, each
    /// call at the earliest instant its tokens are there.
    #[test]
    fn matches_the_token_bucket_model((limit, period, burst, calls) in setup()) {
        let waiter = gcra(limit, period, burst);
        let expected = BucketModel::new(limit, period, burst).run(&calls);
        prop_assert_eq!(run(&waiter, &calls), expected);
    }
}
