//! A GCRA waiter's schedule: the core's [`Gcra`], one integer of state.
//!
//! Permits go at the rate `N/P` with bursts of up to `burst` (default `N`),
//! with exactly the decisions of `tollgate-core`'s `gcra` algorithm (and so of
//! its `token_bucket` with the same rate and burst): this module holds a
//! [`Gcra`] and its state and asks them, rather than doing the arithmetic
//! again.
//!
//! Concurrency: the fast path is one compare-and-swap on a word holding the
//! theoretical arrival time relative to an origin (62 bits), a generation
//! bit and the "calls are waiting" flag, as governor's is on its 64-bit
//! state. The core counts time in `1/N` ns, which outgrows 62 bits, so the
//! origin is moved up (re-based) when needed: on the first call and then
//! rarely (at the fastest every half second, for a rate whose `N` has no
//! factor in common with its period; for `10/s`, never), always with the
//! fast path closed and the line locked; a reader that raced a re-basing
//! fails its compare-and-swap and tries again. The origin always sits on a
//! whole nanosecond no later than the clock reading that set it, so the
//! fast path does the core's arithmetic on 64-bit numbers relative to it
//! (exactly the core's decisions: a test replays the core side by side),
//! and leaves anything that does not fit to the line, which asks the core.
//! A configuration whose whole burst does not fit in the word at all (say a
//! burst of millions at one per century) keeps its state under the line's
//! lock and takes the slow path on every call.

