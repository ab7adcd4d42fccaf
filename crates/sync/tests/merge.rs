//! The sync mode's merge logic, exactly: a fake shared store (support.rs)
//! and manual clocks, no sleeps.
//!
//! The documented order (docs/semantics.md, "Async sync mode"): one
//! instance's decisions are the memory store's for the same requests in
//! arrival order, whenever its batches go; the shared store's state is the
//! memory store's after recording every admitted request in the order the
//! batches reached it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::time::{ManualClock, NANOS_PER_MS, NANOS_PER_SEC};
use tollgate_core::{AlgorithmName, Decision, Limit, LimitKey, Moment, Rate, Store, SyncMode};
use tollgate_sync::SyncConfig;

use support::{instance, memory, now, remaining, Remote};

const START: u64 = 1_763_000_000 * NANOS_PER_SEC;

/// Usage sent at its own instants: one instance's decisions are then the
/// memory store's exactly, on every algorithm.
const EXACT: SyncConfig = SyncConfig {
    interval: Duration::from_millis(100),
    max_keys: 1_000_000,
    max_pending: 1_024,
    coalesce: Duration::ZERO,
    refresh_idle: 10,
    mode: SyncMode::Async,
};

/// One limit of every algorithm whose usage can be merged.
fn limits() -> Vec<Limit> {
    let per_second = |name| Limit::new(name, Rate::per_second(5).unwrap());
    vec![
        per_second(AlgorithmName::FixedWindow),
        per_second(AlgorithmName::SlidingWindowCounter),
        per_second(AlgorithmName::SlidingWindowLog),
        Limit::new(AlgorithmName::SteppedWindow, "10/4s".parse().unwrap())
            .with_step(Duration::from_secs(1)),
        per_second(AlgorithmName::TokenBucket),
        per_second(AlgorithmName::Gcra).with_burst(3),
        per_second(AlgorithmName::LeakyBucket).with_burst(3),
    ]
}

/// Decisions without the sync mode's marks, to compare with the memory
/// store's.
fn plain(mut decisions: Vec<Decision>) -> Vec<Decision> {
    for decision in &mut decisions {
        assert!(decision.asynchronous);
        decision.asynchronous = false;
        decision.degraded = false;
    }
    decisions
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(START))
}

