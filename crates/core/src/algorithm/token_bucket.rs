//! Token bucket: tokens refilled continuously at `N/P`, capped at `burst`;
//! a request of cost `c` is admitted when at least `c` tokens are there.
//!
//! State is the token count and the time of the last refill. Tokens are kept
//! in units of `1/P` token (see `bucket.rs`), so refills are exact. A
//! reservation takes its tokens at its slot, the first instant they are
//! there, exactly as a request arriving then would: the last refill may then
//! lie ahead of `now`, and later callers queue behind it. (Taking them at
//! the time of booking would lose the rounding of each wait up to a whole
//! nanosecond, and a slot could come a nanosecond before a plain check at
//! that instant would pass.)
//!
//! The token count is stored in 64 bits ([`Narrow`], the default) whenever
//! the capacity in those units fits, which covers all but extreme rates; a
//! [`Wide`] bucket stores 128 bits. [`Limit::build`](crate::Limit::build)
//! picks the narrow one when it fits.

use std::marker::PhantomData;
use std::time::Duration;

use super::bucket::BucketMath;
use super::codec::{put_i128, put_u64, Reader, StateCodec};
use super::{Algorithm, Slot};
use crate::decision::Decision;
use crate::limit::LimitError;
use crate::rate::{Rate, MAX_LIMIT};

/// A token bucket of capacity `burst`, refilled at `rate`, storing its token
/// count as `S`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket<S = Narrow> {
    math: BucketMath,
    storage: PhantomData<S>,
}

/// How a token bucket stores its token count (in units of `1/P` token).
pub trait TokenStorage: Copy + std::fmt::Debug + PartialEq + Eq + Send + Sync + 'static {
    /// Whether counts from 0 to `capacity` units can be stored.
    fn holds(capacity: u128) -> bool;
    /// Whether `tokens` is a count this storage can hold as it is (a
    /// count saturated by [`store`](Self::store) included).
    fn holds_count(tokens: i128) -> bool;
    /// The stored count.
    fn load(self) -> i128;
    /// `tokens` for storing; within what [`holds`](Self::holds) allowed.
    fn store(tokens: i128) -> Self;
}

/// A 64-bit token count: states of 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Narrow(i64);

/// A 128-bit token count, for capacities a 64-bit count cannot hold.
/// Packed to 8-byte alignment so states take 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed(8))]
pub struct Wide(i128);

impl TokenStorage for Narrow {
    fn holds(capacity: u128) -> bool {
        capacity <= i64::MAX as u128
    }

    fn holds_count(tokens: i128) -> bool {
        i64::try_from(tokens).is_ok()
    }

    #[inline(always)]
    fn load(self) -> i128 {
        i128::from(self.0)
    }

    #[inline(always)]
    fn store(tokens: i128) -> Self {
        Narrow(i64::try_from(tokens).unwrap_or(if tokens < 0 { i64::MIN } else { i64::MAX }))
    }
}

impl TokenStorage for Wide {
    fn holds(_capacity: u128) -> bool {
        true
    }

    fn holds_count(_tokens: i128) -> bool {
        true
    }

    #[inline(always)]
    fn load(self) -> i128 {
        self.0
    }

    #[inline(always)]
    fn store(tokens: i128) -> Self {
        Wide(tokens)
    }
}

/// Tokens and the time of the last refill, which a reservation may put ahead
/// of `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucketState<S = Narrow> {
    tokens: S,
    last: u64,
}

pub(crate) fn validate_burst(burst: u64) -> Result<(), LimitError> {
    if burst == 0 || burst > MAX_LIMIT {
        return Err(LimitError::Burst { burst });
    }
    Ok(())
}

impl TokenBucket {
    /// A bucket holding up to `burst` tokens, refilled at `rate`, with a
    /// 64-bit token count; an error ([`LimitError::Storage`]) in the rare
    /// case that cannot hold its capacity (then use
    /// [`with_storage`](Self::with_storage) and [`Wide`]).
    pub fn new(rate: Rate, burst: u64) -> Result<Self, LimitError> {
        Self::with_storage(rate, burst)
    }
}

