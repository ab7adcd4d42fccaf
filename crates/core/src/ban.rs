//! The penalty box: a [`Ban`] refuses a key outright for a while once its
//! limit has refused it often enough, whatever the limit's algorithm.
//!
//! A ban is configured as `after` strikes `within` a window, banned `for` a
//! duration. A **strike** is a request of non-zero cost that the limit
//! itself refuses (in a check; a reservation, a peek, a probe or a recorded
//! call is never one). Strikes are counted in a window that opens at a
//! key's first strike and lasts `within`; a strike after the window has
//! closed opens a new one. The `after`-th strike inside one window bans the
//! key from that instant for `for`: every request is refused until the ban
//! ends, with `retry_after` the time left, and none of them is counted by
//! the limit or as a strike (a ban does not extend itself). When a ban
//! starts, its strikes are forgotten: after it, the key starts counting
//! strikes afresh, with the limit's own state as time has left it.
//!
//! This module owns the ban's state and its rules as pure functions of
//! (state, now), and [`Banned`], which puts a ban around any
//! [`Algorithm`] for stores that keep both states in one place (the memory
//! store). The Redis module calls the same [`Ban`] functions on a ban state
//! it stores beside the limit's; the Lua script mirrors them.
//!
//! ```
//! use std::time::Duration;
//! use tollgate_core::algorithm::{Algorithm, FixedWindow};
//! use tollgate_core::ban::{Ban, Banned};
//! use tollgate_core::time::NANOS_PER_SEC;
//! use tollgate_core::Rate;
//!
//! const S: u64 = NANOS_PER_SEC;
//! // 1 request a second; refused 2 times within 10 s: banned for a minute.
//! let ban = Ban::new(2, Duration::from_secs(10), Duration::from_secs(60)).unwrap();
//! let limit = Banned::new(FixedWindow::new(Rate::per_second(1).unwrap()), ban);
//! let mut state = limit.new_state();
//! assert!(limit.check(&mut state, 0, 1).unwrap().allowed);
//! let strike = limit.check(&mut state, 0, 1).unwrap(); // a strike
//! assert_eq!(strike.retry_after, Duration::from_secs(1));
//! assert!(limit.check(&mut state, S, 1).unwrap().allowed);
//! let banned = limit.check(&mut state, S, 1).unwrap(); // the second: banned
//! assert_eq!(banned.retry_after, Duration::from_secs(60));
//! let still = limit.check(&mut state, 30 * S, 1).unwrap();
//! assert_eq!(still.retry_after, Duration::from_secs(31));
//! assert!(limit.check(&mut state, 61 * S, 1).unwrap().allowed);
//! ```

use std::time::Duration;

use crate::algorithm::codec::{put_u64, Reader};
use crate::algorithm::{until, Algorithm, Slot, StateCodec};
use crate::decision::{BanRefusal, Decision};
use crate::limit::LimitError;
use crate::time::duration_to_nanos;

/// The longest `within` and `for` a ban accepts: a year.
pub const MAX_BAN_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// A validated ban: `after` strikes within `within` ban a key for
/// `duration` (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ban {
    after: u64,
    within: u64,
    duration: u64,
}

impl Ban {
    /// A ban after `after` strikes (at least 1) within `within`, for
    /// `duration` (each between 1 ms and [`MAX_BAN_DURATION`]).
    pub fn new(after: u64, within: Duration, duration: Duration) -> Result<Ban, LimitError> {
        let fits = |d: Duration| d >= Duration::from_millis(1) && d <= MAX_BAN_DURATION;
        const DURATION: &str = "between 1ms and 366d";
        if after == 0 {
            return Err(LimitError::Ban {
                field: "after",
                expected: "at least 1",
            });
        }
        if !fits(within) {
            return Err(LimitError::Ban {
                field: "within",
                expected: DURATION,
            });
        }
        if !fits(duration) {
            return Err(LimitError::Ban {
                field: "for",
                expected: DURATION,
            });
        }
        Ok(Ban {
            after,
            within: duration_to_nanos(within),
            duration: duration_to_nanos(duration),
        })
    }

    /// Strikes that start a ban.
    pub fn after(&self) -> u64 {
        self.after
    }

    /// The window strikes are counted in.
    pub fn within(&self) -> Duration {
        Duration::from_nanos(self.within)
    }

