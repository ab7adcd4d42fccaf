//! `tollgate serve` through the real binary and real HTTP: every decision
//! route, the worked examples of SPEC §2 with `at_ms`, the Databox example,
//! bad input (400/413, nothing changed), the SPEC §7 headers parsed as
//! Structured Fields, admin routes, and shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;

use reqwest::blocking::Response;
use serde_json::{json, Value};
use support::Server;
use tollgate_testkit::sf_list_members;

/// A minute boundary (so fixed windows start here) in ms since the epoch.
const T0: u64 = 28_333_333 * 60_000;

fn trusted() -> Server {
    Server::start(&["--trust-client-time"])
}

fn check(server: &Server, key: &str, limit: &Value, at_ms: u64, cost: u64) -> (u16, Value) {
    server.call(
        "/v1/check",
        &json!({"key": key, "limit": limit, "cost": cost, "at_ms": at_ms}),
    )
}

fn allowed(server: &Server, key: &str, limit: &Value, at_ms: u64) -> bool {
    let (status, body) = check(server, key, limit, at_ms, 1);
    assert_eq!(status == 200, body["allowed"] == true, "{body}");
    body["allowed"] == true
}

#[test]
fn token_bucket_capacity_10_refill_2_per_second() {
    let s = trusted();
    let limit = json!({"algorithm": "token_bucket", "rate": "2/s", "burst": 10});
    for _ in 0..5 {
        assert!(allowed(&s, "tb", &limit, T0));
    }
    assert_eq!(check(&s, "tb", &limit, T0, 0).1["remaining"], 5);
    for _ in 0..4 {
        assert!(allowed(&s, "tb", &limit, T0 + 2_000));
    }
    assert_eq!(check(&s, "tb", &limit, T0 + 2_000, 0).1["remaining"], 5);
    let admitted = (0..8)
        .filter(|_| allowed(&s, "tb", &limit, T0 + 3_000))
        .count();
    assert_eq!(admitted, 7);
}

#[test]
fn token_bucket_capacity_4_refill_2_per_minute() {
    let s = trusted();
    let limit = json!({"algorithm": "token_bucket", "rate": "2/min", "burst": 4});
    for _ in 0..4 {
        assert!(allowed(&s, "k", &limit, T0));
    }
    let (status, fifth) = check(&s, "k", &limit, T0, 1);
    assert_eq!(status, 429);
    assert_eq!(fifth["retry_after_ms"], 30_000);
    assert!(allowed(&s, "k", &limit, T0 + 60_000));
    assert!(allowed(&s, "k", &limit, T0 + 60_000));
    assert!(!allowed(&s, "k", &limit, T0 + 60_000));
}

#[test]
fn fixed_window_resets_at_the_boundary_and_admits_twice_across_it() {
    let s = trusted();
    let per_second = json!({"algorithm": "fixed_window", "rate": "3/s"});
    for _ in 0..3 {
        assert!(allowed(&s, "a", &per_second, T0 + 100));
    }
    assert!(!allowed(&s, "a", &per_second, T0 + 900));
    assert!(allowed(&s, "a", &per_second, T0 + 1_000));

    let per_minute = json!({"algorithm": "fixed_window", "rate": "5/min"});
    let late = (0..5)
        .filter(|i| allowed(&s, "b", &per_minute, T0 + 30_000 + i * 7_000))
        .count();
    let early = (0..5)
        .filter(|i| allowed(&s, "b", &per_minute, T0 + 60_000 + i * 7_000))
        .count();
    assert_eq!(
        (late, early),
        (5, 5),
        "10 inside one minute: the known weakness"
    );
}

#[test]
fn sliding_window_log_two_per_minute() {
    let s = trusted();
    let limit = json!({"algorithm": "sliding_window_log", "rate": "2/min"});
    assert!(allowed(&s, "k", &limit, T0 + 1_000));
    assert!(allowed(&s, "k", &limit, T0 + 30_000));
    assert!(!allowed(&s, "k", &limit, T0 + 50_000));
    assert!(allowed(&s, "k", &limit, T0 + 100_000));
}

