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
use tollgate_core::{
    AlgorithmName, Decision, Limit, LimitKey, Moment, MultiReservation, Rate, Store,
};
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
    let ms = Duration::from_millis;
    let mut out = Vec::new();
    // Each algorithm the script runs joins this list.
    let ported: &[AlgorithmName] = &[Gcra, SlidingWindowLog, SlidingWindowCounter];
    for &algorithm in ported {
        match algorithm {
            Gcra => {
                out.push(Limit::new(algorithm, rate(3, s(1))));
                out.push(Limit::new(algorithm, rate(10, s(1))).with_burst(4));
                out.push(Limit::new(algorithm, rate(7, s(3600))));
                out.push(Limit::new(algorithm, rate(1000, s(86_400))).with_burst(50));
                out.push(Limit::new(algorithm, rate(5, s(900))));
                out.push(Limit::new(algorithm, rate(1_000_000_007, s(1))).with_burst(3));
            }
            SlidingWindowLog | SlidingWindowCounter => {
                out.push(Limit::new(algorithm, rate(3, s(1))));
                out.push(Limit::new(algorithm, rate(7, s(3600))));
                out.push(Limit::new(algorithm, rate(1000, s(86_400))));
                out.push(Limit::new(algorithm, rate(5, s(900))));
                // N does not divide P; tiny and odd.
                out.push(Limit::new(algorithm, rate(7, ms(1001))));
                out.push(Limit::new(algorithm, rate(1, ms(1))));
                out.push(Limit::new(algorithm, rate(97, ms(3))));
                out.push(Limit::new(algorithm, rate(4_000_000_000, s(7))));
                // The log's widths at their edges: P of exactly 10^7 ns and
                // N of 10^7; P beyond 10^14 ns.
                out.push(Limit::new(algorithm, rate(10_000_000, ms(10))));
                out.push(Limit::new(algorithm, rate(3, s(200_000))));
            }
            _ => unreachable!("not ported: {algorithm:?}"),
        }
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

/// One limit on one key through both stores: every call must give the same
/// result in both, and the Redis store's is returned.
struct Twin<'r> {
    runtime: &'r tokio::runtime::Runtime,
    memory: LocalStore,
    redis: RedisStore,
    limit: Limit,
}

impl<'r> Twin<'r> {
    fn new(
        runtime: &'r tokio::runtime::Runtime,
        server: &RedisServer,
        namespace: &str,
        limit: Limit,
    ) -> Twin<'r> {
        let (memory, redis) = stores(server, namespace);
        Twin {
            runtime,
            memory,
            redis,
            limit,
        }
    }

    fn request(&self) -> LimitKey<'_> {
        LimitKey {
            limit: &self.limit,
            key: b"k",
        }
    }

    fn check(&self, at: u64, cost: u64) -> Decision {
        let request = [self.request()];
        let (expected, got) = self.runtime.block_on(async {
            (
                self.memory.check(&request, Moment::At(at), cost).await,
                self.redis.check(&request, Moment::At(at), cost).await,
            )
        });
        assert_eq!(
            format!("{expected:?}"),
            format!("{got:?}"),
            "check {cost} at {at}"
        );
        got.unwrap().remove(0)
    }

    fn reserve(&self, at: u64, cost: u64, max_wait: Option<u64>) -> MultiReservation {
        let request = [self.request()];
        let max_wait = max_wait.map(Duration::from_nanos);
        let (expected, got) = self.runtime.block_on(async {
            (
                self.memory
                    .reserve(&request, Moment::At(at), cost, max_wait)
                    .await,
                self.redis
                    .reserve(&request, Moment::At(at), cost, max_wait)
                    .await,
            )
        });
        assert_eq!(
            format!("{expected:?}"),
            format!("{got:?}"),
            "reserve {cost} at {at}"
        );
        got.unwrap()
    }

    fn next(&self, at: u64, cost: u64) -> u64 {
        let (expected, got) = self.runtime.block_on(async {
            (
                self.memory
                    .next_available(self.request(), Moment::At(at), cost)
                    .await,
                self.redis
                    .next_available(self.request(), Moment::At(at), cost)
                    .await,
            )
        });
        assert_eq!(
            format!("{expected:?}"),
            format!("{got:?}"),
            "next {cost} at {at}"
        );
        got.unwrap()
    }
}

