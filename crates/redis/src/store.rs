//! [`RedisStore`]: the core's [`Store`] trait over a Redis or Redis Cluster
//! connection.
//!
//! Each operation is one call of the module (`TOLLGATE.DECIDE2`) or of the
//! script (`EVALSHA`) carrying every cell of the request, bounded by the
//! configured timeout. Connections are multiplexed: concurrent calls from
//! many tasks are written back to back on one socket per server and their
//! replies matched in order, so throughput is not one round trip per
//! decision; on one server the calls of concurrent requests are also
//! written together, one batch per scheduler pass (the `batch` module).
//! Connecting is lazy: a store opens
//! while Redis is down, fails its calls fast with [`StoreError`]s, and
//! recovers by itself when Redis answers again.
//!
//! The engine is tollgate's Redis module (`TOLLGATE.DECIDE2`) where every
//! node has it and the script otherwise, as [`RedisConfig::engine`] says
//! (see the `engine` module): both take the same words and keep the same
//! state, so a call may go to either.
//!
//! On a cluster, a request whose keys fall in different slots cannot be one
//! script. It is checked on every slot first without counting (`probe`),
//! and only if every limit admits it is it counted, slot by slot, each slot
//! atomically. No limit ever admits beyond itself; a race between the probe
//! and the count can only leave a rejected request counted in the slots
//! before the one that refused it (an under-admission, never an
//! over-admission). Reservations across slots are refused.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo, Slot};
use redis::FromRedisValue;
use tollgate_core::algorithm::Settled;
use tollgate_core::time::duration_to_nanos;
use tollgate_core::{
    Decision, LimitError, LimitKey, Moment, MultiReservation, Store, StoreError, StoreStatus,
};

use crate::batch::Batcher;
use crate::cells::{self, Cell, Plan};
use crate::endpoint::Endpoint;
use crate::engine::{self, Engine, EngineState, Running};
use crate::limits::Limits;
use crate::over_limit::{self, OverLimitCache};
use crate::reply::{self, malformed, Words};
use crate::script::{LEAN_GCRA, SOURCE};
use crate::slots::SlotMap;
use crate::tls::{self, TlsError};

/// How the Redis store behaves.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// Prepended to every key the store writes (default `tollgate:`).
    pub key_prefix: String,
    /// The longest an operation may take, connecting included; after it
    /// the operation fails with [`StoreError::Timeout`] (default 250 ms).
    pub timeout: Duration,
    /// How long a key outlives the expiry of the states it holds (default
    /// 1 s), so that clocks a little apart never drop a live state early.
    pub ttl_grace: Duration,
    /// Answer a request Redis rejected, until its wait is over, without
    /// asking again (default on; see the `over_limit` module).
    pub over_limit_cache: bool,
    /// A PEM bundle of CA certificates to trust instead of the system's,
    /// for a `rediss://` server whose certificate a private CA signed.
    pub tls_ca: Option<PathBuf>,
    /// A PEM client certificate (chain) to present to a `rediss://` server
    /// that requires one (mutual TLS); needs [`tls_key`](Self::tls_key).
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of [`tls_cert`](Self::tls_cert).
    pub tls_key: Option<PathBuf>,
    /// Which engine decides (default [`Engine::Auto`]).
    pub engine: Engine,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            key_prefix: "tollgate:".to_owned(),
            timeout: Duration::from_millis(250),
            ttl_grace: Duration::from_secs(1),
            over_limit_cache: true,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            engine: Engine::Auto,
        }
    }
}

/// Why a store could not be opened. Nothing was connected or changed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The TLS settings are unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The Redis client refused the URL or the settings.
    #[error("Redis client: {0}")]
    Client(String),
}

impl From<redis::RedisError> for OpenError {
    fn from(error: redis::RedisError) -> OpenError {
        OpenError::Client(error.to_string())
    }
}

impl From<OpenError> for StoreError {
    fn from(error: OpenError) -> StoreError {
        StoreError::Unavailable(error.to_string())
    }
}

/// Limiter state in Redis, shared by every tollgate instance using it.
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) connection: Connection,
    /// For the overrides' pub/sub connection (the `overrides` module): the
    /// server, or a cluster's first seed (a cluster publishes to every
    /// node).
    pubsub: redis::Client,
    pub(crate) script: redis::Script,
    lean_gcra: redis::Script,
    config: RedisConfig,
    /// `config.ttl_grace` in ms, as every call sends it.
    pub(crate) grace_ms: String,
    pub(crate) limits: Limits,
    over_limit: OverLimitCache,
    pub(crate) engine: EngineState,
}

