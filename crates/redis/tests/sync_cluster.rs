//! The async sync mode on a real Redis Cluster (three masters with a
//! replica each): three instances, each with its own connection, hand
//! limits off exactly through keys on every master, a batch going as one
//! pipeline per master; with one master killed, its keys keep deciding
//! locally and their usage reaches the promoted replica, while the other
//! masters' keys sync as before. A manual clock decides every instant;
//! batches run when the test says.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate_core::time::{Clock, ManualClock, SystemClock};
use tollgate_core::{AlgorithmName, Limit, LimitKey, Moment, Rate, Store};
use tollgate_redis::{RedisConfig, RedisStore};
use tollgate_sync::{SyncConfig, SyncStore};
use tollgate_testkit::RedisCluster;

type Instance = SyncStore<RedisStore, RedisStore>;

/// A timeout of 5 s (no verdict waits for it: a killed node refuses at
/// once), and keys kept for the whole run: the manual clock's instants
/// never meet Redis's.
fn config() -> RedisConfig {
    RedisConfig {
        key_prefix: "sync:cluster:".to_owned(),
        timeout: Duration::from_secs(5),
        ttl_grace: Duration::from_secs(3600),
        ..RedisConfig::default()
    }
}

fn per_hour(n: u64) -> Limit {
    Limit::new(
        AlgorithmName::FixedWindow,
        Rate::new(n, Duration::from_secs(3600)).unwrap(),
    )
}

/// The cluster slot tag of a store key, as `CLUSTER KEYSLOT` takes it.
fn tag(store: &RedisStore, key: &str) -> String {
    let full = String::from_utf8(store.redis_key(key.as_bytes())).unwrap();
    let start = full.find('{').unwrap();
    let end = full.find('}').unwrap();
    full[start..=end].to_owned()
}

/// Admits up to `most` unit requests on `key`; how many were admitted.
async fn admit(who: &Instance, limit: &Limit, key: &str, most: u64) -> u64 {
    let request = [LimitKey {
        limit,
        key: key.as_bytes(),
    }];
    let mut admitted = 0;
    for _ in 0..most {
        let decision = who.check(&request, Moment::Now, 1).await.unwrap()[0];
        assert!(decision.asynchronous, "{key}: decided locally");
        admitted += u64::from(decision.allowed);
    }
    admitted
}

/// The usage Redis holds for `key` now (asked until its slot is served).
async fn global(redis: &RedisStore, limit: &Limit, key: &str, at: u64) -> u64 {
    let request = LimitKey {
        limit,
        key: key.as_bytes(),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match redis.record(request, Moment::At(at), 0).await {
            Ok(usage) => return usage,
            Err(error) => assert!(Instant::now() < deadline, "{key}: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn instances_share_limits_across_masters_and_a_killed_master_fails_only_its_keys() {
    let mut cluster = RedisCluster::start(3, 1);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _context = runtime.enter();
    let url = cluster.url();
    let open = || RedisStore::open(&url.parse().unwrap(), config()).unwrap();
    let clock = Arc::new(ManualClock::new(SystemClock::new().now()));
    let instances: Vec<Instance> = (0..3)
        .map(|_| SyncStore::new(open(), open(), clock.clone(), SyncConfig::default()))
        .collect();
    let [a, b, c] = [&instances[0], &instances[1], &instances[2]];
    let redis = open();
    let keys: Vec<String> = (0..12).map(|i| format!("user{i}")).collect();
    let master_of = |cluster: &RedisCluster, key: &str| cluster.master_of(&tag(&redis, key));
    let masters: BTreeSet<usize> = keys.iter().map(|k| master_of(&cluster, k)).collect();
    assert_eq!(masters.len(), 3, "the keys fall on every master");

    // Hand-off: a uses two of five on every key; after its batch, b (which
    // reads each key on first use) one, and c, which never saw the keys,
    // exactly the rest.
    let five = per_hour(5);
    runtime.block_on(async {
        for key in &keys {
            assert_eq!(admit(a, &five, key, 2).await, 2, "{key}");
        }
        assert_eq!(a.sync().await.unwrap(), keys.len());
        for key in &keys {
            assert_eq!(admit(b, &five, key, 1).await, 1, "{key}");
        }
        assert_eq!(b.sync().await.unwrap(), keys.len());
        for key in &keys {
            assert_eq!(admit(c, &five, key, 5).await, 2, "{key}");
        }
        assert_eq!(c.sync().await.unwrap(), keys.len());
        for key in &keys {
            assert_eq!(global(&redis, &five, key, clock.now()).await, 5, "{key}");
        }
        for who in [a, b, c] {
            let stats = who.stats();
            assert_eq!((stats.unsent, stats.key_errors), (0, 0));
        }
    });

    // One master killed: its keys keep deciding locally and their usage
    // stays unsent; the other masters' keys sync as before.
    let many = per_hour(1000);
    runtime.block_on(async {
        for who in [a, b, c] {
            for key in &keys {
                assert_eq!(admit(who, &many, key, 1).await, 1, "{key}");
            }
            who.sync().await.unwrap();
        }
    });
    let dead = master_of(&cluster, &keys[0]);
    let (lost, kept): (Vec<&String>, Vec<&String>) = keys
        .iter()
        .partition(|key| master_of(&cluster, key) == dead);
    cluster.wait_until_replicated(dead);
    cluster.nodes[dead].kill();
    runtime.block_on(async {
        for who in [a, b, c] {
            for key in &keys {
                assert_eq!(admit(who, &many, key, 2).await, 2, "{key}");
            }
            let sent = who.sync().await;
            assert!(sent.is_ok(), "not an outage: {sent:?}");
            let stats = who.stats();
            assert_eq!(stats.unsent, lost.len(), "only the dead master's keys wait");
            assert!(stats.key_errors >= lost.len() as u64);
        }
        for key in &kept {
            assert_eq!(
                global(&redis, &many, key, clock.now()).await,
                3 + 6,
                "{key}"
            );
        }
        for who in [a, b, c] {
            for key in &lost {
                assert_eq!(admit(who, &many, key, 1).await, 1, "{key}");
            }
        }
        // The replica takes over; the next batches bring it what waited.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            for who in [a, b, c] {
                let _ = who.sync().await;
            }
            if [a, b, c].iter().all(|who| who.stats().unsent == 0) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the usage never reached the replica"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for key in &lost {
            assert_eq!(
                global(&redis, &many, key, clock.now()).await,
                3 + 9,
                "{key}"
            );
        }
        for key in &kept {
            assert_eq!(
                global(&redis, &many, key, clock.now()).await,
                3 + 6,
                "{key}"
            );
        }
    });
    assert_ne!(
        master_of(&cluster, &keys[0]),
        dead,
        "the replica serves the slot"
    );
}