    /// How long a ban lasts.
    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.duration)
    }

    /// Whether the key is banned at `now`.
    #[inline]
    pub fn is_banned(&self, state: &BanState, now: u64) -> bool {
        now < state.until
    }

    /// Counts a strike at `now` against a key that is not banned; `true`
    /// when it starts a ban (then `state.until` is its end).
    pub fn strike(&self, state: &mut BanState, now: u64) -> bool {
        let window_closed = now >= state.first_strike.saturating_add(self.within);
        if state.strikes == 0 || window_closed {
            state.first_strike = now;
            state.strikes = 0;
        }
        state.strikes = state.strikes.saturating_add(1);
        if state.strikes < self.after {
            return false;
        }
        *state = BanState {
            first_strike: 0,
            strikes: 0,
            until: now.saturating_add(self.duration),
        };
        true
    }

    /// The answer while banned, from the limit's own decision at `now`
    /// (`limit`): refused, nothing remaining, retry when the ban ends, and
    /// reset when both the ban and the limit's state are over; marked as a
    /// ban that was `started` by this request or was in force.
    pub fn refusal(&self, state: &BanState, now: u64, limit: Decision, started: bool) -> Decision {
        let left = until(now, state.until);
        Decision {
            allowed: false,
            remaining: 0,
            retry_after: left,
            reset_after: limit.reset_after.max(left),
            delay: Duration::ZERO,
            lease: None,
            ban: Some(if started {
                BanRefusal::Started
            } else {
                BanRefusal::InForce
            }),
            ..limit
        }
    }

    /// The instant from which `state` is as good as new: its ban over and
    /// its strike window closed.
    pub fn expires_at(&self, state: &BanState) -> u64 {
        let window_end = if state.strikes > 0 {
            state.first_strike.saturating_add(self.within)
        } else {
            0
        };
        state.until.max(window_end)
    }

    /// Whether `state` is one this ban can reach: fewer strikes than start
    /// a ban, and no window without strikes (a decoder's check).
    pub fn holds(&self, state: &BanState) -> bool {
        state.strikes < self.after && (state.strikes > 0 || state.first_strike == 0)
    }
}

/// A key's ban state: its strikes in the current window and any ban.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct BanState {
    /// The instant (ns) the current strike window opened; 0 when there
    /// are no strikes.
    pub first_strike: u64,
    /// Strikes counted in the current window.
    pub strikes: u64,
    /// The instant (ns) the ban ends; in the past (or 0) when not banned.
    pub until: u64,
}

impl BanState {
    /// Appends the state's bytes: its three fields, little-endian.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.first_strike);
        put_u64(out, self.strikes);
        put_u64(out, self.until);
    }

    /// Reads a state written by [`encode`](Self::encode).
    pub fn decode(input: &mut Reader<'_>) -> Option<BanState> {
        Some(BanState {
            first_strike: input.u64()?,
            strikes: input.u64()?,
            until: input.u64()?,
        })
    }
}

/// Any algorithm with a [`Ban`] around it: the algorithm decides while the
/// key is not banned, its refusals are strikes, and a banned key is
/// refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Banned<A> {
    limit: A,
    ban: Ban,
}

/// The state of a [`Banned`] algorithm: the limit's and the ban's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BannedState<S> {
    /// The limit's own state.
    pub limit: S,
    /// The ban's.
    pub ban: BanState,
}

impl<A: Algorithm> Banned<A> {
    /// `limit` with `ban` around it.
    pub fn new(limit: A, ban: Ban) -> Banned<A> {
        Banned { limit, ban }
    }

    /// The algorithm inside.
    pub fn limit(&self) -> &A {
        &self.limit
    }

    /// The ban.
    pub fn ban(&self) -> &Ban {
        &self.ban
    }

    /// The earliest instant at or after `now` the ban lets a request in.
    fn open_from(&self, state: &BannedState<A::State>, now: u64) -> u64 {
        now.max(state.ban.until)
    }
}

impl<A: Algorithm> Algorithm for Banned<A> {
    type State = BannedState<A::State>;

    fn limit(&self) -> u64 {
        self.limit.limit()
    }

    fn capacity(&self) -> u64 {
        self.limit.capacity()
    }

    fn new_state(&self) -> Self::State {
        BannedState {
            limit: self.limit.new_state(),
            ban: BanState::default(),
        }
    }

    fn evaluate(&self, state: &Self::State, now: u64, cost: u64) -> Decision {
        if self.ban.is_banned(&state.ban, now) {
            let limit = self.limit.evaluate(&state.limit, now, 0);
            return self.ban.refusal(&state.ban, now, limit, false);
        }
        self.limit.evaluate(&state.limit, now, cost)
    }

    fn commit(&self, state: &mut Self::State, now: u64, cost: u64) -> Option<u64> {
        self.limit.commit(&mut state.limit, now, cost)
    }

