//! Several limits on one request are all-or-nothing (SPEC §2): `check_all`
//! counts in every limit or in none, and `reserve_all` books in every limit
//! or in none.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tollgate_core::time::{NANOS_PER_MS, NANOS_PER_SEC};
use tollgate_core::{AlgorithmName, Limit, LimitError};
use tollgate_memory::{Limiter, MemoryConfig, MemoryStore};

fn store() -> MemoryStore {
    MemoryStore::new(MemoryConfig {
        max_bytes: 8 << 20,
        shards: 8,
    })
}

fn limiter(store: &MemoryStore, algorithm: AlgorithmName, rate: &str) -> Limiter {
    store
        .limiter(&Limit::new(algorithm, rate.parse().unwrap()))
        .unwrap()
}

fn remaining(limiter: &Limiter, key: &[u8], now: u64) -> u64 {
    limiter.check(key, now, 0).unwrap().remaining
}

#[test]
fn per_second_and_per_minute_count_together_or_not_at_all() {
    let store = store();
    let second = limiter(&store, AlgorithmName::SlidingWindowLog, "2/s");
    let minute = limiter(&store, AlgorithmName::FixedWindow, "5/min");
    let both = [(&second, &b"alice"[..]), (&minute, &b"alice"[..])];
    let mut admitted = 0;
    // Ten requests a second for three seconds: 2/s lets six through, 5/min five.
    for tick in 0..30u64 {
        let decisions = store
            .check_all(&both, tick * 100 * NANOS_PER_MS, 1)
            .unwrap();
        assert_eq!(
            decisions[0].allowed && decisions[1].allowed,
            decisions.iter().all(|d| d.allowed)
        );
        admitted += u64::from(decisions.iter().all(|d| d.allowed));
    }
    assert_eq!(admitted, 5);
    assert_eq!(remaining(&minute, b"alice", 3 * NANOS_PER_SEC), 0);
    // Admitted at 0, 0.1, 1.0, 1.1 and 2.0 s. At 2.1 s the per-second limit
    // admitted but the per-minute one did not: had it been counted anyway, it
    // would still be in the per-second window at 3 s.
    assert_eq!(remaining(&second, b"alice", 3 * NANOS_PER_SEC), 2);
}

#[test]
fn a_rejection_by_one_limit_leaves_the_others_state_unchanged() {
    let store = store();
    let user = limiter(&store, AlgorithmName::TokenBucket, "3/s");
    let global = limiter(&store, AlgorithmName::Gcra, "5/s");
    // Three users share the global limit of five.
    for key in [&b"a"[..], b"b", b"c"] {
        for _ in 0..3 {
            let _ = store
                .check_all(&[(&user, key), (&global, b"*")], 0, 1)
                .unwrap();
        }
    }
    assert_eq!(remaining(&global, b"*", 0), 0);
    assert_eq!(remaining(&user, b"a", 0), 0);
    assert_eq!(
        remaining(&user, b"b", 0),
        1,
        "b's third was rejected globally, not counted"
    );
    assert_eq!(remaining(&user, b"c", 0), 3, "c never got through");
    // When rejected, each decision is its own limit's verdict, as of now.
    let decisions = store
        .check_all(&[(&user, b"c"), (&global, b"*")], 0, 1)
        .unwrap();
    assert!(decisions[0].allowed && !decisions[1].allowed);
    assert_eq!(
        decisions[0].remaining, 2,
        "as if admitted by the user limit alone"
    );
    assert_eq!(decisions[1].retry_after, Duration::from_millis(200));
    assert_eq!(remaining(&user, b"c", 0), 3);
}

#[test]
fn the_same_key_twice_is_evaluated_once_with_the_summed_cost() {
    let store = store();
    let limit = limiter(&store, AlgorithmName::FixedWindow, "5/s");
    let twice = [(&limit, &b"k"[..]), (&limit, &b"k"[..])];
    let first = store.check_all(&twice, 0, 2).unwrap();
    assert_eq!(first, vec![first[0]; 2]);
    assert!(first[0].allowed);
    assert_eq!(first[0].remaining, 1);
    // 4 counted: two more (one per request) do not fit.
    let second = store.check_all(&twice, 0, 1).unwrap();
    assert!(!second[0].allowed && !second[1].allowed);
    assert_eq!(remaining(&limit, b"k", 0), 1);
    // A clone of the limiter, or a second handle to the same limit, is the same table.
    let again = store.limiter(limit.limit()).unwrap();
    let mixed = store
        .check_all(&[(&limit, b"k"), (&again, b"k")], 0, 1)
        .unwrap();
    assert!(!mixed[0].allowed);
    // A summed cost beyond the capacity is an error, and nothing is counted.
    let err = store
        .check_all(&[(&limit, b"j"), (&limit, b"j")], 0, 3)
        .unwrap_err();
    assert_eq!(
        err,
        LimitError::CostTooLarge {
            cost: 6,
            capacity: 5
        }
    );
    assert_eq!(remaining(&limit, b"j", 0), 5);
}

