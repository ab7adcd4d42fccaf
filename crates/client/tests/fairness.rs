//! First come, first served: calls go in arrival order, and a call for
//! several permits is not overtaken by later calls for fewer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use tollgate_client::clock::ManualClock;
use tollgate_client::waiter::{GcraWaiter, RingWaiter};
use tollgate_core::Rate;

use support::{call, run, spin_until, MS, SEC};

#[test]
fn gcra_a_call_for_several_is_not_overtaken_by_later_small_ones() {
    // 5 per second, bursts of 5, drained at 0. The call for 3 goes at
    // 600 ms; the call for 1 behind it would fit at 200 ms on its own but
    // waits its turn, and so does the one arriving at 200 ms.
    let waiter = GcraWaiter::new(Rate::per_second(5).unwrap())
        .unwrap()
        .with_clock(ManualClock::new(0));
    let mut calls: Vec<_> = (0..5).map(|_| call(0, 1)).collect();
    calls.extend([call(0, 3), call(0, 1), call(200 * MS, 1)]);
    assert_eq!(
        run(&waiter, &calls),
        [0, 0, 0, 0, 0, 600 * MS, 800 * MS, SEC]
    );
}

#[test]
fn ring_a_call_for_several_is_not_overtaken_by_later_small_ones() {
    // 3 per second: after two calls at 0, one slot is free, but the call for
    // 3 needs all three (at 1 s); the call for 1 behind it goes after, at 2 s.
    let waiter = RingWaiter::new(Rate::per_second(3).unwrap())
        .unwrap()
        .with_clock(ManualClock::new(0));
    let calls = [call(0, 1), call(0, 1), call(0, 3), call(0, 1)];
    assert_eq!(run(&waiter, &calls), [0, 0, SEC, 2 * SEC]);
}

#[test]
fn calls_go_in_arrival_order_with_mixed_sizes() {
    // Permits 1..=4 in a repeating pattern, all arriving at once: releases
    // come in arrival order and never decrease.
    let waiter = GcraWaiter::with_burst(Rate::per_second(10).unwrap(), 4)
        .unwrap()
        .with_clock(ManualClock::new(0));
    let calls: Vec<_> = (0..40).map(|i| call(0, 1 + (i * 7) % 4)).collect();
    let released = run(&waiter, &calls);
    assert!(released.windows(2).all(|w| w[0] <= w[1]), "{released:?}");
}

#[test]
fn blocking_waiters_keep_arrival_order_across_threads() {
    // 10 per second, bursts of 2, drained at 0. Thread A asks for 2 (due at
    // 200 ms), then thread B for 1. At 100 ms B's permit is free, but A is
    // first: B goes at 300 ms, after A.
    let clock = ManualClock::new(0);
    let waiter = Arc::new(
        GcraWaiter::with_burst(Rate::per_second(10).unwrap(), 2)
            .unwrap()
            .with_clock(clock.clone()),
    );
    waiter.wait();
    waiter.wait();
    let spawn = |n: u64| {
        let waiter = Arc::clone(&waiter);
        std::thread::spawn(move || waiter.wait_n(n).unwrap())
    };
    let a = spawn(2);
    spin_until("A waits", || clock.next_deadline() == Some(200 * MS));
    let b = spawn(1);
    spin_until("B waits", || waiter.waiting() == 2);
    clock.advance_to(100 * MS);
    assert_eq!(waiter.waiting(), 2, "B must not overtake A");
    assert_eq!(clock.next_deadline(), Some(200 * MS));
    clock.advance_to(200 * MS);
    a.join().unwrap();
    // A's two permits were counted at 200 ms: B's one is free at 300 ms.
    spin_until("B waits at the front", || {
        clock.next_deadline() == Some(300 * MS)
    });
    assert_eq!(waiter.waiting(), 1);
    clock.advance_to(300 * MS);
    b.join().unwrap();
    assert_eq!(waiter.waiting(), 0);
}