    #[inline]
    fn admit(&self, state: &mut Self::State, now: u64, cost: u64) -> Decision {
        if self.ban.is_banned(&state.ban, now) {
            return self.evaluate(state, now, cost);
        }
        // The limit's own admit (some do evaluate and commit in one go).
        let mut decision = self.limit.admit(&mut state.limit, now, cost);
        if !decision.allowed {
            self.strike(state, now, &mut decision);
        }
        decision
    }

    fn strike(&self, state: &mut Self::State, now: u64, decision: &mut Decision) -> bool {
        if self.ban.is_banned(&state.ban, now) {
            return false;
        }
        if self.ban.strike(&mut state.ban, now) {
            *decision = self.ban.refusal(&state.ban, now, *decision, true);
        }
        true
    }

    fn next_available(&self, state: &Self::State, now: u64, cost: u64) -> u64 {
        let open = self.open_from(state, now);
        self.limit.next_available(&state.limit, open, cost)
    }

    fn slot(&self, state: &Self::State, now: u64, cost: u64) -> Option<Slot> {
        let open = self.open_from(state, now);
        let slot = self.limit.slot(&state.limit, open, cost)?;
        Some(Slot {
            at: slot.at,
            wait: slot.wait.saturating_add(open - now),
        })
    }

    fn book(&self, state: &mut Self::State, now: u64, slot: Slot, cost: u64) {
        let open = self.open_from(state, now);
        let inner = Slot {
            at: slot.at,
            wait: slot.wait.saturating_sub(open - now),
        };
        self.limit.book(&mut state.limit, open, inner, cost);
    }

    fn expires_at(&self, state: &Self::State) -> u64 {
        self.limit
            .expires_at(&state.limit)
            .max(self.ban.expires_at(&state.ban))
    }

    fn heap_bytes(&self, state: &Self::State) -> usize {
        self.limit.heap_bytes(&state.limit)
    }

    fn release(&self, state: &mut Self::State, lease: u64) -> bool {
        self.limit.release(&mut state.limit, lease)
    }

    /// Refunds as the limit does; a ban stands.
    fn refund(
        &self,
        state: &mut Self::State,
        admitted_at: u64,
        now: u64,
        cost: u64,
    ) -> Option<bool> {
        self.limit.refund(&mut state.limit, admitted_at, now, cost)
    }

    /// Charges as the limit does: no strike.
    fn charge(
        &self,
        state: &mut Self::State,
        admitted_at: u64,
        now: u64,
        cost: u64,
    ) -> Option<u64> {
        self.limit.charge(&mut state.limit, admitted_at, now, cost)
    }

    /// Records as the limit does: a recorded call was already made, banned
    /// or not, and is no strike.
    fn record(&self, state: &mut Self::State, at: u64, cost: u64) -> Option<u64> {
        self.limit.record(&mut state.limit, at, cost)
    }
}

impl<A: StateCodec> StateCodec for Banned<A> {
    fn encode_state(&self, state: &Self::State, out: &mut Vec<u8>) {
        self.limit.encode_state(&state.limit, out);
        state.ban.encode(out);
    }