impl<S: TokenStorage> TokenBucket<S> {
    /// A bucket holding up to `burst` tokens, refilled at `rate`, storing its
    /// token count as `S`; an error ([`LimitError::Storage`]) when `S` cannot
    /// hold its capacity.
    pub fn with_storage(rate: Rate, burst: u64) -> Result<Self, LimitError> {
        validate_burst(burst)?;
        let math = BucketMath::new(rate, burst);
        if !S::holds(math.capacity()) {
            return Err(LimitError::Storage { burst });
        }
        Ok(TokenBucket {
            math,
            storage: PhantomData,
        })
    }

    /// Whether a bucket of `burst` at `rate` can store its tokens as `S`.
    pub fn fits(rate: Rate, burst: u64) -> bool {
        S::holds(BucketMath::new(rate, burst).capacity())
    }

    /// Tokens at `max(now, last)` and that instant.
    fn refilled(&self, state: &TokenBucketState<S>, now: u64) -> (i128, u64) {
        let last = state.last;
        let at = now.max(last);
        let cap = to_signed(self.math.capacity());
        let tokens = state.tokens.load();
        let refilled = tokens.saturating_add(to_signed(self.math.refill(at - last)));
        (refilled.min(cap), at)
    }
}

fn to_signed(units: u128) -> i128 {
    i128::try_from(units).unwrap_or(i128::MAX)
}

fn to_unsigned(units: i128) -> u128 {
    u128::try_from(units).unwrap_or(0)
}

impl<S: TokenStorage> Algorithm for TokenBucket<S> {
    type State = TokenBucketState<S>;

    #[inline]
    fn limit(&self) -> u64 {
        self.math.burst
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.math.burst
    }

    #[inline]
    fn new_state(&self) -> TokenBucketState<S> {
        TokenBucketState {
            tokens: S::store(to_signed(self.math.capacity())),
            last: 0,
        }
    }

    #[inline(always)]
    fn evaluate(&self, state: &TokenBucketState<S>, now: u64, cost: u64) -> Decision {
        let m = &self.math;
        let (tokens, at) = self.refilled(state, now);
        let lag = at - now;
        let need = to_signed(m.units(cost));
        let cap = to_signed(m.capacity());
        let after_wait =
            |units: i128| Duration::from_nanos(m.nanos_for(to_unsigned(units)).saturating_add(lag));
        if tokens >= need {
            let after = tokens - need;
            Decision {
                allowed: true,
                limit: m.burst,
                remaining: m.whole_tokens(to_unsigned(after)),
                reset_after: after_wait(cap - after),
                ..Decision::default()
            }
        } else {
            Decision {
                allowed: false,
                limit: m.burst,
                remaining: m.whole_tokens(to_unsigned(tokens)),
                retry_after: after_wait(need - tokens),
                reset_after: after_wait(cap - tokens),
                ..Decision::default()
            }
        }
    }

    #[inline(always)]
    fn commit(&self, state: &mut TokenBucketState<S>, now: u64, cost: u64) -> Option<u64> {
        let (tokens, at) = self.refilled(state, now);
        state.tokens = S::store(tokens - to_signed(self.math.units(cost)));
        state.last = at;
        None
    }

    fn next_available(&self, state: &TokenBucketState<S>, now: u64, cost: u64) -> u64 {
        let (tokens, at) = self.refilled(state, now);
        let need = to_signed(self.math.units(cost));
        if tokens >= need {
            return now;
        }
        at.saturating_add(self.math.nanos_for(to_unsigned(need - tokens)))
    }

    fn slot(&self, state: &TokenBucketState<S>, now: u64, cost: u64) -> Option<Slot> {
        let at = self.next_available(state, now, cost);
        Some(Slot { at, wait: at - now })
    }

    fn book(&self, state: &mut TokenBucketState<S>, _now: u64, slot: Slot, cost: u64) {
        self.commit(state, slot.at, cost);
    }

