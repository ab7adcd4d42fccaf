//! The Envoy API over gRPC and over `POST /json` decide alike: the same rules
//! and the same sequence of requests, sent over gRPC to one fresh
//! `tollgate serve` and as JSON to another, give the same overall code and,
//! per descriptor, the same code, `current_limit` and `limit_remaining`; and
//! malformed requests fail the same way (`INVALID_ARGUMENT` and `400`).
//!
//! `duration_until_reset` is read from each server's own clock, so it may
//! differ by the time that passed between the two copies of a request. The
//! copies are sent one right after the other (request `i` over gRPC, then
//! request `i` as JSON), and the time from the first's start to the
//! second's end is measured: the comparison allows that, plus
//! [`RESET_TOLERANCE`] for rounding, however slow a loaded machine is.
//!
//! Fixed windows are epoch-aligned: if an hour or day boundary falls during a
//! run, the two servers may count the requests before and after it in
//! different windows, so such a run is discarded and the sequence run again
//! on fresh servers (no test sleeps).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use support::Server;
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

/// How far the two servers' `duration_until_reset` may differ beyond the
/// time between the two calls (resets are rounded to whole seconds).
const RESET_TOLERANCE: Duration = Duration::from_secs(1);

/// The units, in seconds, of the fixed windows that count below (the one
/// per-second override has a limit of 0 and counts nothing).
const WINDOW_UNITS_SECS: [u64; 2] = [3_600, 86_400];

const RULES: &[(&str, &str)] = &[
    (
        "api.yaml",
        "domain: api
descriptors:
  - key: user                       # key-only: a counter per user
    rate_limit: {name: per_user, unit: hour, requests_per_unit: 4}
  - key: user
    value: vip                      # the exact value wins
    rate_limit: {name: vip, unit: hour, requests_per_unit: 8}
  - key: path
    value: /api/admin*              # wildcards in file order
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: health
    rate_limit: {unlimited: true}
  - key: plan
    value: premium
    rate_limit:
      unit: hour
      requests_per_unit: 100
      replaces: [{name: per_user}]
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
",
    ),
    (
        "messaging.yaml",
        "domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 5}
",
    ),
    (
        "shaped.yaml",
        "domain: shaped
descriptors:
  - key: client
    rate_limit: {algorithm: sliding_window_log, unit: hour, requests_per_unit: 3}
  - key: bucket
    rate_limit: {algorithm: token_bucket, unit: hour, requests_per_unit: 60, burst: 2}
  - key: account
    rate_limits:
      - {unit: hour, requests_per_unit: 3, name: account}
      - {unit: day, requests_per_unit: 5}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
",
    ),
];

/// One request descriptor, for both transports.
#[derive(Clone, Debug)]
struct Desc {
    entries: Vec<(String, String)>,
    /// A request-side override: requests per unit, `envoy.type.v3.RateLimitUnit`.
    limit: Option<(u32, i32)>,
    hits: Option<u64>,
}

/// One request, for both transports.
#[derive(Clone, Debug)]
struct Req {
    domain: String,
    descriptors: Vec<Desc>,
    hits: u32,
}

fn d(entries: &[(&str, &str)]) -> Desc {
    Desc {
        entries: entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        limit: None,
        hits: None,
    }
}

impl Desc {
    fn hits(mut self, hits: u64) -> Desc {
        self.hits = Some(hits);
        self
    }

    fn limit(mut self, requests_per_unit: u32, unit: i32) -> Desc {
        self.limit = Some((requests_per_unit, unit));
        self
    }
}

fn req(domain: &str, descriptors: Vec<Desc>) -> Req {
    Req {
        domain: domain.to_owned(),
        descriptors,
        hits: 0,
    }
}

impl Req {
    fn hits(mut self, hits: u32) -> Req {
        self.hits = hits;
        self
    }

