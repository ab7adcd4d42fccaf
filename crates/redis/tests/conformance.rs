//! The conformance suite: the same operations, at the same explicit
//! instants, through the memory store and through the Redis store on both
//! of its engines — the Lua script and tollgate's Redis module, on a real
//! `redis-server` this test starts with the module loaded — give identical
//! results: decisions, reservations, next-available instants, recorded
//! usage and errors; and the two engines leave the same states and TTLs
//! (`support::engines`).
//!
//! Random traces (proptest) mix every algorithm the script runs, with and
//! without a ban, several limits per check, shared keys, costs from peeks
//! to over-capacity, records (usage merged over the limit, in and out of
//! order, up to `u64::MAX`) on every algorithm, settles of earlier
//! admissions (refunds and charges into debt, soon or windows later) and
//! of admissions nothing counted, and time steps from nanoseconds to
//! several periods.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::ban::Ban;
use tollgate_core::{
    AlgorithmName, AnyAlgorithm, Decision, Limit, LimitKey, Moment, MultiReservation, Rate, Store,
};
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_testkit::RedisServer;

mod support;
use support::engines::Engines;

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
    // The longest period a rate takes (about 146 years): a few reservations
    // reach u64::MAX, where every instant saturates.
    let longest = Duration::from_nanos(1 << 62);
    let ms = Duration::from_millis;
    let mut out = Vec::new();
    // Each algorithm the script runs joins this list.
    let ported: &[AlgorithmName] = &[
        Gcra,
        TokenBucket,
        LeakyBucket,
        FixedWindow,
        SlidingWindowLog,
        SlidingWindowCounter,
        SteppedWindow,
        Concurrency,
    ];
    for &algorithm in ported {
        let limit = |n, period| Limit::new(algorithm, rate(n, period));
        match algorithm {
            SteppedWindow => {
                out.extend([
                    // Default steps: 10 ms, 1 s, 60 s, 1 s, 100 ms.
                    limit(3, s(1)),
                    limit(7, s(3600)),
                    limit(1000, s(86_400)),
                    limit(5, s(900)),
                    limit(20, s(30)),
                    // Steps that divide P, and steps that do not.
                    limit(10, s(4)).with_step(s(1)),
                    limit(5, ms(4500)).with_step(s(1)),
                    limit(4, ms(7001)).with_step(ms(3)),
                    limit(2, ms(10)).with_step(ms(1)),
                    limit(1, s(2)).with_step(s(2)),
                    limit(50, s(1)).with_step(ms(300)),
                ]);
                continue;
            }
            // The period plays no part.
            Concurrency => {
                out.extend([
                    limit(3, s(1)),
                    limit(1, s(1)).with_lease_ttl(ms(1)),
                    limit(5, s(1)).with_lease_ttl(s(2)),
                    limit(100, s(1)).with_lease_ttl(ms(500)),
                    limit(2, s(60)).with_lease_ttl(s(3600)),
                ]);
                continue;
            }
            SlidingWindowLog | SlidingWindowCounter => {
                out.extend([
                    limit(3, s(1)),
                    limit(7, s(3600)),
                    limit(1000, s(86_400)),
                    limit(5, s(900)),
                    // N does not divide P; tiny and odd.
                    limit(7, ms(1001)),
                    limit(1, ms(1)),
                    limit(97, ms(3)),
                    limit(4_000_000_000, s(7)),
                    // The log's widths at their edges: P of exactly 10^7 ns
                    // and N of 10^7; P beyond 10^14 ns.
                    limit(10_000_000, ms(10)),
                    limit(3, s(200_000)),
                ]);
                continue;
            }
            _ => {}
        }
        out.push(limit(3, s(1)));
        out.push(limit(7, s(3600)));
        out.push(limit(5, s(900)));
        match algorithm {
            Gcra | TokenBucket | LeakyBucket => {
                out.push(limit(10, s(1)).with_burst(4));
                out.push(limit(1000, s(86_400)).with_burst(50));
                out.push(limit(1_000_000_007, s(1)).with_burst(3));
                out.push(limit(3, Duration::from_millis(1)).with_burst(5));
                out.push(limit(7, Duration::from_millis(10)).with_burst(1));
            }
            _ => {
                out.push(limit(1000, s(86_400)));
                out.push(limit(1, Duration::from_millis(1)));
                out.push(limit(7, Duration::from_millis(10)));
                out.push(limit(4, s(7)));
                out.push(limit(100, s(60)));
            }
        }
        match algorithm {
            Gcra | TokenBucket | LeakyBucket => {
                out.push(limit(1, longest));
                out.push(limit(2, longest).with_burst(3));
            }
            FixedWindow => out.push(limit(2, longest)),
            _ => {}
        }
    }
    // Token buckets whose capacity in units overflows a 64-bit count (wide
    // storage): a realistic one that never runs dry in a trace, and a tiny
    // one that does.
    out.push(Limit::new(TokenBucket, rate(1_000_003, s(604_800))));
    out.push(Limit::new(TokenBucket, rate(1, longest)).with_burst(3));
    let wide = |l: &Limit| matches!(l.build(), Ok(AnyAlgorithm::WideTokenBucket(_)));
    assert_eq!(out.iter().filter(|l| wide(l)).count(), 2);
    assert!(out[out.len() - 2..].iter().all(wide));
    // Limits with a ban: strikes, bans in force, reservations landing
    // after them; a ban alone on its limit and a ban beside the same limit
    // without one.
    let ban = |after, within, duration| Ban::new(after, within, duration).unwrap();
    out.extend([
        Limit::new(Gcra, rate(3, s(1))).with_ban(ban(2, s(10), s(30))),
        Limit::new(FixedWindow, rate(3, s(1))).with_ban(ban(1, ms(1), ms(1500))),
        Limit::new(SlidingWindowLog, rate(2, s(1))).with_ban(ban(3, s(5), s(3600))),
        Limit::new(LeakyBucket, rate(10, s(1)))
            .with_burst(4)
            .with_ban(ban(2, ms(200), ms(700))),
        Limit::new(SteppedWindow, rate(10, s(4)))
            .with_step(s(1))
            .with_ban(ban(2, s(2), s(5))),
        Limit::new(Concurrency, rate(1, s(1))).with_ban(ban(2, s(60), s(2))),
    ]);
    out
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A fresh memory store and Redis store on both engines, in its own key
/// namespace.
fn stores(server: &RedisServer, namespace: &str) -> (LocalStore, Engines) {
    let memory = LocalStore::system(MemoryStore::new(MemoryConfig::default()));
    (memory, Engines::open(server, namespace))
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
    /// A call already made, `back` ns before now (out of order when > 0).
    Record {
        cell: (usize, u8),
        cost: u64,
        back: u64,
    },
    Release {
        cell: (usize, u8),
        lease: Pick,
    },
    /// Settles an admission with its `actual` cost.
    Settle {
        cell: (usize, u8),
        actual: u64,
        of: Admission,
    },
}

/// Which admission a settle names.
#[derive(Debug, Clone)]
enum Admission {
    /// One an earlier check counted (the i-th, modulo their number), on
    /// its own limit and key, with its estimate.
    Taken(usize),
    /// One on the settle's cell that nothing counted, `back` ns before now
    /// (or one that was, by chance).
    Made { back: u64, estimate: u64 },
}

/// Which lease a release names.
#[derive(Debug, Clone)]
enum Pick {
    /// A lease an earlier check took (the i-th, modulo their number), on
    /// its own limit and key.
    Taken(usize),
    /// A lease an earlier check took, on the release's cell (maybe not its
    /// own).
    Elsewhere(usize),
    /// An id nothing handed out (most likely).
    Bogus(u64),
}

#[derive(Debug, Clone)]
struct Step {
    advance: u64,
    op: Op,
}

fn cell(limits: usize) -> impl Strategy<Value = (usize, u8)> + Clone {
    (0..limits, 0u8..3)
}

