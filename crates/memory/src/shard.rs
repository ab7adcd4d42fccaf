//! One shard of a keyed table: a hash table of `(fingerprint, state)`
//! entries, and the bytes its allocation has accounted against the budget.
//!
//! A shard looks states up, runs an operation on them, inserts a key only
//! when the operation changed its state, and keeps the budget in step with
//! every allocation it makes. Making room when the budget is full lives in
//! `evict.rs`; locking lives in `table.rs`.

use std::fmt;

use hashbrown::HashTable;
use tollgate_core::Decision;

use crate::budget::Budget;
use crate::fingerprint::Fingerprint;
use crate::footprint::{full_capacity, grown_buckets, table_bytes, MIN_BUCKETS};
use crate::keyed::Keyed;

/// How many times a shard tries to free memory before it gives up on one
/// allocation. Each round drops at least one entry (usually an eighth).
pub(crate) const RELIEF_ROUNDS: usize = 64;

/// Heap bytes a shard's states may always hold, cap or no cap, when nothing
/// else in the shard can be evicted: as every shard may grow to 16 buckets,
/// so that a new limit works under a full budget, its states may grow a
/// little (a sliding log of about 60 entries), so that a key alone in its
/// shard is not forgotten (and freed) each time it grows while the cap is
/// spent by other limits. The store may pass its cap by this much a shard.
pub(crate) const SHARD_HEAP_FLOOR: usize = 1024;

/// One key: its fingerprint and its state; nothing else (expiry comes from
/// [`Algorithm::expires_at`](tollgate_core::Algorithm::expires_at)). The
/// zero-sized `line` field aligns the entry as [`Keyed::Line`] asks, so that
/// one entry never straddles two cache lines.
pub(crate) struct Entry<A: Keyed> {
    pub(crate) fp: Fingerprint,
    pub(crate) state: A::State,
    /// Read by nothing: it is there for its alignment.
    _line: A::Line,
}

impl<A: Keyed> Entry<A> {
    pub(crate) fn new(fp: Fingerprint, state: A::State) -> Self {
        Entry {
            fp,
            state,
            _line: A::Line::default(),
        }
    }

    pub(crate) fn hash(&self) -> u64 {
        self.fp.table_hash()
    }
}

impl<A: Keyed> fmt::Debug for Entry<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("fp", &self.fp)
            .field("state", &self.state)
            .finish()
    }
}

/// The algorithm and budget a shard works with.
#[derive(Debug)]
pub(crate) struct Ctx<'a, A> {
    pub(crate) alg: &'a A,
    pub(crate) budget: &'a Budget,
}

// Derived impls would require `A: Copy`; the context only holds references.
impl<A> Clone for Ctx<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Ctx<'_, A> {}

/// The keys of one shard.
#[derive(Debug)]
pub(crate) struct Shard<A: Keyed> {
    pub(crate) table: HashTable<Entry<A>>,
    /// The table's allocation as accounted in the budget.
    pub(crate) table_bytes: usize,
    /// The heap its states own, as accounted in the budget.
    pub(crate) heap_bytes: usize,
}

impl<A: Keyed> Default for Shard<A> {
    fn default() -> Self {
        Shard {
            table: HashTable::new(),
            table_bytes: 0,
            heap_bytes: 0,
        }
    }
}

impl<A: Keyed> Shard<A> {
    /// Keys held.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// The state of `fp`, if held.
    pub(crate) fn get(&self, fp: Fingerprint) -> Option<&A::State> {
        self.table
            .find(fp.table_hash(), |e| e.fp == fp)
            .map(|e| &e.state)
    }

    fn get_mut(&mut self, fp: Fingerprint) -> Option<&mut A::State> {
        self.table
            .find_mut(fp.table_hash(), |e| e.fp == fp)
            .map(|e| &mut e.state)
    }

    /// `f` applied to the state of `fp`, or to a fresh state when absent.
    pub(crate) fn read<R>(&self, alg: &A, fp: Fingerprint, f: impl FnOnce(&A::State) -> R) -> R {
        match self.get(fp) {
            Some(state) => f(state),
            None => f(&alg.new_state()),
        }
    }

