//! Shadow mode (per rule and global) and the `/metrics` exposition of the
//! real `tollgate serve`, after known traffic at fixed `at_ms` instants.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use serde_json::{json, Value};
use support::{write, Server};

/// A minute-window start, so fixed windows count from zero here.
const T: u64 = 1_699_920_000_000;

const RULES: &str = "domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: tenant
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: beta
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
";

/// Starts a server on [`RULES`] (written into `dir`), trusting `at_ms`.
fn serve(dir: &Path, extra: &[&str]) -> Server {
    let file = dir.join("rules.yaml");
    write(&file, RULES);
    let mut args = vec!["--trust-client-time", "--rules", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// `/v1/check` of one descriptor `(key, value)` in domain `api` at `T`.
fn check(server: &Server, key: &str, value: &str) -> (u16, Value) {
    server.call(
        "/v1/check",
        &json!({
            "domain": "api",
            "descriptors": [{"entries": [{"key": key, "value": value}]}],
            "at_ms": T,
        }),
    )
}

/// `/v1/check` of the inline limit 2 per minute on key `k` at `T`.
fn check_inline(server: &Server) -> (u16, Value) {
    server.call(
        "/v1/check",
        &json!({
            "key": "k",
            "limit": {"algorithm": "fixed_window", "rate": "2/minute"},
            "at_ms": T,
        }),
    )
}

/// `name{domain="api",rule="RULE"}`.
fn rule_metric(server: &Server, name: &str, rule: &str) -> f64 {
    server.metric(&format!(
        r#"tollgate_{name}_total{{domain="api",rule="{rule}"}}"#
    ))
}

#[test]
fn a_shadow_mode_rule_reports_its_rejection_but_admits() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &[]);
    for _ in 0..2 {
        assert_eq!(check(&server, "beta", "x").0, 200);
    }

    let response = server.post(
        "/v1/check",
        &json!({
            "domain": "api",
            "descriptors": [{"entries": [{"key": "beta", "value": "x"}]}],
            "at_ms": T,
        }),
    );
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers().get("retry-after").is_none());
    let body: Value = response.json().unwrap();
    assert_eq!(body["allowed"], true, "{body}");
    assert_eq!(body["shadow_rejected"], true, "{body}");
    let status = &body["statuses"][0];
    assert_eq!(status["shadow"], true, "{body}");
    assert_eq!(status["allowed"], false, "{body}");
    assert_eq!(status["remaining"], 0, "{body}");

    assert_eq!(rule_metric(&server, "shadow_rejected", "api.beta"), 1.0);
    assert_eq!(rule_metric(&server, "rejected", "api.beta"), 0.0);
    assert_eq!(rule_metric(&server, "allowed", "api.beta"), 2.0);
    assert_eq!(rule_metric(&server, "requests", "api.beta"), 3.0);
}

#[test]
fn global_shadow_admits_over_an_ordinary_rule() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &["--shadow"]);
    for _ in 0..3 {
        assert_eq!(check(&server, "tenant", "acme").0, 200);
    }

    let (status, body) = check(&server, "tenant", "acme");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["allowed"], true, "{body}");
    assert_eq!(body["shadow_rejected"], true, "{body}");
    assert_eq!(body["retry_after_ms"], 0, "{body}");
    assert_eq!(body["statuses"][0]["allowed"], false, "{body}");

    assert_eq!(
        rule_metric(&server, "shadow_rejected", "api.tenant_acme"),
        1.0
    );
    assert_eq!(rule_metric(&server, "rejected", "api.tenant_acme"), 0.0);
    assert_eq!(rule_metric(&server, "requests", "api.tenant_acme"), 4.0);
}

#[test]
fn global_shadow_marks_the_rejecting_status_as_shadow() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &["--shadow"]);
    for _ in 0..10 {
        assert_eq!(check(&server, "user", "42").0, 200);
    }
    let (status, body) = check(&server, "user", "42");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["statuses"][0]["allowed"], false, "{body}");
    assert_eq!(body["statuses"][0]["shadow"], true, "{body}");
}

