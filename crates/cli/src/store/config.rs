//! The store settings shared by `serve` and `gateway`: flags (and their
//! environment variables) over the config file's keys, validated once into
//! a [`StoreConfig`].

use std::path::PathBuf;
use std::time::Duration;

use tollgate_core::SyncMode;
use tollgate_memory::DEFAULT_MAX_BYTES;
use tollgate_redis::{Endpoint, Engine, RedisConfig};
use tollgate_server::guarded::OnStoreError;

use crate::args::StoreArgs;

/// How often the limits decided locally sync when nothing says.
pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_millis(100);
use crate::config_file::ConfigError;

/// The store keys of a config file. Each subcommand's file declares them
/// itself (serde cannot flatten into a struct that refuses unknown keys)
/// and hands them over here.
#[derive(Debug, Default)]
pub struct StoreFile {
    /// `store`.
    pub store: Option<String>,
    /// `on_store_error`.
    pub on_store_error: Option<String>,
    /// `store_timeout_ms`.
    pub store_timeout_ms: Option<u64>,
    /// `redis_prefix`.
    pub redis_prefix: Option<String>,
    /// `redis_engine`.
    pub redis_engine: Option<String>,
    /// `no_over_limit_cache`.
    pub no_over_limit_cache: Option<bool>,
    /// `redis_tls_ca`.
    pub redis_tls_ca: Option<PathBuf>,
    /// `redis_tls_cert`.
    pub redis_tls_cert: Option<PathBuf>,
    /// `redis_tls_key`.
    pub redis_tls_key: Option<PathBuf>,
    /// `memory_max_bytes`.
    pub memory_max_bytes: Option<usize>,
    /// `sync`.
    pub sync: Option<String>,
    /// `sync_interval`.
    pub sync_interval: Option<String>,
}

/// Where limiter state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// The embedded memory store.
    Memory,
    /// A shared Redis or Redis Cluster.
    Redis(SharedStore),
}

/// The settings of a shared store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedStore {
    /// Where it is.
    pub endpoint: Endpoint,
    /// What to do when it fails.
    pub on_error: OnStoreError,
    /// Per-call timeout.
    pub timeout: Duration,
    /// Key prefix.
    pub prefix: String,
    /// Which engine decides.
    pub engine: Engine,
    /// Answer keys known to be over their limit without asking Redis.
    pub over_limit_cache: bool,
    /// CA certificates to trust for TLS (PEM file).
    pub tls_ca: Option<PathBuf>,
    /// Client certificate for mutual TLS (PEM file).
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM file).
    pub tls_key: Option<PathBuf>,
    /// How instances share a limit that does not say (`--sync`).
    pub sync: SyncMode,
    /// How often the limits decided locally are synced (`--sync-interval`):
    /// every limit under `--sync async`, and those that say `sync: async`
    /// under `exact`.
    pub sync_interval: Duration,
}

/// Validated store settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The store.
    pub choice: StoreChoice,
    /// Cap of the memory store (the main one, or a shared store's local
    /// fallback), in bytes.
    pub memory_max_bytes: usize,
}

