//! The in-memory keyed store for tollgate: sharded, bounded, evicting.
//!
//! A [`MemoryStore`] keeps one keyed table per distinct
//! [`Limit`](tollgate_core::Limit); a [`Limiter`] is a cheap handle to one of
//! them. The algorithms themselves live in `tollgate-core`; this crate holds
//! their per-key state, under locks, within a memory cap. Callers pass `now`
//! (nanoseconds since the Unix epoch) into every operation.
//!
//! ```
//! use tollgate_core::{AlgorithmName, Limit, Rate};
//! use tollgate_memory::{MemoryConfig, MemoryStore};
//!
//! let store = MemoryStore::new(MemoryConfig::default());
//! let limit = Limit::new(AlgorithmName::TokenBucket, "10/s".parse().unwrap());
//! let limiter = store.limiter(&limit).unwrap();
//! let decision = limiter.check(b"203.0.113.7", 1_000_000_000, 1).unwrap();
//! assert!(decision.allowed);
//! assert_eq!(decision.remaining, 9);
//! assert_eq!(store.len(), 1);
//! ```
//!
//! # How keys are stored
//!
//! A key is hashed once to a 64-bit fingerprint (SipHash-1-3 under a random
//! per-store [`Seed`]; each thread remembers the last short key it hashed, so
//! a hot key is not hashed again on every check); tables store the
//! fingerprint and the algorithm's state, nothing else — 24 bytes per entry
//! for `gcra`, `fixed_window` and `token_bucket` (32 for the rare token
//! bucket whose capacity needs a 128-bit count), plus one control byte per
//! bucket. Two keys of one limit share a state only when their fingerprints
//! collide, about `n² / 2^65` for `n` keys (see `fingerprint.rs`). Entries of
//! 32 and 64 bytes are aligned to their size, so that none straddles two
//! cache lines (`keyed.rs` says which). A table is split
//! into shards (each a mutex around a hashbrown table, padded to a cache
//! line); the fingerprint picks the shard. A missing key behaves as the
//! algorithm's fresh state, and an operation that changes nothing (a peek, a
//! rejection, `next_available`) inserts nothing.
//!
//! # The memory cap and what is evicted
//!
//! Every table's shard array and hash-table allocations, and the heap owned
//! by states (a sliding log's timestamps, a concurrency limit's leases), are
//! accounted against [`MemoryConfig::max_bytes`]; the registry of limits
//! itself is small and not counted. A shard reserves its next allocation
//! from the budget before its table grows. When the budget is full, the
//! shard first drops its expired states; if none had expired, it **evicts
//! the eighth of its states that owe least**: each state's
//! [`Debt`](tollgate_core::algorithm::Debt) at that instant (how many
//! unit-cost requests a fresh state would admit that it would refuse, and
//! whether it is refusing), so a state as good as fresh goes first and a
//! state that is refusing requests goes **never while any state that is
//! not refusing can go**: forgetting a throttled key would let it through,
//! and a flood of new keys would turn the cap into a way to reset one's own
//! limit. When every state of the shard is refusing, the new key is decided
//! as usual (as a fresh state) but **not stored**, and
//! [`MemoryStore::unstored`] counts it: under such a flood, new keys are
//! not remembered until states expire, while every throttled key stays
//! throttled. An evicted key starts fresh. When a state's own heap outgrows
//! what is left, other keys of its shard are evicted the same way (refusing
//! ones too, least indebted first, only when that state is refusing
//! itself); if none can go, the growth is charged past the cap while the
//! shard's states hold at most 1 KiB of heap (as a shard may always grow to
//! 16 buckets, below), and beyond that the key is forgotten itself: a limit
//! that needs more memory than the cap gives cannot be held. Eviction works
//! within the shard whose table is full: keys are spread over shards by a
//! secret hash, so a client cannot aim a flood at one shard.
//!
//! Every shard may always grow to 16 buckets (14 keys), so a new limit works
//! even under a full budget, and its states may always hold 1 KiB of heap;
//! [`MemoryStore::memory_used`] may exceed the cap by at most that much per
//! shard. While a table grows, the old and the new
//! allocation briefly coexist, and eviction ranks a shard's states in a
//! scratch buffer, so the real peak can pass the cap by about one shard's
//! table.
//!
//! Expired states are otherwise dropped by [`MemoryStore::sweep`], which
//! walks a few shards per call (round robin, one lock at a time) and shrinks
//! a table that it left under a quarter full.
//!
//! # Several limits at once
//!
//! [`MemoryStore::check_all`] and [`MemoryStore::reserve_all`] are
//! all-or-nothing: they lock every shard involved in one global order (table
//! address, then shard index), evaluate every limit, and count only when all
//! admit.
//!
//! # Layout
//!
//! - `config`: [`MemoryConfig`].
//! - `fingerprint`: [`Seed`] and the 128-bit key fingerprint.
//! - `budget`: the shared atomic byte budget.
//! - `footprint`: what a hash table of a given size allocates.
//! - `keyed`: what the store needs to know about each algorithm.
//! - `shard`: one shard's table, lookups, inserts and accounting.
//! - `evict`: expiry, eviction by debt and shrinking within a shard.
//! - `table`: a limit's sharded table behind an object-safe trait.
//! - `limiter`: [`Limiter`], single-key operations.
//! - `registry`: limits to tables.
//! - `recent`: each thread's last few limiters, found without the registry.
//! - `multi`: `check_all` and `reserve_all`.
//! - `store`: [`MemoryStore`].
//! - `snapshot`: the store as bytes and back ([`MemoryStore::snapshot`]).
//! - `local`: [`LocalStore`], the memory store and a clock behind the core's
//!   `Store` trait.

mod budget;
mod config;
mod evict;
mod fingerprint;
mod footprint;
mod keyed;
mod limiter;
mod local;
mod multi;
mod recent;
mod registry;
mod shard;
mod snapshot;
mod store;
mod table;

pub use config::{
    MemoryConfig, DEFAULT_MAX_BYTES, MAX_DEFAULT_SHARDS, MAX_SHARDS, MIN_DEFAULT_SHARDS,
};
pub use fingerprint::Seed;
pub use limiter::Limiter;
pub use local::LocalStore;
pub use multi::MultiReservation;
pub use snapshot::SnapshotError;
pub use store::MemoryStore;
