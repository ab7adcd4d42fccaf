//! The Redis store as the async sync mode's transport (`tollgate-sync`),
//! on a real `redis-server` with tollgate's module: instances hand a limit
//! off exactly through Redis on every algorithm whose usage can be merged,
//! on either engine, and the usage admitted while Redis is down reaches it
//! once it is back. Manual clocks decide every instant; batches run when
//! the test says.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::engines::store;
use tollgate_core::time::{Clock, ManualClock, SystemClock};
use tollgate_core::{AlgorithmName, Limit, LimitKey, Moment, Rate, Store};
use tollgate_redis::{Engine, RedisStore};
use tollgate_sync::{SyncConfig, SyncStore};
use tollgate_testkit::RedisServer;

type Instance = SyncStore<RedisStore, RedisStore>;

fn instance(redis: &RedisStore, clock: &Arc<ManualClock>) -> Instance {
    SyncStore::new(
        redis.clone(),
        redis.clone(),
        clock.clone(),
        SyncConfig::default(),
    )
}

fn limits() -> Vec<Limit> {
    let per_minute = |name| Limit::new(name, Rate::per_minute(5).unwrap());
    vec![
        per_minute(AlgorithmName::FixedWindow),
        per_minute(AlgorithmName::SlidingWindowCounter),
        per_minute(AlgorithmName::SlidingWindowLog),
        Limit::new(AlgorithmName::SteppedWindow, "10/4min".parse().unwrap()),
        per_minute(AlgorithmName::TokenBucket),
        per_minute(AlgorithmName::Gcra).with_burst(4),
        per_minute(AlgorithmName::LeakyBucket).with_burst(4),
    ]
}

/// Admits up to `most` unit requests; how many were admitted.
async fn admit(who: &Instance, request: &[LimitKey<'_>], most: u64) -> u64 {
    let mut admitted = 0;
    for _ in 0..most {
        if who.check(request, Moment::Now, 1).await.unwrap()[0].allowed {
            admitted += 1;
        }
    }
    admitted
}

async fn handed_off(server: &RedisServer, engine: Engine, limits: &[Limit]) {
    let redis = store(server, &format!("sync:{}:", engine.as_str()), engine);
    let clock = Arc::new(ManualClock::new(SystemClock::new().now()));
    for limit in limits {
        let [a, b, c] = [(); 3].map(|()| instance(&redis, &clock));
        let request = [LimitKey {
            limit,
            key: b"handed",
        }];
        let capacity = a.check(&request, Moment::Now, 0).await.unwrap()[0].remaining;
        assert_eq!(admit(&a, &request, 2).await, 2, "{limit}");
        assert_eq!(a.sync().await.unwrap(), 1);
        assert_eq!(admit(&b, &request, 1).await, 1, "{limit}");
        b.sync().await.unwrap();
        // The third never saw the key: it reads it on first use.
        assert_eq!(
            admit(&c, &request, capacity + 3).await,
            capacity - 3,
            "{limit}"
        );
        c.sync().await.unwrap();
        assert_eq!(c.stats().unsent, 0);
        // Redis holds all of it.
        let at = Moment::At(clock.now());
        let global = redis.check(&request, at, 0).await.unwrap()[0];
        assert_eq!(global.remaining, 0, "{limit}");
        assert!(!global.allowed || global.remaining == 0);
        // A key asked about comes back with the next batch, used or not.
        a.check(&request, Moment::Now, 0).await.unwrap();
        assert_eq!(a.sync().await.unwrap(), 1);
        let decision = a.check(&request, Moment::Now, 1).await.unwrap()[0];
        assert!(decision.asynchronous && !decision.degraded);
        assert!(!decision.allowed, "{limit}: a's copy was refreshed");
    }
}

#[tokio::test]
async fn instances_hand_a_limit_off_through_the_module() {
    let server = RedisServer::start_with_module();
    handed_off(&server, Engine::Module, &limits()).await;
}

/// The script records every algorithm the module does.
#[tokio::test]
async fn instances_hand_a_limit_off_through_the_script() {
    let server = RedisServer::start();
    handed_off(&server, Engine::Lua, &limits()).await;
}

/// Redis killed: decisions stay local and degraded, batches fail and keep
/// their usage; Redis back (empty: it saves nothing): the next batch
/// brings it all the usage admitted meanwhile.
#[tokio::test]
async fn usage_admitted_while_redis_is_down_reaches_it_afterwards() {
    let mut server = RedisServer::start_with_module();
    let redis = store(&server, "sync:outage:", Engine::Auto);
    let clock = Arc::new(ManualClock::new(SystemClock::new().now()));
    let a = instance(&redis, &clock);
    let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_minute(100).unwrap());
    let request = [LimitKey {
        limit: &limit,
        key: b"outage",
    }];
    assert_eq!(admit(&a, &request, 3).await, 3);
    a.sync().await.unwrap();
    server.kill();
    // Local, and not known to be degraded until a batch fails.
    assert!(a.check(&request, Moment::Now, 1).await.unwrap()[0].allowed);
    assert!(a.sync().await.is_err());
    for _ in 0..3 {
        clock.advance(Duration::from_millis(5));
        let decision = a.check(&request, Moment::Now, 1).await.unwrap()[0];
        assert!(decision.allowed && decision.degraded);
        assert!(a.sync().await.is_err());
    }
    assert!(a.stats().failed_batches >= 4 && a.stats().unsent > 0);
    server.restart();
    let mut synced = a.sync().await;
    // The connection notices the restart on its first call.
    if synced.is_err() {
        synced = a.sync().await;
    }
    assert_eq!(synced.unwrap(), 1);
    assert_eq!(a.stats().unsent, 0);
    let usage = redis
        .record(request[0], Moment::At(clock.now()), 0)
        .await
        .unwrap();
    assert_eq!(
        usage, 4,
        "the outage's usage, in a Redis that lost the rest"
    );
    let decision = a.check(&request, Moment::Now, 0).await.unwrap()[0];
    assert_eq!((decision.remaining, decision.degraded), (96, false));
}