#[test]
fn sliding_window_counter_weighs_the_previous_window() {
    let s = trusted();
    let limit = json!({"algorithm": "sliding_window_counter", "rate": "7/min"});
    for i in 0..5 {
        assert!(allowed(&s, "k", &limit, T0 + 10_000 + i * 1_000));
    }
    for i in 0..3 {
        assert!(allowed(&s, "k", &limit, T0 + 60_000 + i * 1_000));
    }
    // 30 % into the window: 3 + floor(5 × 0.7) = 6 < 7.
    assert!(allowed(&s, "k", &limit, T0 + 78_000));
    assert!(!allowed(&s, "k", &limit, T0 + 78_000));
}

#[test]
fn stepped_window_delay_through_check_and_databox() {
    let s = trusted();
    let limit = json!({"algorithm": "stepped_window", "rate": "10/4s", "step": "1s"});
    for (at, n) in [(500, 3), (1_500, 3), (2_500, 2), (3_500, 2)] {
        for _ in 0..n {
            assert!(allowed(&s, "c", &limit, T0 + at));
        }
        let (status, body) = s.call(
            "/increment",
            &json!({"id": "d", "interval": 4, "requests": 10, "step": "1s", "timestamp": T0 + at}),
        );
        assert_eq!(status, 200);
        assert!(body["count"].as_u64().unwrap() >= 1);
        for _ in 1..n {
            s.call(
                "/increment",
                &json!({"id": "d", "interval": 4, "requests": 10, "step": "1s", "timestamp": T0 + at}),
            );
        }
    }
    assert!(!allowed(&s, "c", &limit, T0 + 3_900));
    let delay: Value = s
        .get(&format!(
            "/delay?id=d&interval=4&requests=10&step=1s&at_ms={}",
            T0 + 3_900
        ))
        .json()
        .unwrap();
    assert_eq!(delay, json!({"next_at_ms": T0 + 5_000, "delay_ms": 1_100}));
    // At 5.0 s the step [0 s, 1 s) has left the window: 7 remain counted.
    assert!(allowed(&s, "c", &limit, T0 + 5_000));
    assert_eq!(check(&s, "c", &limit, T0 + 5_000, 0).1["remaining"], 2);
}

