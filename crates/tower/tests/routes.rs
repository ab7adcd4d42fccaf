//! How requests become descriptors through `routes:`: path (exact, prefix,
//! glob), methods, host (exact and wildcard), first match wins, disabled
//! and shadow routes, missing headers, `skip_if_absent`, bounded values.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use support::*;
use tollgate_tower::{RateLimitBody, RateLimitLayer, Settings};
use tower::util::BoxCloneService;
use tower::{service_fn, Layer, ServiceExt};

const EDGE: &str = r#"
domain: edge
routes:
  - name: login
    match: {path: /login, methods: [POST]}
    descriptors: [[{generic_key: {descriptor_value: login}}, remote_address]]
  - name: orders
    match: {path_glob: "/users/*/orders/**"}
    descriptors: [[{generic_key: {descriptor_value: orders}}, path]]
  - name: tenants
    match: {host: "*.example.com", path_prefix: /api/}
    descriptors: [[host]]
  - name: api
    match: {host: api.example.org, path_prefix: /api/}
    descriptors:
      - [api_key]
      - [{request_headers: {header_name: x-tenant, descriptor_key: tenant, skip_if_absent: true}}, method]
      - [{request_headers: {header_name: x-plan, descriptor_key: plan}}]
  - name: static
    match: {path_prefix: /static/}
    enabled: false
  - name: beta
    match: {path_prefix: /beta/}
    shadow: true
    descriptors: [[remote_address]]
descriptors:
  - key: generic_key
    value: login
    descriptors:
      - key: remote_address
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: generic_key
    value: orders
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: host
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tenant
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: method
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: plan
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
"#;

type Edge = BoxCloneService<Request<Full<Bytes>>, Response<RateLimitBody<Full<Bytes>>>, Infallible>;

fn edge(recorder: &Recorder, settings: Settings) -> Edge {
    let service = RateLimitLayer::from_rules(store(), rules(EDGE), "edge")
        .with_settings(settings)
        .with_observer(recorder.clone())
        .layer(service_fn(ok));
    BoxCloneService::new(service)
}

