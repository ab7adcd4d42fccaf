#![allow(clippy::unwrap_used)]
//! [`Engines`]: the Redis store on both engines at once — the Lua script and
//! tollgate's Redis module, each in its own key namespace of one server that
//! has the module loaded. Every operation runs on each; the two results must
//! be identical, and the script's is returned. After every operation at an
//! explicit instant, the two namespaces must also hold the same keys, the
//! same fields and the same states (docs/redis-state.md: byte for byte, but
//! for the packed rows' bases and widths, which each writer picks), with
//! TTLs set alike. A test written against one Redis store so checks both
//! engines against each other, and against the memory store where it
//! compares with one.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tollgate_core::algorithm::Settled;
use tollgate_core::{Decision, LimitKey, Moment, MultiReservation, Store, StoreError};
use tollgate_redis::{Engine, RedisConfig, RedisStore};
use tollgate_testkit::RedisServer;

/// The store on the script and on the module.
pub(crate) struct Engines {
    pub(crate) lua: RedisStore,
    pub(crate) module: RedisStore,
    /// Where both namespaces are read back from.
    keyspace: Mutex<Keyspace>,
}

/// The two namespaces, read back with a connection of their own.
struct Keyspace {
    connection: redis::Connection,
    lua: String,
    module: String,
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
        let lua = format!("conformance:{namespace}:lua:");
        let module = format!("conformance:{namespace}:module:");
        let client = redis::Client::open(server.url()).unwrap();
        Engines {
            lua: store(server, &lua, Engine::Lua),
            module: store(server, &module, Engine::Module),
            keyspace: Mutex::new(Keyspace {
                connection: client.get_connection().unwrap(),
                lua,
                module,
            }),
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

    /// Runs `what` on the script (`lua`) and then on the module (`module`),
    /// and compares the results and then the namespaces; the script's
    /// result.
    async fn both<T: std::fmt::Debug>(
        &self,
        what: &str,
        lua: impl std::future::Future<Output = T>,
        module: impl std::future::Future<Output = T>,
    ) -> T {
        self.keyspace.lock().unwrap().forget_ttls();
        let started = Instant::now();
        let lua = lua.await;
        let module = module.await;
        let elapsed = started.elapsed();
        let result = Engines::alike(what, lua, module);
        self.keyspace.lock().unwrap().compare(what, elapsed);
        result
    }
}

impl Keyspace {
    /// The keys under `prefix`, without it.
    fn keys(&mut self, prefix: &str) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query(&mut self.connection)
            .unwrap();
        for key in &mut keys {
            key.drain(..prefix.len());
        }
        keys.sort();
        keys
    }

    /// Removes every key's TTL, so that the next operation sets the TTL of
    /// each key it writes on both engines (a key without a TTL lives less
    /// than any), and [`compare`](Self::compare) sees what it set: which
    /// TTL a write leaves alone is `engines.rs`'s concern, and left to the
    /// real clock it would make the engines differ by the milliseconds
    /// between their calls.
    fn forget_ttls(&mut self) {
        for prefix in [self.lua.clone(), self.module.clone()] {
            for key in self.keys(&prefix) {
                let mut name = prefix.clone().into_bytes();
                name.extend_from_slice(&key);
                let _: i64 = redis::cmd("PERSIST")
                    .arg(name)
                    .query(&mut self.connection)
                    .unwrap();
            }
        }
    }

    /// The hash `key` under `prefix`: each field's state in a form to
    /// compare, and the instant (ms) the key expires at, -1 for none.
    fn read(&mut self, prefix: &str, key: &[u8]) -> (BTreeMap<String, String>, i64) {
        let mut name = prefix.as_bytes().to_vec();
        name.extend_from_slice(key);
        let fields: BTreeMap<Vec<u8>, Vec<u8>> = redis::cmd("HGETALL")
            .arg(&name)
            .query(&mut self.connection)
            .unwrap();
        let expires: i64 = redis::cmd("PEXPIRETIME")
            .arg(&name)
            .query(&mut self.connection)
            .unwrap();
        let states = fields
            .iter()
            .map(|(field, value)| {
                let field = String::from_utf8_lossy(field).into_owned();
                let state = comparable(&field, value);
                (field, state)
            })
            .collect();
        (states, expires)
    }