#[test]
fn databox_increment_records_calls_over_the_limit() {
    let s = trusted();
    let body = |ts: u64| json!({"id": "api", "interval": 60, "requests": 2, "timestamp": ts});
    let counts: Vec<u64> = (0..3)
        .map(|i| {
            s.call("/increment", &body(T0 + i)).1["count"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(counts, [1, 2, 3]);
    let delay: Value = s
        .get(&format!(
            "/delay?id=api&interval=60&requests=2&at_ms={}",
            T0 + 10
        ))
        .json()
        .unwrap();
    assert!(delay["delay_ms"].as_u64().unwrap() > 0, "{delay}");
    let bad = s.get("/delay?id=api&interval=60");
    assert_eq!(bad.status(), 400);
}

/// The members of a Structured Field list: name and integer parameters.
fn sf_list(response: &Response, header: &str) -> Vec<(String, BTreeMap<String, i64>)> {
    let text = response.headers()[header].to_str().unwrap();
    sf_list_members(text)
        .into_iter()
        .map(|(name, params)| (name, params.into_iter().collect()))
        .collect()
}

fn header(response: &Response, name: &str) -> String {
    response.headers()[name].to_str().unwrap().to_owned()
}

#[test]
fn decisions_carry_the_rate_limit_headers() {
    let s = trusted();
    let limit = json!({"algorithm": "fixed_window", "rate": "2/min"});
    let body = |cost| json!({"key": "h", "limit": limit, "cost": cost, "at_ms": T0 + 15_000});
    let first = s.post("/v1/check", &body(1));
    assert_eq!(first.status(), 200);
    let policy = sf_list(&first, "ratelimit-policy");
    assert_eq!(policy.len(), 1);
    assert_eq!(policy[0].1["q"], 2);
    assert_eq!(policy[0].1["w"], 60);
    let state = sf_list(&first, "ratelimit");
    assert_eq!(
        state[0].0, policy[0].0,
        "one name for the policy and its state"
    );
    assert_eq!(state[0].1["r"], 1);
    assert_eq!(state[0].1["t"], 45);
    assert_eq!(header(&first, "x-ratelimit-limit"), "2");
    assert_eq!(header(&first, "x-ratelimit-remaining"), "1");
    assert_eq!(header(&first, "x-ratelimit-reset"), "45");
    assert!(first.headers().get("retry-after").is_none());

    s.post("/v1/check", &body(1));
    let third = s.post("/v1/check", &body(1));
    assert_eq!(third.status(), 429);
    assert_eq!(header(&third, "retry-after"), "45");
    assert_eq!(sf_list(&third, "ratelimit")[0].1["r"], 0);
    let json: Value = third.json().unwrap();
    assert_eq!(json["retry_after_ms"], 45_000);
}

#[test]
fn a_bucket_announces_its_burst_over_the_time_to_refill_it() {
    let s = trusted();
    // The README's sample: burst 20 refilled at 10/s is 20 every 2 s; a
    // client spending 20 every second would be refused from the third.
    let limit = json!({"algorithm": "token_bucket", "rate": "10/s", "burst": 20});
    let first = s.post(
        "/v1/check",
        &json!({"key": "b", "limit": limit, "at_ms": T0}),
    );
    assert_eq!(first.status(), 200);
    let policy = sf_list(&first, "ratelimit-policy");
    assert_eq!((policy[0].1["q"], policy[0].1["w"]), (20, 2));
}

const RULES: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit:
      name: per-user
      unit: minute
      requests_per_unit: 3
  - key: plan
    value: free
    rate_limits:
      - unit: second
        requests_per_unit: 2
      - unit: hour
        requests_per_unit: 5
  - key: health
    rate_limit:
      unlimited: true
  - key: blocked
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: jobs
    rate_limit:
      algorithm: concurrency
      unit: second
      requests_per_unit: 2
"#;

fn with_rules() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    support::write(&path, RULES);
    let server = Server::start(&["--trust-client-time", "--rules", path.to_str().unwrap()]);
    (dir, server)
}

fn rules_check(s: &Server, descriptors: Value, at_ms: u64) -> (u16, Value) {
    s.call(
        "/v1/check",
        &json!({"domain": "api", "descriptors": descriptors, "at_ms": at_ms}),
    )
}

fn entries(pairs: &[(&str, &str)]) -> Value {
    json!({"entries": pairs.iter().map(|(k, v)| json!({"key": k, "value": v})).collect::<Vec<_>>()})
}

#[test]
fn rules_based_checks_report_each_descriptor() {
    let (_dir, s) = with_rules();
    let (status, body) = rules_check(
        &s,
        json!([
            entries(&[("user", "alice")]),
            entries(&[("health", "x")]),
            entries(&[("nothing", "x")])
        ]),
        T0,
    );
    assert_eq!(status, 200, "{body}");
    let statuses = body["statuses"].as_array().unwrap();
    assert_eq!(statuses.len(), 3);
    assert_eq!(statuses[0]["name"], "per-user");
    assert_eq!(statuses[0]["remaining"], 2);
    assert_eq!(statuses[1]["unlimited"], true);
    assert_eq!(statuses[2]["name"], Value::Null);
    assert_eq!(
        body["remaining"], 2,
        "the top level is the most constrained status"
    );

    // Each user value has its own counter (key-only descriptor).
    for _ in 0..2 {
        rules_check(&s, json!([entries(&[("user", "alice")])]), T0);
    }
    let (status, over) = rules_check(
        &s,
        json!([entries(&[("user", "alice")]), entries(&[("health", "x")])]),
        T0,
    );
    assert_eq!(status, 429);
    assert_eq!(over["allowed"], false);
    assert_eq!(over["statuses"][1]["allowed"], true);
    let (status, _) = rules_check(&s, json!([entries(&[("user", "bob")])]), T0);
    assert_eq!(status, 200);
}

#[test]
fn several_limits_on_one_descriptor_are_all_or_nothing() {
    let (_dir, s) = with_rules();
    let free = json!([entries(&[("plan", "free")])]);
    assert_eq!(rules_check(&s, free.clone(), T0).0, 200);
    assert_eq!(rules_check(&s, free.clone(), T0).0, 200);
    let third = s.post(
        "/v1/check",
        &json!({"domain": "api", "descriptors": free.clone(), "at_ms": T0}),
    );
    assert_eq!(third.status(), 429);
    assert_eq!(
        sf_list(&third, "ratelimit-policy").len(),
        2,
        "one member per limit"
    );
    // The per-second rejection counted nothing in the per-hour limit: three
    // more seconds admit exactly three more.
    let admitted = (1..=4)
        .filter(|i| rules_check(&s, free.clone(), T0 + i * 1_000).0 == 200)
        .count();
    assert_eq!(admitted, 3);
}

#[test]
fn a_zero_limit_rejects_everything_and_counts_nothing_else() {
    let (_dir, s) = with_rules();
    let (status, body) = rules_check(
        &s,
        json!([
            entries(&[("user", "carol")]),
            entries(&[("blocked", "1.2.3.4")])
        ]),
        T0,
    );
    assert_eq!(status, 429, "{body}");
    let (_, after) = rules_check(&s, json!([entries(&[("user", "carol")])]), T0);
    assert_eq!(
        after["remaining"], 2,
        "the rejected request counted nothing"
    );
}

#[test]
fn concurrency_leases_are_released() {
    let (_dir, s) = with_rules();
    let jobs = json!([entries(&[("jobs", "import")])]);
    let (_, first) = rules_check(&s, jobs.clone(), T0);
    let (_, _second) = rules_check(&s, jobs.clone(), T0);
    assert_eq!(rules_check(&s, jobs.clone(), T0).0, 429);
    let lease = first["statuses"][0]["lease"].as_u64().unwrap();
    let (status, released) = s.call(
        "/v1/release",
        &json!({"domain": "api", "descriptors": jobs.clone(), "lease": lease}),
    );
    assert_eq!((status, released), (200, json!({"released": true})));
    assert_eq!(rules_check(&s, jobs.clone(), T0).0, 200);

    // Inline too.
    let limit = json!({"algorithm": "concurrency", "rate": "1/s"});
    let (_, held) = check(&s, "job", &limit, T0, 1);
    assert_eq!(check(&s, "job", &limit, T0, 1).0, 429);
    let release = json!({"key": "job", "limit": limit, "lease": held["lease"]});
    assert_eq!(s.call("/v1/release", &release).1, json!({"released": true}));
    assert_eq!(
        s.call("/v1/release", &release).1,
        json!({"released": false})
    );
    assert_eq!(check(&s, "job", &limit, T0, 1).0, 200);
}

#[test]
fn reservations_book_consecutive_slots_and_refuse_past_max_wait() {
    let s = trusted();
    let limit = json!({"algorithm": "gcra", "rate": "1/s"});
    let reserve = |max_wait: Option<u64>| {
        let mut body = json!({"key": "r", "limit": limit, "at_ms": T0});
        if let Some(ms) = max_wait {
            body["max_wait_ms"] = json!(ms);
        }
        s.call("/v1/reserve", &body)
    };
    let waits: Vec<u64> = (0..3)
        .map(|_| reserve(None).1["wait_ms"].as_u64().unwrap())
        .collect();
    assert_eq!(waits, [0, 1_000, 2_000]);
    let (status, refused) = reserve(Some(500));
    assert_eq!(status, 429);
    assert_eq!(refused["allowed"], false);
    assert_eq!(refused["retry_after_ms"], 2_500);
    // Nothing was booked: the next unbounded reservation lands at 3 s.
    assert_eq!(reserve(None).1["wait_ms"], 3_000);
    // A plain check never jumps ahead of booked requests.
    assert_eq!(check(&s, "r", &limit, T0 + 1_500, 1).0, 429);
}

#[test]
fn concurrent_reservations_never_overbook() {
    let s = trusted();
    let limit = json!({"algorithm": "gcra", "rate": "10/s"});
    let waits = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..10 {
                    let (_, body) = s.call(
                        "/v1/reserve",
                        &json!({"key": "many", "limit": limit, "at_ms": T0}),
                    );
                    waits
                        .lock()
                        .unwrap()
                        .push(body["wait_ms"].as_u64().unwrap());
                }
            });
        }
    });
    let mut waits = waits.into_inner().unwrap();
    waits.sort_unstable();
    // The burst (10) goes at once, then one slot every 100 ms.
    let expected: Vec<u64> = (0..40).map(|i: u64| i.saturating_sub(9) * 100).collect();
    assert_eq!(waits, expected, "one slot per reservation");
}

