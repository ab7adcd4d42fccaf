//! Leaky bucket as a shaping queue (nginx `limit_req` without `nodelay`).
//!
//! The queue holds up to `burst` requests and drains at `N/P`. An admitted
//! request's `delay` is the time to drain what is ahead of it; a request that
//! would overflow the queue is rejected. Admissions are exactly those of a
//! token bucket with the same rate and burst. Levels are kept in units of
//! `1/P` request (see `bucket.rs`).
//!
//! nginx's `burst=B` counts the request being served separately, so it
//! corresponds to tollgate's `burst = B + 1`.

use std::time::Duration;

use super::bucket::BucketMath;
use super::{Algorithm, Slot};
use crate::decision::Decision;
use crate::limit::LimitError;
use crate::rate::Rate;

/// A shaping queue of `burst` requests drained at `rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket {
    math: BucketMath,
}

/// Queue level (in units of `1/P` request; above capacity while reservations
/// are queued beyond it) and the time of the last drain.
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

    /// Queue level at `max(now, last)` and that instant.
    fn drained(&self, state: &LeakyBucketState, now: u64) -> (u128, u64) {
        let last = state.last;
        let at = now.max(last);
        let queue = state.queue;
        (queue.saturating_sub(self.math.refill(at - last)), at)
    }
}

impl Algorithm for LeakyBucket {
    type State = LeakyBucketState;

    fn limit(&self) -> u64 {
        self.math.burst
    }

    fn capacity(&self) -> u64 {
        self.math.burst
    }

    fn new_state(&self) -> LeakyBucketState {
        LeakyBucketState::default()
    }

    fn evaluate(&self, state: &LeakyBucketState, now: u64, cost: u64) -> Decision {
        let m = &self.math;
        let (queue, at) = self.drained(state, now);
        let lag = at - now;
        let wait = |units: u128| Duration::from_nanos(m.nanos_for(units).saturating_add(lag));
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

    fn commit(&self, state: &mut LeakyBucketState, now: u64, cost: u64) -> Option<u64> {
        let (queue, at) = self.drained(state, now);
        state.queue = queue + self.math.units(cost);
        state.last = at;
        None
    }

    fn next_available(&self, state: &LeakyBucketState, now: u64, cost: u64) -> u64 {
        let (queue, at) = self.drained(state, now);
        let over = (queue + self.math.units(cost)).saturating_sub(self.math.capacity());
        if over == 0 {
            return now;
        }
        at.saturating_add(self.math.nanos_for(over))
    }

    /// A reservation joins the queue at once, beyond its capacity if need be;
    /// the caller waits until everything ahead of it has drained.
    fn slot(&self, state: &LeakyBucketState, now: u64, _cost: u64) -> Option<Slot> {
        let (queue, at) = self.drained(state, now);
        let wait = (at - now).saturating_add(self.math.nanos_for(queue));
        Some(Slot { at: now, wait })
    }

    fn book(&self, state: &mut LeakyBucketState, now: u64, _slot: Slot, cost: u64) {
        self.commit(state, now, cost);
    }

    fn expires_at(&self, state: &LeakyBucketState) -> u64 {
        let queue = state.queue;
        state.last.saturating_add(self.math.nanos_for(queue))
    }
}
