//! The settings of `tollgate gateway`, merged from flags, `TOLLGATE_*`
//! environment variables (clap reads both; a flag wins) and the optional
//! TOML config file, then validated once into [`GatewayConfig`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use tollgate_core::rate::parse_duration;
use tollgate_gateway::Upstream;
use tollgate_listener::ConnectionSettings;
use tollgate_rules::RuleSet;
use tollgate_server::metrics::DEFAULT_VALUES_PER_RULE;
use tollgate_tower::{
    AddressGrouping, ForwardedHeader, TrustedProxies, DEFAULT_IPV4_PREFIX, DEFAULT_IPV6_PREFIX,
};

use crate::args::GatewayArgs;
use crate::config_file::{self, ConfigError};
use crate::connections::{self, ConnectionFile};
use crate::logging::LogFormat;
use crate::store::{StoreConfig, StoreFile};

/// Where the gateway listens unless told.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8000);

/// How long the upstream may take to send its answer's headers unless
/// told.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// The config file: the same settings as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    upstream: Option<String>,
    upstream_tls_ca: Option<PathBuf>,
    listen: Option<SocketAddr>,
    admin: Option<SocketAddr>,
    admin_token: Option<String>,
    upstream_timeout: Option<String>,
    rules: Option<PathBuf>,
    domain: Option<String>,
    trusted_proxies: Option<Vec<String>>,
    forwarded_header: Option<String>,
    shadow: Option<bool>,
    quota_mode: Option<bool>,
    merge_domains: Option<bool>,
    metric_values_per_rule: Option<usize>,
    no_headers: Option<bool>,
    ipv6_prefix: Option<u8>,
    ipv4_prefix: Option<u8>,
    log_format: Option<String>,
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

/// Validated settings of `tollgate gateway`.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Where requests are forwarded.
    pub upstream: Upstream,
    /// The CA certificates to trust for an `https://` upstream, instead of
    /// the system's.
    pub upstream_tls_ca: Option<PathBuf>,
    /// The gateway's address.
    pub listen: SocketAddr,
    /// The admin port's address, if any.
    pub admin: Option<SocketAddr>,
    /// The bearer token the admin port's `/v1/top` needs, if any.
    pub admin_token: Option<String>,
    /// Longest wait for the upstream's answer headers.
    pub upstream_timeout: Duration,
    /// Rules path, if any.
    pub rules: Option<PathBuf>,
    /// The rules domain asked for, if any (see [`domain_in`]).
    pub domain: Option<String>,
    /// Proxies whose forwarding field is believed, and which field.
    pub trusted_proxies: TrustedProxies,
    /// Global shadow mode: decide, count, report, never reject.
    pub shadow: bool,
    /// Global quota mode: every rule is a quota rule.
    pub quota_mode: bool,
    /// Merge the files of one domain.
    pub merge_domains: bool,
    /// The most distinct value-carrying metric labels per rule.
    pub metric_values_per_rule: usize,
    /// Send the rate-limit headers of SPEC §7.
    pub headers: bool,
    /// Which client addresses share a key.
    pub address_grouping: AddressGrouping,
    /// The store.
    pub store: StoreConfig,
    /// The connection cap and timeouts, of the gateway's and the admin
    /// port.
    pub connections: ConnectionSettings,
    /// Log format.
    pub log_format: LogFormat,
}