/// A cell on one of `limits` (indices into the list).
fn cell_of(limits: Vec<usize>) -> impl Strategy<Value = (usize, u8)> + Clone {
    (proptest::sample::select(limits), 0u8..3)
}

/// The indices of `algorithm`'s limits.
fn indices(limits: &[Limit], algorithm: AlgorithmName) -> Vec<usize> {
    (0..limits.len())
        .filter(|&i| limits[i].algorithm == algorithm)
        .collect()
}

fn step(limits: &[Limit]) -> impl Strategy<Value = Step> {
    let n = limits.len();
    let leased = cell_of(indices(limits, AlgorithmName::Concurrency));
    let advance = prop_oneof![
        3 => Just(0u64),
        4 => 0u64..2_000_000_000,
        1 => 0u64..400_000_000_000_000,
        1 => 0u64..10,
    ];
    let cost = prop_oneof![1 => Just(0u64), 6 => 1u64..4, 1 => 1u64..80];
    let cells = proptest::collection::vec(cell(n), 1..4);
    let back = prop_oneof![3 => Just(0u64), 1 => 0u64..5_000_000_000];
    // Merged usage is not bounded by the capacity: records reach far past
    // it, up to the counts' saturation.
    let record_cost = prop_oneof![
        6 => cost.clone(),
        2 => 80u64..10_000,
        1 => prop_oneof![Just(u64::MAX), 1u64 << 62..u64::MAX],
    ];
    let release_cell = prop_oneof![3 => leased, 1 => cell(n)];
    // Actual costs from nothing used to far more than estimated (a charge
    // into debt, up to the counts' saturation).
    let actual = prop_oneof![
        2 => Just(0u64),
        6 => 0u64..4,
        2 => 0u64..80,
        1 => 80u64..10_000,
        1 => Just(u64::MAX),
    ];
    let admission = prop_oneof![
        4 => any::<usize>().prop_map(Admission::Taken),
        1 => (prop_oneof![0u64..5_000_000_000, 0u64..400_000_000_000_000], 0u64..80)
            .prop_map(|(back, estimate)| Admission::Made { back, estimate }),
    ];
    let pick = prop_oneof![
        4 => any::<usize>().prop_map(Pick::Taken),
        1 => any::<usize>().prop_map(Pick::Elsewhere),
        1 => prop_oneof![any::<u64>(), START..START + 1_000_000_000_000]
            .prop_map(Pick::Bogus),
    ];
    let op = prop_oneof![
        6 => (cells.clone(), cost.clone()).prop_map(|(cells, cost)| Op::Check { cells, cost }),
        2 => (cells, cost.clone(), proptest::option::of(0u64..5_000_000_000))
            .prop_map(|(cells, cost, max_wait)| Op::Reserve { cells, cost, max_wait }),
        1 => (cell(n), cost.clone()).prop_map(|(cell, cost)| Op::Next { cell, cost }),
        2 => (cell(n), record_cost, back)
            .prop_map(|(cell, cost, back)| Op::Record { cell, cost, back }),
        2 => (release_cell, pick).prop_map(|(cell, lease)| Op::Release { cell, lease }),
        3 => (cell(n), actual, admission)
            .prop_map(|(cell, actual, of)| Op::Settle { cell, actual, of }),
    ];
    (advance, op).prop_map(|(advance, op)| Step { advance, op })
}

const KEYS: [&[u8]; 3] = [b"alice", b"bob", b"{carol}"];

/// What a check handed out: a lease (its cell and its id), or an
/// admission to settle (its cell, instant and counted cost).
#[derive(Debug, Clone, Copy)]
enum Taken {
    Lease((usize, u8), u64),
    Admitted((usize, u8), u64, u64),
}

/// Runs one step on a store; the result, formatted for comparison, and the
/// leases it took.
async fn apply<S: Store>(
    store: &S,
    limits: &[Limit],
    now: u64,
    op: &Op,
    taken: &[Taken],
) -> (String, Vec<Taken>) {
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
    let mut took = Vec::new();
    let text = match op {
        Op::Check { cells, cost } => {
            let result = store.check(&requests(cells), at, *cost).await;
            if let Ok(decisions) = &result {
                for (cell, decision) in cells.iter().zip(decisions) {
                    if let Some(lease) = decision.lease {
                        took.push(Taken::Lease(*cell, lease));
                    }
                }
                if *cost > 0 && decisions.iter().all(|d| d.allowed) {
                    // Each distinct cell counted its cost as many times as
                    // the check named it.
                    for (i, cell) in cells.iter().enumerate() {
                        if !cells[..i].contains(cell) {
                            let times = cells.iter().filter(|c| *c == cell).count() as u64;
                            took.push(Taken::Admitted(*cell, now, cost * times));
                        }
                    }
                }
            }
            format!("{result:?}")
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
        Op::Record { cell, cost, back } => {
            let request = requests(std::slice::from_ref(cell))[0];
            let at = Moment::At(now - back);
            format!("{:?}", store.record(request, at, *cost).await)
        }
        Op::Release { cell, lease } => {
            let leases: Vec<((usize, u8), u64)> = taken
                .iter()
                .filter_map(|t| match *t {
                    Taken::Lease(cell, id) => Some((cell, id)),
                    Taken::Admitted(..) => None,
                })
                .collect();
            let (cell, id) = match (lease, leases.as_slice()) {
                (Pick::Taken(i), [_, ..]) => leases[i % leases.len()],
                (Pick::Elsewhere(i), [_, ..]) => (*cell, leases[i % leases.len()].1),
                (Pick::Bogus(id), _) => (*cell, *id),
                (_, []) => (*cell, now),
            };
            let request = requests(&[cell])[0];
            format!("{id} {:?}", store.release(request, id).await)
        }
        Op::Settle { cell, actual, of } => {
            let admitted: Vec<((usize, u8), u64, u64)> = taken
                .iter()
                .filter_map(|t| match *t {
                    Taken::Admitted(cell, at, estimate) => Some((cell, at, estimate)),
                    Taken::Lease(..) => None,
                })
                .collect();
            let (cell, admitted_at, estimate) = match (of, admitted.as_slice()) {
                (Admission::Taken(i), [_, ..]) => admitted[i % admitted.len()],
                (Admission::Made { back, estimate }, _) => {
                    (*cell, now.saturating_sub(*back), *estimate)
                }
                (Admission::Taken(i), []) => (*cell, now, *i as u64 % 5),
            };
            let request = requests(&[cell])[0];
            let settled = store
                .settle(request, admitted_at, at, estimate, *actual)
                .await;
            format!("{cell:?} {admitted_at} {estimate} {settled:?}")
        }
    };
    (text, took)
}

/// Cases per property: `PROPTEST_CASES` when set (more while changing the
/// script), 48 otherwise.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

#[test]
fn random_traces_decide_alike_in_memory_and_in_redis() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let limits = limits();
    let case = std::sync::atomic::AtomicU32::new(0);
    let config = ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(steps in proptest::collection::vec(step(&limits), 1..60))| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (memory, redis) = stores(&server, &format!("trace{n}"));
        let mut now = START;
        let mut taken = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            now += step.advance;
            let ((expected, took), (got, _)) = runtime.block_on(async {
                (
                    apply(&memory, &limits, now, &step.op, &taken).await,
                    apply(&redis, &limits, now, &step.op, &taken).await,
                )
            });
            prop_assert_eq!(&expected, &got, "step {} {:?} at {}", i, step.op, now);
            taken.extend(took);
        }
    });
}

