//! An open-loop load generator for `scripts/bench-http`: sends
//! `POST /v1/check` bodies with random keys among `--keys` at a fixed
//! `--rate` over `--connections` keep-alive HTTP/1.1 connections, and prints
//! the latency distribution.
//!
//! Why not wrk: wrk is closed-loop (each connection sends its next request
//! when the previous answer arrives), so it measures peak throughput well but
//! cannot hold a fixed rate, and its latencies leave out the requests a slow
//! answer kept from being sent (coordinated omission). wrk2 fixes both but is
//! not packaged. Here request `i` is *scheduled* at `start + i / rate`
//! whatever happened before; any free connection takes the next due request,
//! and its latency is measured **from its scheduled time**, so time spent
//! waiting for a connection that a slow answer held counts against the
//! server.
//!
//! Pacing: tokio's timers tick in whole milliseconds, too coarse for
//! sub-millisecond latencies, so a separate thread releases due requests
//! (permits of a semaphore) with `std::thread::sleep`, which is accurate to
//! tens of microseconds on Linux. The client side's own lag (that thread's
//! wake-up, the runtime's) is therefore inside the figures: they are an upper
//! bound on the server's latency, and the same lag is there in the run
//! against the bare server at the same rate.
//!
//! ```text
//! load --url http://127.0.0.1:PORT/v1/check --rate 20000 --duration 10
//! ```
//!
//! The fourth line of output is `key=value` pairs for scripts (latencies in
//! microseconds); a last line `client_cpu=N` gives this process's CPU use in
//! percent of one core, where `/proc` can tell.

use std::error::Error;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::Uri;
use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

type BoxError = Box<dyn Error + Send + Sync>;

/// Open-loop load at a fixed rate; latency measured from each request's
/// scheduled send time.
#[derive(Debug, Parser)]
struct Args {
    /// The URL to POST to, `http://HOST:PORT/PATH`.
    #[arg(long)]
    url: String,
    /// Requests per second to schedule.
    #[arg(long)]
    rate: f64,
    /// Seconds measured (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds sent at the same rate before measuring, not recorded.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Keep-alive connections.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Distinct keys, `user:00000`…, picked uniformly at random.
    #[arg(long, default_value_t = 10_000)]
    keys: usize,
    /// The limit in each request (high, so every check is admitted).
    #[arg(long, default_value = "1000000/s")]
    limit: String,
}

/// One answered request.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// From the scheduled send time to the end of the answer's body.
    from_schedule: Duration,
    /// From the actual send to the end of the answer's body.
    from_send: Duration,
}

