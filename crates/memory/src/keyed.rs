//! What the store needs to know about each algorithm beyond the core
//! [`Algorithm`] trait: whether it can record requests that were already
//! made, and how its table entries are aligned.
//!
//! The core owns the semantics; this module only classifies.

use tollgate_core::algorithm::{
    Algorithm, Concurrency, FixedWindow, Gcra, LeakyBucket, Narrow, SlidingWindowCounter,
    SlidingWindowLog, StateCodec, SteppedWindow, TokenBucket, Wide,
};
use tollgate_core::ban::Banned;

/// Aligns a table entry to 32 bytes (a zero-sized field).
#[derive(Debug, Clone, Copy, Default)]
#[repr(align(32))]
pub(crate) struct Line32;

/// An [`Algorithm`] a keyed table can hold.
pub(crate) trait Keyed: Algorithm + StateCodec {
    /// A zero-sized type whose alignment the table's entries take. An entry
    /// of 32 bytes aligned to its size never straddles two cache lines,
    /// which an 8-aligned one in a table allocated at an odd multiple of 16
    /// bytes does half of the time: over many keys, that is one cache miss
    /// more per check. `()` keeps the natural alignment, for entries that
    /// alignment would only grow: the 24-byte entries of `gcra`,
    /// `token_bucket` and `fixed_window` straddle a line one time in four,
    /// and the 48- and 56-byte ones of `concurrency`, the sliding log and the
    /// stepped window most of the time; over many keys a smaller table
    /// measured faster than aligned entries (docs/benchmarks.md).
    type Line: Copy + Default + std::fmt::Debug + Send + Sync + 'static;

    /// Counts `cost` at `at` even when over the limit and returns the count
    /// in the window ending at `max(at, newest step)`; `None` when the
    /// algorithm cannot record (all but `stepped_window`). `period` is the
    /// limit's period in nanoseconds.
    fn record_and_count(
        &self,
        _state: &mut Self::State,
        _at: u64,
        _cost: u64,
        _period: u64,
    ) -> Option<u64> {
        None
    }
}

impl Keyed for TokenBucket<Narrow> {
    type Line = ();
}

impl Keyed for TokenBucket<Wide> {
    type Line = Line32;
}

impl Keyed for Gcra {
    type Line = ();
}

impl Keyed for LeakyBucket {
    type Line = Line32;
}

impl Keyed for FixedWindow {
    type Line = ();
}

impl Keyed for SlidingWindowLog {
    type Line = ();
}

impl Keyed for SlidingWindowCounter {
    type Line = ();
}

impl Keyed for Concurrency {
    type Line = ();
}

impl Keyed for SteppedWindow {
    type Line = ();

    fn record_and_count(
        &self,
        state: &mut Self::State,
        at: u64,
        cost: u64,
        period: u64,
    ) -> Option<u64> {
        SteppedWindow::record(self, state, at, cost);
        // expires_at = end of the newest step + period.
        let step = tollgate_core::time::duration_to_nanos(self.step());
        let newest_start = self
            .expires_at(state)
            .saturating_sub(period)
            .saturating_sub(step);
        Some(self.count(state, at.max(newest_start)))
    }
}

/// A limit with a ban keeps the ban's state beside the limit's in the
/// same entry, naturally aligned (the ban's 24 bytes make alignment a
/// matter of padding), and records as its limit does: a recorded call was
/// already made, banned or not.
impl<A: Keyed> Keyed for Banned<A> {
    type Line = ();

    fn record_and_count(
        &self,
        state: &mut Self::State,
        at: u64,
        cost: u64,
        period: u64,
    ) -> Option<u64> {
        self.limit()
            .record_and_count(&mut state.limit, at, cost, period)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tollgate_core::time::NANOS_PER_SEC;
    use tollgate_core::Rate;

    #[test]
    fn stepped_window_records_over_the_limit() {
        let rate = Rate::new(10, Duration::from_secs(4)).unwrap();
        let alg = SteppedWindow::new(rate, Some(Duration::from_secs(1))).unwrap();
        let mut state = alg.new_state();
        let p = 4 * NANOS_PER_SEC;
        assert_eq!(
            alg.record_and_count(&mut state, NANOS_PER_SEC / 2, 8, p),
            Some(8)
        );
        assert_eq!(
            alg.record_and_count(&mut state, 3 * NANOS_PER_SEC, 8, p),
            Some(16)
        );
        // An older instant counts in the window ending at the newest step.
        assert_eq!(
            alg.record_and_count(&mut state, NANOS_PER_SEC, 1, p),
            Some(17)
        );
        // Five seconds on, the step [0 s, 1 s) has left the window.
        assert_eq!(
            alg.record_and_count(&mut state, 5 * NANOS_PER_SEC, 1, p),
            Some(10)
        );
    }

    #[test]
    fn other_algorithms_do_not_record() {
        let alg = Gcra::new(Rate::per_second(1).unwrap(), 1).unwrap();
        let mut state = alg.new_state();
        assert_eq!(alg.record_and_count(&mut state, 0, 1, NANOS_PER_SEC), None);
    }
}