/// (time advance in ms, cost, what: 0-4 check, 5 check while a batch is
/// on its way, 6 record, 7 check then sync)
fn ops() -> impl Strategy<Value = Vec<(u64, u64, u8)>> {
    proptest::collection::vec((0u64..700, 0u64..4, 0u8..8), 1..60)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// One instance decides as the memory store fed the same requests,
    /// whenever its batches go.
    #[test]
    fn one_instance_decides_as_the_memory_store(ops in ops()) {
        for limit in limits() {
            let remote = Arc::new(Remote::default());
            let clock = clock();
            let synced = instance(&remote, &clock, EXACT);
            let reference = memory(&clock);
            let request = [LimitKey { limit: &limit, key: b"k" }];
            let mut t = START;
            for &(advance, cost, what) in &ops {
                t += advance * NANOS_PER_MS;
                let cost = cost.min(3);
                if what == 6 {
                    let a = now(synced.record(request[0], Moment::At(t), cost)).unwrap();
                    let b = now(reference.record(request[0], Moment::At(t), cost)).unwrap();
                    prop_assert_eq!(a, b, "record, {}", limit);
                    continue;
                }
                let a = if what == 5 {
                    // Decided while a batch is on its way.
                    let answer = Arc::new(parking_lot::Mutex::new(None));
                    let (store, slot) = (synced.clone(), Arc::clone(&answer));
                    remote.during.lock().push(Box::new(move || {
                        let request = [LimitKey { limit: &limit, key: b"k" }];
                        *slot.lock() = Some(now(store.check(&request, Moment::At(t), cost)));
                    }));
                    now(synced.sync()).unwrap();
                    // With nothing to send no batch left: decide now.
                    let left = remote.during.lock().pop();
                    if let Some(run) = left {
                        run();
                    }
                    let answer = answer.lock().take().expect("decided");
                    plain(answer.unwrap())
                } else {
                    plain(now(synced.check(&request, Moment::At(t), cost)).unwrap())
                };
                let b = now(reference.check(&request, Moment::At(t), cost)).unwrap();
                prop_assert_eq!(a, b, "{} at +{} ms cost {}", limit, (t - START) / NANOS_PER_MS, cost);
                if what == 7 {
                    now(synced.sync()).unwrap();
                }
            }
            now(synced.sync()).unwrap();
            prop_assert_eq!(synced.stats().unsent, 0);
        }
    }

    /// Three instances on one shared store: after the last batch, the
    /// shared store holds every cost admitted anywhere, and its state is
    /// the memory store's after recording them in the order the batches
    /// reached it.
    #[test]
    fn the_shared_state_is_every_admitted_request_recorded_in_batch_order(
        ops in proptest::collection::vec((0u64..300, 1u64..3, 0u8..3, any::<bool>()), 1..80)
    ) {
        for limit in limits() {
            let remote = Arc::new(Remote::default());
            let clock = clock();
            let instances: Vec<_> =
                (0..3).map(|_| instance(&remote, &clock, EXACT)).collect();
            let request = [LimitKey { limit: &limit, key: b"k" }];
            let mut admitted = 0;
            let mut t = START;
            for &(advance, cost, who, sync) in &ops {
                t += advance * NANOS_PER_MS;
                let who = &instances[usize::from(who)];
                let decision = now(who.check(&request, Moment::At(t), cost)).unwrap();
                if decision[0].allowed {
                    admitted += cost;
                }
                if sync {
                    now(who.sync()).unwrap();
                }
            }
            for instance in &instances {
                now(instance.sync()).unwrap();
            }
            prop_assert_eq!(remote.recorded_cost(), admitted, "{}", limit);
            let reference = memory(&clock);
            for record in remote.log.lock().iter() {
                now(reference.record(request[0], Moment::At(record.usage.at), record.usage.cost)).unwrap();
            }
            let value = remote.value(&limit, b"k");
            for later in [0, 300, 1_000, 2_500, 5_000] {
                let at = t + later * NANOS_PER_MS;
                let expected = now(reference.check(&request, Moment::At(at), 0)).unwrap()[0].remaining;
                prop_assert_eq!(remaining(&limit, value.as_deref(), at), expected, "{} +{} ms", limit, later);
            }
        }
    }
}

/// One instance uses part of a limit; after its batch a second one (which
/// reads the key on first use) and then a third that never saw the key
/// admit exactly the rest between them.
#[test]
fn a_limit_is_handed_off_between_instances() {
    for limit in limits() {
        let remote = Arc::new(Remote::default());
        let clock = clock();
        let [a, b, c] = [(); 3].map(|()| instance(&remote, &clock, SyncConfig::default()));
        let request = [LimitKey {
            limit: &limit,
            key: b"k",
        }];
        let capacity = now(a.check(&request, Moment::Now, 0)).unwrap()[0].remaining;
        let admit = |who: &support::Instance, most: u64| {
            (0..most)
                .filter(|_| now(who.check(&request, Moment::Now, 1)).unwrap()[0].allowed)
                .count() as u64
        };
        assert_eq!(admit(&a, 2), 2, "{limit}");
        now(a.sync()).unwrap();
        assert_eq!(admit(&b, 1), 1, "{limit}");
        now(b.sync()).unwrap();
        assert_eq!(admit(&c, capacity + 5), capacity - 3, "{limit}");
        assert_eq!(
            remote.exchanges.load(Ordering::SeqCst),
            5,
            "3 first reads, 2 batches"
        );
    }
}

