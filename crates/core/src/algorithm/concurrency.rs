//! Concurrency: at most `N` requests in flight. An admitted request gets a
//! lease id and releases it when done; a lease expires after `lease_ttl`, so
//! a caller that crashed cannot hold capacity forever.
//!
//! Not time-based: there is no slot to reserve, and `retry_after` is the time
//! until enough leases expire if nobody releases one.
//!
//! Leases are kept in the order they were granted, which is also the order of
//! their ids and of their expiries (a lease never starts before the one
//! granted before it), with a running total of what they hold. Counting what
//! is in flight only looks at the expired leases at the front, and a release
//! finds its lease by binary search. The first lease lives inside the state,
//! which then takes 40 bytes; a key holding two or more leases at once keeps
//! them on the heap.

use std::time::Duration;

use super::codec::{put_len, put_u64, Reader, StateCodec, MAX_ENTRIES};
use super::small_deque::SmallDeque;
use super::tally::{Instants, Tally};
use super::{until, Algorithm, Slot};
use crate::decision::Decision;
use crate::limit::LimitError;

/// At most `N` in flight, each lease held at most `lease_ttl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    n: u64,
    ttl: u64,
}

/// Leases kept inside the state before they move to the heap. One, so that
/// the state stays at 40 bytes: two inline leases made it 72, and over many
/// keys the size of a keyed table's entries decides the speed.
const INLINE: usize = 1;

/// A lease: 20 bytes, packed to 4-byte alignment (a cost is at most
/// [`MAX_LIMIT`](crate::rate::MAX_LIMIT), which fits in 32 bits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, packed(4))]
struct Lease {
    id: u64,
    expires: u64,
    cost: u32,
}

impl Lease {
    fn cost(&self) -> u64 {
        u64::from(self.cost)
    }
}

/// The leases held, in the order granted, and what they hold in total.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConcurrencyState {
    leases: SmallDeque<Lease, INLINE>,
    /// Sum of the costs of `leases`, expired or not.
    held: u64,
    next_id: u64,
}

impl ConcurrencyState {
    /// The leases at the front that have expired by `now`, and what they hold.
    #[inline]
    fn expired(&self, now: u64) -> (usize, u64) {
        let mut count = 0;
        let mut cost = 0;
        let (front, back) = self.leases.as_slices();
        for lease in front.iter().chain(back) {
            if lease.expires > now {
                break;
            }
            count += 1;
            cost += lease.cost();
        }
        (count, cost)
    }

    fn in_flight(&self, now: u64) -> u64 {
        self.held - self.expired(now).1
    }

    fn drop_expired(&mut self, now: u64) {
        while let Some(front) = self.leases.front() {
            if front.expires > now {
                break;
            }
            self.held -= front.cost();
            self.leases.pop_front();
        }
    }

    fn last_expiry(&self) -> u64 {
        self.leases.back().map_or(0, |l| l.expires)
    }
}

impl Concurrency {
    /// At most `limit` in flight; leases expire after `lease_ttl` (at least
    /// one millisecond).
    pub fn new(limit: u64, lease_ttl: Duration) -> Result<Self, LimitError> {
        let ttl = crate::time::duration_to_nanos(lease_ttl);
        if ttl < crate::time::NANOS_PER_MS {
            return Err(LimitError::LeaseTtl { lease_ttl });
        }
        if limit == 0 || limit > crate::rate::MAX_LIMIT {
            return Err(LimitError::Burst { burst: limit });
        }
        Ok(Concurrency { n: limit, ttl })
    }

    /// The first instant at which enough leases have expired for `cost`.
    fn frees_at(&self, state: &ConcurrencyState, now: u64, cost: u64) -> u64 {
        let mut held = state.in_flight(now);
        if held + cost <= self.n {
            return now;
        }
        for lease in state.leases.iter().filter(|l| l.expires > now) {
            held -= lease.cost();
            if held + cost <= self.n {
                return lease.expires;
            }
        }
        now
    }
}

impl Algorithm for Concurrency {
    type State = ConcurrencyState;

    #[inline]
    fn limit(&self) -> u64 {
        self.n
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.n
    }

    #[inline]
    fn new_state(&self) -> ConcurrencyState {
        ConcurrencyState::default()
    }

    #[inline]
    fn evaluate(&self, state: &ConcurrencyState, now: u64, cost: u64) -> Decision {
        let tally = Tally {
            limit: self.n,
            count: state.in_flight(now),
        };
        tally.decide(
            now,
            cost,
            Instants {
                reset_if_counted: || self.lease_expiry(state, now),
                reset: || state.last_expiry(),
                retry: || self.frees_at(state, now, cost),
            },
        )
    }

