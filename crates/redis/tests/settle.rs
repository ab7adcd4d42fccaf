//! Settling a cost on Redis ("reserve, then settle"), on both engines at
//! once — the Lua script and tollgate's Redis module, held to each other
//! call by call and state by state (`support::engines`) — against the
//! memory store as the reference twin:
//!
//! - check(estimate) + settle(actual) leaves a state that decides as
//!   check(actual) would have, when the window has not moved (the span of
//!   the core's own property, crates/core/tests/settle.rs): the same
//!   admissions and the same remaining at every later instant probed;
//! - a refund never creates quota: after check(estimate) and a refund
//!   settled any time later, no cost is admitted that the twin which never
//!   saw the request refuses, and nothing more is remaining;
//! - worked examples: a refund that lets a request in which the over-limit
//!   cache had refused, a charge into debt refused until paid back, a
//!   refund into a window that has ended dropped, `concurrency` refused,
//!   and the module's bad settle words answered with an error that changes
//!   nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::algorithm::Settled;
use tollgate_core::{AlgorithmName, Limit, LimitError, LimitKey, Moment, Rate, Store, StoreError};
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_redis::{Engine, RedisConfig, RedisStore};
use tollgate_testkit::RedisServer;

mod support;
use support::engines::Engines;

/// 2025-11-13, in ns.
const START: u64 = 1_763_000_000_000_000_000;
const S: u64 = 1_000_000_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn memory() -> LocalStore {
    LocalStore::system(MemoryStore::new(MemoryConfig::default()))
}

/// Where the span ends in which a request admitted at an instant is
/// settled with its window unmoved.
type SpanEnd = fn(u64) -> u64;

/// One limit per algorithm that settles, with small capacities, and the
/// end of the span in which a settle of a request admitted at `t` finds
/// its window unmoved (the core's: the window's end, a period for the log,
/// a period less two steps for the stepped window, three periods for the
/// buckets).
fn limits() -> Vec<(Limit, SpanEnd)> {
    use AlgorithmName::*;
    let per = |algorithm, n, secs| {
        Limit::new(algorithm, Rate::new(n, Duration::from_secs(secs)).unwrap())
    };
    vec![
        (per(FixedWindow, 5, 10), |t| (t / (10 * S) + 1) * 10 * S),
        (per(SlidingWindowCounter, 5, 10), |t| {
            (t / (10 * S) + 1) * 10 * S
        }),
        (per(SlidingWindowLog, 5, 10), |t| t + 10 * S),
        (
            per(SteppedWindow, 6, 4).with_step(Duration::from_secs(1)),
            |t| t + 4 * S - 2 * S,
        ),
        (per(TokenBucket, 2, 1).with_burst(5), |t| t + 3 * S),
        (per(Gcra, 2, 1).with_burst(5), |t| t + 3 * S),
        (per(LeakyBucket, 2, 1).with_burst(5), |t| t + 3 * S),
    ]
}

/// A history before the settled request: (gap in ms, cost, recorded
/// rather than checked).
type History = Vec<(u64, u64, bool)>;

fn history() -> impl Strategy<Value = History> {
    proptest::collection::vec((0u64..6_000, 0u64..=5, prop::bool::weighted(0.2)), 0..8)
}

/// The request settled after the history: admitted `gap` ms after its
/// last instant with `estimate`, settled with `actual` a fraction
/// (`per_mille`) of the way to the end of its span (property 1), or `late`
/// ms after its admission (property 2).
#[derive(Debug, Clone, Copy)]
struct Case {
    gap: u64,
    estimate: u64,
    actual: u64,
    per_mille: u64,
    late: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        0u64..12_000,
        1u64..=5,
        0u64..=5,
        0u64..=1000,
        prop_oneof![Just(0u64), 0u64..30_000],
    )
        .prop_map(|(gap, estimate, actual, per_mille, late)| Case {
            gap,
            estimate,
            actual,
            per_mille,
            late,
        })
}

fn on(limit: &Limit) -> LimitKey<'_> {
    LimitKey { limit, key: b"k" }
}

/// Replays `history` on `store` from START; the last instant.
async fn replay(store: &impl Store, limit: &Limit, history: &History) -> u64 {
    let mut now = START;
    for &(gap, cost, record) in history {
        now += gap * 1_000_000;
        if record {
            store
                .record(on(limit), Moment::At(now), cost)
                .await
                .unwrap();
        } else {
            store
                .check(&[on(limit)], Moment::At(now), cost)
                .await
                .unwrap();
        }
    }
    now
}

