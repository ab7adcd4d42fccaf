//! Making room in a shard: dropping expired states, evicting the states
//! closest to expiry when the budget is full, and shrinking a table that a
//! sweep left mostly empty.
//!
//! Eviction is local to one shard (the one already locked), so it never
//! waits on another lock. Which keys it drops, and why, is described in the
//! crate docs.

use crate::fingerprint::Fingerprint;
use crate::footprint::{buckets_for, full_capacity, table_bytes, MIN_BUCKETS};
use crate::keyed::Keyed;
use crate::shard::{Ctx, Entry, Shard};

/// Divisor of the share of a shard evicted at once: an eighth.
const EVICT_SHARE: usize = 8;

impl<A: Keyed> Shard<A> {
    /// Frees something in this shard, never `protect`: expired states first,
    /// else the earliest-expiring eighth. `false` when nothing could go.
    pub(crate) fn relieve(
        &mut self,
        cx: Ctx<'_, A>,
        now: u64,
        protect: Option<Fingerprint>,
    ) -> bool {
        self.drop_expired(cx, now, protect) > 0 || self.evict_earliest(cx, protect) > 0
    }

    /// Drops every state expired at `now` except `protect`'s; returns how many.
    pub(crate) fn drop_expired(
        &mut self,
        cx: Ctx<'_, A>,
        now: u64,
        protect: Option<Fingerprint>,
    ) -> usize {
        self.drop_where(cx, |e| {
            Some(e.fp) != protect && cx.alg.expires_at(&e.state) <= now
        })
    }

    /// Evicts the eighth (at least one) of the states other than `protect`'s
    /// with the earliest `expires_at`; returns how many.
    pub(crate) fn evict_earliest(&mut self, cx: Ctx<'_, A>, protect: Option<Fingerprint>) -> usize {
        let mut expiries: Vec<u64> = self
            .table
            .iter()
            .filter(|e| Some(e.fp) != protect)
            .map(|e| cx.alg.expires_at(&e.state))
            .collect();
        let count = (expiries.len() / EVICT_SHARE).max(1);
        let Some(threshold) = nth_smallest(&mut expiries, count - 1) else {
            return 0;
        };
        let below = expiries.iter().filter(|&&x| x < threshold).count();
        drop(expiries);
        // Ties at the threshold are evicted only up to the count, so a shard
        // of equal expiries loses an eighth, not everything.
        let mut ties = count - below;
        self.drop_where(cx, |e| {
            if Some(e.fp) == protect {
                return false;
            }
            let expires = cx.alg.expires_at(&e.state);
            if expires == threshold && ties > 0 {
                ties -= 1;
                return true;
            }
            expires < threshold
        })
    }

    /// Drops the states for which `doomed` holds, releasing their heap bytes.
    fn drop_where(&mut self, cx: Ctx<'_, A>, mut doomed: impl FnMut(&Entry<A>) -> bool) -> usize {
        let mut dropped = 0;
        let mut heap = 0;
        self.table.retain(|e| {
            if doomed(e) {
                dropped += 1;
                heap += cx.alg.heap_bytes(&e.state);
                return false;
            }
            true
        });
        cx.budget.release(heap);
        dropped
    }

    /// A sweep: drops the states expired at `now`, then shrinks the table if
    /// it is left under a quarter full. Returns how many states were dropped.
    pub(crate) fn sweep(&mut self, cx: Ctx<'_, A>, now: u64) -> usize {
        let dropped = self.drop_expired(cx, now, None);
        if dropped > 0 {
            self.shrink(cx);
        }
        dropped
    }

