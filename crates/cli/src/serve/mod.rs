//! `tollgate serve`: wiring only. Reads the settings, loads the rules,
//! builds the store (memory, or Redis under its failure policy), starts the
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
use tollgate_core::Store;
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_redis::{RedisConfig, RedisStore};
use tollgate_rules::watch::RulesWatcher;
use tollgate_rules::RuleSet;
use tollgate_server::guarded::Guarded;
use tollgate_server::metrics::Metrics;
use tollgate_server::App;

use crate::args::ServeArgs;
use config::{LogFormat, ServeConfig, SharedStore, StoreChoice};

/// How often expired keys are swept and the memory gauge updated.
const HOUSEKEEPING_PERIOD: Duration = Duration::from_millis(250);

/// Runs the service until a shutdown signal.
pub fn run(args: &ServeArgs) -> Result<()> {
    let config = ServeConfig::resolve(args)?;
    init_logging(config.log_format);
    let rules = match &config.rules {
        Some(path) => {
            RuleSet::load(path).with_context(|| format!("loading rules from {}", path.display()))?
        }
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
    match config.store.clone() {
        StoreChoice::Memory => serve_memory(config, rules).await,
        StoreChoice::Redis(shared) => serve_shared(config, shared, rules).await,
    }
}

/// The memory store: sweeps, snapshots, then the servers.
async fn serve_memory(config: ServeConfig, rules: RuleSet) -> Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let memory_config = MemoryConfig {
        max_bytes: config.memory_max_bytes,
        ..MemoryConfig::default()
    };
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
    let app = App::new(store, rules, config.rules.clone(), config.settings.clone());
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
    let housekeeping = tokio::spawn(housekeeping(app.clone(), app.store().clone()));
    let snapshots = match (&config.snapshot, config.snapshot_interval) {
        (Some(path), Some(every)) => Some(tokio::spawn(periodic_snapshots(
            app.clone(),
            path.clone(),
            every,
        ))),
        _ => None,
    };
    let served = run_servers(app.clone(), &config).await;
    housekeeping.abort();
    if let Some(task) = snapshots {
        task.abort();
    }
    if let Some(path) = &config.snapshot {
        save_snapshot(&app, path).await;
    }
    tracing::info!("stopped");
    served
}

/// A shared Redis store under the failure policy, with a local memory
/// store for the `local` policy.
async fn serve_shared(config: ServeConfig, shared: SharedStore, rules: RuleSet) -> Result<()> {
    let redis_config = RedisConfig {
        key_prefix: shared.prefix.clone(),
        timeout: shared.timeout,
        over_limit_cache: shared.over_limit_cache,
        tls_ca: shared.tls_ca.clone(),
        tls_cert: shared.tls_cert.clone(),
        tls_key: shared.tls_key.clone(),
        ..RedisConfig::default()
    };
    let redis = RedisStore::open(&shared.endpoint, redis_config)
        .with_context(|| format!("opening the store {:?}", shared.endpoint))?;
    let fallback = LocalStore::system(MemoryStore::new(MemoryConfig {
        max_bytes: config.memory_max_bytes,
        ..MemoryConfig::default()
    }));
    let metrics = Metrics::new();
    let store = Guarded::new(
        redis,
        fallback.clone(),
        shared.on_error,
        metrics.store_error_counter(),
    );
    match store.primary().ping().await {
        Ok(()) => tracing::info!(store = ?shared.endpoint, "shared store answers"),
        Err(error) => tracing::warn!(
            store = ?shared.endpoint,
            %error,
            policy = shared.on_error.as_str(),
            "shared store does not answer yet; the failure policy applies until it does"
        ),
    }
    let app = App::with_metrics(
        store,
        rules,
        config.rules.clone(),
        config.settings.clone(),
        metrics,
    );
    let housekeeping = tokio::spawn(housekeeping(app.clone(), fallback));
    let served = run_servers(app, &config).await;
    housekeeping.abort();
    tracing::info!("stopped");
    served
}

/// Watches the rules and serves HTTP and gRPC until a shutdown signal.
async fn run_servers<S: Store>(app: App<S>, config: &ServeConfig) -> Result<()> {
    let _watcher = config.rules.as_ref().map(|path| {
        let app = app.clone();
        RulesWatcher::spawn(path, move |loaded| {
            let _ = app.apply_reload(loaded);
        })
    });

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
        shutdown_signal().await;
        let _ = stop.send(true);
    });
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|&s| s).await;
    };
    let http = tollgate_server::serve(listener, app.clone(), until_stopped(stopped.clone()));
    let grpc = tollgate_server::grpc::serve_grpc(
        grpc_listener,
        app.clone(),
        config.response_headers,
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

/// Sweeps expired keys of the memory store (the main one, or the shared
/// store's local fallback) a few shards at a time and publishes memory use.
async fn housekeeping<S: Store>(app: App<S>, store: LocalStore) {
    let mut tick = tokio::time::interval(HOUSEKEEPING_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        store.memory().sweep(store.sweep_horizon(), 64);
        app.metrics().set_memory_used(store.memory().memory_used());
    }
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
    tracing::info!("shutdown signal received; finishing requests in flight");
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
