//! The floor of a rate-limiting gateway: `bare_proxy` plus only the work
//! the spec asks of the gateway on every request, each part done as
//! cheaply as this author could on hyper, with nothing configurable.
//!
//! `scripts/bench-gateway` measures it beside `tollgate gateway` and the
//! bare proxy. The bare proxy is the floor of any proxy built on hyper;
//! this one is the floor of a gateway that does what `tollgate gateway`
//! must do with the benchmark's rules (SPEC §4, §7, §10). So the gap
//! between the bare proxy and this floor is the cost of the spec's work,
//! and the gap between this floor and `tollgate gateway` is the cost of
//! the gateway's own generality (routes and rules read from a file, tower
//! layers, the listener's timeouts, HTTP/2, TLS, observers).
//!
//! Per request, as the gateway does with the benchmark's rules:
//!
//! - the route (`--limits 3`: a `POST /login` route is tried first, as in
//!   the benchmark's second rules file) and its limits decided by the
//!   memory store's limiters (`tollgate-memory`, as the gateway uses), one
//!   clock read for the decisions, the client address as the key; a `429`
//!   with `Retry-After` and an RFC 9457 body when refused;
//! - counters per limit (total, allowed, rejected) and a decision latency
//!   histogram, as plain atomic increments (a second clock read);
//! - the request's hop-by-hop fields removed (one pass over the names when
//!   there are none), `X-Forwarded-For` (the peer's value made once per
//!   connection), `X-Forwarded-Proto` and `X-Forwarded-Host` set;
//! - the upstream's answer within a timeout (a timer kept by the
//!   connection and moved per request, as the gateway keeps one);
//! - the answer's hop-by-hop fields removed, and `RateLimit-Policy` (made
//!   once per limit), `RateLimit` and the `X-RateLimit-*` trio added.
//!
//! Left out, because the benchmark does not exercise them or the spec
//! does not ask them per request: HTTP/2, TLS, upgrades, trailers, request
//! bodies and their timeouts, connection idle and head timeouts (the
//! gateway keeps one timer per connection for them), a limit per request
//! value other than the client address, logs.
//!
//! Written apart from the gateway's code on purpose (its hop-by-hop list
//! repeats `hop_by_hop.rs`'s, its accept loop and connection set-up the
//! bare proxy's): it measures what the work costs done this way, not
//! what tollgate's code costs, and reads alone as the bare proxy does.
//!
//! ```text
//! spec_floor --upstream ADDRESS [--listen ADDRESS] [--limits 1|3]
//!     # default 127.0.0.1:0; prints `spec floor: listening on http://ADDR`
//! ```