impl StoreConfig {
    /// Merges `args` (flags and environment) over `file`.
    pub fn resolve(args: &StoreArgs, file: StoreFile) -> Result<StoreConfig, ConfigError> {
        let on_error = match args.on_store_error.clone().or(file.on_store_error) {
            Some(text) => text.parse().map_err(ConfigError::Invalid)?,
            None => OnStoreError::FailClosed,
        };
        let defaults = RedisConfig::default();
        let timeout = args
            .store_timeout_ms
            .or(file.store_timeout_ms)
            .map_or(defaults.timeout, Duration::from_millis);
        if timeout.is_zero() {
            return Err(ConfigError::Invalid(
                "store_timeout_ms must be positive".into(),
            ));
        }
        let tls_ca = args.redis_tls_ca.clone().or(file.redis_tls_ca);
        let tls_cert = args.redis_tls_cert.clone().or(file.redis_tls_cert);
        let tls_key = args.redis_tls_key.clone().or(file.redis_tls_key);
        let sync_interval = match args.sync_interval.clone().or(file.sync_interval) {
            Some(text) => {
                let interval = tollgate_core::rate::parse_duration(&text)
                    .map_err(|e| ConfigError::Invalid(format!("sync_interval: {e}")))?;
                if interval.is_zero() {
                    return Err(ConfigError::Invalid(
                        "sync_interval must be positive".into(),
                    ));
                }
                interval
            }
            None => DEFAULT_SYNC_INTERVAL,
        };
        let sync = match args.sync.clone().or(file.sync).as_deref() {
            None | Some("exact") => SyncMode::Exact,
            Some("async") => SyncMode::Async,
            Some(other) => {
                return Err(ConfigError::Invalid(format!(
                    "sync: {other:?} is not a sync mode (expected exact or async)"
                )))
            }
        };
        let choice = match args.store.clone().or(file.store).as_deref() {
            None | Some("memory") => {
                if sync == SyncMode::Async {
                    return Err(ConfigError::Invalid(
                        "sync async needs a shared store (redis://…), not memory".into(),
                    ));
                }
                if tls_ca.is_some() || tls_cert.is_some() || tls_key.is_some() {
                    return Err(ConfigError::Invalid(
                        "redis_tls_ca, redis_tls_cert and redis_tls_key need a rediss:// store, not memory".into(),
                    ));
                }
                StoreChoice::Memory
            }
            Some(url) => StoreChoice::Redis(SharedStore {
                endpoint: url.parse().map_err(|e: tollgate_redis::EndpointError| {
                    ConfigError::Invalid(format!(
                        "store: {e} (use `memory` or a redis://, rediss://, unix://, redis+unix://, redis+cluster:// or rediss+cluster:// URL)"
                    ))
                })?,
                on_error,
                timeout,
                engine: match args.redis_engine.clone().or(file.redis_engine) {
                    Some(text) => text
                        .parse()
                        .map_err(|e: tollgate_redis::EngineError| ConfigError::Invalid(format!("redis_engine: {e}")))?,
                    None => Engine::Auto,
                },
                prefix: args
                    .redis_prefix
                    .clone()
                    .or(file.redis_prefix)
                    .unwrap_or(defaults.key_prefix),
                over_limit_cache: !(args.no_over_limit_cache
                    || file.no_over_limit_cache.unwrap_or(false)),
                tls_ca,
                tls_cert,
                tls_key,
                sync,
                sync_interval,
            }),
        };
        Ok(StoreConfig {
            choice,
            memory_max_bytes: args
                .memory_max_bytes
                .or(file.memory_max_bytes)
                .unwrap_or(DEFAULT_MAX_BYTES),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_settings_come_from_flags_over_the_file() {
        let file = StoreFile {
            store: Some("rediss://redis:6380".into()),
            redis_tls_ca: Some("/etc/tollgate/ca.pem".into()),
            redis_tls_cert: Some("/file/client.pem".into()),
            redis_tls_key: Some("/file/client.key".into()),
            on_store_error: Some("fail_open".into()),
            ..StoreFile::default()
        };
        let args = StoreArgs {
            redis_tls_cert: Some("/flag/client.pem".into()),
            redis_tls_key: Some("/flag/client.key".into()),
            on_store_error: Some("local".into()),
            ..StoreArgs::default()
        };
        let StoreChoice::Redis(shared) = StoreConfig::resolve(&args, file).unwrap().choice else {
            panic!("a Redis store");
        };
        assert_eq!(shared.tls_ca, Some(PathBuf::from("/etc/tollgate/ca.pem")));
        assert_eq!(shared.tls_cert, Some(PathBuf::from("/flag/client.pem")));
        assert_eq!(shared.tls_key, Some(PathBuf::from("/flag/client.key")));
        assert_eq!(shared.on_error, OnStoreError::Local);
        assert_eq!(shared.sync, SyncMode::Exact, "exact by default");
        assert_eq!(shared.sync_interval, DEFAULT_SYNC_INTERVAL);
    }

    #[test]
    fn the_sync_mode_and_interval_come_from_flags_over_the_file() {
        let file = StoreFile {
            store: Some("redis://redis:6379".into()),
            sync: Some("async".into()),
            sync_interval: Some("1s".into()),
            ..StoreFile::default()
        };
        let resolve =
            |args: &StoreArgs, file| match StoreConfig::resolve(args, file).unwrap().choice {
                StoreChoice::Redis(shared) => (shared.sync, shared.sync_interval),
                StoreChoice::Memory => panic!("a Redis store"),
            };
        assert_eq!(
            resolve(&StoreArgs::default(), file),
            (SyncMode::Async, Duration::from_secs(1))
        );
        let args = StoreArgs {
            store: Some("redis://redis:6379".into()),
            sync: Some("async".into()),
            ..StoreArgs::default()
        };
        assert_eq!(
            resolve(&args, StoreFile::default()),
            (SyncMode::Async, DEFAULT_SYNC_INTERVAL)
        );
        let exact = StoreArgs {
            sync: Some("exact".into()),
            sync_interval: Some("250ms".into()),
            ..args
        };
        // Limits that say `sync: async` still sync at the interval.
        assert_eq!(
            resolve(&exact, StoreFile::default()),
            (SyncMode::Exact, Duration::from_millis(250))
        );
    }

    #[test]
    fn bad_store_settings_are_errors_naming_them() {
        let cases = [
            (
                StoreArgs {
                    redis_tls_ca: Some("/ca.pem".into()),
                    ..StoreArgs::default()
                },
                "redis_tls_ca",
            ),
            (
                StoreArgs {
                    store: Some("etcd://x".into()),
                    ..StoreArgs::default()
                },
                "etcd",
            ),
            (
                StoreArgs {
                    store: Some("redis://h:1".into()),
                    redis_engine: Some("native".into()),
                    ..StoreArgs::default()
                },
                "redis_engine",
            ),
            (
                StoreArgs {
                    store_timeout_ms: Some(0),
                    ..StoreArgs::default()
                },
                "store_timeout_ms",
            ),
            (
                StoreArgs {
                    on_store_error: Some("shrug".into()),
                    ..StoreArgs::default()
                },
                "shrug",
            ),
            (
                StoreArgs {
                    store: Some("redis://h:1".into()),
                    sync: Some("eventually".into()),
                    ..StoreArgs::default()
                },
                "eventually",
            ),
            (
                StoreArgs {
                    store: Some("redis://h:1".into()),
                    sync: Some("async".into()),
                    sync_interval: Some("0ms".into()),
                    ..StoreArgs::default()
                },
                "sync_interval",
            ),
            (
                StoreArgs {
                    sync: Some("async".into()),
                    ..StoreArgs::default()
                },
                "shared store",
            ),
        ];
        for (args, part) in cases {
            let error = StoreConfig::resolve(&args, StoreFile::default())
                .unwrap_err()
                .to_string();
            assert!(error.contains(part), "{part}: {error}");
        }
    }
}