pub(crate) enum Connection {
    /// The engines' calls go through the batcher (see the `batch` module),
    /// everything else straight to the connection.
    Single(ConnectionManager, Batcher<ConnectionManager>),
    Cluster(Box<LazyCluster>),
}

/// A cluster connection made on first use and kept; the cluster client
/// follows `MOVED`/`ASK` and refreshes its slot map after failovers.
pub(crate) struct LazyCluster {
    client: ClusterClient,
    live: ArcSwapOption<ClusterConnection>,
    connecting: tokio::sync::Mutex<()>,
    /// The slot map the sync batches are grouped by, read on first use
    /// and again after a batch found it stale (see the `slots` module).
    slots: ArcSwapOption<SlotMap>,
    slots_stale: AtomicBool,
}

impl LazyCluster {
    /// Drops the connection; the next call connects again.
    pub(crate) fn forget(&self) {
        self.live.store(None);
    }

    /// The map may no longer say which master serves a slot: the next
    /// [`slot_map`](Self::slot_map) reads it again.
    pub(crate) fn slots_stale(&self) {
        self.slots_stale.store(true, Ordering::Relaxed);
    }

    /// Which master serves each slot: the map read last, or read now
    /// (`CLUSTER SLOTS` on any node) when there is none or it went stale.
    /// A stale map that cannot be read again is used as it is (some keys
    /// then fail on their own and go again).
    pub(crate) async fn slot_map(&self) -> Result<Arc<SlotMap>, StoreError> {
        let known = self.slots.load_full();
        if let Some(known) = &known {
            if !self.slots_stale.load(Ordering::Relaxed) {
                return Ok(Arc::clone(known));
            }
        }
        let read = async {
            let mut connection = self.get().await?;
            let mut command = redis::cmd("CLUSTER");
            command.arg("SLOTS");
            let reply = connection
                .route_command(
                    command,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                )
                .await
                .map_err(unavailable)?;
            SlotMap::parse(&reply).ok_or_else(|| {
                StoreError::Unavailable(format!("tollgate: CLUSTER SLOTS answered {reply:?}"))
            })
        };
        match (read.await, known) {
            (Ok(map), _) => {
                let map = Arc::new(map);
                self.slots.store(Some(Arc::clone(&map)));
                self.slots_stale.store(false, Ordering::Relaxed);
                Ok(map)
            }
            (Err(_), Some(known)) => Ok(known),
            (Err(error), None) => Err(error),
        }
    }

    pub(crate) async fn get(&self) -> Result<ClusterConnection, StoreError> {
        if let Some(live) = self.live.load_full() {
            return Ok((*live).clone());
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(live) = self.live.load_full() {
            return Ok((*live).clone());
        }
        let connection = self
            .client
            .get_async_connection()
            .await
            .map_err(unavailable)?;
        self.live.store(Some(Arc::new(connection.clone())));
        Ok(connection)
    }
}

/// A node name or reply as text, for messages.
fn value_text(value: &redis::Value) -> String {
    match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        redis::Value::SimpleString(text) => text.clone(),
        other => format!("{other:?}"),
    }
}

pub(crate) fn unavailable(error: redis::RedisError) -> StoreError {
    StoreError::Unavailable(error.to_string())
}

