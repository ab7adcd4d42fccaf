//! SPEC §2 `concurrency`: leases with an expiry; admitted when the cost of
//! live leases plus `c` stays within `N`; a release ends a lease early.

use std::time::Duration;

use tollgate_core::Decision;

#[derive(Debug, Clone)]
pub(crate) struct ModelLease {
    pub(crate) id: u64,
    pub(crate) expires: u64,
    pub(crate) cost: u64,
    pub(crate) released: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct ConcurrencyModel {
    n: u64,
    ttl: u64,
    pub(crate) leases: Vec<ModelLease>,
}

impl ConcurrencyModel {
    pub(crate) fn new(n: u64, ttl: u64) -> Self {
        ConcurrencyModel {
            n,
            ttl,
            leases: Vec::new(),
        }
    }

    fn live(&self, t: u64) -> impl Iterator<Item = &ModelLease> {
        self.leases
            .iter()
            .filter(move |l| !l.released && l.expires > t)
    }

    fn in_flight(&self, t: u64) -> u64 {
        self.live(t).map(|l| l.cost).sum()
    }

    /// The earliest instant at or after `t` at which `cost` fits, if nobody
    /// releases anything: now, or when some lease expires.
    pub(crate) fn first_admit(&self, t: u64, cost: u64) -> u64 {
        std::iter::once(t)
            .chain(self.live(t).map(|l| l.expires))
            .filter(|&at| self.in_flight(at) + cost <= self.n)
            .min()
            .expect("every lease expires")
    }

    /// The decision for `cost` at `now`; an admitted request's lease is
    /// recorded under `lease` (the id the implementation handed out).
    pub(crate) fn check(&mut self, now: u64, cost: u64, lease: Option<u64>) -> Decision {
        let allowed = cost == 0 || self.in_flight(now) + cost <= self.n;
        let retry_after = if allowed {
            0
        } else {
            self.first_admit(now, cost) - now
        };
        if allowed && cost > 0 {
            self.leases.push(ModelLease {
                id: lease.unwrap_or(u64::MAX),
                expires: now + self.ttl,
                cost,
                released: false,
            });
        }
        let reset = self.live(now).map(|l| l.expires).max().unwrap_or(now) - now;
        Decision {
            allowed,
            limit: self.n,
            remaining: self.n - self.in_flight(now),
            retry_after: Duration::from_nanos(retry_after),
            reset_after: Duration::from_nanos(reset),
            delay: Duration::ZERO,
            lease: if allowed && cost > 0 { lease } else { None },
            degraded: false,
            asynchronous: false,
            ban: None,
        }
    }

    /// Ends the lease `id` at `now`: `Some(true)` when it was held,
    /// `Some(false)` when it was unknown or already released, `None` when it
    /// had expired unreleased (nothing holds it; either answer will do).
    pub(crate) fn release(&mut self, now: u64, id: u64) -> Option<bool> {
        match self.leases.iter_mut().find(|l| l.id == id) {
            Some(l) if !l.released => {
                l.released = true;
                (l.expires > now).then_some(true)
            }
            _ => Some(false),
        }
    }
}