impl GatewayConfig {
    /// Merges `args` (flags and environment) over the config file they name.
    pub fn resolve(args: &GatewayArgs) -> Result<GatewayConfig, ConfigError> {
        let mut file = match &args.config {
            Some(path) => config_file::read::<ConfigFile>(path)?,
            None => ConfigFile::default(),
        };
        let store = StoreConfig::resolve(&args.storage, file.store_keys())?;
        // Each client connection has an upstream connection of its own.
        let connections = connections::resolve(&args.connections, file.connection_keys(), 2)?;
        let log_format = LogFormat::parse(args.log_format.clone().or(file.log_format).as_deref())?;
        let upstream = args.upstream.clone().or(file.upstream).ok_or_else(|| {
            ConfigError::Invalid(
                "no upstream: give --upstream URL (or TOLLGATE_UPSTREAM, or upstream in the config file)"
                    .into(),
            )
        })?;
        let upstream = upstream
            .parse::<Upstream>()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let upstream_tls_ca = args.upstream_tls_ca.clone().or(file.upstream_tls_ca);
        if upstream_tls_ca.is_some() && !upstream.is_https() {
            return Err(ConfigError::Invalid(format!(
                "upstream_tls_ca needs an https:// upstream, not {upstream}"
            )));
        }
        let upstream_timeout = match args.upstream_timeout.clone().or(file.upstream_timeout) {
            None => DEFAULT_UPSTREAM_TIMEOUT,
            Some(text) => parse_duration(&text)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "upstream_timeout {text:?} is not a positive duration like 30s or 500ms"
                    ))
                })?,
        };
        let trusted_proxies = if args.trusted_proxies.is_empty() {
            file.trusted_proxies.unwrap_or_default()
        } else {
            args.trusted_proxies.clone()
        };
        let forwarded_header = match args
            .forwarded_header
            .clone()
            .or(file.forwarded_header)
            .as_deref()
        {
            None | Some("x-forwarded-for") => ForwardedHeader::XForwardedFor,
            Some("forwarded") => ForwardedHeader::Forwarded,
            Some(other) => {
                return Err(ConfigError::Invalid(format!(
                    "forwarded_header {other:?} must be x-forwarded-for or forwarded"
                )))
            }
        };
        let trusted_proxies = trusted_proxies
            .join(",")
            .parse::<TrustedProxies>()
            .map_err(|e| ConfigError::Invalid(format!("trusted_proxies: {e}")))?
            .with_header(forwarded_header);
        let address_grouping = AddressGrouping::new(
            args.ipv4_prefix
                .or(file.ipv4_prefix)
                .unwrap_or(DEFAULT_IPV4_PREFIX),
            args.ipv6_prefix
                .or(file.ipv6_prefix)
                .unwrap_or(DEFAULT_IPV6_PREFIX),
        )
        .map_err(|e| ConfigError::Invalid(format!("client address grouping: {e}")))?;
        Ok(GatewayConfig {
            upstream,
            upstream_tls_ca,
            listen: args.listen.or(file.listen).unwrap_or(DEFAULT_LISTEN),
            admin: args.admin.or(file.admin),
            admin_token: args.admin_token.clone().or(file.admin_token),
            upstream_timeout,
            rules: args.rules.clone().or(file.rules),
            domain: args.domain.clone().or(file.domain),
            trusted_proxies,
            shadow: args.shadow || file.shadow.unwrap_or(false),
            quota_mode: args.quota_mode || file.quota_mode.unwrap_or(false),
            merge_domains: args.merge_domains || file.merge_domains.unwrap_or(false),
            metric_values_per_rule: args
                .metric_values_per_rule
                .or(file.metric_values_per_rule)
                .unwrap_or(DEFAULT_VALUES_PER_RULE),
            headers: !(args.no_headers || file.no_headers.unwrap_or(false)),
            address_grouping,
            store,
            connections,
            log_format,
        })
    }
}

