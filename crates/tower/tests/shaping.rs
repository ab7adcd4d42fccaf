//! Shaping on tokio's paused clock: a `leaky_bucket` route holds the k-th
//! request of a burst until k × P/N; `nodelay` holds none; `delay: N`
//! lets the first N queued requests go at once; a full queue rejects.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use support::*;
use tollgate_tower::{RateLimitLayer, Settings};
use tower::{service_fn, Layer, ServiceExt};

const SHAPED: &str = r#"
domain: edge
routes:
  - match: {path_prefix: /plain}
    descriptors: [[{generic_key: {descriptor_value: plain}}]]
  - match: {path_prefix: /nodelay}
    nodelay: true
    descriptors: [[{generic_key: {descriptor_value: nodelay}}]]
  - match: {path_prefix: /delay}
    delay: 2
    descriptors: [[{generic_key: {descriptor_value: delay}}]]
  - match: {path_prefix: /dry}
    shadow: true
    descriptors: [[{generic_key: {descriptor_value: dry}}]]
descriptors:
  - key: generic_key
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 5}
"#;

/// Sends `n` requests to `path` at the same instant; returns when the inner
/// service saw each admitted one (ms after the burst, sorted) and the
/// statuses (sorted).
async fn burst(path: &str, n: usize, settings: Settings) -> (Vec<u64>, Vec<u16>) {
    let start = tokio::time::Instant::now();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let inner = service_fn(move |r: Request<Full<Bytes>>| {
        let at = start.elapsed();
        record
            .lock()
            .unwrap()
            .push(u64::try_from(at.as_millis()).unwrap());
        assert_eq!(
            at.subsec_nanos() % 1_000_000,
            0,
            "released between milliseconds: {at:?}"
        );
        ok(r)
    });
    let service = RateLimitLayer::from_rules(store(), rules(SHAPED), "edge")
        .with_settings(settings)
        .layer(inner);
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let s = service.clone();
            let path = path.to_owned();
            tokio::spawn(async move { s.oneshot(request("192.0.2.1:1000", &path)).await })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap().unwrap().status().as_u16());
    }
    statuses.sort_unstable();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_unstable();
    (seen, statuses)
}

#[tokio::test(start_paused = true)]
async fn the_kth_request_of_a_burst_goes_at_k_intervals() {
    // 10/s drains one request per 100 ms; the queue holds 5.
    let (seen, statuses) = burst("/plain", 6, Settings::default()).await;
    assert_eq!(seen, [0, 100, 200, 300, 400]);
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 429],
        "the full queue rejects"
    );
}

#[tokio::test(start_paused = true)]
async fn nodelay_holds_nothing_but_the_queue_still_fills() {
    let (seen, statuses) = burst("/nodelay", 6, Settings::default()).await;
    assert_eq!(seen, [0, 0, 0, 0, 0]);
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
}

#[tokio::test(start_paused = true)]
async fn delay_n_lets_the_first_n_queued_requests_go_at_once() {
    // The first request and the next two go at once; the others keep the
    // 100 ms spacing from there.
    let (seen, statuses) = burst("/delay", 6, Settings::default()).await;
    assert_eq!(seen, [0, 0, 0, 100, 200]);
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
}

#[tokio::test(start_paused = true)]
async fn shadow_mode_neither_holds_nor_rejects() {
    let (seen, statuses) = burst("/dry", 6, Settings::default()).await;
    assert_eq!(seen, [0, 0, 0, 0, 0, 0]);
    assert_eq!(statuses, [200; 6]);
    let global = Settings {
        shadow: true,
        ..Settings::default()
    };
    let (seen, statuses) = burst("/plain", 6, global).await;
    assert_eq!(seen, [0; 6]);
    assert_eq!(statuses, [200; 6]);
}

#[tokio::test(start_paused = true)]
async fn the_queue_drains_at_the_rate() {
    let service = RateLimitLayer::from_rules(store(), rules(SHAPED), "edge").layer(service_fn(ok));
    let send = || {
        service
            .clone()
            .oneshot(request("192.0.2.1:1000", "/nodelay"))
    };
    for _ in 0..5 {
        assert_eq!(send().await.unwrap().status(), 200);
    }
    let full = send().await.unwrap();
    assert_eq!(full.status(), 429);
    assert_eq!(header(full.headers(), "retry-after"), "1");
    // One slot drains every 100 ms.
    tokio::time::advance(Duration::from_millis(99)).await;
    assert_eq!(send().await.unwrap().status(), 429);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(send().await.unwrap().status(), 200);
}