    /// Both namespaces hold the same keys, fields and states, and the keys
    /// expire alike: both have a TTL or neither, set `within` each other
    /// (the time the two calls took, the clock's only part in it).
    fn compare(&mut self, what: &str, within: Duration) {
        let (lua, module) = (self.lua.clone(), self.module.clone());
        let keys = self.keys(&lua);
        assert_eq!(
            keys,
            self.keys(&module),
            "{what}: the keys of the script (left) and of the module (right) differ"
        );
        let slack = i64::try_from(within.as_millis()).unwrap() + 1;
        for key in keys {
            let (lua_states, lua_expires) = self.read(&lua, &key);
            let (module_states, module_expires) = self.read(&module, &key);
            let shown = String::from_utf8_lossy(&key);
            assert_eq!(
                lua_states, module_states,
                "{what}: the states of {shown} written by the script (left) and the module (right) differ"
            );
            assert!(
                (lua_expires < 0) == (module_expires < 0)
                    && lua_expires.abs_diff(module_expires) <= slack.unsigned_abs(),
                "{what}: {shown} expires at {lua_expires} ms by the script, {module_expires} ms by the module"
            );
        }
    }
}

/// A state's value as the engines must agree on it: the bytes (escaped),
/// but for the packed rows of `stepped_window` and `concurrency`, read back
/// into their values, since each writer picks its own bases and widths.
fn comparable(field: &str, value: &[u8]) -> String {
    let packed = |lead: usize, columns: usize| -> String {
        let text = String::from_utf8_lossy(value);
        let words: Vec<&str> = text.splitn(lead + 2 * columns + 1, ' ').collect();
        assert_eq!(words.len(), lead + 2 * columns + 1, "{field}: {text}");
        let number = |w: &str| w.parse::<u128>().unwrap();
        let bases: Vec<u128> = (0..columns).map(|c| number(words[lead + 2 * c])).collect();
        let widths: Vec<usize> = (0..columns)
            .map(|c| words[lead + 2 * c + 1].parse().unwrap())
            .collect();
        let body = words[lead + 2 * columns].as_bytes();
        let row: usize = widths.iter().sum();
        assert_eq!(body.len() % row, 0, "{field}: {text}");
        let rows: Vec<Vec<u128>> = body
            .chunks(row)
            .map(|chunk| {
                let mut at = 0;
                (0..columns)
                    .map(|c| {
                        let digits = std::str::from_utf8(&chunk[at..at + widths[c]]).unwrap();
                        at += widths[c];
                        bases[c] + number(digits)
                    })
                    .collect()
            })
            .collect();
        format!("{:?} rows {rows:?}", &words[..lead])
    };
    if field.starts_with("stepped_window ") {
        packed(1, 2)
    } else if field.starts_with("concurrency ") {
        packed(2, 3)
    } else {
        value.escape_ascii().to_string()
    }
}

impl Store for Engines {
    async fn check(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        if at == Moment::Now {
            // Two clock readings: equal only in what does not move.
            let lua = self.lua.check(requests, at, cost).await;
            let _ = self.module.check(requests, at, cost).await;
            return lua;
        }
        self.both(
            "check",
            self.lua.check(requests, at, cost),
            self.module.check(requests, at, cost),
        )
        .await
    }

    async fn reserve(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<MultiReservation, StoreError> {
        self.both(
            "reserve",
            self.lua.reserve(requests, at, cost, max_wait),
            self.module.reserve(requests, at, cost, max_wait),
        )
        .await
    }

    async fn next_available(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        self.both(
            "next",
            self.lua.next_available(request, at, cost),
            self.module.next_available(request, at, cost),
        )
        .await
    }

    async fn record(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        self.both(
            "record",
            self.lua.record(request, at, cost),
            self.module.record(request, at, cost),
        )
        .await
    }

    async fn settle(
        &self,
        request: LimitKey<'_>,
        admitted_at: u64,
        at: Moment,
        estimate: u64,
        actual: u64,
    ) -> Result<Settled, StoreError> {
        self.both(
            "settle",
            self.lua.settle(request, admitted_at, at, estimate, actual),
            self.module
                .settle(request, admitted_at, at, estimate, actual),
        )
        .await
    }

    fn settles(&self) -> bool {
        self.lua.settles() && self.module.settles()
    }

    async fn release(&self, request: LimitKey<'_>, lease: u64) -> Result<bool, StoreError> {
        // Redis's clock decides which states a release deletes and their
        // TTLs: both engines read it within the calls' time.
        self.both(
            "release",
            self.lua.release(request, lease),
            self.module.release(request, lease),
        )
        .await
    }

    async fn reset(&self, key: &[u8]) -> Result<usize, StoreError> {
        self.both("reset", self.lua.reset(key), self.module.reset(key))
            .await
    }

    async fn now(&self) -> Result<u64, StoreError> {
        self.lua.now().await
    }
}
