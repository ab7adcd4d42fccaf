//! Waiter overhead per acquired permit: `until_ready().await` on tollgate's
//! ring and GCRA waiters against governor's direct limiter, in the same run.
//!
//! The rate is high enough that nobody ever waits (a billion per second,
//! against a few tens of millions of permits a second at most here), so the
//! figures are the cost of asking: reading the clock, taking the permit and
//! the future around it. Each side reads its default real clock (tollgate's
//! `RealClock`, governor's `QuantaClock`, both quanta), as a program would.
//!
//! One criterion group per scenario, each holding governor and both tollgate
//! waiters: one thread, and two threads sharing one limiter (each thread
//! runs its own current-thread tokio runtime, so the contention measured is
//! the limiter's, not a scheduler's). The `clock` group measures the
//! clocks alone.
//!
//! Run: `cargo bench -p tollgate-client --bench waiter`, or
//! `scripts/bench-client` for the ratio table of docs/benchmarks.md.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use governor::{Quota, RateLimiter};
use tollgate_client::clock::{Clock, RealClock, TokioClock};
use tollgate_client::waiter::{GcraWaiter, RingWaiter};
use tollgate_core::Rate;

const PER_SECOND: u32 = 1_000_000_000;
/// 524,288 per millisecond (a 4 MiB ring): one permit every 1.9 ns, more
/// than two threads can ask for, so it never waits either. (At 131,072 per
/// millisecond, two threads at real-time priority did ask for more, waited
/// for the runtime's millisecond timer, and the figure measured sleeping.)
const RING_PER_MS: u64 = 1 << 19;
const THREADS: [usize; 2] = [1, 2];

/// Runs `iters` acquisitions split over `threads`, each thread on its own
/// current-thread runtime, and returns the wall time from a common start.
fn timed<F, Fut>(threads: usize, iters: u64, acquire: F) -> Duration
where
    F: Fn() -> Fut + Sync,
    Fut: Future<Output = ()>,
{
    let per_thread = iters.div_ceil(threads as u64);
    let start_line = Barrier::new(threads + 1);
    let acquire = &acquire;
    std::thread::scope(|s| {
        for _ in 0..threads {
            let start_line = &start_line;
            s.spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .unwrap();
                start_line.wait();
                runtime.block_on(async {
                    for _ in 0..per_thread {
                        acquire().await;
                    }
                });
            });
        }
        start_line.wait();
        let start = Instant::now();
        // The scope joins the threads before returning.
        start
    })
    .elapsed()
}

fn governor(group: &mut BenchmarkGroup<'_, WallTime>, threads: usize) {
    let limiter = RateLimiter::direct(Quota::per_second(NonZeroU32::new(PER_SECOND).unwrap()));
    group.bench_function("governor", |b| {
        b.iter_custom(|iters| timed(threads, iters, || async { limiter.until_ready().await }))
    });
}

fn tollgate_gcra(group: &mut BenchmarkGroup<'_, WallTime>, threads: usize) {
    let waiter = GcraWaiter::new(Rate::per_second(u64::from(PER_SECOND)).unwrap()).unwrap();
    group.bench_function("tollgate_gcra", |b| {
        b.iter_custom(|iters| timed(threads, iters, || waiter.until_ready()))
    });
    assert_eq!(waiter.waiting(), 0);
}

fn tollgate_ring(group: &mut BenchmarkGroup<'_, WallTime>, threads: usize) {
    let rate = Rate::from_nanos(RING_PER_MS, 1_000_000).unwrap();
    let waiter = RingWaiter::new(rate).unwrap();
    group.bench_function("tollgate_ring", |b| {
        b.iter_custom(|iters| timed(threads, iters, || waiter.until_ready()))
    });
    assert_eq!(waiter.waiting(), 0);
}

fn scenarios(c: &mut Criterion) {
    for threads in THREADS {
        let mut group = c.benchmark_group(format!("until_ready_{threads}_threads"));
        group.throughput(Throughput::Elements(1));
        governor(&mut group, threads);
        tollgate_gcra(&mut group, threads);
        tollgate_ring(&mut group, threads);
        group.finish();
    }
}

fn clocks(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");
    let real_clock = RealClock::new();
    group.bench_function("tollgate_real_clock", |b| {
        b.iter(|| black_box(real_clock.now()))
    });
    let tokio_clock = TokioClock::new();
    group.bench_function("tollgate_tokio_clock", |b| {
        b.iter(|| black_box(tokio_clock.now()))
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
