//! Runtime overrides through the real binary: kept across a restart with
//! `--snapshot` (in `PATH.overrides`), applied on gRPC as on HTTP, and
//! behind the admin token.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/overrides.rs"]
mod overrides;
mod support;

use overrides::{until_listed as until_listed_at, TOKEN};
use serde_json::{json, Value};
use support::Server;
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::proto::envoy::service::ratelimit::v3::RateLimitRequest;

/// Hour-long sliding logs: no window boundary falls inside a test.
const RULES: &str = "\
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_window_log}
";

fn start(dir: &tempfile::TempDir) -> Server {
    let snapshot = dir.path().join("state.snap");
    start_with(dir, &["--snapshot", snapshot.to_str().unwrap()])
}

/// `serve` with the test rules, the token and `args`.
fn start_with(dir: &tempfile::TempDir, args: &[&str]) -> Server {
    let rules = dir.path().join("rules.yaml");
    support::write(&rules, RULES);
    let mut all = vec!["--rules", rules.to_str().unwrap(), "--admin-token", TOKEN];
    all.extend_from_slice(args);
    Server::start(&all)
}

/// `serve` on the store at `url`.
fn start_on(dir: &tempfile::TempDir, url: &str) -> Server {
    start_with(dir, &["--store", url])
}

fn start_on_redis(dir: &tempfile::TempDir, redis: &tollgate_testkit::RedisServer) -> Server {
    start_on(dir, &redis.url())
}

fn send(server: &Server, method: reqwest::Method, body: Option<&Value>) -> (u16, Value) {
    overrides::send(&server.base, method, body)
}

/// Checks of `user` admitted before the first refusal (at most 10).
fn admitted(server: &Server, user: &str) -> usize {
    let request =
        json!({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": user}]}]});
    (0..10)
        .take_while(|_| server.call("/v1/check", &request).0 == 200)
        .count()
}

fn grpc_admitted(server: &Server, user: &str) -> usize {
    let mut grpc = server.grpc_client();
    let request = RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: user.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    (0..10)
        .take_while(|_| {
            let answer = grpc
                .runtime
                .block_on(grpc.client.should_rate_limit(request.clone()))
                .unwrap()
                .into_inner();
            answer.overall_code == Code::Ok as i32
        })
        .count()
}

fn override_of(user: &str, per_hour: u64) -> Value {
    overrides::override_of("user", user, per_hour)
}

#[test]
fn overrides_survive_a_restart_with_a_snapshot_and_apply_on_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let first = start(&dir);
    let (status, answer) = send(&first, reqwest::Method::PUT, Some(&override_of("vip", 5)));
    assert_eq!(status, 201, "{answer}");
    send(&first, reqwest::Method::PUT, Some(&override_of("gone", 7)));
    let gone = json!({"entries": [{"key": "user", "value": "gone"}]});
    assert_eq!(
        send(&first, reqwest::Method::DELETE, Some(&gone)).1["removed"],
        true
    );
    assert_eq!(admitted(&first, "vip"), 5);
    assert_eq!(grpc_admitted(&first, "vip2"), 2);
    assert!(first.stop().success());
    assert!(dir.path().join("state.snap.overrides").exists());

    let second = start(&dir);
    let (status, page) = send(&second, reqwest::Method::GET, None);
    assert_eq!(status, 200);
    assert_eq!(page["count"], 1, "{page}");
    assert_eq!(page["overrides"][0], override_of("vip", 5), "{page}");
    // The quota used before the restart stays used (the snapshot), under
    // the override's limit.
    assert_eq!(admitted(&second, "vip"), 0);
    // gRPC decides by the override too; other users keep the rule.
    send(
        &second,
        reqwest::Method::PUT,
        Some(&override_of("carol", 4)),
    );
    assert_eq!(grpc_admitted(&second, "carol"), 4);
    assert_eq!(admitted(&second, "dave"), 2);
}

#[test]
fn without_the_token_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir);
    let url = format!("{}/v1/overrides/api", server.base);
    let put = server
        .client()
        .put(&url)
        .json(&override_of("vip", 5))
        .send()
        .unwrap();
    assert_eq!(put.status().as_u16(), 401);
    let list = server.client().get(&url).send().unwrap();
    assert_eq!(list.status().as_u16(), 401);
    assert_eq!(admitted(&server, "vip"), 2);
}

