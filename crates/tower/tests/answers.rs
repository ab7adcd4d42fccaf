//! What clients get: 429 with the SPEC §7 headers (parsed by a Structured
//! Fields parser) and an RFC 9457 body; admitted responses with and
//! without headers; Retry-After exactness on tokio's paused clock; 503
//! when the store fails; shadow mode; inline limits; the observer; the
//! same answers whether the store answers at once or later.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use support::*;
use tollgate_core::{AlgorithmName, Limit, Rate};
use tollgate_testkit::DownStore;
use tollgate_tower::{ClientIp, RateLimitLayer, Settings};
use tower::util::BoxCloneService;
use tower::{service_fn, Layer, ServiceExt};

const PER_IP: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limits:
      - {unit: minute, requests_per_unit: 2, algorithm: gcra, name: per_ip}
      - {unit: hour, requests_per_unit: 100}
"#;

/// The inner services of these tests.
type Inner = BoxCloneService<Request<Full<Bytes>>, Response<Full<Bytes>>, Infallible>;

/// An inner service that answers `200` and counts its calls.
fn counting_inner() -> (Arc<AtomicUsize>, Inner) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let inner = service_fn(move |r: Request<Full<Bytes>>| {
        counted.fetch_add(1, Ordering::SeqCst);
        ok(r)
    });
    (calls, BoxCloneService::new(inner))
}

#[tokio::test(start_paused = true)]
async fn over_the_limit_is_429_with_headers_and_a_problem_body() {
    let (calls, inner) = counting_inner();
    let service = RateLimitLayer::from_rules(store(), rules(PER_IP), "edge").layer(inner);
    for _ in 0..2 {
        let admitted = service
            .clone()
            .oneshot(request("192.0.2.1:1000", "/"))
            .await
            .unwrap();
        assert_eq!(admitted.status(), 200);
    }
    let response = service
        .clone()
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the inner service never saw the 429"
    );

    let h = response.headers();
    let policy = sf_list(h, "ratelimit-policy");
    assert_eq!(
        policy,
        vec![
            (
                "per_ip:2/m".to_owned(),
                vec![("q".into(), 2), ("w".into(), 60)]
            ),
            (
                "per_ip:100/h".to_owned(),
                vec![("q".into(), 100), ("w".into(), 3600)]
            ),
        ]
    );
    let state = sf_list(h, "ratelimit");
    assert_eq!(state[0].0, "per_ip:2/m");
    assert_eq!(state[0].1[0], ("r".into(), 0));
    // GCRA 2/min: one slot frees 30 s after the second admission.
    assert_eq!(header(h, "retry-after"), "30");
    assert_eq!(header(h, "x-ratelimit-limit"), "2");
    assert_eq!(header(h, "x-ratelimit-remaining"), "0");
    assert_eq!(header(h, "content-type"), "application/problem+json");

    let body: serde_json::Value = serde_json::from_str(&text(response.into_body()).await).unwrap();
    assert_eq!(body["type"], "about:blank");
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["status"], 429);
    assert_eq!(body["policy"], "per_ip");
    assert_eq!(body["retry_after_ms"], 30_000);
    assert_eq!(
        body["detail"],
        "Rate limit \"per_ip\" exceeded; retry in 30 seconds."
    );
}

#[tokio::test(start_paused = true)]
async fn admitted_responses_carry_the_headers_unless_turned_off() {
    let with = RateLimitLayer::from_rules(store(), rules(PER_IP), "edge").layer(service_fn(ok));
    let response = with.oneshot(request("192.0.2.1:1000", "/")).await.unwrap();
    assert_eq!(response.status(), 200);
    let h = response.headers();
    assert_eq!(sf_list(h, "ratelimit")[0].1[0], ("r".into(), 1));
    assert_eq!(header(h, "x-ratelimit-remaining"), "1");
    assert!(h.get("retry-after").is_none());
    assert_eq!(text(response.into_body()).await, "ok");

    let settings = Settings {
        headers: false,
        ..Settings::default()
    };
    let without = RateLimitLayer::from_rules(store(), rules(PER_IP), "edge")
        .with_settings(settings)
        .layer(service_fn(ok));
    let response = without
        .clone()
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("ratelimit").is_none());
    assert!(response.headers().get("x-ratelimit-limit").is_none());
    without
        .clone()
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    // A rejection still says how long to wait.
    let rejected = without
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    assert_eq!(rejected.status(), 429);
    assert_eq!(header(rejected.headers(), "retry-after"), "30");
    assert!(rejected.headers().get("ratelimit").is_some());
}

