//! `tollgate gateway` with allow and deny lists: routes that match on the
//! client's network (`client_cidr`, `not_client_cidr`), end to end through
//! the real binary. The client address is the one trusted proxies vouch
//! for: behind `--trusted-proxies`, the first untrusted hop of
//! `X-Forwarded-For`; without it, the peer, whatever the header claims. An
//! exempt network is never limited, a denied one meets a limit of 0, and a
//! bad network in the rules file stops the start with its place.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/upstream.rs"]
mod upstream;

use http::{Request, StatusCode};
use hyper::body::Incoming;
use tempfile::TempDir;

use gateway::{client, gateway_output, Gateway};
use upstream::{TestBody, Upstream, PATIENCE};

/// Monitoring is exempt, 203.0.113.0/24 is refused, `/echo/admin` is for
/// the office (192.0.2.0/24) only, and everyone else has 2 a minute.
const RULES: &str = r#"
domain: edge
routes:
  - name: monitoring
    match: {client_cidr: [198.51.100.0/24, "2001:db8:42::/48"]}
    enabled: false
  - name: blocked
    match: {client_cidr: [203.0.113.0/24]}
    descriptors: [[{generic_key: {descriptor_value: blocked}}]]
  - name: admin
    match: {path_prefix: /echo/admin, not_client_cidr: [192.0.2.0/24]}
    descriptors: [[{generic_key: {descriptor_value: blocked}}]]
  - name: everyone
    descriptors: [[remote_address]]
descriptors:
  - key: generic_key
    value: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: gcra}
"#;

fn rules_file(yaml: &str) -> (TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edge.yaml");
    std::fs::write(&path, yaml).unwrap();
    let path = path.to_str().unwrap().to_owned();
    (dir, path)
}

fn gateway(upstream: &Upstream, rules: &str, args: &[&str]) -> Gateway {
    let url: &'static str = Box::leak(upstream.url().into_boxed_str());
    let mut all = vec!["--upstream", url, "--rules", rules];
    all.extend_from_slice(args);
    Gateway::start(&all)
}

/// `GET path` with `X-Forwarded-For: xff`.
fn from(gw: &Gateway, path: &str, xff: &str) -> Request<TestBody> {
    Request::get(gw.url(path))
        .header("x-forwarded-for", xff)
        .body(TestBody::empty())
        .unwrap()
}

/// The status, and whether the upstream answered.
async fn send(request: Request<TestBody>) -> (StatusCode, bool) {
    let response: http::Response<Incoming> =
        tokio::time::timeout(PATIENCE, client().request(request))
            .await
            .expect("an answer in time")
            .unwrap();
    let forwarded = response.headers().contains_key("x-upstream");
    (response.status(), forwarded)
}

const OK: (StatusCode, bool) = (StatusCode::OK, true);
const REFUSED: (StatusCode, bool) = (StatusCode::TOO_MANY_REQUESTS, false);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_the_forwarded_client_picks_the_route() {
    let upstream = Upstream::start().await;
    let (_dir, rules) = rules_file(RULES);
    // This test, on 127.0.0.1, is the trusted proxy.
    let gw = gateway(&upstream, &rules, &["--trusted-proxies", "127.0.0.0/8"]);

    // A monitoring address, IPv4 or IPv6, is never limited: far past 2.
    for client in ["198.51.100.7", "2001:db8:42:1::9", "[2001:db8:42::1]:443"] {
        for i in 0..10 {
            assert_eq!(
                send(from(&gw, "/echo/a", client)).await,
                OK,
                "{client} #{i}"
            );
        }
    }
    // A blocked network is refused from its first request, unforwarded.
    assert_eq!(send(from(&gw, "/echo/a", "203.0.113.5")).await, REFUSED);
    assert_eq!(send(from(&gw, "/echo/a", "203.0.113.250")).await, REFUSED);
    // The hop the proxy appended counts, not what the client wrote left of
    // it: claiming a monitoring address does not exempt a blocked one.
    assert_eq!(
        send(from(&gw, "/echo/a", "198.51.100.7, 203.0.113.5")).await,
        REFUSED
    );
    // Anyone else is limited as usual: 2 a minute.
    for _ in 0..2 {
        assert_eq!(send(from(&gw, "/echo/a", "192.0.2.50")).await, OK);
    }
    assert_eq!(send(from(&gw, "/echo/a", "192.0.2.50")).await, REFUSED);
    // /echo/admin: only the office gets past the admin route (and then
    // meets its per-client limit); others are refused outright.
    assert_eq!(send(from(&gw, "/echo/admin", "192.0.2.9")).await, OK);
    assert_eq!(send(from(&gw, "/echo/admin", "192.0.2.9")).await, OK);
    assert_eq!(send(from(&gw, "/echo/admin", "192.0.2.9")).await, REFUSED);
    assert_eq!(send(from(&gw, "/echo/admin", "192.0.3.9")).await, REFUSED);
    assert_eq!(send(from(&gw, "/echo/admin", "2001:db8::1")).await, REFUSED);
    // Monitoring is exempt on /echo/admin too: its route comes first.
    assert_eq!(send(from(&gw, "/echo/admin", "198.51.100.7")).await, OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_trusted_proxies_a_header_claims_no_network() {
    let upstream = Upstream::start().await;
    let (_dir, rules) = rules_file(RULES);
    let gw = gateway(&upstream, &rules, &[]);
    // 127.0.0.1 claiming a monitoring address is still 127.0.0.1: limited.
    assert_eq!(send(from(&gw, "/echo/a", "198.51.100.7")).await, OK);
    assert_eq!(send(from(&gw, "/echo/a", "198.51.100.7")).await, OK);
    assert_eq!(send(from(&gw, "/echo/a", "198.51.100.7")).await, REFUSED);
    // Nor is it sent to the blocked route by someone else's header; it is
    // over its own limit, not refused as 203.0.113.0/24.
    let other = gateway(&upstream, &rules, &[]);
    assert_eq!(send(from(&other, "/echo/a", "203.0.113.5")).await, OK);

    // The peer's own network does pick the route: exempt 127.0.0.0/8.
    let exempt = RULES.replace("198.51.100.0/24", "127.0.0.0/8");
    let (_dir, exempt_rules) = rules_file(&exempt);
    let gw = gateway(&upstream, &exempt_rules, &[]);
    for _ in 0..10 {
        assert_eq!(send(from(&gw, "/echo/a", "203.0.113.5")).await, OK);
    }
}

#[test]
fn a_bad_network_stops_the_start_with_its_place() {
    let bad = RULES.replace("[203.0.113.0/24]", "[203.0.113.0/24, 203.0.113.1/24]");
    let (_dir, rules) = rules_file(&bad);
    let output = gateway_output(
        &["--upstream", "http://127.0.0.1:1", "--rules", &rules],
        &[],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("edge.yaml:8:43: `client_cidr`: \"203.0.113.1/24\" has bits set past its prefix length; the network is 203.0.113.0/24"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}
