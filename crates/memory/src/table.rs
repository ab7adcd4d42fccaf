//! A keyed table for one limit: the typed [`Table`], sharded behind
//! cache-padded mutexes, and the object-safe [`ErasedTable`] through which a
//! [`Limiter`](crate::Limiter) and the multi-limit operations reach it.
//!
//! Every operation locks exactly one shard, except [`ErasedTable::lock`],
//! which hands the guard out so that `multi.rs` can hold several shards in a
//! global order.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};
use tollgate_core::algorithm::codec::Reader;
use tollgate_core::algorithm::{Settled, Slot};
use tollgate_core::{Decision, Limit, LimitError, Reservation};

use crate::budget::Budget;
use crate::fingerprint::{Fingerprint, Seed};
use crate::keyed::Keyed;
use crate::shard::{Ctx, Shard};

/// A limit's keyed table, whatever its algorithm.
pub(crate) trait ErasedTable: Send + Sync {
    /// The fingerprint of `key` under the store's seed.
    fn fingerprint(&self, key: &[u8]) -> Fingerprint;

    /// The store's seed, which the table fingerprints keys under.
    fn seed(&self) -> Seed;
    /// The shard holding `fp`.
    fn shard_of(&self, fp: Fingerprint) -> usize;
    /// Keys held, summed over shards (each locked in turn).
    fn len(&self) -> usize;
    /// Checks `cost` at `now` for `key`, counting it when admitted: one
    /// dynamic call for the whole hot path.
    fn check_key(&self, key: &[u8], now: u64, cost: u64) -> Result<Decision, LimitError>;
    /// The earliest instant `cost` would be admitted.
    fn next_available(&self, fp: Fingerprint, now: u64, cost: u64) -> Result<u64, LimitError>;
    /// Books the earliest slot unless it is more than `max_wait` away.
    fn reserve(
        &self,
        fp: Fingerprint,
        now: u64,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<Reservation, LimitError>;
    /// Ends a concurrency lease.
    fn release(&self, fp: Fingerprint, lease: u64) -> bool;
    /// Forgets a key.
    fn reset(&self, fp: Fingerprint) -> bool;
    /// Counts usage whatever the limit says (every algorithm but
    /// `concurrency`).
    fn record(&self, fp: Fingerprint, at: u64, cost: u64) -> Result<u64, LimitError>;
    /// Settles a request admitted at `admitted_at` with `estimate`, whose
    /// actual cost is `actual`, at `now` (every algorithm but
    /// `concurrency`).
    fn settle(
        &self,
        fp: Fingerprint,
        admitted_at: u64,
        now: u64,
        estimate: u64,
        actual: u64,
    ) -> Result<Settled, LimitError>;
    /// An error when `cost` can never be admitted.
    fn validate_cost(&self, cost: u64) -> Result<(), LimitError>;
    /// Whether the algorithm takes reservations.
    fn takes_reservations(&self) -> bool;
    /// Drops the states of shard `shard` that expired at `now`.
    fn sweep_shard(&self, shard: usize, now: u64) -> usize;
    /// Locks shard `shard` and hands out the guard.
    fn lock(&self, shard: usize) -> Box<dyn LockedShard + '_>;
    /// Appends every state not expired at `now` (fingerprint, then the
    /// state's bytes) to `out`, one shard locked at a time; returns how many.
    fn dump(&self, now: u64, out: &mut Vec<u8>) -> u64;
    /// Reads `count` entries written by [`dump`](Self::dump) (with
    /// fingerprints of `fp_bytes` bytes, of which the first 8 count) and
    /// stages those not expired at `now` to be put back, most indebted
    /// first; `None` when the bytes are not valid entries for this table's
    /// algorithm.
    fn stage(
        &self,
        input: &mut Reader<'_>,
        count: u64,
        fp_bytes: usize,
        now: u64,
    ) -> Option<Box<dyn Staged + '_>>;
}

/// A table's saved states, read and ranked, waiting to be put back. A
/// snapshot loader puts back the most indebted state of all tables first,
/// so that when the snapshot is larger than the cap, what is left out is
/// what forgetting costs least (see the crate docs).
pub(crate) trait Staged {
    /// The [`Debt::rank`](tollgate_core::algorithm::Debt::rank) of the next
    /// state to put back (the most indebted left); `None` when none is left.
    fn next_rank(&self) -> Option<u64>;
    /// Puts back the next state, unless its key is already held; evicts as
    /// any insert does.
    fn restore_next(&mut self);
}

/// The staged states of a [`Table`], ordered by rank, the last one next.
struct StagedStates<'a, A: Keyed> {
    table: &'a Table<A>,
    now: u64,
    states: Vec<(u64, Fingerprint, A::State)>,
}

impl<A: Keyed> Staged for StagedStates<'_, A> {
    fn next_rank(&self) -> Option<u64> {
        self.states.last().map(|&(rank, _, _)| rank)
    }

    fn restore_next(&mut self) {
        if let Some((_, fp, state)) = self.states.pop() {
            let table = self.table;
            table.shard_for(fp).restore(table.cx(), fp, state, self.now);
        }
    }
}