/// Cells of `op` moved onto a few limits and two keys, so that traces
/// build deep states (reservations ahead, queues, full windows) and mix
/// them in multi-limit operations.
fn focused(op: &Op, limits: usize) -> Op {
    let cell = |&(l, k): &(usize, u8)| (l % limits, k % 2);
    match op {
        Op::Check { cells, cost } => Op::Check {
            cells: cells.iter().map(cell).collect(),
            cost: *cost,
        },
        Op::Reserve {
            cells,
            cost,
            max_wait,
        } => Op::Reserve {
            cells: cells.iter().map(cell).collect(),
            cost: *cost,
            max_wait: *max_wait,
        },
        Op::Next { cell: c, cost } => Op::Next {
            cell: cell(c),
            cost: *cost,
        },
        Op::Record {
            cell: c,
            cost,
            back,
        } => Op::Record {
            cell: cell(c),
            cost: *cost,
            back: *back,
        },
        Op::Release { cell: c, lease } => Op::Release {
            cell: cell(c),
            lease: lease.clone(),
        },
        Op::Settle {
            cell: c,
            actual,
            of,
        } => Op::Settle {
            cell: cell(c),
            actual: *actual,
            of: of.clone(),
        },
    }
}

#[test]
fn focused_traces_on_a_few_limits_decide_alike() {
    let all_limits: Vec<usize> = (0..limits().len()).collect();
    focused_traces_decide_alike("focused", all_limits);
}

/// Focused traces on the gcra limits only (one to three in one check),
/// so that the store's lean script (gcra_lean.lua) decides most calls, one
/// cell or several, and hands states booked far ahead to the full one.
#[test]
fn focused_traces_on_gcra_limits_decide_alike() {
    let gcra = indices(&limits(), AlgorithmName::Gcra);
    focused_traces_decide_alike("gcra", gcra);
}

/// Focused traces on the limits with a ban only (alone, or two or three
/// of them in one check), so that strikes pile up, bans start, hold and
/// end, and reservations land after them.
#[test]
fn focused_traces_on_limits_with_a_ban_decide_alike() {
    let all = limits();
    let banned: Vec<usize> = (0..all.len()).filter(|&i| all[i].ban.is_some()).collect();
    focused_traces_decide_alike("banned", banned);
}

/// Random traces on one to three of the limits numbered `choose_from` in
/// [`limits`], decided by the memory store and by Redis alike, step by
/// step; each case's keys under `namespace` and its number.
fn focused_traces_decide_alike(namespace: &str, choose_from: Vec<usize>) {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let all = limits();
    let case = std::sync::atomic::AtomicU32::new(0);
    let config = ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let chosen = proptest::sample::subsequence(choose_from, 1..=3);
    proptest!(config, |(chosen in chosen, steps in proptest::collection::vec(step(&all), 1..80))| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (memory, redis) = stores(&server, &format!("{namespace}{n}"));
        let limits: Vec<Limit> = chosen.iter().map(|&i| all[i]).collect();
        let mut now = START;
        let mut taken = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            now += step.advance;
            let op = focused(&step.op, limits.len());
            let ((expected, took), (got, _)) = runtime.block_on(async {
                (
                    apply(&memory, &limits, now, &op, &taken).await,
                    apply(&redis, &limits, now, &op, &taken).await,
                )
            });
            prop_assert_eq!(&expected, &got, "step {} {:?} at {} on {:?}", i, op, now, limits);
            taken.extend(took);
        }
    });
}

/// A trace proptest once shrank to: a reservation booked at the last
/// instant (2^64 - 1 ns) on a sliding window counter, whose reset the
/// script computed past that instant instead of saturating as the core
/// does.
#[test]
fn a_sliding_counter_booked_at_the_last_instant_resets_there() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let all = limits();
    let (memory, redis) = stores(&server, "last-instant");
    let limits: Vec<Limit> = [1, 9, 55].iter().map(|&i| all[i]).collect();
    let reserve = |cells: Vec<(usize, u8)>, cost| Op::Reserve {
        cells,
        cost,
        max_wait: None,
    };
    let steps = [
        reserve(vec![(1, 0)], 3),
        reserve(vec![(1, 0)], 3),
        reserve(vec![(1, 0)], 2),
        reserve(vec![(1, 0), (2, 0)], 3),
    ];
    let mut taken = Vec::new();
    for op in &steps {
        let ((expected, took), (got, _)) = runtime.block_on(async {
            (
                apply(&memory, &limits, START, op, &taken).await,
                apply(&redis, &limits, START, op, &taken).await,
            )
        });
        assert_eq!(expected, got, "{op:?} on {limits:?}");
        taken.extend(took);
    }
}

/// A record of cost 0 is a read: on a stepped window whose state has
/// expired at its instant it deletes nothing, so an out-of-order record at
/// an earlier instant, where the old step still counts, sees it on every
/// store (found by the random traces).
#[test]
fn a_zero_cost_record_after_expiry_writes_nothing_back() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let limit = Limit::new(
        AlgorithmName::SteppedWindow,
        rate(5, Duration::from_millis(4500)),
    )
    .with_step(Duration::from_secs(1));
    let limits = [limit];
    let (memory, redis) = stores(&server, "zero-record");
    let second = 1_000_000_000;
    // The step [START, START + 1 s) holds 5 and leaves the window at
    // START + 5.5 s.
    let steps = [
        (START, 5, 0),
        (START + 6 * second, 0, 0),
        (START + 6 * second, 0, second),
    ];
    for (now, cost, back) in steps {
        let op = Op::Record {
            cell: (0, 0),
            cost,
            back,
        };
        let ((expected, _), (got, _)) = runtime.block_on(async {
            (
                apply(&memory, &limits, now, &op, &[]).await,
                apply(&redis, &limits, now, &op, &[]).await,
            )
        });
        assert_eq!(expected, got, "{op:?} at {now}");
    }
    let last = runtime.block_on(apply(
        &redis,
        &limits,
        START + 6 * second,
        &Op::Record {
            cell: (0, 0),
            cost: 0,
            back: second,
        },
        &[],
    ));
    assert_eq!(last.0, "Ok(5)");
}

