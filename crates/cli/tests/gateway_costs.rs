//! `tollgate gateway` charging the cost the upstream reports, end to end: a
//! real upstream (a small hyper server in this process) answering
//! `x-tokens-used` as a header, or as the trailer of a chunked body held
//! mid-stream; `count_if` refunding answers whose status does not count;
//! the outcomes on the admin port's metrics; and rules with bad `cost` or
//! `count_if` fields refused at start with their place. Each charge is read
//! off the next answer's `RateLimit` header: a token bucket of 1000 a year
//! refills one token every 8.76 hours, so nothing else moves it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/upstream.rs"]
mod upstream;

use http::{Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tollgate_testkit::sf_list_members;

use gateway::{client, gateway_output, get, text, Gateway};
use upstream::{Event, TestBody, Upstream, PATIENCE};

const RULES: &str = r#"
domain: llm
routes:
  - name: completions
    match: {path: /tokens/plain}
    cost: {estimate: 10, from_response_header: x-tokens-used}
    descriptors: [[api_key]]
  - name: streamed
    match: {path: /tokens/stream}
    cost: {estimate: 10, from_response_trailer: x-tokens-used}
    descriptors: [[api_key]]
  - name: counted
    match: {path_prefix: /echo}
    count_if: {status: ["5xx", 429, 200]}
    descriptors: [[api_key]]
descriptors:
  - key: api_key
    rate_limit: {name: tokens, unit: year, requests_per_unit: 1000, algorithm: token_bucket}
"#;

/// The gateway in front of `upstream` with [`RULES`] and an admin port.
fn start(upstream: &Upstream) -> (tempfile::TempDir, Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("llm.yaml");
    std::fs::write(&rules, RULES).unwrap();
    let gw = Gateway::start(&[
        "--upstream",
        &upstream.url(),
        "--rules",
        rules.to_str().unwrap(),
        "--admin",
        "127.0.0.1:0",
    ]);
    (dir, gw)
}

async fn send(request: Request<TestBody>) -> http::Response<Incoming> {
    tokio::time::timeout(PATIENCE, client().request(request))
        .await
        .expect("an answer in time")
        .unwrap()
}

/// A `GET` of `path` on the gateway with the API key `key`.
fn keyed(gw: &Gateway, path: &str, key: &str) -> Request<TestBody> {
    Request::get(gw.url(path))
        .header("x-api-key", key)
        .body(TestBody::empty())
        .unwrap()
}

/// The `r` of the answer's `RateLimit` header (one limit).
fn remaining(response: &http::Response<Incoming>) -> i64 {
    let value = response.headers()["ratelimit"].to_str().unwrap();
    let members = sf_list_members(value);
    assert_eq!(members[0].0, "tokens", "{value}");
    members[0]
        .1
        .iter()
        .find(|(k, _)| k == "r")
        .map(|(_, v)| *v)
        .unwrap()
}

/// `tollgate_response_costs_total{result=…}` on the admin port.
async fn costs(gw: &Gateway, result: &str) -> u64 {
    let url = format!("http://{}/metrics", gw.admin.as_ref().unwrap());
    let metrics = text(send(get(&url)).await).await;
    let prefix = format!("tollgate_response_costs_total{{result=\"{result}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_in_a_response_header_is_charged_before_the_next_request() {
    let upstream = Upstream::start().await;
    let (_dir, gw) = start(&upstream);

    let first = send(keyed(&gw, "/tokens/plain?used=250", "k1")).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["x-tokens-used"], "250");
    // Checked with the estimate.
    assert_eq!(remaining(&first), 990);
    assert_eq!(text(first).await, "tokens");
    // 1000 − 250, then this request's estimate.
    let second = send(keyed(&gw, "/tokens/plain?used=0", "k1")).await;
    assert_eq!(remaining(&second), 740);
    // The second cost nothing: its estimate came back.
    let third = send(keyed(&gw, "/tokens/plain?used=10", "k1")).await;
    assert_eq!(remaining(&third), 740);
    // No header, or one that is not a number: the estimate stands.
    let missing = send(keyed(&gw, "/tokens/plain", "k1")).await;
    assert_eq!(remaining(&missing), 730);
    let bad = send(keyed(&gw, "/tokens/plain?used=lots", "k1")).await;
    assert_eq!(remaining(&bad), 720);
    let last = send(keyed(&gw, "/tokens/plain?used=10", "k1")).await;
    assert_eq!(remaining(&last), 710);
    // Another key has its own count.
    let other = send(keyed(&gw, "/tokens/plain?used=1", "k2")).await;
    assert_eq!(remaining(&other), 990);

    assert_eq!(costs(&gw, "settled").await, 5);
    assert_eq!(costs(&gw, "missing").await, 1);
    assert_eq!(costs(&gw, "invalid").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_is_charged_from_its_trailer_when_it_ends() {
    let upstream = Upstream::start().await;
    let (_dir, gw) = start(&upstream);

    let request = Request::get(gw.url("/tokens/stream?stream=1&used=300"))
        .header("x-api-key", "k1")
        .body(TestBody::empty())
        .unwrap();
    let response = send(request).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(remaining(&response), 990);
    assert_eq!(upstream.next_event().await, Event::FirstSent);
    let mut body = response.into_body();
    let first = tokio::time::timeout(PATIENCE, body.frame())
        .await
        .expect("the first chunk in time")
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), "tok");

    // Mid-stream, only the estimate is counted.
    let during = send(keyed(&gw, "/tokens/plain?used=10", "k1")).await;
    assert_eq!(remaining(&during), 980);

    upstream.release();
    let rest = tokio::time::timeout(PATIENCE, body.collect())
        .await
        .expect("the rest in time")
        .unwrap();
    assert_eq!(rest.to_bytes(), "ens");
    // 1000 − 300 − 10, then this request's estimate.
    let after = send(keyed(&gw, "/tokens/plain?used=10", "k1")).await;
    assert_eq!(remaining(&after), 680);
    assert_eq!(costs(&gw, "settled").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_if_refunds_the_answers_whose_status_does_not_count() {
    let upstream = Upstream::start().await;
    let (_dir, gw) = start(&upstream);
    let mut left = 1000;
    for (status, counted) in [
        (200, true),
        (404, false),
        (201, false),
        (502, true),
        (429, true),
        (400, false),
    ] {
        let answer = send(keyed(&gw, &format!("/echo/x?status={status}"), "k1")).await;
        assert_eq!(answer.status().as_u16(), status);
        assert_eq!(remaining(&answer), left - 1, "{status}");
        left -= i64::from(counted);
    }
    assert_eq!(left, 997);
    let peek = send(keyed(&gw, "/echo/x", "k1")).await;
    assert_eq!(remaining(&peek), 996);
    assert_eq!(costs(&gw, "uncounted").await, 3);
}

#[test]
fn bad_cost_and_count_if_fields_stop_the_gateway_with_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "routes:\n  - descriptors: [[api_key]]\n    count_if: {status: [5xx, 6xx]}\n",
            "bad.yaml:4:30: `status`: \"6xx\" is not a status",
        ),
        (
            "routes:\n  - descriptors: [[api_key]]\n    cost: {from_header: x-tokens-used}\n",
            "bad.yaml:4:12: unknown field `from_header` in a route's cost",
        ),
    ];
    for (routes, expected) in cases {
        let rules = dir.path().join("bad.yaml");
        std::fs::write(&rules, format!("domain: llm\n{routes}descriptors: []\n")).unwrap();
        let output = gateway_output(
            &[
                "--upstream",
                "http://127.0.0.1:1",
                "--rules",
                rules.to_str().unwrap(),
            ],
            &[],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
}
