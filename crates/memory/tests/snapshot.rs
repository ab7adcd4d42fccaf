//! Snapshots: a store restored from a snapshot decides exactly as the
//! original would, for every algorithm, whatever happened before.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use std::time::Duration;
use tollgate_core::ban::Ban;
use tollgate_core::{AlgorithmName, Limit, Rate};
use tollgate_memory::{MemoryConfig, MemoryStore};

const MS: u64 = 1_000_000;

fn limits() -> Vec<Limit> {
    let mut limits: Vec<Limit> = AlgorithmName::ALL
        .iter()
        .map(|&a| Limit::new(a, Rate::new(5, Duration::from_millis(400)).unwrap()))
        .collect();
    // A token bucket whose capacity needs 128-bit storage.
    limits.push(
        Limit::new(AlgorithmName::TokenBucket, Rate::per_second(7).unwrap())
            .with_burst(u32::MAX.into()),
    );
    // Limits with a ban: the ban's strikes and end travel with the state.
    let ban = Ban::new(2, Duration::from_millis(300), Duration::from_millis(500)).unwrap();
    for algorithm in [AlgorithmName::Gcra, AlgorithmName::SlidingWindowLog] {
        limits.push(
            Limit::new(algorithm, Rate::new(2, Duration::from_millis(400)).unwrap()).with_ban(ban),
        );
    }
    limits
}

#[derive(Debug, Clone)]
enum Op {
    Check { key: u8, dt: u64, cost: u64 },
    Reserve { key: u8, dt: u64 },
    Record { key: u8, dt: u64 },
    Release { key: u8, lease: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3u8, 0..150u64, 0..3u64).prop_map(|(key, dt, cost)| Op::Check { key, dt, cost }),
        1 => (0..3u8, 0..150u64).prop_map(|(key, dt)| Op::Reserve { key, dt }),
        1 => (0..3u8, 0..150u64).prop_map(|(key, dt)| Op::Record { key, dt }),
        1 => (0..3u8, 0..6u64).prop_map(|(key, lease)| Op::Release { key, lease }),
    ]
}

/// Applies `ops` to `store` from `start` and returns every answer, as text.
fn run(store: &MemoryStore, limit: &Limit, start: u64, ops: &[Op]) -> (Vec<String>, u64) {
    let limiter = store.limiter(limit).unwrap();
    let mut now = start;
    let mut out = Vec::new();
    for op in ops {
        let answer = match *op {
            Op::Check { key, dt, cost } => {
                now += dt * MS;
                format!("{:?}", limiter.check(&[key], now, cost))
            }
            Op::Reserve { key, dt } => {
                now += dt * MS;
                format!(
                    "{:?}",
                    limiter.reserve(&[key], now, 1, Some(Duration::from_secs(1)))
                )
            }
            Op::Record { key, dt } => {
                now += dt * MS;
                format!("{:?}", limiter.record(&[key], now, 1))
            }
            Op::Release { key, lease } => format!("{:?}", limiter.release(&[key], lease)),
        };
        out.push(answer);
    }
    (out, now)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_restored_store_decides_as_the_original(
        before in prop::collection::vec(op(), 0..40),
        after in prop::collection::vec(op(), 1..40),
    ) {
        for limit in limits() {
            let original = MemoryStore::new(MemoryConfig::default());
            let (_, now) = run(&original, &limit, 1_000 * MS, &before);
            let bytes = original.snapshot(now);
            let restored = MemoryStore::from_snapshot(MemoryConfig::default(), &bytes, now).unwrap();
            prop_assert_eq!(restored.seed(), original.seed());
            let (expected, _) = run(&original, &limit, now, &after);
            let (got, _) = run(&restored, &limit, now, &after);
            prop_assert_eq!(got, expected, "{}", limit);
        }
    }
}

#[test]
fn several_limits_and_many_keys_survive() {
    let store = MemoryStore::new(MemoryConfig::default());
    let per_second = store
        .limiter(&Limit::new(
            AlgorithmName::FixedWindow,
            Rate::per_second(10).unwrap(),
        ))
        .unwrap();
    let per_day = store
        .limiter(&Limit::new(
            AlgorithmName::SlidingWindowLog,
            Rate::new(1_000, Duration::from_secs(86_400)).unwrap(),
        ))
        .unwrap();
    for key in 0..10_000u32 {
        per_second.check(&key.to_le_bytes(), 0, 3).unwrap();
        per_day.check(&key.to_le_bytes(), 0, 7).unwrap();
    }
    let restored =
        MemoryStore::from_snapshot(MemoryConfig::default(), &store.snapshot(0), 0).unwrap();
    assert_eq!(restored.len(), 20_000);
    let key = 4_242u32.to_le_bytes();
    let limit = Limit::new(
        AlgorithmName::SlidingWindowLog,
        Rate::new(1_000, Duration::from_secs(86_400)).unwrap(),
    );
    assert_eq!(
        restored
            .limiter(&limit)
            .unwrap()
            .check(&key, 0, 0)
            .unwrap()
            .remaining,
        993
    );
}

#[test]
fn a_snapshot_respects_the_new_memory_cap() {
    let store = MemoryStore::new(MemoryConfig::default());
    let limiter = store
        .limiter(&Limit::new(
            AlgorithmName::Gcra,
            Rate::per_minute(10).unwrap(),
        ))
        .unwrap();
    for key in 0..200_000u32 {
        limiter.check(&key.to_le_bytes(), 0, 1).unwrap();
    }
    let small = MemoryConfig {
        max_bytes: 1 << 20,
        ..MemoryConfig::default()
    };
    let restored = MemoryStore::from_snapshot(small, &store.snapshot(0), 0).unwrap();
    assert!(
        restored.memory_used() <= (1 << 20) + (1 << 16),
        "{}",
        restored.memory_used()
    );
    assert!(restored.len() < 200_000);
}