#[test]
fn global_shadow_admits_over_an_inline_limit() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &["--shadow"]);
    for _ in 0..2 {
        assert_eq!(check_inline(&server).0, 200);
    }

    let response = server.post(
        "/v1/check",
        &json!({
            "key": "k",
            "limit": {"algorithm": "fixed_window", "rate": "2/minute"},
            "at_ms": T,
        }),
    );
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers().get("retry-after").is_none());
    let body: Value = response.json().unwrap();
    assert_eq!(body["allowed"], true, "{body}");
    assert_eq!(body["shadow_rejected"], true, "{body}");
    assert_eq!(body["remaining"], 0, "{body}");

    let inline = |name: &str| {
        server.metric(&format!(
            r#"tollgate_{name}_total{{domain="",rule="inline"}}"#
        ))
    };
    assert_eq!(inline("shadow_rejected"), 1.0);
    assert_eq!(inline("rejected"), 0.0);
    assert_eq!(inline("allowed"), 2.0);
    assert_eq!(inline("requests"), 3.0);
}

#[test]
fn without_shadow_the_same_traffic_is_rejected_and_counted_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &[]);
    for _ in 0..2 {
        assert_eq!(check_inline(&server).0, 200);
    }
    let (status, body) = check_inline(&server);
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["allowed"], false, "{body}");
    assert!(body.get("shadow_rejected").is_none(), "{body}");
    assert_eq!(
        server.metric(r#"tollgate_rejected_total{domain="",rule="inline"}"#),
        1.0
    );
    assert_eq!(
        server.metric(r#"tollgate_shadow_rejected_total{domain="",rule="inline"}"#),
        0.0
    );
}

#[test]
fn metrics_count_known_traffic_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &[]);

    // `api.user`, 10 per minute: twelve requests from user 42 (ten
    // admitted, the 9th and 10th past 80% of the limit, two rejected) and
    // one from user 7, counted under the same rule.
    let statuses: Vec<u16> = (0..12).map(|_| check(&server, "user", "42").0).collect();
    assert_eq!(statuses, [[200; 10].as_slice(), &[429; 2]].concat());
    assert_eq!(check(&server, "user", "7").0, 200);
    // `api.tenant` (detailed), 3 per minute: acme four times, beta once.
    let statuses: Vec<u16> = (0..4).map(|_| check(&server, "tenant", "acme").0).collect();
    assert_eq!(statuses, [200, 200, 200, 429]);
    assert_eq!(check(&server, "tenant", "beta").0, 200);
    // Two `/json` requests that match no rule: latency only.
    for _ in 0..2 {
        let (status, body) = server.call(
            "/json",
            &json!({"domain": "api", "descriptors": [{"entries": [{"key": "nothing", "value": "x"}]}]}),
        );
        assert_eq!(status, 200, "{body}");
    }

    let response = server.get("/metrics");
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = response.text().unwrap();
    let sample = |s: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(s)?.strip_prefix(' '))
            .map(|v| v.parse::<f64>().unwrap())
            .unwrap_or_else(|| panic!("no sample {s} in\n{text}"))
    };
    let rule = |name: &str, rule: &str| {
        sample(&format!(
            r#"tollgate_{name}_total{{domain="api",rule="{rule}"}}"#
        ))
    };

    assert_eq!(rule("requests", "api.user"), 13.0);
    assert_eq!(rule("allowed", "api.user"), 11.0);
    assert_eq!(rule("rejected", "api.user"), 2.0);
    assert_eq!(rule("near_limit", "api.user"), 2.0);

    assert_eq!(rule("requests", "api.tenant_acme"), 4.0);
    assert_eq!(rule("allowed", "api.tenant_acme"), 3.0);
    assert_eq!(rule("rejected", "api.tenant_acme"), 1.0);
    assert_eq!(rule("near_limit", "api.tenant_acme"), 1.0);
    assert_eq!(rule("requests", "api.tenant_beta"), 1.0);
    assert_eq!(rule("allowed", "api.tenant_beta"), 1.0);
    assert!(
        !text.contains(r#"rule="api.tenant""#),
        "a detailed rule counts only per value:\n{text}"
    );

    assert_eq!(
        sample(r#"tollgate_decision_duration_seconds_count{route="check"}"#),
        18.0
    );
    assert_eq!(
        sample(r#"tollgate_decision_duration_seconds_count{route="json"}"#),
        2.0
    );
}
