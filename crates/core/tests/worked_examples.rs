//! The worked examples of SPEC §2, one test each.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tollgate_core::algorithm::{
    FixedWindow, Gcra, LeakyBucket, SlidingWindowCounter, SlidingWindowLog, SteppedWindow,
    TokenBucket,
};
use tollgate_core::time::{NANOS_PER_MS, NANOS_PER_SEC};
use tollgate_core::{Algorithm, Decision, Rate};

const SEC: u64 = NANOS_PER_SEC;
const MS: u64 = NANOS_PER_MS;

/// Midnight UTC of 2023-11-14, a day boundary: clock times below are offsets
/// from it, so the epoch-aligned windows line up with the wall clock.
const DAY: u64 = 19_675 * 86_400 * SEC;

fn clock(h: u64, m: u64, s: u64) -> u64 {
    DAY + ((h * 60 + m) * 60 + s) * SEC
}

/// Checks `count` unit requests at `now`; their decisions.
fn burst<A: Algorithm>(alg: &A, state: &mut A::State, now: u64, count: usize) -> Vec<Decision> {
    (0..count)
        .map(|_| alg.check(state, now, 1).unwrap())
        .collect()
}

fn admitted(decisions: &[Decision]) -> usize {
    decisions.iter().filter(|d| d.allowed).count()
}

#[test]
fn token_bucket_capacity_10_refill_2_per_second() {
    let alg = TokenBucket::new(Rate::per_second(2).unwrap(), 10).unwrap();
    let mut state = alg.new_state();

    let at_0 = burst(&alg, &mut state, 0, 5);
    assert_eq!(admitted(&at_0), 5);
    assert_eq!(at_0[4].remaining, 5);

    // 5 left + 2 s × 2/s = 9.
    let at_2 = burst(&alg, &mut state, 2 * SEC, 4);
    assert_eq!(admitted(&at_2), 4);
    assert_eq!(at_2[3].remaining, 5);

    // 5 left + 2 refilled = 7 of 8.
    let at_3 = burst(&alg, &mut state, 3 * SEC, 8);
    assert_eq!(admitted(&at_3), 7);
    assert!(at_3[..7].iter().all(|d| d.allowed));
    assert!(!at_3[7].allowed);
    assert_eq!(at_3[7].remaining, 0);
    assert_eq!(at_3[7].retry_after, Duration::from_millis(500));
}

#[test]
fn token_bucket_capacity_4_refill_2_per_minute() {
    let rate = Rate::per_minute(2).unwrap();
    // GCRA and the leaky bucket admit exactly as the token bucket does.
    let token_bucket = TokenBucket::new(rate, 4).unwrap();
    let gcra = Gcra::new(rate, 4).unwrap();
    let leaky = LeakyBucket::new(rate, 4).unwrap();
    fn run<A: Algorithm>(alg: &A) {
        let mut state = alg.new_state();
        let at_0 = burst(alg, &mut state, 0, 5);
        assert_eq!(admitted(&at_0), 4);
        assert!(!at_0[4].allowed);
        assert_eq!(at_0[4].retry_after, Duration::from_secs(30));
        let at_60 = burst(alg, &mut state, 60 * SEC, 3);
        assert!(at_60[0].allowed && at_60[1].allowed);
        assert!(!at_60[2].allowed);
    }
    run(&token_bucket);
    run(&gcra);
    run(&leaky);
}

#[test]
fn fixed_window_3_per_second_resets_at_the_boundary() {
    let alg = FixedWindow::new(Rate::per_second(3).unwrap());
    let mut state = alg.new_state();
    let start = clock(12, 0, 0);
    let second = burst(&alg, &mut state, start + 200 * MS, 4);
    assert_eq!(admitted(&second), 3);
    assert!(!second[3].allowed);
    assert_eq!(second[3].retry_after, Duration::from_millis(800));
    assert!(alg.check(&mut state, start + SEC, 1).unwrap().allowed);
}

