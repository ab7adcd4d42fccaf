//! Sliding window counter (Cloudflare's approximation): two epoch-aligned
//! window counts, the previous one weighted by how much of it still overlaps
//! the sliding window.
//!
//! Admitted when `floor(prev × (P − elapsed) / P) + curr + c ≤ N`. On a
//! calendar's windows, whose lengths vary, `P` is the length of the current
//! window: the previous window weighs the share of the current one still
//! to come.
//! A reservation is counted in the window of its slot and remembered as
//! `booked_until`; before that instant plain checks are rejected (they do not
//! jump the queue of booked requests).

use super::codec::{put_u64, Reader, StateCodec};
use super::tally::{queued, Instants, Tally};
use super::windows::Windows;
use super::{Algorithm, Slot};
use crate::calendar::{Calendar, Window};
use crate::decision::Decision;
use crate::rate::Rate;

/// At most `N` per sliding window of `P` (or of a calendar unit),
/// estimated from two counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowCounter {
    n: u64,
    windows: Windows,
}

/// The current window's index and the counts of it and the one before.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlidingWindowCounterState {
    window: u64,
    prev: u64,
    curr: u64,
    booked_until: u64,
}

impl SlidingWindowCounter {
    /// At most `rate.limit()` per sliding `rate.period()`.
    pub fn new(rate: Rate) -> Self {
        SlidingWindowCounter::with_calendar(rate, None)
    }

    /// At most `rate.limit()` per sliding window of `calendar`'s unit (its
    /// `rate.period()` unused), or of `rate.period()` when there is none.
    pub fn with_calendar(rate: Rate, calendar: Option<Calendar>) -> Self {
        SlidingWindowCounter {
            n: rate.limit(),
            windows: Windows::new(rate.period_nanos(), calendar),
        }
    }

    /// `(prev, curr)` as seen from `window`, which is not before the state's.
    fn counts(&self, state: &SlidingWindowCounterState, window: u64) -> (u64, u64) {
        if state.window == window {
            (state.prev, state.curr)
        } else if state.window + 1 == window {
            (state.curr, 0)
        } else {
            (0, 0)
        }
    }

    /// `prev` weighed at `elapsed` ns into a window of `len` ns.
    fn weighted(&self, prev: u64, elapsed: u64, len: u64) -> u64 {
        let weighted = u128::from(prev) * u128::from(len - elapsed);
        self.windows.divide(weighted, len)
    }

    /// The weighted count of `window` at `t` (in it), its counts being
    /// `(prev, curr)`.
    fn weighted_count(&self, window: &Window, prev: u64, curr: u64, t: u64) -> u64 {
        let len = self.windows.len(window);
        self.weighted(prev, t - window.start, len)
            .saturating_add(curr)
    }

    /// The first elapsed time (ns into a window of `len` ns) from which
    /// `floor(prev × (len − e) / len) ≤ room`.
    fn first_elapsed_within(&self, prev: u64, room: u64, len: u64) -> u64 {
        if prev <= room {
            return 0;
        }
        // prev·(P − e) < (room + 1)·P  ⇔  e > P·(prev − room − 1) / prev
        let p = u128::from(len);
        let e = p * u128::from(prev - room - 1) / u128::from(prev) + 1;
        u64::try_from(e).unwrap_or(u64::MAX)
    }

    /// The first instant at or after `from` at which `cost` fits, counting
    /// from a state whose counts are `(prev, curr)` in `from`'s window.
    fn first_fit(&self, prev: u64, curr: u64, cost: u64, from: u64) -> u64 {
        let window = self.windows.at(from);
        let next = self.windows.get(window.index.saturating_add(1));
        // This window, the next (this one's count becomes prev), the one after
        // (both empty: always fits, since cost ≤ N). Instants saturate at
        // u64::MAX (reservations piled up near the end of time).
        let candidates = [(prev, curr, &window), (curr, 0, &next)];
        for (prev, curr, window) in candidates {
            if curr + cost > self.n {
                continue;
            }
            let len = self.windows.len(window);
            let e = self.first_elapsed_within(prev, self.n - curr - cost, len);
            if e < len {
                return from.max(window.start.saturating_add(e));
            }
        }
        next.end
    }

    /// When a state with these counts in `window` stops weighing anything.
    fn quiet_from(&self, window: u64, prev: u64, curr: u64) -> u64 {
        if curr > 0 {
            let next = self.windows.get(window.saturating_add(1));
            let len = self.windows.len(&next);
            next.start
                .saturating_add(self.first_elapsed_within(curr, 0, len))
        } else if prev > 0 {
            let current = self.windows.get(window);
            let len = self.windows.len(&current);
            current
                .start
                .saturating_add(self.first_elapsed_within(prev, 0, len))
        } else {
            0
        }
    }

    fn pending(&self, state: &SlidingWindowCounterState, now: u64) -> bool {
        now < state.booked_until || self.windows.index_at(now) < state.window
    }
}

impl Algorithm for SlidingWindowCounter {
    type State = SlidingWindowCounterState;

