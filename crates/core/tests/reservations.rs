//! Property 6: reservations. `next_available` and every reservation's wait
//! are the model's earliest admitting instant, never ahead of slots already
//! booked; plain checks do not jump ahead of booked slots; and everything
//! admitted or booked, replayed at its instant through a fresh state, is
//! admitted: reservations never overbook.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reference;

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::algorithm::{
    FixedWindow, Gcra, LeakyBucket, SlidingWindowCounter, SlidingWindowLog, SteppedWindow,
    TokenBucket,
};
use tollgate_core::Algorithm;

use reference::buckets::{LeakyBucketModel, TokenBucketModel};
use reference::fixed_window::FixedWindowModel;
use reference::harness::{assert_cost_too_large, check, replay, run_reservations};
use reference::heaviest_span;
use reference::sliding_counter::SlidingCounterModel;
use reference::sliding_log::SlidingLogModel;
use reference::stepped_window::SteppedWindowModel;
use reference::strategy::{reservations, Capacity, Op, Setup, MS, NS};
use reference::Model;

fn stepped(s: &Setup) -> SteppedWindow {
    SteppedWindow::new(s.rate(), Some(Duration::from_nanos(s.step))).unwrap()
}

/// The leaky bucket shapes rather than queues callers: a reservation waits
/// for what is ahead of it to drain, whatever the queue's capacity; a plain
/// check is admitted while the queue (booked reservations included) has
/// room, and its `delay` never lets it out before a booked slot. The booked
/// slots, replayed through a fresh state, are all admitted.
fn run_leaky(s: &Setup, ops: &[Op]) -> Result<(), TestCaseError> {
    let alg = LeakyBucket::new(s.rate(), s.burst).unwrap();
    let mut model = LeakyBucketModel::new(s.n, s.p, s.burst);
    let mut state = alg.new_state();
    let mut now = s.start;
    let mut history = Vec::new();
    let mut booked_until = 0;
    for (i, op) in ops.iter().enumerate() {
        let (e, max_wait) = match *op {
            Op::Check(e) => (e, None),
            Op::Reserve(e, w) => (e, w),
        };
        now += e.dt;
        let cost = e.cost;
        if cost > s.burst {
            assert_cost_too_large(&alg, &mut state, now, cost)?;
            continue;
        }
        if cost > 0 {
            let expected = model.first_admit(now, cost);
            prop_assert_eq!(alg.next_available(&state, now, cost), expected, "op {}", i);
        }
        match *op {
            Op::Check(_) => {
                let d = check(&alg, &mut state, now, cost)?;
                if cost == 0 {
                    prop_assert!(d.allowed);
                    continue;
                }
                prop_assert_eq!(d.allowed, model.admits(now, cost), "op {} at {}", i, now);
                if d.allowed {
                    let delay = model.delay(now);
                    prop_assert_eq!(d.delay, Duration::from_nanos(delay), "op {} at {}", i, now);
                    prop_assert!(
                        now + delay >= booked_until,
                        "check jumped ahead of a booked slot"
                    );
                    model.admit(now, cost);
                } else {
                    let retry = model.first_admit(now, cost) - now;
                    prop_assert_eq!(d.retry_after, Duration::from_nanos(retry));
                }
            }
            Op::Reserve(..) => {
                let before = state;
                let mut booked = model.clone();
                let out = booked.reserve(now, cost);
                let bound = max_wait.map(Duration::from_nanos);
                let r = alg.reserve(&mut state, now, cost, bound).unwrap();
                if cost == 0 {
                    prop_assert_eq!(r.wait, Duration::ZERO);
                    prop_assert_eq!(&state, &before, "reserving cost 0 changed the state");
                    continue;
                }
                prop_assert_eq!(
                    r.wait,
                    Duration::from_nanos(out - now),
                    "op {} at {}",
                    i,
                    now
                );
                if max_wait.is_some_and(|w| out - now > w) {
                    prop_assert!(!r.decision.allowed);
                    prop_assert_eq!(&state, &before);
                } else {
                    prop_assert!(r.decision.allowed);
                    model = booked;
                    history.push((out, cost));
                    booked_until = booked_until.max(out);
                }
            }
        }
    }
    replay(&alg, &history)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn token_bucket_reservations_ms((s, ops) in reservations(MS, Capacity::Burst)) {
        let alg = TokenBucket::new(s.rate(), s.burst).unwrap();
        run_reservations(&alg, TokenBucketModel::new(s.n, s.p, s.burst), &s, &ops)?;
    }

    #[test]
    fn token_bucket_reservations_ns((s, ops) in reservations(NS, Capacity::Burst)) {
        let alg = TokenBucket::new(s.rate(), s.burst).unwrap();
        run_reservations(&alg, TokenBucketModel::new(s.n, s.p, s.burst), &s, &ops)?;
    }

    #[test]
    fn gcra_reservations_ns((s, ops) in reservations(NS, Capacity::Burst)) {
        let alg = Gcra::new(s.rate(), s.burst).unwrap();
        run_reservations(&alg, TokenBucketModel::new(s.n, s.p, s.burst), &s, &ops)?;
    }

    #[test]
    fn leaky_bucket_reservations_ms((s, ops) in reservations(MS, Capacity::Burst)) {
        run_leaky(&s, &ops)?;
    }

    #[test]
    fn leaky_bucket_reservations_ns((s, ops) in reservations(NS, Capacity::Burst)) {
        run_leaky(&s, &ops)?;
    }

    #[test]
    fn fixed_window_reservations((s, ops) in reservations(NS, Capacity::Limit)) {
        run_reservations(&FixedWindow::new(s.rate()), FixedWindowModel::new(s.n, s.p), &s, &ops)?;
    }

    #[test]
    fn sliding_log_reservations((s, ops) in reservations(NS, Capacity::Limit)) {
        let alg = SlidingWindowLog::new(s.rate());
        let history = run_reservations(&alg, SlidingLogModel::new(s.n, s.p), &s, &ops)?;
        prop_assert!(heaviest_span(&history, s.p) <= s.n);
    }

    #[test]
    fn sliding_counter_reservations((s, ops) in reservations(NS, Capacity::Limit)) {
        let alg = SlidingWindowCounter::new(s.rate());
        run_reservations(&alg, SlidingCounterModel::new(s.n, s.p), &s, &ops)?;
    }

    #[test]
    fn stepped_window_reservations_ms((s, ops) in reservations(MS, Capacity::Limit)) {
        let model = SteppedWindowModel::new(s.n, s.p, s.step);
        let history = run_reservations(&stepped(&s), model, &s, &ops)?;
        prop_assert!(heaviest_span(&history, s.p) <= s.n);
    }

    #[test]
    fn stepped_window_reservations_ns((s, ops) in reservations(NS, Capacity::Limit)) {
        let model = SteppedWindowModel::new(s.n, s.p, s.step);
        let history = run_reservations(&stepped(&s), model, &s, &ops)?;
        prop_assert!(heaviest_span(&history, s.p) <= s.n);
    }
}