#[test]
fn redis_time_decides_when_no_instant_is_given() {
    let server = RedisServer::start_with_module();
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

/// Both stores side by side: every operation runs on each, the results must
/// be identical, and the memory store's is returned for further checks.
struct Pair {
    runtime: tokio::runtime::Runtime,
    memory: LocalStore,
    redis: Engines,
    _server: RedisServer,
}

impl Pair {
    fn new(namespace: &str) -> Pair {
        let server = RedisServer::start_with_module();
        let runtime = runtime();
        let (memory, redis) = {
            let _context = runtime.enter();
            stores(&server, namespace)
        };
        Pair {
            runtime,
            memory,
            redis,
            _server: server,
        }
    }

    fn alike<T: std::fmt::Debug>(&self, what: &str, expected: T, got: T) -> T {
        assert_eq!(format!("{expected:?}"), format!("{got:?}"), "{what}");
        expected
    }

    fn check(&self, requests: &[LimitKey<'_>], now: u64, cost: u64) -> Vec<Decision> {
        let at = Moment::At(now);
        let (expected, got) = self.runtime.block_on(async {
            (
                self.memory.check(requests, at, cost).await,
                self.redis.check(requests, at, cost).await,
            )
        });
        let what = format!("check {cost} at {now}");
        self.alike(&what, expected, got).unwrap()
    }

    fn reserve(
        &self,
        requests: &[LimitKey<'_>],
        now: u64,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> MultiReservation {
        let at = Moment::At(now);
        let (expected, got) = self.runtime.block_on(async {
            (
                self.memory.reserve(requests, at, cost, max_wait).await,
                self.redis.reserve(requests, at, cost, max_wait).await,
            )
        });
        let what = format!("reserve {cost} at {now} within {max_wait:?}");
        self.alike(&what, expected, got).unwrap()
    }

    fn next(&self, request: LimitKey<'_>, now: u64, cost: u64) -> u64 {
        let at = Moment::At(now);
        let (expected, got) = self.runtime.block_on(async {
            (
                self.memory.next_available(request, at, cost).await,
                self.redis.next_available(request, at, cost).await,
            )
        });
        let what = format!("next {cost} at {now}");
        self.alike(&what, expected, got).unwrap()
    }
}

fn on<'a>(limit: &'a Limit, key: &'a [u8]) -> LimitKey<'a> {
    LimitKey { limit, key }
}

const MS: u64 = 1_000_000;

#[test]
fn leaky_bucket_delays_a_burst_and_queues_a_reservation_behind_it() {
    let pair = Pair::new("leaky");
    // 10/s, queue of 5: one request drains every 100 ms.
    let limit =
        Limit::new(AlgorithmName::LeakyBucket, rate(10, Duration::from_secs(1))).with_burst(5);
    let one = [on(&limit, b"k")];
    let t = START;
    for i in 0..5 {
        let d = pair.check(&one, t, 1)[0];
        assert!(d.allowed);
        assert_eq!(d.delay, Duration::from_millis(100 * i));
        assert_eq!(d.remaining, 4 - i);
        assert_eq!(d.reset_after, Duration::from_millis(100 * (i + 1)));
    }
    let full = pair.check(&one, t, 1)[0];
    assert!(!full.allowed);
    assert_eq!(full.retry_after, Duration::from_millis(100));
    assert_eq!(full.delay, Duration::ZERO);
    // A peek reports the queue without a delay.
    let peek = pair.check(&one, t, 0)[0];
    assert!(peek.allowed && peek.delay.is_zero() && peek.remaining == 0);
    // A reservation is not bound by the capacity: it joins the queue when
    // the five ahead have drained.
    let r = pair.reserve(&one, t, 1, None);
    assert!(r.booked);
    assert_eq!(r.wait, Duration::from_millis(500));
    // Refused within a shorter wait, booking nothing.
    let refused = pair.reserve(&one, t, 2, Some(Duration::from_millis(250)));
    assert!(!refused.booked);
    assert_eq!(refused.wait, Duration::from_millis(600));
    assert_eq!(refused.retry_after, Duration::from_millis(350));
    // Plain checks queue behind the reservation: six ahead now.
    let behind = pair.check(&one, t, 1)[0];
    assert!(!behind.allowed);
    assert_eq!(behind.retry_after, Duration::from_millis(200));
    assert_eq!(pair.next(one[0], t, 1), t + 200 * MS);
    assert_eq!(pair.next(one[0], t, 5), t + 600 * MS);
    let second = pair.reserve(&one, t + 50 * MS, 2, None);
    assert_eq!(second.wait, Duration::from_millis(550));
    // Mid-drain, a nanosecond either side of the instant a place frees up.
    let t2 = t + 400 * MS;
    let early = pair.check(&one, t2 - 1, 1)[0];
    assert!(!early.allowed);
    assert_eq!(early.retry_after, Duration::from_nanos(1));
    let d = pair.check(&one, t2, 1)[0];
    assert!(d.allowed);
    assert_eq!(d.delay, Duration::from_millis(400));
    assert_eq!(d.remaining, 0);
    // Long after, the queue is empty again: the state reads as new.
    let later = pair.check(&one, t + 10_000 * MS, 3)[0];
    assert!(later.allowed && later.delay.is_zero() && later.remaining == 2);
}

#[test]
fn fixed_windows_turn_over_exactly_at_their_boundaries() {
    let pair = Pair::new("fixed");
    let second = 1_000_000_000;
    let limit = Limit::new(
        AlgorithmName::FixedWindow,
        rate(3, Duration::from_nanos(second)),
    );
    let one = [on(&limit, b"k")];
    // t = kP - 1 and kP for the window k that starts after START.
    let k_p = (START / second + 1) * second;
    let d = pair.check(&one, k_p - 1, 3)[0];
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (0, Duration::from_nanos(1)));
    let d = pair.check(&one, k_p - 1, 1)[0];
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Duration::from_nanos(1));
    assert_eq!(pair.next(one[0], k_p - 1, 1), k_p);
    let d = pair.check(&one, k_p, 1)[0];
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (2, Duration::from_secs(1)));
    // The last nanosecond of window k, then window k + 1.
    let end = k_p + second;
    let d = pair.check(&one, end - 1, 2)[0];
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (0, Duration::from_nanos(1)));
    // Reservations at the last nanosecond fill window k + 1, then k + 2.
    let r = pair.reserve(&one, end - 1, 2, None);
    assert!(r.booked);
    assert_eq!(r.wait, Duration::from_nanos(1));
    let r = pair.reserve(&one, end - 1, 2, None);
    assert!(r.booked);
    assert_eq!(r.wait, Duration::from_nanos(second + 1));
    // Window k + 2 is booked: a check in k + 1 waits for its queue.
    let d = pair.check(&one, end, 1)[0];
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Duration::from_nanos(second));
    assert_eq!(d.reset_after, Duration::from_nanos(2 * second));
    let d = pair.check(&one, end + second - 1, 0)[0];
    assert!(d.allowed && d.remaining == 0);
    assert_eq!(d.reset_after, Duration::from_nanos(second + 1));
    let d = pair.check(&one, end + second, 1)[0];
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (0, Duration::from_secs(1)));
    // An untouched window reports a reset of zero on a peek.
    let d = pair.check(&one, end + 2 * second, 0)[0];
    assert_eq!((d.remaining, d.reset_after), (3, Duration::ZERO));
}

#[test]
fn a_day_limit_that_rejects_counts_nothing_in_a_second_limit() {
    let pair = Pair::new("multi");
    let per_second = Limit::new(AlgorithmName::Gcra, rate(5, Duration::from_secs(1)));
    let day = 86_400 * 1_000_000_000;
    let per_day = Limit::new(
        AlgorithmName::FixedWindow,
        rate(3, Duration::from_nanos(day)),
    );
    let both = [on(&per_second, b"k"), on(&per_day, b"k")];
    let seconds = [on(&per_second, b"k")];
    let t = (START / day + 1) * day;
    for i in 0..3 {
        let d = pair.check(&both, t + i * 1_000 * MS, 1);
        assert!(d[0].allowed && d[1].allowed);
    }
    let t = t + 3_000 * MS;
    for _ in 0..10 {
        let d = pair.check(&both, t, 1);
        assert!(d[0].allowed, "the per-second limit would admit");
        assert!(!d[1].allowed);
        assert_eq!(d[1].retry_after, Duration::from_nanos(day - 3_000 * MS));
    }
    // A reservation refused by its wait books nothing either.
    let r = pair.reserve(&both, t, 1, Some(Duration::from_secs(1)));
    assert!(!r.booked);
    assert_eq!(r.wait, Duration::from_nanos(day - 3_000 * MS));
    // Nothing was counted per second: its whole burst is there.
    let d = pair.check(&seconds, t, 0)[0];
    assert_eq!(d.remaining, 5);
    let d = pair.check(&seconds, t, 5)[0];
    assert!(d.allowed);
    // An unbounded reservation books both at the next day, once.
    let r = pair.reserve(&both, t, 1, None);
    assert!(r.booked);
    assert_eq!(r.wait, Duration::from_nanos(day - 3_000 * MS));
    let d = pair.check(&both, t + day - 3_000 * MS, 3);
    assert!(d[0].allowed && !d[1].allowed);
    let d = pair.check(&both, t + day - 3_000 * MS, 2);
    assert!(d[0].allowed && d[1].allowed);
    assert_eq!((d[0].remaining, d[1].remaining), (2, 0));
}

