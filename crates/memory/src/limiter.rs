//! [`Limiter`]: a cheap handle to one limit's keyed table, and the single-key
//! operations on it.
//!
//! A limiter owns no state of its own; two limiters for the same `Limit` from
//! one store share a table. Missing keys behave as the algorithm's fresh
//! state, and an operation that changes nothing (a peek, a rejection,
//! `next_available`) never inserts a key.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tollgate_core::algorithm::Settled;
use tollgate_core::ban::Banned;
use tollgate_core::{AnyAlgorithm, Decision, Limit, LimitError, Reservation};

use crate::budget::Budget;
use crate::fingerprint::Seed;
use crate::keyed::Keyed;
use crate::table::{ErasedTable, Table};

/// A handle to the keyed table of one [`Limit`] in a
/// [`MemoryStore`](crate::MemoryStore). Cheap to clone.
///
/// Times are nanoseconds since the Unix epoch, passed in by the caller.
///
/// ```
/// use tollgate_core::{AlgorithmName, Limit, Rate};
/// use tollgate_memory::{MemoryConfig, MemoryStore};
///
/// let store = MemoryStore::new(MemoryConfig::default());
/// let limit = Limit::new(AlgorithmName::Gcra, Rate::per_second(2).unwrap());
/// let limiter = store.limiter(&limit).unwrap();
/// assert!(limiter.check(b"alice", 0, 1).unwrap().allowed);
/// assert!(limiter.check(b"alice", 0, 1).unwrap().allowed);
/// let third = limiter.check(b"alice", 0, 1).unwrap();
/// assert!(!third.allowed);
/// assert_eq!(third.retry_after.as_millis(), 500);
/// assert!(limiter.check(b"bob", 0, 1).unwrap().allowed);
/// ```
#[derive(Clone)]
pub struct Limiter {
    limit: Limit,
    table: Arc<dyn ErasedTable>,
}

impl Limiter {
    /// A limiter over a new, empty table for `limit`.
    pub(crate) fn new(
        limit: Limit,
        algorithm: AnyAlgorithm,
        seed: Seed,
        budget: Arc<Budget>,
        shards: usize,
    ) -> Limiter {
        // A limit with a ban is its algorithm with the ban around it, one
        // state per key holding both.
        fn table<A: Keyed>(
            alg: A,
            limit: Limit,
            seed: Seed,
            budget: Arc<Budget>,
            shards: usize,
        ) -> Arc<dyn ErasedTable> {
            match limit.ban {
                Some(ban) => Arc::new(Table::new(
                    Banned::new(alg, ban),
                    limit,
                    seed,
                    budget,
                    shards,
                )),
                None => Arc::new(Table::new(alg, limit, seed, budget, shards)),
            }
        }
        let table = match algorithm {
            AnyAlgorithm::TokenBucket(a) => table(a, limit, seed, budget, shards),
            AnyAlgorithm::WideTokenBucket(a) => table(a, limit, seed, budget, shards),
            AnyAlgorithm::Gcra(a) => table(a, limit, seed, budget, shards),
            AnyAlgorithm::LeakyBucket(a) => table(a, limit, seed, budget, shards),
            AnyAlgorithm::FixedWindow(a) => table(a, limit, seed, budget, shards),
            AnyAlgorithm::SlidingWindowLog(a) => table(a, limit, seed, budget, shards),
            AnyAlgorithm::SlidingWindowCounter(a) => table(a, limit, seed, budget, shards),
            AnyAlgorithm::SteppedWindow(a) => table(a, limit, seed, budget, shards),
            AnyAlgorithm::Concurrency(a) => table(a, limit, seed, budget, shards),
        };
        Limiter { limit, table }
    }

    /// The limiter of `limit` over `table` (a table of that limit).
    pub(crate) fn from_parts(limit: Limit, table: Arc<dyn ErasedTable>) -> Limiter {
        Limiter { limit, table }
    }

    /// The limit this limiter enforces.
    pub fn limit(&self) -> &Limit {
        &self.limit
    }

    /// Checks a request of `cost` for `key` at `now` and counts it when
    /// admitted. `cost` 0 is a peek: always allowed, nothing counted.
    ///
    /// Errors when `cost` exceeds what the limit can ever admit.
    pub fn check(&self, key: &[u8], now: u64, cost: u64) -> Result<Decision, LimitError> {
        self.table.check_key(key, now, cost)
    }

    /// The earliest instant at or after `now` at which `cost` would be
    /// admitted for `key` if nothing else happened.
    pub fn next_available(&self, key: &[u8], now: u64, cost: u64) -> Result<u64, LimitError> {
        self.table
            .next_available(self.table.fingerprint(key), now, cost)
    }

    /// Books the earliest slot for `cost`, unless the caller would have to
    /// wait longer than `max_wait` (no bound when `None`); then nothing is
    /// booked and `decision.allowed` is `false`.
    ///
    /// Errors for `concurrency` limits ([`LimitError::ReservationUnsupported`])
    /// and for a cost that can never be admitted.
    pub fn reserve(
        &self,
        key: &[u8],
        now: u64,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<Reservation, LimitError> {
        self.table
            .reserve(self.table.fingerprint(key), now, cost, max_wait)
    }

    /// Ends a `concurrency` lease; `true` when `key` held it.
    pub fn release(&self, key: &[u8], lease: u64) -> bool {
        self.table.release(self.table.fingerprint(key), lease)
    }

    /// Forgets `key` (an administrative reset); `true` when it was held.
    pub fn reset(&self, key: &[u8]) -> bool {
        self.table.reset(self.table.fingerprint(key))
    }

    /// Counts `cost` at `at` even when over the limit (a call already
    /// made, Databox `/increment`, or usage merged from elsewhere) and
    /// returns the usage the key holds now, as
    /// [`Algorithm::record`](tollgate_core::Algorithm::record) defines it:
    /// the count in the window for the windows, the whole tokens missing
    /// from a full bucket for `token_bucket`, `gcra` and `leaky_bucket`
    /// (above the burst while in debt). Cost 0 reports without counting.
    ///
    /// Errors with [`LimitError::Option`] (option `record`) for
    /// `concurrency`, whose leases cannot be merged.
    pub fn record(&self, key: &[u8], at: u64, cost: u64) -> Result<u64, LimitError> {
        self.table.record(self.table.fingerprint(key), at, cost)
    }

    /// Settles a request admitted at `admitted_at` with cost `estimate`
    /// whose actual cost is `actual`, at `now`, as
    /// [`Algorithm::settle`](tollgate_core::Algorithm::settle) defines it:
    /// the difference is charged (possibly into debt) or refunded.
    ///
    /// Errors with [`LimitError::Option`] (option `settle`) for
    /// `concurrency`, which does not settle.
    pub fn settle(
        &self,
        key: &[u8],
        admitted_at: u64,
        now: u64,
        estimate: u64,
        actual: u64,
    ) -> Result<Settled, LimitError> {
        self.table.settle(
            self.table.fingerprint(key),
            admitted_at,
            now,
            estimate,
            actual,
        )
    }

    /// The table behind this limiter.
    pub(crate) fn table(&self) -> &dyn ErasedTable {
        &*self.table
    }

    /// The shared table, for the store's registry.
    pub(crate) fn shared_table(&self) -> Arc<dyn ErasedTable> {
        Arc::clone(&self.table)
    }

    /// The table's address: a global order for locking several tables.
    pub(crate) fn table_id(&self) -> usize {
        Arc::as_ptr(&self.table).cast::<()>().addr()
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}
