//! The recipes of `docs/quotas-and-billing.md`, run as written: each
//! configuration is read from the page (the fenced block after its
//! `<!-- test: NAME -->` marker) and run against the real binary — the
//! LLM token quota behind `tollgate gateway` with a real upstream, the
//! monthly plan on `tollgate serve` with a runtime override for one
//! customer (at instants given with `--trust-client-time`), and the
//! two calls Envoy makes with `apply_on_stream_done` on the gRPC port.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/gateway.rs"]
mod gateway;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use http::{Request, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};
use support::Server;
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate_testkit::sf_list_members;

use gateway::{client, text, Gateway};
use upstream::{Event, TestBody, Upstream};

/// The fenced block after `<!-- test: NAME -->` in the page.
fn recipe(name: &str) -> String {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/quotas-and-billing.md"
    ))
    .unwrap();
    let marker = format!("<!-- test: {name} -->");
    let after = &page[page.find(&marker).unwrap_or_else(|| panic!("no {marker}"))..];
    let mut lines = after.lines().skip(1);
    assert!(lines.next().unwrap().starts_with("```"), "{name}: a fence");
    lines
        .take_while(|l| !l.starts_with("```"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `text` written to `name` in `dir`; the path.
fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

// --- LLM tokens behind the gateway ---------------------------------------

async fn ask(gw: &Gateway, path: &str, key: Option<&str>) -> http::Response<Incoming> {
    let mut request = Request::get(gw.url(path));
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    let request = request.body(TestBody::empty()).unwrap();
    tokio::time::timeout(upstream::PATIENCE, client().request(request))
        .await
        .expect("an answer in time")
        .unwrap()
}

/// The `r` of `tokens-per-month` in the answer's `RateLimit` header.
fn tokens_left(response: &http::Response<Incoming>) -> i64 {
    let value = response.headers()["ratelimit"].to_str().unwrap();
    let members = sf_list_members(value);
    let (_, params) = members
        .iter()
        .find(|(n, _)| n == "tokens-per-month")
        .unwrap_or_else(|| panic!("{value}"));
    params.iter().find(|(k, _)| k == "r").unwrap().1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_tokens_behind_the_gateway() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let rules = file(&dir, "llm.yaml", &recipe("llm-rules"));
    // The upstream answers every /tokens… path; the page's /v1/… paths
    // reach it under that base.
    let base = format!("{}/tokens", upstream.url());
    let gw = Gateway::start(&["--upstream", &base, "--rules", &rules]);
    let path = "/v1/chat/completions";

    let first = ask(&gw, &format!("{path}?used=250"), Some("k1")).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(tokens_left(&first), 5_000_000 - 1000);
    assert_eq!(text(first).await, "tokens");
    let second = ask(&gw, &format!("{path}?used=0"), Some("k1")).await;
    assert_eq!(tokens_left(&second), 5_000_000 - 250 - 1000);
    text(second).await;

    // Streamed: settled from the trailer when the body ends.
    let streamed = ask(&gw, &format!("{path}?stream=1&used=300"), Some("k1")).await;
    assert_eq!(tokens_left(&streamed), 5_000_000 - 250 - 1000);
    assert_eq!(upstream.next_event().await, Event::FirstSent);
    upstream.release();
    assert_eq!(text(streamed).await, "tokens");
    let after = ask(&gw, &format!("{path}?status=500&used=999"), Some("k1")).await;
    assert_eq!(after.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(tokens_left(&after), 5_000_000 - 250 - 300 - 1000);
    text(after).await;
    // The failed answer cost nothing.
    let last = ask(&gw, &format!("{path}?used=1"), Some("k1")).await;
    assert_eq!(tokens_left(&last), 5_000_000 - 250 - 300 - 1000);
    text(last).await;

    let anonymous = ask(&gw, path, None).await;
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

// --- A monthly plan per API key ------------------------------------------

/// 2026-03-15T04:00:00Z: 00:00 on March 15 in New York (EDT since March 8).
const CYCLE_START_MS: u64 = 1_773_547_200_000;

fn check(server: &Server, key: &str, cost: u64, at_ms: u64) -> (u16, Value) {
    server.call(
        "/v1/check",
        &json!({
            "domain": "plans",
            "descriptors": [{"entries": [{"key": "api_key", "value": key}]}],
            "cost": cost,
            "at_ms": at_ms,
        }),
    )
}

#[test]
fn a_monthly_plan_per_api_key_with_a_bigger_plan_for_one_customer() {
    let dir = tempfile::tempdir().unwrap();
    let rules = file(&dir, "plans.yaml", &recipe("plan-rules"));
    let server = Server::start(&[
        "--rules",
        &rules,
        "--admin-token",
        "t0ken",
        "--trust-client-time",
    ]);
    let override_body: Value = serde_json::from_str(&recipe("plan-override")).unwrap();
    let put = server
        .client()
        .put(format!("{}/v1/overrides/plans", server.base))
        .bearer_auth("t0ken")
        .json(&override_body)
        .send()
        .unwrap();
    assert_eq!(put.status().as_u16(), 201);

    let last_second = CYCLE_START_MS - 1000;
    // An ordinary key: 10,000 in the cycle ending at 23:59:59 on the 14th.
    let (status, spent) = check(&server, "k-123", 10_000, last_second);
    assert_eq!(status, 200, "{spent}");
    let (status, refused) = check(&server, "k-123", 1, last_second);
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["retry_after_ms"], 1000, "{refused}");
    // The new cycle starts at midnight in New York.
    let (status, fresh) = check(&server, "k-123", 1, CYCLE_START_MS);
    assert_eq!(status, 200, "{fresh}");
    assert_eq!(fresh["remaining"], 9_999, "{fresh}");

    // The enterprise customer has room after 20,000.
    for _ in 0..2 {
        let (status, answer) = check(&server, "acme", 10_000, last_second);
        assert_eq!(status, 200, "{answer}");
    }
    let (_, answer) = check(&server, "acme", 1, last_second);
    assert_eq!(answer["remaining"], 100_000 - 20_001, "{answer}");
    assert_eq!(answer["statuses"][0]["name"], "enterprise-plan", "{answer}");
}

// --- Envoy, with the cost charged at stream end --------------------------

fn envoy_call(server: &Server, hits_addend: Option<u64>) -> RateLimitResponse {
    let mut grpc = server.grpc_client();
    let request = RateLimitRequest {
        domain: "llm".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "api_key".into(),
                value: "k1".into(),
            }],
            hits_addend,
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    grpc.runtime
        .block_on(grpc.client.should_rate_limit(request))
        .unwrap()
        .into_inner()
}

#[test]
fn envoy_charges_the_tokens_at_stream_end() {
    let dir = tempfile::tempdir().unwrap();
    let rules = file(&dir, "llm.yaml", &recipe("envoy-rules"));
    let server = Server::start(&["--rules", &rules]);

    // The request's call: 1.
    let request = envoy_call(&server, None);
    assert_eq!(request.overall_code, Code::Ok as i32);
    assert_eq!(request.statuses[0].limit_remaining, 5_000_000 - 1);
    // The stream-end call: the answer's 300 tokens.
    let done = envoy_call(&server, Some(300));
    assert_eq!(done.overall_code, Code::Ok as i32);
    assert_eq!(done.statuses[0].limit_remaining, 5_000_000 - 301);
    // The next request sees them.
    let next = envoy_call(&server, None);
    assert_eq!(next.statuses[0].limit_remaining, 5_000_000 - 302);

    // A charge larger than what is left is refused and counts nothing.
    let too_much = envoy_call(&server, Some(5_000_000));
    assert_eq!(too_much.overall_code, Code::OverLimit as i32);
    let after = envoy_call(&server, None);
    assert_eq!(after.statuses[0].limit_remaining, 5_000_000 - 303);
}
