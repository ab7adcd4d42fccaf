//! The settings of `tollgate serve`, merged from flags, `TOLLGATE_*`
//! environment variables (clap reads both; a flag wins) and the optional
//! TOML config file, then validated once into [`ServeConfig`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tollgate_memory::DEFAULT_MAX_BYTES;
use tollgate_redis::{Endpoint, RedisConfig};
use tollgate_server::guarded::OnStoreError;
use tollgate_server::Settings;

use crate::args::ServeArgs;

/// The config file: the same settings as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    http: Option<SocketAddr>,
    grpc: Option<SocketAddr>,
    response_headers: Option<bool>,
    rules: Option<PathBuf>,
    store: Option<String>,
    on_store_error: Option<String>,
    store_timeout_ms: Option<u64>,
    redis_prefix: Option<String>,
    no_over_limit_cache: Option<bool>,
    redis_tls_ca: Option<PathBuf>,
    redis_tls_cert: Option<PathBuf>,
    redis_tls_key: Option<PathBuf>,
    memory_max_bytes: Option<usize>,
    trust_client_time: Option<bool>,
    snapshot: Option<PathBuf>,
    snapshot_interval: Option<u64>,
    admin_token: Option<String>,
    shadow: Option<bool>,
    max_body_bytes: Option<usize>,
    max_key_bytes: Option<usize>,
    no_headers: Option<bool>,
    log_format: Option<String>,
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
    /// Answer keys known to be over their limit without asking Redis.
    pub over_limit_cache: bool,
    /// CA certificates to trust for TLS (PEM file).
    pub tls_ca: Option<PathBuf>,
    /// Client certificate for mutual TLS (PEM file).
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM file).
    pub tls_key: Option<PathBuf>,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Validated settings of `tollgate serve`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// HTTP listen address.
    pub http: SocketAddr,
    /// gRPC listen address.
    pub grpc: SocketAddr,
    /// Put the rate-limit headers into gRPC answers' `response_headers_to_add`.
    pub response_headers: bool,
    /// Rules path, if any.
    pub rules: Option<PathBuf>,
    /// The store.
    pub store: StoreChoice,
    /// Memory store cap.
    pub memory_max_bytes: usize,
    /// Snapshot path, if any.
    pub snapshot: Option<PathBuf>,
    /// Period of snapshots; `None` saves only on shutdown.
    pub snapshot_interval: Option<Duration>,
    /// The service's settings.
    pub settings: Settings,
    /// Log format.
    pub log_format: LogFormat,
}

/// A setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not valid TOML or has unknown keys.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why, with the place.
        message: String,
    },
    /// A value is out of range or unknown.
    #[error("{0}")]
    Invalid(String),
}

impl ServeConfig {
    /// Merges `args` (flags and environment) over the config file they name.
    pub fn resolve(args: &ServeArgs) -> Result<ServeConfig, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => ConfigFile::default(),
        };
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
        let store = match args.store.clone().or(file.store).as_deref() {
            None | Some("memory") => {
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
            }),
        };
        let log_format = match args.log_format.clone().or(file.log_format).as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(ConfigError::Invalid(format!(
                    "log format {other:?} is not one of: text, json"
                )))
            }
        };
        let defaults = Settings::default();
        let settings = Settings {
            trust_client_time: args.trust_client_time || file.trust_client_time.unwrap_or(false),
            admin_token: args
                .admin_token
                .clone()
                .or(file.admin_token)
                .filter(|t| !t.is_empty()),
            max_body_bytes: args
                .max_body_bytes
                .or(file.max_body_bytes)
                .unwrap_or(defaults.max_body_bytes),
            max_key_bytes: args
                .max_key_bytes
                .or(file.max_key_bytes)
                .unwrap_or(defaults.max_key_bytes),
            max_descriptors: defaults.max_descriptors,
            shadow: args.shadow || file.shadow.unwrap_or(false),
            headers: !(args.no_headers || file.no_headers.unwrap_or(false)),
        };
        if settings.max_body_bytes == 0 || settings.max_key_bytes == 0 {
            return Err(ConfigError::Invalid(
                "max_body_bytes and max_key_bytes must be positive".into(),
            ));
        }
        let interval = args
            .snapshot_interval
            .or(file.snapshot_interval)
            .unwrap_or(60);
        Ok(ServeConfig {
            http: args
                .http
                .or(file.http)
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8080))),
            grpc: args
                .grpc
                .or(file.grpc)
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8081))),
            response_headers: args.response_headers || file.response_headers.unwrap_or(false),
            rules: args.rules.clone().or(file.rules),
            store,
            memory_max_bytes: args
                .memory_max_bytes
                .or(file.memory_max_bytes)
                .unwrap_or(DEFAULT_MAX_BYTES),
            snapshot: args.snapshot.clone().or(file.snapshot),
            snapshot_interval: (interval > 0).then(|| Duration::from_secs(interval)),
            settings,
            log_format,
        })
    }
}

fn read_file(path: &Path) -> Result<ConfigFile, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(
            &path,
            "http = \"127.0.0.1:9000\"\nmax_key_bytes = 10\nshadow = true\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path.clone()),
            max_key_bytes: Some(20),
            ..ServeArgs::default()
        };
        let c = ServeConfig::resolve(&args).unwrap();
        assert_eq!(c.http.port(), 9000);
        assert_eq!(c.settings.max_key_bytes, 20);
        assert!(c.settings.shadow);
        assert_eq!(c.settings.max_body_bytes, 64 * 1024);
    }

    #[test]
    fn redis_tls_files_come_from_flags_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(
            &path,
            "store = \"rediss://redis:6380\"\nredis_tls_ca = \"/etc/tollgate/ca.pem\"\n\
             redis_tls_cert = \"/file/client.pem\"\nredis_tls_key = \"/file/client.key\"\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path),
            redis_tls_cert: Some("/flag/client.pem".into()),
            redis_tls_key: Some("/flag/client.key".into()),
            ..ServeArgs::default()
        };
        let StoreChoice::Redis(shared) = ServeConfig::resolve(&args).unwrap().store else {
            panic!("a Redis store");
        };
        assert_eq!(shared.tls_ca, Some(PathBuf::from("/etc/tollgate/ca.pem")));
        assert_eq!(shared.tls_cert, Some(PathBuf::from("/flag/client.pem")));
        assert_eq!(shared.tls_key, Some(PathBuf::from("/flag/client.key")));

        let args = ServeArgs {
            redis_tls_ca: Some("/etc/tollgate/ca.pem".into()),
            ..ServeArgs::default()
        };
        let error = ServeConfig::resolve(&args).unwrap_err().to_string();
        assert!(error.contains("redis_tls_ca"), "{error}");
        assert!(error.contains("memory"), "{error}");
    }

    #[test]
    fn unknown_file_keys_and_stores_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, "htp = \"x\"\n").unwrap();
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        assert!(ServeConfig::resolve(&args)
            .unwrap_err()
            .to_string()
            .contains("htp"));
        let args = ServeArgs {
            store: Some("etcd://x".into()),
            ..ServeArgs::default()
        };
        assert!(ServeConfig::resolve(&args)
            .unwrap_err()
            .to_string()
            .contains("etcd"));
    }
}
