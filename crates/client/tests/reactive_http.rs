//! `ReactiveClient` over real HTTP: four tasks call a local provider that
//! allows 20 calls in any second and publishes `X-RateLimit-Remaining` and
//! `X-RateLimit-Reset` (fractional seconds) on each answer; the client reads
//! them, never gets a `429` and uses the published budget.
//!
//! Time is a [`ManualClock`] that the provider and the client's limiter both
//! read, moved by the test only when every task is asleep on it: the calls
//! travel over real sockets, but how long they take (how busy the machine
//! is) changes nothing that is checked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::Notify;
use tollgate_client::clock::{Clock, ManualClock, ManualSleep, WaitClock};
use tollgate_client::reactive::{Adaptive, ReactiveClient, ReactiveLimiter};

const LIMIT: usize = 20;
const WINDOW: u64 = 1_000_000_000;
/// Three windows' worth and one more: the calls need three resets.
const CALLS: usize = 3 * LIMIT + 1;
const TASKS: usize = 4;
/// Where the clock starts: 2023-11-14, in nanoseconds since the epoch.
const START: u64 = 1_700_000_000_000_000_000;
/// How long the test waits for the tasks to make progress before it counts
/// them as hung (a guard, not a verdict: a step takes milliseconds).
const HANG_GUARD: Duration = Duration::from_secs(60);

/// The manual clock, telling the test each time a task goes to sleep on it.
#[derive(Debug, Clone)]
struct AnnouncingClock {
    clock: ManualClock,
    changed: Arc<Notify>,
}

impl Clock for AnnouncingClock {
    fn now(&self) -> u64 {
        self.clock.now()
    }
}

impl WaitClock for AnnouncingClock {
    type Sleep = AnnouncedSleep;

    fn sleep_until(&self, deadline: u64) -> AnnouncedSleep {
        AnnouncedSleep {
            sleep: self.clock.sleep_until(deadline),
            changed: Arc::clone(&self.changed),
        }
    }

    fn sleep_blocking_until(&self, deadline: u64) {
        self.changed.notify_one();
        self.clock.sleep_blocking_until(deadline);
    }
}

struct AnnouncedSleep {
    sleep: ManualSleep,
    changed: Arc<Notify>,
}

impl Future for AnnouncedSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let poll = Pin::new(&mut self.sleep).poll(cx);
        if poll.is_pending() {
            self.changed.notify_one();
        }
        poll
    }
}

#[derive(Default)]
struct Provider {
    window: VecDeque<u64>,
    served: Vec<u64>,
    refused: u64,
}

/// The provider on a free port: an exact sliding window `(t − 1 s, t]` on
/// `clock`; the reset it publishes is rounded up to the millisecond.
async fn start_provider(state: Arc<Mutex<Provider>>, clock: ManualClock) -> String {
    use axum::http::{HeaderMap, HeaderValue, StatusCode};
    let app = axum::Router::new().route(
        "/data",
        axum::routing::get(move || {
            let (state, clock) = (Arc::clone(&state), clock.clone());
            async move {
                let now = clock.now();
                let mut p = state.lock().unwrap();
                while p.window.front().is_some_and(|t| now - t >= WINDOW) {
                    p.window.pop_front();
                }
                let status = if p.window.len() < LIMIT {
                    p.window.push_back(now);
                    p.served.push(now);
                    StatusCode::OK
                } else {
                    p.refused += 1;
                    StatusCode::TOO_MANY_REQUESTS
                };
                let reset_ms = p
                    .window
                    .front()
                    .map_or(0, |t| (t + WINDOW - now).div_ceil(1_000_000));
                let mut headers = HeaderMap::new();
                headers.insert(
                    "x-ratelimit-remaining",
                    HeaderValue::from(LIMIT - p.window.len()),
                );
                headers.insert(
                    "x-ratelimit-reset",
                    HeaderValue::from_str(&format!("{}.{:03}", reset_ms / 1000, reset_ms % 1000))
                        .unwrap(),
                );
                (status, headers)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/data")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_follows_published_numbers_without_a_429() {
    let clock = ManualClock::new(START);
    let changed = Arc::new(Notify::new());
    let provider = Arc::new(Mutex::new(Provider::default()));
    let url = start_provider(Arc::clone(&provider), clock.clone()).await;
    let limiter = ReactiveLimiter::with_clock(
        AnnouncingClock {
            clock: clock.clone(),
            changed: Arc::clone(&changed),
        },
        Adaptive::default(),
    );
    let client = ReactiveClient::with_limiter(reqwest::Client::new(), Arc::new(limiter));
    let tickets = Arc::new(AtomicUsize::new(CALLS));
    let running = Arc::new(AtomicUsize::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            let (tickets, running, changed) = (
                Arc::clone(&tickets),
                Arc::clone(&running),
                Arc::clone(&changed),
            );
            tokio::spawn(async move {
                while tickets
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
                {
                    let request = client.http().get(&url).build().unwrap();
                    let status = client.execute(request).await.unwrap().status();
                    assert_ne!(status.as_u16(), 429);
                }
                running.fetch_sub(1, Ordering::SeqCst);
                changed.notify_one();
            })
        })
        .collect();
    // Time moves only when every running task sleeps on the clock (none has
    // a call in flight), and then to the earliest instant one waits for.
    loop {
        let running = running.load(Ordering::SeqCst);
        if running == 0 {
            break;
        }
        if clock.sleepers() == running {
            if let Some(deadline) = clock.next_deadline() {
                clock.advance_to(deadline);
            }
        }
        tokio::time::timeout(HANG_GUARD, changed.notified())
            .await
            .expect("the tasks made no progress");
    }
    for task in tasks {
        task.await.unwrap();
    }
    let provider = provider.lock().unwrap();
    assert_eq!(provider.refused, 0);
    assert_eq!(provider.served.len(), CALLS);
    // Three windows' bursts and one call: three seconds (and the pacing of
    // the first calls, before any number is known) when the client spends
    // each published budget. Pacing at its adaptive rate instead (10 calls a
    // second, rising by one each second) it would need almost five.
    let span = provider.served[CALLS - 1] - provider.served[0];
    assert!(
        span < 4 * WINDOW,
        "{CALLS} calls took {:.3} s",
        span as f64 / 1e9
    );
}
