//! envoyproxy/ratelimit's newer rules features decided by the real
//! `tollgate serve`, over gRPC and over `POST /json` alike: wildcards in any
//! position and `share_threshold`. The rules are the fixtures of
//! `crates/rules/tests/fixtures/dropin/`; every scenario runs once per
//! surface, each on a fresh server. The limits are per year, so no window
//! ends during a test (nor does any verdict depend on the clock).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;

use serde_json::{json, Value};
use support::Server;
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

type Entries<'a> = &'a [(&'a str, &'a str)];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../rules/tests/fixtures/dropin")
        .join(name)
}

/// Which API a scenario talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Grpc,
    Json,
}

const APIS: [Api; 2] = [Api::Grpc, Api::Json];

/// One descriptor's answer: its code and the `requests_per_unit` of the
/// limit that applied (0 when none).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Status {
    code: String,
    limit: u32,
}

/// An answer: the overall code and one status per descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    overall: String,
    statuses: Vec<Status>,
    /// The whole answer as JSON (gRPC answers converted), for fields a
    /// test looks at directly.
    raw: Value,
}

/// A fresh server on some rules and one way to ask it.
struct Session {
    server: Server,
    api: Api,
    runtime: tokio::runtime::Runtime,
    client: RateLimitServiceClient<Channel>,
    /// The rules directory, removed when the session ends.
    _rules: Option<tempfile::TempDir>,
}

impl Session {
    fn start(api: Api, rules: &[&str], extra: &[&str]) -> Session {
        let dir = tempfile::tempdir().unwrap();
        for name in rules {
            std::fs::copy(fixture(name), dir.path().join(name)).unwrap();
        }
        let path = dir.path().to_str().unwrap().to_owned();
        let mut args = vec!["--rules", path.as_str()];
        args.extend_from_slice(extra);
        let mut session = Session::on(api, &args, &[]);
        session._rules = Some(dir);
        session
    }

    /// A server started with `args` and `env`.
    fn on(api: Api, args: &[&str], env: &[(&str, &str)]) -> Session {
        let server = Server::start_with_env(args, env);
        let support::GrpcClient { runtime, client } = server.grpc_client();
        Session {
            server,
            api,
            runtime,
            client,
            _rules: None,
        }
    }

    /// `ShouldRateLimit` of `descriptors` in `domain`, one hit each.
    fn ask(&mut self, domain: &str, descriptors: &[Entries<'_>]) -> Answer {
        match self.api {
            Api::Grpc => {
                let request = RateLimitRequest {
                    domain: domain.into(),
                    descriptors: descriptors
                        .iter()
                        .map(|entries| RateLimitDescriptor {
                            entries: entries
                                .iter()
                                .map(|(key, value)| Entry {
                                    key: (*key).into(),
                                    value: (*value).into(),
                                })
                                .collect(),
                            ..RateLimitDescriptor::default()
                        })
                        .collect(),
                    hits_addend: 0,
                };
                let answer = self
                    .runtime
                    .block_on(self.client.should_rate_limit(request))
                    .unwrap()
                    .into_inner();
                from_grpc(answer)
            }
            Api::Json => {
                let body = json!({
                    "domain": domain,
                    "descriptors": descriptors.iter().map(|entries| json!({
                        "entries": entries.iter()
                            .map(|(k, v)| json!({"key": k, "value": v}))
                            .collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                });
                let (status, body) = self.server.call("/json", &body);
                let answer = from_json(body);
                let expected = if answer.overall == "OVER_LIMIT" {
                    429
                } else {
                    200
                };
                assert_eq!(status, expected, "{:?}", answer.raw);
                answer
            }
        }
    }

    /// The overall code and the descriptors' codes.
    fn codes(&mut self, domain: &str, descriptors: &[Entries<'_>]) -> (String, Vec<String>) {
        let answer = self.ask(domain, descriptors);
        (
            answer.overall,
            answer.statuses.into_iter().map(|s| s.code).collect(),
        )
    }

    /// The code and limit of one descriptor asked alone.
    fn one(&mut self, domain: &str, entries: Entries<'_>) -> Status {
        self.ask(domain, &[entries]).statuses.remove(0)
    }
}

fn code_name(code: i32) -> String {
    match code {
        1 => "OK".into(),
        2 => "OVER_LIMIT".into(),
        other => format!("code {other}"),
    }
}

fn from_grpc(answer: RateLimitResponse) -> Answer {
    let raw = json!({
        "dynamicMetadata": answer.dynamic_metadata.as_ref().map(struct_json),
    });
    Answer {
        overall: code_name(answer.overall_code),
        statuses: answer
            .statuses
            .into_iter()
            .map(|s| Status {
                code: code_name(s.code),
                limit: s.current_limit.map_or(0, |l| l.requests_per_unit),
            })
            .collect(),
        raw,
    }
}

/// A `google.protobuf.Struct` as the JSON it stands for.
fn struct_json(s: &prost_types::Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect(),
    )
}

fn value_json(v: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value_json).collect()),
        Some(Kind::StructValue(s)) => struct_json(s),
    }
}

fn from_json(body: Value) -> Answer {
    Answer {
        overall: body["overallCode"].as_str().unwrap().to_owned(),
        statuses: body["statuses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| Status {
                code: s["code"].as_str().unwrap().to_owned(),
                limit: s["currentLimit"]["requestsPerUnit"].as_u64().unwrap_or(0) as u32,
            })
            .collect(),
        raw: body,
    }
}

