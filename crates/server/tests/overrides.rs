//! Runtime overrides through the HTTP API: `PUT`, `GET` and
//! `DELETE /v1/overrides/{domain}`, their precedence over the rules on
//! every decision route, bad input, and the admin token.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tollgate_core::time::{Clock, ManualClock};
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_rules::RuleSet;
use tollgate_server::{router, App, Settings};
use tower::ServiceExt;

const RULES: &str = "\
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 3}
";

/// 1,000 s after the epoch.
const T0_NS: u64 = 1_000_000_000_000;

fn app_with(settings: Settings) -> App<LocalStore> {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0_NS));
    let store = LocalStore::new(MemoryStore::new(MemoryConfig::default()), clock);
    let rules = RuleSet::from_yaml(RULES, "rules.yaml").unwrap();
    App::new(store, rules, None, settings)
}

fn app() -> App<LocalStore> {
    app_with(Settings::default())
}

async fn call(app: &App<LocalStore>, request: Request<Body>) -> (StatusCode, Value) {
    let response = router(app.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, body)
}

fn with_body(method: &str, path: &str, body: &Value) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn entries(pairs: &[(&str, &str)]) -> Value {
    pairs
        .iter()
        .map(|(k, v)| json!({"key": k, "value": v}))
        .collect()
}

fn put_body(pairs: &[(&str, &str)], per_minute: u64) -> Value {
    json!({"entries": entries(pairs), "rate_limit": {"unit": "minute", "requests_per_unit": per_minute}})
}