    /// Takes `cost` tokens at `at` (or at the last refill, when that is
    /// later), below zero if need be: the token count is signed, so a debt
    /// is a negative count, refilled at the same rate, and requests of
    /// non-zero cost are refused until it has been paid back and `cost`
    /// tokens are there again. With no debt the state is one a check could
    /// have left, so every decision is the same as before. Returns the
    /// whole tokens missing from a full bucket (`burst − remaining`, above
    /// `burst` in debt). A narrow count saturates at `i64::MIN` (as
    /// reservations piled up do), a wide one far beyond any capacity.
    fn record(&self, state: &mut TokenBucketState<S>, at: u64, cost: u64) -> Option<u64> {
        let (mut tokens, at) = self.refilled(state, at);
        if cost > 0 {
            let floor = -to_signed(super::bucket::MOST_UNITS);
            let after = tokens.saturating_sub(to_signed(self.math.units(cost)));
            state.tokens = S::store(after.max(floor));
            state.last = at;
            tokens = state.tokens.load();
        }
        let missing = to_signed(self.math.capacity()) - tokens;
        Some(self.math.tokens_for(to_unsigned(missing)))
    }

    /// Tokens back at `now`, never above a full bucket.
    fn refund(
        &self,
        state: &mut TokenBucketState<S>,
        _admitted_at: u64,
        now: u64,
        cost: u64,
    ) -> Option<bool> {
        let (tokens, at) = self.refilled(state, now);
        let cap = to_signed(self.math.capacity());
        state.tokens = S::store(
            tokens
                .saturating_add(to_signed(self.math.units(cost)))
                .min(cap),
        );
        state.last = at;
        Some(true)
    }

    /// Taken at the admission (or the state's last change, when later), as
    /// if the request had cost that much: possibly into debt.
    fn charge(
        &self,
        state: &mut TokenBucketState<S>,
        admitted_at: u64,
        _now: u64,
        cost: u64,
    ) -> Option<u64> {
        self.record(state, admitted_at, cost)
    }

    fn expires_at(&self, state: &TokenBucketState<S>) -> u64 {
        let missing = to_signed(self.math.capacity()) - state.tokens.load();
        state
            .last
            .saturating_add(self.math.nanos_for(to_unsigned(missing)))
    }
}

impl<S: TokenStorage> StateCodec for TokenBucket<S> {
    fn encode_state(&self, state: &TokenBucketState<S>, out: &mut Vec<u8>) {
        put_i128(out, state.tokens.load());
        put_u64(out, state.last);
    }

    fn decode_state(&self, input: &mut Reader<'_>) -> Option<TokenBucketState<S>> {
        let tokens = input.i128()?;
        let last = input.u64()?;
        // A narrow count saturates at i64::MIN when reservations pile up
        // near the end of time: that state must read back too.
        (S::holds_count(tokens) && tokens <= to_signed(self.math.capacity())).then(|| {
            TokenBucketState {
                tokens: S::store(tokens),
                last,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reservations piled up near the end of time saturate a narrow count
    /// at `i64::MIN`; the codec reads that state back, and refuses counts
    /// a bucket can never hold.
    #[test]
    fn a_saturated_narrow_count_round_trips_through_the_codec() {
        let longest = Rate::from_nanos(1, crate::rate::MAX_PERIOD_NANOS).unwrap();
        let bucket = TokenBucket::new(longest, 1).unwrap();
        let mut state = bucket.new_state();
        for _ in 0..10 {
            let slot = bucket.slot(&state, 0, 1).unwrap();
            bucket.book(&mut state, 0, slot, 1);
        }
        assert_eq!(state.tokens, Narrow(i64::MIN));
        let mut bytes = Vec::new();
        bucket.encode_state(&state, &mut bytes);
        let back = bucket.decode_state(&mut Reader::new(&bytes));
        assert_eq!(back, Some(state));
        let mut over = Vec::new();
        put_i128(&mut over, i128::from(i64::MIN) - 1);
        put_u64(&mut over, 0);
        assert_eq!(bucket.decode_state(&mut Reader::new(&over)), None);
        let mut full = Vec::new();
        put_i128(&mut full, 1 << 62);
        put_u64(&mut full, 0);
        assert!(bucket.decode_state(&mut Reader::new(&full)).is_some());
        full.clear();
        put_i128(&mut full, (1 << 62) + 1);
        put_u64(&mut full, 0);
        assert_eq!(bucket.decode_state(&mut Reader::new(&full)), None);
    }
}