impl RedisStore {
    /// A store on `endpoint`. Returns at once without connecting (Redis may
    /// be down); must be called inside a tokio runtime. The TLS files of
    /// `config` are read and checked here: a file that cannot be used, a
    /// client certificate without its key (or the reverse), or TLS files for
    /// an endpoint that is not TLS, are errors.
    pub fn open(endpoint: &Endpoint, config: RedisConfig) -> Result<RedisStore, OpenError> {
        let certificates = tls::certificates(&config, endpoint)?;
        if endpoint.is_tls() {
            tls::install_crypto_provider();
        }
        let client_of = |url: &str| match certificates.clone() {
            Some(certificates) => redis::Client::build_with_tls(url, certificates),
            None => redis::Client::open(url),
        };
        let pubsub = match endpoint {
            Endpoint::Single(url) => client_of(url)?,
            Endpoint::Cluster(nodes) => match nodes.first() {
                Some(node) => client_of(node)?,
                None => return Err(OpenError::Client("a cluster URL without nodes".into())),
            },
        };
        let connection = match endpoint {
            Endpoint::Single(url) => {
                let client = client_of(url)?;
                let manager_config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(config.timeout))
                    .set_response_timeout(Some(config.timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(config.timeout);
                let manager = ConnectionManager::new_lazy_with_config(client, manager_config)?;
                Connection::Single(manager.clone(), Batcher::new(manager))
            }
            Endpoint::Cluster(nodes) => {
                let mut builder = ClusterClient::builder(nodes.iter().map(String::as_str))
                    .connection_timeout(config.timeout)
                    .response_timeout(config.timeout)
                    .retries(2);
                if let Some(certificates) = certificates {
                    builder = builder.certs(certificates);
                }
                let client = builder.build()?;
                Connection::Cluster(Box::new(LazyCluster {
                    client,
                    live: ArcSwapOption::empty(),
                    connecting: tokio::sync::Mutex::new(()),
                    slots: ArcSwapOption::empty(),
                    slots_stale: AtomicBool::new(false),
                }))
            }
        };
        Ok(RedisStore {
            inner: Arc::new(Inner {
                connection,
                pubsub,
                script: redis::Script::new(SOURCE),
                lean_gcra: redis::Script::new(LEAN_GCRA),
                grace_ms: config.ttl_grace.as_millis().to_string(),
                limits: Limits::default(),
                config,
                over_limit: OverLimitCache::default(),
                engine: EngineState::new(),
            }),
        })
    }

    /// The Redis key of the hash that holds `key`'s states (for operators
    /// inspecting Redis, and for tests that must know a key's slot).
    pub fn redis_key(&self, key: &[u8]) -> Vec<u8> {
        cells::redis_key(&self.inner.config.key_prefix, key)
    }

    /// The configuration.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// The cells `requests` touch, under this store's prefix and prepared
    /// limits, each charged `cost`, for a call at `at` (for the windows a
    /// calendar limit carries: around `at`'s instant, or for
    /// [`Moment::Now`] around this process's clock, which Redis's is
    /// taken to be within a few windows of).
    pub(crate) fn plan(
        &self,
        requests: &[LimitKey<'_>],
        cost: u64,
        at: Moment,
    ) -> Result<cells::Plan, StoreError> {
        let instant = match at {
            Moment::At(ns) => ns,
            Moment::Now if requests.iter().any(|r| r.limit.calendar.is_some()) => {
                duration_to_nanos(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default(),
                )
            }
            Moment::Now => 0,
        };
        cells::plan(
            &self.inner.config.key_prefix,
            &self.inner.limits,
            requests,
            cost,
            instant,
        )
    }

    /// Whether Redis answers a `PING` within the timeout (for readiness).
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.bounded(async {
            let _: String = self.command(redis::cmd("PING")).await?;
            Ok(())
        })
        .await
    }

    /// A pub/sub connection for the overrides' changes, bounded by the
    /// timeout.
    pub(crate) async fn override_pubsub(&self) -> Result<redis::aio::PubSub, StoreError> {
        let client = self.inner.pubsub.clone();
        self.bounded(async move { client.get_async_pubsub().await.map_err(unavailable) })
            .await
    }

    /// `future`, failed with [`StoreError::Timeout`] when it takes too long.
    pub(crate) async fn bounded<T>(
        &self,
        future: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let timeout = self.inner.config.timeout;
        let result = tokio::time::timeout(timeout, future)
            .await
            .unwrap_or(Err(StoreError::Timeout(timeout)));
        if let (Err(error), Connection::Cluster(cluster)) = (&result, &self.inner.connection) {
            // The cluster client refreshes its slot map on MOVED and on some
            // connection errors, but a dead master's socket can keep timing
            // out; starting over from the seeds finds the promoted replica.
            if !error.to_string().contains("tollgate:") {
                cluster.forget();
            }
        }
        if matches!(&result, Err(error) if !error.to_string().contains("tollgate:")) {
            // A reconnect or a failover may put a node without the module
            // in front: look again.
            self.inner.engine.forget();
        }
        result
    }

    /// The engine that decided last, if the store has looked yet.
    pub fn running_engine(&self) -> Option<Running> {
        self.inner.engine.last()
    }

    /// Looks which engine can decide now: the module when every node
    /// (every master of a cluster) has it, unless the configured engine is
    /// `lua`. With engine `module`, a node without it is an error that
    /// names it.
    pub async fn probe_engine(&self) -> Result<Running, StoreError> {
        self.bounded(self.probe()).await
    }

    pub(crate) async fn probe(&self) -> Result<Running, StoreError> {
        if self.inner.config.engine == Engine::Lua {
            self.inner.engine.found(Running::Lua);
            return Ok(Running::Lua);
        }
        let mut info = redis::cmd("COMMAND");
        info.arg("INFO").arg(engine::COMMAND);
        let missing: Option<String> = match &self.inner.connection {
            Connection::Single(manager, _) => {
                let reply: redis::Value = info
                    .query_async(&mut manager.clone())
                    .await
                    .map_err(unavailable)?;
                (!engine::knows_command(&reply)).then(|| "the server".to_owned())
            }
            Connection::Cluster(cluster) => {
                let mut connection = cluster.get().await?;
                let every_master =
                    RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let reply = connection
                    .route_command(info, every_master)
                    .await
                    .map_err(unavailable)?;
                match reply {
                    redis::Value::Map(nodes) => nodes
                        .iter()
                        .find(|(_, reply)| !engine::knows_command(reply))
                        .map(|(node, _)| format!("node {}", value_text(node))),
                    reply => (!engine::knows_command(&reply)).then(|| "a node".to_owned()),
                }
            }
        };
        let running = match missing {
            None => Running::Module,
            Some(node) if self.inner.config.engine == Engine::Module => {
                return Err(StoreError::Unavailable(format!(
                    "tollgate: the tollgate Redis module ({}) is not loaded on {node}, and the Redis engine is `module`: load libtollgate_redis.so there, or use the engine `auto`",
                    engine::COMMAND
                )));
            }
            Some(_) => Running::Lua,
        };
        self.inner.engine.found(running);
        Ok(running)
    }

    pub(crate) async fn command<T: redis::FromRedisValue>(
        &self,
        cmd: redis::Cmd,
    ) -> Result<T, StoreError> {
        match &self.inner.connection {
            Connection::Single(manager, _) => cmd
                .query_async(&mut manager.clone())
                .await
                .map_err(unavailable),
            Connection::Cluster(cluster) => {
                let mut connection = cluster.get().await?;
                cmd.query_async(&mut connection).await.map_err(unavailable)
            }
        }
    }

    /// Runs `op` over `cells` (all in one slot on a cluster) on the engine
    /// that can decide now: the module, or the script when a node does not
    /// know the module's command.
    async fn run(
        &self,
        op: &str,
        cells: &[&Cell],
        at: Moment,
        extra: &str,
    ) -> Result<Words, StoreError> {
        // The rare paths (a probe, the script, a cluster) are boxed, so
        // that the common one, the module on one server, is a small future
        // to create and move.
        self.bounded(async {
            let running = match self.inner.engine.current() {
                Some(running) => running,
                None => Box::pin(self.probe()).await?,
            };
            if running == Running::Module {
                match self.decide_in_module(op, cells, at, extra).await {
                    Err(error) if engine::is_unknown_command(&error) => {
                        // Failed over to a node without the module: the
                        // script reads what the module wrote.
                        self.inner.engine.forget();
                        if self.inner.config.engine == Engine::Module {
                            return Err(script_error(error, cells));
                        }
                    }
                    // A module of an earlier release, without this
                    // operation (`settle`): the script decides this call.
                    Err(error)
                        if engine::is_unknown_operation(&error)
                            && self.inner.config.engine != Engine::Module => {}
                    result => return result.map_err(|e| script_error(e, cells)),
                }
            }
            Box::pin(self.decide_in_script(op, cells, at, extra)).await
        })
        .await
    }

    /// The `TOLLGATE.DECIDE2` call of `op` over `cells` (see
    /// [`decide_in_module`](Self::decide_in_module)).
    pub(crate) fn module_command(
        &self,
        op: &str,
        cells: &[&Cell],
        at: Moment,
        extra: &str,
    ) -> redis::Cmd {
        // Sized for its words, so that it is written without growing: the
        // name, three per cell, the last.
        let bytes = cells
            .iter()
            .map(|c| c.key.len() + c.limit.field.len() + c.spec().len() + 21)
            .sum::<usize>();
        let mut cmd = redis::Cmd::with_capacity(2 + 3 * cells.len(), bytes + 64 + extra.len());
        cmd.arg(engine::COMMAND);
        let mut digits = itoa::Buffer::new();
        let mut word = Vec::with_capacity(64 + extra.len());
        for cell in cells {
            word.clear();
            word.extend_from_slice(digits.format(cell.cost).as_bytes());
            word.push(b' ');
            word.extend_from_slice(cell.spec().as_bytes());
            cmd.arg(cell.key.as_slice())
                .arg(cell.limit.field.as_bytes())
                .arg(word.as_slice());
        }
        word.clear();
        word.extend_from_slice(op.as_bytes());
        word.push(b' ');
        if let Moment::At(ns) = at {
            word.extend_from_slice(digits.format(ns).as_bytes());
        }
        word.push(b' ');
        word.extend_from_slice(self.inner.grace_ms.as_bytes());
        word.push(b' ');
        word.extend_from_slice(extra.as_bytes());
        cmd.arg(word.as_slice());
        cmd
    }

    /// `TOLLGATE.DECIDE2`: the script's words, keys first, packed into
    /// fewer arguments (crates/redis-module): per limit its key, its field,
    /// and its cost and spec in one; then `op at grace_ms extra` in one.
    async fn decide_in_module(
        &self,
        op: &str,
        cells: &[&Cell],
        at: Moment,
        extra: &str,
    ) -> Result<Words, redis::RedisError> {
        let cmd = self.module_command(op, cells, at, extra);
        // One bulk string: the script's words, separated by single spaces.
        let words: Words = match &self.inner.connection {
            Connection::Single(_, batcher) => {
                Words::from_redis_value(batcher.query(cmd).await?.extract_error()?)?
            }
            Connection::Cluster(cluster) => {
                Box::pin(async {
                    let mut connection = cluster.get().await.map_err(|e| {
                        redis::RedisError::from((redis::ErrorKind::Io, "cluster", e.to_string()))
                    })?;
                    cmd.query_async(&mut connection).await
                })
                .await?
            }
        };
        Ok(words)
    }

    /// The script's `op` over `cells`: the lean script when it can decide
    /// them, the full one otherwise.
    async fn decide_in_script(
        &self,
        op: &str,
        cells: &[&Cell],
        at: Moment,
        extra: &str,
    ) -> Result<Words, StoreError> {
        if matches!(op, "check" | "probe") && cells.iter().all(|c| c.limit.lean.is_some()) {
            let reply = self.invoke_lean(op, cells, at).await?;
            // The lean script wrote nothing when it answers `fallback`.
            if reply.get(0) != Some(&b"fallback"[..]) {
                return Ok(reply);
            }
        }
        self.invoke_script(op, cells, at, extra).await
    }

    /// gcra_lean.lua's `op` over `cells`, every one of them lean.
    async fn invoke_lean(
        &self,
        op: &str,
        cells: &[&Cell],
        at: Moment,
    ) -> Result<Words, StoreError> {
        if cells.iter().any(|c| c.limit.lean.is_none()) {
            return Err(malformed("a cell the lean script cannot take"));
        }
        let script = &self.inner.lean_gcra;
        let call = || {
            let mut cmd = self.evalsha(script, op, cells, at, 5);
            for cell in cells {
                if let Some(lean) = cell.limit.lean {
                    cmd.arg(cell.limit.field.as_bytes())
                        .arg(lean.n)
                        .arg(lean.p)
                        .arg(lean.burst)
                        .arg(cell.cost);
                }
            }
            cmd
        };
        self.invoke(script, call, cells).await
    }

    /// The full script called with the driver's convention (driver.lua).
    async fn invoke_script(
        &self,
        op: &str,
        cells: &[&Cell],
        at: Moment,
        extra: &str,
    ) -> Result<Words, StoreError> {
        let call = || self.script_command(op, cells, at, extra);
        self.invoke(&self.inner.script, call, cells).await
    }

    /// The full script's call of `op` over `cells`, with the driver's
    /// convention (driver.lua).
    pub(crate) fn script_command(
        &self,
        op: &str,
        cells: &[&Cell],
        at: Moment,
        extra: &str,
    ) -> redis::Cmd {
        let mut cmd = self.evalsha(&self.inner.script, op, cells, at, 3);
        cmd.arg(extra);
        for cell in cells {
            cmd.arg(cell.limit.field.as_bytes())
                .arg(cell.spec().as_bytes())
                .arg(cell.cost);
        }
        cmd
    }

    /// An `EVALSHA` of `script` with what both scripts take first: the
    /// cells' keys, then the operation, the instant ('' for Redis's clock)
    /// and the TTL grace in ms; sized for `per_cell` more words a cell.
    fn evalsha(
        &self,
        script: &redis::Script,
        op: &str,
        cells: &[&Cell],
        at: Moment,
        per_cell: usize,
    ) -> redis::Cmd {
        let bytes = cells
            .iter()
            .map(|c| 2 * c.key.len() + c.limit.field.len() + c.spec().len() + 60)
            .sum::<usize>();
        let words = 7 + (1 + per_cell) * cells.len();
        let mut cmd = redis::Cmd::with_capacity(words, bytes + 80);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(cells.len());
        for cell in cells {
            cmd.arg(cell.key.as_slice());
        }
        cmd.arg(op);
        match at {
            Moment::Now => cmd.arg(""),
            Moment::At(ns) => cmd.arg(ns),
        };
        cmd.arg(self.inner.grace_ms.as_str());
        cmd
    }

    /// Runs a script's call, made by `call`, on the connection: through
    /// the batcher on one server. A server that does not have the script
    /// (after a restart, a failover or `SCRIPT FLUSH`: `NOSCRIPT`) is given
    /// it, and the call made again, as `redis::ScriptInvocation` does.
    async fn invoke(
        &self,
        script: &redis::Script,
        call: impl Fn() -> redis::Cmd,
        cells: &[&Cell],
    ) -> Result<Words, StoreError> {
        let no_script = |result: &redis::RedisResult<Words>| matches!(result, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript));
        let result = match &self.inner.connection {
            Connection::Single(manager, batcher) => {
                let query = || async {
                    let value = batcher.query(call()).await?.extract_error()?;
                    Ok(Words::from_redis_value(value)?)
                };
                let result = query().await;
                if no_script(&result) {
                    script
                        .load_async(&mut manager.clone())
                        .await
                        .map_err(unavailable)?;
                    query().await
                } else {
                    result
                }
            }
            Connection::Cluster(cluster) => {
                let mut connection = cluster.get().await?;
                let result = call().query_async(&mut connection).await;
                if no_script(&result) {
                    script
                        .load_async(&mut connection)
                        .await
                        .map_err(unavailable)?;
                    call().query_async(&mut connection).await
                } else {
                    result
                }
            }
        };
        result.map_err(|e| script_error(e, cells))
    }