#[test]
fn a_token_bucket_booked_ahead_by_a_slower_limit_lends_its_spare_tokens() {
    let pair = Pair::new("ahead");
    // 10/s, 4 at once: a token every 100 ms.
    let bucket =
        Limit::new(AlgorithmName::TokenBucket, rate(10, Duration::from_secs(1))).with_burst(4);
    let window = Limit::new(AlgorithmName::FixedWindow, rate(1, Duration::from_secs(1)));
    let both = [on(&bucket, b"k"), on(&window, b"k")];
    let alone = [on(&bucket, b"k")];
    let t = (START / 1_000_000_000 + 1) * 1_000_000_000;
    assert!(pair.check(&both, t, 1).iter().all(|d| d.allowed));
    // The window defers the reservation to the next second, where the
    // bucket takes its token: the bucket's last refill lies ahead.
    let r = pair.reserve(&both, t, 1, None);
    assert!(r.booked);
    assert_eq!(r.wait, Duration::from_secs(1));
    // Before then, the three tokens left at that instant can be taken,
    // waiting for the refill that instant brings.
    let d = pair.check(&alone, t + 500 * MS, 3)[0];
    assert!(d.allowed);
    assert_eq!(
        (d.remaining, d.reset_after),
        (0, Duration::from_millis(900))
    );
    let d = pair.check(&alone, t + 600 * MS, 1)[0];
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Duration::from_millis(500));
    assert_eq!(pair.next(alone[0], t + 600 * MS, 2), t + 1_200 * MS);
    let d = pair.check(&alone, t + 1_100 * MS, 1)[0];
    assert!(d.allowed);
    assert_eq!(d.remaining, 0);
}

#[test]
fn reservations_piling_up_to_the_end_of_time_saturate_alike() {
    let pair = Pair::new("saturation");
    let longest = Duration::from_nanos(1 << 62);
    let limits = [
        // Narrow: the token count saturates at i64::MIN.
        Limit::new(AlgorithmName::TokenBucket, rate(1, longest)),
        // Wide: it does not.
        Limit::new(AlgorithmName::TokenBucket, rate(1, longest)).with_burst(3),
        Limit::new(AlgorithmName::LeakyBucket, rate(1, longest)),
        Limit::new(AlgorithmName::LeakyBucket, rate(2, longest)).with_burst(3),
        Limit::new(AlgorithmName::FixedWindow, rate(2, longest)),
        Limit::new(AlgorithmName::Gcra, rate(1, longest)),
        Limit::new(AlgorithmName::Gcra, rate(2, longest)).with_burst(3),
    ];
    assert!(matches!(
        limits[1].build(),
        Ok(AnyAlgorithm::WideTokenBucket(_))
    ));
    // Nothing is counted at u64::MAX itself: there a saturated expiry
    // equals now, and the script forgets a state the memory store holds
    // until it sweeps.
    const LAST: u64 = u64::MAX - 1;
    for (i, limit) in limits.iter().enumerate() {
        let one = [on(limit, b"k")];
        let cost = limit.burst.unwrap_or(1);
        let mut now = START;
        for round in 0..12 {
            let r = pair.reserve(&one, now, cost, None);
            assert!(r.booked, "{limit} round {round}");
            pair.check(&one, now, 1);
            pair.check(&one, now, 0);
            pair.next(one[0], now, cost);
            pair.next(one[0], u64::MAX, 1);
            pair.check(&one, u64::MAX, 0);
            pair.check(&one, LAST, 1);
            now = now.saturating_add((i as u64 + 1) << 59).min(LAST);
        }
        pair.reserve(&one, START, 1, Some(Duration::from_secs(1)));
        pair.check(&one, START, 1);
    }
}

/// Runs `$body` with `$s` bound to the memory store, then to the Redis
/// store; asserts both give the same result and returns it.
macro_rules! both {
    ($stores:expr, |$s:ident| $body:expr) => {{
        let (memory, redis) = &$stores;
        let expected = {
            let $s = memory;
            $body.await
        };
        let got = {
            let $s = redis;
            $body.await
        };
        assert_eq!(format!("{expected:?}"), format!("{got:?}"));
        expected
    }};
}

const SEC: u64 = 1_000_000_000;

fn one(limit: &Limit) -> [LimitKey<'_>; 1] {
    [LimitKey { limit, key: b"k" }]
}

#[test]
fn stepped_window_counts_whole_steps_until_they_leave() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let stores = stores(&server, "stepped-boundaries");
    assert_eq!(START % SEC, 0, "steps of 1 s start at START");
    let limit = Limit::new(
        AlgorithmName::SteppedWindow,
        rate(2, Duration::from_secs(3)),
    )
    .with_step(Duration::from_secs(1));
    let uneven = Limit::new(
        AlgorithmName::SteppedWindow,
        rate(1, Duration::from_millis(2500)),
    )
    .with_step(Duration::from_secs(1));
    let check = |limit: &Limit, at: u64| {
        let stores = &stores;
        let limit = *limit;
        async move {
            both!(stores, |s| s.check(&one(&limit), Moment::At(at), 1))
                .unwrap()
                .remove(0)
        }
    };
    runtime.block_on(async {
        let first = check(&limit, START + 200 * MS).await;
        assert!(first.allowed && first.remaining == 1);
        // Counted in step [0 s, 1 s), which touches windows until 1 s + P.
        assert_eq!(first.reset_after, Duration::from_millis(3800));
        assert!(check(&limit, START + 2900 * MS).await.allowed);
        // An exact window (0.4 s, 3.4 s] no longer holds the request at
        // 0.2 s, but its step still touches the window: conservative.
        let at = START + 3400 * MS;
        let refused = check(&limit, at).await;
        assert!(!refused.allowed && refused.remaining == 0);
        assert_eq!(refused.retry_after, Duration::from_millis(600));
        let next = both!(stores, |s| s.next_available(
            one(&limit)[0],
            Moment::At(at),
            1
        ));
        assert_eq!(next, Ok(START + 4 * SEC));
        let refused = check(&limit, START + 4 * SEC - 1).await;
        assert_eq!(refused.retry_after, Duration::from_nanos(1));
        assert!(check(&limit, START + 4 * SEC).await.allowed);
        // P = 2.5 steps: step [0 s, 1 s) leaves at 3.5 s.
        assert!(check(&uneven, START + 900 * MS).await.allowed);
        let refused = check(&uneven, START + 3400 * MS).await;
        assert_eq!(refused.retry_after, Duration::from_millis(100));
        assert!(!check(&uneven, START + 3500 * MS - 1).await.allowed);
        assert!(check(&uneven, START + 3500 * MS).await.allowed);
    });
}

#[test]
fn stepped_window_queues_checks_behind_a_booking() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let stores = stores(&server, "stepped-booking");
    let limit = Limit::new(
        AlgorithmName::SteppedWindow,
        rate(1, Duration::from_secs(2)),
    )
    .with_step(Duration::from_secs(1));
    runtime.block_on(async {
        let at = |t| Moment::At(START + t);
        let first = both!(stores, |s| s.check(&one(&limit), at(0), 1)).unwrap();
        assert!(first[0].allowed);
        let booked = both!(stores, |s| s.reserve(&one(&limit), at(500 * MS), 1, None)).unwrap();
        assert!(booked.booked);
        assert_eq!(booked.wait, Duration::from_millis(2500));
        // Booked into the step starting at 3 s: a check before it waits for
        // the next slot, when that step leaves, at 6 s.
        let queued = both!(stores, |s| s.check(&one(&limit), at(SEC), 1)).unwrap();
        assert!(!queued[0].allowed);
        assert_eq!(queued[0].retry_after, Duration::from_secs(5));
        let peek = both!(stores, |s| s.check(&one(&limit), at(SEC), 0)).unwrap();
        assert!(peek[0].allowed);
        let next = both!(stores, |s| s.next_available(one(&limit)[0], at(SEC), 1));
        assert_eq!(next, Ok(START + 6 * SEC));
    });
}

