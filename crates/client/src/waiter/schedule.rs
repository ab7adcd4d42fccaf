//! The [`Schedule`] trait: when permits may go, and recording that they went.

use super::line::Line;

/// What a lock-free attempt to take permits found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The permits were free and are recorded.
    Taken,
    /// The permits are not free now (or the schedule needs attention under
    /// the line's lock first).
    Busy,
    /// Calls are waiting in line: only the call at the front may take
    /// permits.
    Closed,
}

/// A pacing rule: [`RingSchedule`](super::ring::RingSchedule) or
/// [`GcraSchedule`](super::gcra::GcraSchedule).
///
/// [`try_take`](Self::try_take) is the fast path, lock-free: one
/// compare-and-swap on a word that also carries the "calls are waiting"
/// flag, so no call can take permits past a waiting one. Everything else is
/// called with the waiter's line locked (each such method takes the `&Line`
/// as proof): [`maintain`](Self::maintain) when the line is empty,
/// [`earliest`](Self::earliest) and then [`record`](Self::record) for the
/// call at the front while the flag is set, and
/// [`set_waiting`](Self::set_waiting) to raise and lower the flag.
///
/// Instants passed in may lag one another by the time between two threads'
/// clock readings; the rules hold regardless (see each schedule).
pub(crate) trait Schedule: Send + Sync + 'static {
    /// The most permits one call may ask for.
    fn capacity(&self) -> u64;

    /// Takes `n` permits at `now` when they are free and nobody waits.
    ///
    /// The caller reads the clock before the call, so the shared state is
    /// loaded only after it. Measured on the Intel machine of
    /// docs/benchmarks.md, loading GCRA's word first and reading the clock
    /// while it came cost two threads sharing a waiter about a quarter
    /// more per permit: the other core took the word back during the
    /// reading, and the swap failed. (On the AMD machine word-first had
    /// measured faster; the ring had measured faster clock-first there.)
    fn try_take(&self, now: u64, n: u64) -> Attempt;

    /// Work the fast path leaves to the line: a balanced ring's first
    /// layout, a GCRA state's re-basing. `now` is the arriving call's clock
    /// reading.
    fn maintain(&self, held: &Line, now: u64);

    /// Raises or lowers the "calls are waiting" flag.
    fn set_waiting(&self, held: &Line, waiting: bool);

    /// The earliest instant at or after `now` at which `n` permits may go,
    /// if nothing else is recorded first. The flag is raised.
    fn earliest(&self, held: &Line, now: u64, n: u64) -> u64;

    /// Records `n` permits going at `at`, right after
    /// [`earliest`](Self::earliest) said they may. The flag is raised.
    fn record(&self, held: &Line, at: u64, n: u64);
}