    /// The cells grouped by cluster slot (one group on a single node).
    fn groups<'c>(&self, cells: &'c [Cell]) -> Vec<Vec<&'c Cell>> {
        if matches!(self.inner.connection, Connection::Single(..)) {
            return vec![cells.iter().collect()];
        }
        let mut groups: Vec<(Slot, Vec<&Cell>)> = Vec::new();
        for cell in cells {
            let slot = Slot::for_key(&cell.key);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, group)) => group.push(cell),
                None => groups.push((slot, vec![cell])),
            }
        }
        groups.into_iter().map(|(_, group)| group).collect()
    }

    /// The plan's decisions per cell.
    async fn check_cells(
        &self,
        plan: &Plan,
        at: Moment,
        cost: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        let groups = self.groups(&plan.cells);
        let mut decisions = Vec::new();
        if let [group] = groups.as_slice() {
            decisions = reply::decisions(&self.run("check", group, at, "").await?, 1, group.len())?;
        } else {
            // Across cluster slots: probe everywhere, then count slot by slot
            // (see the module documentation). All slots use one instant.
            let at = match at {
                Moment::Now => Moment::At(self.now().await?),
                at => at,
            };
            let mut all = true;
            for group in &groups {
                let reply = self.run("probe", group, at, "").await?;
                let probed = reply::decisions(&reply, 1, group.len())?;
                all &= probed.iter().all(|d| d.allowed);
                decisions.extend(probed);
            }
            if !all && cost > 0 {
                // Nothing is counted, but each slot whose limits refused
                // is checked once more so that they take their strikes (a
                // check there counts nothing, as one of them refuses).
                let mut start = 0;
                for group in &groups {
                    let refusing = decisions[start..start + group.len()]
                        .iter()
                        .any(|d| !d.allowed);
                    if refusing && group.iter().any(|c| c.limit.banned) {
                        let reply = self.run("check", group, at, "").await?;
                        let struck = reply::decisions(&reply, 1, group.len())?;
                        decisions.splice(start..start + group.len(), struck);
                    }
                    start += group.len();
                }
            }
            if all && cost > 0 {
                decisions.clear();
                let mut refused = false;
                for group in &groups {
                    let op = if refused { "probe" } else { "check" };
                    let reply = self.run(op, group, at, "").await?;
                    let counted = reply::decisions(&reply, 1, group.len())?;
                    refused |= counted.iter().any(|d| !d.allowed);
                    decisions.extend(counted);
                }
            }
            // Back from slot order to cell order.
            let order: Vec<&Cell> = groups.iter().flatten().copied().collect();
            let mut in_cell_order = Vec::with_capacity(decisions.len());
            for cell in &plan.cells {
                let i = order
                    .iter()
                    .position(|c| std::ptr::eq(*c, cell))
                    .ok_or_else(|| malformed("cell lost"))?;
                in_cell_order.push(decisions[i]);
            }
            decisions = in_cell_order;
        }
        Ok(decisions)
    }
}

