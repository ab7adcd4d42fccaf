//! Reserve, then settle, through the HTTP API: `POST /v1/check` with
//! `"settle": true` hands out a ticket, `POST /v1/settle` charges or
//! refunds the difference once, tickets expire and the table is bounded,
//! and bad input is a clear error that changes nothing. Time is the memory
//! store's manual clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tollgate_core::time::{Clock, ManualClock, NANOS_PER_SEC};
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_rules::RuleSet;
use tollgate_server::{router, App, Settings};
use tollgate_testkit::DownStore;
use tower::ServiceExt;

const RULES: &str = "\
domain: llm
descriptors:
  - key: tenant
    rate_limits:
      - {unit: minute, requests_per_unit: 100, name: tenant}
      - {unit: hour, requests_per_unit: 1000, algorithm: token_bucket, name: tenant}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: leased
    rate_limits:
      - {unit: second, requests_per_unit: 2, algorithm: concurrency}
      - {unit: minute, requests_per_unit: 10}
";

/// 1,200 s after the epoch: the start of a minute.
const T0_NS: u64 = 1_200 * NANOS_PER_SEC;

struct Harness {
    app: App<LocalStore>,
    clock: Arc<ManualClock>,
}

fn harness_with(settings: Settings) -> Harness {
    let clock = Arc::new(ManualClock::new(T0_NS));
    let shared: Arc<dyn Clock> = clock.clone();
    let store = LocalStore::new(MemoryStore::new(MemoryConfig::default()), shared);
    let rules = RuleSet::from_yaml(RULES, "rules.yaml").unwrap();
    Harness {
        app: App::new(store, rules, None, settings),
        clock,
    }
}

fn harness() -> Harness {
    harness_with(Settings::default())
}

struct Reply {
    status: StatusCode,
    body: Value,
    retry_after: Option<String>,
}

impl Harness {
    async fn post(&self, path: &str, body: &Value) -> Reply {
        self.post_raw(path, body.to_string()).await
    }

    async fn post_raw(&self, path: &str, body: String) -> Reply {
        let request = Request::builder()
            .method("POST")
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let response = router(self.app.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            body,
            retry_after,
        }
    }

    fn advance(&self, secs: u64) {
        self.clock.advance(Duration::from_secs(secs));
    }

    /// A check with `"settle": true`; the ticket when one came.
    async fn reserve(&self, target: &Value, estimate: u64) -> (Reply, Option<String>) {
        let mut body = target.clone();
        body["cost"] = json!(estimate);
        body["settle"] = json!(true);
        let reply = self.post("/v1/check", &body).await;
        let ticket = reply.body["ticket"].as_str().map(ToOwned::to_owned);
        (reply, ticket)
    }

    async fn settle(&self, ticket: &str, cost: u64) -> Reply {
        self.post("/v1/settle", &json!({"ticket": ticket, "cost": cost}))
            .await
    }

    /// What a peek reports `remaining`.
    async fn remaining(&self, target: &Value) -> u64 {
        let mut body = target.clone();
        body["cost"] = json!(0);
        let reply = self.post("/v1/check", &body).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        reply.body["remaining"].as_u64().unwrap()
    }
}

fn inline(algorithm: &str, rate: &str) -> Value {
    json!({"key": "tenant-7", "limit": {"algorithm": algorithm, "rate": rate}})
}

fn rules(entries: &[(&str, &str)]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(k, v)| json!({"key": k, "value": v}))
        .collect();
    json!({"domain": "llm", "descriptors": [{"entries": entries}]})
}

#[tokio::test]
async fn an_admitted_check_carries_a_ticket_and_a_refund_gives_the_difference_back() {
    let h = harness();
    let target = inline("fixed_window", "100/min");
    let (reply, ticket) = h.reserve(&target, 80).await;
    assert_eq!(reply.status, StatusCode::OK);
    let ticket = ticket.expect("a ticket");
    assert_eq!(ticket.len(), 32);
    assert!(ticket.bytes().all(|b| b.is_ascii_hexdigit()), "{ticket}");
    assert_eq!(h.remaining(&target).await, 20);
    // A plain check carries no ticket.
    let plain = h.post("/v1/check", &target).await;
    assert!(plain.body.get("ticket").is_none(), "{}", plain.body);

    h.advance(5);
    let settled = h.settle(&ticket, 30).await;
    assert_eq!(settled.status, StatusCode::OK, "{}", settled.body);
    assert_eq!(
        settled.body,
        json!({"estimate": 80, "cost": 30, "settled": [
            {"name": "fixed_window_100_per_m", "outcome": "refunded"}
        ]})
    );
    // 80 counted, 1 plain, 50 back.
    assert_eq!(h.remaining(&target).await, 69);
}