/// While the shared store is down, decisions stay local and degraded,
/// the unsent usage stays within its bound (coalesced at the later
/// instant), and all of it reaches the store once it is back.
#[test]
fn an_outage_is_decided_locally_and_its_usage_merged_afterwards() {
    let limit = Limit::new(AlgorithmName::Gcra, Rate::per_second(100).unwrap());
    let remote = Arc::new(Remote::default());
    let clock = clock();
    let config = SyncConfig {
        max_pending: 4,
        ..SyncConfig::default()
    };
    let a = instance(&remote, &clock, config);
    let reference = memory(&clock);
    let request = [LimitKey {
        limit: &limit,
        key: b"k",
    }];
    assert!(!now(a.check(&request, Moment::Now, 1)).unwrap()[0].degraded);
    now(reference.check(&request, Moment::Now, 1)).unwrap();
    now(a.sync()).unwrap();
    remote.down.store(true, Ordering::SeqCst);
    for _ in 0..49 {
        clock.advance(Duration::from_millis(1));
        let decision = now(a.check(&request, Moment::Now, 1)).unwrap()[0];
        assert!(decision.allowed);
        now(reference.check(&request, Moment::Now, 1)).unwrap();
        if now(a.sync()).is_ok() {
            panic!("the store is down");
        }
        let decision = now(a.check(&request, Moment::Now, 0)).unwrap()[0];
        assert!(decision.degraded);
    }
    let stats = a.stats();
    assert_eq!(stats.failed_batches, 49);
    assert!(stats.unsent <= 4, "{stats:?}");
    remote.down.store(false, Ordering::SeqCst);
    now(a.sync()).unwrap();
    assert_eq!(remote.recorded_cost(), 50);
    assert_eq!(a.stats().unsent, 0);
    assert!(!now(a.check(&request, Moment::Now, 0)).unwrap()[0].degraded);
    // Coalesced usage is held as long or longer, never less.
    let value = remote.value(&limit, b"k");
    for later in [0, 10, 100, 400, 1_000] {
        let at = tollgate_core::time::Clock::now(&*clock) + later * NANOS_PER_MS;
        let expected = now(reference.check(&request, Moment::At(at), 0)).unwrap()[0].remaining;
        assert!(
            remaining(&limit, value.as_deref(), at) <= expected,
            "+{later} ms"
        );
    }
}

/// A key first used while the shared store is down starts from a fresh
/// copy (degraded), and the first batch that gets through brings the
/// global state, with what was admitted meanwhile counted on it.
#[test]
fn a_key_first_used_during_an_outage_converges_on_the_first_batch() {
    let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_minute(10).unwrap());
    let remote = Arc::new(Remote::default());
    let clock = clock();
    let request = [LimitKey {
        limit: &limit,
        key: b"k",
    }];
    let a = instance(&remote, &clock, SyncConfig::default());
    for _ in 0..6 {
        assert!(now(a.check(&request, Moment::Now, 1)).unwrap()[0].allowed);
    }
    now(a.sync()).unwrap();
    let b = instance(&remote, &clock, SyncConfig::default());
    remote.down.store(true, Ordering::SeqCst);
    let first = now(b.check(&request, Moment::Now, 1)).unwrap()[0];
    assert!(first.allowed && first.degraded && first.remaining == 9);
    remote.down.store(false, Ordering::SeqCst);
    now(b.sync()).unwrap();
    let after = now(b.check(&request, Moment::Now, 0)).unwrap()[0];
    assert_eq!((after.remaining, after.degraded), (3, false));
}

/// Leases and bans cannot be merged: such requests are the exact store's,
/// and nothing of them is synced.
#[test]
fn concurrency_and_banned_limits_stay_exact() {
    let remote = Arc::new(Remote::default());
    let clock = clock();
    let a = instance(&remote, &clock, SyncConfig::default());
    let leases = Limit::new(AlgorithmName::Concurrency, Rate::per_second(1).unwrap());
    let ban =
        tollgate_core::ban::Ban::new(2, Duration::from_secs(10), Duration::from_secs(60)).unwrap();
    let banned = Limit::new(AlgorithmName::FixedWindow, Rate::per_second(1).unwrap()).with_ban(ban);
    for limit in [leases, banned] {
        assert!(!a.is_async(&limit));
        let request = [LimitKey {
            limit: &limit,
            key: b"k",
        }];
        assert!(now(a.check(&request, Moment::Now, 1)).unwrap()[0].allowed);
        // The exact store counted it.
        assert!(!now(a.exact().check(&request, Moment::Now, 1)).unwrap()[0].allowed);
    }
    // A request naming one of them is exact as a whole.
    let gcra = Limit::new(AlgorithmName::Gcra, Rate::per_second(1).unwrap());
    let both = [
        LimitKey {
            limit: &gcra,
            key: b"j",
        },
        LimitKey {
            limit: &leases,
            key: b"j",
        },
    ];
    assert!(now(a.check(&both, Moment::Now, 1)).unwrap()[0].allowed);
    now(a.sync()).unwrap();
    assert_eq!(remote.exchanges.load(Ordering::SeqCst), 0);
    assert_eq!(a.stats().keys, 0);
}

