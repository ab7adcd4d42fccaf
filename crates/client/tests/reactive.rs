//! The reactive layer against a fake provider that allows 100 calls in any
//! 10 s (an exact sliding window) and answers `429` over it, on tokio's
//! paused clock: ten virtual minutes run in well under a second.
//!
//! - When the provider publishes its numbers (`RateLimit`), the callers get
//!   no `429` and nearly all of the quota.
//! - When it only sends `Retry-After` on its `429`s, or nothing at all, the
//!   `429`s stay few and the throughput converges to the provider's limit.
//! - The same through `ReactiveLayer` around a tower service.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use tollgate_client::clock::{Clock, TokioClock};
use tollgate_client::reactive::{Adaptive, ReactiveLayer, ReactiveLimiter};
use tower::{Layer, ServiceExt};

const LIMIT: usize = 100;
const WINDOW: u64 = 10_000_000_000;
const RUN: Duration = Duration::from_secs(600);
const WORKERS: usize = 4;
/// Time from sending a call to its answer.
const LATENCY: Duration = Duration::from_millis(5);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Publishes {
    /// `RateLimit` and `RateLimit-Policy` on every answer, `Retry-After` on
    /// a `429`.
    Numbers,
    /// `Retry-After` on a `429`, nothing else.
    RetryAfter,
    /// A bare `429`.
    Nothing,
}

struct Provider {
    publishes: Publishes,
    window: VecDeque<u64>,
    served: Vec<u64>,
    refused: u64,
}

impl Provider {
    fn call(&mut self, now: u64) -> (u16, HeaderMap) {
        while self.window.front().is_some_and(|t| now - t >= WINDOW) {
            self.window.pop_front();
        }
        let mut headers = HeaderMap::new();
        // Seconds until the oldest call leaves the window, rounded up.
        let reset = self
            .window
            .front()
            .map_or(0, |t| (t + WINDOW - now).div_ceil(1_000_000_000));
        let status = if self.window.len() < LIMIT {
            self.window.push_back(now);
            self.served.push(now);
            200
        } else {
            self.refused += 1;
            if self.publishes != Publishes::Nothing {
                headers.insert("retry-after", HeaderValue::from(reset));
            }
            429
        };
        if self.publishes == Publishes::Numbers {
            let left = LIMIT - self.window.len();
            let reset = self
                .window
                .front()
                .map_or(0, |t| (t + WINDOW - now).div_ceil(1_000_000_000));
            let value = format!("\"default\";r={left};t={reset}");
            headers.insert("ratelimit", HeaderValue::from_str(&value).unwrap());
            headers.insert(
                "ratelimit-policy",
                HeaderValue::from_static("\"default\";q=100;w=10"),
            );
        }
        (status, headers)
    }
}

struct Outcome {
    served: Vec<u64>,
    refused: u64,
    start: u64,
}

impl Outcome {
    /// Calls served per second between `from` and `to` (seconds into the
    /// run), as a fraction of the provider's 10 per second.
    fn share(&self, from: u64, to: u64) -> f64 {
        let (from_ns, to_ns) = (
            self.start + from * 1_000_000_000,
            self.start + to * 1_000_000_000,
        );
        let n = self
            .served
            .iter()
            .filter(|&&t| t >= from_ns && t < to_ns)
            .count();
        n as f64 / (to - from) as f64 / (LIMIT as f64 / 10.0)
    }
}