#[test]
fn stepped_window_records_calls_over_the_limit() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let stores = stores(&server, "stepped-record");
    let limit = Limit::new(
        AlgorithmName::SteppedWindow,
        rate(3, Duration::from_secs(2)),
    )
    .with_step(Duration::from_secs(1));
    let request = one(&limit)[0];
    runtime.block_on(async {
        let at = |t: u64| Moment::At(START + t);
        let record = |t: u64, cost: u64| {
            let stores = &stores;
            async move { both!(stores, |s| s.record(request, at(t), cost)).unwrap() }
        };
        assert_eq!(record(100 * MS, 5).await, 5, "over the limit of 3");
        let refused = both!(stores, |s| s.check(&[request], at(200 * MS), 1)).unwrap();
        assert!(!refused[0].allowed && refused[0].remaining == 0);
        // Step [0 s, 1 s) holds 5 and leaves at 3 s.
        assert_eq!(refused[0].retry_after, Duration::from_millis(2800));
        assert_eq!(record(1500 * MS, 1).await, 6);
        // Out of order: counted in its own step, and in the window ending
        // at the newest step.
        assert_eq!(record(500 * MS, 1).await, 7);
        // Too old to touch any window still to come: ignored.
        assert_eq!(
            both!(stores, |s| s.record(
                request,
                Moment::At(START - 5 * SEC),
                2
            )),
            Ok(7)
        );
        let peek = both!(stores, |s| s.check(&[request], at(1500 * MS), 0)).unwrap();
        assert!(peek[0].allowed && peek[0].remaining == 0);
        // At 3.2 s only step [1 s, 2 s) is left; cost 0 counts nothing.
        assert_eq!(record(3200 * MS, 0).await, 1);
        let admitted = both!(stores, |s| s.check(&[request], at(3200 * MS), 1)).unwrap();
        assert!(admitted[0].allowed && admitted[0].remaining == 1);
        // Concurrency leases cannot be merged: refused alike in both stores.
        let algorithm = AlgorithmName::Concurrency;
        let other = Limit::new(algorithm, rate(3, Duration::from_secs(2)));
        let refused = both!(stores, |s| s.record(one(&other)[0], at(0), 1));
        let unsupported = Err(tollgate_core::StoreError::Limit(
            tollgate_core::LimitError::Option {
                option: "record",
                algorithm,
            },
        ));
        assert_eq!(refused, unsupported);
    });
}

/// Usage recorded over the limit on `algorithm`, 3 per 2 s (burst 3), as
/// issue 22's sync mode merges it: a record of 5 leaves a debt that
/// refuses checks, a record of cost 0 reads the usage, an out-of-order one
/// counts where its instant lands, the debt is paid back exactly at
/// `next_available` (refused a nanosecond before), and a record of
/// `u64::MAX` saturates. The memory store, the script and the module answer
/// alike at every step, and the engines leave the same states and TTLs.
fn records_over_the_limit_alike(algorithm: AlgorithmName) {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let stores = stores(&server, &format!("record-{algorithm}"));
    let limit = Limit::new(algorithm, rate(3, Duration::from_secs(2)));
    let request = one(&limit)[0];
    let at = |t: u64| Moment::At(START + t);
    runtime.block_on(async {
        let recorded = both!(stores, |s| s.record(request, at(100 * MS), 5));
        assert_eq!(recorded, Ok(5), "5 counted, over the limit of 3");
        let refused = both!(stores, |s| s.check(&[request], at(200 * MS), 1)).unwrap();
        assert!(!refused[0].allowed && refused[0].remaining == 0);
        assert!(refused[0].retry_after > Duration::ZERO);
        let read = both!(stores, |s| s.record(request, at(300 * MS), 0));
        assert_eq!(read, Ok(5), "cost 0 reads the usage");
        both!(stores, |s| s.record(request, at(250 * MS), 1)).unwrap();
        both!(stores, |s| s.record(request, at(1500 * MS), 2)).unwrap();
        let peek = both!(stores, |s| s.check(&[request], at(1500 * MS), 0)).unwrap();
        assert!(peek[0].allowed && peek[0].remaining == 0);
        let next = both!(stores, |s| s.next_available(request, at(1500 * MS), 1)).unwrap();
        assert!(next > START + 1500 * MS, "{next}");
        let early = both!(stores, |s| s.check(&[request], Moment::At(next - 1), 1)).unwrap();
        assert!(!early[0].allowed);
        assert_eq!(early[0].retry_after, Duration::from_nanos(1));
        let paid = both!(stores, |s| s.check(&[request], Moment::At(next), 1)).unwrap();
        assert!(paid[0].allowed, "the debt is paid back at {next}");
        let most = both!(stores, |s| s.record(request, Moment::At(next), u64::MAX)).unwrap();
        assert!(most > 3, "{most}");
        let day = next + 86_400 * SEC;
        both!(stores, |s| s.check(&[request], Moment::At(day), 1)).unwrap();
        both!(stores, |s| s.record(request, Moment::At(day), 0)).unwrap();
        both!(stores, |s| s.record(request, Moment::At(day), 3)).unwrap();
    });
}

#[test]
fn fixed_window_records_over_the_limit() {
    records_over_the_limit_alike(AlgorithmName::FixedWindow);
}

#[test]
fn sliding_window_counter_records_over_the_limit() {
    records_over_the_limit_alike(AlgorithmName::SlidingWindowCounter);
}

#[test]
fn sliding_window_log_records_over_the_limit() {
    records_over_the_limit_alike(AlgorithmName::SlidingWindowLog);
}

/// The stepped window's records rebase its running totals as the core's
/// do (the state the module leaves).
#[test]
fn stepped_window_records_over_the_limit() {
    records_over_the_limit_alike(AlgorithmName::SteppedWindow);
}

#[test]
fn token_bucket_records_over_the_limit() {
    records_over_the_limit_alike(AlgorithmName::TokenBucket);
}

#[test]
fn gcra_records_over_the_limit() {
    records_over_the_limit_alike(AlgorithmName::Gcra);
}

#[test]
fn leaky_bucket_records_over_the_limit() {
    records_over_the_limit_alike(AlgorithmName::LeakyBucket);
}

#[test]
fn concurrency_leases_are_held_released_and_expire() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let stores = stores(&server, "concurrency");
    let limit = Limit::new(AlgorithmName::Concurrency, rate(3, Duration::from_secs(1)))
        .with_lease_ttl(Duration::from_secs(10));
    let request = one(&limit)[0];
    // Releases run at Redis's clock, a year past these instants: they must
    // not drop the leases still held at them.
    runtime.block_on(async {
        let check = |t: u64| {
            let stores = &stores;
            async move {
                both!(stores, |s| s.check(&[request], Moment::At(START + t), 1))
                    .unwrap()
                    .remove(0)
            }
        };
        let release = |lease: u64| {
            let stores = &stores;
            async move { both!(stores, |s| s.release(request, lease)).unwrap() }
        };
        // Three leases at one instant get consecutive ids.
        for i in 0..3 {
            let granted = check(0).await;
            assert!(granted.allowed);
            assert_eq!(granted.lease, Some(START + i));
        }
        let full = check(SEC).await;
        assert!(!full.allowed && full.remaining == 0 && full.lease.is_none());
        assert_eq!(
            full.retry_after,
            Duration::from_secs(9),
            "the first expires"
        );
        assert!(release(START + 1).await);
        let granted = check(SEC).await;
        assert!(granted.allowed);
        assert_eq!(granted.lease, Some(START + SEC));
        assert!(!release(START + 1).await, "released twice");
        assert!(!release(12_345).await, "never handed out");
        let elsewhere = LimitKey {
            limit: &limit,
            key: b"elsewhere",
        };
        assert!(!both!(stores, |s| s.release(elsewhere, START)).unwrap());
        // Leases at 0 s, 0 s and 1 s: the first two expire at 10 s.
        let full = check(10 * SEC - 1).await;
        assert!(!full.allowed);
        assert_eq!(full.retry_after, Duration::from_nanos(1));
        let granted = check(10 * SEC).await;
        assert!(granted.allowed && granted.remaining == 1);
        assert_eq!(granted.lease, Some(START + 10 * SEC));
        assert!(!release(START).await, "expired, then dropped");
        assert_eq!(check(10 * SEC).await.lease, Some(START + 10 * SEC + 1));
        assert!(!check(10 * SEC).await.allowed);
        assert!(release(START + SEC).await);
        assert!(check(10 * SEC).await.allowed);
    });
}

