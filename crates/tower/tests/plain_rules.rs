//! Requests whose descriptors are all decided by plain rules (counted,
//! enforced, not quotas; several descriptors, several limits) are decided
//! without a plan's lists. These tests hold that shortcut to the plan it
//! stands for: the same requests, at the same instants, through a layer
//! whose runtime overrides are in force (which always decides through a
//! plan), get the same statuses, the same headers, and the observer hears
//! the same.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use support::*;
use tollgate_rules::overrides::OverrideTable;
use tollgate_tower::{RateLimitBody, RateLimitLayer};
use tower::{service_fn, Layer, ServiceExt};

/// Two routes; the second makes two descriptors, one by client address
/// under two limits and one global, so that a refusal comes from either
/// rule (and the first route, one descriptor of two values, from a third).
const EDGE: &str = r#"
domain: edge
routes:
  - name: login
    match: {path: /login}
    descriptors: [[{generic_key: {descriptor_value: login}}, remote_address]]
  - name: everything
    descriptors:
      - [remote_address]
      - [{generic_key: {descriptor_value: all}}]
descriptors:
  - key: generic_key
    value: login
    descriptors:
      - key: remote_address
        rate_limit: {name: login, unit: minute, requests_per_unit: 1}
  - key: remote_address
    rate_limits:
      - {name: per_ip, unit: minute, requests_per_unit: 3}
      - {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 2}
  - key: generic_key
    value: all
    rate_limit: {name: everyone, unit: minute, requests_per_unit: 5, algorithm: gcra}
"#;

/// A layer over its own memory store; `through_a_plan`: with a runtime
/// override in force (for a descriptor no request makes).
fn layer(
    through_a_plan: bool,
    recorder: &Recorder,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<RateLimitBody<Full<Bytes>>>,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone {
    let mut layer =
        RateLimitLayer::from_rules(store(), rules(EDGE), "edge").with_observer(recorder.clone());
    if through_a_plan {
        let table = Arc::new(OverrideTable::new());
        table
            .put(
                "edge",
                &[("tenant", "nobody")],
                r#"{"rate_limit": {"unit": "hour", "requests_per_unit": 1}}"#,
            )
            .unwrap();
        layer = layer.with_overrides(table);
    }
    layer.layer(service_fn(ok))
}

/// The status, every header and the body of the answer to `request`.
async fn answer<S>(
    service: &S,
    request: Request<Full<Bytes>>,
) -> (u16, Vec<(String, String)>, String)
where
    S: tower::Service<Request<Full<Bytes>>, Response = Response<RateLimitBody<Full<Bytes>>>>
        + Clone,
    S::Error: std::fmt::Debug,
{
    let response = service.clone().oneshot(request).await.unwrap();
    let headers = sorted_headers(response.headers());
    let status = response.status().as_u16();
    (status, headers, text(response.into_body()).await)
}

#[tokio::test(start_paused = true)]
async fn plain_rules_answer_as_a_plan_does() {
    let (plain_heard, planned_heard) = (Recorder::default(), Recorder::default());
    let plain = layer(false, &plain_heard);
    let planned = layer(true, &planned_heard);
    // Two clients, each now and then logging in; 200s, then refusals by
    // the token bucket, per_ip, login and everyone, as their counters run
    // out at different paces.
    let steps = [
        ("192.0.2.1:1000", "/"),
        ("192.0.2.1:1000", "/"),
        ("192.0.2.1:1000", "/"),
        ("192.0.2.2:1000", "/login"),
        ("192.0.2.2:1000", "/login"),
        ("192.0.2.1:1000", "/"),
        ("192.0.2.2:1000", "/"),
        ("192.0.2.2:1000", "/"),
        ("192.0.2.2:1000", "/"),
        ("192.0.2.3:1000", "/"),
        ("192.0.2.1:1000", "/"),
    ];
    let mut statuses = Vec::new();
    for (i, (peer, path)) in steps.into_iter().enumerate() {
        let expected = answer(&planned, request(peer, path)).await;
        assert!(
            expected.1.iter().any(|(name, _)| name == "ratelimit"),
            "{expected:?}"
        );
        assert_eq!(
            answer(&plain, request(peer, path)).await,
            expected,
            "step {i}"
        );
        statuses.push(expected.0);
        // Half the token bucket's second: some steps find it refilled.
        tokio::time::advance(Duration::from_millis(500)).await;
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 429, 429, 200, 200, 429, 429, 429]
    );
    let heard = plain_heard.take();
    assert_eq!(heard.len(), steps.len());
    assert_eq!(heard, planned_heard.take());
}
