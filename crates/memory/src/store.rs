//! [`MemoryStore`]: the registry of keyed tables, the shared memory budget,
//! incremental expiry, and the entry points of multi-limit operations.
//!
//! The store owns no key state itself; each table does (see `table.rs`).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tollgate_core::{Decision, Limit, LimitError};

use crate::budget::Budget;
use crate::config::MemoryConfig;
use crate::fingerprint::Seed;
use crate::limiter::Limiter;
use crate::multi::{self, MultiReservation};
use crate::recent;
use crate::registry::Registry;

/// The in-memory keyed store: a table per distinct [`Limit`], all sharing one
/// memory cap. Cheap to clone (an `Arc` inside); `Send + Sync`.
///
/// ```
/// use tollgate_core::{AlgorithmName, Limit, Rate};
/// use tollgate_memory::{MemoryConfig, MemoryStore};
///
/// let store = MemoryStore::new(MemoryConfig { max_bytes: 1 << 20, shards: 4 });
/// let per_second = store.limiter(&Limit::new(AlgorithmName::FixedWindow, Rate::per_second(1).unwrap())).unwrap();
/// let per_minute = store.limiter(&Limit::new(AlgorithmName::FixedWindow, Rate::per_minute(2).unwrap())).unwrap();
/// let both = [(&per_second, &b"alice"[..]), (&per_minute, &b"alice"[..])];
/// assert!(store.check_all(&both, 0, 1).unwrap().iter().all(|d| d.allowed));
/// // The per-second limit rejects, so the per-minute one counts nothing.
/// let second = store.check_all(&both, 0, 1).unwrap();
/// assert!(!second[0].allowed && second[1].allowed);
/// assert_eq!(second[1].remaining, 0);
/// assert_eq!(per_minute.check(b"alice", 0, 0).unwrap().remaining, 1);
/// assert!(store.memory_used() <= 1 << 20);
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// Names this store in each thread's cache of recent limiters.
    id: u64,
    config: MemoryConfig,
    seed: Seed,
    budget: Arc<Budget>,
    registry: RwLock<Registry>,
    /// The next shard to sweep, counted over all tables' shards.
    cursor: AtomicUsize,
}

impl MemoryStore {
    /// An empty store with a random fingerprint seed.
    pub fn new(config: MemoryConfig) -> MemoryStore {
        MemoryStore::with_seed(config, Seed::random())
    }

    /// An empty store hashing keys under `seed` (e.g. the one a snapshot was
    /// taken with).
    pub fn with_seed(config: MemoryConfig, seed: Seed) -> MemoryStore {
        let config = config.normalised();
        MemoryStore {
            inner: Arc::new(Inner {
                id: recent::next_store_id(),
                config,
                seed,
                budget: Arc::new(Budget::new(config.max_bytes)),
                registry: RwLock::default(),
                cursor: AtomicUsize::new(0),
            }),
        }
    }

    /// The configuration in force (shards normalised).
    pub fn config(&self) -> MemoryConfig {
        self.inner.config
    }

    /// The fingerprint seed; keep it secret.
    pub fn seed(&self) -> Seed {
        self.inner.seed
    }

    /// A handle to the keyed table for `limit`, created on first use.
    /// Identical `Limit` values share one table.
    ///
    /// Errors when the limit's options are invalid.
    pub fn limiter(&self, limit: &Limit) -> Result<Limiter, LimitError> {
        // Servers ask for the same few limits on every request: this
        // thread's recent ones are found without the lock and the hash.
        if let Some(limiter) = recent::find(self.inner.id, limit) {
            return Ok(limiter);
        }
        let limiter = self.registered(limit)?;
        recent::keep(self.inner.id, &limiter);
        Ok(limiter)
    }