    /// Runs `f` on the state of `fp`. An absent key gets a fresh state, which
    /// is inserted only when `f` reports (with its second result) that it
    /// changed it.
    pub(crate) fn update<R>(
        &mut self,
        cx: Ctx<'_, A>,
        fp: Fingerprint,
        now: u64,
        f: impl FnOnce(&mut A::State) -> (R, bool),
    ) -> R {
        if let Some(state) = self.get_mut(fp) {
            let before = cx.alg.heap_bytes(state);
            let (result, _) = f(state);
            // Most states own no heap: skip the second lookup and the shared
            // budget's atomic when nothing moved.
            if cx.alg.heap_bytes(state) != before {
                self.settle_heap(cx, fp, before, now);
            }
            return result;
        }
        let mut state = cx.alg.new_state();
        let (result, changed) = f(&mut state);
        if changed {
            let _ = self.insert(cx, fp, state, now);
        }
        result
    }

    /// Checks `cost` (validated, non-zero) at `now` for `fp` and counts it
    /// when admitted: [`update`](Self::update) with the algorithm's `admit`
    /// written out, so that the hot path inlines it and builds its decision
    /// in place.
    #[inline(always)]
    pub(crate) fn check(
        &mut self,
        cx: Ctx<'_, A>,
        fp: Fingerprint,
        now: u64,
        cost: u64,
    ) -> Decision {
        let alg = cx.alg;
        let mut fresh = None;
        let (state, held) = match self.get_mut(fp) {
            Some(state) => (state, true),
            None => (fresh.insert(alg.new_state()), false),
        };
        let before = if held { alg.heap_bytes(state) } else { 0 };
        let decision = alg.admit(state, now, cost);
        if !decision.allowed {
            // A refusal changes nothing but a ban's strikes, which own no
            // heap; a fresh key that took one is kept.
            if let Some(state) = fresh.filter(|s| alg.expires_at(s) > now) {
                let _ = self.insert(cx, fp, state, now);
            }
            return decision;
        }
        if held && alg.heap_bytes(state) != before {
            self.settle_heap(cx, fp, before, now);
        }
        if let Some(state) = fresh {
            let _ = self.insert(cx, fp, state, now);
        }
        decision
    }

    /// Puts a saved state back (a snapshot being loaded), unless the key is
    /// already held; accounted like any insert, evicting if the budget is
    /// full.
    pub(crate) fn restore(&mut self, cx: Ctx<'_, A>, fp: Fingerprint, state: A::State, now: u64) {
        if self.get(fp).is_none() {
            let _ = self.insert(cx, fp, state, now);
        }
    }

    /// Forgets `fp`; `true` when it was held.
    pub(crate) fn remove(&mut self, cx: Ctx<'_, A>, fp: Fingerprint) -> bool {
        match self.table.find_entry(fp.table_hash(), |e| e.fp == fp) {
            Ok(entry) => {
                let (entry, _) = entry.remove();
                let heap = cx.alg.heap_bytes(&entry.state);
                cx.budget.release(heap);
                self.heap_bytes = self.heap_bytes.saturating_sub(heap);
                true
            }
            Err(_) => false,
        }
    }

    /// Stores a new key's state, making room first. When the budget is full
    /// and every state of the shard is refusing, the state is not stored
    /// (the key's decision stands, but it is not remembered) and the store's
    /// count of such states goes up; `false` then.
    fn insert(&mut self, cx: Ctx<'_, A>, fp: Fingerprint, state: A::State, now: u64) -> bool {
        if !self.make_slot(cx, now) {
            cx.budget.count_unstored();
            return false;
        }
        self.table
            .insert_unique(fp.table_hash(), Entry::new(fp, state), Entry::hash);
        self.reconcile(cx.budget);
        self.settle_heap(cx, fp, 0, now);
        true
    }

    /// The bucket count inserting one more key would grow the table to, or
    /// `None` when it fits (possibly after an in-place rehash, which
    /// allocates nothing).
    fn growth_needed(&self) -> Option<usize> {
        let len = self.table.len();
        // `capacity()` is len + growth_left: tombstones already subtracted.
        if len < self.table.capacity() {
            return None;
        }
        let buckets = self.table.num_buckets();
        // hashbrown rehashes in place when the table would be at most half full.
        if len < full_capacity(buckets) / 2 {
            return None;
        }
        Some(grown_buckets(buckets))
    }

