//! The penalty box through `tollgate serve` and real HTTP, at instants the
//! client sends (`--trust-client-time`): a rule's `ban` refuses a key
//! outright once its limit has refused it often enough, with a truthful
//! `Retry-After`; the bans are counted in the metrics; `DELETE
//! /v1/keys/{key}` lifts a ban; and on Redis, a ban one instance sets is
//! honoured by another, on either engine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::Server;
use tollgate_testkit::RedisServer;

/// A minute boundary in ms since the epoch.
const T0: u64 = 28_333_333 * 60_000;
const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;

/// Two logins a minute; refused twice within 10 minutes: banned an hour.
const RULES: &str = "domain: api
descriptors:
  - key: login
    rate_limit:
      unit: minute
      requests_per_unit: 2
      ban: {after: 2, within: 10m, for: 1h}
";

/// The store key of `login=<user>` under the rule (docs/rules.md), for
/// `DELETE /v1/keys/{key}`, percent-encoded for the path.
fn key_path(user: &str) -> String {
    let key = format!("tg1|3:api5:login?|{}:{user}", user.len());
    let encoded: String = key
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'0'..=b'9' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("/v1/keys/{encoded}")
}

/// A login of `user` at `at_ms`: the status, the body and `Retry-After`.
fn login(server: &Server, user: &str, at_ms: u64) -> (u16, Value, Option<u64>) {
    let request = json!({
        "domain": "api",
        "descriptors": [{"entries": [{"key": "login", "value": user}]}],
        "at_ms": at_ms,
    });
    let response = server.post("/v1/check", &request);
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    (status, response.json().unwrap(), retry_after)
}

fn rules_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    support::write(&path, RULES);
    let path = path.to_str().unwrap().to_owned();
    (dir, path)
}

/// Logs `user` in until the ban starts at `T0`; asserts every answer.
fn get_banned(server: &Server, user: &str) {
    assert_eq!(login(server, user, T0).0, 200);
    assert_eq!(login(server, user, T0 + 1).0, 200);
    // The first strike: the limit's own answer.
    let (status, body, retry) = login(server, user, T0 + 2);
    assert_eq!(status, 429, "{body}");
    assert!(body["retry_after_ms"].as_u64().unwrap() <= MINUTE, "{body}");
    assert!(retry.unwrap() <= 60);
    // The second: banned for an hour from now.
    let (status, body, retry) = login(server, user, T0 + 3);
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["retry_after_ms"], HOUR, "{body}");
    assert_eq!(retry, Some(3600));
}

/// Half-way through the ban (it started at `T0 + 3`), with its limit long
/// refilled, `user` is still banned, and told the truth about when it ends.
fn still_banned(server: &Server, user: &str) {
    let (status, body, retry) = login(server, user, T0 + 3 + 30 * MINUTE);
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["retry_after_ms"], 30 * MINUTE, "{body}");
    assert_eq!(body["remaining"], 0, "{body}");
    assert_eq!(retry, Some(1800));
}

#[test]
fn a_ban_refuses_with_the_truth_is_counted_and_lifted_by_a_reset() {
    let (_dir, rules) = rules_file();
    let server = Server::start(&["--trust-client-time", "--rules", &rules]);
    get_banned(&server, "alice");
    still_banned(&server, "alice");
    // Another user is not banned.
    assert_eq!(login(&server, "bob", T0 + 30 * MINUTE).0, 200);
    // The ban ends when it said it would.
    assert_eq!(login(&server, "alice", T0 + HOUR + 2).0, 429);
    assert_eq!(login(&server, "alice", T0 + HOUR + 3).0, 200);

    let labels = r#"{domain="api",rule="api.login"}"#;
    assert_eq!(server.metric(&format!("tollgate_bans_total{labels}")), 1.0);
    assert_eq!(
        server.metric(&format!("tollgate_ban_refusals_total{labels}")),
        2.0
    );

    get_banned(&server, "carol");
    let response = server.delete(&key_path("carol"), None);
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().unwrap()["released"], true);
    assert_eq!(login(&server, "carol", T0 + 30 * MINUTE).0, 200);
}

fn two_instances_share_the_ban(engine: &str) {
    let redis = RedisServer::start_with_module();
    let (_dir, rules) = rules_file();
    let url = redis.url();
    let args = [
        "--trust-client-time",
        "--rules",
        &rules,
        "--store",
        &url,
        "--redis-engine",
        engine,
    ];
    let first = Server::start(&args);
    let second = Server::start(&args);
    get_banned(&first, "alice");
    // The ban lives in Redis: the other instance honours it.
    still_banned(&second, "alice");
    // Strikes too: one strike on each instance bans.
    assert_eq!(login(&first, "bob", T0).0, 200);
    assert_eq!(login(&second, "bob", T0).0, 200);
    assert_eq!(login(&first, "bob", T0 + 1).2.map(|r| r <= 60), Some(true));
    assert_eq!(login(&second, "bob", T0 + 2).2, Some(3600));
    still_banned(&first, "alice");
    // A reset on one instance lifts the ban for both.
    assert_eq!(second.delete(&key_path("alice"), None).status(), 200);
    assert_eq!(login(&first, "alice", T0 + 30 * MINUTE).0, 200);
}

#[test]
fn on_redis_a_ban_set_by_one_instance_holds_on_another_with_the_script() {
    two_instances_share_the_ban("lua");
}

#[test]
fn on_redis_a_ban_set_by_one_instance_holds_on_another_with_the_module() {
    two_instances_share_the_ban("module");
}
