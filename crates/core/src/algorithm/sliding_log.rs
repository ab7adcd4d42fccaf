//! Sliding window log: the timestamps of admitted requests; a request is
//! admitted when those in `(t − P, t]` plus its cost stay within `N`.
//!
//! Exact: no span of length `P` ever holds more than `N`. Rejected requests
//! are not logged. Each entry carries the running total of costs, so counting
//! a window and finding when enough entries leave it are binary searches.
//! Entries are kept in time order; a reservation is logged at its slot, and
//! until the newest entry's instant plain checks are rejected (they do not
//! jump the queue of booked requests). The first entry lives inside the
//! state; only a longer log moves to the heap.

use super::codec::{Reader, StateCodec};
use super::running_totals::RunningTotals;
use super::tally::{queued, Instants, Tally};
use super::{until, Algorithm, Slot};
use crate::decision::Decision;
use crate::rate::Rate;

/// At most `N` in any span of length `P`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowLog {
    n: u64,
    p: u64,
}

/// The logged requests still inside the window, oldest first: one mark per
/// instant, with the running total of costs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingWindowLogState {
    log: RunningTotals,
}

impl SlidingWindowLog {
    /// The oldest instant inside `(t − P, t]`.
    fn window_start(&self, t: u64) -> u64 {
        t.checked_sub(self.p).map_or(0, |start| start + 1)
    }

    fn count_inside(&self, state: &SlidingWindowLogState, t: u64) -> u64 {
        state.log.count_from(self.window_start(t))
    }

    /// At most `rate.limit()` in any span of `rate.period()`.
    pub fn new(rate: Rate) -> Self {
        SlidingWindowLog {
            n: rate.limit(),
            p: rate.period_nanos(),
        }
    }

    /// The instant enough entries have left the window for `cost` to fit,
    /// given that it does not fit now.
    fn leave_time(&self, state: &SlidingWindowLogState, cost: u64) -> u64 {
        let target = (state.log.total() + cost).saturating_sub(self.n);
        state
            .log
            .first_reaching(target)
            .map_or(0, |e| e.at.saturating_add(self.p))
    }

    fn pending(&self, state: &SlidingWindowLogState, now: u64) -> bool {
        state.log.newest().is_some_and(|e| now < e.at)
    }
}

impl Algorithm for SlidingWindowLog {
    type State = SlidingWindowLogState;

    #[inline]
    fn limit(&self) -> u64 {
        self.n
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.n
    }

    #[inline]
    fn new_state(&self) -> SlidingWindowLogState {
        SlidingWindowLogState::default()
    }

    #[inline]
    fn evaluate(&self, state: &SlidingWindowLogState, now: u64, cost: u64) -> Decision {
        if self.pending(state, now) {
            let next = self.next_available(state, now, cost);
            return queued(self.n, now, next, self.expires_at(state));
        }
        let tally = Tally {
            limit: self.n,
            count: self.count_inside(state, now),
        };
        tally.decide(
            now,
            cost,
            Instants {
                // A counted request is the newest entry, gone after P.
                reset_if_counted: || now.saturating_add(self.p),
                reset: || self.expires_at(state),
                retry: || self.leave_time(state, cost),
            },
        )
    }

    /// The window's start is found once: its marks count the window and
    /// are dropped when the request is admitted.
    #[inline]
    fn admit(&self, state: &mut SlidingWindowLogState, now: u64, cost: u64) -> Decision {
        if self.pending(state, now) {
            return self.evaluate(state, now, cost);
        }
        let (outside, before) = state.log.first_from(self.window_start(now));
        let count = state.log.total() - before;
        if count + cost > self.n {
            return self.evaluate(state, now, cost);
        }
        // Nothing is pending, so `now` is at or after every mark.
        state.log.drop_first_and_add(outside, before, now, cost);
        Decision {
            allowed: true,
            limit: self.n,
            remaining: self.n - count - cost,
            reset_after: until(now, now.saturating_add(self.p)),
            ..Decision::default()
        }
    }

    #[inline]
    fn commit(&self, state: &mut SlidingWindowLogState, now: u64, cost: u64) -> Option<u64> {
        state.log.drop_before(self.window_start(now));
        // Requests at the same instant are indistinguishable: they share a mark.
        state.log.add(now, cost);
        None
    }

    fn next_available(&self, state: &SlidingWindowLogState, now: u64, cost: u64) -> u64 {
        let from = state.log.newest().map_or(now, |e| now.max(e.at));
        if self.count_inside(state, from) + cost <= self.n {
            from
        } else {
            self.leave_time(state, cost)
        }
    }

