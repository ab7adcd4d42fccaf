//! State per key, measured honestly: every byte the process allocates for the
//! keyed state (table buckets, control bytes, shard arrays, heap owned by
//! states), counted by a global allocator, divided by the number of keys.
//! governor's keyed limiter is measured the same way, in the same run.
//!
//! Run: `cargo bench -p tollgate-memory --bench bytes_per_key`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::num::NonZeroU32;

use cap::Cap;
use governor::{Quota, RateLimiter};
use tollgate_core::{AlgorithmName, Limit, Rate};
use tollgate_memory::{MemoryConfig, MemoryStore};

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

fn live() -> isize {
    ALLOCATOR.allocated() as isize
}

const COUNTS: [usize; 5] = [100_000, 300_000, 1_000_000, 2_000_000, 3_000_000];
const NOW: u64 = 1_700_000_000_000_000_000;

fn key(i: usize) -> [u8; 16] {
    let mut k = *b"user:0000000000\0";
    let digits = format!("{i:010}");
    k[5..15].copy_from_slice(digits.as_bytes());
    k
}

fn tollgate_bytes(algorithm: AlgorithmName, keys: usize) -> f64 {
    let before = live();
    let store = MemoryStore::new(MemoryConfig {
        max_bytes: 16 << 30,
        ..MemoryConfig::default()
    });
    let limiter = store
        .limiter(&Limit::new(algorithm, Rate::per_second(100).unwrap()))
        .unwrap();
    for i in 0..keys {
        limiter.check(&key(i), NOW, 1).unwrap();
    }
    assert_eq!(store.len(), keys);
    let bytes = live() - before;
    drop(limiter);
    drop(store);
    bytes as f64 / keys as f64
}

fn governor_bytes(keys: usize) -> f64 {
    let before = live();
    let limiter = RateLimiter::keyed(Quota::per_second(NonZeroU32::new(100).unwrap()));
    for i in 0..keys {
        let _ = limiter.check_key(&key(i));
    }
    let bytes = live() - before;
    drop(limiter);
    bytes as f64 / keys as f64
}

fn main() {
    // `cargo test --benches` runs bench binaries with `--bench` absent; stay quick then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let counts: &[usize] = if quick { &COUNTS[..1] } else { &COUNTS };
    println!("bytes per key (16-byte keys), allocator-measured");
    print!("{:<24}", "keys");
    for n in counts {
        print!("{n:>12}");
    }
    println!("{:>12}", "mean");
    let row = |name: &str, f: &dyn Fn(usize) -> f64| {
        print!("{name:<24}");
        let values: Vec<f64> = counts.iter().map(|&n| f(n)).collect();
        for v in &values {
            print!("{v:>12.1}");
        }
        println!("{:>12.1}", values.iter().sum::<f64>() / values.len() as f64);
    };
    row("governor (baseline)", &governor_bytes);
    for algorithm in [
        AlgorithmName::Gcra,
        AlgorithmName::TokenBucket,
        AlgorithmName::FixedWindow,
        AlgorithmName::LeakyBucket,
        AlgorithmName::SlidingWindowCounter,
        AlgorithmName::SlidingWindowLog,
        AlgorithmName::SteppedWindow,
    ] {
        row(algorithm.as_str(), &|n| tollgate_bytes(algorithm, n));
    }
}