use std::sync::atomic::{
    AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

use tollgate_core::algorithm::{Gcra, GcraState};
use tollgate_core::{Algorithm, Rate};

use super::error::WaiterError;
use super::line::Line;
use super::schedule::{Attempt, Schedule};

/// Calls are waiting in line.
const WAITING: u64 = 1 << 63;
/// Flipped on every re-basing, so a reader holding a word from before it
/// cannot complete a swap after it.
const GENERATION: u64 = 1 << 62;
/// The arrival time relative to the origin.
const RELATIVE: u64 = GENERATION - 1;
/// `origin_ns` while the origin is not on a whole nanosecond: no clock
/// reading is at or after it, so the fast path leaves every call to the
/// line.
const NO_FAST_PATH: u64 = u64::MAX;

/// The generic cell rate algorithm: `N` per `P`, evenly, with bursts of up
/// to `burst` permits (see the module docs).
#[derive(Debug)]
pub(crate) struct GcraSchedule {
    gcra: Gcra,
    word: AtomicU64,
    /// The origin, in the core's units, in two halves; written only with
    /// the fast path closed.
    origin_high: AtomicU64,
    origin_low: AtomicU64,
    /// The origin in nanoseconds: the origin is always this many times
    /// `units_per_ns`.
    origin_ns: AtomicU64,
    /// The core's units in a nanosecond (its reduced `N`), in a permit (its
    /// reduced `P`), and in the whole burst.
    units_per_ns: u64,
    units_per_permit: u64,
    burst_units: u64,
    /// The burst does not fit in the word: no fast path, and the whole
    /// arrival time lives in the origin.
    slow_only: bool,
}

impl GcraSchedule {
    /// `rate`, with bursts of up to `burst` permits (at least 1).
    pub(crate) fn new(rate: Rate, burst: u64) -> Result<Self, WaiterError> {
        let gcra = Gcra::new(rate, burst).map_err(WaiterError::Limit)?;
        // The core's units, read off the core: where a fresh state's arrival
        // time goes after one nanosecond, one permit, and a full burst.
        let units_after = |ns: u64, permits: u64| {
            let mut state = gcra.new_state();
            gcra.commit(&mut state, ns, permits);
            state.tat()
        };
        let full_burst = units_after(0, burst);
        let slow_only = full_burst > u128::from(RELATIVE / 2);
        let narrow = |units: u128| u64::try_from(units).unwrap_or(u64::MAX);
        Ok(GcraSchedule {
            gcra,
            // Until the first call re-bases it, the state is the core's
            // fresh one: arrival time 0.
            word: AtomicU64::new(if slow_only { WAITING } else { 0 }),
            origin_high: AtomicU64::new(0),
            origin_low: AtomicU64::new(0),
            origin_ns: AtomicU64::new(0),
            units_per_ns: narrow(units_after(1, 0)),
            units_per_permit: narrow(units_after(0, 1)),
            burst_units: narrow(full_burst),
            slow_only,
        })
    }

    fn origin(&self) -> u128 {
        u128::from(self.origin_high.load(Relaxed)) << 64 | u128::from(self.origin_low.load(Relaxed))
    }

    /// Moves the origin to `tat` for a state whose arrival time is `tat`,
    /// `now` being the latest clock reading known, and returns the arrival
    /// time relative to it. The origin goes on the last whole nanosecond at
    /// or before both, where the fast path can work from it, whenever the
    /// arrival time then fits the lower half of the word; otherwise (an
    /// arrival time far ahead of now, or a burst too wide for the word) on
    /// the arrival time itself, and the fast path stays out until the line
    /// re-bases again.
    fn rebase(&self, tat: u128, now: u64) -> u64 {
        let tat_ns = u64::try_from(tat / u128::from(self.units_per_ns.max(1))).unwrap_or(u64::MAX);
        let ns = tat_ns.min(now);
        let aligned = u128::from(ns) * u128::from(self.units_per_ns);
        let relative = tat.checked_sub(aligned).and_then(|r| u64::try_from(r).ok());
        let (origin, origin_ns, relative) = match relative {
            Some(r) if r <= RELATIVE / 2 && !self.slow_only => (aligned, ns, r),
            _ => (tat, NO_FAST_PATH, 0),
        };
        self.origin_ns.store(origin_ns, Relaxed);
        self.origin_high.store((origin >> 64) as u64, Relaxed);
        self.origin_low.store(origin as u64, Relaxed);
        relative
    }

    /// Whether the arrival time in `word`, brought up to `now`, sits in the
    /// lower half of what the word holds and the fast path can use the
    /// origin (no re-basing needed).
    fn fits(&self, word: u64, now: u64) -> bool {
        if self.origin_ns.load(Relaxed) == NO_FAST_PATH {
            return false;
        }
        let origin = self.origin();
        let mut state = GcraState::from_tat(origin + u128::from(word & RELATIVE));
        self.gcra.commit(&mut state, now, 0);
        state
            .tat()
            .checked_sub(origin)
            .is_some_and(|relative| relative <= u128::from(RELATIVE / 2))
    }

    /// The state with the line locked (nothing else writes it then).
    fn held_state(&self) -> GcraState {
        let relative = if self.slow_only {
            0
        } else {
            self.word.load(Acquire) & RELATIVE
        };
        GcraState::from_tat(self.origin() + u128::from(relative))
    }

    /// Stores `state` with the line locked, re-basing when it does not fit
    /// (on an origin at or before `now`); the flag as `waiting` says.
    fn store_held(&self, state: GcraState, now: u64, waiting: bool) {
        let flag = if waiting || self.slow_only {
            WAITING
        } else {
            0
        };
        let word = self.word.load(Acquire);
        let origin = self.origin();
        let relative = state
            .tat()
            .checked_sub(origin)
            .and_then(|r| u64::try_from(r).ok());
        match relative {
            Some(relative) if relative <= RELATIVE / 2 && !self.slow_only => {
                self.word
                    .store(flag | word & GENERATION | relative, Release);
            }
            _ => {
                // Close first (a fast path holding the old word fails its
                // swap), then move the origin, then publish.
                self.word.fetch_or(WAITING, AcqRel);
                let relative = self.rebase(state.tat(), now);
                self.word
                    .store(flag | (word ^ GENERATION) & GENERATION | relative, Release);
            }
        }
    }
}

impl Schedule for GcraSchedule {
    #[inline]
    fn capacity(&self) -> u64 {
        self.gcra.capacity()
    }

    #[inline(always)]
    fn try_take(&self, now: u64, n: u64) -> Attempt {
        let mut word = self.word.load(Acquire);
        loop {
            if word & WAITING != 0 {
                return Attempt::Closed;
            }
            // A re-basing may be moving the origin as we read it; then the
            // swap below fails, because the re-basing raised the flag on the
            // word (a read-modify-write, acquire and release, as the swap
            // is) before writing the origin, and flips the generation after.
            // The origin is read after the word (acquire).
            let origin_ns = self.origin_ns.load(Relaxed);
            // The core's arithmetic, relative to the origin: now in units,
            // the arrival time brought up to it, the permits added, and
            // admitted while the arrival time stays within a burst of now.
            // Anything that does not fit 64 bits (a clock reading before the
            // origin, a time too far from it) is the line's to handle.
            let Some(since_origin) = now.checked_sub(origin_ns) else {
                return Attempt::Busy;
            };
            // A unit is a nanosecond for every rate whose `N` divides its
            // period (`10/s`, `1000/min`): no multiplication then.
            let now_units = if self.units_per_ns == 1 {
                since_origin
            } else {
                match since_origin.checked_mul(self.units_per_ns) {
                    Some(units) => units,
                    None => return Attempt::Busy,
                }
            };
            let tat = (word & RELATIVE).max(now_units);
            // `n` is at most the burst, whose units fit the word.
            let Some(tat) = tat.checked_add(n * self.units_per_permit) else {
                return Attempt::Busy;
            };
            if tat - now_units > self.burst_units {
                return Attempt::Busy;
            }
            if tat > RELATIVE {
                // Time to re-base: the line does it.
                return Attempt::Busy;
            }
            match self
                .word
                .compare_exchange_weak(word, word & GENERATION | tat, AcqRel, Acquire)
            {
                Ok(_) => return Attempt::Taken,
                Err(current) => word = current,
            }
        }
    }

    fn maintain(&self, _held: &Line, now: u64) {
        if self.slow_only || self.fits(self.word.load(Acquire), now) {
            return;
        }
        // Close the fast path first and work from the word as it was then:
        // a swap that landed after our first look is in it.
        let word = self.word.fetch_or(WAITING, AcqRel);
        let mut state = GcraState::from_tat(self.origin() + u128::from(word & RELATIVE));
        // An arrival time behind now counts as now: re-based on
        // `max(tat, now)`, the state means the same.
        self.gcra.commit(&mut state, now, 0);
        let relative = self.rebase(state.tat(), now);
        // The line is empty: reopen, in a new generation.
        self.word
            .store((word ^ GENERATION) & GENERATION | relative, Release);
    }

    fn set_waiting(&self, _held: &Line, waiting: bool) {
        if self.slow_only {
            return;
        }
        if waiting {
            self.word.fetch_or(WAITING, AcqRel);
        } else {
            self.word.fetch_and(!WAITING, AcqRel);
        }
    }

    fn earliest(&self, _held: &Line, now: u64, n: u64) -> u64 {
        self.gcra.next_available(&self.held_state(), now, n)
    }

    fn record(&self, _held: &Line, at: u64, n: u64) {
        let mut state = self.held_state();
        self.gcra.commit(&mut state, at, n);
        self.store_held(state, at, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::waiter::jitter::{Jitter, JitterSource};

    const MS: u64 = 1_000_000;

    fn held() -> Line {
        Line::new(JitterSource::new(Jitter::NONE))
    }

    /// Takes `n` permits as early as allowed from `now` on, as a lone
    /// waiter does; the instant they are recorded at.
    fn take(g: &GcraSchedule, now: u64, n: u64) -> u64 {
        let line = held();
        if g.try_take(now, n) == Attempt::Taken {
            return now;
        }
        g.maintain(&line, now);
        if g.try_take(now, n) == Attempt::Taken {
            return now;
        }
        g.set_waiting(&line, true);
        let at = g.earliest(&line, now, n);
        g.record(&line, at, n);
        g.set_waiting(&line, false);
        at
    }

    #[test]
    fn bursts_then_paces_at_the_emission_interval() {
        let g = GcraSchedule::new(Rate::per_second(4).unwrap(), 2).unwrap();
        let mut now = 0;
        let times: Vec<u64> = (0..5)
            .map(|_| {
                now = take(&g, now, 1);
                now
            })
            .collect();
        assert_eq!(times, [0, 0, 250 * MS, 500 * MS, 750 * MS]);
    }

    #[test]
    fn decisions_match_the_core_across_re_basings() {
        // 4,294,967,291 per 1,000,000,007 ns: coprime, so the core counts
        // in units of a 4-billionth of a nanosecond and the word re-bases
        // about every half second.
        let rate = Rate::from_nanos(4_294_967_291, 1_000_000_007).unwrap();
        let g = GcraSchedule::new(rate, 3).unwrap();
        let core = Gcra::new(rate, 3).unwrap();
        let mut state = core.new_state();
        let mut now = 1_700_000_000_000_000_000;
        for step in 0..5_000u64 {
            now += (step * 7_919) % 400_000_000;
            let n = 1 + step % 3;
            let expected = core.check(&mut state, now, n).unwrap().allowed;
            let mut taken = g.try_take(now, n);
            if taken == Attempt::Busy {
                g.maintain(&held(), now);
                taken = g.try_take(now, n);
            }
            assert_eq!(taken == Attempt::Taken, expected, "step {step} at {now}");
        }
    }

    proptest::proptest! {
        /// Calls on the fast path, and calls the line serves (recording at
        /// the earliest instant), against the core's own state: the same
        /// permits go at the same instants, whatever the rate (a reduced
        /// `N` of 1, or coprime and re-basing often), the burst and the
        /// gaps between calls.
        #[test]
        fn the_fast_path_and_the_line_decide_as_the_core(
            n in proptest::prop_oneof![1u64..=20, 1_000_000u64..=4_294_967_291],
            p_ms in 1u64..=5_000,
            p_extra in 0u64..1_000,
            burst in 1u64..=20,
            steps in proptest::collection::vec((0u64..3_000_000_000, 1u64..=20, proptest::bool::ANY), 1..80),
        ) {
            let rate = Rate::from_nanos(n, p_ms * MS + p_extra).unwrap();
            let g = GcraSchedule::new(rate, burst).unwrap();
            let core = Gcra::new(rate, burst).unwrap();
            let mut state = core.new_state();
            let mut now = 1_700_000_000_000_000_000u64;
            for (gap, permits, queue) in steps {
                now += gap;
                let permits = permits.min(burst);
                if queue {
                    let at = core.next_available(&state, now, permits);
                    core.commit(&mut state, at, permits);
                    proptest::prop_assert_eq!(take(&g, now, permits), at);
                } else {
                    let expected = core.evaluate(&state, now, permits).allowed;
                    if expected {
                        core.commit(&mut state, now, permits);
                    }
                    let mut taken = g.try_take(now, permits);
                    if taken != Attempt::Taken {
                        g.maintain(&held(), now);
                        taken = g.try_take(now, permits);
                    }
                    proptest::prop_assert_eq!(taken == Attempt::Taken, expected, "at {}", now);
                }
            }
        }
    }

    #[test]
    fn a_reader_never_swaps_against_a_moved_origin() {
        let g = GcraSchedule::new(Rate::per_second(3).unwrap(), 1).unwrap();
        let line = held();
        g.maintain(&line, 1_000 * MS);
        let before = g.word.load(Relaxed);
        // Re-basing flips the generation, so the old word never matches.
        g.set_waiting(&line, true);
        g.record(&line, u64::MAX / 2, 1);
        g.set_waiting(&line, false);
        g.maintain(&line, u64::MAX / 2);
        assert_ne!(g.word.load(Relaxed) & GENERATION, before & GENERATION);
    }

    #[test]
    fn a_burst_too_wide_for_the_word_takes_the_slow_path() {
        // A million at once, one per 140 years.
        let rate = Rate::from_nanos(1, 1 << 62).unwrap();
        let g = GcraSchedule::new(rate, 1_000_000).unwrap();
        assert!(g.slow_only);
        assert_eq!(g.try_take(0, 1), Attempt::Closed);
        assert_eq!(take(&g, 5, 1_000_000), 5);
        assert_eq!(take(&g, 5, 1), 5 + (1 << 62));
    }

    #[test]
    fn bad_bursts_are_an_error() {
        let rate = Rate::per_second(4).unwrap();
        assert!(matches!(
            GcraSchedule::new(rate, 0),
            Err(WaiterError::Limit(_))
        ));
        assert_eq!(GcraSchedule::new(rate, 4).unwrap().capacity(), 4);
    }
}