/// A limit's own mode wins over the process's: `sync: exact` goes to the
/// exact store under an async default, `sync: async` is decided locally
/// and synced under an exact default, and a limit that says nothing
/// follows the default.
#[test]
fn a_limit_says_its_own_mode() {
    let gcra = Limit::new(AlgorithmName::Gcra, Rate::per_second(1).unwrap());
    for default in [SyncMode::Async, SyncMode::Exact] {
        let remote = Arc::new(Remote::default());
        let clock = clock();
        let config = SyncConfig {
            mode: default,
            ..SyncConfig::default()
        };
        let a = instance(&remote, &clock, config);
        let mut synced = 0;
        for (mode, key) in [
            (Some(SyncMode::Exact), &b"exact"[..]),
            (Some(SyncMode::Async), b"async"),
            (None, b"default"),
        ] {
            let limit = Limit { sync: mode, ..gcra };
            let asynchronous = mode.unwrap_or(default) == SyncMode::Async;
            let case = format!("{mode:?} under {default:?}");
            assert_eq!(a.is_async(&limit), asynchronous, "{case}");
            let request = [LimitKey { limit: &limit, key }];
            let decision = now(a.check(&request, Moment::Now, 1)).unwrap()[0];
            assert!(decision.allowed, "{case}");
            assert_eq!(decision.asynchronous, asynchronous, "{case}");
            // The exact store counted the exact limit's request only.
            let exact = now(a.exact().check(&request, Moment::Now, 0)).unwrap()[0];
            assert_eq!(exact.remaining, u64::from(asynchronous), "{case}");
            synced += u64::from(asynchronous);
        }
        // The async limits' keys go in the batch and reach the shared
        // store, whatever the default.
        assert_eq!(a.stats().keys as u64, synced, "under {default:?}");
        assert_eq!(now(a.sync()).unwrap() as u64, synced, "under {default:?}");
        assert_eq!(remote.recorded_cost(), synced, "under {default:?}");
        assert!(remote.value(&gcra, b"async").is_some());
        assert!(remote.value(&gcra, b"exact").is_none());
    }
}

/// Several limits are all-or-nothing locally too, and a cost no limit can
/// ever admit is an error that counts nothing.
#[test]
fn several_limits_are_all_or_nothing() {
    let remote = Arc::new(Remote::default());
    let clock = clock();
    let a = instance(&remote, &clock, SyncConfig::default());
    let reference = memory(&clock);
    let per_second = Limit::new(AlgorithmName::FixedWindow, Rate::per_second(2).unwrap());
    let per_minute = Limit::new(AlgorithmName::Gcra, Rate::per_minute(3).unwrap());
    let both = [
        LimitKey {
            limit: &per_second,
            key: b"k",
        },
        LimitKey {
            limit: &per_minute,
            key: b"k",
        },
        LimitKey {
            limit: &per_second,
            key: b"k",
        },
    ];
    for step in 0..6 {
        clock.advance(Duration::from_millis(400));
        let x = plain(now(a.check(&both, Moment::Now, 1)).unwrap());
        let y = now(reference.check(&both, Moment::Now, 1)).unwrap();
        assert_eq!(x, y, "step {step}");
        if step % 2 == 0 {
            now(a.sync()).unwrap();
        }
    }
    let too_much = now(a.check(&both, Moment::Now, 2)).unwrap_err();
    assert_eq!(
        too_much,
        now(reference.check(&both, Moment::Now, 2)).unwrap_err()
    );
}

