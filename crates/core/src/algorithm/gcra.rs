//! Generic cell rate algorithm: one integer of state, the theoretical arrival
//! time (TAT).
//!
//! The emission interval is `P/N` and the tolerance lets `burst` requests
//! through back to back. Time is kept in units of `1/N` ns, so the interval is
//! exactly `P` units and the decisions are exactly those of
//! [`TokenBucket`](super::TokenBucket) with the same rate and burst.
//! A reservation is counted at its slot, as a request arriving then would be,
//! and moves the TAT ahead: later callers queue behind it.

use std::time::Duration;

use super::bucket::BucketMath;
use super::codec::{put_u128, Reader, StateCodec};
use super::{Algorithm, Slot};
use crate::decision::Decision;
use crate::limit::LimitError;
use crate::rate::Rate;

/// GCRA with emission interval `P/N` and burst `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    math: BucketMath,
}

/// The theoretical arrival time, in units of `1/N` ns since the epoch.
///
/// Packed to 8-byte alignment so a keyed table stores it in 16 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, packed(8))]
pub struct GcraState {
    tat: u128,
}

impl GcraState {
    /// The state whose theoretical arrival time is `tat`, a value read from
    /// [`tat`](Self::tat) of a state of the same [`Gcra`]: for callers that
    /// keep the state in storage of their own (a pair of atomic words).
    pub fn from_tat(tat: u128) -> Self {
        GcraState { tat }
    }

    /// The theoretical arrival time, in the algorithm's internal units
    /// (`1/N` ns since the epoch, `N` reduced with the period); meaningful
    /// only to the same [`Gcra`], through [`from_tat`](Self::from_tat).
    pub fn tat(&self) -> u128 {
        self.tat
    }
}

impl Gcra {
    /// GCRA admitting `rate`, with up to `burst` requests at once.
    pub fn new(rate: Rate, burst: u64) -> Result<Self, LimitError> {
        super::token_bucket::validate_burst(burst)?;
        Ok(Gcra {
            math: BucketMath::new(rate, burst),
        })
    }

    fn scaled(&self, now: u64) -> u128 {
        self.math.refill(now)
    }
}

impl Algorithm for Gcra {
    type State = GcraState;

    #[inline]
    fn limit(&self) -> u64 {
        self.math.burst
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.math.burst
    }

    #[inline]
    fn new_state(&self) -> GcraState {
        GcraState::default()
    }

    #[inline(always)]
    fn evaluate(&self, state: &GcraState, now: u64, cost: u64) -> Decision {
        let m = &self.math;
        let tn = self.scaled(now);
        let base = state.tat.max(tn);
        let new_tat = base + m.units(cost);
        let cap = m.capacity();
        let used = new_tat - tn;
        if used <= cap {
            // The common case, in 64 bits whenever the capacity fits them
            // (then so does everything below it).
            let (remaining, reset) = match m.capacity64() {
                Some(cap) => {
                    let used = used as u64;
                    (m.whole_tokens64(cap - used), m.nanos_for64(used))
                }
                None => (m.whole_tokens(cap - used), m.nanos_for(used)),
            };
            Decision {
                allowed: true,
                limit: m.burst,
                remaining,
                reset_after: Duration::from_nanos(reset),
                ..Decision::default()
            }
        } else {
            Decision {
                allowed: false,
                limit: m.burst,
                remaining: m.whole_tokens(cap.saturating_sub(base - tn)),
                retry_after: Duration::from_nanos(m.nanos_for(new_tat - cap - tn)),
                reset_after: Duration::from_nanos(m.nanos_for(base - tn)),
                ..Decision::default()
            }
        }
    }

    #[inline(always)]
    fn commit(&self, state: &mut GcraState, now: u64, cost: u64) -> Option<u64> {
        state.tat = state.tat.max(self.scaled(now)) + self.math.units(cost);
        None
    }

    fn next_available(&self, state: &GcraState, now: u64, cost: u64) -> u64 {
        let m = &self.math;
        let tn = self.scaled(now);
        let needed = state.tat.max(tn) + m.units(cost);
        let earliest = needed.saturating_sub(m.capacity());
        now.max(u64::try_from(earliest.div_ceil(u128::from(m.n))).unwrap_or(u64::MAX))
    }

    fn slot(&self, state: &GcraState, now: u64, cost: u64) -> Option<Slot> {
        let at = self.next_available(state, now, cost);
        Some(Slot { at, wait: at - now })
    }

    fn book(&self, state: &mut GcraState, _now: u64, slot: Slot, cost: u64) {
        self.commit(state, slot.at, cost);
    }

    /// Moves the TAT on by `cost` emission intervals from `at` (or from
    /// the TAT, when that is later), past the burst's tolerance if need be:
    /// the TAT beyond `at + burst × interval` is a debt, and requests of
    /// non-zero cost are refused until time has caught up with it — exactly
    /// when the token bucket's negative count is paid back, so the two
    /// still decide alike. With no debt the TAT is one a check could have
    /// left. Returns the whole intervals between `at` and the TAT, rounded
    /// up (`burst − remaining`, above `burst` in debt). The TAT saturates
    /// far beyond any debt a cost can reach.
    fn record(&self, state: &mut GcraState, at: u64, cost: u64) -> Option<u64> {
        let tn = self.scaled(at);
        let mut tat = state.tat;
        if cost > 0 {
            let most = tn.saturating_add(super::bucket::MOST_UNITS);
            tat = tat
                .max(tn)
                .saturating_add(self.math.units(cost))
                .min(most.max(tat));
            state.tat = tat;
        }
        Some(self.math.tokens_for(tat.saturating_sub(tn)))
    }

    /// The theoretical arrival time moves back by the refunded emission
    /// intervals, never before `now` (a full bucket).
    fn refund(
        &self,
        state: &mut GcraState,
        _admitted_at: u64,
        now: u64,
        cost: u64,
    ) -> Option<bool> {
        let tn = self.scaled(now);
        if state.tat > tn {
            state.tat = state.tat.saturating_sub(self.math.units(cost)).max(tn);
        }
        Some(true)
    }

    /// Taken at the admission, as if the request had cost that much:
    /// possibly into debt.
    fn charge(&self, state: &mut GcraState, admitted_at: u64, _now: u64, cost: u64) -> Option<u64> {
        self.record(state, admitted_at, cost)
    }

    fn expires_at(&self, state: &GcraState) -> u64 {
        let tat = state.tat;
        u64::try_from(tat.div_ceil(u128::from(self.math.n))).unwrap_or(u64::MAX)
    }
}

impl StateCodec for Gcra {
    fn encode_state(&self, state: &GcraState, out: &mut Vec<u8>) {
        put_u128(out, state.tat);
    }

    fn decode_state(&self, input: &mut Reader<'_>) -> Option<GcraState> {
        Some(GcraState { tat: input.u128()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_round_trips_through_its_tat() {
        let gcra = Gcra::new(Rate::per_second(3).unwrap(), 2).unwrap();
        let mut state = gcra.new_state();
        gcra.commit(&mut state, 1_000, 1);
        let copy = GcraState::from_tat(state.tat());
        assert_eq!(copy, state);
        assert_eq!(
            gcra.evaluate(&copy, 1_000, 1),
            gcra.evaluate(&state, 1_000, 1)
        );
    }
}