#[tokio::test(start_paused = true)]
async fn retrying_after_retry_after_is_admitted_and_a_millisecond_earlier_is_not() {
    // One request per 2 s: the wait is exactly 2 s, a whole second.
    let yaml = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {window: 2s, requests_per_unit: 1, algorithm: gcra}\n";
    let service = RateLimitLayer::from_rules(store(), rules(yaml), "edge").layer(service_fn(ok));
    let send = || service.clone().oneshot(request("192.0.2.1:1000", "/"));
    assert_eq!(send().await.unwrap().status(), 200);
    let rejected = send().await.unwrap();
    assert_eq!(rejected.status(), 429);
    let wait: u64 = header(rejected.headers(), "retry-after").parse().unwrap();
    assert_eq!(wait, 2);
    let body: serde_json::Value = serde_json::from_str(&text(rejected.into_body()).await).unwrap();
    assert_eq!(body["retry_after_ms"], 2000);

    tokio::time::advance(Duration::from_secs(wait) - Duration::from_millis(1)).await;
    assert_eq!(send().await.unwrap().status(), 429, "1 ms early");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(send().await.unwrap().status(), 200, "at Retry-After");
}

#[tokio::test]
async fn a_store_that_fails_is_503_with_a_problem_body_naming_no_internals() {
    let recorder = Recorder::default();
    let (calls, inner) = counting_inner();
    let service =
        RateLimitLayer::from_rules(DownStore::new("connection refused"), rules(PER_IP), "edge")
            .with_observer(recorder.clone())
            .layer(inner);
    let response = service
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(
        header(response.headers(), "content-type"),
        "application/problem+json"
    );
    let body = text(response.into_body()).await;
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["status"], 503);
    assert_eq!(json["title"], "Service Unavailable");
    assert!(!body.contains("refused"), "{body}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        *recorder.failures.lock().unwrap(),
        ["store unavailable: connection refused"]
    );
}

/// The status and every header of `service`'s answer to a request from
/// 192.0.2.1.
async fn answer_of<S>(service: &S) -> (u16, Vec<(String, String)>)
where
    S: tower::Service<
            Request<Full<Bytes>>,
            Response = Response<tollgate_tower::RateLimitBody<Full<Bytes>>>,
        > + Clone,
    S::Error: std::fmt::Debug,
{
    let response = service
        .clone()
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    let headers = sorted_headers(response.headers());
    (response.status().as_u16(), headers)
}

#[tokio::test(start_paused = true)]
async fn a_store_that_answers_later_gets_the_same_answers_as_one_that_answers_at_once() {
    // Two limits, so a rejection and the rate-limit headers of both show.
    let at_once = RateLimitLayer::from_rules(store(), rules(PER_IP), "edge").layer(service_fn(ok));
    let later_store = WatchedStore::new(store())
        .answering_at_once(false)
        .yielding();
    let later =
        RateLimitLayer::from_rules(later_store, rules(PER_IP), "edge").layer(service_fn(ok));
    let mut statuses = Vec::new();
    for _ in 0..4 {
        // The same instant for both.
        let expected = answer_of(&at_once).await;
        assert!(expected
            .1
            .iter()
            .any(|(name, _)| name == "ratelimit-policy"));
        assert_eq!(answer_of(&later).await, expected);
        statuses.push(expected.0);
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
}

#[tokio::test]
async fn a_store_that_says_it_answers_at_once_and_does_not_is_an_outage() {
    let recorder = Recorder::default();
    let (calls, inner) = counting_inner();
    // Says it answers at once, and yields before each check.
    let store = WatchedStore::new(store()).yielding();
    let service = RateLimitLayer::from_rules(store, rules(PER_IP), "edge")
        .with_observer(recorder.clone())
        .layer(inner);
    let response = service
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        *recorder.failures.lock().unwrap(),
        ["store unavailable: the store did not answer at once"]
    );
}