#[test]
fn concurrency_leases_come_back_from_check_all() {
    let store = store();
    let inflight = limiter(&store, AlgorithmName::Concurrency, "1/s");
    let rate = limiter(&store, AlgorithmName::Gcra, "10/s");
    let decisions = store
        .check_all(&[(&rate, b"k"), (&inflight, b"k")], 0, 1)
        .unwrap();
    let lease = decisions[1].lease.unwrap();
    assert_eq!(decisions[0].lease, None);
    assert!(
        !store
            .check_all(&[(&rate, b"k"), (&inflight, b"k")], 0, 1)
            .unwrap()[1]
            .allowed
    );
    assert!(inflight.release(b"k", lease));
    assert!(
        store
            .check_all(&[(&rate, b"k"), (&inflight, b"k")], 0, 1)
            .unwrap()[1]
            .allowed
    );
    assert_eq!(
        store.reserve_all(&[(&rate, b"k"), (&inflight, b"k")], 0, 1, None),
        Err(LimitError::ReservationUnsupported)
    );
    assert_eq!(
        inflight.reserve(b"k", 0, 1, None),
        Err(LimitError::ReservationUnsupported)
    );
}

#[test]
fn reserve_all_books_every_limit_at_the_first_instant_all_admit() {
    let store = store();
    let bucket = limiter(&store, AlgorithmName::Gcra, "1/s");
    let window = limiter(&store, AlgorithmName::FixedWindow, "2/10s");
    let both = [(&bucket, &b"k"[..]), (&window, &b"k"[..])];
    let t0 = 100 * NANOS_PER_SEC;
    // The bucket paces one a second; the window takes two per ten seconds.
    // The fourth must not join the third at 10 s: the bucket's burst is one.
    let waits: Vec<Duration> = (0..4)
        .map(|_| {
            let r = store.reserve_all(&both, t0, 1, None).unwrap();
            assert!(r.booked && r.retry_after.is_zero());
            r.wait
        })
        .collect();
    let secs = |s| Duration::from_secs(s);
    assert_eq!(waits, vec![secs(0), secs(1), secs(10), secs(11)]);
    // A bound on the wait books nothing anywhere when exceeded.
    let refused = store.reserve_all(&both, t0, 1, Some(secs(5))).unwrap();
    assert!(!refused.booked);
    assert_eq!(refused.wait, secs(20));
    assert_eq!(refused.retry_after, secs(15));
    assert!(refused.decisions.iter().all(|d| !d.allowed));
    assert_eq!(refused.decisions[1].remaining, 0);
    // Booked requests are counted where their slots lie.
    assert_eq!(
        window.next_available(b"k", t0, 1),
        Ok(t0 + 20 * NANOS_PER_SEC)
    );
    assert_eq!(
        bucket.next_available(b"k", t0, 1),
        Ok(t0 + 12 * NANOS_PER_SEC)
    );
}

#[test]
fn reserve_all_waits_for_a_bucket_in_debt() {
    let store = store();
    let bucket = limiter(&store, AlgorithmName::TokenBucket, "2/s");
    let window = limiter(&store, AlgorithmName::SlidingWindowLog, "100/s");
    let both = [(&window, &b"k"[..]), (&bucket, &b"k"[..])];
    let waits: Vec<u128> = (0..5)
        .map(|_| {
            store
                .reserve_all(&both, 0, 1, None)
                .unwrap()
                .wait
                .as_millis()
        })
        .collect();
    assert_eq!(waits, vec![0, 0, 500, 1000, 1500]);
    // The windowed limit counted each request at the instant it will be made.
    // At 1.5 s only those at 1.0 and 1.5 s are inside its one-second window.
    assert_eq!(remaining(&window, b"k", 1_500 * NANOS_PER_MS), 98);
}

#[test]
fn one_key_in_the_tables_of_two_stores_is_found_by_each_store_alone() {
    // Two stores, two seeds: each table must fingerprint the key under its
    // own seed even when the same key comes twice in a row.
    let (first, second) = (store(), store());
    assert_ne!(first.seed(), second.seed());
    let a = limiter(&first, AlgorithmName::FixedWindow, "1/min");
    let b = limiter(&second, AlgorithmName::FixedWindow, "1/min");
    let key = &b"alice"[..];
    let decisions = first.check_all(&[(&a, key), (&b, key)], 0, 1).unwrap();
    assert!(decisions.iter().all(|d| d.allowed));
    assert_eq!(remaining(&a, key, 0), 0);
    assert_eq!(remaining(&b, key, 0), 0);
}