/// Sends `body` to `/v1/check`, expects `400` with `code`, and returns the
/// message.
fn refused(s: &Server, body: &str, code: &str) -> String {
    let response = s.post_raw("/v1/check", body.to_owned());
    assert_eq!(response.status(), 400, "{body}");
    let json: Value = response.json().unwrap();
    assert_eq!(json["error"]["code"], code, "{json}");
    json["error"]["message"].as_str().unwrap().to_owned()
}

#[test]
fn bad_input_is_a_clear_400_and_changes_nothing() {
    let (_dir, s) = with_rules();
    let limit = json!({"algorithm": "fixed_window", "rate": "5/min"});
    assert!(allowed(&s, "k", &limit, T0));

    refused(&s, "{\"key\": ", "malformed_json");
    let m = refused(
        &s,
        r#"{"key":"k","limit":{"algorithm":"fixed_window","rate":"5/min"},"colour":1}"#,
        "malformed_json",
    );
    assert!(m.contains("colour"), "{m}");
    let m = refused(
        &s,
        r#"{"key":"k","limit":{"algorithm":"magic","rate":"5/min"}}"#,
        "unknown_algorithm",
    );
    assert!(m.contains("magic"), "{m}");
    let m = refused(
        &s,
        r#"{"key":"k","limit":{"algorithm":"fixed_window","rate":"5/fortnight"}}"#,
        "invalid_rate",
    );
    assert!(m.contains("fortnight"), "{m}");
    let m = refused(
        &s,
        &format!(
            r#"{{"key":"k","limit":{{"algorithm":"fixed_window","rate":"5/min"}},"cost":6,"at_ms":{T0}}}"#
        ),
        "cost_too_large",
    );
    assert!(m.contains('6'), "{m}");
    let m = refused(
        &s,
        r#"{"domain":"nope","descriptors":[{"entries":[{"key":"user","value":"x"}]}]}"#,
        "unknown_domain",
    );
    assert!(m.contains("nope"), "{m}");
    let long = "k".repeat(1_025);
    refused(
        &s,
        &format!(r#"{{"key":"{long}","limit":{{"algorithm":"fixed_window","rate":"5/min"}}}}"#),
        "key_too_long",
    );
    refused(&s, r#"{"key":"k"}"#, "invalid_request");
    refused(
        &s,
        r#"{"key":"k","limit":{"rate":"1/s","burst":0}}"#,
        "invalid_limit",
    );

    let huge = format!(r#"{{"key":"{}"}}"#, "x".repeat(70 * 1024));
    let response = s.post_raw("/v1/check", huge);
    assert_eq!(response.status(), 413);
    let json: Value = response.json().unwrap();
    assert_eq!(json["error"]["code"], "body_too_large");

    let (_, peek) = check(&s, "k", &limit, T0, 0);
    assert_eq!(peek["remaining"], 4, "no bad request counted anything");
}

#[test]
fn client_time_is_ignored_unless_trusted() {
    let s = Server::start(&[]);
    let limit = json!({"algorithm": "fixed_window", "rate": "1/min"});
    // Both requests claim different minutes; untrusted, both are "now".
    assert_eq!(check(&s, "t", &limit, T0, 1).0, 200);
    assert_eq!(check(&s, "t", &limit, T0 + 120_000, 1).0, 429);
}

#[test]
fn admin_routes_need_the_token() {
    let s = Server::start(&["--trust-client-time", "--admin-token", "s3cret"]);
    let limit = json!({"algorithm": "fixed_window", "rate": "1/min"});
    assert_eq!(check(&s, "user:1", &limit, T0, 1).0, 200);
    assert_eq!(check(&s, "user:1", &limit, T0, 1).0, 429);
    assert_eq!(s.delete("/v1/keys/user:1", None).status(), 401);
    assert_eq!(s.delete("/v1/keys/user:1", Some("wrong")).status(), 401);
    let reset = s.delete("/v1/keys/user:1", Some("s3cret"));
    assert_eq!(reset.status(), 200);
    assert_eq!(reset.json::<Value>().unwrap(), json!({"released": true}));
    assert_eq!(check(&s, "user:1", &limit, T0, 1).0, 200);
}

/// `GET /v1/top` lists the keys a rule refused most, the most refused
/// first, as `DELETE /v1/keys/{key}` takes them; inline limits under
/// `rule=inline`; behind the admin token.
#[test]
fn top_lists_the_keys_a_rule_refused_most() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    support::write(&path, RULES);
    let s = Server::start(&[
        "--trust-client-time",
        "--admin-token",
        "s3cret",
        "--rules",
        path.to_str().unwrap(),
    ]);
    // per-user allows 3 a minute: mallory is refused 5 times, eve once,
    // alice never.
    for (user, requests) in [("mallory", 8), ("eve", 4), ("alice", 2)] {
        for _ in 0..requests {
            rules_check(&s, json!([entries(&[("user", user)])]), T0);
        }
    }
    let limit = json!({"algorithm": "fixed_window", "rate": "1/min"});
    for _ in 0..3 {
        check(&s, "inline-key", &limit, T0, 1);
    }
    let top = |query: &str, token: Option<&str>| {
        let mut request = s.client().get(format!("{}/v1/top?{query}", s.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().unwrap();
        let status = response.status().as_u16();
        (status, response.json::<Value>().unwrap())
    };
    assert_eq!(top("domain=api&rule=api.user", None).0, 401);
    let (status, body) = top("domain=api&rule=api.user", Some("s3cret"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["window_seconds"], 300);
    let keys = body["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2, "{body}");
    assert_eq!(keys[0]["refused"], 5);
    assert_eq!(keys[0]["error"], 0);
    assert_eq!(keys[1]["refused"], 1);
    let mallory = keys[0]["key"].as_str().unwrap();
    assert!(
        mallory.starts_with("tg1|") && mallory.contains("mallory"),
        "{mallory}"
    );
    assert_eq!(
        keys[0]["descriptor"],
        json!([{"key": "user", "value": "mallory"}]),
        "{body}"
    );
    let (_, first) = top("domain=api&rule=api.user&limit=1", Some("s3cret"));
    assert_eq!(first["keys"].as_array().unwrap().len(), 1);
    let (_, inline) = top("domain=&rule=inline", Some("s3cret"));
    assert_eq!(
        inline["keys"],
        json!([{"key": "inline-key", "refused": 2, "error": 0, "descriptor": null}])
    );
    // The key as listed resets the descriptor's counter.
    // Every byte but letters and digits percent-encoded (the key holds
    // `|`, `:` and `?`).
    let encoded: String = mallory
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let reset = s.delete(&format!("/v1/keys/{encoded}"), Some("s3cret"));
    assert_eq!(reset.json::<Value>().unwrap(), json!({"released": true}));
    let (status, _) = rules_check(&s, json!([entries(&[("user", "mallory")])]), T0);
    assert_eq!(status, 200);
    // Bad queries change nothing and say why.
    for query in [
        "domain=api&rule=",
        "domain=api",
        "domain=api&rule=api.user&limit=0",
        "domain=api&rule=api.user&limit=101",
        "domain=api&rule=api.user&limit=x",
    ] {
        let (status, body) = top(query, Some("s3cret"));
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request", "{query}");
    }
    let (status, body) = top("domain=api&rule=api.nothing", Some("s3cret"));
    assert_eq!((status, body["keys"].clone()), (200, json!([])));
}

#[test]
fn envoy_json_endpoint_answers_like_envoyproxy_ratelimit() {
    let (_dir, s) = with_rules();
    let request = json!({
        "domain": "api",
        "descriptors": [{"entries": [{"key": "user", "value": "dave"}]}, {"entries": [{"key": "other"}]}],
        "at_ms": T0 + 30_000,
    });
    let (status, body) = s.call("/json", &request);
    assert_eq!(status, 200);
    assert_eq!(body["overallCode"], "OK");
    assert_eq!(
        body["statuses"][0],
        json!({"code": "OK", "currentLimit": {"name": "per-user", "requestsPerUnit": 3, "unit": "MINUTE"}, "limitRemaining": 2, "durationUntilReset": "30s"})
    );
    assert_eq!(body["statuses"][1], json!({"code": "OK"}));
    s.call("/json", &request);
    s.call("/json", &request);
    let (status, body) = s.call("/json", &request);
    assert_eq!(status, 429);
    assert_eq!(body["overallCode"], "OVER_LIMIT");
    assert_eq!(body["statuses"][0]["code"], "OVER_LIMIT");

    // An unknown domain is not an error here.
    let (status, body) = s.call(
        "/json",
        &json!({"domain": "other", "descriptors": [{"entries": [{"key": "a", "value": "b"}]}]}),
    );
    assert_eq!(
        (status, body),
        (
            200,
            json!({"overallCode": "OK", "statuses": [{"code": "OK"}]})
        )
    );
    // An empty domain is.
    assert_eq!(
        s.call("/json", &json!({"domain": "", "descriptors": []})).0,
        400
    );
}

#[test]
fn health_readiness_and_unknown_paths() {
    let s = Server::start(&[]);
    assert_eq!(s.get("/healthz").json::<Value>().unwrap()["status"], "ok");
    let ready = s.get("/readyz");
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<Value>().unwrap()["status"], "ready");
    let missing = s.get("/v2/nothing");
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.json::<Value>().unwrap()["error"]["code"],
        "not_found"
    );
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    let s = Server::start(&[]);
    assert_eq!(s.get("/healthz").status(), 200);
    assert!(s.stop().success());
}

#[test]
fn settings_or_rules_that_cannot_be_used_exit_64() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    support::write(
        &bad,
        "domain: api\ndescriptors:\n  - key: user\n    colour: red\n",
    );
    for args in [
        vec!["--on-store-error", "shrug"],
        vec!["--rules", bad.to_str().unwrap()],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("serve")
            .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?} started");
    }
}

#[test]
fn check_rules_validates_without_serving() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    support::write(&good, RULES);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check-rules", good.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let bad = dir.path().join("bad.yaml");
    support::write(
        &bad,
        "domain: api\ndescriptors:\n  - key: user\n    colour: red\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check-rules", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.yaml:4"), "{stderr}");
    assert!(stderr.contains("colour"), "{stderr}");
}

#[test]
fn a_restart_with_a_snapshot_keeps_the_quota_used() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.snapshot");
    let args = ["--snapshot", path.to_str().unwrap()];
    // Real time, and a sliding window an hour long: no window boundary can
    // fall inside the test.
    let limit = json!({"algorithm": "sliding_window_log", "rate": "10/h"});
    let take = |s: &Server| {
        s.call("/v1/check", &json!({"key": "taker", "limit": limit}))
            .0
    };

    let first = Server::start(&args);
    assert_eq!(
        first.metric(r#"tollgate_snapshot_loads_total{result="missing"}"#),
        1.0
    );
    for _ in 0..7 {
        assert_eq!(take(&first), 200);
    }
    assert!(first.stop().success());
    assert!(path.exists(), "SIGTERM saves the snapshot");

    let second = Server::start(&args);
    assert_eq!(
        second.metric(r#"tollgate_snapshot_loads_total{result="ok"}"#),
        1.0
    );
    let answers: Vec<u16> = (0..4).map(|_| take(&second)).collect();
    assert_eq!(
        answers,
        [200, 200, 200, 429],
        "the 4th take after the restart is rejected"
    );
}

#[test]
fn a_corrupt_snapshot_is_reported_and_the_server_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.snapshot");
    support::write(&path, "TOLLGATE-SNAPSHOT but damaged");
    let s = Server::start(&["--snapshot", path.to_str().unwrap()]);
    assert_eq!(
        s.metric(r#"tollgate_snapshot_loads_total{result="failed"}"#),
        1.0
    );
    let limit = json!({"algorithm": "fixed_window", "rate": "1/h"});
    assert_eq!(
        s.call("/v1/check", &json!({"key": "k", "limit": limit})).0,
        200
    );
}

#[test]
fn snapshots_are_also_saved_periodically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.snapshot");
    let s = Server::start(&[
        "--snapshot",
        path.to_str().unwrap(),
        "--snapshot-interval",
        "1",
    ]);
    let saved = || s.metric(r#"tollgate_snapshots_total{result="ok"}"#);
    let deadline = std::time::Instant::now() + support::PATIENCE;
    while saved() < 1.0 {
        assert!(std::time::Instant::now() < deadline, "no periodic snapshot");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(path.exists());
}

#[test]
fn reservations_count_in_the_rules_metrics() {
    let (_dir, s) = with_rules();
    let body = json!({"domain": "api", "descriptors": [entries(&[("user", "erin")])], "at_ms": T0, "max_wait_ms": 0});
    let answers: Vec<u16> = (0..4).map(|_| s.call("/v1/reserve", &body).0).collect();
    assert_eq!(answers, [200, 200, 200, 429]);
    let labels = r#"{domain="api",rule="api.user"}"#;
    assert_eq!(s.metric(&format!("tollgate_requests_total{labels}")), 4.0);
    assert_eq!(s.metric(&format!("tollgate_allowed_total{labels}")), 3.0);
    assert_eq!(s.metric(&format!("tollgate_rejected_total{labels}")), 1.0);
}

#[test]
fn settings_come_from_the_environment_and_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tollgate.toml");
    support::write(&config, "trust_client_time = true\nmax_key_bytes = 8\n");
    let s = Server::start_with_env(
        &[],
        &[
            ("TOLLGATE_ADMIN_TOKEN", "from-env"),
            ("TOLLGATE_CONFIG", config.to_str().unwrap()),
        ],
    );
    assert_eq!(s.delete("/v1/keys/k", None).status(), 401);
    assert_eq!(s.delete("/v1/keys/k", Some("from-env")).status(), 200);
    let limit = json!({"algorithm": "fixed_window", "rate": "1/min"});
    assert_eq!(check(&s, "k", &limit, T0, 1).0, 200);
    assert_eq!(
        check(&s, "k", &limit, T0 + 60_000, 1).0,
        200,
        "client time trusted by the file"
    );
    let (status, body) = check(&s, "123456789", &limit, T0, 1);
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("key_too_long"))
    );
}

#[test]
fn shutdown_answers_the_requests_in_flight() {
    use std::io::{Read, Write};
    let s = Server::start(&[]);
    let body = br#"{"key":"slow","limit":{"algorithm":"gcra","rate":"5/s"}}"#;
    let mut conn = std::net::TcpStream::connect(s.address()).unwrap();
    conn.set_read_timeout(Some(support::PATIENCE)).unwrap();
    // `Expect: 100-continue`: the server answers `100 Continue` when the
    // handler starts reading the body, which proves the request is in
    // flight (a connection still in the listen queue would only be reset
    // when the listener closes).
    write!(
        conn,
        "POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    let mut buf = [0u8; 4096];
    let mut read_until = |conn: &mut std::net::TcpStream, answer: &mut String, what: &str| {
        while !answer.contains(what) {
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "connection closed before {what:?}: {answer}");
            answer.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    read_until(&mut conn, &mut answer, "100 Continue\r\n\r\n");
    conn.write_all(&body[..10]).unwrap();
    s.send_term();
    // Shutdown has begun once the listener refuses new connections.
    let deadline = std::time::Instant::now() + support::PATIENCE;
    while std::net::TcpStream::connect(s.address()).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server kept accepting"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    conn.write_all(&body[10..]).unwrap();
    read_until(&mut conn, &mut answer, "\"allowed\"");
    let answer = answer.trim_start_matches("HTTP/1.1 100 Continue\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(s.stop().success());
}

#[test]
fn a_sigterm_as_soon_as_the_address_is_announced_stops_gracefully() {
    // The signal handlers are in place before the addresses are printed: a
    // signal sent at once ends the server cleanly, not by the signal's
    // default action.
    let s = Server::start(&[]);
    let status = s.stop();
    assert!(status.success(), "{status:?}");
}