#[test]
fn concurrency_never_hands_out_an_id_twice() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let stores = stores(&server, "concurrency-ids");
    let limit = Limit::new(AlgorithmName::Concurrency, rate(1, Duration::from_secs(1)));
    let request = one(&limit)[0];
    runtime.block_on(async {
        let at = Moment::At(START);
        let first = both!(stores, |s| s.check(&[request], at, 1)).unwrap();
        assert_eq!(first[0].lease, Some(START));
        // Every lease released: the key still remembers the next id.
        assert_eq!(both!(stores, |s| s.release(request, START)), Ok(true));
        let second = both!(stores, |s| s.check(&[request], at, 1)).unwrap();
        assert_eq!(second[0].lease, Some(START + 1));
        assert_eq!(
            both!(stores, |s| s.reserve(&[request], at, 1, None)),
            Err(tollgate_core::StoreError::Limit(
                tollgate_core::LimitError::ReservationUnsupported
            ))
        );
    });
}

/// One limit on one key through both stores: every call must give the same
/// result in both, and the Redis store's is returned.
struct Twin<'r> {
    runtime: &'r tokio::runtime::Runtime,
    memory: LocalStore,
    redis: Engines,
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
    let server = RedisServer::start_with_module();
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
    let server = RedisServer::start_with_module();
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
    let server = RedisServer::start_with_module();
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
    let server = RedisServer::start_with_module();
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
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let log = Limit::new(AlgorithmName::SlidingWindowLog, rate(3, NS(1_000_000_007)));
    let twin = Twin::new(&runtime, &server, "log-reserve", log);
    reservations_land_exactly(&twin, START, 3);
}

#[test]
fn sliding_counter_reservations_land_exactly() {
    let server = RedisServer::start_with_module();
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
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let (_, Engines { lua: redis, .. }) = stores(&server, "cost");
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

/// A stepped window whose one step holds a saturating record (`u64::MAX`)
/// has expired once that step has left every window: the next records
/// count as on a new state, on every store — the memory store, which
/// still holds the state, and Redis, which deleted it (found by the random
/// traces: the core made room before dropping the old step and counted
/// nothing).
#[test]
fn a_record_after_a_saturating_one_has_left_the_window_counts() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let stores = stores(&server, "saturated-steps");
    let limit = Limit::new(
        AlgorithmName::SteppedWindow,
        rate(10, Duration::from_secs(4)),
    )
    .with_step(Duration::from_secs(1));
    let request = one(&limit)[0];
    let later = Moment::At(START + 6 * SEC + 348_416_123);
    runtime.block_on(async {
        let most = both!(stores, |s| s.record(request, Moment::At(START), u64::MAX));
        assert_eq!(most, Ok(u64::MAX / 2));
        assert_eq!(both!(stores, |s| s.record(request, later, 1)), Ok(1));
        assert_eq!(both!(stores, |s| s.record(request, later, 1)), Ok(2));
        assert_eq!(both!(stores, |s| s.record(request, later, 0)), Ok(2));
    });
}

/// 2026-03-07 12:00 UTC: a day before New York's spring change, three
/// weeks before London's, a month before Lord Howe's.
const CALENDAR_START: u64 = 1_772_884_800_000_000_000;

/// Calendar limits on both window algorithms: days, weeks, months and
/// years in zones with and without daylight saving time, anchors at the
/// ends of their ranges. Their counts are large enough that a trace's
/// reservations stay within the windows a call carries for the script
/// (`CALENDAR_WINDOWS_AROUND` after the current one).
fn calendar_limits() -> Vec<Limit> {
    use tollgate_core::calendar::{Calendar, CalendarUnit::*};
    use AlgorithmName::*;
    let calendar = |unit, zone, anchor| Calendar::new(unit, zone, anchor).unwrap();
    let on = |algorithm, n, calendar| {
        Limit::new(algorithm, rate(n, Duration::from_secs(86_400))).with_calendar(calendar)
    };
    vec![
        on(FixedWindow, 30, calendar(Day, "America/New_York", None)),
        on(
            SlidingWindowCounter,
            30,
            calendar(Day, "America/New_York", Some(2)),
        ),
        on(
            SlidingWindowCounter,
            40,
            calendar(Day, "Australia/Lord_Howe", Some(23)),
        ),
        on(FixedWindow, 30, calendar(Week, "Asia/Kolkata", Some(7))),
        on(FixedWindow, 35, calendar(Month, "Europe/London", Some(31))),
        on(
            SlidingWindowCounter,
            30,
            calendar(Month, "America/New_York", Some(15)),
        ),
        on(SlidingWindowCounter, 50, calendar(Year, "UTC", Some(4))),
        on(FixedWindow, 30, calendar(Day, "UTC", None))
            .with_ban(Ban::new(2, Duration::from_secs(3600), Duration::from_secs(7200)).unwrap()),
    ]
}

/// Checks, reservations, next-available instants and settles on calendar
/// limits, with time steps from nanoseconds to days, across daylight
/// saving changes and month ends; settles of admissions from the windows
/// a call carries and from long before them.
fn calendar_step(limits: usize) -> impl Strategy<Value = Step> {
    let advance = prop_oneof![
        3 => Just(0u64),
        1 => 0u64..10,
        3 => 0u64..7_200_000_000_000,
        2 => 0u64..259_200_000_000_000,
    ];
    let cost = prop_oneof![1 => Just(0u64), 8 => 1u64..5];
    let cells = proptest::collection::vec(cell(limits), 1..3);
    let admission = prop_oneof![
        3 => any::<usize>().prop_map(Admission::Taken),
        1 => (0u64..40_000_000_000_000_000, 1u64..5)
            .prop_map(|(back, estimate)| Admission::Made { back, estimate }),
    ];
    let op = prop_oneof![
        8 => (cells.clone(), cost.clone()).prop_map(|(cells, cost)| Op::Check { cells, cost }),
        1 => (cells, cost.clone(), proptest::option::of(0u64..200_000_000_000_000))
            .prop_map(|(cells, cost, max_wait)| Op::Reserve { cells, cost, max_wait }),
        1 => (cell(limits), cost.clone()).prop_map(|(cell, cost)| Op::Next { cell, cost }),
        3 => (cell(limits), 0u64..8, admission)
            .prop_map(|(cell, actual, of)| Op::Settle { cell, actual, of }),
    ];
    (advance, op).prop_map(|(advance, op)| Step { advance, op })
}

#[test]
fn calendar_traces_decide_alike_in_memory_and_on_both_engines() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let limits = calendar_limits();
    let case = std::sync::atomic::AtomicU32::new(0);
    let config = ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let steps = proptest::collection::vec(calendar_step(limits.len()), 1..80);
    proptest!(config, |(start in 0u64..40_000_000_000_000_000, steps in steps)| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (memory, redis) = stores(&server, &format!("calendar{n}"));
        // Within about 15 months of CALENDAR_START.
        let mut now = CALENDAR_START + start;
        let mut taken = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            now += step.advance;
            let ((expected, took), (got, _)) = runtime.block_on(async {
                (
                    apply(&memory, &limits, now, &step.op, &taken).await,
                    apply(&redis, &limits, now, &step.op, &taken).await,
                )
            });
            prop_assert_eq!(&expected, &got, "step {} {:?} at {}", i, step.op, now);
            taken.extend(took);
        }
    });
}

