//! Making room in a shard: dropping expired states, evicting the least
//! indebted states when the budget is full, and shrinking a table that a
//! sweep left mostly empty.
//!
//! Eviction is local to one shard (the one already locked), so it never
//! waits on another lock. It ranks states by their
//! [`Debt`](tollgate_core::algorithm::Debt) at the instant it runs: a state
//! that admits as much as a fresh one costs nothing to forget, a refusing
//! one frees its key. It takes the least indebted eighth of the states that
//! are not refusing and never a refusing one (unless a refusing state's own
//! heap must grow, see [`Shard::relieve_for`]). Why, and what happens when
//! only refusing states are left, is described in the crate docs.

use tollgate_core::algorithm::Debt;

use crate::fingerprint::Fingerprint;
use crate::footprint::{buckets_for, full_capacity, table_bytes, MIN_BUCKETS};
use crate::keyed::Keyed;
use crate::shard::{Ctx, Entry, Shard};

/// Divisor of the share of a shard evicted at once: an eighth.
const EVICT_SHARE: usize = 8;

/// Which states eviction may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evictable {
    /// Only states that are not refusing: forgetting a refusing state would
    /// let its key through.
    NotRefusing,
    /// Refusing states too, least indebted first (only to make room for the
    /// heap of a state that is refusing itself).
    Any,
}

impl<A: Keyed> Shard<A> {
    /// Frees something in this shard for a new key: expired states first,
    /// else the least indebted eighth of the states that are not refusing.
    /// `false` when nothing could go: every state left is refusing.
    pub(crate) fn relieve(&mut self, cx: Ctx<'_, A>, now: u64) -> bool {
        self.drop_expired(cx, now, None) > 0
            || self.evict_least_indebted(cx, now, None, Evictable::NotRefusing) > 0
    }

