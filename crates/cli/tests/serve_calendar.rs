//! Calendar windows through `tollgate serve` and real HTTP, at instants the
//! client sends (`--trust-client-time`): an inline limit and a rules file's
//! limit on calendar months, whose `reset_after_ms`, `Retry-After` and
//! `RateLimit` headers give the real end of the month in the limit's time
//! zone (not 30 days); and bad calendar options answer 400, counting
//! nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;

use reqwest::blocking::Response;
use serde_json::{json, Value};
use support::Server;
use tollgate_testkit::sf_list_members;

/// 2026-01-31 23:59 EST, a minute before February in New York.
const JAN_31_2359_NY_MS: u64 = 1_769_921_940_000;
/// 2026-02-01 00:00 EST.
const FEB_1_NY_MS: u64 = 1_769_922_000_000;
/// 2026-03-01 00:00 EST: February 2026 has 28 days.
const MAR_1_NY_MS: u64 = 1_772_341_200_000;

/// The `RateLimit` (or `RateLimit-Policy`) header's first member's
/// parameters.
fn sf_params(response: &Response, header: &str) -> BTreeMap<String, i64> {
    let text = response.headers()[header].to_str().unwrap();
    sf_list_members(text)
        .into_iter()
        .next()
        .unwrap()
        .1
        .into_iter()
        .collect()
}

fn header(response: &Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

#[test]
fn an_inline_monthly_limit_resets_at_the_end_of_the_month_in_its_zone() {
    let server = Server::start(&["--trust-client-time"]);
    let limit = json!({"window": "calendar_month", "timezone": "America/New_York", "rate": "3"});
    let check = |at_ms: u64| {
        server.post(
            "/v1/check",
            &json!({"key": "tenant", "limit": limit, "at_ms": at_ms}),
        )
    };
    for remaining in [2, 1, 0] {
        let response = check(JAN_31_2359_NY_MS);
        assert_eq!(response.status(), 200);
        let state = sf_params(&response, "ratelimit");
        assert_eq!((state["r"], state["t"]), (remaining, 60));
        assert_eq!(
            header(&response, "x-ratelimit-reset").as_deref(),
            Some("60")
        );
        let policy = sf_params(&response, "ratelimit-policy");
        // N every 31 days and 2 hours: never two batches in one month.
        assert_eq!((policy["q"], policy["w"]), (3, 31 * 86_400 + 7_200));
        let body: Value = response.json().unwrap();
        assert_eq!(body["reset_after_ms"], 60_000, "{body}");
    }
    let refused = check(JAN_31_2359_NY_MS);
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("60"));
    let body: Value = refused.json().unwrap();
    assert_eq!(body["retry_after_ms"], 60_000, "{body}");
    // February: a fresh window, which ends with February (28 days).
    let february = check(FEB_1_NY_MS);
    assert_eq!(february.status(), 200);
    assert_eq!(
        sf_params(&february, "ratelimit")["t"],
        ((MAR_1_NY_MS - FEB_1_NY_MS) / 1000) as i64
    );
    let body: Value = february.json().unwrap();
    assert_eq!(body["remaining"], 2);
    assert_eq!(body["reset_after_ms"], MAR_1_NY_MS - FEB_1_NY_MS);
}

#[test]
fn a_rules_file_billing_cycle_resets_on_its_anchor_day() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    support::write(
        &path,
        "domain: api
descriptors:
  - key: plan
    rate_limit:
      window: calendar_month
      timezone: Europe/London
      anchor: 15
      requests_per_unit: 2
      algorithm: sliding_window_counter
",
    );
    let server = Server::start(&["--trust-client-time", "--rules", path.to_str().unwrap()]);
    // 2026-03-20 00:00 UTC, in the cycle from March 15 to 2026-04-15
    // 00:00 BST (23:00 UTC on the 14th).
    let now_ms = 1_773_964_800_000;
    let cycle_end_ms = 1_776_207_600_000;
    let check = || {
        server.post(
            "/v1/check",
            &json!({
                "domain": "api",
                "descriptors": [{"entries": [{"key": "plan", "value": "gold"}]}],
                "at_ms": now_ms,
            }),
        )
    };
    let first = check();
    assert_eq!(first.status(), 200);
    // Nothing before: the two counted now weigh on the next cycle, until
    // its weighted estimate reaches zero.
    let second = check();
    assert_eq!(second.status(), 200);
    let refused = check();
    assert_eq!(refused.status(), 429);
    // Refused until the cycle ends: the next cycle (April 15 to May 15,
    // 30 days) weighs the 2 at floor(2 × (30 d − e) / 30 d) ≤ 1 from its
    // first nanosecond on.
    assert_eq!(
        header(&refused, "retry-after").as_deref(),
        Some(((cycle_end_ms - now_ms) / 1000 + 1).to_string().as_str())
    );
    let body: Value = refused.json().unwrap();
    let statuses = body["statuses"].as_array().unwrap();
    let retry_ms = statuses[0]["retry_after_ms"].as_u64().unwrap();
    assert_eq!(retry_ms, cycle_end_ms - now_ms + 1, "{body}");
}

#[test]
fn bad_calendar_options_answer_400_and_count_nothing() {
    let server = Server::start(&["--trust-client-time"]);
    let bad = [
        (
            json!({"window": "calendar_month", "timezone": "Mars/Olympus_Mons", "rate": "3"}),
            "invalid_limit",
            "Mars/Olympus_Mons",
        ),
        (
            json!({"window": "calendar_month", "timezone": "UTC", "anchor": 32, "rate": "3"}),
            "invalid_limit",
            "anchor 32",
        ),
        (
            json!({"window": "calendar_month", "rate": "3"}),
            "invalid_limit",
            "timezone",
        ),
        (
            json!({"window": "calendar_fortnight", "timezone": "UTC", "rate": "3"}),
            "invalid_limit",
            "calendar_fortnight",
        ),
        (
            json!({"rate": "3/s", "timezone": "UTC"}),
            "invalid_limit",
            "calendar",
        ),
        (
            json!({"window": "calendar_day", "timezone": "UTC", "rate": "3/d"}),
            "invalid_rate",
            "count per window",
        ),
        (
            json!({"window": "calendar_day", "timezone": "UTC", "rate": "3", "algorithm": "gcra"}),
            "invalid_limit",
            "calendar window",
        ),
    ];
    for (limit, code, words) in bad {
        let response = server.post(
            "/v1/check",
            &json!({"key": "k", "limit": limit, "at_ms": FEB_1_NY_MS}),
        );
        assert_eq!(response.status(), 400, "{limit}");
        let body: Value = response.json().unwrap();
        assert_eq!(body["error"]["code"], code, "{limit}: {body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(words),
            "{limit}: {body}"
        );
    }
    // Nothing was counted: the whole month is still there.
    let good = json!({"window": "calendar_month", "timezone": "UTC", "rate": "3"});
    let response = server.post(
        "/v1/check",
        &json!({"key": "k", "limit": good, "at_ms": FEB_1_NY_MS}),
    );
    let body: Value = response.json().unwrap();
    assert_eq!(body["remaining"], 2, "{body}");
}
