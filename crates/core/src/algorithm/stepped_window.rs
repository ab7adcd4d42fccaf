//! Stepped sliding window (the Databox design): time is cut into epoch-aligned
//! steps of size `k`, one counter per step; a step counts when any part of it
//! lies in `(t − P, t]`.
//!
//! This is the conservative rule: a step is dropped only once it lies wholly
//! before the window, so the stepped window never admits more than an exact
//! sliding window would. The default step comes from the Databox paper's
//! table ([`default_step`]). [`Algorithm::record`] counts a request that
//! was already made (Databox `/increment`) even when it is over the limit.
//! The first non-empty step lives inside the state; only more move to the
//! heap.

use std::time::Duration;

use super::codec::{Reader, StateCodec};
use super::divisor::Divisor;
use super::running_totals::RunningTotals;
use super::tally::{queued, Instants, Tally};
use super::{until, Algorithm, Slot};
use crate::decision::Decision;
use crate::limit::LimitError;
use crate::rate::Rate;
use crate::time::NANOS_PER_MS;

/// At most `N` in the steps touching any window of `P`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SteppedWindow {
    n: u64,
    p: u64,
    step: u64,
    /// `P = whole_steps × step + extra`: kept so that finding the oldest step
    /// touching a window takes one division, not two.
    whole_steps: u64,
    extra: u64,
    /// Dividing by `step`: the step of an instant.
    per_step: Divisor,
}

/// The non-empty steps that may still touch a window, oldest first: one mark
/// per step index, with the running total of counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SteppedWindowState {
    steps: RunningTotals,
}

/// The step the Databox paper uses for a window of `period`, never longer
/// than the period: a window shorter than the table's 10 ms (which no step
/// of the table fits) is one step long, a fixed window.
///
/// ```
/// use tollgate_core::algorithm::default_step;
/// use std::time::Duration;
/// assert_eq!(default_step(Duration::from_millis(4)), Duration::from_millis(4));
/// assert_eq!(default_step(Duration::from_secs(10)), Duration::from_millis(10));
/// assert_eq!(default_step(Duration::from_secs(11)), Duration::from_millis(100));
/// assert_eq!(default_step(Duration::from_secs(3600)), Duration::from_secs(1));
/// assert_eq!(default_step(Duration::from_secs(86_400)), Duration::from_secs(60));
/// assert_eq!(default_step(Duration::from_secs(86_401)), Duration::from_secs(3600));
/// ```
pub fn default_step(period: Duration) -> Duration {
    let secs = |s: u64| Duration::from_secs(s);
    let table = if period <= secs(10) {
        Duration::from_millis(10)
    } else if period <= secs(60) {
        Duration::from_millis(100)
    } else if period <= secs(3_600) {
        secs(1)
    } else if period <= secs(86_400) {
        secs(60)
    } else {
        secs(3_600)
    };
    table.min(period)
}

impl SteppedWindow {
    /// At most `rate.limit()` per `rate.period()`, counted in steps of `step`
    /// (the paper's default when `None`). The step must be between 1 ms and
    /// the period.
    pub fn new(rate: Rate, step: Option<Duration>) -> Result<Self, LimitError> {
        let step = step.unwrap_or_else(|| default_step(rate.period()));
        let step_ns = u64::try_from(step.as_nanos()).unwrap_or(u64::MAX);
        if step_ns < NANOS_PER_MS || step_ns > rate.period_nanos() {
            return Err(LimitError::Step { step });
        }
        let p = rate.period_nanos();
        Ok(SteppedWindow {
            n: rate.limit(),
            p,
            step: step_ns,
            whole_steps: p / step_ns,
            extra: p % step_ns,
            per_step: Divisor::new(step_ns),
        })
    }

    /// The step size.
    pub fn step(&self) -> Duration {
        Duration::from_nanos(self.step)
    }

