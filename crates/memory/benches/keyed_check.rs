//! Keyed check cost: tollgate's memory store against governor's keyed
//! limiter, measured in the same run.
//!
//! One criterion group per scenario (one hot key or 131,072 keys, one thread
//! or two), holding governor and every tollgate algorithm side by side, so a
//! baseline and its candidates are measured minutes apart at most on a noisy
//! machine. Both sides get their time handed in (governor through its fake
//! relative clock, tollgate as the `now` argument), so the figures compare the
//! limiters, not the clocks; the `clock` group measures each side's real
//! clock separately.
//!
//! A fifth group runs the 131,072 keys through a store capped well below
//! what they need (`131k_keys_at_cap`), so that most checks insert and the
//! store evicts all along: the cost of eviction per check.
//!
//! Run: `cargo bench -p tollgate-memory --bench keyed_check`, or
//! `scripts/bench-keyed` for the ratio tables of docs/benchmarks.md.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use tollgate_core::time::{Clock, SystemClock};
use tollgate_core::{AlgorithmName, Limit, Rate};
use tollgate_memory::{MemoryConfig, MemoryStore};

/// High enough that both sides admit everything, so the benchmark measures
/// the admission path including the state update.
const PER_SECOND: u32 = 10_000_000;
/// Key counts are powers of two so that picking a key is a mask, not a
/// division that would weigh on both sides alike.
const KEY_SETS: [(&str, usize); 2] = [("hot_key", 1), ("131k_keys", 1 << 17)];
const THREADS: [usize; 2] = [1, 2];
/// The at-cap scenario: the 131,072 keys through a store capped at 2 MiB,
/// which holds a fraction of them, so most checks insert a key and the
/// store evicts all along (governor, uncapped, is the baseline).
const AT_CAP_KEYS: usize = 1 << 17;
const AT_CAP_BYTES: usize = 2 << 20;
/// Both sides' time advances 1 ms every 64 checks: a hot key sees 64,000
/// checks per simulated second, and each of the 131,072 keys about one every
/// two seconds, so a sliding log holds what a real one would rather than
/// millions of entries.
const CHECKS_PER_TICK: u64 = 64;
const TICK: Duration = Duration::from_millis(1);
const START_NS: u64 = 1_700_000_000_000_000_000;

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

fn pick(keys: &[String], i: u64) -> &String {
    &keys[(i as usize).wrapping_mul(7919) & (keys.len() - 1)]
}

fn governor(group: &mut BenchmarkGroup<'_, WallTime>, keys: &[String], threads: usize) {
    let clock = FakeRelativeClock::default();
    let quota = Quota::per_second(NonZeroU32::new(PER_SECOND).unwrap());
    let limiter = RateLimiter::dashmap_with_clock(quota, clock.clone());
    for k in keys {
        let _ = limiter.check_key(k);
    }
    group.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            timed(threads, iters, &|i| {
                if i % CHECKS_PER_TICK == 0 {
                    clock.advance(TICK);
                }
                black_box(limiter.check_key(pick(keys, i)).is_ok());
            })
        })
    });
}

fn tollgate(
    group: &mut BenchmarkGroup<'_, WallTime>,
    algorithm: AlgorithmName,
    keys: &[String],
    threads: usize,
    config: MemoryConfig,
) {
    let rate = Rate::per_second(u64::from(PER_SECOND)).unwrap();
    let mut limit = Limit::new(algorithm, rate);
    if algorithm == AlgorithmName::Concurrency {
        limit = limit.with_lease_ttl(Duration::from_millis(1));
    }
    let store = MemoryStore::new(config);
    let limiter = store.limiter(&limit).unwrap();
    let now = AtomicU64::new(START_NS);
    for k in keys {
        let _ = limiter.check(k.as_bytes(), START_NS, 1);
    }
    let tick = u64::try_from(TICK.as_nanos()).unwrap();
    group.bench_function(algorithm.as_str(), |b| {
        b.iter_custom(|iters| {
            timed(threads, iters, &|i| {
                if i % CHECKS_PER_TICK == 0 {
                    now.fetch_add(tick, Ordering::Relaxed);
                }
                let t = now.load(Ordering::Relaxed);
                let decision = limiter.check(pick(keys, i).as_bytes(), t, 1);
                black_box(decision.map(|d| d.allowed).ok());
            })
        })
    });
}

fn scenarios(c: &mut Criterion) {
    for (name, count) in KEY_SETS {
        let keys = keys(count);
        for threads in THREADS {
            let mut group = c.benchmark_group(format!("{name}_{threads}_threads"));
            group.throughput(Throughput::Elements(1));
            governor(&mut group, &keys, threads);
            for algorithm in AlgorithmName::ALL {
                tollgate(
                    &mut group,
                    algorithm,
                    &keys,
                    threads,
                    MemoryConfig::default(),
                );
            }
            group.finish();
        }
    }
    let keys = keys(AT_CAP_KEYS);
    let at_cap = MemoryConfig {
        max_bytes: AT_CAP_BYTES,
        ..MemoryConfig::default()
    };
    let mut group = c.benchmark_group("131k_keys_at_cap_1_threads");
    group.throughput(Throughput::Elements(1));
    governor(&mut group, &keys, 1);
    for algorithm in AlgorithmName::ALL {
        tollgate(&mut group, algorithm, &keys, 1, at_cap);
    }
    group.finish();
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
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = scenarios, clocks
}
criterion_main!(benches);
