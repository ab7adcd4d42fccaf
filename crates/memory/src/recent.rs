//! The limiters each thread used last, so that finding a limit's table on
//! every check costs neither the registry's read lock nor a hash of the
//! whole [`Limit`].
//!
//! A server checks the same few limits over and over (a rules file's, a
//! client's inline ones): each thread keeps its last [`KEPT`] in a small
//! array, found by the store's id and the limit itself, and asks the
//! registry only on a miss. Entries never go stale: a store never forgets
//! a limit's table, and store ids are never reused. They hold their tables
//! weakly, so a store that is dropped (replaced by a snapshot, say) frees
//! its keys' memory whatever threads remember of it.
//!
//! This module owns the cache, not the tables: the registry (`registry`)
//! stays the one place limiters are made.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use tollgate_core::Limit;

use crate::limiter::Limiter;
use crate::table::ErasedTable;

/// Limiters kept per thread: more than a rules file with several limits per
/// request uses at once, and few enough to scan.
const KEPT: usize = 8;

/// A store's identity for the cache: never reused in a process, unlike its
/// address.
pub(crate) fn next_store_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One remembered limiter.
struct Entry {
    store: u64,
    limit: Limit,
    table: Weak<dyn ErasedTable>,
}

/// The thread's remembered limiters, replaced in turn once full.
#[derive(Default)]
struct Recent {
    entries: Vec<Entry>,
    next: usize,
}

thread_local! {
    static RECENT: RefCell<Recent> = RefCell::default();
}

/// The limiter of `limit` in store `store` that this thread remembers.
pub(crate) fn find(store: u64, limit: &Limit) -> Option<Limiter> {
    RECENT.with(|recent| {
        let recent = recent.try_borrow().ok()?;
        let entry = recent
            .entries
            .iter()
            .find(|e| e.store == store && e.limit == *limit)?;
        Some(Limiter::from_parts(*limit, entry.table.upgrade()?))
    })
}

/// Remembers `limiter` as store `store`'s limiter of its limit.
pub(crate) fn keep(store: u64, limiter: &Limiter) {
    RECENT.with(|recent| {
        let Ok(mut recent) = recent.try_borrow_mut() else {
            return;
        };
        let entry = Entry {
            store,
            limit: *limiter.limit(),
            table: Arc::downgrade(&limiter.shared_table()),
        };
        if recent.entries.len() < KEPT {
            recent.entries.push(entry);
        } else {
            let next = recent.next;
            recent.entries[next] = entry;
            recent.next = (next + 1) % KEPT;
        }
    });
}

#[cfg(test)]
mod tests {
    use tollgate_core::{AlgorithmName, Rate};

    use crate::{MemoryConfig, MemoryStore};

    use super::*;

    fn limit(n: u64) -> Limit {
        Limit::new(AlgorithmName::FixedWindow, Rate::per_second(n).unwrap())
    }

    #[test]
    fn a_remembered_limiter_shares_the_registrys_table() {
        let store = MemoryStore::new(MemoryConfig::default());
        let first = store.limiter(&limit(1)).unwrap();
        assert!(first.check(b"k", 0, 1).unwrap().allowed);
        // Found in this thread's cache now: the same table, so the same count.
        let again = store.limiter(&limit(1)).unwrap();
        assert_eq!(first.table_id(), again.table_id());
        assert!(!again.check(b"k", 0, 1).unwrap().allowed);
    }

    #[test]
    fn stores_never_see_each_others_limiters() {
        let one = MemoryStore::new(MemoryConfig::default());
        let other = MemoryStore::new(MemoryConfig::default());
        assert!(
            one.limiter(&limit(1))
                .unwrap()
                .check(b"k", 0, 1)
                .unwrap()
                .allowed
        );
        let theirs = other.limiter(&limit(1)).unwrap();
        assert!(theirs.check(b"k", 0, 1).unwrap().allowed);
        assert_ne!(
            one.limiter(&limit(1)).unwrap().table_id(),
            theirs.table_id()
        );
    }

    #[test]
    fn more_limits_than_kept_are_all_found_with_their_counts() {
        let store = MemoryStore::new(MemoryConfig::default());
        let limits: Vec<Limit> = (1..=3 * KEPT as u64).map(limit).collect();
        for round in 0..3 {
            for l in &limits {
                let decision = store.limiter(l).unwrap().check(b"k", 0, 1).unwrap();
                assert_eq!(decision.remaining, l.rate.limit().saturating_sub(round + 1));
            }
        }
    }

    #[test]
    fn a_dropped_stores_tables_are_not_kept_alive() {
        let store = MemoryStore::new(MemoryConfig::default());
        let table = Arc::downgrade(&store.limiter(&limit(1)).unwrap().shared_table());
        drop(store);
        assert!(table.upgrade().is_none());
    }
}