/// Until `done` holds for `server`'s listing (another instance's change
/// arriving).
fn until_listed(server: &Server, done: impl Fn(&Value) -> bool) -> Value {
    until_listed_at(&server.base, done)
}

#[test]
fn on_redis_a_second_instance_sees_every_change() {
    let redis = tollgate_testkit::RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let one = start_on_redis(&dir, &redis);
    let two = start_on_redis(&dir, &redis);

    let (status, answer) = send(&one, reqwest::Method::PUT, Some(&override_of("vip", 5)));
    assert_eq!(status, 201, "{answer}");
    // The instance that made the change decides by it at once.
    assert_eq!(send(&one, reqwest::Method::GET, None).1["count"], 1);
    let page = until_listed(&two, |page| page["count"] == 1);
    assert_eq!(page["overrides"][0], override_of("vip", 5));
    // Counters are shared too: the two instances together admit 5.
    assert_eq!(admitted(&one, "vip") + admitted(&two, "vip"), 5);
    assert_eq!(admitted(&two, "bob"), 2);

    // A replacement and a removal made on the second reach the first.
    send(&two, reqwest::Method::PUT, Some(&override_of("carol", 4)));
    let gone = json!({"entries": [{"key": "user", "value": "vip"}]});
    assert_eq!(
        send(&two, reqwest::Method::DELETE, Some(&gone)).1["removed"],
        true
    );
    let page = until_listed(&one, |page| {
        page["count"] == 1 && page["overrides"][0]["entries"][0]["value"] == "carol"
    });
    assert_eq!(page["overrides"][0], override_of("carol", 4));

    // A change whose message was lost (written straight into Redis, with
    // its version, and no message) arrives by the version poll.
    let eve = r#"'{"rate_limit":{"algorithm":"sliding_window_log","requests_per_unit":3,"unit":"hour"}}'"#;
    let hset = format!("HSET 'tollgate:{{overrides}}:d:api' '4:user3:eve' {eve}");
    assert!(redis.command(&hset).is_some_and(|r| r.starts_with(":1")));
    let bump = "HINCRBY 'tollgate:{overrides}:versions' api 1";
    assert!(redis.command(bump).is_some_and(|r| r.starts_with(':')));
    for server in [&one, &two] {
        until_listed(server, |page| page["count"] == 2);
    }
    assert_eq!(admitted(&one, "eve"), 3);

    // A third instance started later reads them all at start.
    let three = start_on_redis(&dir, &redis);
    let page = until_listed(&three, |page| page["count"] == 2);
    // Key order: shorter values first (each is length-prefixed).
    assert_eq!(page["overrides"][0]["entries"][0]["value"], "eve");
    assert_eq!(page["overrides"][1], override_of("carol", 4));
}

#[test]
fn on_redis_a_change_while_redis_is_down_is_refused_and_nothing_changes() {
    let mut redis = tollgate_testkit::RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let server = start_on_redis(&dir, &redis);
    redis.kill();
    let (status, answer) = send(&server, reqwest::Method::PUT, Some(&override_of("vip", 5)));
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "store_unavailable");
    assert_eq!(send(&server, reqwest::Method::GET, None).1["count"], 0);
}

#[test]
fn on_a_redis_cluster_an_instance_sees_the_changes_another_makes() {
    let cluster = tollgate_testkit::RedisCluster::start(3, 0);
    let dir = tempfile::tempdir().unwrap();
    // Each instance's first seed differs, and so does the node its pub/sub
    // connection is on: messages must cross the cluster.
    let one = start_on(&dir, &cluster.url_from(0));
    let two = start_on(&dir, &cluster.url_from(1));

    let (status, answer) = send(&one, reqwest::Method::PUT, Some(&override_of("vip", 5)));
    assert_eq!(status, 201, "{answer}");
    let page = until_listed(&two, |page| page["count"] == 1);
    assert_eq!(page["overrides"][0], override_of("vip", 5));
    // The counter lives in the cluster too: the two together admit 5.
    assert_eq!(admitted(&one, "vip") + admitted(&two, "vip"), 5);

    let gone = json!({"entries": [{"key": "user", "value": "vip"}]});
    assert_eq!(
        send(&two, reqwest::Method::DELETE, Some(&gone)).1["removed"],
        true
    );
    until_listed(&one, |page| page["count"] == 0);
    // The rules again, on the rule's own counter.
    assert_eq!(admitted(&one, "vip"), 2);
}
