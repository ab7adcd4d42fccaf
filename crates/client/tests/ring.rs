//! The ring waiter on a manual clock: exactly `N` per interval, each call at
//! the earliest instant the window rule allows, and the balanced start.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use proptest::prelude::*;
use tollgate_client::clock::{Clock, ManualClock};
use tollgate_client::waiter::RingWaiter;
use tollgate_core::Rate;

use support::{assert_window, call, grants, run, window_model, Call, MS, SEC};

fn ring(limit: u64, period: u64, start: u64) -> RingWaiter<ManualClock> {
    RingWaiter::new(Rate::from_nanos(limit, period).unwrap())
        .unwrap()
        .with_clock(ManualClock::new(start))
}

fn balanced(limit: u64, period: u64, start: u64) -> RingWaiter<ManualClock> {
    RingWaiter::balanced(Rate::from_nanos(limit, period).unwrap())
        .unwrap()
        .with_clock(ManualClock::new(start))
}

#[test]
fn exactly_n_per_interval_over_a_long_run() {
    // 3 per second, 3,000 calls all waiting from the start: every second
    // releases exactly 3, at its first instant.
    let waiter = ring(3, SEC, 0);
    let calls: Vec<Call> = (0..3_000).map(|_| call(0, 1)).collect();
    let released = run(&waiter, &calls);
    for (k, at) in released.iter().enumerate() {
        assert_eq!(*at, (k as u64 / 3) * SEC, "call {k}");
    }
    assert_window(&grants(&released, &calls), 3, SEC);
}

#[test]
fn a_late_call_goes_one_interval_after_the_oldest_of_the_last_n() {
    let waiter = ring(2, SEC, 0);
    let calls = [
        call(0, 1),
        call(300 * MS, 1),
        call(400 * MS, 1),
        call(2_000 * MS, 1),
    ];
    assert_eq!(run(&waiter, &calls), [0, 300 * MS, 1_000 * MS, 2_000 * MS]);
}

#[test]
fn balanced_spreads_the_first_interval_from_the_first_call() {
    // Built at 0, first used at 5 s: the spread starts then, 250 ms apart.
    let waiter = balanced(4, SEC, 0);
    let start = 5 * SEC;
    let calls: Vec<Call> = (0..10).map(|_| call(start, 1)).collect();
    let released: Vec<u64> = run(&waiter, &calls).iter().map(|at| at - start).collect();
    let expected: Vec<u64> = (0..10).map(|k| k * 250 * MS).collect();
    assert_eq!(released, expected);
}

#[test]
fn balanced_spacing_rounds_down_to_the_nanosecond() {
    let waiter = balanced(3, SEC, 0);
    let calls: Vec<Call> = (0..4).map(|_| call(0, 1)).collect();
    assert_eq!(run(&waiter, &calls), [0, 333_333_333, 666_666_666, SEC]);
}

#[test]
fn balanced_may_burst_again_after_an_idle_interval() {
    let waiter = balanced(2, SEC, 0);
    let calls = [call(0, 1), call(0, 1), call(10 * SEC, 1), call(10 * SEC, 1)];
    assert_eq!(run(&waiter, &calls), [0, 500 * MS, 10 * SEC, 10 * SEC]);
}

#[test]
fn unbalanced_bursts_the_first_n() {
    let waiter = ring(4, SEC, 0);
    let calls: Vec<Call> = (0..5).map(|_| call(0, 1)).collect();
    assert_eq!(run(&waiter, &calls), [0, 0, 0, 0, SEC]);
}

#[test]
fn a_manual_clock_starting_late_changes_nothing() {
    // The ring's empty slots are free at any instant, however early the
    // clock reads.
    let waiter = ring(1, SEC, 0);
    assert_eq!(run(&waiter, &[call(0, 1)]), [0]);
    assert_eq!(waiter.clock().now(), 0);
}

fn calls(limit: u64, period: u64) -> impl Strategy<Value = Vec<Call>> {
    prop::collection::vec((0..=2 * period, 1..=limit, 0..4u8), 1..60).prop_map(|steps| {
        let mut arrival = 0;
        steps
            .into_iter()
            .map(|(gap, permits, together)| {
                // Some calls arrive together.
                if together > 0 {
                    arrival += gap;
                }
                call(arrival, permits)
            })
            .collect()
    })
}

fn setup() -> impl Strategy<Value = (u64, u64, Vec<Call>)> {
    (1..=6u64, MS..=50 * MS)
        .prop_flat_map(|(limit, period)| (Just(limit), Just(period), calls(limit, period)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Against the reference: at most N in any span of one interval, and
    /// each call at the earliest instant that allows, first come first
    /// served.
    #[test]
    fn matches_the_window_model((limit, period, calls) in setup()) {
        let waiter = ring(limit, period, 0);
        let released = run(&waiter, &calls);
        prop_assert_eq!(&released, &window_model(&calls, limit, period));
        assert_window(&grants(&released, &calls), limit, period);
    }
}
