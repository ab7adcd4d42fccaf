//! Cancellation: a dropped `until_ready()` future leaves the line having
//! taken nothing, and the next call moves up to its own earliest instant.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::task::Poll;

use tollgate_client::clock::{Clock, ManualClock};
use tollgate_client::waiter::{GcraWaiter, RingWaiter};
use tollgate_core::Rate;

use support::{Task, MS, SEC};

/// 10 per second, bursts of 1: a permit every 100 ms.
fn gcra() -> GcraWaiter<ManualClock> {
    GcraWaiter::with_burst(Rate::per_second(10).unwrap(), 1)
        .unwrap()
        .with_clock(ManualClock::new(0))
}

#[test]
fn dropping_the_front_lets_the_next_go_at_its_own_earliest() {
    let waiter = gcra();
    let clock = waiter.clock().clone();
    assert!(Task::new(waiter.until_ready()).poll().is_ready());
    let mut a = Task::new(waiter.until_ready());
    let mut b = Task::new(waiter.until_ready());
    assert!(a.poll().is_pending());
    assert!(b.poll().is_pending());
    assert_eq!(clock.next_deadline(), Some(100 * MS));
    clock.advance_to(50 * MS);
    drop(a);
    assert_eq!(clock.sleepers(), 0, "the dropped call's sleep is gone");
    assert!(
        b.flag.take(),
        "the next call is woken when the front leaves"
    );
    assert!(b.poll().is_pending());
    // B takes the slot A gave up, not the one after it.
    assert_eq!(clock.next_deadline(), Some(100 * MS));
    clock.advance_to(100 * MS);
    assert!(b.flag.take());
    assert!(b.poll().is_ready());
    assert_eq!(waiter.waiting(), 0);
}

#[test]
fn dropping_a_front_call_for_several_frees_the_line_for_smaller_ones() {
    // 5 per second, bursts of 5, drained at 0: a call for 3 is due at
    // 600 ms, and the call for 1 behind it at 800 ms. Once the call for 3
    // is dropped, the call for 1 goes at 200 ms.
    let waiter = GcraWaiter::new(Rate::per_second(5).unwrap())
        .unwrap()
        .with_clock(ManualClock::new(0));
    let clock = waiter.clock().clone();
    for _ in 0..5 {
        assert!(Task::new(waiter.until_ready()).poll().is_ready());
    }
    let mut three = Task::new(waiter.until_n_ready(3));
    let mut one = Task::new(waiter.until_ready());
    assert!(three.poll().is_pending());
    assert!(one.poll().is_pending());
    assert_eq!(clock.next_deadline(), Some(600 * MS));
    clock.advance_to(100 * MS);
    drop(three);
    assert!(one.poll().is_pending());
    assert_eq!(clock.next_deadline(), Some(200 * MS));
    clock.advance_to(200 * MS);
    assert!(one.poll().is_ready());
}

#[test]
fn dropping_a_call_behind_the_front_changes_nobody_elses_turn() {
    let waiter = gcra();
    let clock = waiter.clock().clone();
    assert!(Task::new(waiter.until_ready()).poll().is_ready());
    let mut a = Task::new(waiter.until_ready());
    let mut b = Task::new(waiter.until_ready());
    let mut c = Task::new(waiter.until_ready());
    assert!(a.poll().is_pending());
    assert!(b.poll().is_pending());
    assert!(c.poll().is_pending());
    drop(b);
    assert!(!c.flag.take(), "C is still behind A");
    assert_eq!(waiter.waiting(), 2);
    clock.advance_to(100 * MS);
    assert!(a.poll().is_ready());
    assert!(c.flag.take(), "C is woken when A goes");
    assert!(c.poll().is_pending());
    clock.advance_to(200 * MS);
    assert!(c.poll().is_ready());
}

#[test]
fn a_future_never_polled_never_arrived() {
    let waiter = gcra();
    drop(waiter.until_n_ready(1));
    drop(waiter.until_ready());
    assert_eq!(waiter.waiting(), 0);
    assert!(Task::new(waiter.until_ready()).poll().is_ready());
}

#[test]
fn a_dropped_ring_call_gives_its_slot_to_the_next() {
    let waiter = RingWaiter::new(Rate::per_second(1).unwrap())
        .unwrap()
        .with_clock(ManualClock::new(0));
    let clock = waiter.clock().clone();
    assert!(Task::new(waiter.until_ready()).poll().is_ready());
    let mut a = Task::new(waiter.until_ready());
    assert!(a.poll().is_pending());
    clock.advance_to(500 * MS);
    let mut b = Task::new(waiter.until_ready());
    assert!(b.poll().is_pending());
    drop(a);
    clock.advance_to(SEC);
    assert_eq!(b.poll(), Poll::Ready(()));
    assert_eq!(clock.now(), SEC);
    // And the slot after B's is a second later: A recorded nothing.
    let mut c = Task::new(waiter.until_ready());
    assert!(c.poll().is_pending());
    assert_eq!(clock.next_deadline(), Some(2 * SEC));
}