    /// The oldest step that touches `(t − P, t]`.
    fn oldest_touching(&self, t: u64) -> u64 {
        self.step_and_oldest(t).1
    }

    /// `t`'s step and the oldest step that touches `(t − P, t]`, from one
    /// division.
    #[inline]
    fn step_and_oldest(&self, t: u64) -> (u64, u64) {
        // floor((t − P) / k) with t = a·k + b and P = q·k + r is
        // a − q − [b < r]: one division instead of a subtraction and one.
        let (a, b) = self.per_step.div_rem(t);
        if t < self.p {
            return (a, 0);
        }
        (a, a - self.whole_steps - u64::from(b < self.extra))
    }

    /// [`oldest_touching`](Self::oldest_touching) for the start of `step`,
    /// without dividing.
    fn oldest_touching_step(&self, step: u64) -> u64 {
        step.saturating_sub(self.whole_steps + u64::from(self.extra > 0))
    }

    /// The requests counted at `t` (steps after `t`'s are not yet reached).
    /// The oldest step that still counts in the window ending at `now`,
    /// or at the newest step when that is later.
    fn oldest_in_play(&self, state: &SteppedWindowState, now: u64) -> u64 {
        let now_step = self.per_step.floor(now);
        let newest = state
            .steps
            .newest()
            .map_or(now_step, |s| s.at.max(now_step));
        self.oldest_touching_step(newest)
    }

    fn count_at(&self, state: &SteppedWindowState, t: u64) -> u64 {
        state.steps.count_from(self.oldest_touching(t))
    }

    /// The first instant at which `step` no longer touches the window.
    fn step_leaves(&self, step: u64) -> u64 {
        step.saturating_add(1)
            .saturating_mul(self.step)
            .saturating_add(self.p)
    }

    fn leave_time(&self, state: &SteppedWindowState, cost: u64) -> u64 {
        let target = (state.steps.total() + cost).saturating_sub(self.n);
        state
            .steps
            .first_reaching(target)
            .map_or(0, |s| self.step_leaves(s.at))
    }

    fn pending(&self, state: &SteppedWindowState, now: u64) -> bool {
        state
            .steps
            .newest()
            .is_some_and(|s| now < s.at.saturating_mul(self.step))
    }

    /// [`count_usage`](Self::count_usage) of a request in step `step`.
    #[inline]
    fn record_in_step(&self, state: &mut SteppedWindowState, step: u64, cost: u64) {
        let newest = state.steps.newest().map_or(step, |s| s.at.max(step));
        let oldest = self.oldest_touching_step(newest);
        if step < oldest {
            return;
        }
        state.steps.drop_before(oldest);
        state.steps.add(step, cost);
    }

    /// Counts `cost` at `at`, whatever the limit says. Steps that can no
    /// longer touch any window are ignored; out-of-order instants land in
    /// their own step. Cost 0 counts nothing.
    fn count_usage(&self, state: &mut SteppedWindowState, at: u64, cost: u64) {
        if cost == 0 {
            return;
        }
        self.record_in_step(state, self.per_step.floor(at), cost);
    }

    /// The requests counted in the window ending at `t`.
    pub fn count(&self, state: &SteppedWindowState, t: u64) -> u64 {
        self.count_at(state, t)
    }
}

impl Algorithm for SteppedWindow {
    type State = SteppedWindowState;

    #[inline]
    fn limit(&self) -> u64 {
        self.n
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.n
    }

    #[inline]
    fn new_state(&self) -> SteppedWindowState {
        SteppedWindowState::default()
    }

    #[inline]
    fn evaluate(&self, state: &SteppedWindowState, now: u64, cost: u64) -> Decision {
        if self.pending(state, now) {
            let next = self.next_available(state, now, cost);
            return queued(self.n, now, next, self.expires_at(state));
        }
        let tally = Tally {
            limit: self.n,
            count: self.count_at(state, now),
        };
        tally.decide(
            now,
            cost,
            Instants {
                // A counted request lands in the newest step, `now`'s.
                reset_if_counted: || self.step_leaves(self.per_step.floor(now)),
                reset: || self.expires_at(state),
                retry: || self.leave_time(state, cost),
            },
        )
    }

