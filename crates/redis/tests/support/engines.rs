#![allow(clippy::unwrap_used)]
//! [`Engines`]: the Redis store on both engines at once — the Lua script and
//! tollgate's Redis module, each in its own key namespace of one server that
//! has the module loaded. Every operation runs on each; the two results must
//! be identical, and the script's is returned. A test written against one
//! Redis store so checks both engines against each other, and against the
//! memory store where it compares with one.

use std::time::Duration;

use tollgate_core::{Decision, LimitKey, Moment, MultiReservation, Store, StoreError};
use tollgate_redis::{Engine, RedisConfig, RedisStore};
use tollgate_testkit::RedisServer;

/// The store on the script and on the module.
pub(crate) struct Engines {
    pub(crate) lua: RedisStore,
    pub(crate) module: RedisStore,
}

/// A store on `server` deciding with `engine`, keys under `prefix`.
pub(crate) fn store(server: &RedisServer, prefix: &str, engine: Engine) -> RedisStore {
    let config = RedisConfig {
        key_prefix: prefix.to_owned(),
        timeout: Duration::from_secs(5),
        // Explicit instants never meet Redis's clock; keep every key alive
        // for the whole run however slow the machine is.
        ttl_grace: Duration::from_secs(3600),
        engine,
        ..RedisConfig::default()
    };
    RedisStore::open(&server.url().parse().unwrap(), config).unwrap()
}

impl Engines {
    /// Both engines on `server` (which has the module), under `namespace`.
    pub(crate) fn open(server: &RedisServer, namespace: &str) -> Engines {
        Engines {
            lua: store(
                server,
                &format!("conformance:{namespace}:lua:"),
                Engine::Lua,
            ),
            module: store(
                server,
                &format!("conformance:{namespace}:module:"),
                Engine::Module,
            ),
        }
    }

    fn alike<T: std::fmt::Debug>(what: &str, lua: T, module: T) -> T {
        assert_eq!(
            format!("{lua:?}"),
            format!("{module:?}"),
            "{what}: the script (left) and the module (right) differ"
        );
        lua
    }
}

impl Store for Engines {
    async fn check(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        let lua = self.lua.check(requests, at, cost).await;
        let module = self.module.check(requests, at, cost).await;
        if at == Moment::Now {
            // Two clock readings: equal only in what does not move.
            return lua;
        }
        Engines::alike("check", lua, module)
    }

    async fn reserve(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<MultiReservation, StoreError> {
        let lua = self.lua.reserve(requests, at, cost, max_wait).await;
        let module = self.module.reserve(requests, at, cost, max_wait).await;
        Engines::alike("reserve", lua, module)
    }

    async fn next_available(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        let lua = self.lua.next_available(request, at, cost).await;
        let module = self.module.next_available(request, at, cost).await;
        Engines::alike("next", lua, module)
    }

    async fn record(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        let lua = self.lua.record(request, at, cost).await;
        let module = self.module.record(request, at, cost).await;
        Engines::alike("record", lua, module)
    }

    async fn release(&self, request: LimitKey<'_>, lease: u64) -> Result<bool, StoreError> {
        let lua = self.lua.release(request, lease).await;
        let module = self.module.release(request, lease).await;
        Engines::alike("release", lua, module)
    }

    async fn reset(&self, key: &[u8]) -> Result<usize, StoreError> {
        let lua = self.lua.reset(key).await;
        let module = self.module.reset(key).await;
        Engines::alike("reset", lua, module)
    }

    async fn now(&self) -> Result<u64, StoreError> {
        self.lua.now().await
    }
}
