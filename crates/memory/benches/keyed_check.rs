//! Keyed check cost: tollgate's memory store against governor's keyed
//! limiter, measured in the same run.
//!
//! For every algorithm: one hot key and 131,072 keys, on one thread and on
//! two.
//! Both sides get their time handed in (governor through its fake relative
//! clock, tollgate as the `now` argument), so the figures compare the
//! limiters, not the clocks; the `clock` group measures reading each side's
//! real clock separately.
//!
//! Run: `cargo bench -p tollgate-memory --bench keyed_check`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use tollgate_core::time::{Clock, SystemClock};
use tollgate_core::{AlgorithmName, Limit, Rate};
use tollgate_memory::{MemoryConfig, MemoryStore};

/// High enough that both sides mostly admit, so the benchmark measures the
/// admission path including the state update.
const PER_SECOND: u32 = 10_000_000;
// Both sides' time advances 1 ms every 64 checks: a hot key sees 64,000
// checks per simulated second (all admitted), and each of the 131,072 keys
// about one every two seconds, so a sliding log holds what a real one would
// rather than millions of entries.
/// Key counts are powers of two so that picking a key is a mask, not a
/// division that would weigh on both sides alike.
const KEY_SETS: [(&str, usize); 2] = [("hot_key", 1), ("131k_keys", 1 << 17)];
const THREADS: [usize; 2] = [1, 2];

fn keys(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("user:{i:08}")).collect()
}

/// Runs `op(i)` for `iters` operations split over `threads`, returning the
/// wall time of the whole batch.
fn timed(threads: usize, iters: u64, op: &(dyn Fn(u64) + Sync)) -> Duration {
    let per_thread = iters / threads as u64 + 1;
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads as u64 {
            s.spawn(move || {
                let base = t * per_thread;
                for i in base..base + per_thread {
                    op(i);
                }
            });
        }
    });
    start.elapsed()
}

fn governor_baseline(c: &mut Criterion) {
    let mut group = c.benchmark_group("governor");
    group.throughput(Throughput::Elements(1));
    for (name, count) in KEY_SETS {
        let keys = keys(count);
        for threads in THREADS {
            let clock = FakeRelativeClock::default();
            let quota = Quota::per_second(NonZeroU32::new(PER_SECOND).unwrap());
            let limiter = RateLimiter::dashmap_with_clock(quota, clock.clone());
            for k in &keys {
                let _ = limiter.check_key(k);
            }
            group.bench_function(BenchmarkId::new(name, format!("{threads}_threads")), |b| {
                b.iter_custom(|iters| {
                    timed(threads, iters, &|i| {
                        if i % 64 == 0 {
                            clock.advance(Duration::from_millis(1));
                        }
                        let key = &keys[(i as usize).wrapping_mul(7919) & (keys.len() - 1)];
                        black_box(limiter.check_key(key).is_ok());
                    })
                })
            });
        }
    }
    group.finish();
}

fn tollgate_algorithms(c: &mut Criterion) {
    for algorithm in AlgorithmName::ALL {
        let mut group = c.benchmark_group(format!("tollgate_{algorithm}"));
        group.throughput(Throughput::Elements(1));
        let rate = Rate::per_second(u64::from(PER_SECOND)).unwrap();
        let mut limit = Limit::new(algorithm, rate);
        if algorithm == AlgorithmName::Concurrency {
            limit = limit.with_lease_ttl(Duration::from_millis(1));
        }
        for (name, count) in KEY_SETS {
            let keys = keys(count);
            for threads in THREADS {
                let store = MemoryStore::new(MemoryConfig::default());
                let limiter = store.limiter(&limit).unwrap();
                let now = AtomicU64::new(1_700_000_000_000_000_000);
                for k in &keys {
                    let _ = limiter.check(k.as_bytes(), now.load(Ordering::Relaxed), 1);
                }
                group.bench_function(BenchmarkId::new(name, format!("{threads}_threads")), |b| {
                    b.iter_custom(|iters| {
                        timed(threads, iters, &|i| {
                            if i % 64 == 0 {
                                now.fetch_add(1_000_000, Ordering::Relaxed);
                            }
                            let key = &keys[(i as usize).wrapping_mul(7919) & (keys.len() - 1)];
                            let t = now.load(Ordering::Relaxed);
                            black_box(limiter.check(key.as_bytes(), t, 1).map(|d| d.allowed).ok());
                        })
                    })
                });
            }
        }
        group.finish();
    }
}

fn clocks(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");
    let system = SystemClock::new();
    group.bench_function("tollgate_system_clock", |b| {
        b.iter(|| black_box(system.now()))
    });
    let quanta = governor::clock::QuantaClock::default();
    group.bench_function("governor_quanta_clock", |b| {
        b.iter(|| black_box(governor::clock::Clock::now(&quanta)))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = governor_baseline, tollgate_algorithms, clocks
}
criterion_main!(benches);