/// A locked shard, for evaluating and committing several limits together.
pub(crate) trait LockedShard {
    /// The decision for `cost` at `now` without changing anything.
    fn evaluate(&self, fp: Fingerprint, now: u64, cost: u64) -> Result<Decision, LimitError>;
    /// Counts an admitted `cost` at `now`; the lease for concurrency.
    fn commit(&mut self, fp: Fingerprint, now: u64, cost: u64) -> Option<u64>;
    /// Records that this limit refused a request at `now` with
    /// `decision` ([`Algorithm::strike`](tollgate_core::Algorithm::strike)).
    fn strike(&mut self, fp: Fingerprint, now: u64, decision: &mut Decision);
    /// The earliest instant at or after `now` that `cost` fits.
    fn next_available(&self, fp: Fingerprint, now: u64, cost: u64) -> u64;
    /// Where a reservation made at `now` would land.
    fn slot(&self, fp: Fingerprint, now: u64, cost: u64) -> Option<Slot>;
    /// Books `cost` at `slot`.
    fn book(&mut self, fp: Fingerprint, now: u64, slot: Slot, cost: u64);
    /// The state reported without counting anything.
    fn peek(&self, fp: Fingerprint, now: u64) -> Decision;
}

/// The keyed table of one limit with algorithm `A`.
pub(crate) struct Table<A: Keyed> {
    alg: A,
    limit: Limit,
    seed: Seed,
    budget: Arc<Budget>,
    shards: Box<[CachePadded<Mutex<Shard<A>>>]>,
}

impl<A: Keyed> Table<A> {
    /// An empty table of `shards` shards (a power of two). Its shard array
    /// is charged to the budget.
    pub(crate) fn new(
        alg: A,
        limit: Limit,
        seed: Seed,
        budget: Arc<Budget>,
        shards: usize,
    ) -> Self {
        let shards: Box<[_]> = (0..shards.max(1)).map(|_| CachePadded::default()).collect();
        budget.charge(std::mem::size_of_val(&*shards));
        Table {
            alg,
            limit,
            seed,
            budget,
            shards,
        }
    }

    fn cx(&self) -> Ctx<'_, A> {
        Ctx {
            alg: &self.alg,
            budget: &self.budget,
        }
    }

    fn shard(&self, index: usize) -> MutexGuard<'_, Shard<A>> {
        // Shard counts are powers of two; masking keeps any index in range.
        self.shards[index & (self.shards.len() - 1)].lock()
    }

    fn shard_for(&self, fp: Fingerprint) -> MutexGuard<'_, Shard<A>> {
        self.shard(self.shard_of(fp))
    }
}

impl<A: Keyed> ErasedTable for Table<A> {
    fn fingerprint(&self, key: &[u8]) -> Fingerprint {
        self.seed.fingerprint(key)
    }

    fn seed(&self) -> Seed {
        self.seed
    }