/// Sends `method uri` with `headers` from 192.0.2.1 and returns what the
/// observer heard (`None`: no check) and the status.
async fn send(
    service: &Edge,
    recorder: &Recorder,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
) -> (Option<Heard>, u16) {
    let mut r = request("192.0.2.1:1000", uri);
    *r.method_mut() = method.parse().unwrap();
    for (name, value) in headers {
        r.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    let status = service.clone().oneshot(r).await.unwrap().status().as_u16();
    let mut heard = recorder.take();
    assert!(heard.len() <= 1);
    (heard.pop(), status)
}

fn rules_of(heard: &Heard) -> Vec<&str> {
    heard
        .rules
        .iter()
        .map(|r| r.as_deref().unwrap_or("-"))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn paths_methods_and_hosts_pick_the_first_matching_route() {
    let recorder = Recorder::default();
    let s = edge(&recorder, Settings::default());

    let (heard, _) = send(&s, &recorder, "POST", "/login", &[]).await;
    let heard = heard.unwrap();
    assert_eq!(heard.route.as_deref(), Some("login"));
    assert_eq!(rules_of(&heard), ["edge.generic_key_login.remote_address"]);
    // Exact path, listed methods only.
    assert!(send(&s, &recorder, "GET", "/login", &[]).await.0.is_none());
    assert!(send(&s, &recorder, "POST", "/login/", &[])
        .await
        .0
        .is_none());

    let (heard, _) = send(&s, &recorder, "GET", "/users/42/orders/7?x=1", &[]).await;
    let heard = heard.unwrap();
    assert_eq!(heard.route.as_deref(), Some("orders"));
    // The path is the descriptor value, without its query.
    assert!(
        heard.keys[0].ends_with("18:/users/42/orders/7"),
        "{:?}",
        heard.keys
    );
    assert!(send(&s, &recorder, "GET", "/users/42/7/orders", &[])
        .await
        .0
        .is_none());

    // Wildcard host, from the Host header without its port, lower-cased.
    let (heard, _) = send(
        &s,
        &recorder,
        "GET",
        "/api/x",
        &[("host", "Acme.Example.com:8443")],
    )
    .await;
    let heard = heard.unwrap();
    assert_eq!(heard.route.as_deref(), Some("tenants"));
    assert!(
        heard.keys[0].ends_with("16:acme.example.com"),
        "{:?}",
        heard.keys
    );
    // ... or from an absolute URI's authority.
    let (heard, _) = send(&s, &recorder, "GET", "http://b.example.com/api/x", &[]).await;
    assert_eq!(heard.unwrap().route.as_deref(), Some("tenants"));
    // Not the parent domain itself.
    assert!(
        send(&s, &recorder, "GET", "/api/x", &[("host", "example.com")])
            .await
            .0
            .is_none()
    );
    // An exact host.
    let (heard, _) = send(
        &s,
        &recorder,
        "GET",
        "/api/x",
        &[
            ("host", "API.example.org"),
            ("x-api-key", "k1"),
            ("x-plan", "gold"),
        ],
    )
    .await;
    assert_eq!(heard.unwrap().route.as_deref(), Some("api"));
}

#[tokio::test(start_paused = true)]
async fn missing_values_drop_their_descriptor_unless_skipped() {
    let recorder = Recorder::default();
    let s = edge(&recorder, Settings::default());
    let api = [("host", "api.example.org")];

    // Every header present: three descriptors.
    let all = [
        api[0],
        ("x-api-key", "k1"),
        ("x-tenant", "t1"),
        ("x-plan", "gold"),
    ];
    let (heard, _) = send(&s, &recorder, "GET", "/api/x", &all).await;
    assert_eq!(
        rules_of(&heard.unwrap()),
        ["edge.api_key", "edge.tenant.method", "edge.plan"]
    );

    // No API key: its descriptor is not generated. No tenant: skipped, so
    // that descriptor is just [method]. No plan: not generated.
    let (heard, _) = send(&s, &recorder, "GET", "/api/x", &api).await;
    let heard = heard.unwrap();
    assert_eq!(rules_of(&heard), ["edge.method"]);
    assert!(heard.keys[0].ends_with("3:GET"), "{:?}", heard.keys);

    // A header that is not text counts as missing.
    let mut r = request("192.0.2.1:1000", "/api/x");
    r.headers_mut()
        .insert("host", "api.example.org".parse().unwrap());
    r.headers_mut().insert(
        "x-api-key",
        http::HeaderValue::from_bytes(b"\xffkey").unwrap(),
    );
    s.clone().oneshot(r).await.unwrap();
    assert_eq!(rules_of(&recorder.take()[0]), ["edge.method"]);
}

#[tokio::test(start_paused = true)]
async fn too_long_values_are_cut_to_the_cap() {
    let recorder = Recorder::default();
    let settings = Settings {
        max_value_bytes: 8,
        ..Settings::default()
    };
    let s = edge(&recorder, settings);
    let long = "k".repeat(10_000);
    let (heard, _) = send(
        &s,
        &recorder,
        "GET",
        "/api/x",
        &[("host", "api.example.org"), ("x-api-key", &long)],
    )
    .await;
    let heard = heard.unwrap();
    assert!(heard.keys[0].ends_with("8:kkkkkkkk"), "{:?}", heard.keys);
    assert!(heard.keys[0].len() < 100);
}

#[tokio::test(start_paused = true)]
async fn disabled_routes_and_unmatched_requests_go_unchecked() {
    let recorder = Recorder::default();
    let s = edge(&recorder, Settings::default());
    for uri in ["/static/app.js", "/nothing/matches"] {
        let (heard, status) = send(&s, &recorder, "GET", uri, &[]).await;
        assert!(heard.is_none(), "{uri}");
        assert_eq!(status, 200);
    }
    let response = s
        .clone()
        .oneshot(request("192.0.2.1:1000", "/static/x"))
        .await
        .unwrap();
    assert!(response.headers().get("ratelimit").is_none());
}

#[tokio::test(start_paused = true)]
async fn shadow_routes_decide_and_report_but_never_reject() {
    let recorder = Recorder::default();
    let s = edge(&recorder, Settings::default());
    let mut shadow_rejected = Vec::new();
    for _ in 0..3 {
        let mut r = request("192.0.2.1:1000", "/beta/x");
        r.headers_mut()
            .insert("host", "beta.example.net".parse().unwrap());
        let response = s.clone().oneshot(r).await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers().get("ratelimit").is_none());
        shadow_rejected.push(recorder.take()[0].shadow_rejected);
    }
    assert_eq!(shadow_rejected, [false, true, true]);
}

#[tokio::test(start_paused = true)]
async fn without_routes_every_request_is_keyed_by_client_ip() {
    let yaml = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let service = RateLimitLayer::from_rules(store(), rules(yaml), "edge").layer(service_fn(ok));
    for (uri, peer, status) in [
        ("/a", "192.0.2.1:1", 200),
        ("/b", "192.0.2.1:2", 429),
        ("/a", "192.0.2.2:1", 200),
    ] {
        let response = service.clone().oneshot(request(peer, uri)).await.unwrap();
        assert_eq!(response.status(), status, "{uri} from {peer}");
    }
    // A request without a known peer makes no descriptor: unchecked.
    let anonymous = Request::new(Full::<Bytes>::default());
    assert_eq!(status_of(&service, anonymous).await, 200);
}

#[tokio::test(start_paused = true)]
async fn an_unknown_domain_checks_nothing_and_a_reload_takes_effect() {
    let handle = std::sync::Arc::new(arc_swap::ArcSwap::from_pointee(rules("domain: other\n")));
    let service = RateLimitLayer::new(store(), handle.clone(), "edge").layer(service_fn(ok));
    for _ in 0..3 {
        assert_eq!(status_of(&service, request("192.0.2.1:1", "/")).await, 200);
    }
    let yaml = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    handle.store(std::sync::Arc::new(rules(yaml)));
    assert_eq!(status_of(&service, request("192.0.2.1:1", "/")).await, 200);
    assert_eq!(status_of(&service, request("192.0.2.1:1", "/")).await, 429);
}

const KEYED: &str = r#"
domain: keyed
routes:
  - name: strict
    match: {path_prefix: /strict/}
    on_missing: deny
    descriptors: [[api_key], [remote_address]]
  - name: custom
    match: {path_prefix: /custom/}
    on_missing: deny
    on_missing_status: 401
    descriptors: [[api_key]]
  - name: shadowed
    match: {path_prefix: /shadowed/}
    on_missing: deny
    shadow: true
    descriptors: [[api_key]]
  - name: lenient
    descriptors: [[api_key]]
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 100}
"#;

