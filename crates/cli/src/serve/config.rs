//! The settings of `tollgate serve`, merged from flags, `TOLLGATE_*`
//! environment variables (clap reads both; a flag wins) and the optional
//! TOML config file, then validated once into [`ServeConfig`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use tollgate_core::rate::parse_duration;
use tollgate_listener::ConnectionSettings;
use tollgate_server::metrics::DEFAULT_VALUES_PER_RULE;
use tollgate_server::Settings;

use crate::args::ServeArgs;
use crate::config_file::{self, ConfigError};
use crate::connections::{self, ConnectionFile};
use crate::logging::LogFormat;
use crate::store::{StoreConfig, StoreFile};

/// The config file: the same settings as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    http: Option<SocketAddr>,
    grpc: Option<SocketAddr>,
    response_headers: Option<bool>,
    response_dynamic_metadata: Option<bool>,
    rules: Option<PathBuf>,
    store: Option<String>,
    on_store_error: Option<String>,
    store_timeout_ms: Option<u64>,
    redis_prefix: Option<String>,
    redis_engine: Option<String>,
    no_over_limit_cache: Option<bool>,
    redis_tls_ca: Option<PathBuf>,
    redis_tls_cert: Option<PathBuf>,
    redis_tls_key: Option<PathBuf>,
    memory_max_bytes: Option<usize>,
    sync: Option<String>,
    sync_interval: Option<String>,
    header_read_timeout: Option<String>,
    body_read_timeout: Option<String>,
    idle_timeout: Option<String>,
    max_connections: Option<usize>,
    trust_client_time: Option<bool>,
    snapshot: Option<PathBuf>,
    snapshot_interval: Option<u64>,
    admin_token: Option<String>,
    shadow: Option<bool>,
    quota_mode: Option<bool>,
    merge_domains: Option<bool>,
    metric_values_per_rule: Option<usize>,
    max_body_bytes: Option<usize>,
    max_key_bytes: Option<usize>,
    no_headers: Option<bool>,
    ticket_capacity: Option<usize>,
    ticket_ttl: Option<String>,
    log_format: Option<String>,
}

impl ConfigFile {
    /// The store's keys, taken out for [`StoreConfig::resolve`].
    fn store_keys(&mut self) -> StoreFile {
        StoreFile {
            store: self.store.take(),
            on_store_error: self.on_store_error.take(),
            store_timeout_ms: self.store_timeout_ms.take(),
            redis_prefix: self.redis_prefix.take(),
            redis_engine: self.redis_engine.take(),
            no_over_limit_cache: self.no_over_limit_cache.take(),
            redis_tls_ca: self.redis_tls_ca.take(),
            redis_tls_cert: self.redis_tls_cert.take(),
            redis_tls_key: self.redis_tls_key.take(),
            memory_max_bytes: self.memory_max_bytes.take(),
            sync: self.sync.take(),
            sync_interval: self.sync_interval.take(),
        }
    }

    /// The connection keys, taken out for [`connections::resolve`].
    fn connection_keys(&mut self) -> ConnectionFile {
        ConnectionFile {
            header_read_timeout: self.header_read_timeout.take(),
            body_read_timeout: self.body_read_timeout.take(),
            idle_timeout: self.idle_timeout.take(),
            max_connections: self.max_connections.take(),
        }
    }
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
    pub store: StoreConfig,
    /// The connection cap and timeouts, of each port.
    pub connections: ConnectionSettings,
    /// Snapshot path, if any.
    pub snapshot: Option<PathBuf>,
    /// Period of snapshots; `None` saves only on shutdown.
    pub snapshot_interval: Option<Duration>,
    /// The service's settings.
    pub settings: Settings,
    /// The most distinct value-carrying metric labels per rule.
    pub metric_values_per_rule: usize,
    /// Log format.
    pub log_format: LogFormat,
}