/// Errors the script raises on purpose carry a `tollgate:` prefix; those a
/// request causes become the memory store's errors for it.
pub(crate) fn script_error(error: redis::RedisError, cells: &[&Cell]) -> StoreError {
    script_error_text(error.to_string(), cells)
}

/// [`script_error`] of an error's message.
pub(crate) fn script_error_text(text: String, cells: &[&Cell]) -> StoreError {
    if text.contains("tollgate: reservation_unsupported") {
        return StoreError::Limit(LimitError::ReservationUnsupported);
    }
    for option in ["record", "settle"] {
        if text.contains(&format!("tollgate: {option}_unsupported")) {
            if let Some(cell) = cells.first() {
                return StoreError::Limit(LimitError::Option {
                    option,
                    algorithm: cell.limit.name,
                });
            }
        }
    }
    StoreError::Unavailable(text)
}

impl Store for RedisStore {
    async fn check(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let plan = self.plan(requests, cost, at)?;
        // A request with a ban is always asked of Redis: each refusal by
        // its limit is a strike there, which a cached answer would miss.
        let cacheable = self.inner.config.over_limit_cache
            && at == Moment::Now
            && cost > 0
            && plan
                .cells
                .iter()
                .all(|c| c.limit.reservable && !c.limit.banned);
        if !cacheable {
            return Ok(plan.by_request(self.check_cells(&plan, at, cost).await?));
        }
        let fingerprint = over_limit::fingerprint(&plan.cells);
        if let Some(cells) = self.inner.over_limit.get(fingerprint, Instant::now()) {
            return Ok(plan.by_request(cells));
        }
        let cells = self.check_cells(&plan, at, cost).await?;
        if cells.iter().any(|d| !d.allowed) {
            self.inner
                .over_limit
                .insert(fingerprint, &plan.cells, &cells, Instant::now());
        }
        Ok(plan.by_request(cells))
    }