/// The rules domain the gateway applies: the one asked for, which the
/// rules must hold; else the rules' only domain; `None` without rules.
/// Rules with several domains need one to be named.
pub fn domain_in(rules: &RuleSet, asked: Option<&str>) -> Result<Option<String>, ConfigError> {
    let names = || {
        rules
            .domains()
            .map(|d| d.name().to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match asked {
        Some(name) if rules.domain(name).is_some() => Ok(Some(name.to_owned())),
        Some(name) => Err(ConfigError::Invalid(format!(
            "domain {name:?} is not in the rules (domains: {})",
            if rules.is_empty() {
                "none".to_owned()
            } else {
                names()
            }
        ))),
        None => {
            let mut domains = rules.domains();
            match (domains.next(), domains.next()) {
                (None, _) => Ok(None),
                (Some(only), None) => Ok(Some(only.name().to_owned())),
                (Some(_), Some(_)) => Err(ConfigError::Invalid(format!(
                    "the rules hold several domains ({}): choose one with --domain",
                    names()
                ))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(upstream: &str) -> GatewayArgs {
        GatewayArgs {
            upstream: Some(upstream.into()),
            ..GatewayArgs::default()
        }
    }

    #[test]
    fn defaults() {
        let c = GatewayConfig::resolve(&args("http://127.0.0.1:9000")).unwrap();
        assert_eq!(c.upstream.to_string(), "http://127.0.0.1:9000");
        assert_eq!(c.listen, DEFAULT_LISTEN);
        assert_eq!(c.admin, None);
        assert_eq!(c.upstream_timeout, Duration::from_secs(30));
        assert!(c.trusted_proxies.is_empty());
        assert!(c.headers && !c.shadow);
        assert_eq!(c.address_grouping, AddressGrouping::default());
        assert!(!c.quota_mode && !c.merge_domains);
        assert_eq!(c.metric_values_per_rule, DEFAULT_VALUES_PER_RULE);
        assert_eq!(c.store.choice, crate::store::StoreChoice::Memory);
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        std::fs::write(
            &path,
            "upstream = \"http://file:1\"\nlisten = \"127.0.0.1:7000\"\n\
             upstream_timeout = \"2s\"\ntrusted_proxies = [\"10.0.0.0/8\"]\n\
             shadow = true\nmemory_max_bytes = 4096\nadmin = \"127.0.0.1:7001\"\n\
             ipv6_prefix = 48\nipv4_prefix = 24\n\
             quota_mode = true\nmerge_domains = true\nmetric_values_per_rule = 3\n\
             body_read_timeout = \"3s\"\nheader_read_timeout = \"4s\"\n",
        )
        .unwrap();
        let from_file = GatewayConfig::resolve(&GatewayArgs {
            config: Some(path.clone()),
            ..GatewayArgs::default()
        })
        .unwrap();
        assert_eq!(from_file.upstream.to_string(), "http://file:1");
        assert!(from_file.quota_mode && from_file.merge_domains);
        assert_eq!(from_file.metric_values_per_rule, 3);
        assert_eq!(
            from_file.connections.body_read_timeout,
            Duration::from_secs(3)
        );
        assert_eq!(
            from_file.connections.header_read_timeout,
            Duration::from_secs(4)
        );
        assert_eq!(from_file.listen.port(), 7000);
        assert_eq!(from_file.admin.map(|a| a.port()), Some(7001));
        assert_eq!(from_file.upstream_timeout, Duration::from_secs(2));
        assert!(from_file
            .trusted_proxies
            .contains("10.9.8.7".parse().unwrap()));
        assert!(!from_file
            .trusted_proxies
            .contains("11.0.0.1".parse().unwrap()));
        assert!(from_file.shadow);
        assert_eq!(from_file.store.memory_max_bytes, 4096);
        assert_eq!(from_file.address_grouping.ipv6_prefix(), 48);
        assert_eq!(from_file.address_grouping.ipv4_prefix(), 24);

        let flags = GatewayConfig::resolve(&GatewayArgs {
            config: Some(path),
            upstream: Some("http://flag:2/base".into()),
            upstream_timeout: Some("250ms".into()),
            trusted_proxies: vec!["192.0.2.1".into(), "2001:db8::/32".into()],
            ipv6_prefix: Some(56),
            ..GatewayArgs::default()
        })
        .unwrap();
        assert_eq!(flags.address_grouping.ipv6_prefix(), 56);
        assert_eq!(flags.address_grouping.ipv4_prefix(), 24);
        assert_eq!(flags.upstream.to_string(), "http://flag:2/base");
        assert_eq!(flags.upstream_timeout, Duration::from_millis(250));
        // The flags replace the file's list.
        let trusted = &flags.trusted_proxies;
        assert!(trusted.contains("192.0.2.1".parse().unwrap()));
        assert!(trusted.contains("2001:db8::5".parse().unwrap()));
        assert!(!trusted.contains("10.9.8.7".parse().unwrap()));
        assert_eq!(flags.listen.port(), 7000);
    }

    #[test]
    fn bad_settings_are_errors_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, "upstream = \"http://x\"\nupstreams = 1\n").unwrap();
        let cases = [
            (GatewayArgs::default(), "no upstream"),
            (args("ftp://example.com"), "only http:// and https://"),
            (
                GatewayArgs {
                    upstream_tls_ca: Some("/ca.pem".into()),
                    ..args("http://x")
                },
                "upstream_tls_ca needs an https://",
            ),
            (args("example.com"), "example.com"),
            (
                GatewayArgs {
                    ipv6_prefix: Some(129),
                    ..args("http://x")
                },
                "an IPv6 prefix length is 1 to 128, not 129",
            ),
            (
                GatewayArgs {
                    upstream_timeout: Some("0s".into()),
                    ..args("http://x")
                },
                "upstream_timeout",
            ),
            (
                GatewayArgs {
                    upstream_timeout: Some("soon".into()),
                    ..args("http://x")
                },
                "soon",
            ),
            (
                GatewayArgs {
                    trusted_proxies: vec!["10.0.0.0/40".into()],
                    ..args("http://x")
                },
                "10.0.0.0/40",
            ),
            (
                GatewayArgs {
                    forwarded_header: Some("x-real-ip".into()),
                    ..args("http://x")
                },
                "x-real-ip",
            ),
            (
                GatewayArgs {
                    config: Some(path),
                    ..GatewayArgs::default()
                },
                "upstreams",
            ),
            (
                GatewayArgs {
                    log_format: Some("xml".into()),
                    ..args("http://x")
                },
                "xml",
            ),
        ];
        for (args, part) in cases {
            let error = GatewayConfig::resolve(&args).unwrap_err().to_string();
            assert!(error.contains(part), "{part}: {error}");
        }
    }

    #[test]
    fn the_domain_is_the_one_asked_for_or_the_only_one() {
        let one = RuleSet::from_yaml("domain: api\n", "one.yaml").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("api.yaml"), "domain: api\n").unwrap();
        std::fs::write(dir.path().join("web.yaml"), "domain: web\n").unwrap();
        let two = RuleSet::load(dir.path()).unwrap();
        let empty = RuleSet::default();
        assert_eq!(domain_in(&one, None).unwrap().as_deref(), Some("api"));
        assert_eq!(
            domain_in(&two, Some("web")).unwrap().as_deref(),
            Some("web")
        );
        assert_eq!(domain_in(&empty, None).unwrap(), None);
        let several = domain_in(&two, None).unwrap_err().to_string();
        assert!(several.contains("api, web"), "{several}");
        let missing = domain_in(&one, Some("mobile")).unwrap_err().to_string();
        assert!(
            missing.contains("\"mobile\"") && missing.contains("api"),
            "{missing}"
        );
    }
}
