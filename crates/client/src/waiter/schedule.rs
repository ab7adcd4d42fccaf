//! The [`Schedule`] trait: when permits may go, and recording that they went.

/// A pacing policy: the rule a [`Waiter`](super::Waiter) applies to decide
/// when permits may go. [`RingSchedule`](super::RingSchedule) and
/// [`GcraSchedule`](super::GcraSchedule) implement it.
///
/// A waiter calls these under its lock, one at a time, with `n` between 1 and
/// [`capacity`](Self::capacity). A call that finds no one waiting meets
/// [`try_record`](Self::try_record) first, so a schedule that starts at its
/// first call (a balanced ring) starts there; a call that must wait is then
/// asked [`earliest`](Self::earliest) and, when its turn comes,
/// [`record`](Self::record)ed. Instants passed in may lag each other by the
/// time between two threads' clock readings; a schedule treats an instant
/// earlier than one already recorded as that one. A schedule owns no clock
/// and no queue: the waiter handles time, sleeping and the order of waiters.
pub trait Schedule: Send + 'static {
    /// The most permits one call may ask for; a waiter refuses more.
    fn capacity(&self) -> u64;

    /// The earliest instant at or after `now` at which `n` permits may go,
    /// if nothing else is recorded first.
    fn earliest(&self, now: u64, n: u64) -> u64;

    /// Records `n` permits going at `at`, an instant at or after
    /// [`earliest`](Self::earliest)`(at, n)`.
    fn record(&mut self, at: u64, n: u64);

    /// Records `n` permits at `now` when they may go now; `false` (and
    /// nothing recorded) when they must wait. The waiters' fast path.
    #[inline]
    fn try_record(&mut self, now: u64, n: u64) -> bool {
        if self.earliest(now, n) <= now {
            self.record(now, n);
            true
        } else {
            false
        }
    }
}
