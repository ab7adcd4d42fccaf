//! Errors instead of eternal waits or panics: too many permits at once, bad
//! settings, and extreme instants.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::task::Poll;

use tollgate_client::clock::ManualClock;
use tollgate_client::waiter::{GcraWaiter, RingWaiter, TooManyPermits, WaiterError, MAX_RING};
use tollgate_core::Rate;

use support::{call, run, Task};

fn gcra() -> GcraWaiter<ManualClock> {
    GcraWaiter::with_burst(Rate::per_second(10).unwrap(), 4)
        .unwrap()
        .with_clock(ManualClock::new(0))
}

#[test]
fn more_permits_than_capacity_is_an_error_at_once() {
    let waiter = gcra();
    let expected = TooManyPermits {
        requested: 5,
        capacity: 4,
    };
    assert_eq!(
        Task::new(waiter.until_n_ready(5)).poll(),
        Poll::Ready(Err(expected))
    );
    assert_eq!(waiter.wait_n(5), Err(expected));
    assert_eq!(waiter.waiting(), 0);
    let message = expected.to_string();
    assert!(message.contains('5') && message.contains('4'), "{message}");

    let ring = RingWaiter::new(Rate::per_second(3).unwrap())
        .unwrap()
        .with_clock(ManualClock::new(0));
    assert_eq!(
        ring.wait_n(u64::MAX),
        Err(TooManyPermits {
            requested: u64::MAX,
            capacity: 3
        })
    );
    assert_eq!(ring.wait_n(3), Ok(()));
}

#[test]
fn zero_permits_go_at_once_even_behind_others() {
    let waiter = gcra();
    waiter.wait_n(4).unwrap();
    let mut behind = Task::new(waiter.until_ready());
    assert!(behind.poll().is_pending());
    assert_eq!(
        Task::new(waiter.until_n_ready(0)).poll(),
        Poll::Ready(Ok(()))
    );
    assert_eq!(waiter.wait_n(0), Ok(()));
    assert_eq!(waiter.waiting(), 1);
}

#[test]
fn bad_settings_are_errors_that_say_why() {
    let too_many = Rate::per_second(MAX_RING + 1).unwrap();
    let err = RingWaiter::new(too_many).unwrap_err();
    assert!(matches!(err, WaiterError::RingTooLarge { .. }));
    assert!(
        err.to_string().contains(&(MAX_RING + 1).to_string()),
        "{err}"
    );
    assert!(RingWaiter::balanced(too_many).is_err());
    let err = GcraWaiter::with_burst(Rate::per_second(1).unwrap(), 0).unwrap_err();
    assert!(matches!(err, WaiterError::Limit(_)));
    assert!(err.to_string().contains("burst 0"), "{err}");
}

#[test]
fn instants_near_the_end_of_time_saturate_instead_of_panicking() {
    let end = u64::MAX - 10;
    let ring = RingWaiter::new(Rate::per_second(2).unwrap())
        .unwrap()
        .with_clock(ManualClock::new(end));
    let calls = [call(end, 1), call(end, 1), call(end, 2)];
    assert_eq!(run(&ring, &calls), [end, end, u64::MAX]);
    let gcra = GcraWaiter::with_burst(Rate::per_second(2).unwrap(), 1)
        .unwrap()
        .with_clock(ManualClock::new(end));
    let calls = [call(end, 1), call(end, 1)];
    assert_eq!(run(&gcra, &calls), [end, u64::MAX]);
}
