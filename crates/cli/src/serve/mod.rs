//! `tollgate serve`: wiring only. Reads the settings, loads the rules,
//! builds the store (memory, or Redis under its failure policy, with local
//! copies in front of it and their sync loop in async sync mode), starts the
//! rules watcher and the memory store's housekeeping,
//! serves the HTTP API until SIGTERM or SIGINT, then finishes the requests
//! in flight.

pub mod config;
pub mod snapshot;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::net::TcpListener;
use tollgate_core::time::{Clock, SystemClock};
use tollgate_core::{Store, SyncMode};
use tollgate_memory::{LocalStore, MemoryStore};
use tollgate_rules::overrides::OverrideTable;
use tollgate_rules::watch::{RulesWatcher, WatchOptions};
use tollgate_rules::{LoadOptions, RuleSet};
use tollgate_server::metrics::Metrics;
use tollgate_server::App;

use crate::args::ServeArgs;
use crate::logging;
use crate::shutdown::Shutdown;
use crate::store::{self, SharedStore, StoreChoice};
use config::ServeConfig;

/// Runs the service until a shutdown signal.
pub fn run(args: &ServeArgs) -> Result<()> {
    let config = ServeConfig::resolve(args)?;
    logging::init(config.log_format);
    let rules = match &config.rules {
        Some(path) => RuleSet::load_with(
            path,
            LoadOptions {
                merge_domains: config.settings.merge_domains,
            },
        )
        .with_context(|| format!("loading rules from {}", path.display()))?,
        None => RuleSet::default(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tollgate")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(config, rules))
}

async fn serve(config: ServeConfig, rules: RuleSet) -> Result<()> {
    match config.store.choice.clone() {
        StoreChoice::Memory => serve_memory(config, rules).await,
        StoreChoice::Redis(shared) => serve_shared(config, shared, rules).await,
    }
}

/// The memory store: sweeps, snapshots, then the servers.
async fn serve_memory(config: ServeConfig, rules: RuleSet) -> Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let memory_config = store::memory_config(config.store.memory_max_bytes);
    // With client time trusted, saved states may belong to any time: keep
    // them all and let the sweeps decide.
    let load_now = if config.settings.trust_client_time {
        0
    } else {
        clock.now()
    };
    let (memory, loaded) = match &config.snapshot {
        Some(path) => snapshot::load(path, memory_config, load_now),
        None => (MemoryStore::new(memory_config), snapshot::Loaded::Missing),
    };
    let store = LocalStore::new(memory, Arc::clone(&clock));
    let metrics = Metrics::new().with_values_per_rule(config.metric_values_per_rule);
    let overrides_file = config.snapshot.as_deref().map(snapshot::overrides_path);
    let overrides = match &overrides_file {
        Some(path) => {
            let (table, loaded) = snapshot::load_overrides(path);
            match loaded {
                snapshot::Loaded::Failed(reason) => {
                    tracing::warn!(%reason, "overrides not loaded; starting without")
                }
                _ => {
                    tracing::info!(path = %path.display(), overrides = table.len(), "overrides loaded")
                }
            }
            table
        }
        None => OverrideTable::new(),
    };
    let app = App::with_overrides(
        store,
        rules,
        config.rules.clone(),
        config.settings.clone(),
        metrics,
        Arc::new(overrides),
        None,
    );
    if let Some(path) = &config.snapshot {
        app.metrics().snapshot_loaded(loaded.label());
        match &loaded {
            snapshot::Loaded::Ok => {
                tracing::info!(path = %path.display(), keys = app.store().memory().len(), "snapshot loaded")
            }
            snapshot::Loaded::Missing => {
                tracing::info!(path = %path.display(), "no snapshot yet; starting empty")
            }
            snapshot::Loaded::Failed(reason) => {
                tracing::warn!(%reason, "snapshot not loaded; starting empty")
            }
        }
    }
    let housekeeping = store::housekeeping(app.store().clone(), gauge(&app));
    let snapshots = match (&config.snapshot, config.snapshot_interval) {
        (Some(path), Some(every)) => Some(tokio::spawn(periodic_snapshots(
            app.clone(),
            path.clone(),
            every,
        ))),
        _ => None,
    };
    let overrides_saver = overrides_file.clone().map(|path| {
        tokio::spawn(save_overrides_on_change(
            Arc::clone(app.overrides()),
            path,
            OVERRIDES_SAVE_EVERY,
        ))
    });
    let served = run_servers(app.clone(), &config).await;
    housekeeping.abort();
    if let Some(task) = snapshots {
        task.abort();
    }
    if let Some(task) = overrides_saver {
        task.abort();
    }
    if let Some(path) = &config.snapshot {
        save_snapshot(&app, path).await;
    }
    if let Some(path) = &overrides_file {
        save_overrides(Arc::clone(app.overrides()), path.clone()).await;
    }
    tracing::info!("stopped");
    served
}

/// A shared Redis store under the failure policy, with a local memory
/// store for the `local` policy, behind the local copies of the limits in
/// async sync mode (every limit under `--sync async`, those that say
/// `sync: async` under `exact`), synced every interval.
async fn serve_shared(config: ServeConfig, shared: SharedStore, rules: RuleSet) -> Result<()> {
    let metrics = Metrics::new()
        .with_values_per_rule(config.metric_values_per_rule)
        .with_store_kind("redis")
        .with_sync();
    let (store, fallback) = store::shared(&shared, config.store.memory_max_bytes, &metrics).await?;
    // Overrides live in Redis: every instance's table follows it.
    let redis = store.primary().clone();
    let overrides = Arc::new(OverrideTable::new());
    let overrides_sync = store::overrides::sync(redis.clone(), Arc::clone(&overrides));
    let backend: Option<Arc<dyn tollgate_server::override_store::OverrideBackend>> =
        Some(Arc::new(store::overrides::RedisBackend(redis.clone())));
    let interval = shared.sync_interval;
    let sync = store::synced(store, shared.sync, interval);
    let app = App::with_overrides(
        sync.clone(),
        rules,
        config.rules.clone(),
        config.settings.clone(),
        metrics,
        overrides,
        backend,
    );
    match shared.sync {
        SyncMode::Async => {
            tracing::info!(interval = ?interval, "async sync mode: deciding from local copies")
        }
        SyncMode::Exact => tracing::info!(
            interval = ?interval,
            "exact sync mode: deciding in Redis (limits that say `sync: async` from local copies)"
        ),
    }
    let housekeeping = store::housekeeping(fallback, gauge(&app));
    let reported = app.clone();
    let syncing = tokio::spawn(store::sync_loop(sync.clone(), interval, move |sync| {
        store::report_sync(sync, reported.metrics());
    }));
    let served = run_servers(app.clone(), &config).await;
    housekeeping.abort();
    syncing.abort();
    store::last_sync(&sync, app.metrics()).await;
    overrides_sync.abort();
    tracing::info!("stopped");
    served
}

/// Watches the rules and serves HTTP and gRPC until a shutdown signal.
async fn run_servers<S: Store>(app: App<S>, config: &ServeConfig) -> Result<()> {
    let _watcher = config.rules.as_ref().map(|path| {
        let app = app.clone();
        let options = WatchOptions {
            load: LoadOptions {
                merge_domains: config.settings.merge_domains,
            },
            ..WatchOptions::default()
        };
        RulesWatcher::spawn_with(path, options, move |loaded| {
            let _ = app.apply_reload(loaded);
        })
    });

    // Before any address is announced: a signal sent as soon as one is
    // known must find the handlers in place.
    let shutdown = Shutdown::install().context("installing the signal handlers")?;
    let listener = TcpListener::bind(config.http)
        .await
        .with_context(|| format!("binding the HTTP API to {}", config.http))?;
    let address = listener.local_addr().context("reading the bound address")?;
    tracing::info!(%address, "serving the HTTP API");
    // Tests and scripts read the real port (after `--http 127.0.0.1:0`) from
    // this line.
    println!("tollgate: listening on http://{address}");
    let grpc_listener = TcpListener::bind(config.grpc)
        .await
        .with_context(|| format!("binding the gRPC API to {}", config.grpc))?;
    let grpc_address = grpc_listener
        .local_addr()
        .context("reading the bound address")?;
    tracing::info!(address = %grpc_address, "serving the Envoy rate limit gRPC API");
    println!("tollgate: grpc listening on http://{grpc_address}");

    // One signal stops both servers.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.received().await;
        let _ = stop.send(true);
    });
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|&s| s).await;
    };
    let http = tollgate_server::serve(
        listener,
        app.clone(),
        config.connections,
        until_stopped(stopped.clone()),
    );
    let grpc = tollgate_server::grpc::serve_grpc(
        grpc_listener,
        app.clone(),
        config.response_headers,
        config.connections,
        until_stopped(stopped),
    );
    let (http, grpc) = tokio::join!(http, grpc);
    http.context("serving HTTP")?;
    grpc.context("serving gRPC")?;
    Ok(())
}