/// Whether `store` admits `cost` at `t` (counting nothing).
async fn admits(store: &impl Store, limit: &Limit, t: u64, cost: u64) -> bool {
    store
        .next_available(on(limit), Moment::At(t), cost)
        .await
        .unwrap()
        == t
}

/// Instants from `from` on at which two states are compared: the first
/// few nanoseconds, then every seventh of a period for three periods.
fn probes(limit: &Limit, from: u64) -> Vec<u64> {
    let p = limit.rate.period_nanos();
    (0..3)
        .map(|d| from + d)
        .chain((0..=21).map(|k| from + k * p / 7))
        .collect()
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

#[test]
fn check_estimate_then_settle_decides_as_check_actual_on_both_engines() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let config = ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let case_number = std::sync::atomic::AtomicU32::new(0);
    let all = limits();
    proptest!(config, |(which in 0..all.len(), history in history(), c in case())| {
        let (limit, span_end) = all[which];
        let n = case_number.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let redis = Engines::open(&server, &format!("settles{n}"));
        let twin = memory();
        runtime.block_on(async {
            let last = replay(&redis, &limit, &history).await;
            prop_assert_eq!(replay(&twin, &limit, &history).await, last);
            let at = last + c.gap * 1_000_000;
            if !admits(&twin, &limit, at, c.estimate).await || !admits(&twin, &limit, at, c.actual).await {
                return Ok(());
            }
            let checked = redis.check(&[on(&limit)], Moment::At(at), c.estimate).await.unwrap();
            prop_assert!(checked[0].allowed);
            if c.actual > 0 {
                let twin_checked = twin.check(&[on(&limit)], Moment::At(at), c.actual).await.unwrap();
                prop_assert!(twin_checked[0].allowed);
            }
            let span = span_end(at).saturating_sub(at).max(1) - 1;
            let settle_at = at + span * c.per_mille / 1000;
            let settled = redis.settle(on(&limit), at, Moment::At(settle_at), c.estimate, c.actual).await;
            prop_assert!(
                matches!(settled, Ok(Settled::Exact | Settled::Charged | Settled::Refunded { dropped: false })),
                "settled at {} (admitted at {}): {:?}", settle_at, at, settled
            );
            for t in probes(&limit, settle_at) {
                let got = redis.check(&[on(&limit)], Moment::At(t), 0).await.unwrap();
                let want = twin.check(&[on(&limit)], Moment::At(t), 0).await.unwrap();
                prop_assert_eq!(got, want, "peek at {} after a settle at {}", t, settle_at);
                for cost in 1..=5 {
                    prop_assert_eq!(
                        admits(&redis, &limit, t, cost).await,
                        admits(&twin, &limit, t, cost).await,
                        "cost {} at {} after a settle at {}", cost, t, settle_at
                    );
                }
            }
            Ok(())
        })?;
    });
}

#[test]
fn refunds_create_no_quota_on_both_engines() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let config = ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let case_number = std::sync::atomic::AtomicU32::new(0);
    let all = limits();
    proptest!(config, |(which in 0..all.len(), history in history(), c in case())| {
        let (limit, _) = all[which];
        let n = case_number.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let redis = Engines::open(&server, &format!("refunds{n}"));
        // The twin never sees the settled request.
        let never_saw = memory();
        runtime.block_on(async {
            let last = replay(&redis, &limit, &history).await;
            replay(&never_saw, &limit, &history).await;
            let at = last + c.gap * 1_000_000;
            let checked = redis.check(&[on(&limit)], Moment::At(at), c.estimate).await.unwrap();
            if !checked[0].allowed {
                return Ok(());
            }
            let actual = c.actual.min(c.estimate);
            let settle_at = at + c.late * 1_000_000;
            let settled = redis.settle(on(&limit), at, Moment::At(settle_at), c.estimate, actual).await;
            prop_assert!(settled.is_ok(), "{:?}", settled);
            for t in probes(&limit, settle_at) {
                for cost in 1..=5 {
                    prop_assert!(
                        !admits(&redis, &limit, t, cost).await || admits(&never_saw, &limit, t, cost).await,
                        "cost {} admitted at {} after a refund at {}, refused without the request",
                        cost, t, settle_at
                    );
                }
                let got = redis.check(&[on(&limit)], Moment::At(t), 0).await.unwrap()[0].remaining;
                let want = never_saw.check(&[on(&limit)], Moment::At(t), 0).await.unwrap()[0].remaining;
                prop_assert!(got <= want, "remaining {} > {} at {}", got, want, t);
            }
            Ok(())
        })?;
    });
}