const NS: fn(u64) -> Duration = Duration::from_nanos;

#[test]
fn sliding_log_entry_at_t_minus_p_has_left_the_window() {
    let server = RedisServer::start();
    let runtime = runtime();
    let _context = runtime.enter();
    let p = 1_000_000_007;
    let log = Limit::new(AlgorithmName::SlidingWindowLog, rate(3, NS(p)));
    let twin = Twin::new(&runtime, &server, "log-edge", log);
    let t0 = START;
    assert!(twin.check(t0, 2).allowed);
    assert!(twin.check(t0 + 5, 1).allowed);
    // At t0 + P − 1 the entry at t0 is at t − P + 1: still inside.
    let d = twin.check(t0 + p - 1, 1);
    assert!(!d.allowed);
    assert_eq!((d.remaining, d.retry_after), (0, NS(1)));
    assert_eq!(d.reset_after, NS(5 + 1));
    assert_eq!(twin.next(t0 + 1, 1), t0 + p);
    assert_eq!(twin.next(t0 + 1, 3), t0 + 5 + p);
    // At t0 + P it is at t − P: gone, and its cost with it.
    assert_eq!(twin.check(t0 + p, 0).remaining, 2);
    assert!(twin.check(t0 + p, 2).allowed);
    let d = twin.check(t0 + p, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, NS(5));
    // The entry at t0 + 5 goes at t0 + 5 + P, not a nanosecond earlier.
    assert!(!twin.check(t0 + 5 + p - 1, 1).allowed);
    assert!(twin.check(t0 + 5 + p, 1).allowed);
}

#[test]
fn sliding_log_weighted_costs_fill_it_exactly() {
    let server = RedisServer::start();
    let runtime = runtime();
    let _context = runtime.enter();
    let p = 1_001_000_000;
    let log = Limit::new(AlgorithmName::SlidingWindowLog, rate(7, NS(p)));
    let twin = Twin::new(&runtime, &server, "log-fill", log);
    let t0 = START + 3;
    // Two requests at one instant share an entry: 1 + 2 at t0, 4 at t0 + 1.
    assert_eq!(twin.check(t0, 1).remaining, 6);
    assert_eq!(twin.check(t0, 2).remaining, 4);
    let d = twin.check(t0 + 1, 4);
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (0, NS(p)));
    let d = twin.check(t0 + 2, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, NS(p - 2));
    // The whole capacity needs every entry gone.
    assert_eq!(twin.next(t0 + 2, 7), t0 + 1 + p);
    assert_eq!(twin.next(t0 + 2, 3), t0 + p);
    assert_eq!(twin.next(t0 + 2, 4), t0 + 1 + p);
    // At t0 + P the merged entry (3) has left, the 4 has not.
    assert!(!twin.check(t0 + p, 4).allowed);
    let d = twin.check(t0 + p, 3);
    assert!(d.allowed);
    assert_eq!(d.remaining, 0);
    let d = twin.check(t0 + p, 1);
    assert_eq!((d.allowed, d.retry_after), (false, NS(1)));
    assert_eq!(twin.next(t0 + p, 7), t0 + 2 * p);
    let d = twin.check(t0 + 1 + p, 4);
    assert_eq!((d.allowed, d.remaining), (true, 0));
}

/// The Redis log keeps each mark's instant and total modulo 10^7 when P is
/// at most 10 ms and N below 10^7: marks on both sides of a multiple of
/// 10^7, in instants and in totals, read back exactly.
#[test]
fn sliding_log_marks_across_a_wrap_of_their_residues() {
    let server = RedisServer::start();
    let runtime = runtime();
    let _context = runtime.enter();
    let (n, p) = (9_999_999, 10_000_000);
    let log = Limit::new(AlgorithmName::SlidingWindowLog, rate(n, NS(p)));
    let twin = Twin::new(&runtime, &server, "log-wrap", log);
    assert_eq!(START % 10_000_000, 0);
    let t0 = START - 3;
    assert!(twin.check(t0, 6_000_000).allowed);
    assert_eq!(twin.check(t0 + 5, 3_999_999).remaining, 0);
    let d = twin.check(t0 + 6, 1);
    assert_eq!((d.allowed, d.retry_after), (false, NS(p - 6)));
    assert_eq!(twin.next(t0 + 6, 4_000_000), t0 + p);
    assert_eq!(twin.next(t0 + 6, 6_000_001), t0 + 5 + p);
    // Totals 9,999,999 then 15,999,999.
    assert!(twin.check(t0 + p, 6_000_000).allowed);
    let d = twin.check(t0 + p + 1, 1);
    assert_eq!((d.allowed, d.retry_after), (false, NS(4)));
    assert_eq!(twin.next(t0 + p + 1, n), t0 + 2 * p);
    assert!(!twin.check(t0 + 4 + p, 3_999_999).allowed);
    assert!(twin.check(t0 + 5 + p, 3_999_999).allowed);
    assert_eq!(twin.check(t0 + 5 + p, 0).remaining, 0);
}

