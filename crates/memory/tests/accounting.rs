//! The store's accounting against the real heap, through a counting global
//! allocator: outside the registry, the two must agree to the byte — while
//! tables grow, while eviction holds them at the cap, after sweeps shrink
//! them, and for states that own heap memory.
//!
//! Alone in its binary, and without libtest's harness (`harness = false`:
//! `main` runs it on the only thread), so that nothing else allocates while
//! it measures — libtest's own bookkeeping on its main thread could, late
//! on a loaded machine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;

use cap::Cap;
use tollgate_core::time::NANOS_PER_SEC;
use tollgate_core::{AlgorithmName, Limit};
use tollgate_memory::{Limiter, MemoryConfig, MemoryStore};

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// A store with one limiter, and the allocator and budget readings after
/// both exist (the registry's own allocations are not accounted).
fn setup(
    algorithm: AlgorithmName,
    rate: &str,
    max_bytes: usize,
) -> (MemoryStore, Limiter, usize, usize) {
    let store = MemoryStore::new(MemoryConfig {
        max_bytes,
        shards: 16,
    });
    let limiter = store
        .limiter(&Limit::new(algorithm, rate.parse().unwrap()))
        .unwrap();
    let (base, used) = (ALLOCATOR.allocated(), store.memory_used());
    (store, limiter, base, used)
}

fn assert_agree(store: &MemoryStore, base: usize, used: usize, what: std::fmt::Arguments<'_>) {
    let real = ALLOCATOR.allocated() - base;
    let accounted = store.memory_used() - used;
    if cfg!(target_feature = "sse2") {
        assert_eq!(real, accounted, "{what}");
    } else {
        // Narrower control groups: the estimate is a few bytes high per table.
        assert!(real <= accounted, "{what}: {real} > {accounted}");
    }
}

/// The whole check, on the process's only thread; a failed assertion
/// panics and exits non-zero.
fn main() {
    accounting_matches_the_allocator_to_the_byte();
    println!("accounting_matches_the_allocator_to_the_byte ... ok");
}

fn accounting_matches_the_allocator_to_the_byte() {
    fixed_size_states();
    heap_owned_by_states();
}

fn fixed_size_states() {
    for algorithm in [
        AlgorithmName::Gcra,
        AlgorithmName::TokenBucket,
        AlgorithmName::FixedWindow,
    ] {
        // Growing without a cap.
        let (store, limiter, base, used) = setup(algorithm, "10/s", usize::MAX);
        for i in 0..100_000u64 {
            limiter.check(&i.to_le_bytes(), 0, 1).unwrap();
            if i % 9_999 == 0 {
                assert_agree(
                    &store,
                    base,
                    used,
                    format_args!("{algorithm} after {i} keys"),
                );
            }
        }
        // Sweeping everything shrinks every shard back to its minimum.
        assert_eq!(store.sweep(10 * NANOS_PER_SEC, 16), 100_000);
        assert_agree(
            &store,
            base,
            used,
            format_args!("{algorithm} after the sweep"),
        );
        drop((store, limiter));

        // Held at a cap by eviction.
        let (store, limiter, base, used) = setup(algorithm, "10/h", 1 << 20);
        for i in 0..100_000u64 {
            limiter.check(&i.to_le_bytes(), i, 1).unwrap();
        }
        assert_agree(&store, base, used, format_args!("{algorithm} at the cap"));
        assert!(store.memory_used() <= 1 << 20);
    }
}

fn heap_owned_by_states() {
    let (store, limiter, base, used) = setup(AlgorithmName::SlidingWindowLog, "1000/h", usize::MAX);
    for i in 0..20_000u64 {
        limiter.check(&(i % 100).to_le_bytes(), i, 1).unwrap();
    }
    assert_agree(&store, base, used, format_args!("sliding logs"));
    assert!(limiter.reset(&7u64.to_le_bytes()));
    assert_agree(&store, base, used, format_args!("after a reset"));
    assert_eq!(store.sweep(3_600 * NANOS_PER_SEC + 20_000, 16), 99);
    assert_agree(&store, base, used, format_args!("after a sweep"));
}