async fn run(publishes: Publishes) -> Outcome {
    let clock = TokioClock::new();
    let start = clock.now();
    let limiter = Arc::new(ReactiveLimiter::with_clock(clock, Adaptive::default()));
    let provider = Arc::new(Mutex::new(Provider {
        publishes,
        window: VecDeque::new(),
        served: Vec::new(),
        refused: 0,
    }));
    let end = start + RUN.as_nanos() as u64;
    let tasks: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (limiter, provider) = (Arc::clone(&limiter), Arc::clone(&provider));
            tokio::spawn(async move {
                let clock = TokioClock::new();
                while clock.now() < end {
                    let permit = limiter.until_ready("provider").await;
                    let (status, headers) = provider.lock().unwrap().call(clock.now());
                    tokio::time::sleep(LATENCY).await;
                    permit.observe(status, &headers);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let provider = provider.lock().unwrap();
    Outcome {
        served: provider.served.clone(),
        refused: provider.refused,
        start,
    }
}

#[tokio::test(start_paused = true)]
async fn published_numbers_mean_no_429_and_the_whole_quota() {
    let outcome = run(Publishes::Numbers).await;
    let share = outcome.share(0, 600);
    eprintln!(
        "numbers: {} refused, {:.3} of the quota",
        outcome.refused, share
    );
    assert_eq!(outcome.refused, 0);
    assert!(share >= 0.95, "{share}");
}

#[tokio::test(start_paused = true)]
async fn retry_after_alone_keeps_429s_few_and_converges() {
    let outcome = run(Publishes::RetryAfter).await;
    let (share, settled) = (outcome.share(0, 600), outcome.share(300, 600));
    eprintln!(
        "retry-after: {} refused, {:.3} of the quota, {settled:.3} in the second half",
        outcome.refused, share
    );
    assert!(outcome.refused <= 120, "{}", outcome.refused);
    assert!(settled >= 0.9, "{settled}");
}

#[tokio::test(start_paused = true)]
async fn bare_429s_adapt_the_rate() {
    let outcome = run(Publishes::Nothing).await;
    let (share, settled) = (outcome.share(0, 600), outcome.share(300, 600));
    eprintln!(
        "nothing: {} refused, {:.3} of the quota, {settled:.3} in the second half",
        outcome.refused, share
    );
    assert!(outcome.refused <= 120, "{}", outcome.refused);
    assert!(settled >= 0.8, "{settled}");
}

/// The provider as a tower service behind `ReactiveLayer`: the layer keys
/// the requests by host, waits, and learns from the answers.
#[tokio::test(start_paused = true)]
async fn the_tower_layer_paces_a_service() {
    // One clock for everything: each `TokioClock` maps tokio's instants to
    // the epoch when it is made.
    let clock = TokioClock::new();
    let start = clock.now();
    let limiter = Arc::new(ReactiveLimiter::with_clock(clock, Adaptive::default()));
    let provider = Arc::new(Mutex::new(Provider {
        publishes: Publishes::RetryAfter,
        window: VecDeque::new(),
        served: Vec::new(),
        refused: 0,
    }));
    let (backend, backend_clock) = (Arc::clone(&provider), clock);
    let service =
        ReactiveLayer::new(limiter).layer(tower::service_fn(move |_request: http::Request<()>| {
            let (backend, now) = (Arc::clone(&backend), backend_clock.now());
            async move {
                let (status, headers) = backend.lock().unwrap().call(now);
                tokio::time::sleep(LATENCY).await;
                let mut response = http::Response::new(());
                *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
                *response.headers_mut() = headers;
                Ok::<_, std::convert::Infallible>(response)
            }
        }));
    let end = start + RUN.as_nanos() as u64;
    let tasks: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (service, clock) = (service.clone(), clock);
            tokio::spawn(async move {
                while clock.now() < end {
                    let request = http::Request::get("http://provider.example/data")
                        .body(())
                        .unwrap();
                    service.clone().oneshot(request).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let provider = provider.lock().unwrap();
    let outcome = Outcome {
        served: provider.served.clone(),
        refused: provider.refused,
        start,
    };
    let settled = outcome.share(300, 600);
    eprintln!(
        "layer: {} refused, {settled:.3} in the second half",
        outcome.refused
    );
    assert!(outcome.refused <= 120, "{}", outcome.refused);
    assert!(settled >= 0.9, "{settled}");
}