/// Sends `GET uri` from 192.0.2.1 with `headers` through `service`; the
/// status, the body, and whether the inner service was called.
async fn call_keyed(
    service: &Edge,
    uri: &str,
    headers: &[(&str, &str)],
) -> (u16, String, Option<String>) {
    let mut r = request("192.0.2.1:1000", uri);
    for (name, value) in headers {
        r.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    let response = service.clone().oneshot(r).await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, text(response.into_body()).await, content_type)
}

#[tokio::test(start_paused = true)]
async fn on_missing_deny_refuses_a_request_without_its_key_and_allow_forwards_it() {
    let recorder = Recorder::default();
    let service = RateLimitLayer::from_rules(store(), rules(KEYED), "keyed")
        .with_observer(recorder.clone())
        .layer(service_fn(ok));
    let s: Edge = BoxCloneService::new(service);

    // No API key on a `deny` route: 429 with a problem body, nothing
    // checked (the observer hears no decision), nothing forwarded.
    let (status, body, content_type) = call_keyed(&s, "/strict/x", &[]).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(content_type.as_deref(), Some("application/problem+json"));
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["policy"], "strict");
    assert!(recorder.take().is_empty());
    // With the key, the route decides as usual: 1 a minute.
    let key = [("x-api-key", "k1")];
    assert_eq!(call_keyed(&s, "/strict/x", &key).await.0, 200);
    assert_eq!(call_keyed(&s, "/strict/x", &key).await.0, 429);
    assert_eq!(recorder.take().len(), 2);

    // A configured status.
    let (status, body, _) = call_keyed(&s, "/custom/x", &[]).await;
    assert_eq!(status, 401, "{body}");
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["title"], "Unauthorized");

    // In shadow mode nothing is refused: forwarded unchecked.
    assert_eq!(call_keyed(&s, "/shadowed/x", &[]).await.0, 200);
    assert!(recorder.take().is_empty());

    // The default, `allow`: forwarded unchecked, over and over.
    for _ in 0..3 {
        let (status, body, _) = call_keyed(&s, "/lenient/x", &[]).await;
        assert_eq!(status, 200, "{body}");
    }
    assert!(recorder.take().is_empty());
}