fn ok(limit: u32) -> Status {
    Status {
        code: "OK".into(),
        limit,
    }
}

fn over(limit: u32) -> Status {
    Status {
        code: "OVER_LIMIT".into(),
        limit,
    }
}

#[test]
fn wildcards_in_every_position_apply_their_limits() {
    for api in APIS {
        let mut s = Session::start(api, &["wildcards.yaml"], &[]);
        let mut path = |v: &str| s.one("wildcards", &[("path", v)]);
        // Middle: each value has its own counter of 1.
        assert_eq!(path("barab"), ok(1), "{api:?}");
        assert_eq!(path("barab"), over(1), "{api:?}");
        assert_eq!(path("bar123b"), ok(1), "{api:?}");
        assert_eq!(path("barb"), ok(1), "{api:?}");
        // Several stars.
        assert_eq!(path("foo123bar456baz"), ok(2), "{api:?}");
        assert_eq!(path("foobarbaz"), ok(2), "{api:?}");
        assert_eq!(path("foobarbaz"), ok(2), "{api:?}");
        assert_eq!(path("foobarbaz"), over(2), "{api:?}");
        // Leading, trailing, exact, and the catch-all `*`.
        assert_eq!(path("x.json"), ok(3), "{api:?}");
        assert_eq!(path("/api/users"), ok(4), "{api:?}");
        assert_eq!(path("/api/health"), ok(5), "{api:?}");
        assert_eq!(path("nothing-else"), ok(6), "{api:?}");
        // Nested wildcards.
        let user = s.one("wildcards", &[("tenant", "t-9"), ("user", "a-admin-b")]);
        assert_eq!(user, ok(7), "{api:?}");
        let user = s.one("wildcards", &[("tenant", "t-9"), ("user", "bob")]);
        assert_eq!(user, ok(8), "{api:?}");
        assert_eq!(s.one("wildcards", &[("method", "GET")]), ok(10), "{api:?}");
        assert_eq!(s.one("wildcards", &[("method", "PUT")]), ok(9), "{api:?}");
    }
}

#[test]
fn a_shared_threshold_is_one_counter_for_every_matching_value() {
    for api in APIS {
        let mut s = Session::start(api, &["share-threshold.yaml"], &[]);
        let mut files = |v: &str| s.one("shared", &[("files", v)]);
        assert_eq!(files("/foo/bar1"), ok(3), "{api:?}");
        assert_eq!(files("/foo/bar2"), ok(3), "{api:?}");
        assert_eq!(files("/foo/bar/x"), ok(3), "{api:?}");
        assert_eq!(files("/foo/bar4"), over(3), "{api:?}");
        assert_eq!(files("/foo/bar1"), over(3), "{api:?}");
        // The explicit value beats the shared wildcard, with its own counter.
        assert_eq!(files("/foo/bar/special"), ok(1), "{api:?}");
        assert_eq!(files("/foo/bar/special"), over(1), "{api:?}");
        // Without share_threshold, each value counts on its own.
        for v in ["/own/a", "/own/a", "/own/b", "/own/b"] {
            assert_eq!(files(v), ok(2), "{api:?} {v}");
        }
        assert_eq!(files("/own/a"), over(2), "{api:?}");
        // Nested shared wildcards: one counter across tenants and objects.
        let (overall, _) = s.codes("shared", &[&[("tenant", "t1"), ("object", "oax")]]);
        assert_eq!(overall, "OK");
        let (overall, _) = s.codes("shared", &[&[("tenant", "t2"), ("object", "obxc")]]);
        assert_eq!(overall, "OK");
        let (overall, _) = s.codes("shared", &[&[("tenant", "t3"), ("object", "ox")]]);
        assert_eq!(overall, "OVER_LIMIT", "{api:?}");
    }
}

