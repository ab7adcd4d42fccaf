//! Threads racing for permits: never more than the limit, and every permit
//! a dropped call did not take is still there.
//!
//! Each round, at one instant of a manual clock, four threads poll fresh
//! calls once and drop those that must wait (racing the lock-free fast path
//! against the line and cancellation); then one thread takes whatever is
//! left. After that drain the count is exact: the ring holds exactly `N`
//! permits in the interval ending now, and GCRA has handed out exactly its
//! burst plus what the elapsed time refilled.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use tollgate_client::clock::{Clock, ManualClock};
use tollgate_client::waiter::{GcraWaiter, RingWaiter};
use tollgate_core::Rate;

use support::{Paced, MS, SEC};

const LIMIT: u64 = 1_024;
const THREADS: usize = 4;
const ATTEMPTS: usize = 400;
/// Uneven steps, shorter than the interval.
const STEP: Duration = Duration::from_millis(137);

/// Runs the rounds; after each, `check(granted so far with their
/// instants, now)`.
fn race(waiter: &(impl Paced + Sync), check: impl Fn(&[(u64, u64)], u64)) {
    let clock = waiter.manual_clock();
    let mut grants: Vec<(u64, u64)> = Vec::new();
    for round in 0..40 {
        let now = clock.now();
        let raced = AtomicU64::new(0);
        let start = Barrier::new(THREADS);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    start.wait();
                    for _ in 0..ATTEMPTS {
                        if waiter.poll_once() {
                            raced.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let mut granted = raced.load(Ordering::Relaxed);
        while waiter.poll_once() {
            granted += 1;
        }
        grants.push((now, granted));
        check(&grants, now);
        assert_eq!(
            waiter.waiting_now(),
            0,
            "round {round}: dropped calls left the line"
        );
        clock.advance(STEP);
    }
}

#[test]
fn the_ring_holds_exactly_n_per_interval() {
    let waiter = RingWaiter::new(Rate::per_second(LIMIT).unwrap())
        .unwrap()
        .with_clock(ManualClock::new(0));
    race(&waiter, |grants, now| {
        let in_window: u64 = grants
            .iter()
            .filter(|(at, _)| at + SEC > now)
            .map(|(_, k)| k)
            .sum();
        assert_eq!(in_window, LIMIT, "at {} ms", now / MS);
    });
}

#[test]
fn gcra_hands_out_its_burst_plus_the_refill() {
    let waiter = GcraWaiter::new(Rate::per_second(LIMIT).unwrap())
        .unwrap()
        .with_clock(ManualClock::new(0));
    race(&waiter, |grants, now| {
        let total: u64 = grants.iter().map(|(_, k)| k).sum();
        assert_eq!(total, LIMIT + now * LIMIT / SEC, "at {} ms", now / MS);
    });
}

#[test]
fn gcra_races_its_re_basings_without_losing_count() {
    // 4,294,967,291 per 1,000,000,007 ns, bursts of 1,024: the core counts
    // in 4-billionths of a nanosecond, so the waiter re-bases its word
    // about every half second of clock, racing the threads; each 137 ms
    // step refills far more than the burst, so every round hands out
    // exactly one full burst.
    let rate = Rate::from_nanos(4_294_967_291, 1_000_000_007).unwrap();
    let waiter = GcraWaiter::with_burst(rate, LIMIT)
        .unwrap()
        .with_clock(ManualClock::new(1_700_000_000 * SEC));
    race(&waiter, |grants, now| {
        let (at, last) = grants[grants.len() - 1];
        assert_eq!((at, last), (now, LIMIT), "at {now}");
    });
}