impl ServeConfig {
    /// Merges `args` (flags and environment) over the config file they name.
    pub fn resolve(args: &ServeArgs) -> Result<ServeConfig, ConfigError> {
        let mut file = match &args.config {
            Some(path) => config_file::read::<ConfigFile>(path)?,
            None => ConfigFile::default(),
        };
        let store = StoreConfig::resolve(&args.storage, file.store_keys())?;
        // Two ports share the process's file descriptors.
        let connections = connections::resolve(&args.connections, file.connection_keys(), 2)?;
        let log_format = LogFormat::parse(args.log_format.clone().or(file.log_format).as_deref())?;
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
            quota_mode: args.quota_mode || file.quota_mode.unwrap_or(false),
            merge_domains: args.merge_domains || file.merge_domains.unwrap_or(false),
            headers: !(args.no_headers || file.no_headers.unwrap_or(false)),
            response_dynamic_metadata: args.response_dynamic_metadata
                || file.response_dynamic_metadata.unwrap_or(false),
            ticket_capacity: args
                .ticket_capacity
                .or(file.ticket_capacity)
                .unwrap_or(defaults.ticket_capacity),
            ticket_ttl: match args.ticket_ttl.clone().or(file.ticket_ttl) {
                None => defaults.ticket_ttl,
                Some(text) => parse_duration(&text)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| {
                        ConfigError::Invalid(format!(
                            "ticket_ttl {text:?} is not a positive duration like 5m or 30s"
                        ))
                    })?,
            },
        };
        if settings.ticket_capacity == 0 {
            return Err(ConfigError::Invalid(
                "ticket_capacity must be positive".into(),
            ));
        }
        if settings.max_body_bytes == 0 || settings.max_key_bytes == 0 {
            return Err(ConfigError::Invalid(
                "max_body_bytes and max_key_bytes must be positive".into(),
            ));
        }
        let interval = args
            .snapshot_interval
            .or(file.snapshot_interval)
            .unwrap_or(60);
        let metric_values_per_rule = args
            .metric_values_per_rule
            .or(file.metric_values_per_rule)
            .unwrap_or(DEFAULT_VALUES_PER_RULE);
        Ok(ServeConfig {
            metric_values_per_rule,
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
            connections,
            snapshot: args.snapshot.clone().or(file.snapshot),
            snapshot_interval: (interval > 0).then(|| Duration::from_secs(interval)),
            settings,
            log_format,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::StoreArgs;
    use crate::store::StoreChoice;

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(
            &path,
            "http = \"127.0.0.1:9000\"\nmax_key_bytes = 10\nshadow = true\n\
             idle_timeout = \"5s\"\nmax_connections = 40\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path.clone()),
            max_key_bytes: Some(20),
            connections: crate::args::ConnectionArgs {
                max_connections: Some(50),
                ..crate::args::ConnectionArgs::default()
            },
            ..ServeArgs::default()
        };
        let c = ServeConfig::resolve(&args).unwrap();
        assert_eq!(c.connections.idle_timeout, Duration::from_secs(5));
        assert_eq!(c.connections.max_connections, 50);
        assert_eq!(c.http.port(), 9000);
        assert_eq!(c.settings.max_key_bytes, 20);
        assert!(c.settings.shadow);
        assert_eq!(c.settings.max_body_bytes, 64 * 1024);
    }

    #[test]
    fn drop_in_settings_come_from_flags_or_the_file() {
        let defaults = ServeConfig::resolve(&ServeArgs::default()).unwrap();
        assert!(!defaults.settings.quota_mode && !defaults.settings.merge_domains);
        assert!(!defaults.settings.response_dynamic_metadata);
        assert_eq!(defaults.metric_values_per_rule, DEFAULT_VALUES_PER_RULE);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(
            &path,
            "quota_mode = true
merge_domains = true
response_dynamic_metadata = true
             metric_values_per_rule = 7
",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path),
            metric_values_per_rule: Some(9),
            ..ServeArgs::default()
        };
        let c = ServeConfig::resolve(&args).unwrap();
        assert!(c.settings.quota_mode && c.settings.merge_domains);
        assert!(c.settings.response_dynamic_metadata);
        assert_eq!(c.metric_values_per_rule, 9);
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
            storage: StoreArgs {
                redis_tls_cert: Some("/flag/client.pem".into()),
                redis_tls_key: Some("/flag/client.key".into()),
                ..StoreArgs::default()
            },
            ..ServeArgs::default()
        };
        let StoreChoice::Redis(shared) = ServeConfig::resolve(&args).unwrap().store.choice else {
            panic!("a Redis store");
        };
        assert_eq!(shared.tls_ca, Some(PathBuf::from("/etc/tollgate/ca.pem")));
        assert_eq!(shared.tls_cert, Some(PathBuf::from("/flag/client.pem")));
        assert_eq!(shared.tls_key, Some(PathBuf::from("/flag/client.key")));

        let args = ServeArgs {
            storage: StoreArgs {
                redis_tls_ca: Some("/etc/tollgate/ca.pem".into()),
                ..StoreArgs::default()
            },
            ..ServeArgs::default()
        };
        let error = ServeConfig::resolve(&args).unwrap_err().to_string();
        assert!(error.contains("redis_tls_ca"), "{error}");
        assert!(error.contains("memory"), "{error}");
    }

    #[test]
    fn settle_tickets_come_from_flags_over_the_file_and_must_be_positive() {
        let defaults = ServeConfig::resolve(&ServeArgs::default()).unwrap();
        assert_eq!(defaults.settings.ticket_capacity, 100_000);
        assert_eq!(defaults.settings.ticket_ttl, Duration::from_secs(300));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, "ticket_capacity = 7\nticket_ttl = \"90s\"\n").unwrap();
        let args = ServeArgs {
            config: Some(path.clone()),
            ticket_ttl: Some("2m".into()),
            ..ServeArgs::default()
        };
        let c = ServeConfig::resolve(&args).unwrap();
        assert_eq!(c.settings.ticket_capacity, 7);
        assert_eq!(c.settings.ticket_ttl, Duration::from_secs(120));
        for (capacity, ttl, named) in [
            (Some(0), None, "ticket_capacity"),
            (None, Some("0s"), "ticket_ttl"),
            (None, Some("soon"), "soon"),
        ] {
            let args = ServeArgs {
                ticket_capacity: capacity,
                ticket_ttl: ttl.map(Into::into),
                ..ServeArgs::default()
            };
            let error = ServeConfig::resolve(&args).unwrap_err().to_string();
            assert!(error.contains(named), "{error}");
        }
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
            storage: StoreArgs {
                store: Some("etcd://x".into()),
                ..StoreArgs::default()
            },
            ..ServeArgs::default()
        };
        assert!(ServeConfig::resolve(&args)
            .unwrap_err()
            .to_string()
            .contains("etcd"));
    }
}
