//! `tollgate gateway`: wiring only. Reads the settings, loads the rules
//! and watches them, builds the store (memory, or Redis under its failure
//! policy) and its housekeeping, and the runtime overrides' table (kept in
//! step with Redis on a shared store, as `serve` keeps it), then serves
//! the reverse proxy ([`tollgate_gateway`]) behind the rate-limiting layer
//! ([`tollgate_tower::RateLimitLayer`]) and the optional admin port (which
//! manages the overrides too) until SIGTERM or SIGINT, and finishes the
//! requests in flight.

pub mod config;

use std::sync::Arc;

use anyhow::{Context, Result};
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tollgate_core::{Store, SyncMode};
use tollgate_gateway::{self as gateway, Proxy, ProxySettings, RequestBody};
use tollgate_listener::Protocols;
use tollgate_rules::overrides::OverrideTable;
use tollgate_rules::watch::{RulesWatcher, WatchOptions};
use tollgate_rules::{LoadOptions, RuleSet};
use tollgate_server::metrics::Metrics;
use tollgate_server::override_store::OverrideBackend;
use tollgate_server::reload::apply_reload;
use tollgate_server::MetricsObserver;
use tollgate_tower::{RateLimitLayer, Settings};
use tower::ServiceBuilder;

use crate::args::GatewayArgs;
use crate::config_file::ConfigError;
use crate::logging;
use crate::shutdown::Shutdown;
use crate::store::{self, StoreChoice};
use config::GatewayConfig;

/// Runs the gateway until a shutdown signal.
pub fn run(args: &GatewayArgs) -> Result<()> {
    let mut config = GatewayConfig::resolve(args)?;
    logging::init(config.log_format);
    let rules = match &config.rules {
        Some(path) => RuleSet::load_with(
            path,
            LoadOptions {
                merge_domains: config.merge_domains,
            },
        )
        .with_context(|| format!("loading rules from {}", path.display()))?,
        None => RuleSet::default(),
    };
    config.domain = config::domain_in(&rules, config.domain.as_deref())?;
    let settings = ProxySettings {
        timeout: config.upstream_timeout,
        tls_ca: config.upstream_tls_ca.clone(),
    };
    // Built before serving, so that unusable CA certificates stop the
    // start with a setting to fix.
    let proxy = Proxy::new(config.upstream.clone(), settings)
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let runtime = runtime(available_cpus()).context("starting the async runtime")?;
    runtime.block_on(serve(config, proxy, rules))
}

/// The CPUs this process may run on (its affinity, a container's quota),
/// as tokio counts them to size its multi-thread runtime.
fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// The runtime the gateway serves on, for a process that may use `cpus`
/// CPUs: with one, tokio's current-thread runtime, every task on the
/// calling thread; with more, the multi-thread runtime, a worker per CPU.
///
/// A multi-thread runtime on one CPU has one worker, so nothing to steal
/// work for, but it still pays for stealing: each task poll goes through
/// its run queues and the statistics that tune how often it looks at the
/// global queue (clock reads and a `pow` per batch of polls). Measured
/// under callgrind, the bare proxy of the gateway benchmark took about
/// 1,800 instructions more per request on a one-worker multi-thread
/// runtime than on the current-thread one (docs/benchmarks.md,
/// "Gateway").
fn runtime(cpus: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if cpus <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    builder.enable_all().thread_name("tollgate").build()
}

/// Builds the store and its housekeeping, then serves.
async fn serve(config: GatewayConfig, proxy: Proxy<RequestBody>, rules: RuleSet) -> Result<()> {
    let store_kind = match config.store.choice {
        StoreChoice::Memory => "memory",
        StoreChoice::Redis(_) => "redis",
    };
    let mut metrics = Metrics::new()
        .with_values_per_rule(config.metric_values_per_rule)
        .with_store_kind(store_kind);
    if matches!(&config.store.choice, StoreChoice::Redis(_)) {
        metrics = metrics.with_sync();
    }
    let metrics = Arc::new(metrics);
    let gauge = {
        let metrics = Arc::clone(&metrics);
        move |used, unstored| {
            metrics.set_memory_used(used);
            metrics.set_memory_unstored(unstored);
        }
    };
    // The runtime overrides: on the memory store, this process's own (set
    // through the admin port, gone when it stops); on Redis, the shared
    // ones, kept in step as every `serve` instance keeps them.
    let overrides = Arc::new(OverrideTable::new());
    match config.store.choice.clone() {
        StoreChoice::Memory => {
            let store = store::memory(config.store.memory_max_bytes);
            let housekeeping = store::housekeeping(store.clone(), gauge);
            let shared_overrides = Overrides {
                table: overrides,
                backend: None,
            };
            let served = serve_on(
                &config,
                proxy,
                Arc::new(store),
                rules,
                metrics,
                shared_overrides,
            )
            .await;
            housekeeping.abort();
            served
        }
        StoreChoice::Redis(shared) => {
            let (store, fallback) =
                store::shared(&shared, config.store.memory_max_bytes, &metrics).await?;
            let redis = store.primary().clone();
            let overrides_sync = store::overrides::sync(redis.clone(), Arc::clone(&overrides));
            let shared_overrides = Overrides {
                table: overrides,
                backend: Some(Arc::new(store::overrides::RedisBackend(redis))),
            };
            let housekeeping = store::housekeeping(fallback, gauge);
            // Behind the local copies of the limits in async mode: every
            // limit under `--sync async`, those that say `sync: async`
            // under `exact`.
            let interval = shared.sync_interval;
            let sync = store::synced(store, shared.sync, interval);
            if shared.sync == SyncMode::Async {
                tracing::info!(interval = ?interval, "async sync mode: deciding from local copies");
            }
            let reported = Arc::clone(&metrics);
            let syncing = tokio::spawn(store::sync_loop(sync.clone(), interval, move |sync| {
                store::report_sync(sync, &reported);
            }));
            let served = serve_on(
                &config,
                proxy,
                Arc::new(sync.clone()),
                rules,
                Arc::clone(&metrics),
                shared_overrides,
            )
            .await;
            syncing.abort();
            store::last_sync(&sync, &metrics).await;
            housekeeping.abort();
            overrides_sync.abort();
            served
        }
    }
}