#[tokio::test(start_paused = true)]
async fn global_shadow_never_rejects_shows_nothing_and_reports() {
    let recorder = Recorder::default();
    let settings = Settings {
        shadow: true,
        ..Settings::default()
    };
    let service = RateLimitLayer::from_rules(store(), rules(PER_IP), "edge")
        .with_settings(settings)
        .with_observer(recorder.clone())
        .layer(service_fn(ok));
    for _ in 0..4 {
        let response = service
            .clone()
            .oneshot(request("192.0.2.1:1000", "/"))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers().get("ratelimit").is_none());
    }
    let heard = recorder.take();
    assert_eq!(heard.len(), 4);
    assert!(heard.iter().all(|h| h.allowed));
    assert_eq!(
        heard.iter().map(|h| h.shadow_rejected).collect::<Vec<_>>(),
        [false, false, true, true]
    );
}

#[tokio::test(start_paused = true)]
async fn the_observer_hears_each_rule_decision() {
    let recorder = Recorder::default();
    // A shared store (`Arc`) serves as well, e.g. beside a readiness probe.
    let shared = Arc::new(store());
    let service = RateLimitLayer::from_rules(Arc::clone(&shared), rules(PER_IP), "edge")
        .with_observer(recorder.clone())
        .layer(service_fn(ok));
    service
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    let heard = recorder.take();
    assert_eq!(heard.len(), 1);
    assert_eq!(heard[0].route, None);
    assert_eq!(heard[0].rules, [Some("edge.remote_address".to_owned())]);
    assert!(
        heard[0].keys[0].ends_with("9:192.0.2.1"),
        "{:?}",
        heard[0].keys
    );
}

#[tokio::test(start_paused = true)]
async fn inline_limits_need_no_rules_file() {
    let recorder = Recorder::default();
    let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_second(1).unwrap());
    let service = RateLimitLayer::inline(store(), limit, ClientIp)
        .with_observer(recorder.clone())
        .layer(service_fn(ok));
    let first = service
        .clone()
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(
        sf_list(first.headers(), "ratelimit-policy")[0].0,
        "fixed_window_1_per_s"
    );
    let second = service
        .clone()
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    assert_eq!(second.status(), 429);
    let body: serde_json::Value = serde_json::from_str(&text(second.into_body()).await).unwrap();
    assert_eq!(body["policy"], "fixed_window_1_per_s");
    // Another client has its own counter.
    let other = service
        .clone()
        .oneshot(request("192.0.2.2:1000", "/"))
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    // A closure key: requests without the header go unchecked.
    let by_user = RateLimitLayer::inline(store(), limit, |parts: &http::request::Parts, _| {
        Some(parts.headers.get("x-user")?.to_str().ok()?.to_owned())
    })
    .layer(service_fn(ok));
    for _ in 0..3 {
        let r = by_user
            .clone()
            .oneshot(request("192.0.2.1:1000", "/"))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("ratelimit").is_none());
    }
    let inline = recorder.inline.lock().unwrap().clone();
    assert_eq!(inline.len(), 3);
    assert!(inline[0].1.allowed && !inline[1].1.allowed);
}

#[tokio::test]
async fn inner_errors_pass_through() {
    let failing = service_fn(|_: Request<Full<Bytes>>| async {
        Err::<Response<Full<Bytes>>, _>("upstream down")
    });
    let service = RateLimitLayer::from_rules(store(), rules(PER_IP), "edge").layer(failing);
    let error = service
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap_err();
    assert_eq!(error, "upstream down");
}
