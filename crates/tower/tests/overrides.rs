//! Runtime overrides in the middleware: with a table
//! (`RateLimitLayer::with_overrides`), an override takes precedence over
//! the rules for its exact descriptor, and a change to the shared table
//! applies to the next request; without one, overrides are not read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use http::StatusCode;
use support::*;
use tollgate_rules::overrides::OverrideTable;
use tollgate_tower::RateLimitLayer;
use tower::{service_fn, Layer};

/// One hour-long window: no boundary falls inside a test.
const TENANTS: &str = r#"
domain: api
routes:
  - name: all
    match: {path_prefix: /}
    descriptors: [[{request_headers: {header_name: x-tenant, descriptor_key: tenant}}]]
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1}
"#;

fn tier(per_hour: u64) -> String {
    format!(r#"{{"rate_limit": {{"unit": "hour", "requests_per_unit": {per_hour}}}}}"#)
}

fn from(tenant: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let mut r = request("192.0.2.1:1000", "/orders");
    r.headers_mut().insert("x-tenant", tenant.parse().unwrap());
    r
}

/// Requests of `tenant` admitted before the first refusal (at most 10).
async fn admitted<S, B>(service: &S, tenant: &str) -> usize
where
    S: tower::Service<
            http::Request<http_body_util::Full<bytes::Bytes>>,
            Response = http::Response<B>,
        > + Clone,
    S::Error: std::fmt::Debug,
{
    let mut n = 0;
    while n < 10 && status_of(service, from(tenant)).await == StatusCode::OK {
        n += 1;
    }
    n
}

#[tokio::test(start_paused = true)]
async fn an_override_beats_the_rules_for_its_descriptor_and_changes_apply_at_once() {
    let table = Arc::new(OverrideTable::new());
    table.put("api", &[("tenant", "acme")], &tier(3)).unwrap();
    let recorder = Recorder::default();
    let service = RateLimitLayer::from_rules(store(), rules(TENANTS), "api")
        .with_overrides(Arc::clone(&table))
        .with_observer(recorder.clone())
        .layer(service_fn(ok));

    assert_eq!(admitted(&service, "acme").await, 3);
    assert_eq!(admitted(&service, "globex").await, 1);
    let heard = recorder.take();
    // Counted under the override's rule, in its own key.
    assert_eq!(heard[0].rules, [Some("api._override_".to_owned())]);
    assert!(heard[0].keys[0].contains("api!"), "{:?}", heard[0].keys);
    assert_eq!(heard.last().unwrap().rules, [Some("api.tenant".to_owned())]);

    // The refusal names the override's rule and its limit.
    let refused = tower::ServiceExt::oneshot(service.clone(), from("acme"))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let shown = header(refused.headers(), "ratelimit");
    assert!(shown.starts_with("\"api._override_\";r=0;"), "{shown}");

    // Put while the service runs: the next request is decided by it.
    table
        .put("api", &[("tenant", "initech")], &tier(2))
        .unwrap();
    assert_eq!(admitted(&service, "initech").await, 2);
    // Removed: the rules again (the rule's own counter, still unused).
    assert!(table.remove("api", &[("tenant", "acme")]));
    assert_eq!(admitted(&service, "acme").await, 1);
}

#[tokio::test(start_paused = true)]
async fn without_a_table_the_rules_decide() {
    let service = RateLimitLayer::from_rules(store(), rules(TENANTS), "api").layer(service_fn(ok));
    assert_eq!(admitted(&service, "acme").await, 1);
}
