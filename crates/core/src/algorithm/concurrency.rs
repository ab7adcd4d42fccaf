//! Concurrency: at most `N` requests in flight. An admitted request gets a
//! lease id and releases it when done; a lease expires after `lease_ttl`, so
//! a caller that crashed cannot hold capacity forever.
//!
//! Not time-based: there is no slot to reserve, and `retry_after` is the time
//! until enough leases expire if nobody releases one.

use std::time::Duration;

use super::{until, Algorithm, Slot};
use crate::decision::Decision;
use crate::limit::LimitError;

/// At most `N` in flight, each lease held at most `lease_ttl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    n: u64,
    ttl: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lease {
    id: u64,
    expires: u64,
    cost: u64,
}

/// The leases held, and the next id to hand out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConcurrencyState {
    leases: Vec<Lease>,
    next_id: u64,
}

impl ConcurrencyState {
    fn in_flight(&self, now: u64) -> u64 {
        self.leases
            .iter()
            .filter(|l| l.expires > now)
            .map(|l| l.cost)
            .sum()
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
        let mut live: Vec<&Lease> = state.leases.iter().filter(|l| l.expires > now).collect();
        live.sort_unstable_by_key(|l| l.expires);
        let mut held: u64 = live.iter().map(|l| l.cost).sum();
        if held + cost <= self.n {
            return now;
        }
        for lease in live {
            held -= lease.cost;
            if held + cost <= self.n {
                return lease.expires;
            }
        }
        now
    }
}

impl Algorithm for Concurrency {
    type State = ConcurrencyState;

    fn limit(&self) -> u64 {
        self.n
    }

    fn capacity(&self) -> u64 {
        self.n
    }

    fn new_state(&self) -> ConcurrencyState {
        ConcurrencyState::default()
    }

    fn evaluate(&self, state: &ConcurrencyState, now: u64, cost: u64) -> Decision {
        let held = state.in_flight(now);
        let allowed = held + cost <= self.n;
        let last_expiry = state.leases.iter().map(|l| l.expires).max().unwrap_or(0);
        let mut decision = Decision {
            allowed,
            limit: self.n,
            ..Decision::default()
        };
        if allowed {
            decision.remaining = self.n - held - cost;
            let expiry = if cost > 0 { now + self.ttl } else { 0 };
            decision.reset_after = until(now, last_expiry.max(expiry));
        } else {
            decision.remaining = self.n.saturating_sub(held);
            decision.retry_after = until(now, self.frees_at(state, now, cost));
            decision.reset_after = until(now, last_expiry);
        }
        decision
    }

    fn commit(&self, state: &mut ConcurrencyState, now: u64, cost: u64) -> Option<u64> {
        state.leases.retain(|l| l.expires > now);
        // Ids grow with time, so an id is never handed out twice even after
        // the state was forgotten and rebuilt.
        let id = state.next_id.max(now);
        state.next_id = id + 1;
        state.leases.push(Lease {
            id,
            expires: now.saturating_add(self.ttl),
            cost,
        });
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
        state.leases.iter().map(|l| l.expires).max().unwrap_or(0)
    }

    fn heap_bytes(&self, state: &ConcurrencyState) -> usize {
        state.leases.capacity() * std::mem::size_of::<Lease>()
    }

    fn release(&self, state: &mut ConcurrencyState, lease: u64) -> bool {
        let before = state.leases.len();
        state.leases.retain(|l| l.id != lease);
        state.leases.len() != before
    }
}