    /// One division finds `now`'s step and the window's oldest; the window
    /// is counted once.
    #[inline]
    fn admit(&self, state: &mut SteppedWindowState, now: u64, cost: u64) -> Decision {
        if self.pending(state, now) {
            return self.evaluate(state, now, cost);
        }
        let (step, oldest) = self.step_and_oldest(now);
        let (outside, before) = state.steps.first_from(oldest);
        let count = state.steps.total() - before;
        if count + cost > self.n {
            return self.evaluate(state, now, cost);
        }
        // What `count_usage` does, with what is known: `now`'s step is the newest
        // (nothing is pending), and the steps that can touch no window from
        // it on are those before the window's oldest, or one more when the
        // period is not a whole number of steps.
        let keep_from = self.oldest_touching_step(step);
        if keep_from == oldest {
            state.steps.drop_first_and_add(outside, before, step, cost);
        } else {
            state.steps.drop_before(keep_from);
            state.steps.add(step, cost);
        }
        Decision {
            allowed: true,
            limit: self.n,
            remaining: self.n - count - cost,
            reset_after: until(now, self.step_leaves(step)),
            ..Decision::default()
        }
    }

    #[inline]
    fn commit(&self, state: &mut SteppedWindowState, now: u64, cost: u64) -> Option<u64> {
        self.count_usage(state, now, cost);
        None
    }

    fn next_available(&self, state: &SteppedWindowState, now: u64, cost: u64) -> u64 {
        let from = state
            .steps
            .newest()
            .map_or(now, |s| now.max(s.at.saturating_mul(self.step)));
        if self.count_at(state, from) + cost <= self.n {
            from
        } else {
            self.leave_time(state, cost)
        }
    }

    fn slot(&self, state: &SteppedWindowState, now: u64, cost: u64) -> Option<Slot> {
        let at = self.next_available(state, now, cost);
        Some(Slot { at, wait: at - now })
    }

    fn book(&self, state: &mut SteppedWindowState, _now: u64, slot: Slot, cost: u64) {
        self.count_usage(state, slot.at, cost);
    }

    fn expires_at(&self, state: &SteppedWindowState) -> u64 {
        state.steps.newest().map_or(0, |s| self.step_leaves(s.at))
    }

    /// Counts `cost` at `at` (Databox `/increment`), beyond `N` if need
    /// be: requests of non-zero cost are then refused until enough steps
    /// have left the window. Steps that can no longer touch any window are
    /// ignored; out-of-order instants land in their own step. The state
    /// keeps one mark per step that can touch a window, however much is
    /// recorded. Returns the count in the window ending at `at` or at the
    /// newest step's start, whichever is later; it saturates at
    /// `u64::MAX / 2`.
    fn record(&self, state: &mut SteppedWindowState, at: u64, cost: u64) -> Option<u64> {
        let step = self.per_step.floor(at);
        let newest = state.steps.newest().map_or(step, |s| s.at.max(step));
        let oldest = self.oldest_touching_step(newest);
        if cost > 0 && step >= oldest {
            // The steps that can touch no window go first, so that what
            // they held takes no room from this cost: a state that has
            // expired then records as a new one does.
            state.steps.drop_before(oldest);
            let cost = cost.min(state.steps.make_room());
            if cost > 0 {
                state.steps.add(step, cost);
            }
        }
        let newest_start = state
            .steps
            .newest()
            .map_or(0, |s| s.at.saturating_mul(self.step));
        Some(self.count_at(state, at.max(newest_start)))
    }