/// Past `max_keys`, new keys are decided by the exact store; copies nobody
/// asked about for `refresh_idle` batches that are as good as fresh and
/// have nothing to send are dropped.
#[test]
fn copies_are_bounded_and_dropped_when_fresh() {
    let remote = Arc::new(Remote::default());
    let clock = clock();
    let config = SyncConfig {
        max_keys: 2,
        ..SyncConfig::default()
    };
    let a = instance(&remote, &clock, config);
    let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_second(1).unwrap());
    let check = |key: &'static [u8]| {
        now(a.check(&[LimitKey { limit: &limit, key }], Moment::Now, 1)).unwrap()[0]
    };
    assert!(check(b"a").allowed && check(b"b").allowed && check(b"c").allowed);
    assert_eq!(a.stats().keys, 2);
    let exact = |key: &'static [u8]| {
        now(a
            .exact()
            .check(&[LimitKey { limit: &limit, key }], Moment::Now, 0))
        .unwrap()[0]
            .remaining
    };
    assert_eq!((exact(b"a"), exact(b"c")), (1, 0), "c went exact");
    now(a.sync()).unwrap();
    assert_eq!(a.stats().keys, 2, "still live");
    clock.advance(Duration::from_secs(2));
    for _ in 0..10 {
        assert_eq!(now(a.sync()).unwrap(), 2, "idle, still read");
        assert_eq!(a.stats().keys, 2, "expired, but read by the batches");
    }
    // Stale now: the next batch reads neither and drops them.
    assert_eq!(now(a.sync()).unwrap(), 0);
    now(a.sync()).unwrap();
    assert_eq!(a.stats().keys, 0, "expired and stale: dropped");
}

/// `max_lag` is the longest span from a batch that got through leaving to
/// the next one coming back (or finding nothing to send): a batch's round
/// trip counts, and so does an outage, whole.
#[test]
fn the_longest_lag_runs_from_a_batch_leaving_to_the_next_coming_back() {
    let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_minute(10).unwrap());
    let remote = Arc::new(Remote::default());
    let clock = clock();
    let a = instance(&remote, &clock, EXACT);
    let request = [LimitKey {
        limit: &limit,
        key: b"k",
    }];
    let ms = Duration::from_millis;
    assert_eq!(a.max_lag(), Duration::ZERO);
    now(a.check(&request, Moment::Now, 1)).unwrap();
    // Leaves at +100 ms (the store was made at +0), back at +130 ms.
    clock.advance(ms(100));
    let on_its_way = Arc::clone(&clock);
    remote
        .during
        .lock()
        .push(Box::new(move || on_its_way.advance(ms(30))));
    assert_eq!(now(a.sync()).unwrap(), 1);
    assert_eq!(a.max_lag(), ms(130));
    // Only a read at +200 ms, back at once: the lag it ends, 100 ms, is
    // shorter.
    clock.advance(ms(70));
    assert_eq!(now(a.sync()).unwrap(), 1);
    assert_eq!(a.max_lag(), ms(130));
    // Down from +250 ms to +650 ms: the batch that gets through there ends
    // a lag that began when the one at +200 ms left.
    clock.advance(ms(50));
    remote.down.store(true, Ordering::SeqCst);
    now(a.check(&request, Moment::Now, 1)).unwrap();
    assert!(now(a.sync()).is_err());
    clock.advance(ms(400));
    assert!(now(a.sync()).is_err());
    assert_eq!(a.max_lag(), ms(130));
    remote.down.store(false, Ordering::SeqCst);
    assert_eq!(now(a.sync()).unwrap(), 1);
    assert_eq!(a.max_lag(), ms(450));
    assert_eq!(a.stats().max_lag, ms(450));
}

/// A bucket that never refuses is as good as fresh again a moment after
/// each use. Its copy stays while it is in use (read by every batch), so
/// a use after a batch without one needs no read of its own.
#[test]
fn a_bucket_that_never_refuses_keeps_its_copy_between_uses() {
    let limit = Limit::new(AlgorithmName::TokenBucket, Rate::per_second(1000).unwrap());
    let remote = Arc::new(Remote::default());
    let clock = clock();
    let a = instance(&remote, &clock, EXACT);
    let request = [LimitKey {
        limit: &limit,
        key: b"k",
    }];
    let ms = Duration::from_millis;
    assert!(now(a.check(&request, Moment::Now, 1)).unwrap()[0].allowed);
    clock.advance(ms(100));
    assert_eq!(now(a.sync()).unwrap(), 1);
    // A batch with no use of the key since the last one.
    clock.advance(ms(100));
    assert_eq!(now(a.sync()).unwrap(), 1, "read again, unused");
    assert_eq!(a.stats().keys, 1, "the copy stays");
    clock.advance(ms(100));
    let exchanges = remote.exchanges.load(Ordering::SeqCst);
    let decision = now(a.check(&request, Moment::Now, 1)).unwrap()[0];
    assert!(decision.allowed && decision.asynchronous);
    assert_eq!(
        remote.exchanges.load(Ordering::SeqCst),
        exchanges,
        "decided on the copy: no round trip"
    );
}