/// Reserves `cost` three times at t = 0 and replays the booked instants
/// through a fresh state.
fn three_reservations<A: Algorithm>(alg: &A) -> (Vec<u64>, Vec<bool>) {
    let mut state = alg.new_state();
    let waits: Vec<u64> = (0..3)
        .map(|_| alg.reserve(&mut state, 0, 1, None).unwrap().wait)
        .map(|w| u64::try_from(w.as_nanos()).unwrap())
        .collect();
    let mut fresh = alg.new_state();
    let replayed = waits
        .iter()
        .map(|&at| alg.check(&mut fresh, at, 1).unwrap().allowed)
        .collect();
    (waits, replayed)
}

/// Regression: at 3/s with burst 1 the emission interval is 333 333 333⅓ ns.
/// Reservations used to take their tokens at the time of booking, so the
/// rounding up of each wait was lost and the third slot came 1 ns too early:
/// a plain check at that instant was rejected.
#[test]
fn bucket_reservations_replay_at_uneven_emission_intervals() {
    let rate = tollgate_core::Rate::per_second(3).unwrap();
    let expected = vec![0, 333_333_334, 666_666_668];
    let tb = TokenBucket::new(rate, 1).unwrap();
    assert_eq!(three_reservations(&tb), (expected.clone(), vec![true; 3]));
    let gcra = Gcra::new(rate, 1).unwrap();
    assert_eq!(three_reservations(&gcra), (expected.clone(), vec![true; 3]));
    let leaky = LeakyBucket::new(rate, 1).unwrap();
    assert_eq!(three_reservations(&leaky), (expected, vec![true; 3]));
}