    /// Frees something in this shard, never `fp`'s state, for the heap that
    /// state is growing by: as [`relieve`](Self::relieve), and when only
    /// refusing states are left and `fp`'s is refusing too, the least
    /// indebted of those (forgetting `fp` instead would free it). `false`
    /// when nothing could go.
    pub(crate) fn relieve_for(&mut self, cx: Ctx<'_, A>, now: u64, fp: Fingerprint) -> bool {
        if self.drop_expired(cx, now, Some(fp)) > 0
            || self.evict_least_indebted(cx, now, Some(fp), Evictable::NotRefusing) > 0
        {
            return true;
        }
        let refusing = self
            .get(fp)
            .is_some_and(|state| cx.alg.debt(state, now).refusing);
        refusing && self.evict_least_indebted(cx, now, Some(fp), Evictable::Any) > 0
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

    /// Evicts the eighth (at least one) of the states other than
    /// `protect`'s with the least debt at `now`, taking only those `which`
    /// allows; returns how many.
    pub(crate) fn evict_least_indebted(
        &mut self,
        cx: Ctx<'_, A>,
        now: u64,
        protect: Option<Fingerprint>,
        which: Evictable,
    ) -> usize {
        // Each state's rank is computed once, in the table's order, and
        // read back in that order by `drop_where` (the fingerprint checks
        // that the two walks agree; a state they disagree on stays).
        let ranked: Vec<(u64, Fingerprint)> = self
            .table
            .iter()
            .filter(|e| Some(e.fp) != protect)
            .map(|e| (cx.alg.debt(&e.state, now).rank(), e.fp))
            .collect();
        let candidates = ranked.len();
        let mut ranks: Vec<u64> = ranked
            .iter()
            .map(|&(rank, _)| rank)
            .filter(|&rank| which == Evictable::Any || rank < REFUSING_RANK)
            .collect();
        let count = (candidates / EVICT_SHARE).max(1).min(ranks.len());
        if count == 0 {
            return 0;
        }
        let Some(threshold) = nth_smallest(&mut ranks, count - 1) else {
            return 0;
        };
        let below = ranks.iter().filter(|&&rank| rank < threshold).count();
        drop(ranks);
        // Ties at the threshold are evicted only up to the count, so a shard
        // of equal debts loses an eighth, not everything.
        let mut ties = count - below;
        let mut next = ranked.iter();
        self.drop_where(cx, |e| {
            if Some(e.fp) == protect {
                return false;
            }
            let Some(&(rank, fp)) = next.next() else {
                return false;
            };
            if fp != e.fp {
                return false;
            }
            if rank == threshold && ties > 0 {
                ties -= 1;
                return true;
            }
            rank < threshold
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
        self.heap_bytes = self.heap_bytes.saturating_sub(heap);
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

/// The least rank of a refusing state ([`Debt::rank`]).
const REFUSING_RANK: u64 = Debt {
    units: 0,
    refusing: true,
}
.rank();

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

    /// Checks key `i` `hits(i)` times at `now(i)`, for `keys` keys.
    fn fill(
        shard: &mut Shard<FixedWindow>,
        cx: Ctx<'_, FixedWindow>,
        keys: u32,
        now: impl Fn(u32) -> u64,
        hits: impl Fn(u32) -> u64,
    ) {
        for i in 0..keys {
            let fp = key(i);
            let t = now(i);
            for _ in 0..hits(i) {
                let _ = shard.update(cx, fp, t, |s| {
                    (cx.alg.check(s, t, 1).map(|d| d.allowed), true)
                });
            }
        }
    }

    fn key(i: u32) -> Fingerprint {
        Seed { k0: 7, k1: 9 }.fingerprint(&i.to_le_bytes())
    }

    fn setup() -> (FixedWindow, Budget) {
        (
            FixedWindow::new(Rate::per_second(5).unwrap()),
            Budget::new(usize::MAX),
        )
    }

    fn debts(shard: &Shard<FixedWindow>, alg: &FixedWindow, now: u64) -> Vec<Debt> {
        let mut debts: Vec<Debt> = shard
            .table
            .iter()
            .map(|e| alg.debt(&e.state, now))
            .collect();
        debts.sort();
        debts
    }

    #[test]
    fn eviction_takes_the_least_indebted_eighth_even_among_ties() {
        let (alg, budget) = setup();
        let cx = Ctx {
            alg: &alg,
            budget: &budget,
        };
        let mut shard = Shard::default();
        fill(&mut shard, cx, 800, |_| 0, |_| 1);
        assert_eq!(
            shard.evict_least_indebted(cx, 0, None, Evictable::NotRefusing),
            100
        );
        assert_eq!(shard.len(), 700);
        // Keys 0..10 owe 4, the others 1 to 3: the ten least indebted go,
        // whatever their expiry.
        let mut shard = Shard::default();
        fill(
            &mut shard,
            cx,
            80,
            |_| 0,
            |i| if i < 10 { 4 } else { 1 + u64::from(i % 3) },
        );
        assert_eq!(
            shard.evict_least_indebted(cx, 0, None, Evictable::NotRefusing),
            10
        );
        let left = debts(&shard, &alg, 0);
        assert_eq!(left.first().map(|d| d.units), Some(1));
        assert_eq!(left.iter().filter(|d| d.units == 4).count(), 10);
    }

    #[test]
    fn a_refusing_state_is_never_evicted_while_another_can_go() {
        let (alg, budget) = setup();
        let cx = Ctx {
            alg: &alg,
            budget: &budget,
        };
        let mut shard = Shard::default();
        // Key 0 is throttled (5 of 5) and its window ends first; the others
        // each made one request in a later window.
        fill(
            &mut shard,
            cx,
            16,
            |i| if i == 0 { 0 } else { NANOS_PER_SEC / 2 },
            |i| if i == 0 { 5 } else { 1 },
        );
        let now = NANOS_PER_SEC / 2;
        while shard.len() > 1 {
            assert!(shard.relieve(cx, now));
            assert!(shard.get(key(0)).is_some());
        }
        assert!(!shard.relieve(cx, now), "only a refusing state is left");
        assert!(shard.get(key(0)).is_some());
        // Once its window has passed, it is expired and goes.
        assert!(shard.relieve(cx, NANOS_PER_SEC));
        assert_eq!(shard.len(), 0);
    }

    #[test]
    fn sweeping_drops_only_expired_states_and_shrinks() {
        let (alg, budget) = setup();
        let cx = Ctx {
            alg: &alg,
            budget: &budget,
        };
        let mut shard = Shard::default();
        fill(
            &mut shard,
            cx,
            1000,
            |i| u64::from(i) * NANOS_PER_SEC,
            |_| 1,
        );
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
        fill(&mut shard, cx, 3, |_| 0, |_| 1);
        let protect = key(1);
        for _ in 0..2 {
            assert!(shard.relieve_for(cx, 0, protect));
        }
        assert_eq!(shard.len(), 1);
        assert!(!shard.relieve_for(cx, 0, protect));
        assert_eq!(shard.table.iter().next().map(|e| e.fp), Some(protect));
    }

    #[test]
    fn a_refusing_state_growing_makes_room_among_refusing_ones() {
        let (alg, budget) = setup();
        let cx = Ctx {
            alg: &alg,
            budget: &budget,
        };
        let mut shard = Shard::default();
        fill(&mut shard, cx, 4, |_| 0, |_| 5);
        // All four refuse: a new key finds no room, but a refusing key whose
        // heap grows may take the place of another refusing one.
        assert!(!shard.relieve(cx, 0));
        assert!(shard.relieve_for(cx, 0, key(0)));
        assert_eq!(shard.len(), 3);
        assert!(shard.get(key(0)).is_some());
        // A key that is not refusing makes no room among refusing ones.
        let mut shard = Shard::default();
        fill(&mut shard, cx, 4, |_| 0, |i| if i == 0 { 1 } else { 5 });
        assert!(!shard.relieve_for(cx, 0, key(0)));
        assert_eq!(shard.len(), 4);
    }

    mod order {
        //! Eviction against a reference model: the evicted states are
        //! exactly as many as the least indebted eighth (never more than
        //! the states it may take), and their ranks are the smallest of the
        //! states it may take.
        use super::*;
        use proptest::prelude::*;
        use tollgate_core::algorithm::{SlidingWindowLog, TokenBucket};

        /// Fills a shard of `alg` from `keys`: (hits, at in ms) per key.
        fn shard_of<A: Keyed>(alg: &A, budget: &Budget, keys: &[(u64, u64)]) -> Shard<A> {
            let cx = Ctx { alg, budget };
            let mut shard = Shard::default();
            for (i, &(hits, at)) in keys.iter().enumerate() {
                let at = at * 1_000_000;
                let fp = key(i as u32);
                for _ in 0..hits {
                    let _ = shard.update(cx, fp, at, |s| {
                        let d = alg.check(s, at, 1).map(|d| d.allowed);
                        (d, true)
                    });
                }
            }
            shard
        }

        fn ranks<A: Keyed>(shard: &Shard<A>, alg: &A, now: u64) -> Vec<(Fingerprint, u64)> {
            shard
                .table
                .iter()
                .map(|e| (e.fp, alg.debt(&e.state, now).rank()))
                .collect()
        }

        fn evicts_the_least_indebted<A: Keyed>(
            alg: &A,
            keys: &[(u64, u64)],
            now_ms: u64,
            protect: Option<usize>,
            which: Evictable,
        ) -> Result<(), TestCaseError> {
            let budget = Budget::new(usize::MAX);
            let cx = Ctx {
                alg,
                budget: &budget,
            };
            let now = now_ms * 1_000_000;
            let mut shard = shard_of(alg, &budget, keys);
            let protect = protect
                .map(|i| key((i % keys.len().max(1)) as u32))
                .filter(|fp| shard.get(*fp).is_some());
            let before = ranks(&shard, alg, now);
            let candidates: Vec<u64> = before
                .iter()
                .filter(|(fp, _)| Some(*fp) != protect)
                .map(|&(_, rank)| rank)
                .collect();
            let mut eligible: Vec<u64> = candidates
                .iter()
                .copied()
                .filter(|&rank| which == Evictable::Any || rank < REFUSING_RANK)
                .collect();
            eligible.sort_unstable();
            let expected = (candidates.len() / 8).max(1).min(eligible.len());
            let evicted = shard.evict_least_indebted(cx, now, protect, which);
            prop_assert_eq!(evicted, expected);
            let after = ranks(&shard, alg, now);
            let mut gone: Vec<u64> = before
                .iter()
                .filter(|(fp, _)| !after.iter().any(|(kept, _)| kept == fp))
                .map(|&(_, rank)| rank)
                .collect();
            gone.sort_unstable();
            prop_assert_eq!(&gone[..], &eligible[..expected]);
            if let Some(fp) = protect {
                prop_assert!(shard.get(fp).is_some(), "the protected key was evicted");
            }
            Ok(())
        }

        fn keys() -> impl Strategy<Value = Vec<(u64, u64)>> {
            prop::collection::vec((1..=6u64, 0..3_000u64), 0..200)
        }

        fn which() -> impl Strategy<Value = Evictable> {
            prop_oneof![Just(Evictable::NotRefusing), Just(Evictable::Any)]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            #[test]
            fn fixed_window(
                keys in keys(), now in 0..4_000u64,
                protect in proptest::option::of(0..200usize), which in which(),
            ) {
                let alg = FixedWindow::new(Rate::per_second(5).unwrap());
                evicts_the_least_indebted(&alg, &keys, now, protect, which)?;
            }

            #[test]
            fn sliding_log(
                keys in keys(), now in 0..4_000u64,
                protect in proptest::option::of(0..200usize), which in which(),
            ) {
                let alg = SlidingWindowLog::new(Rate::per_second(5).unwrap());
                evicts_the_least_indebted(&alg, &keys, now, protect, which)?;
            }

            #[test]
            fn token_bucket(
                keys in keys(), now in 0..4_000u64,
                protect in proptest::option::of(0..200usize), which in which(),
            ) {
                let alg = TokenBucket::new(Rate::per_second(5).unwrap(), 5).unwrap();
                evicts_the_least_indebted(&alg, &keys, now, protect, which)?;
            }
        }
    }
}
