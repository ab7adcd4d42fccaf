//! Property tests of the window algorithms against brute-force models that
//! keep every admitted request: every decision field matches the model
//! (property 1), and the exact windows never hold more than `N` in any span
//! of length `P` (property 4).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reference;

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::algorithm::{
    FixedWindow, SlidingWindowCounter, SlidingWindowLog, SteppedWindow,
};

use reference::fixed_window::FixedWindowModel;
use reference::harness::run_against_model;
use reference::heaviest_span;
use reference::sliding_counter::SlidingCounterModel;
use reference::sliding_log::SlidingLogModel;
use reference::stepped_window::SteppedWindowModel;
use reference::strategy::{trace, Capacity, Setup, MS, NS};

fn stepped(s: &Setup) -> SteppedWindow {
    SteppedWindow::new(s.rate(), Some(Duration::from_nanos(s.step))).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fixed_window_matches_model_ms((s, t) in trace(MS, Capacity::Limit)) {
        run_against_model(&FixedWindow::new(s.rate()), FixedWindowModel::new(s.n, s.p), &s, &t)?;
    }

    #[test]
    fn fixed_window_matches_model_ns((s, t) in trace(NS, Capacity::Limit)) {
        run_against_model(&FixedWindow::new(s.rate()), FixedWindowModel::new(s.n, s.p), &s, &t)?;
    }

    #[test]
    fn sliding_log_matches_model_ms((s, t) in trace(MS, Capacity::Limit)) {
        let admitted =
            run_against_model(&SlidingWindowLog::new(s.rate()), SlidingLogModel::new(s.n, s.p), &s, &t)?;
        prop_assert!(heaviest_span(&admitted, s.p) <= s.n);
    }

    #[test]
    fn sliding_log_matches_model_ns((s, t) in trace(NS, Capacity::Limit)) {
        let admitted =
            run_against_model(&SlidingWindowLog::new(s.rate()), SlidingLogModel::new(s.n, s.p), &s, &t)?;
        prop_assert!(heaviest_span(&admitted, s.p) <= s.n);
    }

    #[test]
    fn sliding_counter_matches_model_ms((s, t) in trace(MS, Capacity::Limit)) {
        let alg = SlidingWindowCounter::new(s.rate());
        run_against_model(&alg, SlidingCounterModel::new(s.n, s.p), &s, &t)?;
    }

    #[test]
    fn sliding_counter_matches_model_ns((s, t) in trace(NS, Capacity::Limit)) {
        let alg = SlidingWindowCounter::new(s.rate());
        run_against_model(&alg, SlidingCounterModel::new(s.n, s.p), &s, &t)?;
    }

    #[test]
    fn stepped_window_matches_model_ms((s, t) in trace(MS, Capacity::Limit)) {
        let model = SteppedWindowModel::new(s.n, s.p, s.step);
        let admitted = run_against_model(&stepped(&s), model, &s, &t)?;
        prop_assert!(heaviest_span(&admitted, s.p) <= s.n, "more than an exact window admits");
    }

    #[test]
    fn stepped_window_matches_model_ns((s, t) in trace(NS, Capacity::Limit)) {
        let model = SteppedWindowModel::new(s.n, s.p, s.step);
        let admitted = run_against_model(&stepped(&s), model, &s, &t)?;
        prop_assert!(heaviest_span(&admitted, s.p) <= s.n, "more than an exact window admits");
    }
}

/// Regression: a peek (cost 0) reported `reset_after` as if a request had
/// just been counted (`P` for the sliding log, the departure of the current
/// step for the stepped window) instead of when the newest counted request
/// leaves the window.
#[test]
fn peek_reset_after_waits_for_the_newest_counted_request() {
    use tollgate_core::time::NANOS_PER_MS as MS;
    use tollgate_core::{Algorithm, Rate};

    let log = SlidingWindowLog::new(Rate::per_minute(2).unwrap());
    let mut state = log.new_state();
    assert!(log.check(&mut state, 0, 1).unwrap().allowed);
    let peek = log.check(&mut state, 20_000 * MS, 0).unwrap();
    assert_eq!(peek.reset_after, Duration::from_secs(40));
    assert_eq!(log.peek(&state, 20_000 * MS), peek);

    let rate = Rate::new(10, Duration::from_secs(4)).unwrap();
    let stepped = SteppedWindow::new(rate, Some(Duration::from_secs(1))).unwrap();
    let mut state = stepped.new_state();
    assert!(stepped.check(&mut state, 500 * MS, 1).unwrap().allowed);
    // The step [0 s, 1 s) stops touching the window at 5 s.
    let peek = stepped.check(&mut state, 2_500 * MS, 0).unwrap();
    assert_eq!(peek.reset_after, Duration::from_millis(2_500));
}
