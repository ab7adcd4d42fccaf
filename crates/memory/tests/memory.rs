//! The memory cap, measured two ways: the store's own accounting
//! (`memory_used`) and the real heap, through a counting global allocator.
//!
//! The tests in this binary run one at a time (they share the allocator's
//! count), and allocate nothing of their own while measuring.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;

use cap::Cap;
use std::sync::{Mutex, MutexGuard};
use tollgate_core::time::{NANOS_PER_MS, NANOS_PER_SEC};
use tollgate_core::{AlgorithmName, Limit};
use tollgate_memory::{MemoryConfig, MemoryStore};

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// Serialises the tests of this binary. A std mutex: parking_lot allocates
/// its parking table the first time a thread waits, which would show up in
/// the measurements.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Real allocation allowed beyond `max_bytes`: the registry (a hash map and
/// `Vec` of a few entries, the `Arc`s of store and tables) and the test
/// harness's own bookkeeping. It does not grow with the number of keys.
const TOLERANCE: usize = 64 << 10;

fn limit(algorithm: AlgorithmName, rate: &str) -> Limit {
    Limit::new(algorithm, rate.parse().unwrap())
}

/// Bytes allocated since `base`.
fn allocated_since(base: usize) -> usize {
    ALLOCATOR.allocated().saturating_sub(base)
}

#[test]
fn a_flood_of_ten_million_keys_stays_under_the_cap() {
    let _serial = serial();
    const MAX: usize = 32 << 20;
    let base = ALLOCATOR.allocated();
    let store = MemoryStore::new(MemoryConfig {
        max_bytes: MAX,
        shards: 16,
    });
    // Keys live for an hour: nothing expires during the flood, so the cap is
    // held by eviction alone.
    let limiter = store.limiter(&limit(AlgorithmName::Gcra, "10/h")).unwrap();
    let mut most = 0;
    for i in 0..10_000_000u64 {
        let decision = limiter.check(&i.to_le_bytes(), i * 1_000, 1).unwrap();
        assert!(decision.allowed);
        if i % 100_003 == 0 {
            let (real, accounted) = (allocated_since(base), store.memory_used());
            assert!(accounted <= MAX, "accounted {accounted} after {i} keys");
            assert!(real <= MAX + TOLERANCE, "allocated {real} after {i} keys");
            most = most.max(real);
        }
    }
    assert!(store.memory_used() <= MAX);
    assert!(allocated_since(base) <= MAX + TOLERANCE);
    // The cap is used, not wasted: more than half a million keys are held.
    let keys = store.len();
    assert!(keys > 500_000, "only {keys} keys held");
    // The most recent keys are still limited: they were not evicted.
    let last = limiter
        .check(&9_999_999u64.to_le_bytes(), 10_000 * NANOS_PER_MS, 0)
        .unwrap();
    assert_eq!(last.remaining, 9);
    println!(
        "flood: {keys} keys held in {} bytes accounted; {most} bytes allocated at most (sampled), peak {}",
        store.memory_used(),
        ALLOCATOR.max_allocated().saturating_sub(base)
    );
}

#[test]
fn a_full_store_drops_expired_keys_before_evicting_any() {
    let _serial = serial();
    let store = MemoryStore::new(MemoryConfig {
        max_bytes: 64 << 10,
        shards: 1,
    });
    // 10/s with burst 10: a cost-1 request expires after 100 ms, a cost-10
    // request after 1 s.
    let limiter = store.limiter(&limit(AlgorithmName::Gcra, "10/s")).unwrap();
    let mut short = 0u64;
    let mut long = 0u64;
    // Fill until the store stops growing, alternating long and short keys.
    while store.len() == (short + long) as usize {
        if (short + long).is_multiple_of(2) {
            limiter
                .check(format!("long{long}").as_bytes(), 0, 10)
                .unwrap();
            long += 1;
        } else {
            limiter
                .check(format!("short{short}").as_bytes(), 0, 1)
                .unwrap();
            short += 1;
        }
    }
    // The last insert found the budget full with nothing expired: it evicted
    // the eighth expiring first, all of them short keys.
    let held = store.len() as u64;
    assert!(
        held < short + long && held > (short + long) * 3 / 4,
        "{held} of {}",
        short + long
    );
    for i in 0..long - 1 {
        let peek = limiter.check(format!("long{i}").as_bytes(), 0, 0).unwrap();
        assert_eq!(peek.remaining, 0, "long key {i} was evicted");
    }
    // Half a second later the short keys have expired. New keys fill the
    // room eviction made; the first insert that finds the budget full again
    // drops every expired key at once, and no long key is touched.
    let half = NANOS_PER_SEC / 2;
    let mut added = 0u64;
    let mut last = store.len();
    loop {
        limiter
            .check(format!("new{added}").as_bytes(), half, 1)
            .unwrap();
        added += 1;
        let len = store.len();
        if len <= last {
            break;
        }
        last = len;
        assert!(added < 100_000);
    }
    assert_eq!(store.len() as u64, long + added, "short keys survived");
    for i in 0..long {
        let peek = limiter
            .check(format!("long{i}").as_bytes(), half, 0)
            .unwrap();
        assert_eq!(peek.remaining, 5, "long key {i} was dropped");
    }
    assert!(store.memory_used() <= 64 << 10);
}