    fn to_proto(&self) -> RateLimitRequest {
        RateLimitRequest {
            domain: self.domain.clone(),
            hits_addend: self.hits,
            descriptors: self
                .descriptors
                .iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .entries
                        .iter()
                        .map(|(key, value)| Entry {
                            key: key.clone(),
                            value: value.clone(),
                        })
                        .collect(),
                    limit: d.limit.map(|(requests_per_unit, unit)| RateLimitOverride {
                        requests_per_unit,
                        unit,
                    }),
                    hits_addend: d.hits,
                })
                .collect(),
        }
    }

    /// The protobuf JSON mapping; valid override units by name (as Envoy's
    /// JSON would have them), others by number.
    fn to_json(&self) -> Value {
        let descriptors: Vec<Value> = self
            .descriptors
            .iter()
            .map(|d| {
                let mut out = json!({
                    "entries": d.entries.iter()
                        .map(|(k, v)| json!({"key": k, "value": v}))
                        .collect::<Vec<_>>(),
                });
                if let Some((requests_per_unit, unit)) = d.limit {
                    let unit = match unit_name(unit) {
                        Some(name) if (1..=6).contains(&unit) => json!(name),
                        _ => json!(unit),
                    };
                    out["limit"] = json!({"requests_per_unit": requests_per_unit, "unit": unit});
                }
                if let Some(hits) = d.hits {
                    out["hits_addend"] = json!(hits);
                }
                out
            })
            .collect();
        json!({"domain": self.domain, "descriptors": descriptors, "hits_addend": self.hits})
    }
}

const SECOND: i32 = 1;
const HOUR: i32 = 3;
const DAY: i32 = 4;

fn unit_name(unit: i32) -> Option<&'static str> {
    [
        "UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK",
    ]
    .get(usize::try_from(unit).ok()?)
    .copied()
}

/// A decision as both transports can express it.
#[derive(Debug, Clone, PartialEq)]
struct Decision {
    overall: String,
    statuses: Vec<Status>,
}

#[derive(Debug, Clone, PartialEq)]
struct Status {
    code: String,
    /// (name, requests_per_unit, unit)
    limit: Option<(String, u32, String)>,
    remaining: u32,
    reset: Option<Duration>,
}

/// What a call gave: a decision, or an error class.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Decided(Decision),
    InvalidArgument,
    OtherError(String),
}

fn code_name(code: i32) -> String {
    match code {
        1 => "OK".into(),
        2 => "OVER_LIMIT".into(),
        other => format!("code {other}"),
    }
}

fn from_proto(answer: RateLimitResponse) -> Decision {
    Decision {
        overall: code_name(answer.overall_code),
        statuses: answer
            .statuses
            .into_iter()
            .map(|s| Status {
                code: code_name(s.code),
                limit: s.current_limit.map(|l| {
                    (
                        l.name,
                        l.requests_per_unit,
                        unit_name(l.unit).unwrap_or("?").to_owned(),
                    )
                }),
                remaining: s.limit_remaining,
                reset: s
                    .duration_until_reset
                    .map(|d| Duration::new(d.seconds as u64, d.nanos as u32)),
            })
            .collect(),
    }
}

/// `"12.5s"` (the JSON mapping of a `google.protobuf.Duration`).
fn parse_duration(text: &str) -> Duration {
    let seconds: f64 = text.strip_suffix('s').unwrap().parse().unwrap();
    Duration::from_secs_f64(seconds)
}

fn from_json(status: u16, body: &Value) -> Outcome {
    match status {
        200 | 429 => {}
        400 => return Outcome::InvalidArgument,
        other => return Outcome::OtherError(format!("HTTP {other}: {body}")),
    }
    let decision = Decision {
        overall: body["overallCode"].as_str().unwrap().to_owned(),
        statuses: body["statuses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| Status {
                code: s["code"].as_str().unwrap().to_owned(),
                limit: s.get("currentLimit").map(|l| {
                    (
                        l["name"].as_str().unwrap_or("").to_owned(),
                        l["requestsPerUnit"].as_u64().unwrap_or(0) as u32,
                        l["unit"].as_str().unwrap().to_owned(),
                    )
                }),
                remaining: s["limitRemaining"].as_u64().unwrap_or(0) as u32,
                reset: s["durationUntilReset"].as_str().map(parse_duration),
            })
            .collect(),
    };
    let expected_status = if decision.overall == "OVER_LIMIT" {
        429
    } else {
        200
    };
    assert_eq!(status, expected_status, "{body}");
    Outcome::Decided(decision)
}

