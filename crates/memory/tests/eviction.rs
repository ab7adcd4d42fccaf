//! What the memory cap may forget: a flood of new keys never frees a key
//! that is being refused, for any algorithm; when only refusing states are
//! left, a new key is decided without being stored (and counted); and a
//! snapshot larger than the cap keeps its refusing states first.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_core::time::NANOS_PER_MS;
use tollgate_core::{AlgorithmName, Limit};
use tollgate_memory::{Limiter, MemoryConfig, MemoryStore};

const CAP: usize = 256 << 10;
/// Flood keys come 10 µs apart: 100,000 of them within a second, well
/// inside every limit's window and a concurrency lease's lifetime.
const FLOOD_STEP: u64 = 10_000;

fn limit(algorithm: AlgorithmName, rate: &str) -> Limit {
    Limit::new(algorithm, rate.parse().unwrap())
}

fn small_store(max_bytes: usize) -> MemoryStore {
    MemoryStore::new(MemoryConfig {
        max_bytes,
        shards: 4,
    })
}

/// Checks `key` until it is refused; returns how many were admitted.
fn throttle(limiter: &Limiter, key: &[u8], now: u64) -> u64 {
    let mut admitted = 0;
    while limiter.check(key, now, 1).unwrap().allowed {
        admitted += 1;
        assert!(admitted <= 1_000, "never throttled");
    }
    admitted
}

#[test]
fn a_flood_of_new_keys_does_not_free_a_throttled_key_for_any_algorithm() {
    for algorithm in AlgorithmName::ALL {
        let store = small_store(CAP);
        let limiter = store.limiter(&limit(algorithm, "5/h")).unwrap();
        let start = 1_000 * NANOS_PER_MS;
        assert_eq!(throttle(&limiter, b"victim", start), 5, "{algorithm:?}");
        // Each flood key makes one request, after the last one: nothing
        // expires, so the cap is held by eviction alone.
        let flood = 100_000u64;
        for i in 0..flood {
            let now = start + i * FLOOD_STEP;
            assert!(limiter.check(&i.to_le_bytes(), now, 1).unwrap().allowed);
        }
        let now = start + flood * FLOOD_STEP;
        assert!(
            store.len() < flood as usize / 4,
            "{algorithm:?}: the cap was not reached"
        );
        assert!(store.memory_used() <= CAP, "{algorithm:?}");
        let victim = limiter.check(b"victim", now, 1).unwrap();
        assert!(!victim.allowed, "{algorithm:?}: the flood freed the victim");
        assert_eq!(victim.remaining, 0, "{algorithm:?}");
        assert_eq!(
            store.unstored(),
            0,
            "{algorithm:?}: flood keys can always go"
        );
    }
}

#[test]
fn with_only_refusing_states_left_a_new_key_is_decided_without_being_stored() {
    let store = small_store(64 << 10);
    let limiter = store
        .limiter(&limit(AlgorithmName::SlidingWindowLog, "1/h"))
        .unwrap();
    // One request each throttles a key of 1/h: fill until the store stops
    // growing; from then on every state it holds is refusing.
    let mut keys = 0u64;
    let mut unchanged = 0;
    while unchanged < 1_000 {
        let before = store.len();
        assert!(limiter.check(&keys.to_le_bytes(), 0, 1).unwrap().allowed);
        keys += 1;
        unchanged = if store.len() > before {
            0
        } else {
            unchanged + 1
        };
        assert!(keys < 1_000_000);
    }
    assert!(store.unstored() >= 1_000);
    let held = store.len();
    // Every key still held is still throttled, and a new key is admitted
    // (decided as fresh), counted, and not remembered.
    let mut refused = 0;
    for k in 0..keys {
        if limiter.check(&k.to_le_bytes(), 1, 1).unwrap().allowed {
            continue;
        }
        refused += 1;
    }
    assert_eq!(refused, held, "a held key was freed");
    let unstored = store.unstored();
    assert!(limiter.check(b"newcomer", 2, 1).unwrap().allowed);
    assert!(limiter.check(b"newcomer", 3, 1).unwrap().allowed);
    assert_eq!(store.unstored(), unstored + 2);
    assert_eq!(store.len(), held);
    assert!(store.memory_used() <= 64 << 10);
}

#[test]
fn a_snapshot_larger_than_the_cap_keeps_its_refusing_states() {
    let big = small_store(64 << 20);
    let limiter = big
        .limiter(&limit(AlgorithmName::FixedWindow, "5/h"))
        .unwrap();
    let keys = 40_000u64;
    // Every hundredth key is throttled, the others made one request.
    for k in 0..keys {
        if k % 100 == 0 {
            throttle(&limiter, &k.to_le_bytes(), 0);
        } else {
            limiter.check(&k.to_le_bytes(), 0, 1).unwrap();
        }
    }
    let bytes = big.snapshot(1);
    let small = MemoryStore::from_snapshot(
        MemoryConfig {
            max_bytes: CAP,
            shards: 4,
        },
        &bytes,
        1,
    )
    .unwrap();
    assert!(small.len() < keys as usize / 2, "the snapshot fit");
    assert!(small.memory_used() <= CAP);
    let restored = small
        .limiter(&limit(AlgorithmName::FixedWindow, "5/h"))
        .unwrap();
    for k in (0..keys).step_by(100) {
        let d = restored.check(&k.to_le_bytes(), 2, 1).unwrap();
        assert!(!d.allowed, "throttled key {k} was left out of the snapshot");
    }
}

#[test]
fn a_key_alone_in_its_shard_keeps_its_state_while_other_limits_hold_the_cap() {
    // The cap is spent before the limits below exist: their tables get only
    // their guaranteed minimum, and a key alone in its shard has nothing to
    // evict when its state's heap grows.
    let store = small_store(1);
    for algorithm in [AlgorithmName::SlidingWindowLog, AlgorithmName::Concurrency] {
        let limiter = store.limiter(&limit(algorithm, "12/h")).unwrap();
        assert_eq!(throttle(&limiter, b"victim", 0), 12, "{algorithm:?}");
        assert!(
            !limiter.check(b"victim", 1, 1).unwrap().allowed,
            "{algorithm:?}"
        );
    }
    // A limit that needs more heap than a shard may hold past the cap is
    // not held: the key is forgotten and starts fresh.
    let huge = store
        .limiter(&limit(AlgorithmName::SlidingWindowLog, "1000/h"))
        .unwrap();
    assert_eq!(
        (0..1_000)
            .filter(|_| huge.check(b"k", 0, 1).unwrap().allowed)
            .count(),
        1_000
    );
    assert!(store.len() <= 3);
}
