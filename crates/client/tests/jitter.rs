//! Jitter: a bounded extra wait for calls that have to wait, repeatable with
//! a seed, and never at the expense of the limit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use tollgate_client::clock::ManualClock;
use tollgate_client::waiter::{GcraWaiter, Jitter, RingWaiter};
use tollgate_core::Rate;

use support::{assert_window, call, grants, run, window_earliest, Call, MS, SEC};

const MAX: u64 = 30 * MS;

fn gcra(seed: u64) -> GcraWaiter<ManualClock> {
    GcraWaiter::with_burst(Rate::per_second(10).unwrap(), 1)
        .unwrap()
        .with_clock(ManualClock::new(0))
        .with_jitter(Jitter::up_to(Duration::from_nanos(MAX)).with_seed(seed))
}

fn together(count: usize) -> Vec<Call> {
    (0..count).map(|_| call(0, 1)).collect()
}

#[test]
fn waiting_calls_get_a_bounded_extra_wait_spread_over_the_bound() {
    let released = run(&gcra(9), &together(300));
    assert_eq!(released[0], 0, "the first call does not wait: no jitter");
    // Bursts of 1: each call's permit is free 100 ms after the previous call
    // went; jitter adds between 0 and 30 ms to that.
    let extra: Vec<u64> = released
        .windows(2)
        .map(|w| w[1] - w[0] - 100 * MS)
        .collect();
    assert!(extra.iter().all(|&e| e <= MAX), "{extra:?}");
    assert!(extra.iter().any(|&e| e < 3 * MS));
    assert!(extra.iter().any(|&e| e > 27 * MS));
}

#[test]
fn a_seed_repeats_the_run_and_another_seed_does_not() {
    let calls = together(50);
    assert_eq!(run(&gcra(1), &calls), run(&gcra(1), &calls));
    assert_ne!(run(&gcra(1), &calls), run(&gcra(2), &calls));
}

#[test]
fn calls_that_do_not_wait_get_no_jitter() {
    let calls: Vec<Call> = (0..20).map(|i| call(i * 150 * MS, 1)).collect();
    let arrivals: Vec<u64> = calls.iter().map(|c| c.arrival).collect();
    assert_eq!(run(&gcra(5), &calls), arrivals);
}

#[test]
fn the_ring_still_holds_with_jitter() {
    let waiter = RingWaiter::new(Rate::per_second(3).unwrap())
        .unwrap()
        .with_clock(ManualClock::new(0))
        .with_jitter(Jitter::up_to(Duration::from_nanos(MAX)).with_seed(77));
    let calls: Vec<Call> = (0..200).map(|i| call(i * 100 * MS, 1 + i % 2)).collect();
    let released = run(&waiter, &calls);
    let granted = grants(&released, &calls);
    assert_window(&granted, 3, SEC);
    for (i, c) in calls.iter().enumerate() {
        let from = c.arrival.max(if i == 0 { 0 } else { released[i - 1] });
        let earliest = window_earliest(&granted[..i], from, c.permits, 3, SEC);
        assert!(
            (earliest..=earliest + MAX).contains(&released[i]),
            "call {i}: {} not within jitter of {earliest}",
            released[i]
        );
    }
}