/// A store on `server` deciding with `engine` on Redis's clock, with the
/// over-limit cache on (the default).
fn cached(server: &RedisServer, prefix: &str, engine: Engine) -> RedisStore {
    let config = RedisConfig {
        key_prefix: prefix.to_owned(),
        timeout: Duration::from_secs(5),
        engine,
        ..RedisConfig::default()
    };
    RedisStore::open(&server.url().parse().unwrap(), config).unwrap()
}

/// A refund may let in a request that Redis refused a moment ago and the
/// over-limit cache would go on refusing: the store forgets its cached
/// refusals on the key. A charge into debt then refuses, with a wait.
#[test]
fn a_refund_clears_the_cached_refusal_and_a_charge_goes_into_debt() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    // 5 an hour, 5 at once: a refusal waits twelve minutes.
    let limit = Limit::new(
        AlgorithmName::Gcra,
        Rate::new(5, Duration::from_secs(3600)).unwrap(),
    );
    runtime.block_on(async {
        for engine in [Engine::Lua, Engine::Module] {
            let store = cached(&server, &format!("cache-{engine}:"), engine);
            assert!(store.settles());
            let admitted_at = store.now().await.unwrap();
            assert!(store.check(&[on(&limit)], Moment::Now, 5).await.unwrap()[0].allowed);
            let refused = store.check(&[on(&limit)], Moment::Now, 2).await.unwrap()[0];
            assert!(!refused.allowed && refused.retry_after > Duration::from_secs(600));
            let settled = store
                .settle(on(&limit), admitted_at, Moment::Now, 5, 2)
                .await;
            assert_eq!(
                settled,
                Ok(Settled::Refunded { dropped: false }),
                "{engine}"
            );
            // Without forgetting, the cache would answer the refusal.
            assert!(
                store.check(&[on(&limit)], Moment::Now, 2).await.unwrap()[0].allowed,
                "{engine}"
            );
            // Actually 12, not 2: 10 more, 9 past the burst.
            let settled = store
                .settle(on(&limit), admitted_at, Moment::Now, 2, 12)
                .await;
            assert_eq!(settled, Ok(Settled::Charged), "{engine}");
            let debt = store.check(&[on(&limit)], Moment::Now, 1).await.unwrap()[0];
            assert!(!debt.allowed, "{engine}");
            assert_eq!(debt.remaining, 0);
            // 5 - 3 + 2 + 10 = 14 taken of a burst of 5: a request of 1
            // waits for 10 intervals of 12 minutes.
            assert!(
                debt.retry_after > Duration::from_secs(110 * 60),
                "{engine}: {debt:?}"
            );
            assert!(
                debt.retry_after <= Duration::from_secs(120 * 60),
                "{engine}: {debt:?}"
            );
        }
    });
}

/// Worked examples on both engines, against the memory store: a refund in
/// the window it was counted in, a refund dropped once that window has
/// ended, a charge into the current window, and `concurrency` refused.
#[test]
fn windows_refund_where_counted_and_drop_once_ended() {
    let server = RedisServer::start_with_module();
    let runtime = runtime();
    let _context = runtime.enter();
    let redis = Engines::open(&server, "windows");
    let twin = memory();
    let window = Limit::new(
        AlgorithmName::FixedWindow,
        Rate::new(10, Duration::from_secs(10)).unwrap(),
    );
    let leases = Limit::new(AlgorithmName::Concurrency, Rate::per_second(3).unwrap());
    // A window's start.
    let t0 = START / (10 * S) * (10 * S) + 10 * S;
    runtime.block_on(async {
        for store in [&redis as &dyn Probe, &twin] {
            assert!(store.check_at(&window, t0 + S, 8).await);
            assert!(!store.check_at(&window, t0 + 2 * S, 7).await);
            assert_eq!(
                store.settle_at(&window, t0 + S, t0 + 3 * S, 8, 3).await,
                Ok(Settled::Refunded { dropped: false })
            );
            assert!(store.check_at(&window, t0 + 4 * S, 7).await);
            // Admitted in the last window, settled in this one: the refund
            // is dropped, a charge counts here.
            assert_eq!(
                store
                    .settle_at(&window, t0 + 5 * S, t0 + 11 * S, 4, 1)
                    .await,
                Ok(Settled::Refunded { dropped: true })
            );
            assert_eq!(
                store
                    .settle_at(&window, t0 + 5 * S, t0 + 11 * S, 4, 9)
                    .await,
                Ok(Settled::Charged)
            );
            assert!(store.check_at(&window, t0 + 12 * S, 5).await);
            assert!(!store.check_at(&window, t0 + 12 * S, 1).await);
            assert_eq!(
                store.settle_at(&leases, t0, t0, 2, 1).await,
                Err(StoreError::Limit(LimitError::Option {
                    option: "settle",
                    algorithm: AlgorithmName::Concurrency
                }))
            );
        }
    });
}