    fn shard_of(&self, fp: Fingerprint) -> usize {
        fp.shard(self.shards.len() - 1)
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    fn check_key(&self, key: &[u8], now: u64, cost: u64) -> Result<Decision, LimitError> {
        // Written out here rather than calling a fingerprint-taking method:
        // one call, and the decision built in place (measured: about a
        // tenth of a hot-key check).
        self.validate_cost(cost)?;
        let fp = self.seed.fingerprint_recent(key);
        let alg = &self.alg;
        let mut shard = self.shard_for(fp);
        if cost == 0 {
            return Ok(shard.read(alg, fp, |s| alg.peek(s, now)));
        }
        Ok(shard.check(self.cx(), fp, now, cost))
    }

    fn next_available(&self, fp: Fingerprint, now: u64, cost: u64) -> Result<u64, LimitError> {
        let alg = &self.alg;
        self.shard_for(fp)
            .read(alg, fp, |s| alg.earliest(s, now, cost))
    }

    fn reserve(
        &self,
        fp: Fingerprint,
        now: u64,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<Reservation, LimitError> {
        self.validate_cost(cost)?;
        let alg = &self.alg;
        self.shard_for(fp).update(self.cx(), fp, now, |s| {
            let reservation = alg.reserve(s, now, cost, max_wait);
            let changed = cost > 0 && reservation.as_ref().is_ok_and(|r| r.decision.allowed);
            (reservation, changed)
        })
    }

    fn release(&self, fp: Fingerprint, lease: u64) -> bool {
        let alg = &self.alg;
        let mut shard = self.shard_for(fp);
        if shard.get(fp).is_none() {
            return false;
        }
        // The clock is not known here; 0 drops nothing while settling heap.
        shard.update(self.cx(), fp, 0, |s| (alg.release(s, lease), false))
    }

    fn reset(&self, fp: Fingerprint) -> bool {
        self.shard_for(fp).remove(self.cx(), fp)
    }

    fn record(&self, fp: Fingerprint, at: u64, cost: u64) -> Result<u64, LimitError> {
        let alg = &self.alg;
        let unsupported = LimitError::Option {
            option: "record",
            algorithm: self.limit.algorithm,
        };
        if cost == 0 {
            let mut probe = self.shard_for(fp).read(alg, fp, Clone::clone);
            return alg.record(&mut probe, at, 0).ok_or(unsupported);
        }
        self.shard_for(fp).update(self.cx(), fp, at, |s| {
            let usage = alg.record(s, at, cost);
            let changed = usage.is_some() && alg.expires_at(s) > 0;
            (usage.ok_or(unsupported), changed)
        })
    }

    fn settle(
        &self,
        fp: Fingerprint,
        admitted_at: u64,
        now: u64,
        estimate: u64,
        actual: u64,
    ) -> Result<Settled, LimitError> {
        let alg = &self.alg;
        let unsupported = LimitError::Option {
            option: "settle",
            algorithm: self.limit.algorithm,
        };
        // A settle is never before its admission (a caller's explicit
        // time may lag the admission's).
        let now = now.max(admitted_at);
        self.shard_for(fp).update(self.cx(), fp, now, |s| {
            let settled = alg.settle(s, admitted_at, now, estimate, actual);
            let changed = settled.is_some() && alg.expires_at(s) > 0;
            (settled.ok_or(unsupported), changed)
        })
    }

    fn validate_cost(&self, cost: u64) -> Result<(), LimitError> {
        self.alg.validate_cost(cost)
    }

    fn takes_reservations(&self) -> bool {
        self.alg.slot(&self.alg.new_state(), 0, 0).is_some()
    }

    fn sweep_shard(&self, shard: usize, now: u64) -> usize {
        self.shard(shard).sweep(self.cx(), now)
    }

    fn lock(&self, shard: usize) -> Box<dyn LockedShard + '_> {
        Box::new(Locked {
            table: self,
            shard: self.shard(shard),
        })
    }

    fn dump(&self, now: u64, out: &mut Vec<u8>) -> u64 {
        let mut count = 0;
        for index in 0..self.shards.len() {
            let shard = self.shard(index);
            for entry in shard.table.iter() {
                if self.alg.expires_at(&entry.state) > now {
                    out.extend_from_slice(&entry.fp.to_bytes());
                    self.alg.encode_state(&entry.state, out);
                    count += 1;
                }
            }
        }
        count
    }

    fn stage(
        &self,
        input: &mut Reader<'_>,
        count: u64,
        fp_bytes: usize,
        now: u64,
    ) -> Option<Box<dyn Staged + '_>> {
        // Not preallocated from `count`, which the file controls; the
        // states grow with the bytes actually read.
        let mut states = Vec::new();
        for _ in 0..count {
            let bytes = input.take(fp_bytes.max(8))?;
            let fp = Fingerprint::from_bytes(bytes.get(..8)?.try_into().ok()?);
            let state = self.alg.decode_state(input)?;
            if self.alg.expires_at(&state) > now {
                states.push((self.alg.debt(&state, now).rank(), fp, state));
            }
        }
        states.sort_unstable_by_key(|&(rank, _, _)| rank);
        Some(Box::new(StagedStates {
            table: self,
            now,
            states,
        }))
    }
}

/// A shard of a [`Table`] held locked.
struct Locked<'a, A: Keyed> {
    table: &'a Table<A>,
    shard: MutexGuard<'a, Shard<A>>,
}

impl<A: Keyed> LockedShard for Locked<'_, A> {
    fn evaluate(&self, fp: Fingerprint, now: u64, cost: u64) -> Result<Decision, LimitError> {
        let alg = &self.table.alg;
        self.shard.read(alg, fp, |s| alg.try_evaluate(s, now, cost))
    }

    fn commit(&mut self, fp: Fingerprint, now: u64, cost: u64) -> Option<u64> {
        let alg = &self.table.alg;
        self.shard.update(self.table.cx(), fp, now, |s| {
            (alg.commit(s, now, cost), true)
        })
    }

    fn strike(&mut self, fp: Fingerprint, now: u64, decision: &mut Decision) {
        // Only a ban keeps strikes: spare the others a lookup per refusal.
        if self.table.limit.ban.is_none() {
            return;
        }
        let alg = &self.table.alg;
        self.shard.update(self.table.cx(), fp, now, |s| {
            ((), alg.strike(s, now, decision))
        });
    }

    fn next_available(&self, fp: Fingerprint, now: u64, cost: u64) -> u64 {
        let alg = &self.table.alg;
        self.shard
            .read(alg, fp, |s| alg.next_available(s, now, cost))
    }

    fn slot(&self, fp: Fingerprint, now: u64, cost: u64) -> Option<Slot> {
        let alg = &self.table.alg;
        self.shard.read(alg, fp, |s| alg.slot(s, now, cost))
    }

    fn book(&mut self, fp: Fingerprint, now: u64, slot: Slot, cost: u64) {
        let alg = &self.table.alg;
        self.shard.update(self.table.cx(), fp, now, |s| {
            (alg.book(s, now, slot, cost), true)
        });
    }

    fn peek(&self, fp: Fingerprint, now: u64) -> Decision {
        let alg = &self.table.alg;
        self.shard.read(alg, fp, |s| alg.peek(s, now))
    }
}
