//! Many threads on one store: a hot key admits exactly its limit, concurrent
//! reservations never overbook, and overlapping multi-limit checks neither
//! deadlock nor over-admit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use tollgate_core::time::NANOS_PER_SEC;
use tollgate_core::{AlgorithmName, Limit};
use tollgate_memory::{Limiter, MemoryConfig, MemoryStore};

const THREADS: u64 = 8;
/// Seventeen minutes and a bit after the epoch, not on a window boundary.
const NOW: u64 = 1_000 * NANOS_PER_SEC + 123_456_789;

fn store() -> MemoryStore {
    MemoryStore::new(MemoryConfig {
        max_bytes: 256 << 20,
        shards: 16,
    })
}

fn limiter(store: &MemoryStore, algorithm: AlgorithmName, rate: &str) -> Limiter {
    store
        .limiter(&Limit::new(algorithm, rate.parse().unwrap()))
        .unwrap()
}

/// Runs `work(thread index)` on every thread; fails instead of hanging when
/// they do not all finish within a minute.
fn on_threads(work: impl Fn(u64) + Send + Sync + 'static) {
    let work = std::sync::Arc::new(work);
    let (done, finished) = mpsc::channel();
    for t in 0..THREADS {
        let (work, done) = (work.clone(), done.clone());
        thread::spawn(move || {
            work(t);
            let _ = done.send(());
        });
    }
    for _ in 0..THREADS {
        finished
            .recv_timeout(Duration::from_secs(60))
            .expect("a thread did not finish: deadlock?");
    }
}

#[test]
fn a_hot_key_admits_exactly_its_limit() {
    let exact = [
        AlgorithmName::FixedWindow,
        AlgorithmName::SlidingWindowLog,
        AlgorithmName::Gcra,
        AlgorithmName::TokenBucket,
        AlgorithmName::SteppedWindow,
        AlgorithmName::SlidingWindowCounter,
    ];
    for algorithm in exact {
        let store = store();
        let limiter = limiter(&store, algorithm, "5000/h");
        let admitted = std::sync::Arc::new(AtomicU64::new(0));
        let counter = admitted.clone();
        on_threads(move |_| {
            for _ in 0..10_000 {
                if limiter.check(b"hot", NOW, 1).unwrap().allowed {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), 5_000, "{algorithm}");
    }
}

/// Reservations for one key from every thread, as (wait in ns) per booking.
fn reserve_from_threads(limiter: Limiter, per_thread: u64) -> Vec<u64> {
    let waits = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let sink = waits.clone();
    on_threads(move |_| {
        for _ in 0..per_thread {
            let r = limiter.reserve(b"k", NOW, 1, None).unwrap();
            assert!(r.decision.allowed);
            sink.lock().push(r.wait.as_nanos() as u64);
        }
    });
    let mut waits = waits.lock().clone();
    waits.sort_unstable();
    waits
}

#[test]
fn bucket_reservations_get_distinct_slots_one_interval_apart() {
    for algorithm in [AlgorithmName::Gcra, AlgorithmName::TokenBucket] {
        let store = store();
        let limit = Limit::new(algorithm, "10/s".parse().unwrap()).with_burst(1);
        let waits = reserve_from_threads(store.limiter(&limit).unwrap(), 100);
        let interval = NANOS_PER_SEC / 10;
        let expected: Vec<u64> = (0..THREADS * 100).map(|i| i * interval).collect();
        assert_eq!(waits, expected, "{algorithm}");
    }
}

#[test]
fn fixed_window_reservations_never_overbook_a_window() {
    let store = store();
    let waits = reserve_from_threads(limiter(&store, AlgorithmName::FixedWindow, "5/s"), 100);
    let mut per_window = BTreeMap::new();
    for wait in waits {
        *per_window.entry((NOW + wait) / NANOS_PER_SEC).or_insert(0) += 1;
    }
    assert!(per_window.values().all(|&n| n == 5), "{per_window:?}");
    // And the windows are consecutive: no slot was wasted.
    assert_eq!(per_window.len() as u64, THREADS * 100 / 5);
    let first = NOW / NANOS_PER_SEC;
    assert_eq!(
        per_window.keys().copied().collect::<Vec<_>>(),
        (first..first + 160).collect::<Vec<_>>()
    );
}

#[test]
fn overlapping_multi_checks_neither_deadlock_nor_over_admit() {
    const N: u64 = 300;
    let store = store();
    let limits = [
        limiter(&store, AlgorithmName::FixedWindow, "300/h"),
        limiter(&store, AlgorithmName::Gcra, "300/h"),
        limiter(&store, AlgorithmName::SlidingWindowLog, "300/h"),
    ];
    // Sets of (limit, key), in different orders: several keys share a
    // table, and with 16 shards some share a shard.
    let sets: Vec<Vec<(usize, &'static [u8])>> = vec![
        vec![(0, b"x"), (1, b"x")],
        vec![(1, b"x"), (2, b"x")],
        vec![(2, b"x"), (0, b"x")],
        vec![(2, b"x"), (1, b"x"), (0, b"x")],
        vec![(0, b"y"), (0, b"x"), (2, b"y")],
        vec![(1, b"y"), (0, b"y"), (1, b"x")],
    ];
    let admitted: std::sync::Arc<Vec<AtomicU64>> =
        std::sync::Arc::new((0..sets.len()).map(|_| AtomicU64::new(0)).collect());
    let (shared_store, shared_limits, shared_sets, counts) = (
        store.clone(),
        limits.clone(),
        sets.clone(),
        admitted.clone(),
    );
    on_threads(move |t| {
        for i in 0..3_000u64 {
            let which = ((t + i) % shared_sets.len() as u64) as usize;
            let requests: Vec<(&Limiter, &[u8])> = shared_sets[which]
                .iter()
                .map(|&(l, key)| (&shared_limits[l], key))
                .collect();
            let decisions = shared_store.check_all(&requests, NOW, 1).unwrap();
            if decisions.iter().all(|d| d.allowed) {
                counts[which].fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    // Every (limit, key) counted exactly the admitted sets that contain it,
    // and none more than its limit.
    let mut counted: BTreeMap<(usize, &[u8]), u64> = BTreeMap::new();
    for (set, n) in sets.iter().zip(admitted.iter()) {
        for &(l, key) in set {
            *counted.entry((l, key)).or_insert(0) += n.load(Ordering::Relaxed);
        }
    }
    for ((l, key), n) in counted {
        assert!(n <= N, "limit {l} key {key:?} admitted {n}");
        let remaining = limits[l].check(key, NOW, 0).unwrap().remaining;
        assert_eq!(remaining, N - n, "limit {l} key {key:?}");
    }
}
