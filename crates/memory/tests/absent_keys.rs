//! Missing keys behave as fresh states, and an operation that changes no
//! state inserts no key: peeks, rejections, `next_available`, releases,
//! resets and refused reservations leave the store empty.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tollgate_core::time::NANOS_PER_SEC;
use tollgate_core::{AlgorithmName, Limit, LimitError, Rate};
use tollgate_memory::{Limiter, MemoryConfig, MemoryStore};

fn store() -> MemoryStore {
    MemoryStore::new(MemoryConfig {
        max_bytes: 1 << 20,
        shards: 4,
    })
}

fn limiter(store: &MemoryStore, algorithm: AlgorithmName) -> Limiter {
    store
        .limiter(&Limit::new(algorithm, Rate::per_second(2).unwrap()))
        .unwrap()
}

#[test]
fn single_key_operations_that_change_nothing_insert_nothing() {
    for algorithm in AlgorithmName::ALL {
        let store = store();
        let limiter = limiter(&store, algorithm);
        let used = store.memory_used();
        let peek = limiter.check(b"k", 0, 0).unwrap();
        assert!(peek.allowed && peek.remaining == 2, "{algorithm}: {peek:?}");
        assert!(limiter.check(b"k", 0, 3).is_err(), "{algorithm}");
        assert_eq!(limiter.next_available(b"k", 0, 2), Ok(0), "{algorithm}");
        assert!(!limiter.release(b"k", 1), "{algorithm}");
        assert!(!limiter.reset(b"k"), "{algorithm}");
        let _ = limiter.reserve(b"k", 0, 0, None);
        let _ = limiter.record(b"k", 0, 0);
        assert_eq!(store.len(), 0, "{algorithm}");
        assert_eq!(
            store.memory_used(),
            used,
            "{algorithm} allocated for an absent key"
        );
        // A counted request does insert, and a reset removes it again.
        assert!(limiter.check(b"k", 0, 1).unwrap().allowed);
        assert_eq!(store.len(), 1, "{algorithm}");
        assert!(limiter.reset(b"k"));
        assert!(store.is_empty(), "{algorithm}");
    }
}

#[test]
fn a_rejected_multi_check_inserts_nothing_in_the_limit_that_would_admit() {
    let store = store();
    let strict = limiter(&store, AlgorithmName::FixedWindow);
    let loose = store
        .limiter(&Limit::new(
            AlgorithmName::SlidingWindowLog,
            Rate::per_minute(100).unwrap(),
        ))
        .unwrap();
    strict.check(b"user", 0, 2).unwrap();
    assert_eq!(store.len(), 1);
    let decisions = store
        .check_all(&[(&strict, b"user"), (&loose, b"user")], 0, 1)
        .unwrap();
    assert!(!decisions[0].allowed && decisions[1].allowed);
    assert_eq!(
        store.len(),
        1,
        "the loose limit stored a key for a rejected request"
    );
}

#[test]
fn a_refused_multi_reservation_inserts_nothing() {
    let store = store();
    let strict = limiter(&store, AlgorithmName::Gcra);
    let other = limiter(&store, AlgorithmName::FixedWindow);
    strict.check(b"user", 0, 2).unwrap();
    let requests = [(&strict, &b"user"[..]), (&other, &b"user"[..])];
    let refused = store
        .reserve_all(&requests, 0, 1, Some(Duration::from_millis(100)))
        .unwrap();
    assert!(!refused.booked);
    assert_eq!(refused.wait, Duration::from_millis(500));
    assert_eq!(refused.retry_after, Duration::from_millis(400));
    assert_eq!(store.len(), 1);
}

#[test]
fn record_counts_over_the_limit_for_all_but_concurrency() {
    let store = store();
    for algorithm in AlgorithmName::ALL {
        let got = limiter(&store, algorithm).record(b"k", NANOS_PER_SEC, 5);
        if algorithm == AlgorithmName::Concurrency {
            assert_eq!(
                got,
                Err(LimitError::Option {
                    option: "record",
                    algorithm
                })
            );
        } else {
            assert_eq!(got, Ok(5), "{algorithm:?}: over the limit, still counted");
        }
    }
    // One key per algorithm that recorded; concurrency inserted nothing.
    assert_eq!(store.len(), AlgorithmName::ALL.len() - 1);
}
