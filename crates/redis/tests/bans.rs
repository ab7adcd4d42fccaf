//! Bans on Redis, across clients: two stores on one real `redis-server`
//! (with the module loaded), one deciding with the Lua script and one with
//! the module, in one key namespace. A ban one sets is honoured by the
//! other; strikes taken on either count together; the ban's state is the
//! documented field and value (docs/redis-state.md); a reset through
//! either lifts it. Instants are explicit, so nothing waits on a clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tollgate_core::ban::Ban;
use tollgate_core::time::NANOS_PER_SEC;
use tollgate_core::{AlgorithmName, BanRefusal, Decision, Limit, LimitKey, Moment, Rate, Store};
use tollgate_redis::{Engine, RedisStore};
use tollgate_testkit::RedisServer;

mod support;
use support::engines::store;

const S: u64 = NANOS_PER_SEC;
/// 2025-11-13, in ns.
const START: u64 = 1_763_000_000_000_000_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One a second; refused twice within 10 s: banned for a minute.
fn limit() -> Limit {
    let ban = Ban::new(2, Duration::from_secs(10), Duration::from_secs(60)).unwrap();
    Limit::new(AlgorithmName::Gcra, Rate::per_second(1).unwrap()).with_ban(ban)
}

async fn check(store: &RedisStore, limit: &Limit, key: &[u8], at: u64) -> Decision {
    let request = [LimitKey { limit, key }];
    store.check(&request, Moment::At(at), 1).await.unwrap()[0]
}

#[test]
fn a_ban_set_through_one_engine_holds_through_the_other() {
    let server = RedisServer::start_with_module();
    let limit = limit();
    runtime().block_on(async {
        let lua = store(&server, "bans:", Engine::Lua);
        let module = store(&server, "bans:", Engine::Module);
        for (first, second) in [(&lua, &module), (&module, &lua)] {
            let key = if std::ptr::eq(first, &lua) {
                b"a"
            } else {
                b"b"
            };
            assert!(check(first, &limit, key, START).await.allowed);
            // One strike on each client: the second starts the ban.
            let strike = check(second, &limit, key, START).await;
            assert!(!strike.allowed);
            assert_eq!(strike.ban, None);
            assert_eq!(strike.retry_after, Duration::from_secs(1));
            let banned = check(first, &limit, key, START + S / 2).await;
            assert_eq!(banned.ban, Some(BanRefusal::Started));
            assert_eq!(banned.retry_after, Duration::from_secs(60));
            // Honoured by the other, long after the limit refilled.
            let during = check(second, &limit, key, START + 30 * S).await;
            assert!(!during.allowed);
            assert_eq!(during.ban, Some(BanRefusal::InForce));
            assert_eq!(during.retry_after, Duration::from_millis(30_500));
            assert_eq!(
                second
                    .next_available(
                        LimitKey { limit: &limit, key },
                        Moment::At(START + 30 * S),
                        1
                    )
                    .await
                    .unwrap(),
                START + S / 2 + 60 * S
            );
        }
        // The ban's state, as docs/redis-state.md has it.
        let hash = String::from_utf8(lua.redis_key(b"a")).unwrap();
        let field = "ban gcra 1 1000000000 - - - ban 2 10000000000 60000000000";
        let value = server.command(&format!("HGET {hash} \"{field}\"")).unwrap();
        assert!(
            value.contains(&format!("0 0 {}", START + S / 2 + 60 * S)),
            "{value}"
        );
        // A reset through either lifts the ban for both.
        module.reset(b"a").await.unwrap();
        assert!(check(&lua, &limit, b"a", START + 30 * S).await.allowed);
        lua.reset(b"b").await.unwrap();
        assert!(check(&module, &limit, b"b", START + 30 * S).await.allowed);
    });
}
