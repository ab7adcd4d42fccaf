//! Quota mode in the middleware: a quota rule over its limit lets the
//! request through while another quota rule admits it; the request is
//! rejected when every quota rule is over, or when an ordinary rule is; the
//! global switch (`Settings::quota_mode`) makes every rule a quota.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;
use tollgate_tower::{RateLimitLayer, Settings};
use tower::{service_fn, Layer};

const QUOTAS: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
routes:
  - descriptors: [[remote_address], [path]]
"#;

const ORDINARY: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 2}
routes:
  - descriptors: [[remote_address], [path]]
"#;

#[tokio::test(start_paused = true)]
async fn a_request_is_rejected_only_when_every_quota_is_over() {
    let service = RateLimitLayer::from_rules(store(), rules(QUOTAS), "edge").layer(service_fn(ok));
    // First: both admit. Second: the address's quota (1) is over, the
    // path's (2) admits: through. Third: both over: 429.
    for expected in [200u16, 200, 429] {
        let status = status_of(&service, request("192.0.2.1:1000", "/a")).await;
        assert_eq!(status, expected);
    }
}

#[tokio::test(start_paused = true)]
async fn the_global_switch_makes_every_rule_a_quota() {
    let settings = Settings {
        quota_mode: true,
        ..Settings::default()
    };
    let service = RateLimitLayer::from_rules(store(), rules(ORDINARY), "edge")
        .with_settings(settings)
        .layer(service_fn(ok));
    for expected in [200u16, 200, 429] {
        let status = status_of(&service, request("192.0.2.1:1000", "/a")).await;
        assert_eq!(status, expected);
    }
    // Without it, the address's limit alone rejects the second request.
    let service =
        RateLimitLayer::from_rules(store(), rules(ORDINARY), "edge").layer(service_fn(ok));
    for expected in [200u16, 429] {
        let status = status_of(&service, request("192.0.2.1:1000", "/a")).await;
        assert_eq!(status, expected);
    }
}
