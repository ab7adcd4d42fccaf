//! A single-threaded driver of the keyed-check benchmark's loop, for
//! instruction counts under callgrind (repeatable on a noisy machine, unlike
//! wall time). Only `measure` is meant to be collected:
//!
//! ```sh
//! cargo build --release -p tollgate-memory --example keyed_ir
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*measure*' \
//!     target/release/examples/keyed_ir gcra 1 100000
//! ```
//!
//! Arguments: an algorithm name or `governor`, the number of keys (a power of
//! two), and the number of checks.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use tollgate_core::{AlgorithmName, Limit, Rate};
use tollgate_memory::{MemoryConfig, MemoryStore};

const PER_SECOND: u32 = 10_000_000;
const CHECKS_PER_TICK: u64 = 64;
const START_NS: u64 = 1_700_000_000_000_000_000;

fn pick(keys: &[String], i: u64) -> &String {
    &keys[(i as usize).wrapping_mul(7919) & (keys.len() - 1)]
}

#[inline(never)]
fn measure(iters: u64, op: &dyn Fn(u64)) {
    for i in 0..iters {
        op(i);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("gcra", String::as_str);
    let count: usize = args.get(2).map_or(1, |s| s.parse().unwrap());
    let iters: u64 = args.get(3).map_or(100_000, |s| s.parse().unwrap());
    let keys: Vec<String> = (0..count).map(|i| format!("user:{i:08}")).collect();
    if name == "governor" {
        let clock = FakeRelativeClock::default();
        let quota = Quota::per_second(NonZeroU32::new(PER_SECOND).unwrap());
        let limiter = RateLimiter::dashmap_with_clock(quota, clock.clone());
        for k in &keys {
            let _ = limiter.check_key(k);
        }
        measure(iters, &|i| {
            if i % CHECKS_PER_TICK == 0 {
                clock.advance(Duration::from_millis(1));
            }
            black_box(limiter.check_key(pick(&keys, i)).is_ok());
        });
        return;
    }
    let algorithm = AlgorithmName::ALL
        .into_iter()
        .find(|a| a.as_str() == name)
        .unwrap();
    let mut limit = Limit::new(algorithm, Rate::per_second(u64::from(PER_SECOND)).unwrap());
    if algorithm == AlgorithmName::Concurrency {
        limit = limit.with_lease_ttl(Duration::from_millis(1));
    }
    let store = MemoryStore::new(MemoryConfig::default());
    let limiter = store.limiter(&limit).unwrap();
    for k in &keys {
        let _ = limiter.check(k.as_bytes(), START_NS, 1);
    }
    let now = std::cell::Cell::new(START_NS);
    measure(iters, &|i| {
        if i % CHECKS_PER_TICK == 0 {
            now.set(now.get() + 1_000_000);
        }
        let decision = limiter.check(pick(&keys, i).as_bytes(), now.get(), 1);
        black_box(decision.map(|d| d.allowed).ok());
    });
}