/// What one connection saw.
#[derive(Debug, Default)]
struct Tally {
    samples: Vec<Sample>,
    errors: u64,
    non_200: u64,
    last_done: Option<Instant>,
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if !(args.rate > 0.0 && args.duration > 0.0 && args.warmup >= 0.0) {
        return Err("--rate and --duration must be positive, --warmup not negative".into());
    }
    if args.connections == 0 || args.keys == 0 {
        return Err("--connections and --keys must be at least 1".into());
    }
    // The client runs on one thread (the bench pins it to its own core);
    // the pacer is a second, mostly sleeping thread.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    runtime.block_on(run(args))?;
    if let (Some(before), Some(after)) = (cpu_before, cpu_seconds()) {
        // Said so the bench can tell a saturated client from a slow server.
        println!(
            "client_cpu={:.0}",
            100.0 * (after - before) / started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// CPU time this process has used (user + system), from `/proc/self/stat`
/// (in USER_HZ, 100 per second on Linux); `None` elsewhere.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at 3.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

async fn run(args: Args) -> Result<(), BoxError> {
    let uri: Uri = args.url.parse()?;
    let authority = uri
        .authority()
        .ok_or("--url needs a host and port")?
        .to_string();
    let address: SocketAddr = authority.parse()?;
    let path = uri.path().to_owned();

    // Every request formatted once, as scripts/wrk/check.lua does.
    let requests: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..args.keys)
            .map(|k| {
                let body = format!(
                    r#"{{"key":"user:{k:05}","limit":{{"algorithm":"gcra","rate":"{}"}}}}"#,
                    args.limit
                );
                format!(
                    "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
            })
            .collect(),
    );

    let interval = Duration::from_secs_f64(1.0 / args.rate);
    let warmup_count = (args.warmup * args.rate).round() as u64;
    let total = warmup_count + (args.duration * args.rate).round() as u64;

    let mut connections = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        connections.push(Connection::open(address).await?);
    }

    let permits = Arc::new(Semaphore::new(0));
    let next = Arc::new(AtomicU64::new(0));
    // Give every connection a moment to be ready before the clock starts.
    let start = Instant::now() + Duration::from_millis(20);

    let pacer = {
        let permits = Arc::clone(&permits);
        let workers = args.connections;
        std::thread::Builder::new()
            .name("pacer".into())
            .spawn(move || pace(&permits, start, interval, total, workers))?
    };

    let mut tasks = tokio::task::JoinSet::new();
    for (worker, connection) in connections.into_iter().enumerate() {
        let job = Job {
            permits: Arc::clone(&permits),
            next: Arc::clone(&next),
            requests: Arc::clone(&requests),
            address,
            start,
            interval,
            total,
            warmup_count,
            seed: 0x9E37_79B9_7F4A_7C15 ^ (worker as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03),
        };
        tasks.spawn(job.work(connection));
    }
    let mut tally = Tally::default();
    while let Some(done) = tasks.join_next().await {
        let part = done?;
        tally.samples.extend(part.samples);
        tally.errors += part.errors;
        tally.non_200 += part.non_200;
        tally.last_done = tally.last_done.max(part.last_done);
    }
    pacer.join().map_err(|_| "the pacer thread panicked")?;
    report(&args, tally, start + interval.mul_f64(warmup_count as f64));
    Ok(())
}

/// Releases request `i` at `start + i * interval`, then one extra permit per
/// worker so each sees the end.
fn pace(permits: &Semaphore, start: Instant, interval: Duration, total: u64, workers: usize) {
    let mut released = 0u64;
    while released < total {
        let now = Instant::now();
        let due = if now < start {
            0
        } else {
            ((now - start).as_secs_f64() / interval.as_secs_f64()) as u64 + 1
        }
        .min(total);
        if due > released {
            permits.add_permits((due - released) as usize);
            released = due;
        }
        let next_due = start + interval.mul_f64(released as f64);
        let now = Instant::now();
        if next_due > now {
            std::thread::sleep(next_due - now);
        }
    }
    permits.add_permits(workers);
}

/// One connection's share of the work.
struct Job {
    permits: Arc<Semaphore>,
    next: Arc<AtomicU64>,
    requests: Arc<Vec<Vec<u8>>>,
    address: SocketAddr,
    start: Instant,
    interval: Duration,
    total: u64,
    warmup_count: u64,
    seed: u64,
}

impl Job {
    async fn work(self, mut connection: Connection) -> Tally {
        let mut tally = Tally::default();
        let mut rng = self.seed;
        loop {
            match self.permits.acquire().await {
                Ok(permit) => permit.forget(),
                Err(_) => break,
            }
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.total {
                break;
            }
            let scheduled = self.start + self.interval.mul_f64(i as f64);
            rng = xorshift(rng);
            let request = &self.requests[(rng % self.requests.len() as u64) as usize];
            let sent = Instant::now();
            match connection.round_trip(request).await {
                Ok(status) => {
                    let done = Instant::now();
                    if status != 200 {
                        tally.non_200 += 1;
                    }
                    if i >= self.warmup_count {
                        tally.samples.push(Sample {
                            from_schedule: done.saturating_duration_since(scheduled),
                            from_send: done - sent,
                        });
                        tally.last_done = Some(done);
                    }
                }
                Err(_) => {
                    tally.errors += 1;
                    match Connection::open(self.address).await {
                        Ok(fresh) => connection = fresh,
                        Err(_) => break,
                    }
                }
            }
        }
        tally
    }
}

/// A keep-alive HTTP/1.1 connection that sends preformatted requests and
/// reads answers with `httparse` (hyper's parser). A full HTTP client costs
/// the one client core more per request, and a client that runs out of CPU
/// shows up as server latency.
struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl Connection {
    async fn open(address: SocketAddr) -> Result<Connection, BoxError> {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            buffer: Vec::with_capacity(4096),
        })
    }

    /// Sends `request` and reads the whole answer; returns its status.
    async fn round_trip(&mut self, request: &[u8]) -> Result<u16, BoxError> {
        self.stream.write_all(request).await?;
        self.buffer.clear();
        let (status, end) = loop {
            if self.stream.read_buf(&mut self.buffer).await? == 0 {
                return Err("connection closed".into());
            }
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut response = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(head) = response.parse(&self.buffer)? {
                let length: usize = response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
                    .ok_or("an answer without content-length")?;
                break (response.code.unwrap_or(0), head + length);
            }
        };
        while self.buffer.len() < end {
            if self.stream.read_buf(&mut self.buffer).await? == 0 {
                return Err("connection closed".into());
            }
        }
        Ok(status)
    }
}

/// xorshift64: plenty for picking keys uniformly.
fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

fn report(args: &Args, tally: Tally, measured_from: Instant) {
    let mut schedule: Vec<Duration> = tally.samples.iter().map(|s| s.from_schedule).collect();
    let mut send: Vec<Duration> = tally.samples.iter().map(|s| s.from_send).collect();
    schedule.sort_unstable();
    send.sort_unstable();
    let count = schedule.len();
    let elapsed = tally
        .last_done
        .map_or(0.0, |last| (last - measured_from).as_secs_f64());
    let achieved = if elapsed > 0.0 {
        count as f64 / elapsed
    } else {
        0.0
    };
    let us = |sorted: &[Duration], q: f64| -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1].as_secs_f64() * 1e6
    };
    println!(
        "{} requests in {elapsed:.2} s: {achieved:.0}/s (scheduled {:.0}/s) over {} connections, {} errors, {} not 200",
        count, args.rate, args.connections, tally.errors, tally.non_200
    );
    println!(
        "latency from schedule (us): p50 {:.0}  p90 {:.0}  p99 {:.0}  p99.9 {:.0}  max {:.0}",
        us(&schedule, 0.5),
        us(&schedule, 0.9),
        us(&schedule, 0.99),
        us(&schedule, 0.999),
        us(&schedule, 1.0)
    );
    println!(
        "latency from send (us):     p50 {:.0}  p90 {:.0}  p99 {:.0}  p99.9 {:.0}  max {:.0}",
        us(&send, 0.5),
        us(&send, 0.9),
        us(&send, 0.99),
        us(&send, 0.999),
        us(&send, 1.0)
    );
    println!(
        "count={count} rate={achieved:.0} target_rate={:.0} errors={} non_200={} p50_us={:.0} p90_us={:.0} p99_us={:.0} p999_us={:.0} max_us={:.0} send_p50_us={:.0} send_p99_us={:.0}",
        args.rate,
        tally.errors,
        tally.non_200,
        us(&schedule, 0.5),
        us(&schedule, 0.9),
        us(&schedule, 0.99),
        us(&schedule, 0.999),
        us(&schedule, 1.0),
        us(&send, 0.5),
        us(&send, 0.99),
    );
}