use std::convert::Infallible;
use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use http::header::{CONNECTION, HOST, RETRY_AFTER, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::{self as client_http1, SendRequest};
use hyper::server::conn::http1 as server_http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tollgate_core::{AlgorithmName, Decision, Limit};
use tollgate_memory::{Limiter, MemoryConfig, MemoryStore};

/// The `tollgate` binary's allocator, as in the upstream.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type BoxError = Box<dyn Error + Send + Sync>;
type AnswerBody = UnsyncBoxBody<Bytes, hyper::Error>;

const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
/// The hop-by-hop fields besides `Connection` and what it names.
const HOP_BY_HOP: [&str; 7] = [
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];
/// The upper bounds of the decision latency histogram, in nanoseconds.
const LATENCY_BOUNDS: [u64; 8] = [
    1_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000, 5_000_000,
];

/// A pass-through HTTP/1.1 proxy to one upstream that limits every request
/// by client address.
#[derive(Debug, Parser)]
struct Args {
    /// The upstream's address (`HOST:PORT`).
    #[arg(long)]
    upstream: SocketAddr,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// 1: one route, one limit by client address (the benchmark's first
    /// rules); 3: the benchmark's second rules, two routes and three
    /// limits (two by client address, one global).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=3))]
    limits: u8,
    /// The upstream timeout, in seconds.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

/// One limit of a route, with what is known of it at load time.
struct RouteLimit {
    limiter: Limiter,
    /// Whether its key is the client address (else one global key).
    by_client: bool,
    /// Its `RateLimit-Policy` member.
    policy: Bytes,
    /// The start of its `RateLimit` member: `"NAME";r=`.
    member: Bytes,
    counters: Counters,
}

#[derive(Default)]
struct Counters {
    total: AtomicU64,
    allowed: AtomicU64,
    rejected: AtomicU64,
}

/// What every connection shares.
struct Gateway {
    /// The `POST /login` route's limits and its `RateLimit-Policy` value
    /// (never taken by the benchmark's `GET /`), when there are two routes.
    login: Option<(Vec<RouteLimit>, HeaderValue)>,
    everything: Vec<RouteLimit>,
    /// The `RateLimit-Policy` value of the route that takes the rest.
    everything_policy: HeaderValue,
    latency: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    timeout: Duration,
}

/// What one client connection keeps.
struct Connection {
    gateway: Arc<Gateway>,
    sender: tokio::sync::Mutex<SendRequest<Incoming>>,
    /// The key of limits by client address.
    client_key: Vec<u8>,
    /// `X-Forwarded-For` when the client sends none.
    forwarded_for: HeaderValue,
    /// The upstream timer, kept between requests.
    timer: parking_lot::Mutex<Option<Pin<Box<Sleep>>>>,
}

fn route_limit(
    store: &MemoryStore,
    name: &str,
    limit: Limit,
    by_client: bool,
) -> Result<RouteLimit, BoxError> {
    let policy = limit.policy();
    let policy = format!("\"{name}\";q={};w={}", policy.quota, policy.window_secs);
    Ok(RouteLimit {
        limiter: store.limiter(&limit)?,
        by_client,
        policy: Bytes::from(policy),
        member: Bytes::from(format!("\"{name}\";r=")),
        counters: Counters::default(),
    })
}

fn policy_value(limits: &[RouteLimit]) -> Result<HeaderValue, BoxError> {
    let mut value = Vec::new();
    for (i, limit) in limits.iter().enumerate() {
        if i > 0 {
            value.extend_from_slice(b", ");
        }
        value.extend_from_slice(&limit.policy);
    }
    Ok(HeaderValue::from_bytes(&value)?)
}

impl Gateway {
    fn new(limits: u8, timeout: Duration) -> Result<Gateway, BoxError> {
        let store = MemoryStore::new(MemoryConfig::default());
        let leaky = Limit::new(AlgorithmName::LeakyBucket, "1000000/s".parse()?).with_burst(1000);
        let (login, everything) = if limits == 1 {
            (None, vec![route_limit(&store, "per-client", leaky, true)?])
        } else {
            let login = vec![route_limit(
                &store,
                "login",
                Limit::new(AlgorithmName::FixedWindow, "5/min".parse()?),
                true,
            )?];
            let everything = vec![
                route_limit(&store, "per-client", leaky, true)?,
                route_limit(
                    &store,
                    "per-client-minute",
                    Limit::new(AlgorithmName::Gcra, "1000000000/min".parse()?),
                    true,
                )?,
                route_limit(
                    &store,
                    "everyone",
                    Limit::new(AlgorithmName::FixedWindow, "100000000/s".parse()?),
                    false,
                )?,
            ];
            let policy = policy_value(&login)?;
            (Some((login, policy)), everything)
        };
        Ok(Gateway {
            everything_policy: policy_value(&everything)?,
            login,
            everything,
            latency: Default::default(),
            timeout,
        })
    }

    /// The route's limits for `request`, and its policy value.
    fn route(&self, request: &Request<Incoming>) -> (&[RouteLimit], HeaderValue) {
        if let Some((login, policy)) = &self.login {
            if request.method() == Method::POST && request.uri().path() == "/login" {
                return (login, policy.clone());
            }
        }
        (&self.everything, self.everything_policy.clone())
    }
}

/// The decisions of one request: at most three limits.
struct Decided<'a> {
    decisions: [(Option<&'a RouteLimit>, Decision); 3],
    count: usize,
    top: usize,
    allowed: bool,
}

fn decide<'a>(connection: &Connection, limits: &'a [RouteLimit]) -> Decided<'a> {
    let gateway = &connection.gateway;
    let started = Instant::now();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut decided = Decided {
        decisions: Default::default(),
        count: 0,
        top: 0,
        allowed: true,
    };
    for limit in limits.iter().take(3) {
        let key: &[u8] = if limit.by_client {
            &connection.client_key
        } else {
            b"all"
        };
        // A store error would answer by the failure policy; the memory
        // store fails only on costs a limit cannot hold.
        let decision = limit.limiter.check(key, now, 1).unwrap_or_default();
        limit.counters.total.fetch_add(1, Ordering::Relaxed);
        if decision.allowed {
            limit.counters.allowed.fetch_add(1, Ordering::Relaxed);
        } else {
            limit.counters.rejected.fetch_add(1, Ordering::Relaxed);
            decided.allowed = false;
        }
        let i = decided.count;
        if decision.remaining < decided.decisions[decided.top].1.remaining || i == 0 {
            decided.top = i;
        }
        decided.decisions[i] = (Some(limit), decision);
        decided.count += 1;
    }
    let elapsed = started.elapsed().as_nanos() as u64;
    let bucket = LATENCY_BOUNDS
        .iter()
        .position(|&bound| elapsed <= bound)
        .unwrap_or(LATENCY_BOUNDS.len());
    gateway.latency[bucket].fetch_add(1, Ordering::Relaxed);
    decided
}

fn secs_ceil(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// Adds the rate-limit fields for `decided` to `headers`.
fn add_rate_limit_headers(headers: &mut HeaderMap, policy: HeaderValue, decided: &Decided<'_>) {
    headers.reserve(6);
    let mut member = Vec::with_capacity(64);
    for (i, (limit, decision)) in decided.decisions[..decided.count].iter().enumerate() {
        let Some(limit) = limit else { continue };
        if i > 0 {
            member.extend_from_slice(b", ");
        }
        member.extend_from_slice(&limit.member);
        member.extend_from_slice(itoa::Buffer::new().format(decision.remaining).as_bytes());
        member.extend_from_slice(b";t=");
        member.extend_from_slice(
            itoa::Buffer::new()
                .format(secs_ceil(decision.reset_after))
                .as_bytes(),
        );
    }
    let top = &decided.decisions[decided.top].1;
    headers.insert(RATELIMIT_POLICY, policy);
    if let Ok(value) = HeaderValue::from_maybe_shared(Bytes::from(member)) {
        headers.insert(RATELIMIT, value);
    }
    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(top.limit));
    headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(top.remaining));
    headers.insert(
        X_RATELIMIT_RESET,
        HeaderValue::from(secs_ceil(top.reset_after)),
    );
    if !decided.allowed {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs_ceil(top.retry_after)));
    }
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    *name == CONNECTION || *name == UPGRADE || HOP_BY_HOP.contains(&name.as_str())
}

