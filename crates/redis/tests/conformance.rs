//! The conformance suite: the same operations, at the same explicit
//! instants, through the memory store and through the Redis store (a real
//! `redis-server` this test starts) give identical results — decisions,
//! reservations, next-available instants and errors.
//!
//! Random traces (proptest) mix every algorithm the script runs, several
//! limits per check, shared keys, costs from peeks to over-capacity, and
//! time steps from nanoseconds to several periods.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::{AlgorithmName, Limit, LimitKey, Moment, Rate, Store};
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_redis::{RedisConfig, RedisStore};
use tollgate_testkit::RedisServer;

/// 2025-11-13, in ns: realistic epoch magnitudes exercise the script's
/// big-number arithmetic.
const START: u64 = 1_763_000_000_000_000_000;

fn rate(n: u64, period: Duration) -> Rate {
    Rate::new(n, period).unwrap()
}

/// The limits traces draw from.
fn limits() -> Vec<Limit> {
    use AlgorithmName::*;
    let s = Duration::from_secs;
    let mut out = Vec::new();
    // Each algorithm the script runs joins this list.
    let ported: &[AlgorithmName] = &[Gcra];
    for &algorithm in ported {
        out.push(Limit::new(algorithm, rate(3, s(1))));
        out.push(Limit::new(algorithm, rate(10, s(1))).with_burst(4));
        out.push(Limit::new(algorithm, rate(7, s(3600))));
        out.push(Limit::new(algorithm, rate(1000, s(86_400))).with_burst(50));
        out.push(Limit::new(algorithm, rate(5, s(900))));
        out.push(Limit::new(algorithm, rate(1_000_000_007, s(1))).with_burst(3));
    }
    out
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A fresh pair of stores; the Redis one in its own key namespace.
fn stores(server: &RedisServer, namespace: &str) -> (LocalStore, RedisStore) {
    let memory = LocalStore::system(MemoryStore::new(MemoryConfig::default()));
    let config = RedisConfig {
        key_prefix: format!("conformance:{namespace}:"),
        timeout: Duration::from_secs(5),
        // Explicit instants never meet Redis's clock; keep every key alive
        // for the whole run however slow the machine is.
        ttl_grace: Duration::from_secs(3600),
        ..RedisConfig::default()
    };
    let redis = RedisStore::open(&server.url().parse().unwrap(), config).unwrap();
    (memory, redis)
}

#[derive(Debug, Clone)]
enum Op {
    Check {
        cells: Vec<(usize, u8)>,
        cost: u64,
    },
    Reserve {
        cells: Vec<(usize, u8)>,
        cost: u64,
        max_wait: Option<u64>,
    },
    Next {
        cell: (usize, u8),
        cost: u64,
    },
}

#[derive(Debug, Clone)]
struct Step {
    advance: u64,
    op: Op,
}

fn cell(limits: usize) -> impl Strategy<Value = (usize, u8)> + Clone {
    (0..limits, 0u8..3)
}

fn step(limits: usize) -> impl Strategy<Value = Step> {
    let advance = prop_oneof![
        3 => Just(0u64),
        4 => 0u64..2_000_000_000,
        1 => 0u64..400_000_000_000_000,
        1 => 0u64..10,
    ];
    let cost = prop_oneof![1 => Just(0u64), 6 => 1u64..4, 1 => 1u64..80];
    let cells = proptest::collection::vec(cell(limits), 1..4);
    let op = prop_oneof![
        6 => (cells.clone(), cost.clone()).prop_map(|(cells, cost)| Op::Check { cells, cost }),
        2 => (cells, cost.clone(), proptest::option::of(0u64..5_000_000_000))
            .prop_map(|(cells, cost, max_wait)| Op::Reserve { cells, cost, max_wait }),
        1 => (cell(limits), cost).prop_map(|(cell, cost)| Op::Next { cell, cost }),
    ];
    (advance, op).prop_map(|(advance, op)| Step { advance, op })
}

const KEYS: [&[u8]; 3] = [b"alice", b"bob", b"{carol}"];

/// Runs one step on a store; the result, formatted for comparison.
async fn apply<S: Store>(store: &S, limits: &[Limit], now: u64, op: &Op) -> String {
    let requests = |cells: &[(usize, u8)]| -> Vec<LimitKey<'_>> {
        cells
            .iter()
            .map(|&(l, k)| LimitKey {
                limit: &limits[l],
                key: KEYS[usize::from(k)],
            })
            .collect()
    };
    let at = Moment::At(now);
    match op {
        Op::Check { cells, cost } => {
            format!("{:?}", store.check(&requests(cells), at, *cost).await)
        }
        Op::Reserve {
            cells,
            cost,
            max_wait,
        } => format!(
            "{:?}",
            store
                .reserve(
                    &requests(cells),
                    at,
                    *cost,
                    max_wait.map(Duration::from_nanos)
                )
                .await
        ),
        Op::Next { cell, cost } => {
            let request = requests(std::slice::from_ref(cell))[0];
            format!("{:?}", store.next_available(request, at, *cost).await)
        }
    }
}

#[test]
fn random_traces_decide_alike_in_memory_and_in_redis() {
    let server = RedisServer::start();
    let runtime = runtime();
    let _context = runtime.enter();
    let limits = limits();
    let case = std::sync::atomic::AtomicU32::new(0);
    let config = ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(steps in proptest::collection::vec(step(limits.len()), 1..60))| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (memory, redis) = stores(&server, &format!("trace{n}"));
        let mut now = START;
        for (i, step) in steps.iter().enumerate() {
            now += step.advance;
            let (expected, got) = runtime.block_on(async {
                (
                    apply(&memory, &limits, now, &step.op).await,
                    apply(&redis, &limits, now, &step.op).await,
                )
            });
            prop_assert_eq!(&expected, &got, "step {} {:?} at {}", i, step.op, now);
        }
    });
}

#[test]
fn redis_time_decides_when_no_instant_is_given() {
    let server = RedisServer::start();
    let runtime = runtime();
    let _context = runtime.enter();
    let (_, redis) = stores(&server, "time");
    let limit = Limit::new(AlgorithmName::Gcra, rate(1, Duration::from_secs(3600)));
    let request = [LimitKey {
        limit: &limit,
        key: b"k",
    }];
    runtime.block_on(async {
        let now = redis.now().await.unwrap();
        let system = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(
            now.abs_diff(system) < 5_000_000_000,
            "Redis TIME {now} vs {system}"
        );
        let first = redis.check(&request, Moment::Now, 1).await.unwrap();
        assert!(first[0].allowed);
        let second = redis.check(&request, Moment::Now, 1).await.unwrap();
        assert!(!second[0].allowed);
        // The wait is measured from Redis's clock: just under an hour.
        let wait = second[0].retry_after;
        assert!(
            wait > Duration::from_secs(3590) && wait <= Duration::from_secs(3600),
            "{wait:?}"
        );
    });
}