/// The sequence: (request, the overall code it must get, or `None` for a
/// malformed request). Later steps depend on the counts earlier ones left.
fn sequence() -> Vec<(Req, Option<&'static str>)> {
    const OK: Option<&str> = Some("OK");
    const OVER: Option<&str> = Some("OVER_LIMIT");
    let long_value = "v".repeat(1_100);
    let mut steps = Vec::new();
    // Key-only: a counter per value.
    for _ in 0..4 {
        steps.push((req("api", vec![d(&[("user", "alice")])]), OK));
    }
    steps.push((req("api", vec![d(&[("user", "alice")])]), OVER));
    steps.push((req("api", vec![d(&[("user", "bob")])]), OK));
    steps.push((req("api", vec![d(&[("user", "")])]), OK));
    // The exact value.
    for _ in 0..2 {
        steps.push((req("api", vec![d(&[("user", "vip")])]), OK));
    }
    // `replaces`: per_user is dropped, so alice passes although it is over.
    steps.push((
        req(
            "api",
            vec![d(&[("user", "alice")]), d(&[("plan", "premium")])],
        ),
        OK,
    ));
    // Wildcards, first match in file order, a counter per value.
    for expected in [OK, OVER] {
        steps.push((
            req("api", vec![d(&[("path", "/api/admin/users")])]),
            expected,
        ));
    }
    for expected in [OK, OK, OK, OVER] {
        steps.push((req("api", vec![d(&[("path", "/api/items")])]), expected));
    }
    steps.push((req("api", vec![d(&[("path", "/api/orders")])]), OK));
    steps.push((req("api", vec![d(&[("path", "/web")])]), OK));
    // Unlimited, and a limit of 0.
    steps.push((req("api", vec![d(&[("health", "probe")])]).hits(1_000), OK));
    steps.push((req("api", vec![d(&[("blocked", "x")])]), OVER));
    // hits_addend: the request's; a descriptor's 0 (check only); a
    // descriptor's 2 winning over the request's 5.
    steps.push((req("api", vec![d(&[("user", "carol")])]).hits(3), OK));
    steps.push((req("api", vec![d(&[("user", "carol")]).hits(0)]), OK));
    steps.push((
        req("api", vec![d(&[("user", "carol")]).hits(2)]).hits(5),
        OVER,
    ));
    steps.push((req("api", vec![d(&[("user", "carol")]).hits(1)]), OK));
    steps.push((req("api", vec![d(&[("user", "carol")]).hits(0)]), OK));
    // Request-side limit overrides, over a rule and where no rule matches.
    for expected in [OK, OK, OVER] {
        steps.push((
            req("api", vec![d(&[("user", "dave")]).limit(2, HOUR)]),
            expected,
        ));
    }
    for expected in [OK, OVER] {
        steps.push((
            req("api", vec![d(&[("anything", "x")]).limit(1, DAY)]),
            expected,
        ));
    }
    steps.push((
        req("api", vec![d(&[("anything", "y")]).limit(0, SECOND)]),
        OVER,
    ));
    // An unknown domain: OK, no limits, overrides ignored.
    steps.push((
        req(
            "nowhere",
            vec![d(&[("user", "alice")]), d(&[("x", "y")]).limit(0, HOUR)],
        ),
        OK,
    ));
    // Nested descriptors and several per request.
    let marketing = |n: &str| {
        vec![
            d(&[("message_type", "marketing"), ("to_number", n)]),
            d(&[("to_number", n)]),
        ]
    };
    for expected in [OK, OK, OVER] {
        steps.push((req("messaging", marketing("2065550100")), expected));
    }
    steps.push((req("messaging", marketing("2065550101")), OK));
    steps.push((
        req(
            "messaging",
            vec![
                d(&[("message_type", "marketing")]),
                d(&[("message_type", "x"), ("to_number", "1")]),
            ],
        ),
        OK,
    ));
    steps.push((
        req(
            "api",
            vec![
                d(&[("user", "erin")]),
                d(&[("path", "/api/other")]),
                d(&[("health", "h")]),
                d(&[("nothing", "here")]),
                d(&[("blocked", "y")]),
                d(&[("user", "erin"), ("deeper", "x")]),
            ],
        ),
        OVER,
    ));
    // Other algorithms, several limits on one rule, shadow mode.
    for expected in [OK, OK, OK, OVER] {
        steps.push((req("shaped", vec![d(&[("client", "c1")])]), expected));
    }
    for expected in [OK, OK, OVER] {
        steps.push((req("shaped", vec![d(&[("bucket", "b1")])]), expected));
    }
    for expected in [OK, OK, OK, OVER] {
        steps.push((req("shaped", vec![d(&[("account", "a1")])]), expected));
    }
    for _ in 0..3 {
        steps.push((req("shaped", vec![d(&[("trial", "t1")])]), OK));
    }
    // Malformed: each refused, nothing counted.
    let malformed = vec![
        req("", vec![d(&[("user", "alice")])]),
        req("api", vec![]),
        req("api", vec![d(&[])]),
        req("api", vec![d(&[("", "x")])]),
        req("api", vec![d(&[("user", "frank")]).limit(5, 0)]),
        req("api", vec![d(&[("user", "frank")]).limit(5, 9)]),
        req("api", vec![d(&[("user", &long_value)])]),
        req("api", vec![d(&[("user", "frank")]); 65]),
    ];
    for bad in malformed {
        steps.push((bad, None));
    }
    // ... so frank still has his whole budget.
    steps.push((req("api", vec![d(&[("user", "frank")]).hits(0)]), OK));
    steps
}

