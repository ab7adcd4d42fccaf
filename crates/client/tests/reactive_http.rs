//! `ReactiveClient` over real HTTP: four tasks call a local provider that
//! allows 20 calls in any second and publishes `X-RateLimit-Remaining` and
//! `X-RateLimit-Reset` (fractional seconds) on each answer; the client reads
//! them and never gets a `429`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate_client::reactive::ReactiveClient;

const LIMIT: usize = 20;
const WINDOW: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Provider {
    window: VecDeque<Instant>,
    served: u64,
    refused: u64,
}

async fn start_provider(state: Arc<Mutex<Provider>>) -> String {
    use axum::http::{HeaderMap, HeaderValue, StatusCode};
    let app = axum::Router::new().route(
        "/data",
        axum::routing::get(move || {
            let state = Arc::clone(&state);
            async move {
                let now = Instant::now();
                let mut p = state.lock().unwrap();
                while p
                    .window
                    .front()
                    .is_some_and(|t| now.duration_since(*t) >= WINDOW)
                {
                    p.window.pop_front();
                }
                let status = if p.window.len() < LIMIT {
                    p.window.push_back(now);
                    p.served += 1;
                    StatusCode::OK
                } else {
                    p.refused += 1;
                    StatusCode::TOO_MANY_REQUESTS
                };
                let reset = p
                    .window
                    .front()
                    .map_or(Duration::ZERO, |t| (*t + WINDOW).duration_since(now));
                let mut headers = HeaderMap::new();
                headers.insert(
                    "x-ratelimit-remaining",
                    HeaderValue::from(LIMIT - p.window.len()),
                );
                headers.insert(
                    "x-ratelimit-reset",
                    HeaderValue::from_str(&format!("{:.3}", reset.as_secs_f64() + 0.0005)).unwrap(),
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
    let provider = Arc::new(Mutex::new(Provider::default()));
    let url = start_provider(Arc::clone(&provider)).await;
    let client = ReactiveClient::new(reqwest::Client::new());
    let until = Instant::now() + Duration::from_secs(3);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    let request = client.http().get(&url).build().unwrap();
                    let status = client.execute(request).await.unwrap().status();
                    assert_ne!(status.as_u16(), 429);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let provider = provider.lock().unwrap();
    assert_eq!(provider.refused, 0);
    // Three seconds of a 20-per-second provider: the first window's 20 at
    // once, then 20 more each second.
    assert!(provider.served >= 50, "{}", provider.served);
}