async fn put(app: &App<LocalStore>, pairs: &[(&str, &str)], per_minute: u64) -> StatusCode {
    let (status, body) = call(
        app,
        with_body("PUT", "/v1/overrides/api", &put_body(pairs, per_minute)),
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    status
}

/// How many checks of `pairs` pass before the first refusal (at most 20).
async fn admitted(app: &App<LocalStore>, pairs: &[(&str, &str)]) -> u64 {
    let request = json!({"domain": "api", "descriptors": [{"entries": entries(pairs)}]});
    for n in 0..20 {
        let (status, body) = call(app, with_body("POST", "/v1/check", &request)).await;
        match status {
            StatusCode::OK => {}
            StatusCode::TOO_MANY_REQUESTS => return n,
            other => panic!("{other} {body}"),
        }
    }
    20
}

/// The same through envoyproxy/ratelimit's `/json` route.
async fn admitted_json(app: &App<LocalStore>, pairs: &[(&str, &str)]) -> u64 {
    let request = json!({"domain": "api", "descriptors": [{"entries": entries(pairs)}]});
    for n in 0..20 {
        let (status, body) = call(app, with_body("POST", "/json", &request)).await;
        match status {
            StatusCode::OK => {}
            StatusCode::TOO_MANY_REQUESTS => return n,
            other => panic!("{other} {body}"),
        }
    }
    20
}

async fn list(app: &App<LocalStore>, query: &str) -> (StatusCode, Value) {
    call(
        app,
        Request::get(format!("/v1/overrides/api{query}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn an_override_beats_the_rule_for_its_exact_descriptor_only() {
    let app = app();
    assert_eq!(put(&app, &[("user", "vip")], 5).await, StatusCode::CREATED);
    assert_eq!(
        put(&app, &[("tenant", "acme"), ("user", "vip")], 7).await,
        StatusCode::CREATED
    );
    assert_eq!(admitted(&app, &[("user", "vip")]).await, 5);
    assert_eq!(admitted(&app, &[("user", "bob")]).await, 2);
    // The nested rule for acme's users, and its override for one of them.
    assert_eq!(
        admitted(&app, &[("tenant", "acme"), ("user", "bob")]).await,
        3
    );
    assert_eq!(
        admitted(&app, &[("tenant", "acme"), ("user", "vip")]).await,
        7
    );
    // A descriptor no rule matches gets the override's limit all the same.
    put(&app, &[("region", "eu")], 4).await;
    assert_eq!(admitted(&app, &[("region", "eu")]).await, 4);
    assert_eq!(admitted(&app, &[("region", "us")]).await, 20);

    // envoyproxy/ratelimit's JSON route (and gRPC, which shares its code).
    put(&app, &[("user", "carol")], 6).await;
    assert_eq!(admitted_json(&app, &[("user", "carol")]).await, 6);
    assert_eq!(admitted_json(&app, &[("user", "dave")]).await, 2);

    // The answer names the override's limit; metrics count every override
    // of the domain under one label.
    let request =
        json!({"domain": "api", "descriptors": [{"entries": entries(&[("user", "erin")])}]});
    put(&app, &[("user", "erin")], 9).await;
    let (status, body) = call(&app, with_body("POST", "/v1/check", &request)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["limit"], 9, "{body}");
    assert_eq!(body["statuses"][0]["name"], "api._override_", "{body}");
    let (_, metrics) = call(&app, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    let metrics = metrics.as_str().unwrap();
    assert!(metrics.contains("rule=\"api._override_\""), "{metrics}");
    for key in ["vip", "carol", "erin"] {
        assert!(!metrics.contains(key), "{key} in {metrics}");
    }
}

#[tokio::test]
async fn a_replaced_override_applies_its_new_limit_and_a_removed_one_gives_back_the_rule() {
    let app = app();
    assert_eq!(put(&app, &[("user", "vip")], 5).await, StatusCode::CREATED);
    assert_eq!(put(&app, &[("user", "vip")], 8).await, StatusCode::OK);
    assert_eq!(admitted(&app, &[("user", "vip")]).await, 8);
    let gone = json!({"entries": entries(&[("user", "vip")])});
    let (status, body) = call(&app, with_body("DELETE", "/v1/overrides/api", &gone)).await;
    assert_eq!((status, &body), (StatusCode::OK, &json!({"removed": true})));
    let (status, body) = call(&app, with_body("DELETE", "/v1/overrides/api", &gone)).await;
    assert_eq!(
        (status, &body),
        (StatusCode::OK, &json!({"removed": false}))
    );
    assert_eq!(admitted(&app, &[("user", "vip")]).await, 2);
}

#[tokio::test]
async fn every_algorithm_and_field_of_the_rules_is_accepted() {
    let app = app();
    let body = json!({
        "entries": entries(&[("user", "gold")]),
        "rate_limits": [
            {"unit": "second", "requests_per_unit": 10, "algorithm": "gcra", "burst": 3, "name": "gold"},
            {"window": "5m", "requests_per_unit": 900, "algorithm": "sliding_window_log",
             "ban": {"after": 3, "within": "10m", "for": "1h"}}
        ],
        "quota_mode": false
    });
    let (status, answer) = call(&app, with_body("PUT", "/v1/overrides/api", &body)).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["override"]["rate_limits"], body["rate_limits"]);
    assert_eq!(admitted(&app, &[("user", "gold")]).await, 3);
    for limit in [
        json!({"unit": "minute", "requests_per_unit": 5, "name": "ü\u{feff}\u{2028}😀\"'\\"}),
        json!({"unlimited": true}),
        json!({"unit": "hour", "requests_per_unit": 0}),
        json!({"unit": "minute", "requests_per_unit": 4, "algorithm": "token_bucket", "burst": 6}),
        json!({"window": "4s", "requests_per_unit": 10, "algorithm": "stepped_window", "step": "1s"}),
        json!({"unit": "second", "requests_per_unit": 2, "algorithm": "concurrency", "lease_ttl": "30s"}),
    ] {
        let body = json!({"entries": entries(&[("user", "x")]), "rate_limit": limit});
        let (status, answer) = call(&app, with_body("PUT", "/v1/overrides/api", &body)).await;
        assert!(status.is_success(), "{limit}: {answer}");
    }
    // The last one holds: an unlimited override would admit 20, a
    // concurrency limit of 2 admits 2 (leases are never released here).
    assert_eq!(admitted(&app, &[("user", "x")]).await, 2);
}

#[tokio::test]
async fn bad_input_is_a_clear_400_and_changes_nothing() {
    let app = app_with(Settings {
        max_body_bytes: 4_096,
        ..Settings::default()
    });
    put(&app, &[("user", "vip")], 5).await;
    let good = |field: &str, value: Value| {
        let mut body = put_body(&[("user", "vip")], 50);
        body[field] = value;
        body
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "/v1/overrides/web",
            put_body(&[("user", "vip")], 50),
            "unknown_domain",
        ),
        (
            "/v1/overrides/api",
            good(
                "rate_limit",
                json!({"unit": "fortnight", "requests_per_unit": 5}),
            ),
            "invalid_override",
        ),
        (
            "/v1/overrides/api",
            good(
                "rate_limit",
                json!({"unit": "minute", "requests_per_unit": -5}),
            ),
            "invalid_override",
        ),
        (
            "/v1/overrides/api",
            good(
                "rate_limit",
                json!({"unit": "minute", "requests_per_unit": 1.5}),
            ),
            "invalid_override",
        ),
        (
            "/v1/overrides/api",
            good(
                "rate_limit",
                json!({"unit": "minute", "requests_per_unit": 5, "burst": 9}),
            ),
            "invalid_override",
        ),
        (
            "/v1/overrides/api",
            good("rate_limit", json!({"unit": "minute"})),
            "invalid_override",
        ),
        (
            "/v1/overrides/api",
            good("rate_limit", json!("10/s")),
            "invalid_override",
        ),
        (
            "/v1/overrides/api",
            good(
                "rate_limit",
                json!({"unit": "minute", "requests_per_unit": 5, "name": "a\u{85}b"}),
            ),
            "invalid_override",
        ),
        (
            "/v1/overrides/api",
            good(
                "rate_limit",
                json!({"unit": "minute", "requests_per_unit": 5, "name": "a\tb"}),
            ),
            "invalid_override",
        ),
        (
            "/v1/overrides/api",
            good("rate_limits", json!([])),
            "invalid_override",
        ),
        (
            "/v1/overrides/api",
            json!({"entries": entries(&[("user", "vip")])}),
            "invalid_override",
        ),
        (
            "/v1/overrides/api",
            good("entries", json!([])),
            "invalid_request",
        ),
        (
            "/v1/overrides/api",
            good("entries", entries(&[("", "vip")])),
            "invalid_request",
        ),
        (
            "/v1/overrides/api",
            good("entries", json!([{"key": "user", "value": 7}])),
            "malformed_json",
        ),
        (
            "/v1/overrides/api",
            good("entries", json!("user=vip")),
            "malformed_json",
        ),
        (
            "/v1/overrides/api",
            good("colour", json!("red")),
            "malformed_json",
        ),
        (
            "/v1/overrides/api",
            good("entries", entries(&[("user", &"v".repeat(2_000))])),
            "key_too_long",
        ),
    ];
    for (path, body, code) in cases {
        let (status, answer) = call(&app, with_body("PUT", path, &body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(!message.is_empty());
    }
    let huge = good("entries", entries(&[("user", &"v".repeat(8_000))]));
    let (status, answer) = call(&app, with_body("PUT", "/v1/overrides/api", &huge)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
    assert_eq!(answer["error"]["code"], "body_too_large");
    let (status, answer) = call(
        &app,
        with_body(
            "DELETE",
            "/v1/overrides/web",
            &json!({"entries": entries(&[("user", "vip")])}),
        ),
    )
    .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (StatusCode::BAD_REQUEST, &json!("unknown_domain"))
    );
    for query in [
        "?limit=0",
        "?limit=1001",
        "?limit=x",
        "?cursor=zz",
        "?cursor=3a3a",
        "?colour=red",
    ] {
        let (status, answer) = list(&app, query).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {answer}");
    }

    // Nothing changed: the one override, with its limit.
    let (status, page) = list(&app, "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["count"], 1, "{page}");
    assert_eq!(
        page["overrides"][0]["rate_limit"]["requests_per_unit"], 5,
        "{page}"
    );
    assert_eq!(admitted(&app, &[("user", "vip")]).await, 5);
}

#[tokio::test]
async fn the_listing_pages_in_key_order_with_a_cursor() {
    let app = app();
    for n in 0..7 {
        put(&app, &[("user", &format!("u{n}"))], 10 + n).await;
    }
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = list(&app, &format!("?limit=3&cursor={cursor}")).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        assert_eq!(page["count"], 7);
        for o in page["overrides"].as_array().unwrap() {
            seen.push(o["entries"][0]["value"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(seen, ["u0", "u1", "u2", "u3", "u4", "u5", "u6"]);
    // A listed override is a body PUT takes back.
    let (_, page) = list(&app, "?limit=1").await;
    let first = page["overrides"][0].clone();
    let (status, _) = call(&app, with_body("PUT", "/v1/overrides/api", &first)).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn every_route_needs_the_admin_token() {
    let app = app_with(Settings {
        admin_token: Some("s3cret".into()),
        ..Settings::default()
    });
    let body = put_body(&[("user", "vip")], 5);
    let gone = json!({"entries": entries(&[("user", "vip")])});
    let requests = || {
        vec![
            with_body("PUT", "/v1/overrides/api", &body),
            Request::get("/v1/overrides/api")
                .body(Body::empty())
                .unwrap(),
            with_body("DELETE", "/v1/overrides/api", &gone),
        ]
    };
    for request in requests() {
        let (status, answer) = call(&app, request).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    }
    for mut request in requests() {
        request
            .headers_mut()
            .insert("authorization", "Bearer wrong".parse().unwrap());
        assert_eq!(call(&app, request).await.0, StatusCode::UNAUTHORIZED);
    }
    assert!(app.overrides().is_empty());
    for mut request in requests() {
        request
            .headers_mut()
            .insert("authorization", "Bearer s3cret".parse().unwrap());
        let (status, answer) = call(&app, request).await;
        assert!(status.is_success(), "{answer}");
    }
    // The dashboard's login cookie: the token in hex.
    let mut request = with_body("PUT", "/v1/overrides/api", &body);
    request
        .headers_mut()
        .insert("cookie", "tollgate_admin=733363726574".parse().unwrap());
    assert_eq!(call(&app, request).await.0, StatusCode::CREATED);
}

#[tokio::test]
async fn the_dashboard_counts_and_lists_them() {
    let app = app();
    for n in 0..12 {
        put(&app, &[("user", &format!("u{n:02}"))], 5).await;
    }
    admitted(&app, &[("user", "u00")]).await;
    let (status, body) = call(
        &app,
        Request::get("/v1/dashboard").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let overrides = &body["overrides"];
    assert_eq!(overrides["count"], 12, "{overrides}");
    assert_eq!(overrides["domains"][0]["domain"], "api");
    assert_eq!(overrides["domains"][0]["count"], 12);
    assert_eq!(
        overrides["domains"][0]["first"].as_array().unwrap().len(),
        10
    );
    let rules = body["rules"].as_array().unwrap();
    let row = rules
        .iter()
        .find(|r| r["rule"] == "api._override_")
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(row["counts"]["allowed"], 5, "{row}");
    assert_eq!(row["counts"]["rejected"], 1, "{row}");
}

/// The metric series the exposition has (each sample's name and labels,
/// without its value).
async fn series(app: &App<LocalStore>) -> std::collections::BTreeSet<String> {
    let (_, metrics) = call(app, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    metrics
        .as_str()
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series.to_owned()))
        .collect()
}

#[tokio::test]
async fn metrics_make_the_same_series_for_ten_overrides_as_for_five_hundred() {
    let app = app();
    // Each override with its own limit, its own limit name and its own
    // shadow switch, checked until refused: nothing of an override makes a
    // label of its own.
    let mut after_ten = None;
    for n in 0..500u64 {
        let user = format!("user-{n}");
        let body = json!({
            "entries": entries(&[("user", &user)]),
            "rate_limit": {"unit": "minute", "requests_per_unit": 1 + n % 7, "name": format!("tier-{n}")},
            "shadow_mode": n % 2 == 0,
        });
        let (status, answer) = call(&app, with_body("PUT", "/v1/overrides/api", &body)).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let request =
            json!({"domain": "api", "descriptors": [{"entries": entries(&[("user", &user)])}]});
        for _ in 0..(2 + n % 7) {
            call(&app, with_body("POST", "/v1/check", &request)).await;
        }
        if n == 9 {
            after_ten = Some(series(&app).await);
        }
    }
    let after_ten = after_ten.unwrap();
    let rules: std::collections::BTreeSet<&str> = after_ten
        .iter()
        .filter_map(|s| s.split("rule=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(rules, ["api._override_"].into(), "{after_ten:#?}");
    assert_eq!(series(&app).await, after_ten);
    // The fields that put request values in labels are not an override's.
    let limit = json!({"unit": "minute", "requests_per_unit": 1});
    let mut in_limit = limit.clone();
    in_limit["value_to_metric"] = json!(true);
    for body in [
        json!({"entries": entries(&[("user", "x")]), "rate_limit": limit, "detailed_metric": true}),
        json!({"entries": entries(&[("user", "x")]), "rate_limit": in_limit}),
    ] {
        let (status, answer) = call(&app, with_body("PUT", "/v1/overrides/api", &body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
    }
}
