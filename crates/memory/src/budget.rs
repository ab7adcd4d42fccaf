//! The store-wide memory [`Budget`]: one atomic byte count shared by every
//! table, against the configured cap.
//!
//! Shards reserve bytes before they allocate (table growth) and charge bytes
//! after a state's heap changed; the budget itself never evicts anything —
//! the shard that could not reserve decides what to drop. It also counts
//! the new states a shard could not store (see `shard.rs`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bytes accounted against a cap.
#[derive(Debug)]
pub(crate) struct Budget {
    used: AtomicUsize,
    max: usize,
    /// New states not stored because the budget was full and every state
    /// their shard could have evicted was refusing.
    unstored: AtomicU64,
}

impl Budget {
    /// An empty budget of `max` bytes.
    pub(crate) fn new(max: usize) -> Budget {
        Budget {
            used: AtomicUsize::new(0),
            max,
            unstored: AtomicU64::new(0),
        }
    }

    /// Bytes accounted now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Counts a new state that was not stored (see the field).
    pub(crate) fn count_unstored(&self) {
        self.unstored.fetch_add(1, Ordering::Relaxed);
    }

    /// New states not stored so far because only refusing states could
    /// have made room.
    pub(crate) fn unstored(&self) -> u64 {
        self.unstored.load(Ordering::Relaxed)
    }

    /// Accounts `bytes` if they fit under the cap; `false` (and nothing
    /// accounted) otherwise.
    pub(crate) fn try_reserve(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.max)
            })
            .is_ok()
    }

    /// Accounts `bytes` whether or not they fit (memory already allocated, or
    /// a shard's guaranteed minimum).
    pub(crate) fn charge(&self, bytes: usize) {
        self.update(|used| used.saturating_add(bytes));
    }

    /// Gives back `bytes`.
    pub(crate) fn release(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.update(|used| used.saturating_sub(bytes));
    }

    fn update(&self, f: impl Fn(usize) -> usize) {
        // The closure always returns Some, so this cannot fail.
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| Some(f(used)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stop_at_the_cap_and_charges_do_not() {
        let budget = Budget::new(100);
        assert!(budget.try_reserve(60));
        assert!(!budget.try_reserve(41));
        assert_eq!(budget.used(), 60);
        assert!(budget.try_reserve(40));
        budget.charge(5);
        assert_eq!(budget.used(), 105);
        budget.release(50);
        assert_eq!(budget.used(), 55);
        budget.release(usize::MAX);
        assert_eq!(budget.used(), 0);
        assert!(!budget.try_reserve(usize::MAX));
    }

    #[test]
    fn concurrent_reservations_never_exceed_the_cap() {
        let budget = Budget::new(1000);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        let _ = budget.try_reserve(3);
                    }
                });
            }
        });
        assert_eq!(budget.used(), 999);
    }
}
