//! Leaky bucket as a shaping queue (nginx `limit_req` without `nodelay`).
//!
//! The queue holds up to `burst` requests and drains at `N/P`. An admitted
//! request's `delay` is the time to drain what is ahead of it; a request that
//! would overflow the queue is rejected. Admissions are exactly those of a
//! token bucket with the same rate and burst. Levels are kept in units of
//! `1/P` request (see `bucket.rs`).
//!
//! A reservation is not bound by the queue's capacity: it joins the queue
//! when everything ahead of it has drained (its slot), exactly as a request
//! arriving then would, so the queue's last change may lie ahead of `now`.
//! Until then the level counts everything still to drain before it, and later
//! callers queue behind it.
//!
//! nginx's `burst=B` counts the request being served separately, so it
//! corresponds to tollgate's `burst = B + 1`.

use std::time::Duration;

use super::bucket::BucketMath;
use super::codec::{put_u128, put_u64, Reader, StateCodec};
use super::{Algorithm, Slot};
use crate::decision::Decision;
use crate::limit::LimitError;
use crate::rate::Rate;

/// A shaping queue of `burst` requests drained at `rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket {
    math: BucketMath,
}

/// Queue level (in units of `1/P` request) and the time of its last change,
/// which a reservation may put ahead of `now`.
///
/// Packed to 8-byte alignment so a keyed table stores it in 24 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, packed(8))]
pub struct LeakyBucketState {
    queue: u128,
    last: u64,
}

impl LeakyBucket {
    /// A queue of `burst` requests drained at `rate`.
    pub fn new(rate: Rate, burst: u64) -> Result<Self, LimitError> {
        super::token_bucket::validate_burst(burst)?;
        Ok(LeakyBucket {
            math: BucketMath::new(rate, burst),
        })
    }

    /// Queue level at `now`. Before the last change (a booked reservation),
    /// the queue also holds what drains until then.
    fn level(&self, state: &LeakyBucketState, now: u64) -> u128 {
        let (queue, last) = (state.queue, state.last);
        if now >= last {
            queue.saturating_sub(self.math.refill(now - last))
        } else {
            queue + self.math.refill(last - now)
        }
    }
}

impl Algorithm for LeakyBucket {
    type State = LeakyBucketState;

    #[inline]
    fn limit(&self) -> u64 {
        self.math.burst
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.math.burst
    }

    #[inline]
    fn new_state(&self) -> LeakyBucketState {
        LeakyBucketState::default()
    }

    #[inline(always)]
    fn evaluate(&self, state: &LeakyBucketState, now: u64, cost: u64) -> Decision {
        let m = &self.math;
        let queue = self.level(state, now);
        let wait = |units: u128| Duration::from_nanos(m.nanos_for(units));
        let need = m.units(cost);
        let cap = m.capacity();
        if queue + need <= cap {
            let after = queue + need;
            Decision {
                allowed: true,
                limit: m.burst,
                remaining: m.whole_tokens(cap - after),
                reset_after: wait(after),
                delay: wait(queue),
                ..Decision::default()
            }
        } else {
            Decision {
                allowed: false,
                limit: m.burst,
                remaining: m.whole_tokens(cap.saturating_sub(queue)),
                retry_after: wait(queue + need - cap),
                reset_after: wait(queue),
                ..Decision::default()
            }
        }
    }

    #[inline(always)]
    fn commit(&self, state: &mut LeakyBucketState, now: u64, cost: u64) -> Option<u64> {
        state.queue = self.level(state, now) + self.math.units(cost);
        state.last = now;
        None
    }

    fn next_available(&self, state: &LeakyBucketState, now: u64, cost: u64) -> u64 {
        let queue = self.level(state, now);
        let over = (queue + self.math.units(cost)).saturating_sub(self.math.capacity());
        now.saturating_add(self.math.nanos_for(over))
    }

    /// A reservation's slot is when everything ahead of it has drained,
    /// whatever the queue's capacity.
    fn slot(&self, state: &LeakyBucketState, now: u64, _cost: u64) -> Option<Slot> {
        let wait = self.math.nanos_for(self.level(state, now));
        Some(Slot {
            at: now.saturating_add(wait),
            wait,
        })
    }

    fn book(&self, state: &mut LeakyBucketState, _now: u64, slot: Slot, cost: u64) {
        self.commit(state, slot.at, cost);
    }

    /// Adds `cost` to the queue at `at`, beyond `burst` if need be: the
    /// level above `burst` drains at the same rate, requests of non-zero
    /// cost are refused until `cost` fits again, and the next admitted one
    /// waits (`delay`) for the whole queue ahead of it, recorded usage
    /// included. With no excess the state is one a check could have left.
    /// Returns the whole requests queued, rounded up (`burst − remaining`,
    /// above `burst` beyond it). The level saturates far beyond any
    /// capacity.
    fn record(&self, state: &mut LeakyBucketState, at: u64, cost: u64) -> Option<u64> {
        let mut level = self.level(state, at);
        if cost > 0 {
            level = level
                .saturating_add(self.math.units(cost))
                .min(super::bucket::MOST_UNITS);
            state.queue = level;
            state.last = at;
        }
        Some(self.math.tokens_for(level))
    }

    /// Out of the queue at `now`, never below an empty queue.
    fn refund(
        &self,
        state: &mut LeakyBucketState,
        _admitted_at: u64,
        now: u64,
        cost: u64,
    ) -> Option<bool> {
        let at = now.max(state.last);
        state.queue = self.level(state, at).saturating_sub(self.math.units(cost));
        state.last = at;
        Some(true)
    }

    /// Queued at the admission (or the state's last change, when later),
    /// as if the request had cost that much: possibly beyond the burst.
    fn charge(
        &self,
        state: &mut LeakyBucketState,
        admitted_at: u64,
        _now: u64,
        cost: u64,
    ) -> Option<u64> {
        self.record(state, admitted_at.max(state.last), cost)
    }

    fn expires_at(&self, state: &LeakyBucketState) -> u64 {
        let queue = state.queue;
        state.last.saturating_add(self.math.nanos_for(queue))
    }
}

impl StateCodec for LeakyBucket {
    fn encode_state(&self, state: &LeakyBucketState, out: &mut Vec<u8>) {
        put_u128(out, state.queue);
        put_u64(out, state.last);
    }

    fn decode_state(&self, input: &mut Reader<'_>) -> Option<LeakyBucketState> {
        Some(LeakyBucketState {
            queue: input.u128()?,
            last: input.u64()?,
        })
    }
}