/// Saves a snapshot every `every`.
async fn periodic_snapshots(app: App<LocalStore>, path: PathBuf, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        save_snapshot(&app, &path).await;
    }
}

/// Saves a snapshot off the async threads, logging and counting the result.
async fn save_snapshot(app: &App<LocalStore>, path: &std::path::Path) {
    let store = app.store().clone();
    let target = path.to_owned();
    let saved = tokio::task::spawn_blocking(move || {
        let now = store.sweep_horizon();
        snapshot::save(store.memory(), &target, now)
    })
    .await;
    match saved {
        Ok(Ok(bytes)) => {
            app.metrics().snapshot_saved(true);
            tracing::info!(path = %path.display(), bytes, "snapshot saved");
        }
        Ok(Err(e)) => {
            app.metrics().snapshot_saved(false);
            tracing::error!(path = %path.display(), error = %e, "snapshot not saved");
        }
        Err(e) => {
            app.metrics().snapshot_saved(false);
            tracing::error!(path = %path.display(), error = %e, "snapshot task failed");
        }
    }
}

/// How often the overrides file is brought up to date after a change.
const OVERRIDES_SAVE_EVERY: Duration = Duration::from_secs(1);

/// Saves the overrides to `path` at most every `every`, when they changed.
async fn save_overrides_on_change(table: Arc<OverrideTable>, path: PathBuf, every: Duration) {
    let mut saved = table.version();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let version = table.version();
        if version != saved && save_overrides(Arc::clone(&table), path.clone()).await {
            saved = version;
        }
    }
}

/// Saves the overrides off the async threads, logging the result; whether
/// they were saved.
async fn save_overrides(table: Arc<OverrideTable>, path: PathBuf) -> bool {
    let target = path.clone();
    let saved =
        tokio::task::spawn_blocking(move || snapshot::save_overrides(&table, &target)).await;
    match saved {
        Ok(Ok(bytes)) => {
            tracing::info!(path = %path.display(), bytes, "overrides saved");
            true
        }
        Ok(Err(e)) => {
            tracing::error!(path = %path.display(), error = %e, "overrides not saved");
            false
        }
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "overrides save task failed");
            false
        }
    }
}

/// Reports a memory store's use and unstored keys to `app`'s metrics.
fn gauge<S: Store>(app: &App<S>) -> impl Fn(usize, u64) + Send + 'static {
    let app = app.clone();
    move |used, unstored| {
        app.metrics().set_memory_used(used);
        app.metrics().set_memory_unstored(unstored);
    }
}