/// A monthly limit in New York, at the instants around a month's end and
/// a daylight saving change, through every store: the reset is the real
/// end of the month.
#[test]
fn a_calendar_month_turns_over_at_midnight_in_its_zone_on_every_store() {
    use tollgate_core::calendar::{Calendar, CalendarUnit};
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let (memory, redis) = stores(&server, "calendar-month");
    let month = Calendar::new(CalendarUnit::Month, "America/New_York", None).unwrap();
    let limit = Limit::new(
        AlgorithmName::FixedWindow,
        rate(2, Duration::from_secs(86_400)),
    )
    .with_calendar(month);
    const S: u64 = 1_000_000_000;
    // 2026-03-31 23:59:59 EDT, and April 1st 00:00 EDT.
    let before = 1_775_015_999 * S;
    let april = 1_775_016_000 * S;
    runtime.block_on(async {
        for (at, allowed, reset) in [
            (before, true, 1),
            (before, true, 1),
            (before, false, 1),
            (april, true, 30 * 86_400),
        ] {
            let want = memory.check(&one(&limit), Moment::At(at), 1).await.unwrap();
            let got = redis.check(&one(&limit), Moment::At(at), 1).await.unwrap();
            assert_eq!(got, want);
            assert_eq!(got[0].allowed, allowed);
            assert_eq!(got[0].reset_after.as_secs(), reset);
        }
    });
}

/// With no instant given, each engine decides a calendar limit at Redis's
/// clock, with the windows the store computed around its own.
#[test]
fn calendar_limits_decide_at_redis_time_on_both_engines() {
    use tollgate_core::calendar::{Calendar, CalendarUnit};
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let redis = Engines::open(&server, "calendar-now");
    let day = Calendar::new(CalendarUnit::Day, "UTC", None).unwrap();
    let limit = Limit::new(
        AlgorithmName::FixedWindow,
        rate(5, Duration::from_secs(86_400)),
    )
    .with_calendar(day);
    runtime.block_on(async {
        const DAY: u64 = 86_400 * 1_000_000_000;
        for store in [&redis.lua, &redis.module] {
            let before = store.now().await.unwrap();
            let decision = store.check(&one(&limit), Moment::Now, 2).await.unwrap()[0];
            let after = store.now().await.unwrap();
            assert!(decision.allowed);
            assert_eq!(decision.remaining, 3);
            // The window ends at the next UTC midnight after the instant
            // Redis decided at, somewhere between `before` and `after`
            // (which may lie on either side of a midnight), give or take a
            // millisecond of rounding.
            let reset = decision.reset_after.as_nanos() as u64;
            let fits = |midnight: u64| {
                reset >= midnight.saturating_sub(after) && reset <= midnight - before + 1_000_000
            };
            assert!(
                fits((before / DAY + 1) * DAY) || fits((after / DAY + 1) * DAY),
                "reset {reset} ns, Redis time {before}..{after} ns"
            );
        }
    });
}

/// A trace proptest once shrank to: a refund that left a gcra state as
/// good as new at its instant (the theoretical arrival time back at now),
/// which the engines deleted while the memory store kept it, and a record
/// at an earlier instant that then counted from it in memory only. A
/// settle now writes the state it changed, whatever it holds.
#[test]
fn a_refund_that_leaves_a_state_as_good_as_new_keeps_it() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let rate = Rate::new(3, Duration::from_millis(1)).unwrap();
    let limits = [Limit::new(AlgorithmName::Gcra, rate).with_burst(5)];
    let (memory, redis) = stores(&server, "kept-settle");
    let steps = [
        (
            START,
            Op::Check {
                cells: vec![(0, 1)],
                cost: 3,
            },
        ),
        (
            START + 3_727_068_662,
            Op::Settle {
                cell: (0, 1),
                actual: 0,
                of: Admission::Made {
                    back: 0,
                    estimate: 3,
                },
            },
        ),
        (
            START + 3_727_068_662,
            Op::Record {
                cell: (0, 1),
                cost: 1114,
                back: 4_132_015_261,
            },
        ),
    ];
    for (now, op) in steps {
        let ((expected, _), (got, _)) = runtime.block_on(async {
            (
                apply(&memory, &limits, now, &op, &[]).await,
                apply(&redis, &limits, now, &op, &[]).await,
            )
        });
        assert_eq!(expected, got, "{op:?} at {now}");
    }
}

/// The New York day of the spring change is 23 hours long on every store,
/// for both window algorithms (the sliding counter's weights are the
/// memory store's on both engines); and a monthly cycle anchored on the 31st
/// starts on April 30th, the last day of a month too short for it, and
/// runs 31 days to May 31st.
#[test]
fn a_dst_day_and_an_anchor_day_turn_over_alike_on_every_store() {
    use tollgate_core::calendar::{Calendar, CalendarUnit};
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let stores = stores(&server, "calendar-dst-anchor");
    let new_york = |unit, anchor| Calendar::new(unit, "America/New_York", anchor).unwrap();
    let per_day = |algorithm| {
        Limit::new(algorithm, rate(4, Duration::from_secs(86_400)))
            .with_calendar(new_york(CalendarUnit::Day, None))
    };
    let fixed = per_day(AlgorithmName::FixedWindow);
    let sliding = per_day(AlgorithmName::SlidingWindowCounter);
    let cycle = Limit::new(
        AlgorithmName::FixedWindow,
        rate(2, Duration::from_secs(30 * 86_400)),
    )
    .with_calendar(new_york(CalendarUnit::Month, Some(31)));
    // 2026-03-08 00:30 EST, 2026-03-09 00:00 EDT (23 hours after the
    // 8th began), 2026-03-09 16:00 EDT (two thirds into the 9th).
    let spring_day = 1_772_947_800 * SEC;
    let next_day = 1_773_028_800 * SEC;
    let afternoon = 1_773_086_400 * SEC;
    // 2026-04-29 23:59:59 EDT and 2026-04-30 00:00 EDT.
    let before_cycle = 1_777_521_599 * SEC;
    let cycle_start = 1_777_521_600 * SEC;
    let hours = |h: f64| Duration::from_secs_f64(h * 3600.0);
    runtime.block_on(async {
        for limit in [&fixed, &sliding] {
            let request = one(limit);
            let at = Moment::At(spring_day);
            for remaining in (0..4).rev() {
                let d = both!(stores, |s| s.check(&request, at, 1)).unwrap()[0];
                assert!(d.allowed);
                assert_eq!(d.remaining, remaining);
                if limit.algorithm == AlgorithmName::FixedWindow {
                    // The day ends at midnight EDT: 22½ hours after 00:30 EST.
                    assert_eq!(d.reset_after, hours(22.5));
                }
            }
            let d = both!(stores, |s| s.check(&request, at, 1)).unwrap()[0];
            assert!(!d.allowed);
            let d = both!(stores, |s| s.check(&request, Moment::At(next_day), 1)).unwrap()[0];
            match limit.algorithm {
                // A new day, a new count.
                AlgorithmName::FixedWindow => assert_eq!((d.allowed, d.remaining), (true, 3)),
                // The whole of the 8th still weighs at the 9th's start.
                _ => assert!(!d.allowed),
            }
            // Two thirds into the 9th, a third of the 8th's 4 weighs.
            let d = both!(stores, |s| s.check(&request, Moment::At(afternoon), 1)).unwrap()[0];
            assert!(d.allowed, "{limit:?}");
            if limit.algorithm == AlgorithmName::FixedWindow {
                assert_eq!(d.reset_after, hours(8.0));
            }
        }
        let request = one(&cycle);
        for (at, allowed, reset) in [
            (before_cycle, true, 1),
            (before_cycle, true, 1),
            (before_cycle, false, 1),
            (cycle_start, true, 31 * 86_400),
        ] {
            let d = both!(stores, |s| s.check(&request, Moment::At(at), 1)).unwrap()[0];
            assert_eq!((d.allowed, d.reset_after.as_secs()), (allowed, reset));
        }
    });
}