#[test]
fn fixed_window_5_per_minute_admits_10_across_a_boundary() {
    let alg = FixedWindow::new(Rate::per_minute(5).unwrap());
    let mut state = alg.new_state();
    let late = [30, 37, 44, 51, 59].map(|s| clock(2, 0, s));
    let early = [0, 7, 14, 21, 29].map(|s| clock(2, 1, s));
    for at in late.into_iter().chain(early) {
        assert!(alg.check(&mut state, at, 1).unwrap().allowed, "at {at}");
    }
    // Ten admitted within 2:00:30–2:01:29, less than a minute apart: the
    // known weakness of fixed windows.
    assert!(early[4] - late[0] < 60 * SEC);
}

#[test]
fn sliding_window_log_2_per_minute() {
    let alg = SlidingWindowLog::new(Rate::per_minute(2).unwrap());
    let mut state = alg.new_state();
    assert!(alg.check(&mut state, clock(1, 0, 1), 1).unwrap().allowed);
    assert!(alg.check(&mut state, clock(1, 0, 30), 1).unwrap().allowed);
    let rejected = alg.check(&mut state, clock(1, 0, 50), 1).unwrap();
    assert!(!rejected.allowed);
    // 1:00:01 leaves the window at 1:01:01.
    assert_eq!(rejected.retry_after, Duration::from_secs(11));
    assert!(alg.check(&mut state, clock(1, 1, 40), 1).unwrap().allowed);
}

#[test]
fn sliding_window_counter_7_per_minute() {
    let alg = SlidingWindowCounter::new(Rate::per_minute(7).unwrap());
    let mut state = alg.new_state();
    let minute = clock(3, 0, 0);
    for s in [5, 15, 25, 35, 45] {
        assert!(alg.check(&mut state, minute + s * SEC, 1).unwrap().allowed);
    }
    let current = minute + 60 * SEC;
    for s in [1, 2, 3] {
        assert!(alg.check(&mut state, current + s * SEC, 1).unwrap().allowed);
    }
    // 30 % into the window: 3 + floor(5 × 0.7) = 6.
    let at = current + 18 * SEC;
    assert_eq!(alg.peek(&state, at).remaining, 1);
    let last = alg.check(&mut state, at, 1).unwrap();
    assert!(last.allowed);
    assert_eq!(last.remaining, 0);
    assert!(!alg.check(&mut state, at, 1).unwrap().allowed);
}

#[test]
fn stepped_window_10_per_4_seconds_step_1_second() {
    let rate = Rate::new(10, Duration::from_secs(4)).unwrap();
    let alg = SteppedWindow::new(rate, Some(Duration::from_secs(1))).unwrap();
    let mut state = alg.new_state();
    for (at_ms, count) in [(500, 3), (1_500, 3), (2_500, 2), (3_500, 2)] {
        let decisions = burst(&alg, &mut state, at_ms * MS, count);
        assert_eq!(admitted(&decisions), count, "at {at_ms} ms");
    }
    let now = 3_900 * MS;
    assert!(!alg.check(&mut state, now, 1).unwrap().allowed);
    // The step [0 s, 1 s) stops touching (t − 4 s, t] at t = 5.0 s.
    assert_eq!(alg.earliest(&state, now, 1), Ok(5 * SEC));
    assert_eq!(alg.count(&state, 5 * SEC), 7);
    assert_eq!(alg.count(&state, 5 * SEC - 1), 10);
}

/// Recording nothing, even at a future instant, must not leave an empty step
/// that makes the key look booked ahead.
#[test]
fn stepped_window_record_of_cost_zero_changes_nothing() {
    let limit = SteppedWindow::new(
        Rate::from_nanos(1, 160 * MS).unwrap(),
        Some(Duration::from_millis(10)),
    )
    .unwrap();
    let mut state = limit.new_state();
    let fresh = state.clone();
    limit.record(&mut state, 50 * MS, 0);
    assert_eq!(state, fresh);
    assert!(limit.check(&mut state, 0, 1).unwrap().allowed);
}