struct Pair {
    grpc_server: Server,
    json_server: Server,
    runtime: tokio::runtime::Runtime,
    client: RateLimitServiceClient<Channel>,
}

impl Pair {
    fn start(rules: &std::path::Path) -> Pair {
        let args = ["--rules", rules.to_str().unwrap()];
        let grpc_server = Server::start(&args);
        let json_server = Server::start(&args);
        let support::GrpcClient { runtime, client } = grpc_server.grpc_client();
        Pair {
            grpc_server,
            json_server,
            runtime,
            client,
        }
    }

    fn grpc(&mut self, request: &Req) -> Outcome {
        match self
            .runtime
            .block_on(self.client.should_rate_limit(request.to_proto()))
        {
            Ok(answer) => Outcome::Decided(from_proto(answer.into_inner())),
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                Outcome::InvalidArgument
            }
            Err(status) => Outcome::OtherError(format!("{status:?}")),
        }
    }

    fn json(&self, request: &Req) -> Outcome {
        let (status, body) = self.json_server.call("/json", &request.to_json());
        from_json(status, &body)
    }
}

fn now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// Whether a fixed window of the units used here may have ended between
/// `start` and `end` (a second's margin for the servers' own clocks).
fn window_ended(start: Duration, end: Duration) -> bool {
    let margin = Duration::from_secs(1);
    WINDOW_UNITS_SECS.iter().any(|unit| {
        (start.saturating_sub(margin).as_secs() / unit) != ((end + margin).as_secs() / unit)
    })
}