/// Regression: reserving cost 0 behind a booked slot answered a wait (GCRA
/// and the windows) or none (token bucket). Cost 0 is a peek everywhere:
/// no wait, nothing booked.
#[test]
fn reserving_cost_zero_is_a_peek() {
    let rate = tollgate_core::Rate::per_second(1).unwrap();
    let gcra = Gcra::new(rate, 1).unwrap();
    let window = FixedWindow::new(rate);
    fn run<A: Algorithm>(alg: &A) {
        let mut state = alg.new_state();
        assert_eq!(
            alg.reserve(&mut state, 0, 1, None).unwrap().wait,
            Duration::ZERO
        );
        let second = alg.reserve(&mut state, 0, 1, None).unwrap();
        assert_eq!(second.wait, Duration::from_secs(1));
        let before = state.clone();
        let peek = alg.reserve(&mut state, 0, 0, None).unwrap();
        assert_eq!(peek.wait, Duration::ZERO);
        assert!(peek.decision.allowed);
        assert_eq!(alg.earliest(&state, 0, 0), Ok(0));
        assert_eq!(format!("{state:?}"), format!("{before:?}"));
    }
    run(&gcra);
    run(&window);
}

/// A plain check while a leaky-bucket reservation waits counts the booked
/// request as queued, and is let out only after it.
#[test]
fn leaky_bucket_checks_queue_behind_booked_slots() {
    let rate = tollgate_core::Rate::per_second(1).unwrap();
    let alg = LeakyBucket::new(rate, 2).unwrap();
    let mut state = alg.new_state();
    let sec = Duration::from_secs;
    assert_eq!(alg.reserve(&mut state, 0, 2, None).unwrap().wait, sec(0));
    // The queue is full; the reservation goes out when it has drained.
    assert_eq!(alg.reserve(&mut state, 0, 1, None).unwrap().wait, sec(2));
    let early = alg.check(&mut state, 0, 1).unwrap();
    assert!(!early.allowed);
    assert_eq!(early.retry_after, sec(2));
    let later = alg.check(&mut state, 2_000_000_000, 1).unwrap();
    assert!(later.allowed);
    assert_eq!(later.delay, sec(1), "behind the request booked at 2 s");
}

/// Regression: reservations of `sliding_window_counter` piled up near the
/// end of time computed the next windows' starts with an overflowing `+`
/// (a panic in debug builds, a wrap in release ones). Instants now saturate
/// at `u64::MAX`, as in every other algorithm.
#[test]
fn sliding_counter_reservations_near_the_end_of_time_saturate() {
    let alg =
        SlidingWindowCounter::new(tollgate_core::Rate::new(2, Duration::from_secs(1)).unwrap());
    let mut state = alg.new_state();
    let now = u64::MAX - 1_500_000_000;
    let mut last = Duration::ZERO;
    for _ in 0..8 {
        match alg.reserve(&mut state, now, 1, None) {
            Ok(r) => {
                assert!(r.wait >= last, "{:?} after {last:?}", r.wait);
                last = r.wait;
            }
            Err(err) => panic!("{err:?}"),
        }
        assert!(alg.next_available(&state, now, 1) >= now);
    }
}
