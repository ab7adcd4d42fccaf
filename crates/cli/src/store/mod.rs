//! Building the store of `serve` and `gateway`: the memory store, or a
//! shared Redis store under its `--on-store-error` policy with a local
//! memory store beside it, always behind the sync mode's store
//! ([`synced`], whose batches [`sync_loop`] sends), which decides locally
//! the limits in async mode (all of them under `--sync async`, those that
//! say `sync: async` under `exact`) and passes every other request to
//! Redis; and the housekeeping every memory store needs.
//!
//! `serve`'s snapshots are its own (`serve::snapshot`); everything else
//! about the store is built here, once, for both subcommands.

pub mod config;
pub mod overrides;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::task::JoinHandle;
use tollgate_core::time::SystemClock;
use tollgate_core::SyncMode;
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_redis::{Engine, RedisConfig, RedisStore};
use tollgate_server::guarded::Guarded;
use tollgate_server::metrics::{Metrics, SyncFigures};
use tollgate_sync::{SyncConfig, SyncStore};

pub use config::{SharedStore, StoreChoice, StoreConfig, StoreFile};

/// How often expired keys are swept and the memory gauge updated.
const HOUSEKEEPING_PERIOD: Duration = Duration::from_millis(250);

/// The memory store's settings for a cap of `max_bytes`.
pub fn memory_config(max_bytes: usize) -> MemoryConfig {
    MemoryConfig {
        max_bytes,
        ..MemoryConfig::default()
    }
}

/// The memory store on the system clock.
pub fn memory(max_bytes: usize) -> LocalStore {
    LocalStore::system(MemoryStore::new(memory_config(max_bytes)))
}

/// A shared store under its failure policy, counting policy decisions in
/// `metrics`, and the local memory store that answers under `local` (it
/// needs [`housekeeping`] too). Logs whether the shared store answers yet;
/// it is not an error when it does not: the policy applies until it does.
pub async fn shared(
    shared: &SharedStore,
    memory_max_bytes: usize,
    metrics: &Metrics,
) -> Result<(Guarded<RedisStore>, LocalStore)> {
    let redis_config = RedisConfig {
        key_prefix: shared.prefix.clone(),
        timeout: shared.timeout,
        over_limit_cache: shared.over_limit_cache,
        tls_ca: shared.tls_ca.clone(),
        tls_cert: shared.tls_cert.clone(),
        tls_key: shared.tls_key.clone(),
        engine: shared.engine,
        ..RedisConfig::default()
    };
    let redis = RedisStore::open(&shared.endpoint, redis_config)
        .with_context(|| format!("opening the store {:?}", shared.endpoint))?;
    let fallback = memory(memory_max_bytes);
    let store = Guarded::new(
        redis,
        fallback.clone(),
        shared.on_error,
        metrics.store_error_counter(),
    );
    match store.primary().probe_engine().await {
        Ok(engine) => tracing::info!(
            store = ?shared.endpoint,
            engine = engine.as_str(),
            "shared store answers"
        ),
        Err(error)
            if shared.engine == Engine::Module && error.to_string().contains("not loaded") =>
        {
            anyhow::bail!("{error}");
        }
        Err(error) => tracing::warn!(
            store = ?shared.endpoint,
            %error,
            policy = shared.on_error.as_str(),
            "shared store does not answer yet; the failure policy applies until it does"
        ),
    }
    Ok((store, fallback))
}

/// Sweeps the expired keys of `store` a few shards at a time and reports
/// its memory use and its count of unstored keys to `report` (the metrics),
/// until aborted.
pub fn housekeeping(
    store: LocalStore,
    report: impl Fn(usize, u64) + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(HOUSEKEEPING_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            store.memory().sweep(store.sweep_horizon(), 64);
            report(store.memory().memory_used(), store.memory().unstored());
        }
    })
}

/// The store on Redis: local copies of the limits in async mode in front
/// of the Redis store under its failure policy, which decides the rest.
pub type Synced = SyncStore<RedisStore, Guarded<RedisStore>>;

/// `store` behind local copies of the limits in async mode (`mode` for a
/// limit that does not say), synced every `interval` once [`sync_loop`]
/// runs. Under `exact` a request names no async limit unless a rule or an
/// inline limit says `sync: async`, and it goes to Redis as it would
/// without the copies (a sync with nothing to send sends nothing).
pub fn synced(store: Guarded<RedisStore>, mode: SyncMode, interval: Duration) -> Synced {
    let redis = store.primary().clone();
    SyncStore::new(
        redis,
        store,
        Arc::new(SystemClock::new()),
        SyncConfig {
            interval,
            mode,
            ..SyncConfig::default()
        },
    )
}

/// One sync batch every `interval`, each followed by `report` (the
/// figures into the metrics: [`report_sync`]); runs until aborted.
pub async fn sync_loop<R>(sync: Synced, interval: Duration, report: R)
where
    R: Fn(&Synced),
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        if let Err(error) = sync.sync().await {
            tracing::warn!(%error, "a sync batch did not reach the shared store; deciding locally");
        }
        report(&sync);
    }
}

/// The last batch before a graceful stop, so that the usage admitted since
/// the one before is not lost.
pub async fn last_sync(sync: &Synced, metrics: &Metrics) {
    if let Err(error) = sync.sync().await {
        tracing::warn!(%error, "the last sync batch did not reach the shared store");
    }
    report_sync(sync, metrics);
}

/// `sync`'s figures into `metrics`.
pub fn report_sync(sync: &Synced, metrics: &Metrics) {
    let stats = sync.stats();
    metrics.set_sync(&SyncFigures {
        lag: sync.lag(),
        max_lag: stats.max_lag,
        batches: stats.batches,
        failed_batches: stats.failed_batches,
        batch_keys: stats.last_batch_keys,
        unsent: stats.unsent as u64,
        degraded_decisions: stats.degraded_decisions,
    });
}
