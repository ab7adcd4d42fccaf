//! Runtime overrides in `tollgate gateway`: on a shared Redis, an override
//! put through a `tollgate serve` instance decides the gateway's requests
//! (over the rules file), and one put on the gateway's admin port reaches
//! the serve instance; on the memory store, the admin port manages the
//! gateway's own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/overrides.rs"]
mod overrides;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use gateway::Gateway;
use overrides::{client, send, until_listed, TOKEN};
use reqwest::Method;
use serde_json::{json, Value};
use support::Server;
use tollgate_testkit::RedisServer;
use upstream::Upstream;

/// Every request is checked by its `x-tenant`; two an hour per tenant, in
/// hour-long sliding logs: no window boundary falls inside a test.
const RULES: &str = "\
domain: api
routes:
  - name: all
    match: {path_prefix: /}
    descriptors: [[{request_headers: {header_name: x-tenant, descriptor_key: tenant}}]]
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_window_log}
";

/// The upstream, on a runtime of its own: the test itself is blocking.
fn upstream() -> (tokio::runtime::Runtime, String) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = runtime.block_on(Upstream::start());
    let url = upstream.url();
    // It serves from the runtime's workers for as long as the runtime lives.
    std::mem::forget(upstream);
    (runtime, url)
}

fn override_of(tenant: &str, per_hour: u64) -> Value {
    overrides::override_of("tenant", tenant, per_hour)
}

/// Requests of `tenant` the gateway lets through before the first `429`
/// (at most 10).
fn admitted(gw: &Gateway, tenant: &str) -> usize {
    (0..10)
        .take_while(|_| {
            let status = client()
                .get(gw.url("/echo/x"))
                .header("x-tenant", tenant)
                .send()
                .unwrap()
                .status();
            assert!(status == 200 || status == 429, "{status}");
            status == 200
        })
        .count()
}

fn admin_base(gw: &Gateway) -> String {
    format!("http://{}", gw.admin.as_ref().unwrap())
}

#[test]
fn on_redis_a_gateway_follows_the_overrides_serve_sets_and_sets_them_too() {
    let redis = RedisServer::start();
    let (_runtime, upstream) = upstream();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("api.yaml");
    support::write(&rules, RULES);
    let rules = rules.to_str().unwrap();
    let store = redis.url();
    let serve = Server::start(&[
        "--rules",
        rules,
        "--store",
        store.as_str(),
        "--admin-token",
        TOKEN,
    ]);
    let gw = Gateway::start(&[
        "--upstream",
        upstream.as_str(),
        "--rules",
        rules,
        "--store",
        store.as_str(),
        "--admin",
        "127.0.0.1:0",
        "--admin-token",
        TOKEN,
    ]);
    let gw_admin = admin_base(&gw);

    // Put through serve: the gateway's table follows, and the override
    // takes precedence over the rules file for its tenant only.
    let (status, answer) = send(&serve.base, Method::PUT, Some(&override_of("vip", 5)));
    assert_eq!(status, 201, "{answer}");
    let page = until_listed(&gw_admin, |page| page["count"] == 1);
    assert_eq!(page["overrides"][0], override_of("vip", 5));
    assert_eq!(admitted(&gw, "vip"), 5);
    assert_eq!(admitted(&gw, "bob"), 2);

    // Put on the gateway's admin port: serve follows, and decides by it.
    let (status, answer) = send(&gw_admin, Method::PUT, Some(&override_of("carol", 4)));
    assert_eq!(status, 201, "{answer}");
    until_listed(&serve.base, |page| page["count"] == 2);
    let check = json!({"domain": "api", "descriptors": [{"entries": [{"key": "tenant", "value": "carol"}]}]});
    let admitted_by_serve = (0..10)
        .take_while(|_| serve.call("/v1/check", &check).0 == 200)
        .count();
    assert_eq!(admitted_by_serve, 4);
    // The counters are shared: the gateway has none of carol's left.
    assert_eq!(admitted(&gw, "carol"), 0);

    // Removed through serve: the gateway decides by the rules again (the
    // rule's counter for vip, never used).
    let gone = json!({"entries": [{"key": "tenant", "value": "vip"}]});
    assert_eq!(
        send(&serve.base, Method::DELETE, Some(&gone)).1["removed"],
        true
    );
    until_listed(&gw_admin, |page| page["count"] == 1);
    assert_eq!(admitted(&gw, "vip"), 2);
}

#[test]
fn on_the_memory_store_the_admin_port_manages_the_gateways_own_overrides() {
    let (_runtime, upstream) = upstream();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("api.yaml");
    support::write(&rules, RULES);
    let gw = Gateway::start(&[
        "--upstream",
        upstream.as_str(),
        "--rules",
        rules.to_str().unwrap(),
        "--admin",
        "127.0.0.1:0",
        "--admin-token",
        TOKEN,
    ]);
    let gw_admin = admin_base(&gw);
    let url = format!("{gw_admin}/v1/overrides/api");
    // Behind the token, as on serve.
    let refused = client().put(&url).json(&override_of("vip", 3)).send();
    assert_eq!(refused.unwrap().status(), 401);
    assert_eq!(admitted(&gw, "vip"), 2);

    let (status, answer) = send(&gw_admin, Method::PUT, Some(&override_of("ann", 3)));
    assert_eq!(status, 201, "{answer}");
    assert_eq!(admitted(&gw, "ann"), 3);
    // A bad limit is a clear 400 and changes nothing.
    let bad = json!({"entries": [{"key": "tenant", "value": "ann"}], "rate_limit": {"unit": "fortnight", "requests_per_unit": 1}});
    let (status, answer) = send(&gw_admin, Method::PUT, Some(&bad));
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_override", "{answer}");
    let (_, page) = send(&gw_admin, Method::GET, None);
    assert_eq!(page["overrides"][0], override_of("ann", 3), "{page}");
}