/// An instance that pauses on a key decides, when it uses it again, on
/// the global state of its last batch, never older: the batches of the
/// pause still read the key, and once `refresh_idle` of them have passed
/// the copy is stale and read again before it decides. In each case it
/// admits exactly what the other instance left.
#[test]
fn a_copy_used_again_after_a_pause_decides_on_the_state_of_the_last_batch() {
    let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_minute(20).unwrap());
    let remote = Arc::new(Remote::default());
    let clock = clock();
    let config = SyncConfig {
        refresh_idle: 2,
        ..EXACT
    };
    let (a, b) = (
        instance(&remote, &clock, config),
        instance(&remote, &clock, config),
    );
    let request = [LimitKey {
        limit: &limit,
        key: b"k",
    }];
    let admit = |who: &support::Instance, most: u64| -> u64 {
        (0..most)
            .map(|_| u64::from(now(who.check(&request, Moment::Now, 1)).unwrap()[0].allowed))
            .sum()
    };
    let ms = Duration::from_millis;
    assert_eq!(admit(&a, 1), 1);
    now(a.sync()).unwrap();
    // a pauses; b uses 4 and syncs; a's next batch, with no use, still
    // reads the key.
    assert_eq!(admit(&b, 4), 4);
    now(b.sync()).unwrap();
    clock.advance(ms(100));
    assert_eq!(now(a.sync()).unwrap(), 1);
    assert_eq!(admit(&a, 2), 2, "5 + 2 of 20");
    now(a.sync()).unwrap();
    // A longer pause: two batches still read the key, the third does not.
    for read in [1, 1, 0] {
        clock.advance(ms(100));
        assert_eq!(now(a.sync()).unwrap(), read);
    }
    now(b.sync()).unwrap();
    assert_eq!(admit(&b, 6), 6, "7 + 6 of 20");
    now(b.sync()).unwrap();
    // a's copy is stale: read again first, then exactly the rest.
    let exchanges = remote.exchanges.load(Ordering::SeqCst);
    assert_eq!(admit(&a, 20), 7, "13 + 7 of 20");
    assert_eq!(remote.exchanges.load(Ordering::SeqCst), exchanges + 1);
    now(a.sync()).unwrap();
    assert_eq!(remote.recorded_cost(), 20);
}

/// A settle goes to the shared store, which counted an exact limit's
/// estimate: the refund is given back there, and a store that settles
/// makes the sync store one that settles.
#[test]
fn settles_go_to_the_shared_store() {
    use tollgate_core::algorithm::Settled;
    let remote = Arc::new(Remote::default());
    let clock = clock();
    let config = SyncConfig {
        mode: SyncMode::Exact,
        ..SyncConfig::default()
    };
    let a = instance(&remote, &clock, config);
    assert!(a.settles());
    let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_minute(5).unwrap());
    let request = [LimitKey {
        limit: &limit,
        key: b"k",
    }];
    let at = START + NANOS_PER_SEC;
    assert!(now(a.check(&request, Moment::At(at), 5)).unwrap()[0].allowed);
    assert!(!now(a.check(&request, Moment::At(at), 1)).unwrap()[0].allowed);
    let settled = now(a.settle(request[0], at, Moment::At(at + NANOS_PER_MS), 5, 2)).unwrap();
    assert_eq!(settled, Settled::Refunded { dropped: false });
    let after = now(a.check(&request, Moment::At(at + 2 * NANOS_PER_MS), 3)).unwrap()[0];
    assert!(after.allowed);
    assert_eq!(after.remaining, 0);
    assert_eq!(remote.exchanges.load(Ordering::SeqCst), 0);
}
