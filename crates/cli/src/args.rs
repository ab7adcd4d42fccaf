//! Command-line arguments of every subcommand.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// tollgate: a rate limiter with exact, tested semantics.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a trace of requests through one limit, deterministically.
    ///
    /// Reads one JSON object per line, `{"at_ms": <int>, "key": "<string>",
    /// "cost": <int, default 1>}`, in non-decreasing `at_ms` order, and writes
    /// one decision per line to stdout; a summary goes to stderr.
    Simulate(SimulateArgs),
    /// Run the decision service (HTTP API) on the chosen store.
    ///
    /// Every flag may also come from a `TOLLGATE_*` environment variable or
    /// from the `--config` file; a flag wins over the environment, which
    /// wins over the file.
    // Boxed: the settings are many, and the other subcommands small.
    Serve(Box<ServeArgs>),
    /// Run the gateway: a reverse proxy to one upstream, where the rate
    /// limits will apply to every request.
    ///
    /// Every flag may also come from a `TOLLGATE_*` environment variable or
    /// from the `--config` file; a flag wins over the environment, which
    /// wins over the file.
    Gateway(Box<GatewayArgs>),
    /// Validate rules files without serving; exits 1 with file:line:reason
    /// on the first error.
    CheckRules(CheckRulesArgs),
    /// Wait for a slot on a tollgate service, then run a command.
    ///
    /// Books the earliest slot for KEY under RATE with `POST /v1/reserve`,
    /// sleeps until it and runs `CMD ARGS…` in place of itself, so the
    /// command's exit status is pace's. Many scripts pacing on one KEY
    /// share the limit. Exits 75 when no slot is free within `--max-wait`,
    /// 69 when the service cannot be reached or refuses the request, and
    /// 126/127 when the command cannot be run.
    Pace(PaceArgs),
}