    /// The expired leases are found once: counted out of what is in flight,
    /// then dropped when the request is admitted.
    #[inline]
    fn admit(&self, state: &mut ConcurrencyState, now: u64, cost: u64) -> Decision {
        let (expired, expired_cost) = state.expired(now);
        let in_flight = state.held - expired_cost;
        if in_flight + cost > self.n {
            return self.evaluate(state, now, cost);
        }
        // Dropping the expired leases leaves the newest expiry as it was, or
        // none when all had expired, which `lease_expiry` then passes.
        let expires = self.lease_expiry(state, now);
        state.held -= expired_cost;
        let (id, lease) = Self::lease(state, now, expires, cost);
        state.leases.drop_front_push_back(expired, lease);
        Decision {
            allowed: true,
            limit: self.n,
            remaining: self.n - in_flight - cost,
            reset_after: until(now, expires),
            lease: Some(id),
            ..Decision::default()
        }
    }

    #[inline]
    fn commit(&self, state: &mut ConcurrencyState, now: u64, cost: u64) -> Option<u64> {
        state.drop_expired(now);
        let expires = self.lease_expiry(state, now);
        let (id, lease) = Self::lease(state, now, expires, cost);
        state.leases.push_back(lease);
        Some(id)
    }

    fn next_available(&self, state: &ConcurrencyState, now: u64, cost: u64) -> u64 {
        self.frees_at(state, now, cost)
    }

    fn slot(&self, _state: &ConcurrencyState, _now: u64, _cost: u64) -> Option<Slot> {
        None
    }

    fn book(&self, _state: &mut ConcurrencyState, _now: u64, _slot: Slot, _cost: u64) {}

    fn expires_at(&self, state: &ConcurrencyState) -> u64 {
        state.last_expiry()
    }

    fn heap_bytes(&self, state: &ConcurrencyState) -> usize {
        state.leases.heap_bytes()
    }

    fn release(&self, state: &mut ConcurrencyState, lease: u64) -> bool {
        let Ok(index) = state.leases.binary_search_by_key(&lease, |l| l.id) else {
            return false;
        };
        if let Some(released) = state.leases.remove(index) {
            state.held -= released.cost();
        }
        true
    }
}

impl Concurrency {
    /// A lease of `cost` granted at `now`, expiring at `expires`, counted in
    /// the state; the caller appends it.
    #[inline]
    fn lease(state: &mut ConcurrencyState, now: u64, expires: u64, cost: u64) -> (u64, Lease) {
        // Ids grow with time, so an id is never handed out twice even after
        // the state was forgotten and rebuilt.
        let id = state.next_id.max(now);
        state.next_id = id + 1;
        // `cost` was admitted, so it is at most the limit, which fits.
        let cost = u32::try_from(cost).unwrap_or(u32::MAX);
        state.held += u64::from(cost);
        (id, Lease { id, expires, cost })
    }

    /// When a lease granted at `now` expires: `lease_ttl` later, but never
    /// before the lease granted last (a clock that stepped back must not
    /// reorder leases).
    fn lease_expiry(&self, state: &ConcurrencyState, now: u64) -> u64 {
        now.saturating_add(self.ttl).max(state.last_expiry())
    }
}

impl StateCodec for Concurrency {
    fn encode_state(&self, state: &ConcurrencyState, out: &mut Vec<u8>) {
        put_u64(out, state.held);
        put_u64(out, state.next_id);
        put_len(out, state.leases.len());
        for lease in state.leases.iter() {
            let Lease { id, expires, cost } = *lease;
            put_u64(out, id);
            put_u64(out, expires);
            put_u64(out, u64::from(cost));
        }
    }

    /// Leases must be in grant order (increasing ids below `next_id`,
    /// non-decreasing expiries) and hold `held` in all, at most `N`.
    fn decode_state(&self, input: &mut Reader<'_>) -> Option<ConcurrencyState> {
        let held = input.u64()?;
        let next_id = input.u64()?;
        let len = input.len(MAX_ENTRIES)?;
        let mut state = ConcurrencyState {
            leases: SmallDeque::new(),
            held,
            next_id,
        };
        let mut sum: u64 = 0;
        let mut previous: Option<Lease> = None;
        for _ in 0..len {
            let id = input.u64()?;
            let expires = input.u64()?;
            let cost = u32::try_from(input.u64()?).ok()?;
            let in_order = previous.is_none_or(|p| {
                let (p_id, p_expires) = (p.id, p.expires);
                p_id < id && p_expires <= expires
            });
            if !in_order || id >= next_id {
                return None;
            }
            sum = sum.checked_add(u64::from(cost))?;
            let lease = Lease { id, expires, cost };
            state.leases.push_back(lease);
            previous = Some(lease);
        }
        (sum == held && held <= self.n).then_some(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_40_bytes() {
        assert_eq!(std::mem::size_of::<ConcurrencyState>(), 40);
    }
}