#[test]
fn sweep_drops_expired_keys_keeps_the_rest_and_gives_memory_back() {
    let _serial = serial();
    let store = MemoryStore::new(MemoryConfig {
        max_bytes: 64 << 20,
        shards: 8,
    });
    let minute = store
        .limiter(&limit(AlgorithmName::FixedWindow, "5/min"))
        .unwrap();
    let second = store
        .limiter(&limit(AlgorithmName::TokenBucket, "5/s"))
        .unwrap();
    for i in 0..20_000u32 {
        minute.check(&i.to_le_bytes(), 0, 2).unwrap();
        second.check(&i.to_le_bytes(), 0, 5).unwrap();
    }
    let full = store.memory_used();
    assert_eq!(store.len(), 40_000);
    // After 1 s every token bucket is full again; the windows run for a minute.
    let mut dropped = 0;
    for _ in 0..2 {
        dropped += store.sweep(NANOS_PER_SEC, 8);
    }
    assert_eq!(dropped, 20_000);
    assert_eq!(store.len(), 20_000);
    assert!(
        store.memory_used() < full * 3 / 4,
        "{} of {full}",
        store.memory_used()
    );
    for i in 0..20_000u32 {
        assert_eq!(
            minute
                .check(&i.to_le_bytes(), NANOS_PER_SEC, 0)
                .unwrap()
                .remaining,
            3
        );
    }
    // Sweeping more shards than there are visits each once.
    assert_eq!(store.sweep(60 * NANOS_PER_SEC, 1_000), 20_000);
    assert!(store.is_empty());
}

#[test]
fn a_sliding_log_key_with_a_huge_limit_cannot_pass_the_cap() {
    let _serial = serial();
    const MAX: usize = 1 << 20;
    let base = ALLOCATOR.allocated();
    let store = MemoryStore::new(MemoryConfig {
        max_bytes: MAX,
        shards: 4,
    });
    let log = store
        .limiter(&limit(AlgorithmName::SlidingWindowLog, "1000000/h"))
        .unwrap();
    let mut admitted = 0u64;
    for i in 0..200_000u64 {
        // Ordinary keys around the hot one compete for the same budget.
        log.check(&i.to_le_bytes(), i * 1_000, 1).unwrap();
        admitted += u64::from(log.check(b"hot", i * 1_000, 1).unwrap().allowed);
        if i % 1_001 == 0 {
            assert!(
                store.memory_used() <= MAX,
                "accounted {} at {i}",
                store.memory_used()
            );
            assert!(allocated_since(base) <= MAX + TOLERANCE, "allocated at {i}");
        }
    }
    assert_eq!(admitted, 200_000, "a forgotten log starts fresh and admits");
    assert!(store.memory_used() <= MAX);
    assert!(
        allocated_since(base) <= MAX + TOLERANCE,
        "{}",
        allocated_since(base)
    );
}

/// Bytes per key of the three fixed-size states at several key counts, as
/// the counting allocator sees them. Run with
/// `cargo test -p tollgate-memory --test memory -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement for docs, not a check; takes a few seconds"]
fn report_bytes_per_key() {
    let _serial = serial();
    for algorithm in [
        AlgorithmName::Gcra,
        AlgorithmName::TokenBucket,
        AlgorithmName::FixedWindow,
    ] {
        for keys in [100_000u64, 1_000_000, 3_000_000] {
            let base = ALLOCATOR.allocated();
            let store = MemoryStore::new(MemoryConfig {
                max_bytes: usize::MAX,
                shards: 16,
            });
            let limiter = store.limiter(&limit(algorithm, "10/s")).unwrap();
            for i in 0..keys {
                limiter.check(&i.to_le_bytes(), 0, 1).unwrap();
            }
            let real = allocated_since(base);
            println!(
                "{algorithm:>12} {keys:>9} keys: {:.1} bytes/key allocated ({} bytes; {} accounted)",
                real as f64 / keys as f64,
                real,
                store.memory_used()
            );
        }
    }
}