/// `tollgate pace`.
#[derive(Debug, Args)]
pub struct PaceArgs {
    /// The tollgate service, `http://host:port`.
    #[arg(long, env = "TOLLGATE_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// The quota's key, e.g. `github:token-7`.
    #[arg(long)]
    pub key: String,
    /// The limit to stay under, e.g. `100/10s`.
    #[arg(long)]
    pub rate: String,
    /// The algorithm; `sliding_window_log` gives exactly N per window.
    #[arg(long, default_value = "sliding_window_log")]
    pub algorithm: String,
    /// Bucket capacity (token_bucket, gcra, leaky_bucket).
    #[arg(long)]
    pub burst: Option<u64>,
    /// The command's weight.
    #[arg(long, default_value_t = 1)]
    pub cost: u64,
    /// Give up (exit 75, nothing booked) when the slot is further away, e.g.
    /// `30s`; no bound when absent.
    #[arg(long)]
    pub max_wait: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `tollgate serve`.
#[derive(Debug, Args, Default)]
pub struct ServeArgs {
    /// A TOML file with any of the settings below (keys as the flag names,
    /// with `_` for `-`).
    #[arg(long, env = "TOLLGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address of the HTTP API [default: 127.0.0.1:8080].
    #[arg(long, env = "TOLLGATE_HTTP")]
    pub http: Option<SocketAddr>,
    /// Address of the Envoy rate limit gRPC API [default: 127.0.0.1:8081].
    #[arg(long, env = "TOLLGATE_GRPC")]
    pub grpc: Option<SocketAddr>,
    /// Put the rate-limit headers into gRPC answers' `response_headers_to_add`
    /// (Envoy passes them on to the client).
    #[arg(long, env = "TOLLGATE_RESPONSE_HEADERS")]
    pub response_headers: bool,
    /// Fill the gRPC answer's dynamic_metadata with the domain, the
    /// descriptors, hitsAddend and the merged `metadata` of the descriptors
    /// that passed (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA).
    #[arg(long, env = "TOLLGATE_RESPONSE_DYNAMIC_METADATA")]
    pub response_dynamic_metadata: bool,
    /// Rules file or directory (reloaded when it changes).
    #[arg(long, env = "TOLLGATE_RULES")]
    pub rules: Option<PathBuf>,
    /// The store and its settings.
    #[command(flatten)]
    pub storage: StoreArgs,
    /// The connection cap and timeouts of both ports.
    #[command(flatten)]
    pub connections: ConnectionArgs,
    /// Honour `at_ms` in requests (client-side deployments and tests).
    #[arg(long, env = "TOLLGATE_TRUST_CLIENT_TIME")]
    pub trust_client_time: bool,
    /// Save the memory store here on shutdown and periodically; load it at
    /// start.
    #[arg(long, env = "TOLLGATE_SNAPSHOT")]
    pub snapshot: Option<PathBuf>,
    /// Seconds between periodic snapshots; 0 saves only on shutdown
    /// [default: 60].
    #[arg(long, env = "TOLLGATE_SNAPSHOT_INTERVAL")]
    pub snapshot_interval: Option<u64>,
    /// Bearer token for admin routes (key reset, rules reload).
    #[arg(long, env = "TOLLGATE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Shadow mode for every rule: decide, count, report, never reject.
    #[arg(long, env = "TOLLGATE_SHADOW")]
    pub shadow: bool,
    /// Quota mode for every rule: a request is over the limit only when
    /// every rule that applies to it is (envoyproxy/ratelimit's
    /// GLOBAL_QUOTA_MODE).
    #[arg(long, env = "TOLLGATE_QUOTA_MODE")]
    pub quota_mode: bool,
    /// Files that name the same domain make one domain (envoyproxy/ratelimit's
    /// MERGE_DOMAIN_CONFIG); a descriptor defined twice is still an error.
    #[arg(long, env = "TOLLGATE_MERGE_DOMAINS")]
    pub merge_domains: bool,
    /// The most distinct metric labels carrying request values
    /// (detailed_metric, value_to_metric) one rule makes; later values
    /// count under `<rule>._other_` [default: 1000].
    #[arg(long, env = "TOLLGATE_METRIC_VALUES_PER_RULE")]
    pub metric_values_per_rule: Option<usize>,
    /// Largest request body in bytes [default: 65536].
    #[arg(long, env = "TOLLGATE_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Longest key in bytes [default: 1024].
    #[arg(long, env = "TOLLGATE_MAX_KEY_BYTES")]
    pub max_key_bytes: Option<usize>,
    /// Leave out the rate-limit headers.
    #[arg(long, env = "TOLLGATE_NO_HEADERS")]
    pub no_headers: bool,
    /// The most settle tickets held at once (checks with `"settle": true`
    /// waiting for `/v1/settle`, and settled ones until they expire);
    /// while the table is full such checks answer 503 `tickets_full` and
    /// count nothing [default: 100000].
    #[arg(long, env = "TOLLGATE_TICKET_CAPACITY")]
    pub ticket_capacity: Option<usize>,
    /// How long a settle ticket lives after its check, e.g. `5m`; an
    /// expired ticket is never settled and its estimate stands
    /// [default: 5m].
    #[arg(long, env = "TOLLGATE_TICKET_TTL")]
    pub ticket_ttl: Option<String>,
    /// Log format: `text` or `json` [default: text]. The level comes from
    /// `RUST_LOG` (default `info`).
    #[arg(long, env = "TOLLGATE_LOG_FORMAT")]
    pub log_format: Option<String>,
}

/// Where limiter state lives, and the settings of a shared store; the same
/// flags for `serve` and `gateway`.
#[derive(Debug, Args, Default)]
pub struct StoreArgs {
    /// Where limiter state lives: `memory`, or a shared Redis:
    /// `redis://host:port/db`, `rediss://…` (TLS), `unix:///path`,
    /// `redis+unix:///path`, `redis+cluster://host:port,host:port,…`
    /// (`rediss+cluster://` for TLS) [default: memory].
    #[arg(long, env = "TOLLGATE_STORE", hide_env_values = true)]
    pub store: Option<String>,
    /// When the shared store fails: `fail_open` (admit, marked degraded),
    /// `fail_closed` (503 / UNAVAILABLE) or `local` (this process's memory
    /// store, marked degraded) [default: fail_closed].
    #[arg(long, env = "TOLLGATE_ON_STORE_ERROR")]
    pub on_store_error: Option<String>,
    /// Longest wait for the shared store per call, in milliseconds, before
    /// the failure policy applies [default: 250].
    #[arg(long, env = "TOLLGATE_STORE_TIMEOUT_MS")]
    pub store_timeout_ms: Option<u64>,
    /// Prefix of every Redis key tollgate writes [default: tollgate:].
    #[arg(long, env = "TOLLGATE_REDIS_PREFIX")]
    pub redis_prefix: Option<String>,
    /// Which engine decides on Redis: `auto` (tollgate's Redis module when
    /// every node has it loaded, the Lua script otherwise), `module` (refuse
    /// to start when a node lacks it) or `lua` [default: auto].
    #[arg(long, env = "TOLLGATE_REDIS_ENGINE")]
    pub redis_engine: Option<String>,
    /// Ask Redis even for keys known to be over their limit (turns off the
    /// local over-limit cache).
    #[arg(long, env = "TOLLGATE_NO_OVER_LIMIT_CACHE")]
    pub no_over_limit_cache: bool,
    /// PEM file of the CA certificates to trust for a `rediss://` store,
    /// instead of the system's (a Redis whose certificate a private CA
    /// signed).
    #[arg(long, env = "TOLLGATE_REDIS_TLS_CA")]
    pub redis_tls_ca: Option<PathBuf>,
    /// PEM file of a client certificate to present to a `rediss://` store
    /// that requires one (mutual TLS); needs `--redis-tls-key`.
    #[arg(long, env = "TOLLGATE_REDIS_TLS_CERT")]
    pub redis_tls_cert: Option<PathBuf>,
    /// PEM file of the private key of `--redis-tls-cert`.
    #[arg(long, env = "TOLLGATE_REDIS_TLS_KEY")]
    pub redis_tls_key: Option<PathBuf>,
    /// Memory store cap in bytes [default: 268435456].
    #[arg(long, env = "TOLLGATE_MEMORY_MAX_BYTES")]
    pub memory_max_bytes: Option<usize>,
    /// How instances share limits on a shared store: `exact` (every
    /// decision in the store) or `async` (decide from a local copy of each
    /// key, share usage in one batch per `--sync-interval`; over-admission
    /// bounded as docs/semantics.md says) [default: exact].
    #[arg(long, env = "TOLLGATE_SYNC")]
    pub sync: Option<String>,
    /// How often `--sync async` sends the touched keys' usage and takes
    /// back their global state, e.g. `100ms`, `1s` [default: 100ms].
    #[arg(long, env = "TOLLGATE_SYNC_INTERVAL")]
    pub sync_interval: Option<String>,
}

/// `tollgate gateway`.
#[derive(Debug, Args, Default)]
pub struct GatewayArgs {
    /// A TOML file with any of the settings below (keys as the flag names,
    /// with `_` for `-`).
    #[arg(long, env = "TOLLGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The upstream requests are forwarded to:
    /// `http[s]://host[:port][/base]` (required; here, in
    /// `TOLLGATE_UPSTREAM` or in the config file).
    #[arg(long, env = "TOLLGATE_UPSTREAM")]
    pub upstream: Option<String>,
    /// PEM file of the CA certificates to trust for an `https://` upstream,
    /// instead of the system's.
    #[arg(long, env = "TOLLGATE_UPSTREAM_TLS_CA")]
    pub upstream_tls_ca: Option<PathBuf>,
    /// Address the gateway listens on, HTTP/1.1 and HTTP/2 (prior
    /// knowledge) [default: 127.0.0.1:8000].
    #[arg(long, env = "TOLLGATE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Address of the admin port (`/healthz`, `/readyz`, `/metrics`,
    /// `/v1/top`); none when absent, since every path of the main port goes
    /// upstream.
    #[arg(long, env = "TOLLGATE_ADMIN")]
    pub admin: Option<SocketAddr>,
    /// Bearer token for the admin port's `/v1/top` (the keys a rule refused
    /// most, which name users and addresses); open without it.
    #[arg(long, env = "TOLLGATE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Longest wait for the upstream's answer headers before answering
    /// `504`, e.g. `30s`, `500ms` [default: 30s].
    #[arg(long, env = "TOLLGATE_UPSTREAM_TIMEOUT")]
    pub upstream_timeout: Option<String>,
    /// Rules file or directory (reloaded when it changes).
    #[arg(long, env = "TOLLGATE_RULES")]
    pub rules: Option<PathBuf>,
    /// The rules domain that applies to the gateway's requests; may be left
    /// out when the rules hold one domain.
    #[arg(long, env = "TOLLGATE_DOMAIN")]
    pub domain: Option<String>,
    /// Proxies whose forwarding field (`--forwarded-header`) is believed
    /// when finding a request's client address: CIDRs or addresses,
    /// comma-separated (`10.0.0.0/8,192.0.2.7`) [default: none].
    #[arg(long, env = "TOLLGATE_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<String>,
    /// The field trusted proxies tell the client's address in:
    /// `x-forwarded-for` or `forwarded` (RFC 7239). Only one is read, so a
    /// client cannot pick its address by sending the other one
    /// [default: x-forwarded-for].
    #[arg(long, env = "TOLLGATE_FORWARDED_HEADER")]
    pub forwarded_header: Option<String>,
    /// Shadow mode for every rule: decide, count, report, never reject.
    #[arg(long, env = "TOLLGATE_SHADOW")]
    pub shadow: bool,
    /// Quota mode for every rule: a request is over the limit only when
    /// every rule that applies to it is (envoyproxy/ratelimit's
    /// GLOBAL_QUOTA_MODE).
    #[arg(long, env = "TOLLGATE_QUOTA_MODE")]
    pub quota_mode: bool,
    /// Files that name the same domain make one domain (envoyproxy/ratelimit's
    /// MERGE_DOMAIN_CONFIG); a descriptor defined twice is still an error.
    #[arg(long, env = "TOLLGATE_MERGE_DOMAINS")]
    pub merge_domains: bool,
    /// The most distinct metric labels carrying request values
    /// (detailed_metric, value_to_metric) one rule makes; later values
    /// count under `<rule>._other_` [default: 1000].
    #[arg(long, env = "TOLLGATE_METRIC_VALUES_PER_RULE")]
    pub metric_values_per_rule: Option<usize>,
    /// Leave out the rate-limit headers.
    #[arg(long, env = "TOLLGATE_NO_HEADERS")]
    pub no_headers: bool,
    /// Client IPv6 addresses share one key per network of this prefix
    /// length (1 to 128), so that a client cannot escape a per-address
    /// limit by rotating addresses inside its network [default: 64].
    #[arg(long, env = "TOLLGATE_IPV6_PREFIX")]
    pub ipv6_prefix: Option<u8>,
    /// Client IPv4 addresses share one key per network of this prefix
    /// length (1 to 32) [default: 32, every address its own].
    #[arg(long, env = "TOLLGATE_IPV4_PREFIX")]
    pub ipv4_prefix: Option<u8>,
    /// The store and its settings.
    #[command(flatten)]
    pub storage: StoreArgs,
    /// The connection cap and timeouts of the gateway's and the admin
    /// port.
    #[command(flatten)]
    pub connections: ConnectionArgs,
    /// Log format: `text` or `json` [default: text]. The level comes from
    /// `RUST_LOG` (default `info`).
    #[arg(long, env = "TOLLGATE_LOG_FORMAT")]
    pub log_format: Option<String>,
}

/// What clients may hold, and for how long; the same flags for `serve`
/// and `gateway`, applied to each port.
#[derive(Debug, Args, Default)]
pub struct ConnectionArgs {
    /// Longest time a client may take to send an HTTP/1 request head,
    /// e.g. `30s`, `500ms`; the wait for the next request on a keep-alive
    /// connection counts too. Then the connection is closed
    /// [default: 30s].
    #[arg(long, env = "TOLLGATE_HEADER_READ_TIMEOUT")]
    pub header_read_timeout: Option<String>,
    /// Longest pause while a client sends a request body; then the
    /// request answers `408` and the connection closes [default: 60s].
    #[arg(long, env = "TOLLGATE_BODY_READ_TIMEOUT")]
    pub body_read_timeout: Option<String>,
    /// A connection that moves no byte either way for this long is closed,
    /// after the request in flight if any [default: 75s].
    #[arg(long, env = "TOLLGATE_IDLE_TIMEOUT")]
    pub idle_timeout: Option<String>,
    /// The most connections open at once on each port; more are closed as
    /// they come, counted in `tollgate_connections_rejected_total`
    /// [default: 10000, less when the open-files limit is lower].
    #[arg(long, env = "TOLLGATE_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
}

/// `tollgate check-rules`.
#[derive(Debug, Args)]
pub struct CheckRulesArgs {
    /// A rules file or a directory of them.
    pub path: PathBuf,
    /// Files that name the same domain make one domain (envoyproxy/ratelimit's
    /// MERGE_DOMAIN_CONFIG); a descriptor defined twice is still an error.
    #[arg(long, env = "TOLLGATE_MERGE_DOMAINS")]
    pub merge_domains: bool,
}

/// `tollgate simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Algorithm: token_bucket, gcra, leaky_bucket, fixed_window,
    /// sliding_window_log, sliding_window_counter, stepped_window, concurrency.
    #[arg(long)]
    pub algorithm: String,
    /// The limit, e.g. `10/s`, `100/minute`, `5/15min`, `7 per hour`.
    #[arg(long)]
    pub rate: String,
    /// Bucket capacity (token_bucket, gcra, leaky_bucket); defaults to N.
    #[arg(long)]
    pub burst: Option<u64>,
    /// Step size of stepped_window, e.g. `1s`; defaults to the Databox table.
    #[arg(long)]
    pub step: Option<String>,
    /// Lease lifetime of concurrency, e.g. `30s`; defaults to 60s.
    #[arg(long)]
    pub lease_ttl: Option<String>,
    /// The trace file; standard input when absent.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Also draw admitted and rejected requests over time to this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}