    /// Ensures the next insert does not allocate more than the budget
    /// allows: grows the table if the budget has room (or the table is below
    /// the guaranteed minimum), otherwise drops expired states or evicts
    /// states that are not refusing. `false` when there is no room and
    /// every state left is refusing.
    fn make_slot(&mut self, cx: Ctx<'_, A>, now: u64) -> bool {
        for _ in 0..RELIEF_ROUNDS {
            let Some(buckets) = self.growth_needed() else {
                return true;
            };
            let extra = table_bytes::<Entry<A>>(buckets).saturating_sub(self.table_bytes);
            let granted = if buckets <= MIN_BUCKETS {
                cx.budget.charge(extra);
                true
            } else {
                cx.budget.try_reserve(extra)
            };
            if granted {
                self.table_bytes += extra;
                self.table.reserve(1, Entry::hash);
                self.reconcile(cx.budget);
                return true;
            }
            if !self.relieve(cx, now) {
                return false;
            }
        }
        // Every round freed something without making room (states that
        // left tombstones): the insert may rehash in place or grow.
        true
    }

    /// Brings the accounted table bytes in line with the table's allocation.
    pub(crate) fn reconcile(&mut self, budget: &Budget) {
        let actual = table_bytes::<Entry<A>>(self.table.num_buckets());
        if actual > self.table_bytes {
            budget.charge(actual - self.table_bytes);
        } else {
            budget.release(self.table_bytes - actual);
        }
        self.table_bytes = actual;
    }

    /// Accounts the change of `fp`'s heap from `before`. When the growth does
    /// not fit, other keys of this shard are dropped or evicted (refusing
    /// ones only when `fp`'s state is refusing too); when nothing else can
    /// go, the growth is charged past the cap while the shard's heap stays
    /// within [`SHARD_HEAP_FLOOR`], and beyond it `fp` itself is forgotten
    /// (and starts fresh: a limit that needs more memory than the cap gives
    /// cannot be held).
    fn settle_heap(&mut self, cx: Ctx<'_, A>, fp: Fingerprint, before: usize, now: u64) {
        let after = self.get(fp).map_or(0, |state| cx.alg.heap_bytes(state));
        if after <= before {
            cx.budget.release(before - after);
            self.heap_bytes = self.heap_bytes.saturating_sub(before - after);
            return;
        }
        let extra = after - before;
        for _ in 0..RELIEF_ROUNDS {
            if cx.budget.try_reserve(extra) {
                self.heap_bytes += extra;
                return;
            }
            if !self.relieve_for(cx, now, fp) {
                break;
            }
        }
        if self.heap_bytes + extra <= SHARD_HEAP_FLOOR {
            cx.budget.charge(extra);
            self.heap_bytes += extra;
            return;
        }
        if let Ok(entry) = self.table.find_entry(fp.table_hash(), |e| e.fp == fp) {
            entry.remove();
        }
        cx.budget.release(before);
        self.heap_bytes = self.heap_bytes.saturating_sub(before);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, size_of};
    use tollgate_core::algorithm::{
        Concurrency, FixedWindow, Gcra, LeakyBucket, SlidingWindowCounter, SlidingWindowLog,
        SteppedWindow, TokenBucket, Wide,
    };

    #[test]
    fn entries_are_a_fingerprint_and_a_state_and_nothing_else() {
        assert_eq!(size_of::<Entry<Gcra>>(), 24);
        assert_eq!(size_of::<Entry<TokenBucket>>(), 24);
        assert_eq!(size_of::<Entry<TokenBucket<Wide>>>(), 32);
        assert_eq!(size_of::<Entry<FixedWindow>>(), 24);
        assert_eq!(size_of::<Entry<LeakyBucket>>(), 32);
        assert_eq!(size_of::<Entry<SlidingWindowCounter>>(), 40);
        assert_eq!(size_of::<Entry<SlidingWindowLog>>(), 56);
        assert_eq!(size_of::<Entry<SteppedWindow>>(), 56);
        assert_eq!(size_of::<Entry<Concurrency>>(), 48);
    }

    #[test]
    fn entries_of_32_bytes_are_aligned_to_their_size() {
        assert_eq!(align_of::<Entry<TokenBucket<Wide>>>(), 32);
        assert_eq!(align_of::<Entry<LeakyBucket>>(), 32);
    }
}