/// The runtime overrides in force and where a change made on the admin
/// port is written first, if anywhere.
struct Overrides {
    table: Arc<OverrideTable>,
    backend: Option<Arc<dyn OverrideBackend>>,
}

/// Watches the rules, binds the ports and serves until a shutdown signal.
async fn serve_on<S: Store>(
    config: &GatewayConfig,
    proxy: Proxy<RequestBody>,
    store: Arc<S>,
    rules: RuleSet,
    metrics: Arc<Metrics>,
    overrides: Overrides,
) -> Result<()> {
    // The rules in force, swapped whole on each reload.
    let rules = Arc::new(ArcSwap::from_pointee(rules));
    let _watcher = config.rules.as_ref().map(|path| {
        let (rules, metrics) = (Arc::clone(&rules), Arc::clone(&metrics));
        let options = WatchOptions {
            load: LoadOptions {
                merge_domains: config.merge_domains,
            },
            ..WatchOptions::default()
        };
        RulesWatcher::spawn_with(path, options, move |loaded| {
            let _ = apply_reload(&rules, &metrics, loaded);
        })
    });

    // Without rules there is no domain, and every request goes through
    // unchecked: a plain proxy.
    if config.domain.is_none() {
        tracing::warn!("no rules: every request is forwarded without a rate limit");
    }
    let limits = RateLimitLayer::new(
        Arc::clone(&store),
        Arc::clone(&rules),
        config.domain.clone().unwrap_or_default(),
    )
    .with_trusted_proxies(config.trusted_proxies.clone())
    .with_settings(Settings {
        shadow: config.shadow,
        quota_mode: config.quota_mode,
        headers: config.headers,
        address_grouping: config.address_grouping,
        ..Settings::default()
    })
    .with_observer(MetricsObserver::new(Arc::clone(&metrics)))
    .with_overrides(Arc::clone(&overrides.table));
    let service = ServiceBuilder::new().layer(limits).service(proxy);

    // Before any address is announced: a signal sent as soon as one is
    // known must find the handlers in place.
    let shutdown = Shutdown::install().context("installing the signal handlers")?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding the gateway to {}", config.listen))?;
    let address = listener.local_addr().context("reading the bound address")?;
    tracing::info!(%address, upstream = %config.upstream, "serving the gateway");
    // Tests and scripts read the real port (after `--listen 127.0.0.1:0`)
    // from this line.
    println!("tollgate: gateway listening on http://{address}");
    let admin = match config.admin {
        Some(at) => {
            let listener = TcpListener::bind(at)
                .await
                .with_context(|| format!("binding the admin port to {at}"))?;
            let address = listener.local_addr().context("reading the bound address")?;
            tracing::info!(%address, "serving the admin port");
            println!("tollgate: admin listening on http://{address}");
            Some(listener)
        }
        None => None,
    };

    // One signal stops both servers.
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.received().await;
        let _ = stop.send(true);
    });
    let gateway = gateway::run(
        listener,
        service,
        config.connections,
        Arc::new(metrics.connections("gateway")),
        until_stopped(stopped.clone()),
    );
    let admin = async {
        match admin {
            Some(listener) => {
                let observer = Arc::new(metrics.connections("admin"));
                let router = tollgate_server::admin_router(
                    store,
                    Arc::clone(&metrics),
                    tollgate_server::AdminOptions {
                        token: config.admin_token.clone(),
                        rules: Arc::clone(&rules),
                        rules_path: config.rules.clone(),
                        shadow: config.shadow,
                        quota_mode: config.quota_mode,
                        overrides: Some(overrides.table),
                        override_backend: overrides.backend,
                    },
                );
                tollgate_listener::serve(
                    listener,
                    config.connections,
                    Protocols::Http1And2,
                    observer,
                    move |_| (router.clone(), std::future::pending()),
                    until_stopped(stopped),
                )
                .await
            }
            None => Ok(()),
        }
    };
    // The dashboard's rates and sparklines.
    let sampled = Arc::clone(&metrics);
    let sampler = tokio::spawn(tollgate_server::history::sampling(move |now_ms| {
        sampled.sample(now_ms);
    }));
    let (gateway, admin) = tokio::join!(gateway, admin);
    sampler.abort();
    gateway.context("serving the gateway")?;
    admin.context("serving the admin port")?;
    tracing::info!("stopped");
    Ok(())
}

/// Completes once `stopped` turns true.
async fn until_stopped(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|&s| s).await;
}

#[cfg(test)]
mod tests {
    use tokio::runtime::RuntimeFlavor;

    use super::*;

    #[test]
    fn one_cpu_gets_the_current_thread_runtime_and_more_the_multi_thread_one() {
        let flavor = |cpus| runtime(cpus).unwrap().handle().runtime_flavor();
        assert_eq!(flavor(1), RuntimeFlavor::CurrentThread);
        assert_eq!(flavor(2), RuntimeFlavor::MultiThread);
        assert_eq!(flavor(8), RuntimeFlavor::MultiThread);
    }
}