#[test]
fn sliding_counter_weighs_the_previous_window_with_the_floor() {
    let server = RedisServer::start();
    let runtime = runtime();
    let _context = runtime.enter();
    let (n, p) = (7u64, 1_000_000_007u64);
    let counter = Limit::new(AlgorithmName::SlidingWindowCounter, rate(n, NS(p)));
    let twin = Twin::new(&runtime, &server, "counter-floor", counter);
    // w: the start of a window; 5 counted in the one before.
    let w = (START / p + 1) * p;
    assert!(twin.check(w - p + 11, 5).allowed);
    let estimate = |e: u64| u64::try_from(5 * u128::from(p - e) / u128::from(p)).unwrap();
    let fractions = [0, 1, p / 5, p / 5 + 1, p / 3, p / 2, 2 * p / 3, p - 1];
    for e in fractions.into_iter().chain([200_000_001, 200_000_002]) {
        assert_eq!(twin.check(w + e, 0).remaining, n - estimate(e), "at {e}");
    }
    // 5 × (P − e) / P crosses 4 between e = 200000001 and 200000002.
    assert_eq!((estimate(200_000_001), estimate(200_000_002)), (4, 3));
    assert_eq!(twin.next(w, 4), w + 200_000_002);
    let d = twin.check(w + 200_000_001, 4);
    assert_eq!((d.allowed, d.remaining, d.retry_after), (false, 3, NS(1)));
    let d = twin.check(w + 200_000_002, 4);
    assert_eq!((d.allowed, d.remaining), (true, 0));
    // Now prev 5, curr 4: room for 1 once floor(5 × (P − e) / P) ≤ 2,
    // from e = ⌊2P/5⌋ + 1.
    let e = 2 * p / 5 + 1;
    assert_eq!(estimate(e - 1), 3);
    assert_eq!(admitted_exactly_at(&twin, w + 1, 1), w + e);
}

/// The instant `next_available` returns from `from` for `cost`, checked
/// exact: a check 1 ns earlier is rejected and told to retry 1 ns later, a
/// check then is admitted (and counted).
fn admitted_exactly_at(twin: &Twin<'_>, from: u64, cost: u64) -> u64 {
    let at = twin.next(from, cost);
    if at > from {
        let d = twin.check(at - 1, cost);
        assert_eq!((d.allowed, d.retry_after), (false, NS(1)), "at {at} − 1");
    }
    assert!(twin.check(at, cost).allowed, "at {at}");
    at
}

/// Fills the limit of n at t0; then reservations land where
/// `next_available` says and wait exactly as long (a max_wait 1 ns short
/// books nothing), and what they book is waited for.
fn reservations_land_exactly(twin: &Twin<'_>, t0: u64, n: u64) {
    assert!(twin.check(t0, n).allowed);
    let at = t0 + 1;
    let slot = twin.next(at, 1);
    assert!(slot > at);
    let refused = twin.reserve(at, 1, Some(slot - at - 1));
    assert!(!refused.booked);
    assert_eq!((refused.wait, refused.retry_after), (NS(slot - at), NS(1)));
    let booked = twin.reserve(at, 1, Some(slot - at));
    assert!(booked.booked);
    assert_eq!(booked.wait, NS(slot - at));
    // Plain checks queue behind the booked request.
    assert!(!twin.check(slot - 1, 1).allowed);
    let next = admitted_exactly_at(twin, at, 1);
    assert!(next >= slot);
    // The whole capacity, booked ahead.
    let queued = twin.reserve(next, n, None);
    assert!(queued.booked && queued.wait > Duration::ZERO);
    let then = next + u64::try_from(queued.wait.as_nanos()).unwrap();
    assert!(!twin.check(then - 1, 1).allowed);
    assert!(admitted_exactly_at(twin, then, 1) > then);
}