/// Removes the hop-by-hop fields: none, in one pass over the names, on
/// most messages.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    headers.remove(CONNECTION);
    headers.remove(UPGRADE);
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

fn add_forwarded(headers: &mut HeaderMap, connection: &Connection) {
    if let Some(host) = headers.get(HOST).cloned() {
        headers.insert(X_FORWARDED_HOST, host);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    let forwarded_for = match headers.get(X_FORWARDED_FOR) {
        None => connection.forwarded_for.clone(),
        Some(list) => {
            let mut value = list.as_bytes().to_vec();
            value.extend_from_slice(b", ");
            value.extend_from_slice(connection.forwarded_for.as_bytes());
            match HeaderValue::from_maybe_shared(Bytes::from(value)) {
                Ok(value) => value,
                Err(_) => connection.forwarded_for.clone(),
            }
        }
    };
    headers.insert(X_FORWARDED_FOR, forwarded_for);
}

fn refused(policy: HeaderValue, decided: &Decided<'_>) -> Response<AnswerBody> {
    let body = Full::new(Bytes::from_static(
        br#"{"type":"about:blank","title":"Too Many Requests","status":429}"#,
    ))
    .map_err(|never| match never {})
    .boxed_unsync();
    let mut answer = Response::new(body);
    *answer.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    answer.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    add_rate_limit_headers(answer.headers_mut(), policy, decided);
    answer
}

fn empty_answer(status: StatusCode) -> Response<AnswerBody> {
    let mut answer = Response::new(Empty::new().map_err(|never| match never {}).boxed_unsync());
    *answer.status_mut() = status;
    answer
}

/// Decides `request`, and sends it on the connection's own upstream
/// connection when it is admitted.
async fn forward(
    connection: Arc<Connection>,
    mut request: Request<Incoming>,
) -> Result<Response<AnswerBody>, Infallible> {
    let gateway = Arc::clone(&connection.gateway);
    let (limits, policy) = gateway.route(&request);
    let decided = decide(&connection, limits);
    if !decided.allowed {
        return Ok(refused(policy, &decided));
    }
    strip_hop_by_hop(request.headers_mut());
    add_forwarded(request.headers_mut(), &connection);
    let deadline = tokio::time::Instant::now() + gateway.timeout;
    let mut timer = match connection.timer.lock().take() {
        Some(mut timer) => {
            timer.as_mut().reset(deadline);
            timer
        }
        None => Box::pin(tokio::time::sleep_until(deadline)),
    };
    // HTTP/1: the client connection sends its next request only after this
    // one's answer, so the lock is never contended.
    let mut sender = connection.sender.lock().await;
    let answer = if sender.ready().await.is_err() {
        drop(sender);
        empty_answer(StatusCode::BAD_GATEWAY)
    } else {
        let sending = sender.send_request(request);
        drop(sender);
        tokio::select! {
            biased;
            answer = sending => match answer {
                Ok(answer) => answer.map(BodyExt::boxed_unsync),
                Err(_) => empty_answer(StatusCode::BAD_GATEWAY),
            },
            _ = timer.as_mut() => empty_answer(StatusCode::GATEWAY_TIMEOUT),
        }
    };
    *connection.timer.lock() = Some(timer);
    let mut answer = answer;
    strip_hop_by_hop(answer.headers_mut());
    add_rate_limit_headers(answer.headers_mut(), policy, &decided);
    Ok(answer)
}

/// Serves one client connection, with its upstream connection in the same
/// task.
async fn proxy_connection(
    client: TcpStream,
    peer: IpAddr,
    upstream: SocketAddr,
    gateway: Arc<Gateway>,
) -> Result<(), BoxError> {
    let upstream = TcpStream::connect(upstream).await?;
    upstream.set_nodelay(true)?;
    let (sender, upstream_connection) = client_http1::Builder::new()
        .writev(false)
        .handshake(TokioIo::new(upstream))
        .await?;
    let connection = Arc::new(Connection {
        gateway,
        sender: tokio::sync::Mutex::new(sender),
        client_key: peer.to_string().into_bytes(),
        forwarded_for: HeaderValue::from_str(&peer.to_string())?,
        timer: parking_lot::Mutex::new(None),
    });
    let client_connection = server_http1::Builder::new().writev(false).serve_connection(
        TokioIo::new(client),
        service_fn(move |request| forward(Arc::clone(&connection), request)),
    );
    tokio::select! {
        served = client_connection => served?,
        ended = upstream_connection => ended?,
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let gateway = Arc::new(Gateway::new(
        args.limits,
        Duration::from_secs(args.timeout),
    )?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(args.listen).await?;
        println!("spec floor: listening on http://{}", listener.local_addr()?);
        loop {
            let (client, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(_) => continue,
                },
                _ = tokio::signal::ctrl_c() => return Ok(()),
            };
            let _ = client.set_nodelay(true);
            tokio::spawn(proxy_connection(
                client,
                peer.ip(),
                args.upstream,
                Arc::clone(&gateway),
            ));
        }
    })
}
