//! Settling through the memory store (`Store::settle`, issue 24): a
//! refund or a charge lands on the key's state as `Algorithm::settle`
//! defines it, `concurrency` answers a clear error and changes nothing, and
//! a store that has no settle of its own says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tollgate_core::algorithm::Settled;
use tollgate_core::time::{ManualClock, NANOS_PER_SEC as S};
use tollgate_core::{AlgorithmName, Limit, LimitError, LimitKey, Moment, Rate, Store, StoreError};
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_testkit::{ready, DownStore};

fn store() -> LocalStore {
    let clock = Arc::new(ManualClock::new(0));
    LocalStore::new(MemoryStore::new(MemoryConfig::default()), clock)
}

fn per_minute(algorithm: AlgorithmName, n: u64) -> Limit {
    Limit::new(algorithm, Rate::per_minute(n).unwrap())
}

#[test]
fn a_refund_gives_the_difference_back_to_the_key() {
    let store = store();
    let limit = per_minute(AlgorithmName::FixedWindow, 10);
    let alice = LimitKey {
        limit: &limit,
        key: b"alice",
    };
    let bob = LimitKey {
        limit: &limit,
        key: b"bob",
    };
    for key in [alice, bob] {
        assert!(
            ready(store.check_one(key, Moment::At(S), 8))
                .unwrap()
                .allowed
        );
    }
    let settled = ready(store.settle(alice, S, Moment::At(2 * S), 8, 2)).unwrap();
    assert_eq!(settled, Settled::Refunded { dropped: false });
    let peek = |key| {
        ready(store.check_one(key, Moment::At(3 * S), 0))
            .unwrap()
            .remaining
    };
    assert_eq!(peek(alice), 8);
    // Only the settled key changed.
    assert_eq!(peek(bob), 2);
}

#[test]
fn a_charge_puts_the_key_in_debt_with_an_exact_retry_after() {
    let store = store();
    let limit = Limit::new(AlgorithmName::Gcra, Rate::per_second(1).unwrap());
    let key = LimitKey {
        limit: &limit,
        key: b"llm",
    };
    assert!(
        ready(store.check_one(key, Moment::At(0), 1))
            .unwrap()
            .allowed
    );
    assert_eq!(
        ready(store.settle(key, 0, Moment::At(S / 2), 1, 4)).unwrap(),
        Settled::Charged
    );
    let refused = ready(store.check_one(key, Moment::At(S), 1)).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Duration::from_secs(3));
}

#[test]
fn a_settle_is_never_before_its_admission() {
    // An explicit time behind the admission settles at the admission.
    let store = store();
    let limit = per_minute(AlgorithmName::SlidingWindowLog, 5);
    let key = LimitKey {
        limit: &limit,
        key: b"k",
    };
    assert!(
        ready(store.check_one(key, Moment::At(10 * S), 5))
            .unwrap()
            .allowed
    );
    let settled = ready(store.settle(key, 10 * S, Moment::At(S), 5, 0)).unwrap();
    assert_eq!(settled, Settled::Refunded { dropped: false });
    assert_eq!(
        ready(store.check_one(key, Moment::At(10 * S), 0))
            .unwrap()
            .remaining,
        5
    );
}

#[test]
fn concurrency_refuses_to_settle_and_changes_nothing() {
    let store = store();
    let limit = Limit::new(AlgorithmName::Concurrency, Rate::per_second(2).unwrap());
    let key = LimitKey {
        limit: &limit,
        key: b"c",
    };
    assert!(
        ready(store.check_one(key, Moment::At(0), 1))
            .unwrap()
            .allowed
    );
    let err = ready(store.settle(key, 0, Moment::At(S), 1, 0)).unwrap_err();
    assert_eq!(
        err,
        StoreError::Limit(LimitError::Option {
            option: "settle",
            algorithm: AlgorithmName::Concurrency,
        })
    );
    assert_eq!(
        ready(store.check_one(key, Moment::At(S), 0))
            .unwrap()
            .remaining,
        1
    );
}

#[test]
fn a_store_without_its_own_settle_says_it_is_unsupported() {
    let limit = per_minute(AlgorithmName::FixedWindow, 10);
    let key = LimitKey {
        limit: &limit,
        key: b"k",
    };
    let err = ready(DownStore::new("down").settle(key, 0, Moment::Now, 2, 1)).unwrap_err();
    assert_eq!(err, StoreError::Unsupported("settle"));
    assert!(!err.is_outage());
    assert_eq!(err.to_string(), "this store does not support settle");
}