    /// Off the request's step while that step is still in the window
    /// ending at `now` (or at the newest step); dropped once it has left.
    fn refund(
        &self,
        state: &mut SteppedWindowState,
        admitted_at: u64,
        now: u64,
        cost: u64,
    ) -> Option<bool> {
        let step = self.per_step.floor(admitted_at);
        if step < self.oldest_in_play(state, now) {
            return Some(false);
        }
        Some(state.steps.take_at(step, cost))
    }

    /// In the request's step while that step is still in the window, as
    /// if the request had cost that much; in `now`'s step once it has
    /// left.
    fn charge(
        &self,
        state: &mut SteppedWindowState,
        admitted_at: u64,
        now: u64,
        cost: u64,
    ) -> Option<u64> {
        let step = self.per_step.floor(admitted_at);
        let at = if step < self.oldest_in_play(state, now) {
            now
        } else {
            admitted_at
        };
        self.record(state, at, cost)
    }

    fn heap_bytes(&self, state: &SteppedWindowState) -> usize {
        state.steps.heap_bytes()
    }
}

impl StateCodec for SteppedWindow {
    fn encode_state(&self, state: &SteppedWindowState, out: &mut Vec<u8>) {
        state.steps.encode(out);
    }

    fn decode_state(&self, input: &mut Reader<'_>) -> Option<SteppedWindowState> {
        Some(SteppedWindowState {
            steps: RunningTotals::decode(input)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_after_a_saturating_one_has_left_the_window_counts() {
        let rate = Rate::from_nanos(10, 4_000 * NANOS_PER_MS).unwrap();
        let w = SteppedWindow::new(rate, Some(Duration::from_secs(1))).unwrap();
        let mut state = w.new_state();
        let s = 1_000 * NANOS_PER_MS;
        assert_eq!(w.record(&mut state, 0, u64::MAX), Some(u64::MAX / 2));
        // That step left the window at 5 s: the state is as good as new,
        // and records as a new one does.
        assert_eq!(w.expires_at(&state), 5 * s);
        assert_eq!(w.record(&mut state, 6 * s, 1), Some(1));
        assert_eq!(w.record(&mut state, 6 * s, 1), Some(2));
        let mut fresh = w.new_state();
        w.record(&mut fresh, 6 * s, 2);
        assert_eq!(state, fresh);
    }

    #[test]
    fn oldest_touching_matches_its_definition() {
        for (p, k) in [(4_000, 1_000), (4_500, 1_000), (1_000, 1_000), (7_001, 3)] {
            let rate = Rate::from_nanos(5, p * NANOS_PER_MS).unwrap();
            let w = SteppedWindow::new(rate, Some(Duration::from_millis(k))).unwrap();
            let (p, k) = (p * NANOS_PER_MS, k * NANOS_PER_MS);
            for t in (0..30 * k)
                .step_by(usize::try_from(k / 7 + 1).unwrap())
                .chain([p - 1, p, p + 1])
            {
                assert_eq!(
                    w.oldest_touching(t),
                    t.saturating_sub(p) / k,
                    "t={t} p={p} k={k}"
                );
            }
            for step in 0..40 {
                assert_eq!(
                    w.oldest_touching_step(step),
                    (step * k).saturating_sub(p) / k
                );
            }
        }
    }

    #[test]
    fn a_window_shorter_than_the_tables_step_is_one_step_long() {
        // 3 per 5 ms: the table's 10 ms step does not fit; without a step
        // given, the window is a fixed window of 5 ms.
        let rate = Rate::from_nanos(3, 5 * NANOS_PER_MS).unwrap();
        let w = SteppedWindow::new(rate, None).unwrap();
        assert_eq!(w.oldest_touching(12 * NANOS_PER_MS), 1);
        assert_eq!(
            default_step(Duration::from_millis(1)),
            Duration::from_millis(1)
        );
        assert_eq!(
            default_step(Duration::from_millis(10)),
            Duration::from_millis(10)
        );
    }
}