    fn decode_state(&self, input: &mut Reader<'_>) -> Option<Self::State> {
        let limit = self.limit.decode_state(input)?;
        let ban = BanState::decode(input).filter(|b| self.ban.holds(b))?;
        Some(BannedState { limit, ban })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::algorithm::{Concurrency, Gcra, SlidingWindowLog};
    use crate::time::NANOS_PER_SEC;
    use crate::Rate;

    const S: u64 = NANOS_PER_SEC;

    fn ban(after: u64, within: u64, secs: u64) -> Ban {
        Ban::new(
            after,
            Duration::from_secs(within),
            Duration::from_secs(secs),
        )
        .unwrap()
    }

    #[test]
    fn bad_bans_are_refused() {
        let s = Duration::from_secs(1);
        assert!(Ban::new(0, s, s).is_err());
        assert!(Ban::new(1, Duration::ZERO, s).is_err());
        assert!(Ban::new(1, s, Duration::from_micros(999)).is_err());
        assert!(Ban::new(1, s, MAX_BAN_DURATION + s).is_err());
        assert!(Ban::new(1, MAX_BAN_DURATION, MAX_BAN_DURATION).is_ok());
    }

    #[test]
    fn strikes_count_in_a_window_opened_by_the_first() {
        let b = ban(3, 10, 60);
        let mut st = BanState::default();
        assert!(!b.strike(&mut st, 0));
        assert!(!b.strike(&mut st, 9 * S));
        // The window [0 s, 10 s) closed: a new one opens at 10 s.
        assert!(!b.strike(&mut st, 10 * S));
        assert_eq!((st.first_strike, st.strikes), (10 * S, 1));
        assert_eq!(b.expires_at(&st), 20 * S);
        assert!(!b.strike(&mut st, 11 * S));
        assert!(b.strike(&mut st, 19 * S));
        assert_eq!(st.until, 79 * S);
        assert_eq!(st.strikes, 0);
        assert!(b.is_banned(&st, 79 * S - 1));
        assert!(!b.is_banned(&st, 79 * S));
        assert_eq!(b.expires_at(&st), 79 * S);
    }

    #[test]
    fn a_ban_refuses_everything_and_counts_nothing() {
        // 2 per 10 s; 1 strike bans for 30 s.
        let log = SlidingWindowLog::new(Rate::new(2, Duration::from_secs(10)).unwrap());
        let limit = Banned::new(log, ban(1, 60, 30));
        let mut st = limit.new_state();
        limit.check(&mut st, 0, 1).unwrap();
        limit.check(&mut st, 0, 1).unwrap();
        let banned = limit.check(&mut st, S, 1).unwrap();
        assert!(!banned.allowed);
        assert_eq!(banned.retry_after, Duration::from_secs(30));
        assert_eq!(banned.reset_after, Duration::from_secs(30));
        assert_eq!(banned.remaining, 0);
        let before = st.clone();
        let during = limit.check(&mut st, 20 * S, 1).unwrap();
        assert_eq!(during.retry_after, Duration::from_secs(11));
        assert_eq!(st, before, "a refusal during a ban changes nothing");
        // A peek during a ban is allowed, with nothing remaining.
        let peek = limit.check(&mut st, 20 * S, 0).unwrap();
        assert!(peek.allowed && peek.remaining == 0);
        assert!(limit.debt(&st, 20 * S).refusing);
        let after = limit.check(&mut st, 31 * S, 1).unwrap();
        assert!(after.allowed);
        assert_eq!(after.remaining, 1);
    }

    #[test]
    fn reservations_land_after_the_ban() {
        let gcra = Gcra::new(Rate::per_second(1).unwrap(), 1).unwrap();
        let limit = Banned::new(gcra, ban(1, 60, 30));
        let mut st = limit.new_state();
        limit.check(&mut st, 0, 1).unwrap();
        assert!(!limit.check(&mut st, 0, 1).unwrap().allowed);
        assert_eq!(limit.next_available(&st, 10 * S, 1), 30 * S);
        let booked = limit.reserve(&mut st, 10 * S, 1, None).unwrap();
        assert!(booked.decision.allowed);
        assert_eq!(booked.wait, Duration::from_secs(20));
        // The booked slot is taken: the next one is a second later.
        assert_eq!(limit.next_available(&st, 10 * S, 1), 31 * S);
        let refused = limit
            .reserve(&mut st, 10 * S, 1, Some(Duration::from_secs(5)))
            .unwrap();
        assert!(!refused.decision.allowed);
    }

    #[test]
    fn concurrency_refusals_strike_too() {
        let limit = Banned::new(
            Concurrency::new(1, Duration::from_secs(60)).unwrap(),
            ban(2, 10, 5),
        );
        let mut st = limit.new_state();
        let lease = limit.check(&mut st, 0, 1).unwrap().lease.unwrap();
        assert!(!limit.check(&mut st, 0, 1).unwrap().allowed);
        let banned = limit.check(&mut st, S, 1).unwrap();
        assert_eq!(banned.retry_after, Duration::from_secs(5));
        assert!(limit.release(&mut st, lease));
        assert!(!limit.check(&mut st, 2 * S, 1).unwrap().allowed);
        assert!(limit.check(&mut st, 6 * S, 1).unwrap().allowed);
    }

    #[test]
    fn states_round_trip_and_bad_ones_are_refused() {
        let gcra = Gcra::new(Rate::per_second(1).unwrap(), 1).unwrap();
        let limit = Banned::new(gcra, ban(3, 10, 30));
        let mut st = limit.new_state();
        limit.check(&mut st, 0, 1).unwrap();
        limit.check(&mut st, 0, 1).unwrap();
        let mut bytes = Vec::new();
        limit.encode_state(&st, &mut bytes);
        assert_eq!(
            limit.decode_state(&mut Reader::new(&bytes)),
            Some(st.clone())
        );
        st.ban.strikes = 3;
        bytes.clear();
        limit.encode_state(&st, &mut bytes);
        assert_eq!(limit.decode_state(&mut Reader::new(&bytes)), None);
    }
}