    /// The registry's limiter for `limit`, made on first use.
    fn registered(&self, limit: &Limit) -> Result<Limiter, LimitError> {
        if let Some(limiter) = self.inner.registry.read().get(limit) {
            return Ok(limiter.clone());
        }
        let algorithm = limit.build()?;
        let mut registry = self.inner.registry.write();
        if let Some(limiter) = registry.get(limit) {
            return Ok(limiter.clone());
        }
        let limiter = Limiter::new(
            *limit,
            algorithm,
            self.inner.seed,
            Arc::clone(&self.inner.budget),
            self.inner.config.shards,
        );
        registry.insert(limiter.clone());
        Ok(limiter)
    }

    /// Every limiter registered so far.
    pub(crate) fn limiters(&self) -> Vec<Limiter> {
        self.inner.registry.read().limiters()
    }

    /// Bytes currently accounted against `max_bytes`: every table's shard
    /// array and hash tables, plus the heap owned by states.
    pub fn memory_used(&self) -> usize {
        self.inner.budget.used()
    }

    /// How many new keys' states were not stored so far because the cap was
    /// reached and every state their shard could have evicted was refusing
    /// requests: those keys were decided as fresh and are not remembered
    /// (see the crate docs).
    pub fn unstored(&self) -> u64 {
        self.inner.budget.unstored()
    }

    /// Keys held across all tables. Locks each shard in turn.
    pub fn len(&self) -> usize {
        let tables = self.inner.registry.read().tables().to_vec();
        tables.iter().map(|t| t.len()).sum()
    }

    /// Whether no table holds any key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets `key` under every limit (an administrative reset); returns
    /// how many limits held it.
    pub fn reset(&self, key: &[u8]) -> usize {
        let tables = self.inner.registry.read().tables().to_vec();
        tables
            .iter()
            .filter(|t| t.reset(t.fingerprint(key)))
            .count()
    }

    /// Incremental expiry: drops the states expired at `now` from the next
    /// `shards` shards, round robin over all tables' shards (each at most
    /// once per call), never locking more than one shard at a time. A shard
    /// left under a quarter full is shrunk. Returns how many states were
    /// dropped.
    pub fn sweep(&self, now: u64, shards: usize) -> usize {
        let tables = self.inner.registry.read().tables().to_vec();
        let per_table = self.inner.config.shards;
        let total = tables.len().saturating_mul(per_table);
        let mut dropped = 0;
        for _ in 0..shards.min(total) {
            let next = self.inner.cursor.fetch_add(1, Ordering::Relaxed) % total;
            if let Some(table) = tables.get(next / per_table) {
                dropped += table.sweep_shard(next % per_table, now);
            }
        }
        dropped
    }

    /// Several limits in one all-or-nothing check: admitted only if every
    /// limit admits `cost` at `now`; then counted in all; a rejection counts
    /// nothing anywhere. Returns one decision per request, in order. When
    /// rejected, each limit's decision is its own verdict for this cost
    /// (`allowed` = whether it alone would admit), with its state unchanged.
    ///
    /// The same key of the same limit twice is evaluated once, with the
    /// summed cost, and that decision is reported for both. Errors (before
    /// anything is counted) when a cost can never be admitted.
    pub fn check_all(
        &self,
        requests: &[(&Limiter, &[u8])],
        now: u64,
        cost: u64,
    ) -> Result<Vec<Decision>, LimitError> {
        multi::check_all(requests, now, cost)
    }

    /// Several limits in one all-or-nothing reservation: finds the earliest
    /// instant `T ≥ now` at which every limit admits `cost`, and books it in
    /// all of them as of `T` (when the call will be made), unless the wait
    /// exceeds `max_wait`; then nothing is booked anywhere and `retry_after`
    /// says how much later it would fit. The wait is `T - now`, plus any
    /// shaping delay a `leaky_bucket` queue adds. Cost 0 is a peek: no wait,
    /// nothing booked.
    ///
    /// Errors with [`LimitError::ReservationUnsupported`] when a request is
    /// against a `concurrency` limit.
    pub fn reserve_all(
        &self,
        requests: &[(&Limiter, &[u8])],
        now: u64,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<MultiReservation, LimitError> {
        multi::reserve_all(requests, now, cost, max_wait)
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("config", &self.inner.config)
            .field("memory_used", &self.memory_used())
            .finish_non_exhaustive()
    }
}