    /// Shrinks a table under a quarter full to one about half full. The new
    /// table is reserved in the budget before it is allocated (the old one is
    /// freed after), so a full budget postpones the shrink.
    fn shrink(&mut self, cx: Ctx<'_, A>) {
        let len = self.table.len();
        let buckets = self.table.num_buckets();
        if buckets <= MIN_BUCKETS || len >= full_capacity(buckets) / 4 {
            return;
        }
        let target = len.saturating_mul(2).max(full_capacity(MIN_BUCKETS));
        let new_bytes = table_bytes::<Entry<A>>(buckets_for(target));
        if buckets_for(target) >= buckets || !cx.budget.try_reserve(new_bytes) {
            return;
        }
        self.table.shrink_to(target, Entry::hash);
        cx.budget.release(new_bytes);
        self.reconcile(cx.budget);
    }
}

/// The `n`th smallest value (0-based), reordering `values`; `None` when
/// there are not that many.
fn nth_smallest(values: &mut [u64], n: usize) -> Option<u64> {
    if n >= values.len() {
        return None;
    }
    let (_, nth, _) = values.select_nth_unstable(n);
    Some(*nth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budget;
    use crate::fingerprint::Seed;
    use tollgate_core::algorithm::{Algorithm, FixedWindow};
    use tollgate_core::time::NANOS_PER_SEC;
    use tollgate_core::Rate;

    fn fill(
        shard: &mut Shard<FixedWindow>,
        cx: Ctx<'_, FixedWindow>,
        keys: u32,
        now: impl Fn(u32) -> u64,
    ) {
        let seed = Seed { k0: 7, k1: 9 };
        for i in 0..keys {
            let fp = seed.fingerprint(&i.to_le_bytes());
            let t = now(i);
            let _ = shard.update(cx, fp, t, |s| {
                (cx.alg.check(s, t, 1).map(|d| d.allowed), true)
            });
        }
    }

    fn setup() -> (FixedWindow, Budget) {
        (
            FixedWindow::new(Rate::per_second(5).unwrap()),
            Budget::new(usize::MAX),
        )
    }

    #[test]
    fn eviction_takes_the_earliest_eighth_even_among_ties() {
        let (alg, budget) = setup();
        let cx = Ctx {
            alg: &alg,
            budget: &budget,
        };
        let mut shard = Shard::default();
        fill(&mut shard, cx, 800, |_| 0);
        assert_eq!(shard.evict_earliest(cx, None), 100);
        assert_eq!(shard.len(), 700);
        // Keys seen later expire later: the earliest ones go.
        let mut shard = Shard::default();
        fill(&mut shard, cx, 80, |i| u64::from(i) * NANOS_PER_SEC);
        assert_eq!(shard.evict_earliest(cx, None), 10);
        let earliest = shard.table.iter().map(|e| alg.expires_at(&e.state)).min();
        assert_eq!(earliest, Some(11 * NANOS_PER_SEC));
    }

    #[test]
    fn sweeping_drops_only_expired_states_and_shrinks() {
        let (alg, budget) = setup();
        let cx = Ctx {
            alg: &alg,
            budget: &budget,
        };
        let mut shard = Shard::default();
        fill(&mut shard, cx, 1000, |i| u64::from(i) * NANOS_PER_SEC);
        let before = budget.used();
        assert_eq!(shard.sweep(cx, 990 * NANOS_PER_SEC), 990);
        assert_eq!(shard.len(), 10);
        assert!(budget.used() < before / 8, "{} of {before}", budget.used());
        assert_eq!(budget.used(), shard.table_bytes);
    }

    #[test]
    fn a_protected_key_is_never_evicted() {
        let (alg, budget) = setup();
        let cx = Ctx {
            alg: &alg,
            budget: &budget,
        };
        let mut shard = Shard::default();
        fill(&mut shard, cx, 3, |_| 0);
        let protect = shard.table.iter().next().map(|e| e.fp);
        for _ in 0..3 {
            shard.relieve(cx, 0, protect);
        }
        assert_eq!(shard.len(), 1);
        assert!(!shard.relieve(cx, 0, protect));
        assert_eq!(shard.table.iter().next().map(|e| e.fp), protect);
    }
}