/// The calls of the worked examples, on any store (object-safe).
trait Probe {
    fn check_at<'a>(
        &'a self,
        limit: &'a Limit,
        t: u64,
        cost: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + 'a>>;
    fn settle_at<'a>(
        &'a self,
        limit: &'a Limit,
        admitted_at: u64,
        t: u64,
        estimate: u64,
        actual: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Settled, StoreError>> + 'a>>;
}

impl<S: Store> Probe for S {
    fn check_at<'a>(
        &'a self,
        limit: &'a Limit,
        t: u64,
        cost: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + 'a>> {
        Box::pin(
            async move { self.check(&[on(limit)], Moment::At(t), cost).await.unwrap()[0].allowed },
        )
    }

    fn settle_at<'a>(
        &'a self,
        limit: &'a Limit,
        admitted_at: u64,
        t: u64,
        estimate: u64,
        actual: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Settled, StoreError>> + 'a>>
    {
        Box::pin(async move {
            self.settle(on(limit), admitted_at, Moment::At(t), estimate, actual)
                .await
        })
    }
}

/// The module's `settle` with words that are not an admission instant,
/// an estimate and an actual cost, or over several limits, answers an
/// error and changes nothing.
#[test]
fn the_module_refuses_bad_settle_words_and_changes_nothing() {
    let server = RedisServer::start_with_module();
    let spec = b"1 fixed_window 10 10000000000".to_vec();
    let call = |words: &[&[u8]]| -> String {
        let mut cmd = redis::cmd("TOLLGATE.DECIDE2");
        for w in words {
            cmd.arg(*w);
        }
        let mut connection = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        match cmd.query::<redis::Value>(&mut connection) {
            Ok(value) => format!("{value:?}"),
            Err(error) => error.to_string(),
        }
    };
    let field = b"fixed_window 10 10000000000 - - -";
    // An hour's grace: the key outlives any slowness of the test.
    let admitted = format!("check {START} 3600000 ");
    call(&[b"k", field, &spec, admitted.as_bytes()]);
    let before: Vec<u8> = redis::cmd("HGET")
        .arg("k")
        .arg(&field[..])
        .query(
            &mut redis::Client::open(server.url())
                .unwrap()
                .get_connection()
                .unwrap(),
        )
        .unwrap();
    for last in [
        format!("settle {START} 1000 "),
        format!("settle {START} 1000 {START} 1"),
        format!("settle {START} 1000 {START} 1 x"),
        format!("settle {START} 1000 {START} 1 0 7"),
        format!("settle {START} 1000 {START} 1 18446744073709551616"),
        format!("settle {START} 1000 -1 1 0"),
    ] {
        let reply = call(&[b"k", field, &spec, last.as_bytes()]);
        assert!(
            reply.contains("tollgate: bad settle words"),
            "{last}: {reply}"
        );
    }
    let two = format!("settle {START} 1000 {START} 1 0");
    let reply = call(&[b"k", field, &spec, b"k", field, &spec, two.as_bytes()]);
    assert!(reply.contains("tollgate: wrong arguments"), "{reply}");
    let leases = format!("settle {START} 1000 {START} 2 1");
    let reply = call(&[
        b"l",
        b"concurrency 3 - - -",
        b"0 concurrency 3 1000000000",
        leases.as_bytes(),
    ]);
    assert!(reply.contains("tollgate: settle_unsupported"), "{reply}");
    let after: Vec<u8> = redis::cmd("HGET")
        .arg("k")
        .arg(&field[..])
        .query(
            &mut redis::Client::open(server.url())
                .unwrap()
                .get_connection()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(before, after);
    assert!(!before.is_empty());
    assert!(server.answers());
}