#[test]
fn sliding_log_reservations_land_exactly() {
    let server = RedisServer::start();
    let runtime = runtime();
    let _context = runtime.enter();
    let log = Limit::new(AlgorithmName::SlidingWindowLog, rate(3, NS(1_000_000_007)));
    let twin = Twin::new(&runtime, &server, "log-reserve", log);
    reservations_land_exactly(&twin, START, 3);
}

#[test]
fn sliding_counter_reservations_land_exactly() {
    let server = RedisServer::start();
    let runtime = runtime();
    let _context = runtime.enter();
    let p = 1_000_000_007;
    let counter = Limit::new(AlgorithmName::SlidingWindowCounter, rate(7, NS(p)));
    let twin = Twin::new(&runtime, &server, "counter-reserve", counter);
    let w = (START / p + 1) * p;
    reservations_land_exactly(&twin, w, 7);
    // The window after a full one: its weight leaves 1 free after 1 ns.
    let twin = Twin::new(&runtime, &server, "counter-reserve-2", twin.limit);
    assert!(twin.check(w, 7).allowed);
    assert_eq!(twin.next(w + 1, 1), w + p + 1);
}

/// Server-side microseconds per script call since the last `CONFIG RESETSTAT`.
fn usec_per_call(server: &RedisServer) -> f64 {
    let info = server.command("INFO commandstats").unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .unwrap();
    let field = line
        .split(',')
        .find(|f| f.starts_with("usec_per_call="))
        .unwrap();
    field["usec_per_call=".len()..].parse().unwrap()
}

/// What one decision costs on a full log of 10,000 (10,000/day) against
/// one of gcra, in Redis's own accounting of script time. Prints figures:
/// `cargo test -p tollgate-redis --test conformance -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn full_log_decision_cost_against_gcra() {
    let server = RedisServer::start();
    let runtime = runtime();
    let _context = runtime.enter();
    let (_, redis) = stores(&server, "cost");
    let day = Duration::from_secs(86_400);
    let p = 86_400_000_000_000;
    let log = Limit::new(AlgorithmName::SlidingWindowLog, rate(10_000, day));
    let gcra = Limit::new(AlgorithmName::Gcra, rate(10_000, day));
    let rounds = 500;
    let run = |limit: &Limit, at: &dyn Fn(u64) -> u64, expect: bool| -> f64 {
        let request = [LimitKey { limit, key: b"k" }];
        server.command("CONFIG RESETSTAT");
        for i in 0..rounds {
            let d = runtime
                .block_on(redis.check(&request, Moment::At(at(i)), 1))
                .unwrap();
            assert_eq!(d[0].allowed, expect);
        }
        usec_per_call(&server)
    };
    let fill = run(&log, &|i| START + i, true);
    let request = [LimitKey {
        limit: &log,
        key: b"k",
    }];
    for i in rounds..10_000 {
        let d = runtime
            .block_on(redis.check(&request, Moment::At(START + i), 1))
            .unwrap();
        assert!(d[0].allowed);
    }
    let keys = server.command("KEYS conformance:cost:*").unwrap();
    let key = keys.lines().nth(2).unwrap();
    let bytes = server
        .command(&format!(
            "HSTRLEN {key} \"sliding_window_log 10000 {p} - - -\""
        ))
        .unwrap();
    let bytes: u64 = bytes.trim().trim_start_matches(':').parse().unwrap();
    let rejected = run(&log, &|i| START + 10_000 + i, false);
    // Each admits one as the oldest leaves: the whole log is rewritten.
    let admitted = run(&log, &|i| START + p + i, true);
    let gcra_us = run(&gcra, &|i| START + i, true);
    println!(
        "µs per decision: gcra {gcra_us:.1}; log of 10,000 ({bytes} bytes): rejected \
         {rejected:.1} ({:.1}×), admitted {admitted:.1} ({:.1}×); first {rounds} fills {fill:.1}",
        rejected / gcra_us,
        admitted / gcra_us,
    );
}