/// `/v1/check` of `descriptors` in `domain`: the HTTP status and body.
fn v1_check(s: &Session, domain: &str, descriptors: &[Entries<'_>]) -> (u16, Value) {
    let descriptors: Vec<Value> = descriptors
        .iter()
        .map(|entries| {
            json!({"entries": entries.iter()
                .map(|(k, v)| json!({"key": k, "value": v}))
                .collect::<Vec<_>>()})
        })
        .collect();
    s.server.call(
        "/v1/check",
        &json!({"domain": domain, "descriptors": descriptors}),
    )
}

#[test]
fn quota_mode_rejects_only_when_every_quota_is_over() {
    for api in APIS {
        let mut s = Session::start(api, &["quota-mode.yaml"], &[]);
        let both: [Entries<'_>; 2] = [&[("daily_quota", "u")], &[("monthly_quota", "u")]];
        let ok_ok = ("OK".to_owned(), vec!["OK".to_owned(), "OK".to_owned()]);
        assert_eq!(s.codes("quota", &both), ok_ok, "{api:?}");
        // One quota over: its own code says so, the answer stays OK.
        let (overall, codes) = s.codes("quota", &both);
        assert_eq!(overall, "OK", "{api:?}");
        assert_eq!(codes, ["OVER_LIMIT", "OK"], "{api:?}");
        // Every quota over: OVER_LIMIT.
        let (overall, codes) = s.codes("quota", &both);
        assert_eq!(overall, "OVER_LIMIT", "{api:?}");
        assert_eq!(codes, ["OVER_LIMIT", "OVER_LIMIT"], "{api:?}");

        // Mixed with an ordinary descriptor: the quotas do not rescue it.
        let mixed: [Entries<'_>; 2] = [&[("user", "m")], &[("daily_quota", "m")]];
        let fresh: [Entries<'_>; 2] = [&[("user", "m")], &[("monthly_quota", "m")]];
        assert_eq!(s.codes("quota", &mixed).0, "OK", "{api:?}");
        assert_eq!(s.codes("quota", &fresh).0, "OK", "{api:?}");
        assert_eq!(s.codes("quota", &fresh).0, "OK", "{api:?}");
        // The user (3) is over now; the monthly quota (2) is over too.
        let (overall, codes) = s.codes("quota", &fresh);
        assert_eq!(overall, "OVER_LIMIT", "{api:?}");
        assert_eq!(codes, ["OVER_LIMIT", "OVER_LIMIT"], "{api:?}");
    }
}

#[test]
fn global_quota_mode_and_v1_check_agree() {
    for api in APIS {
        let mut s = Session::start(api, &["quota-mode.yaml"], &["--quota-mode"]);
        // `user` is an ordinary rule, a quota under the global switch: with
        // the monthly quota admitting, a user over its limit is let through.
        let request: [Entries<'_>; 2] = [&[("user", "g")], &[("monthly_quota", "g")]];
        let fresh: [Entries<'_>; 2] = [&[("user", "g")], &[("monthly_quota", "h")]];
        for _ in 0..3 {
            assert_eq!(s.codes("quota", &fresh).0, "OK", "{api:?}");
        }
        let (overall, codes) = s.codes("quota", &[request[0], &[("monthly_quota", "i")]]);
        assert_eq!(overall, "OK", "{api:?}");
        assert_eq!(codes, ["OVER_LIMIT", "OK"], "{api:?}");
    }
    // /v1/check decides through the same rule.
    let s = Session::start(Api::Json, &["quota-mode.yaml"], &[]);
    let both: [Entries<'_>; 2] = [&[("daily_quota", "v")], &[("monthly_quota", "v")]];
    assert_eq!(v1_check(&s, "quota", &both).0, 200);
    let (status, body) = v1_check(&s, "quota", &both);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["allowed"], true, "{body}");
    assert_eq!(body["statuses"][0]["allowed"], false, "{body}");
    let (status, body) = v1_check(&s, "quota", &both);
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["allowed"], false, "{body}");
    let s = Session::start(Api::Json, &["quota-mode.yaml"], &["--quota-mode"]);
    let user: [Entries<'_>; 2] = [&[("user", "w")], &[("daily_quota", "w")]];
    assert_eq!(v1_check(&s, "quota", &user).0, 200);
    // The daily quota is over, the user (3) admits: allowed under the switch.
    let (status, body) = v1_check(&s, "quota", &user);
    assert_eq!(status, 200, "{body}");
}

#[test]
fn dynamic_metadata_has_what_an_envoy_filter_reads() {
    let mut s = Session::start(
        Api::Grpc,
        &["metadata.yaml"],
        &["--response-dynamic-metadata"],
    );
    let request: [Entries<'_>; 3] = [
        &[("model", "small")],
        &[("model", "large")],
        &[("tenant", "acme")],
    ];
    let answer = s.ask("routing", &request);
    assert_eq!(answer.overall, "OK");
    assert_eq!(
        answer.raw["dynamicMetadata"],
        json!({
            "domain": "routing",
            "descriptors": [
                {"entries": ["model=small"]},
                {"entries": ["model=large"]},
                {"entries": ["tenant=acme"]},
            ],
            // Every descriptor passed: merged in request order, the first
            // value of a name kept.
            "metadata": {
                "name": "service_1",
                "weight": 3.0,
                "tags": ["a", "b"],
                "nested": {"enabled": true, "ratio": 0.5, "nothing": null, "quoted": "42"},
                "zone": "eu",
                "tier": "free",
            },
        })
    );
    // The small model's quota (1) is used up: it no longer passes, so its
    // metadata is left out and the large model's name is the one sent.
    let answer = s.ask("routing", &request[..2]);
    assert_eq!(answer.overall, "OK");
    assert_eq!(answer.statuses[0], over(1));
    assert_eq!(
        answer.raw["dynamicMetadata"]["metadata"],
        json!({"name": "service_2", "zone": "eu"})
    );

    // Without the flag, no dynamic metadata.
    let mut plain = Session::start(Api::Grpc, &["metadata.yaml"], &[]);
    let answer = plain.ask("routing", &request[..1]);
    assert_eq!(answer.raw["dynamicMetadata"], Value::Null);
}

#[test]
fn value_to_metric_labels_are_capped_per_rule() {
    let s = Session::start(
        Api::Json,
        &["value-to-metric.yaml"],
        &["--metric-values-per-rule", "5"],
    );
    for i in 0..50 {
        let body = json!({
            "domain": "metrics",
            "descriptors": [{"entries": [{"key": "user", "value": format!("u{i}")}]}],
        });
        assert_eq!(s.server.call("/json", &body).0, 200);
    }
    let route = json!({
        "domain": "metrics",
        "descriptors": [{"entries": [{"key": "route", "value": "/a"}, {"key": "method", "value": "GET"}]}],
    });
    assert_eq!(s.server.call("/json", &route).0, 200);
    let text = s.server.get("/metrics").text().unwrap();
    let user_series = text
        .lines()
        .filter(|l| l.starts_with("tollgate_requests_total{") && l.contains("metrics.user"))
        .count();
    assert_eq!(user_series, 6, "5 values and _other_:\n{text}");
    let sample =
        |rule: &str| format!(r#"tollgate_requests_total{{domain="metrics",rule="{rule}"}}"#);
    assert_eq!(s.server.metric(&sample("metrics.user_u0")), 1.0);
    assert_eq!(s.server.metric(&sample("metrics.user._other_")), 45.0);
    assert_eq!(s.server.metric(&sample("metrics.route_/a.method_GET")), 1.0);
}

#[test]
fn merged_domains_load_in_check_rules_and_serve() {
    let dir = fixture("merge");
    let check = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("check-rules")
            .args(extra)
            .arg(&dir)
            .output()
            .unwrap()
    };
    let refused = check(&[]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("already defined in"));
    let merged = check(&["--merge-domains"]);
    assert!(merged.status.success(), "{merged:?}");
    assert!(String::from_utf8_lossy(&merged.stdout).contains("ok (2 domains: merged, other)"));
    let duplicate = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check-rules", "--merge-domains"])
        .arg(fixture("merge-duplicate"))
        .output()
        .unwrap();
    assert!(!duplicate.status.success());
    let message = String::from_utf8_lossy(&duplicate.stderr);
    assert!(
        message.contains("duplicate descriptor merged.user (first at "),
        "{message}"
    );

    for api in APIS {
        let mut s = Session::on(
            api,
            &["--rules", dir.to_str().unwrap()],
            &[("TOLLGATE_MERGE_DOMAINS", "true")],
        );
        assert_eq!(s.one("merged", &[("user", "u")]), ok(1), "{api:?}");
        assert_eq!(s.one("merged", &[("tenant", "t")]), ok(3), "{api:?}");
        assert_eq!(s.one("merged", &[("path", "/abc")]), ok(2), "{api:?}");
        assert_eq!(s.one("other", &[("user", "u")]), ok(5), "{api:?}");
    }
}