    async fn reserve(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<MultiReservation, StoreError> {
        let plan = self.plan(requests, cost, at)?;
        if plan.cells.iter().any(|c| !c.limit.reservable) {
            return Err(LimitError::ReservationUnsupported.into());
        }
        if plan.cells.is_empty() {
            return Ok(MultiReservation {
                wait: Duration::ZERO,
                booked: true,
                retry_after: Duration::ZERO,
                decisions: Vec::new(),
            });
        }
        let groups = self.groups(&plan.cells);
        let [group] = groups.as_slice() else {
            return Err(StoreError::Unavailable(
                "a reservation across Redis Cluster slots cannot be atomic; give its keys one hash slot".to_owned(),
            ));
        };
        let max_wait = max_wait.map_or(String::new(), |d| duration_to_nanos(d).to_string());
        let reply = self.run("reserve", group, at, &max_wait).await?;
        let decisions = reply::decisions(&reply, 4, group.len())?;
        Ok(MultiReservation {
            booked: reply.get(1) == Some(&b"1"[..]),
            wait: Duration::from_nanos(reply.number(2)?),
            retry_after: Duration::from_nanos(reply.number(3)?),
            decisions: plan.by_request(decisions),
        })
    }

    async fn next_available(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        let plan = self.plan(&[request], cost, at)?;
        let reply = self.run("next", &[&plan.cells[0]], at, "").await?;
        reply.number(1)
    }

    async fn record(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        let plan = self.plan(&[request], 0, at)?;
        let mut cell = plan.cells[0].clone();
        cell.cost = cost;
        let reply = self.run("record", &[&cell], at, "").await?;
        reply.number(1)
    }

    /// One atomic call on the key's slot (the script's or the module's
    /// `settle`). A refund given back may make requests admitted sooner
    /// than a cached rejection of them says: this process forgets its
    /// cached rejections on the key (see the `over_limit` module).
    async fn settle(
        &self,
        request: LimitKey<'_>,
        admitted_at: u64,
        at: Moment,
        estimate: u64,
        actual: u64,
    ) -> Result<Settled, StoreError> {
        // Never before the admission, as in the memory store; a calendar
        // limit's windows are sent around that instant then.
        let at = match at {
            Moment::At(ns) => Moment::At(ns.max(admitted_at)),
            Moment::Now => Moment::Now,
        };
        let plan = self.plan(&[request], 0, at)?;
        let cell = &plan.cells[0];
        let words = format!("{admitted_at} {estimate} {actual}");
        let reply = self.run("settle", &[cell], at, &words).await?;
        let settled = match reply.number(1)? {
            0 => Settled::Exact,
            1 => Settled::Charged,
            2 => Settled::Refunded { dropped: false },
            3 => Settled::Refunded { dropped: true },
            _ => return Err(malformed("a settle outcome was expected")),
        };
        if settled == (Settled::Refunded { dropped: false }) {
            self.inner.over_limit.forget_key(&cell.key);
        }
        Ok(settled)
    }

    fn settles(&self) -> bool {
        true
    }

    async fn release(&self, request: LimitKey<'_>, lease: u64) -> Result<bool, StoreError> {
        let plan = self.plan(&[request], 0, Moment::Now)?;
        let reply = self
            .run(
                "release",
                &[&plan.cells[0]],
                Moment::Now,
                &lease.to_string(),
            )
            .await?;
        Ok(reply.get(1) == Some(&b"1"[..]))
    }

    async fn reset(&self, key: &[u8]) -> Result<usize, StoreError> {
        let key = cells::redis_key(&self.inner.config.key_prefix, key);
        self.inner.over_limit.forget_key(&key);
        if self.inner.engine.last() == Some(Running::Module) {
            let mut reset = redis::cmd("TOLLGATE.RESET");
            reset.arg(&key);
            match self.bounded(self.command::<usize>(reset)).await {
                Err(StoreError::Unavailable(e)) if e.to_lowercase().contains("unknown command") => {
                    self.inner.engine.forget();
                }
                result => return result,
            }
        }
        let mut pipe = redis::pipe();
        pipe.atomic().hlen(&key).del(&key).ignore();
        let (held,): (usize,) = self
            .bounded(async {
                match &self.inner.connection {
                    Connection::Single(manager, _) => pipe
                        .query_async(&mut manager.clone())
                        .await
                        .map_err(unavailable),
                    Connection::Cluster(cluster) => {
                        let mut connection = cluster.get().await?;
                        pipe.query_async(&mut connection).await.map_err(unavailable)
                    }
                }
            })
            .await?;
        Ok(held)
    }

    fn engine(&self) -> Option<&'static str> {
        self.inner.engine.last().map(Running::as_str)
    }

    /// Ready when Redis tells the time and an engine can decide (looking
    /// which one when the store does not know yet).
    async fn status(&self) -> StoreStatus {
        if let Err(error) = self.now().await {
            return StoreStatus::Unavailable(error.to_string());
        }
        if self.inner.engine.current().is_none() {
            if let Err(error) = self.probe_engine().await {
                return StoreStatus::Unavailable(error.to_string());
            }
        }
        StoreStatus::Ready
    }

    async fn now(&self) -> Result<u64, StoreError> {
        let (secs, micros): (u64, u64) = self.bounded(self.command(redis::cmd("TIME"))).await?;
        Ok(secs
            .saturating_mul(1_000_000_000)
            .saturating_add(micros * 1_000))
    }
}
