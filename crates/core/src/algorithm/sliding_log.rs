//! Sliding window log: the timestamps of admitted requests; a request is
//! admitted when those in `(t − P, t]` plus its cost stay within `N`.
//!
//! Exact: no span of length `P` ever holds more than `N`. Rejected requests
//! are not logged. Each entry carries the running total of costs, so counting
//! a window and finding when enough entries leave it are binary searches.
//! Entries are kept in time order; a reservation is logged at its slot, and
//! until the newest entry's instant plain checks are rejected (they do not
//! jump the queue of booked requests). The first two entries live inside the
//! state; only a longer log moves to the heap.

use std::time::Duration;

use super::small_deque::SmallDeque;
use super::{until, Algorithm, Slot};
use crate::decision::Decision;
use crate::rate::Rate;

/// At most `N` in any span of length `P`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowLog {
    n: u64,
    p: u64,
}

/// Entries kept inside the state before the log moves to the heap: a key
/// checked at a steady pace usually holds one or two.
const INLINE: usize = 2;

/// One logged request: its instant and the running total of costs up to and
/// including it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Entry {
    at: u64,
    total: u64,
}

/// The logged requests still inside the window, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingWindowLogState {
    entries: SmallDeque<Entry, INLINE>,
    /// The running total before the oldest entry.
    dropped_total: u64,
}

impl SlidingWindowLogState {
    fn newest(&self) -> Option<Entry> {
        self.entries.back().copied()
    }

    fn total(&self) -> u64 {
        self.newest().map_or(self.dropped_total, |e| e.total)
    }

    fn total_before(&self, index: usize) -> u64 {
        match index.checked_sub(1) {
            Some(i) => self.entries[i].total,
            None => self.dropped_total,
        }
    }

    /// Index of the first entry still inside `(t − P, t]`.
    fn first_inside(&self, t: u64, p: u64) -> usize {
        self.entries
            .partition_point(|e| e.at.saturating_add(p) <= t)
    }

    fn count_inside(&self, t: u64, p: u64) -> u64 {
        self.total() - self.total_before(self.first_inside(t, p))
    }

    fn forget_before(&mut self, t: u64, p: u64) {
        while let Some(front) = self.entries.front() {
            if front.at.saturating_add(p) > t {
                break;
            }
            self.dropped_total = front.total;
            self.entries.pop_front();
        }
    }

    fn log(&mut self, at: u64, cost: u64) {
        let total = self.total() + cost;
        // Requests logged at the same instant are indistinguishable: one
        // entry holds them all.
        let last = self.entries.len().checked_sub(1);
        let newest = last.and_then(|i| self.entries.iter_mut_from(i).next());
        if let Some(newest) = newest.filter(|e| e.at == at) {
            newest.total = total;
            return;
        }
        self.entries.push_back(Entry { at, total });
    }
}

impl SlidingWindowLog {
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
        let target = (state.total() + cost).saturating_sub(self.n);
        let index = state.entries.partition_point(|e| e.total < target);
        state
            .entries
            .get(index)
            .map_or(0, |e| e.at.saturating_add(self.p))
    }

    fn pending(&self, state: &SlidingWindowLogState, now: u64) -> bool {
        state.newest().is_some_and(|e| now < e.at)
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
        let mut decision = Decision {
            limit: self.n,
            ..Decision::default()
        };
        if self.pending(state, now) {
            decision.retry_after = until(now, self.next_available(state, now, cost));
            decision.reset_after = until(now, self.expires_at(state));
            return decision;
        }
        let count = state.count_inside(now, self.p);
        decision.allowed = count + cost <= self.n;
        if decision.allowed {
            decision.remaining = self.n - count - cost;
            // A counted request is the newest entry, gone after P; a peek
            // waits for the newest entry already logged.
            decision.reset_after = if cost > 0 {
                Duration::from_nanos(self.p)
            } else {
                until(now, self.expires_at(state))
            };
        } else {
            decision.remaining = self.n.saturating_sub(count);
            decision.retry_after = until(now, self.leave_time(state, cost));
            decision.reset_after = until(now, self.expires_at(state));
        }
        decision
    }

    #[inline]
    fn commit(&self, state: &mut SlidingWindowLogState, now: u64, cost: u64) -> Option<u64> {
        state.forget_before(now, self.p);
        state.log(now, cost);
        None
    }

    fn next_available(&self, state: &SlidingWindowLogState, now: u64, cost: u64) -> u64 {
        let from = state.newest().map_or(now, |e| now.max(e.at));
        if state.count_inside(from, self.p) + cost <= self.n {
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
        state.newest().map_or(0, |e| e.at.saturating_add(self.p))
    }

    fn heap_bytes(&self, state: &SlidingWindowLogState) -> usize {
        state.entries.heap_bytes()
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
        assert_eq!(state.entries.len(), 2);
        assert_eq!(log.check(&mut state, 9, 0).unwrap().remaining, 49);
    }
}