    #[inline]
    fn limit(&self) -> u64 {
        self.n
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.n
    }

    #[inline]
    fn new_state(&self) -> SlidingWindowCounterState {
        SlidingWindowCounterState::default()
    }

    #[inline(always)]
    fn evaluate(&self, state: &SlidingWindowCounterState, now: u64, cost: u64) -> Decision {
        if self.pending(state, now) {
            let next = self.next_available(state, now, cost);
            return queued(self.n, now, next, self.expires_at(state));
        }
        let current = self.windows.at(now);
        let window = current.index;
        let (prev, curr) = self.counts(state, window);
        let tally = Tally {
            limit: self.n,
            count: self.weighted(prev, now - current.start, self.windows.len(&current)) + curr,
        };
        tally.decide(
            now,
            cost,
            Instants {
                reset_if_counted: || self.quiet_from(window, prev, curr + cost),
                reset: || self.quiet_from(window, prev, curr),
                retry: || self.first_fit(prev, curr, cost, now),
            },
        )
    }

    #[inline(always)]
    fn commit(&self, state: &mut SlidingWindowCounterState, now: u64, cost: u64) -> Option<u64> {
        let window = self.windows.index_at(now);
        let (prev, curr) = self.counts(state, window);
        state.window = window;
        state.prev = prev;
        state.curr = curr + cost;
        None
    }

    fn next_available(&self, state: &SlidingWindowCounterState, now: u64, cost: u64) -> u64 {
        let from = now
            .max(state.booked_until)
            .max(self.windows.get(state.window).start);
        let (prev, curr) = self.counts(state, self.windows.index_at(from));
        self.first_fit(prev, curr, cost, from)
    }

    fn slot(&self, state: &SlidingWindowCounterState, now: u64, cost: u64) -> Option<Slot> {
        let at = self.next_available(state, now, cost);
        Some(Slot { at, wait: at - now })
    }

    fn book(&self, state: &mut SlidingWindowCounterState, _now: u64, slot: Slot, cost: u64) {
        self.commit(state, slot.at, cost);
        state.booked_until = state.booked_until.max(slot.at);
    }

    /// Adds `cost` to the count of `at`'s window (the current one, or the
    /// previous one when `at` lies there), beyond `N` if need be: the
    /// weighted count then refuses requests until it has fallen back, which
    /// may take up to two windows. Usage older than the previous window can
    /// change no decision and is ignored. Returns the weighted count at
    /// `at`, or at the start of the state's window when that is later.
    /// Counts saturate where adding any cost still fits the codec's bound.
    fn record(&self, state: &mut SlidingWindowCounterState, at: u64, cost: u64) -> Option<u64> {
        let most = (u64::MAX - self.n) / 2;
        let window = self.windows.index_at(at);
        if cost > 0 {
            if window >= state.window {
                let (prev, curr) = self.counts(state, window);
                state.window = window;
                state.prev = prev;
                state.curr = curr.saturating_add(cost).min(most);
            } else if window + 1 == state.window {
                state.prev = state.prev.saturating_add(cost).min(most);
            }
        }
        let t = at.max(self.windows.get(state.window).start);
        let current = self.windows.at(t);
        let (prev, curr) = self.counts(state, current.index);
        Some(self.weighted_count(&current, prev, curr, t))
    }

    /// Into the window the request was counted in while that window
    /// still weighs in decisions (the current one or, weighted, the
    /// previous one); dropped once it has ended for good.
    fn refund(
        &self,
        state: &mut SlidingWindowCounterState,
        admitted_at: u64,
        now: u64,
        cost: u64,
    ) -> Option<bool> {
        let window = self.windows.index_at(admitted_at);
        if self.windows.index_at(now) > window.saturating_add(1) {
            return Some(false);
        }
        let count = if state.window == window {
            &mut state.curr
        } else if window.saturating_add(1) == state.window {
            &mut state.prev
        } else {
            return Some(false);
        };
        *count -= cost.min(*count);
        Some(true)
    }

    fn expires_at(&self, state: &SlidingWindowCounterState) -> u64 {
        self.quiet_from(state.window, state.prev, state.curr)
            .max(state.booked_until)
    }
}

impl StateCodec for SlidingWindowCounter {
    fn encode_state(&self, state: &SlidingWindowCounterState, out: &mut Vec<u8>) {
        for v in [state.window, state.prev, state.curr, state.booked_until] {
            put_u64(out, v);
        }
    }

    fn decode_state(&self, input: &mut Reader<'_>) -> Option<SlidingWindowCounterState> {
        let state = SlidingWindowCounterState {
            window: input.u64()?,
            prev: input.u64()?,
            curr: input.u64()?,
            booked_until: input.u64()?,
        };
        // Bookings piled up at the end of time count beyond the limit in
        // the last window; any counts a cost can still be added to are
        // counts this algorithm can reach.
        let most = (u64::MAX - self.capacity()) / 2;
        (state.prev <= most && state.curr <= most).then_some(state)
    }
}
