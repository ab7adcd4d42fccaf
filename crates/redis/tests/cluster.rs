//! The Redis store on a real Redis Cluster (three masters started by the
//! test): multi-limit checks on one slot and across slots; a key whose
//! master is killed is decided again once the master is back, or once its
//! replica is promoted; settles on keys of different masters, each on its
//! key's slot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tollgate_core::{AlgorithmName, Limit, LimitKey, Moment, Rate, Store};
use tollgate_redis::{RedisConfig, RedisStore};
use tollgate_testkit::RedisCluster;

/// The bound on an answer while Redis is down: twice the store's timeout
/// ([`patient`]), so that only a hang exceeds it, never a slow answer on a
/// loaded machine.
const NO_HANG: Duration = Duration::from_secs(10);

/// The store's settings in these tests: a timeout of 5 s, not the default
/// 250 ms. A call that times out may still have been counted by Redis, so
/// a timeout on a busy machine would change the counts a test asserts
/// (and, after a failover, finding the new master takes the client longer
/// than 250 ms when both cores are busy). A killed node refuses at once,
/// so no verdict here waits for this timeout.
fn patient() -> RedisConfig {
    RedisConfig {
        timeout: Duration::from_secs(5),
        ..RedisConfig::default()
    }
}

fn gcra(n: u64) -> Limit {
    Limit::new(
        AlgorithmName::Gcra,
        Rate::new(n, Duration::from_secs(3600)).unwrap(),
    )
}

/// The cluster slot tag of a store key, as `CLUSTER KEYSLOT` takes it.
fn tag(store: &RedisStore, key: &[u8]) -> String {
    let full = String::from_utf8(store.redis_key(key)).unwrap();
    let start = full.find('{').unwrap();
    let end = full.find('}').unwrap();
    full[start..=end].to_owned()
}