/// Status by status: everything equal but the reset, which may differ by
/// `between`, the time the two calls took, and [`RESET_TOLERANCE`].
fn assert_same(step: usize, request: &Req, (grpc, json, between): &(Outcome, Outcome, Duration)) {
    let context = format!("step {step}: {request:?}\n  gRPC: {grpc:?}\n  JSON: {json:?}");
    let tolerance = *between + RESET_TOLERANCE;
    match (grpc, json) {
        (Outcome::Decided(g), Outcome::Decided(j)) => {
            assert_eq!(g.overall, j.overall, "{context}");
            assert_eq!(g.statuses.len(), j.statuses.len(), "{context}");
            for (gs, js) in g.statuses.iter().zip(&j.statuses) {
                assert_eq!(
                    (&gs.code, &gs.limit, gs.remaining),
                    (&js.code, &js.limit, js.remaining),
                    "{context}"
                );
                match (gs.reset, js.reset) {
                    (None, None) => {}
                    (Some(a), Some(b)) => assert!(
                        a.abs_diff(b) <= tolerance,
                        "resets {a:?} and {b:?} differ by more than {tolerance:?}: {context}"
                    ),
                    _ => panic!("one reset is missing: {context}"),
                }
            }
        }
        (Outcome::InvalidArgument, Outcome::InvalidArgument) => {}
        _ => panic!("different outcomes: {context}"),
    }
}

/// Runs the whole sequence on two fresh servers; `None` when a window may
/// have ended during it.
fn run_once(rules: &std::path::Path) -> Option<Vec<(Outcome, Outcome, Duration)>> {
    let mut pair = Pair::start(rules);
    let start = now();
    let mut outcomes = Vec::new();
    for (request, _) in sequence() {
        let started = Instant::now();
        let grpc = pair.grpc(&request);
        let json = pair.json(&request);
        outcomes.push((grpc, json, started.elapsed()));
    }
    drop((pair.grpc_server, pair.json_server));
    (!window_ended(start, now())).then_some(outcomes)
}

#[test]
fn grpc_and_json_give_the_same_decisions() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in RULES {
        support::write(&dir.path().join(name), text);
    }
    let outcomes = (0..3)
        .find_map(|_| run_once(dir.path()))
        .expect("a window ended during each of 3 runs");
    let steps = sequence();
    assert_eq!(outcomes.len(), steps.len());
    for (i, ((request, expected), outcome)) in steps.iter().zip(&outcomes).enumerate() {
        assert_same(i, request, outcome);
        let grpc = &outcome.0;
        // Both alike is not enough: each step's answer is the one the rules
        // call for.
        match (expected, grpc) {
            (Some(code), Outcome::Decided(decision)) => {
                assert_eq!(
                    &decision.overall, code,
                    "step {i}: {request:?}: {decision:?}"
                );
            }
            (None, Outcome::InvalidArgument) => {}
            (expected, got) => panic!("step {i}: {request:?}: expected {expected:?}, got {got:?}"),
        }
    }
    // A few statuses in detail.
    let decision = |i: usize| match &outcomes[i].0 {
        Outcome::Decided(d) => d.clone(),
        other => panic!("step {i}: {other:?}"),
    };
    let replaced = decision(9);
    assert_eq!(replaced.statuses[0].limit, None, "per_user replaced");
    assert_eq!(
        replaced.statuses[1].limit,
        Some((String::new(), 100, "HOUR".into()))
    );
    let unlimited = decision(18);
    assert_eq!(unlimited.statuses[0].remaining, u32::MAX);
    let many = steps
        .iter()
        .position(|(r, _)| r.descriptors.len() == 6)
        .unwrap();
    let codes: Vec<String> = decision(many)
        .statuses
        .iter()
        .map(|s| s.code.clone())
        .collect();
    assert_eq!(codes, ["OK", "OK", "OK", "OK", "OVER_LIMIT", "OK"]);
    let last = decision(outcomes.len() - 1);
    assert_eq!(
        last.statuses[0].remaining, 4,
        "malformed requests counted nothing"
    );
}
