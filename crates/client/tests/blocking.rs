//! Blocking `wait()` and `wait_n()`: exact instants on an auto-advancing
//! manual clock, and a blocked thread driven by a test thread.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use tollgate_client::clock::{Clock, ManualClock};
use tollgate_client::waiter::{GcraWaiter, RingWaiter};
use tollgate_core::Rate;

use support::{spin_until, MS, SEC};

#[test]
fn gcra_wait_blocks_until_each_permit() {
    let clock = ManualClock::auto_advancing(0);
    let waiter = GcraWaiter::with_burst(Rate::per_second(4).unwrap(), 2)
        .unwrap()
        .with_clock(clock.clone());
    let at: Vec<u64> = (0..6)
        .map(|_| {
            waiter.wait();
            clock.now()
        })
        .collect();
    assert_eq!(at, [0, 0, 250 * MS, 500 * MS, 750 * MS, SEC]);
}

#[test]
fn balanced_ring_wait_n_spreads_permits() {
    let clock = ManualClock::auto_advancing(0);
    let waiter = RingWaiter::balanced(Rate::per_second(4).unwrap())
        .unwrap()
        .with_clock(clock.clone());
    waiter.wait_n(2).unwrap();
    assert_eq!(clock.now(), 250 * MS);
    waiter.wait_n(2).unwrap();
    assert_eq!(clock.now(), 750 * MS);
    waiter.wait_n(4).unwrap();
    assert_eq!(clock.now(), 1_750 * MS);
}

#[test]
fn a_blocked_thread_goes_when_the_clock_reaches_its_permit() {
    let clock = ManualClock::new(0);
    let waiter = Arc::new(
        RingWaiter::new(Rate::per_second(1).unwrap())
            .unwrap()
            .with_clock(clock.clone()),
    );
    waiter.wait();
    let blocked = {
        let waiter = Arc::clone(&waiter);
        std::thread::spawn(move || waiter.wait())
    };
    assert_eq!(clock.wait_for_sleeper(), SEC);
    clock.advance_to(SEC - 1);
    assert!(!blocked.is_finished());
    assert_eq!(waiter.waiting(), 1);
    clock.advance_to(SEC);
    blocked.join().unwrap();
    assert_eq!(waiter.waiting(), 0);
}

#[test]
fn a_thread_behind_another_is_woken_when_its_turn_comes() {
    let clock = ManualClock::new(0);
    let waiter = Arc::new(
        GcraWaiter::with_burst(Rate::per_second(10).unwrap(), 1)
            .unwrap()
            .with_clock(clock.clone()),
    );
    waiter.wait();
    let spawn = || {
        let waiter = Arc::clone(&waiter);
        std::thread::spawn(move || waiter.wait())
    };
    let first = spawn();
    spin_until("the first waits", || {
        clock.next_deadline() == Some(100 * MS)
    });
    let second = spawn();
    spin_until("the second waits", || waiter.waiting() == 2);
    clock.advance_to(100 * MS);
    first.join().unwrap();
    spin_until("the second sleeps", || {
        clock.next_deadline() == Some(200 * MS)
    });
    assert!(!second.is_finished());
    clock.advance_to(200 * MS);
    second.join().unwrap();
}