    fn slot(&self, state: &SlidingWindowLogState, now: u64, cost: u64) -> Option<Slot> {
        let at = self.next_available(state, now, cost);
        Some(Slot { at, wait: at - now })
    }

    fn book(&self, state: &mut SlidingWindowLogState, _now: u64, slot: Slot, cost: u64) {
        self.commit(state, slot.at, cost);
    }

    fn expires_at(&self, state: &SlidingWindowLogState) -> u64 {
        state
            .log
            .newest()
            .map_or(0, |e| e.at.saturating_add(self.p))
    }

    /// Logs `cost` at `at`, beyond `N` if need be: requests of non-zero
    /// cost are then refused until enough has left the window. Usage
    /// before the window of the newest mark can change no decision and is
    /// ignored; an older instant inside it is logged in its place. The log
    /// stays bounded: once the marks inside the window hold more than `N`,
    /// the older marks are folded into the newest mark that, with those
    /// after it, still holds more than `N` — their costs then leave with it,
    /// later than they would have, but only while the window would refuse
    /// anyway, so no decision changes — and at most `N + 1` marks remain.
    /// Returns the count in the window ending at `at` or at the newest
    /// mark, whichever is later; folded costs may keep that count above
    /// the exact one (never below it) until they leave. The count in the
    /// window saturates at `u64::MAX / 2`.
    fn record(&self, state: &mut SlidingWindowLogState, at: u64, cost: u64) -> Option<u64> {
        let newest = state.log.newest().map_or(at, |e| e.at.max(at));
        let start = self.window_start(newest);
        if cost > 0 && at >= start {
            state.log.drop_before(start);
            let cost = cost.min(state.log.make_room());
            if cost > 0 {
                state.log.add(at, cost);
                state.log.fold_beyond(self.n);
            }
        }
        Some(self.count_inside(state, newest))
    }

    /// Off the request's mark while it is still in the window ending at
    /// `now` (or at the newest mark); dropped once it has left, or when
    /// its cost was folded into a later mark (only ever while the log
    /// refused anyway).
    fn refund(
        &self,
        state: &mut SlidingWindowLogState,
        admitted_at: u64,
        now: u64,
        cost: u64,
    ) -> Option<bool> {
        let newest = state.log.newest().map_or(now, |e| e.at.max(now));
        if admitted_at < self.window_start(newest) {
            return Some(false);
        }
        Some(state.log.take_at(admitted_at, cost))
    }

    /// At the request's mark while it is still in the window, as if the
    /// request had cost that much; at `now` once it has left.
    fn charge(
        &self,
        state: &mut SlidingWindowLogState,
        admitted_at: u64,
        now: u64,
        cost: u64,
    ) -> Option<u64> {
        let newest = state.log.newest().map_or(now, |e| e.at.max(now));
        let at = if admitted_at < self.window_start(newest) {
            now
        } else {
            admitted_at
        };
        self.record(state, at, cost)
    }

    fn heap_bytes(&self, state: &SlidingWindowLogState) -> usize {
        state.log.heap_bytes()
    }
}

impl StateCodec for SlidingWindowLog {
    fn encode_state(&self, state: &SlidingWindowLogState, out: &mut Vec<u8>) {
        state.log.encode(out);
    }

    fn decode_state(&self, input: &mut Reader<'_>) -> Option<SlidingWindowLogState> {
        Some(SlidingWindowLogState {
            log: RunningTotals::decode(input)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_at_one_instant_share_one_entry() {
        let log = SlidingWindowLog::new(Rate::per_second(100).unwrap());
        let mut state = log.new_state();
        for _ in 0..50 {
            assert!(log.check(&mut state, 7, 1).unwrap().allowed);
        }
        assert!(log.check(&mut state, 8, 1).unwrap().allowed);
        assert_eq!(state.log.len(), 2);
        assert_eq!(log.check(&mut state, 9, 0).unwrap().remaining, 49);
    }

    #[test]
    fn records_over_the_limit_keep_the_log_bounded() {
        let log = SlidingWindowLog::new(Rate::per_second(3).unwrap());
        let mut state = log.new_state();
        for at in 1..=1_000 {
            log.record(&mut state, at, 1);
        }
        assert_eq!(state.log.len(), 4, "the newest four marks hold 4 > 3");
        assert_eq!(log.check(&mut state, 1_000, 0).unwrap().remaining, 0);
        // As the exact log: refused until 998 has left the window too.
        let second = 1_000_000_000;
        assert!(!log.check(&mut state, 998 + second - 1, 1).unwrap().allowed);
        assert!(log.check(&mut state, 998 + second, 1).unwrap().allowed);
    }
}
