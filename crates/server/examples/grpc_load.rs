//! A closed-loop gRPC load client for `scripts/bench-grpc`: `--connections`
//! HTTP/2 connections, each carrying `--concurrency` calls in flight, call
//! `ShouldRateLimit` for `--duration` seconds after a `--warmup`, and the
//! throughput and latency distribution are printed.
//!
//! Each call is a request Envoy would send for the benchmark's rules
//! (`examples/rules/bench-grpc.yaml`): domain `bench`, one descriptor
//! `(user, user:NNNNN)` with the user picked at random among `--keys`, so
//! the server matches a key-only rule and counts in one of many keys. The
//! rule's limit is high, so every decision admits.
//!
//! A call's latency runs from just before the client hands the request to
//! tonic to the decoded answer, so it includes this client's own queueing:
//! the figures are an upper bound on the server's, and the same bound holds
//! against the no-op server in the same run.
//!
//! ```text
//! grpc_load --url http://127.0.0.1:PORT --duration 10 --connections 4 --concurrency 16
//! ```
//!
//! The last line is `key=value` pairs for scripts: `decisions_per_s`, `count`,
//! `errors`, `over_limit`, `p50_us`, `p90_us`, `p99_us`, `p999_us`,
//! `max_us`, and `client_cpu` (this process's CPU use in percent of one
//! core, where `/proc` can tell).

use std::error::Error;
use std::time::{Duration, Instant};

use clap::Parser;
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::transport::{Channel, Endpoint};

type BoxError = Box<dyn Error + Send + Sync>;

/// Closed-loop `ShouldRateLimit` load.
#[derive(Debug, Parser)]
struct Args {
    /// The server, `http://HOST:PORT`.
    #[arg(long)]
    url: String,
    /// Seconds measured (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of load before measuring, not recorded.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// HTTP/2 connections.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Calls in flight on each connection.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Distinct users, `user:00000`…, picked uniformly at random.
    #[arg(long, default_value_t = 10_000)]
    keys: usize,
    /// The rules domain.
    #[arg(long, default_value = "bench")]
    domain: String,
}

/// What one caller saw during the measured window.
#[derive(Debug, Default)]
struct Tally {
    latencies_ns: Vec<u64>,
    errors: u64,
    over_limit: u64,
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if !(args.duration > 0.0 && args.warmup >= 0.0) {
        return Err("--duration must be positive and --warmup not negative".into());
    }
    if args.connections == 0 || args.concurrency == 0 || args.keys == 0 {
        return Err("--connections, --concurrency and --keys must be at least 1".into());
    }
    // One worker per CPU the client may use (the bench pins it to one core).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let line = runtime.block_on(run(&args))?;
    let cpu = match (cpu_before, cpu_seconds()) {
        (Some(before), Some(after)) => {
            format!(
                "{:.0}",
                100.0 * (after - before) / started.elapsed().as_secs_f64()
            )
        }
        _ => "nan".to_owned(),
    };
    println!("{line} client_cpu={cpu}");
    Ok(())
}

/// CPU time this process has used (user + system), from `/proc/self/stat`
/// (in USER_HZ, 100 per second on Linux); `None` elsewhere.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// The benchmark's request for user `k`.
fn request(domain: &str, k: usize) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: format!("user:{k:05}"),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// A small xorshift generator: which user to ask for next, cheaply.
struct Picker(u64);

impl Picker {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

async fn caller(
    mut client: RateLimitServiceClient<Channel>,
    requests: std::sync::Arc<Vec<RateLimitRequest>>,
    seed: u64,
    measure_from: Instant,
    until: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let mut picker = Picker(seed | 1);
    loop {
        let request = requests[picker.next(requests.len())].clone();
        let sent = Instant::now();
        if sent >= until {
            return tally;
        }
        let answer = client.should_rate_limit(request).await;
        let done = Instant::now();
        if sent < measure_from || done > until {
            continue;
        }
        match answer {
            Ok(answer) => {
                if answer.get_ref().overall_code != Code::Ok as i32 {
                    tally.over_limit += 1;
                }
                let ns = u64::try_from((done - sent).as_nanos()).unwrap_or(u64::MAX);
                tally.latencies_ns.push(ns);
            }
            Err(_) => tally.errors += 1,
        }
    }
}

async fn run(args: &Args) -> Result<String, BoxError> {
    let requests: std::sync::Arc<Vec<RateLimitRequest>> =
        std::sync::Arc::new((0..args.keys).map(|k| request(&args.domain, k)).collect());
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        // One `Endpoint::connect` is one HTTP/2 connection.
        channels.push(Endpoint::from_shared(args.url.clone())?.connect().await?);
    }
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let until = measure_from + Duration::from_secs_f64(args.duration);
    let mut tasks = Vec::new();
    for (c, channel) in channels.iter().enumerate() {
        for i in 0..args.concurrency {
            let seed =
                0x9E37_79B9_7F4A_7C15_u64.wrapping_mul((c * args.concurrency + i + 1) as u64);
            tasks.push(tokio::spawn(caller(
                RateLimitServiceClient::new(channel.clone()),
                requests.clone(),
                seed,
                measure_from,
                until,
            )));
        }
    }
    let mut all = Tally::default();
    for task in tasks {
        let tally = task.await?;
        all.latencies_ns.extend(tally.latencies_ns);
        all.errors += tally.errors;
        all.over_limit += tally.over_limit;
    }
    all.latencies_ns.sort_unstable();
    let count = all.latencies_ns.len();
    let quantile_us = |q: f64| -> f64 {
        if count == 0 {
            return f64::NAN;
        }
        let index = ((count as f64 * q).ceil() as usize).clamp(1, count) - 1;
        all.latencies_ns[index] as f64 / 1_000.0
    };
    Ok(format!(
        "decisions_per_s={:.0} count={count} errors={} over_limit={} p50_us={:.0} p90_us={:.0} p99_us={:.0} p999_us={:.0} max_us={:.0}",
        count as f64 / args.duration,
        all.errors,
        all.over_limit,
        quantile_us(0.5),
        quantile_us(0.9),
        quantile_us(0.99),
        quantile_us(0.999),
        quantile_us(1.0),
    ))
}