/// Checks `request` until the cluster serves its slot again (60 s at most),
/// each call answering within [`NO_HANG`], failed or not.
async fn check_until_served(
    store: &RedisStore,
    request: LimitKey<'_>,
    never: &str,
) -> Vec<tollgate_core::Decision> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let started = Instant::now();
        let result = store.check(&[request], Moment::Now, 1).await;
        assert!(started.elapsed() < NO_HANG, "{:?}", started.elapsed());
        if let Ok(d) = result {
            return d;
        }
        assert!(Instant::now() < deadline, "{never}: {result:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn checks_work_across_slots_and_survive_a_master_failover() {
    let mut cluster = RedisCluster::start(3, 0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _context = runtime.enter();
    let store = RedisStore::open(&cluster.url().parse().unwrap(), patient()).unwrap();
    let (per_hour, per_day) = (gcra(2), gcra(5));

    runtime.block_on(async {
        // Two limits on one key: one slot, one script.
        let both = [
            LimitKey {
                limit: &per_hour,
                key: b"alice",
            },
            LimitKey {
                limit: &per_day,
                key: b"alice",
            },
        ];
        for _ in 0..2 {
            let d = store.check(&both, Moment::Now, 1).await.unwrap();
            assert!(d.iter().all(|d| d.allowed));
        }
        let d = store.check(&both, Moment::Now, 1).await.unwrap();
        assert!(!d[0].allowed && d[1].allowed, "{d:?}");
        let day = store.check(&both[1..], Moment::Now, 0).await.unwrap();
        assert_eq!(
            day[0].remaining, 3,
            "the rejection counted nothing in the other limit"
        );

        // Two keys on different masters: all-or-nothing across slots.
        let other = (0..100)
            .map(|i| format!("user{i}"))
            .find(|k| {
                cluster.master_of(&tag(&store, k.as_bytes()))
                    != cluster.master_of(&tag(&store, b"bob"))
            })
            .unwrap();
        let pair = [
            LimitKey {
                limit: &per_day,
                key: b"bob",
            },
            LimitKey {
                limit: &per_hour,
                key: other.as_bytes(),
            },
        ];
        for _ in 0..2 {
            assert!(store
                .check(&pair, Moment::Now, 1)
                .await
                .unwrap()
                .iter()
                .all(|d| d.allowed));
        }
        let d = store.check(&pair, Moment::Now, 1).await.unwrap();
        assert!(d[0].allowed && !d[1].allowed, "{d:?}");
        let bob = store.check(&pair[..1], Moment::Now, 0).await.unwrap();
        // Counted twice of five.
        assert_eq!(
            bob[0].remaining, 3,
            "bob was not counted when the other slot refused"
        );
    });

    // Kill the master of "carol": calls fail fast (within the timeout)
    // while its slots are down, and succeed again once the master is back
    // and the cluster serves them, with no new store.
    let carol = LimitKey {
        limit: &per_day,
        key: b"carol",
    };
    runtime.block_on(async {
        assert!(store.check(&[carol], Moment::Now, 1).await.unwrap()[0].allowed);
    });
    let master = cluster.master_of(&tag(&store, b"carol"));
    cluster.nodes[master].kill();
    runtime.block_on(async {
        let started = Instant::now();
        assert!(store.check(&[carol], Moment::Now, 1).await.is_err());
        assert!(started.elapsed() < NO_HANG, "{:?}", started.elapsed());
    });
    cluster.nodes[master].restart();
    cluster.wait_until_ok();
    let served = runtime.block_on(check_until_served(
        &store,
        carol,
        "the slot was never served again",
    ));
    assert!(served[0].allowed);
}

/// Three masters with a replica each: when a key's master dies, its
/// replica is promoted and the same store decides again, on the state the
/// replica received — no restart of the master, no new store.
#[test]
fn a_replica_takes_over_when_its_master_dies() {
    let mut cluster = RedisCluster::start(3, 1);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _context = runtime.enter();
    let store = RedisStore::open(&cluster.url().parse().unwrap(), patient()).unwrap();
    let per_day = gcra(5);
    let dave = LimitKey {
        limit: &per_day,
        key: b"dave",
    };
    runtime.block_on(async {
        for _ in 0..2 {
            assert!(store.check(&[dave], Moment::Now, 1).await.unwrap()[0].allowed);
        }
    });
    let master = cluster.master_of(&tag(&store, b"dave"));
    // Replication is asynchronous: wait until the replica holds the two
    // counts, so what the promoted replica decides is determined.
    cluster.wait_until_replicated(master);
    cluster.nodes[master].kill();

    let decision = runtime.block_on(check_until_served(
        &store,
        dave,
        "the replica never took over",
    ));
    assert!(decision[0].allowed);
    assert_eq!(decision[0].remaining, 2, "the replica kept the count");
    let promoted = cluster.master_of(&tag(&store, b"dave"));
    assert_ne!(promoted, master);
    assert!(cluster.nodes[promoted].is_running());
}

/// The same failover with tollgate's Redis module on every node, deciding
/// (engine `module`, so no call falls back to the script): two limits on
/// one key counted together, the master killed, and the promoted replica's
/// counters decide the next check exactly.
#[test]
fn the_module_decides_across_a_failover_on_the_replicas_counters() {
    let mut cluster = RedisCluster::start_with_module(3, 1);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _context = runtime.enter();
    let config = RedisConfig {
        engine: tollgate_redis::Engine::Module,
        ..patient()
    };
    let store = RedisStore::open(&cluster.url().parse().unwrap(), config).unwrap();
    let (per_hour, per_day) = (gcra(3), gcra(5));
    let both = [
        LimitKey {
            limit: &per_hour,
            key: b"erin",
        },
        LimitKey {
            limit: &per_day,
            key: b"erin",
        },
    ];
    runtime.block_on(async {
        for _ in 0..2 {
            let d = store.check(&both, Moment::Now, 1).await.unwrap();
            assert!(d.iter().all(|d| d.allowed), "{d:?}");
        }
        assert_eq!(
            store.running_engine(),
            Some(tollgate_redis::Running::Module)
        );
    });
    let master = cluster.master_of(&tag(&store, b"erin"));
    cluster.wait_until_replicated(master);
    cluster.nodes[master].kill();
    let decision = runtime.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match store.check(&both, Moment::Now, 1).await {
                Ok(d) => break d,
                Err(e) => assert!(Instant::now() < deadline, "never served again: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert!(decision.iter().all(|d| d.allowed), "{decision:?}");
    assert_eq!(
        (decision[0].remaining, decision[1].remaining),
        (0, 2),
        "the replica kept both counts"
    );
    let d = runtime
        .block_on(store.check(&both, Moment::Now, 1))
        .unwrap();
    assert!(!d[0].allowed && d[1].allowed, "{d:?}");
    let promoted = cluster.master_of(&tag(&store, b"erin"));
    assert_ne!(promoted, master);
    assert!(cluster.nodes[promoted].is_running());
}

/// Settling on a cluster, on each engine: keys on different masters each
/// take their refund and their charge in one call on their own slot.
#[test]
fn settles_land_on_each_key_s_slot_on_both_engines() {
    use tollgate_core::algorithm::Settled;
    let cluster = RedisCluster::start_with_module(3, 0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _context = runtime.enter();
    let limit = gcra(10);
    // Keys on at least two masters.
    let keys: [&[u8]; 4] = [b"ann", b"ben", b"cid", b"dot"];
    for engine in [tollgate_redis::Engine::Lua, tollgate_redis::Engine::Module] {
        let config = RedisConfig {
            engine,
            key_prefix: format!("settle-{engine}:"),
            ..patient()
        };
        let store = RedisStore::open(&cluster.url().parse().unwrap(), config).unwrap();
        let masters: std::collections::BTreeSet<usize> = keys
            .iter()
            .map(|key| cluster.master_of(&tag(&store, key)))
            .collect();
        assert!(masters.len() > 1, "{masters:?}");
        runtime.block_on(async {
            for key in keys {
                let request = LimitKey { limit: &limit, key };
                let admitted_at = store.now().await.unwrap();
                let at = Moment::At(admitted_at);
                assert!(store.check(&[request], at, 8).await.unwrap()[0].allowed);
                let refund = store.settle(request, admitted_at, at, 8, 3).await;
                assert_eq!(refund, Ok(Settled::Refunded { dropped: false }), "{engine}");
                assert_eq!(
                    store.check(&[request], at, 0).await.unwrap()[0].remaining,
                    7
                );
                let charge = store.settle(request, admitted_at, at, 3, 14).await;
                assert_eq!(charge, Ok(Settled::Charged), "{engine}");
                assert_eq!(
                    store.check(&[request], at, 0).await.unwrap()[0].remaining,
                    0
                );
                assert!(!store.check(&[request], at, 1).await.unwrap()[0].allowed);
            }
        });
    }
}