#[tokio::test]
async fn two_tickets_are_never_the_same() {
    let h = harness();
    let target = inline("fixed_window", "100/min");
    let (_, first) = h.reserve(&target, 1).await;
    let (_, second) = h.reserve(&target, 1).await;
    assert_ne!(first.unwrap(), second.unwrap());
}

#[tokio::test]
async fn a_charge_can_put_the_key_in_debt_and_retry_after_says_when_it_is_paid() {
    let h = harness();
    // 1 token a second, 10 at most.
    let target = inline("token_bucket", "10/10s");
    let (_, ticket) = h.reserve(&target, 5).await;
    let settled = h.settle(&ticket.unwrap(), 25).await;
    assert_eq!(settled.body["settled"][0]["outcome"], "charged");
    // 25 taken from a full bucket of 10: 15 owed, then one more to admit.
    let refused = h.post("/v1/check", &target).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.body["retry_after_ms"], 16_000);
    assert_eq!(refused.retry_after.as_deref(), Some("16"));
    h.advance(15);
    assert_eq!(
        h.post("/v1/check", &target).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    h.advance(1);
    assert_eq!(h.post("/v1/check", &target).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_ticket_settles_once_and_a_second_settle_changes_nothing() {
    let h = harness();
    let target = inline("sliding_window_log", "10/min");
    let (_, ticket) = h.reserve(&target, 8).await;
    let ticket = ticket.unwrap();
    assert_eq!(h.settle(&ticket, 2).await.status, StatusCode::OK);
    assert_eq!(h.remaining(&target).await, 8);
    for cost in [2, 0, 9] {
        let again = h.settle(&ticket, cost).await;
        assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
        assert_eq!(again.body["error"]["code"], "ticket_settled");
        assert_eq!(h.remaining(&target).await, 8);
    }
}

#[tokio::test]
async fn an_unknown_or_expired_ticket_is_404_and_its_estimate_stands() {
    let h = harness_with(Settings {
        ticket_ttl: Duration::from_secs(30),
        ..Settings::default()
    });
    let unknown = h.settle(&"0".repeat(32), 1).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.body["error"]["code"], "unknown_ticket");

    let target = inline("fixed_window", "100/h");
    let (_, ticket) = h.reserve(&target, 40).await;
    let ticket = ticket.unwrap();
    h.advance(29);
    let (_, alive) = h.reserve(&target, 1).await;
    h.advance(1);
    let expired = h.settle(&ticket, 0).await;
    assert_eq!(expired.status, StatusCode::NOT_FOUND, "{}", expired.body);
    assert_eq!(expired.body["error"]["code"], "unknown_ticket");
    assert!(
        expired.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{}",
        expired.body
    );
    assert_eq!(h.remaining(&target).await, 59);
    // The one issued a second later is still alive.
    assert_eq!(h.settle(&alive.unwrap(), 0).await.status, StatusCode::OK);
    assert_eq!(h.remaining(&target).await, 60);
}

#[tokio::test]
async fn a_full_table_refuses_settle_checks_without_counting_them() {
    let h = harness_with(Settings {
        ticket_capacity: 2,
        ticket_ttl: Duration::from_secs(60),
        ..Settings::default()
    });
    let target = inline("fixed_window", "100/h");
    let (_, first) = h.reserve(&target, 1).await;
    h.advance(10);
    let (_, second) = h.reserve(&target, 1).await;
    assert!(first.is_some() && second.is_some());
    let (full, ticket) = h.reserve(&target, 1).await;
    assert_eq!(
        full.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        full.body
    );
    assert_eq!(full.body["error"]["code"], "tickets_full");
    assert!(ticket.is_none());
    assert_eq!(h.remaining(&target).await, 98);
    // A settled ticket keeps its place until it expires ...
    assert_eq!(h.settle(&second.unwrap(), 1).await.status, StatusCode::OK);
    assert_eq!(
        h.reserve(&target, 1).await.0.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    // ... and checks without settle go on as ever.
    assert_eq!(h.post("/v1/check", &target).await.status, StatusCode::OK);
    // The first expires at 60 s.
    h.advance(50);
    let (again, ticket) = h.reserve(&target, 1).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert!(ticket.is_some());
}

#[tokio::test]
async fn a_rejected_check_carries_no_ticket() {
    let h = harness();
    let target = inline("fixed_window", "10/min");
    let (_, ticket) = h.reserve(&target, 9).await;
    assert!(ticket.is_some());
    let (refused, ticket) = h.reserve(&target, 2).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(ticket.is_none(), "{}", refused.body);
}

#[tokio::test]
async fn a_rules_ticket_settles_every_limit_the_check_counted() {
    let h = harness();
    let tenant = rules(&[("tenant", "acme")]);
    let (reply, ticket) = h.reserve(&tenant, 60).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    h.advance(1);
    let settled = h.settle(&ticket.unwrap(), 90).await;
    assert_eq!(settled.status, StatusCode::OK, "{}", settled.body);
    let outcomes: Vec<&str> = settled.body["settled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["charged", "charged"]);
    // 90 counted in both: the minute's 100 leaves 10.
    assert_eq!(h.remaining(&tenant).await, 10);
    let mut eleven = tenant.clone();
    eleven["cost"] = json!(11);
    let refused = h.post("/v1/check", &eleven).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_rules_ticket_leaves_out_leases_and_rules_that_did_not_count() {
    let h = harness();
    // A concurrency limit beside a window: only the window is settled.
    let (_, ticket) = h.reserve(&rules(&[("leased", "l")]), 2).await;
    let settled = h.settle(&ticket.unwrap(), 1).await;
    assert_eq!(settled.body["settled"].as_array().unwrap().len(), 1);
    assert_eq!(settled.body["settled"][0]["outcome"], "refunded");
    // A shadow rule that refused counted nothing: no ticket.
    let shadowed = rules(&[("shadowed", "s")]);
    let (_, ticket) = h.reserve(&shadowed, 10).await;
    assert!(ticket.is_some());
    let (reply, ticket) = h.reserve(&shadowed, 1).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["shadow_rejected"], true);
    assert!(ticket.is_none(), "{}", reply.body);
    // No rule applies: nothing to settle, no ticket.
    let (reply, ticket) = h.reserve(&rules(&[("nobody", "x")]), 3).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(ticket.is_none());
}

#[tokio::test]
async fn a_refund_after_the_window_moved_is_dropped_and_a_charge_lands_in_the_current_one() {
    let h = harness();
    let target = inline("fixed_window", "10/min");
    let (_, refund) = h.reserve(&target, 6).await;
    let (_, charge) = h.reserve(&target, 1).await;
    h.advance(60);
    let dropped = h.settle(&refund.unwrap(), 1).await;
    assert_eq!(dropped.body["settled"][0]["outcome"], "refund_dropped");
    assert_eq!(h.remaining(&target).await, 10);
    let charged = h.settle(&charge.unwrap(), 4).await;
    assert_eq!(charged.body["settled"][0]["outcome"], "charged");
    assert_eq!(h.remaining(&target).await, 7);
}

#[tokio::test]
async fn bad_input_is_a_clear_400_and_changes_nothing() {
    let h = harness();
    let target = inline("fixed_window", "100/min");
    let (_, ticket) = h.reserve(&target, 50).await;
    let ticket = ticket.unwrap();
    let cases = [
        (
            json!({"ticket": ticket, "cost": -1}).to_string(),
            "malformed_json",
        ),
        (
            json!({"ticket": ticket, "cost": 1.5}).to_string(),
            "malformed_json",
        ),
        (
            json!({"ticket": ticket, "cost": "3"}).to_string(),
            "malformed_json",
        ),
        (json!({"ticket": ticket}).to_string(), "malformed_json"),
        (
            json!({"ticket": ticket, "cost": 1, "extra": 1}).to_string(),
            "malformed_json",
        ),
        (
            format!(r#"{{"ticket": "{ticket}", "cost": 18446744073709551616}}"#),
            "malformed_json",
        ),
        (
            json!({"ticket": ticket, "cost": 1u64 << 53}).to_string(),
            "cost_too_large",
        ),
        (
            json!({"ticket": "abc", "cost": 1}).to_string(),
            "invalid_ticket",
        ),
        (
            json!({"ticket": format!("{ticket}0"), "cost": 1}).to_string(),
            "invalid_ticket",
        ),
        (
            json!({"ticket": "g".repeat(32), "cost": 1}).to_string(),
            "invalid_ticket",
        ),
        (
            json!({"ticket": 5, "cost": 1}).to_string(),
            "malformed_json",
        ),
        ("{\"ticket\": ".to_owned(), "malformed_json"),
    ];
    for (body, code) in cases {
        let reply = h.post_raw("/v1/settle", body.clone()).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{body}: {}",
            reply.body
        );
        assert_eq!(reply.body["error"]["code"], code, "{body}: {}", reply.body);
        assert_eq!(h.remaining(&target).await, 50, "{body}");
    }
    // The ticket is still open.
    assert_eq!(
        h.settle(&ticket, 50).await.body["settled"][0]["outcome"],
        "exact"
    );
}

#[tokio::test]
async fn checks_that_cannot_be_settled_are_refused_before_counting() {
    let h = harness();
    let window = inline("fixed_window", "10/min");
    let (peek, _) = h.reserve(&window, 0).await;
    assert_eq!(peek.status, StatusCode::BAD_REQUEST);
    assert_eq!(peek.body["error"]["code"], "invalid_request");
    let lease = inline("concurrency", "2/s");
    let (refused, _) = h.reserve(&lease, 1).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    assert_eq!(h.remaining(&lease).await, 2);
    // `settle` belongs to /v1/check alone.
    for path in ["/v1/reserve", "/v1/release"] {
        let mut body = window.clone();
        body["settle"] = json!(true);
        body["lease"] = json!(1);
        if path == "/v1/reserve" {
            body.as_object_mut().unwrap().remove("lease");
        }
        let reply = h.post(path, &body).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(reply.body["error"]["code"], "invalid_request", "{path}");
    }
    assert_eq!(h.remaining(&window).await, 10);
    // An over-capacity estimate is the usual cost_too_large.
    let (large, _) = h.reserve(&window, 11).await;
    assert_eq!(large.body["error"]["code"], "cost_too_large");
    assert!(h.app.tickets().is_empty());
}

#[tokio::test]
async fn a_store_that_cannot_settle_refuses_settle_checks_with_501() {
    let app = App::new(
        DownStore::new("down"),
        RuleSet::default(),
        None,
        Settings::default(),
    );
    let mut body = inline("fixed_window", "10/min");
    body["settle"] = json!(true);
    let request = Request::builder()
        .method("POST")
        .uri("/v1/check")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = router(app).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_IMPLEMENTED);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["error"]["code"], "unsupported");
    assert_eq!(
        body["error"]["message"],
        "this store does not support settle"
    );
}

#[tokio::test]
async fn trusted_client_time_decides_the_admission_and_the_expiry() {
    let h = harness_with(Settings {
        trust_client_time: true,
        ticket_ttl: Duration::from_secs(10),
        ..Settings::default()
    });
    let mut target = inline("fixed_window", "10/min");
    target["at_ms"] = json!(5_000_000);
    let (_, first) = h.reserve(&target, 4).await;
    let (_, second) = h.reserve(&target, 4).await;
    let late = h
        .post(
            "/v1/settle",
            &json!({"ticket": first.unwrap(), "cost": 1, "at_ms": 5_010_000}),
        )
        .await;
    assert_eq!(late.status, StatusCode::NOT_FOUND);
    let in_time = h
        .post(
            "/v1/settle",
            &json!({"ticket": second.unwrap(), "cost": 1, "at_ms": 5_009_999}),
        )
        .await;
    assert_eq!(in_time.status, StatusCode::OK, "{}", in_time.body);
    assert_eq!(in_time.body["settled"][0]["outcome"], "refunded");
}
