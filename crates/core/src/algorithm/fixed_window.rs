//! Fixed window: a counter per window, windows aligned to the Unix epoch
//! (`floor(t / P)`), as in envoyproxy/ratelimit, or the windows of a
//! calendar (a day, week, month or year in a time zone).
//!
//! A reservation that does not fit the current window is booked into the
//! first later window with room; the state then holds that window. Until it
//! begins, plain checks are rejected (they do not jump the queue of booked
//! requests), and further reservations fill that window or the next.

use super::codec::{put_u64, Reader, StateCodec};
use super::tally::{queued, Instants, Tally};
use super::windows::Windows;
use super::{Algorithm, Slot};
use crate::calendar::Calendar;
use crate::decision::Decision;
use crate::rate::Rate;

/// At most `N` per epoch-aligned window of `P`, or per calendar window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    n: u64,
    windows: Windows,
}

/// The window's number (`floor(t / P)`, or the calendar's) the count
/// belongs to, and the count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FixedWindowState {
    window: u64,
    count: u64,
}

impl FixedWindow {
    /// At most `rate.limit()` per window of `rate.period()`.
    pub fn new(rate: Rate) -> Self {
        FixedWindow::with_calendar(rate, None)
    }

    /// At most `rate.limit()` per window of `calendar` (its `rate.period()`
    /// unused), or per `rate.period()` when there is none.
    pub fn with_calendar(rate: Rate, calendar: Option<Calendar>) -> Self {
        FixedWindow {
            n: rate.limit(),
            windows: Windows::new(rate.period_nanos(), calendar),
        }
    }

    fn window_end(&self, window: u64) -> u64 {
        self.windows.get(window).end
    }

    /// The count of `window` as the state records it.
    fn count_in(&self, state: &FixedWindowState, window: u64) -> u64 {
        if state.window == window {
            state.count
        } else {
            0
        }
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    #[inline]
    fn limit(&self) -> u64 {
        self.n
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.n
    }

    #[inline]
    fn new_state(&self) -> FixedWindowState {
        FixedWindowState::default()
    }

    #[inline(always)]
    fn evaluate(&self, state: &FixedWindowState, now: u64, cost: u64) -> Decision {
        let current = self.windows.at(now);
        let window = current.index;
        if state.window > window {
            // A later window is booked: wait for the queue.
            let next = self.next_available(state, now, cost);
            return queued(self.n, now, next, self.expires_at(state));
        }
        let count = self.count_in(state, window);
        let end = current.end;
        let tally = Tally {
            limit: self.n,
            count,
        };
        tally.decide(
            now,
            cost,
            Instants {
                reset_if_counted: || end,
                reset: || if count > 0 { end } else { now },
                retry: || end,
            },
        )
    }

    #[inline(always)]
    fn commit(&self, state: &mut FixedWindowState, now: u64, cost: u64) -> Option<u64> {
        let window = self.windows.index_at(now);
        state.count = self.count_in(state, window) + cost;
        state.window = window;
        None
    }

    fn next_available(&self, state: &FixedWindowState, now: u64, cost: u64) -> u64 {
        let window = self.windows.index_at(now).max(state.window);
        let bounds = self.windows.get(window);
        if self.count_in(state, window) + cost <= self.n {
            now.max(bounds.start)
        } else {
            bounds.end
        }
    }

    fn slot(&self, state: &FixedWindowState, now: u64, cost: u64) -> Option<Slot> {
        let at = self.next_available(state, now, cost);
        Some(Slot { at, wait: at - now })
    }

    fn book(&self, state: &mut FixedWindowState, _now: u64, slot: Slot, cost: u64) {
        self.commit(state, slot.at, cost);
    }

    /// Adds `cost` to the count of `at`'s window, beyond `N` if need be:
    /// requests of non-zero cost are then refused until the window ends.
    /// Usage in a window older than the state's (which has ended, or was
    /// given up for a booked later one) can change no decision and is
    /// ignored. Returns the count of the later of the two windows. The
    /// count saturates at `u64::MAX − N`, where adding any cost still fits.
    fn record(&self, state: &mut FixedWindowState, at: u64, cost: u64) -> Option<u64> {
        let window = self.windows.index_at(at);
        if window < state.window {
            return Some(state.count);
        }
        if cost > 0 {
            let most = u64::MAX - self.n;
            state.count = self.count_in(state, window).saturating_add(cost).min(most);
            state.window = window;
        }
        Some(self.count_in(state, window))
    }

    /// Into the window the request was counted in, while the state still
    /// holds it and it has not ended; dropped otherwise.
    fn refund(
        &self,
        state: &mut FixedWindowState,
        admitted_at: u64,
        now: u64,
        cost: u64,
    ) -> Option<bool> {
        let window = self.windows.index_at(admitted_at);
        if state.window != window || self.windows.index_at(now) > window {
            return Some(false);
        }
        state.count -= cost.min(state.count);
        Some(true)
    }

    fn expires_at(&self, state: &FixedWindowState) -> u64 {
        if state.count == 0 {
            0
        } else {
            self.window_end(state.window)
        }
    }
}

impl StateCodec for FixedWindow {
    fn encode_state(&self, state: &FixedWindowState, out: &mut Vec<u8>) {
        put_u64(out, state.window);
        put_u64(out, state.count);
    }

    fn decode_state(&self, input: &mut Reader<'_>) -> Option<FixedWindowState> {
        let window = input.u64()?;
        let count = input.u64()?;
        // Bookings piled up at the end of time count beyond the limit in
        // the last window; any count a cost can still be added to is one
        // this algorithm can reach.
        count
            .checked_add(self.capacity())
            .map(|_| FixedWindowState { window, count })
    }
}
