//! `tollgate serve --store redis://…` end to end: real tollgate processes on
//! a real `redis-server` this test starts — shared limits across instances
//! with no over-admission, and the `--on-store-error` policies when Redis
//! dies in the middle and comes back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::Server;
use tollgate_testkit::RedisServer;

/// The bound on an answer while Redis is down: twice the store's timeout
/// in these tests (5 s, set by `support::Server`), so that only a hang
/// exceeds it, never a slow answer on a loaded machine.
const NO_HANG: Duration = Duration::from_secs(10);

fn check(server: &Server, key: &str, limit: &Value) -> (u16, Value) {
    server.call("/v1/check", &json!({"key": key, "limit": limit}))
}

fn serve_on(redis: &RedisServer, extra: &[&str]) -> Server {
    let url = redis.url();
    let mut args = vec!["--store", url.as_str()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[test]
fn decisions_and_rules_go_through_redis() {
    let redis = RedisServer::start();
    let rules = tempfile::tempdir().unwrap();
    let path = rules.path().join("rules.yaml");
    support::write(
        &path,
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 2\n",
    );
    let server = serve_on(&redis, &["--rules", path.to_str().unwrap()]);
    let limit = json!({"algorithm": "gcra", "rate": "2/hour"});
    assert_eq!(check(&server, "k", &limit).0, 200);
    assert_eq!(check(&server, "k", &limit).0, 200);
    let (status, body) = check(&server, "k", &limit);
    assert_eq!(status, 429, "{body}");
    assert!(body["retry_after_ms"].as_u64().unwrap() > 1_700_000);
    assert!(body.get("degraded").is_none(), "{body}");

    let request =
        json!({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "u1"}]}]});
    let (status, body) = server.call("/v1/check", &request);
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.call("/v1/check", &request).0, 200);
    assert_eq!(server.call("/v1/check", &request).0, 429);

    // The counters live in Redis: a second instance sees them.
    let other = serve_on(&redis, &["--rules", path.to_str().unwrap()]);
    assert_eq!(other.call("/v1/check", &request).0, 429);
    let (status, ready) = {
        let response = other.get("/readyz");
        (
            response.status().as_u16(),
            response.json::<Value>().unwrap(),
        )
    };
    assert_eq!((status, ready["status"].as_str()), (200, Some("ready")));
    assert!(redis
        .command("DBSIZE")
        .is_some_and(|r| !r.starts_with(":0")));
}

#[test]
fn three_instances_on_one_redis_never_admit_more_than_the_limit() {
    let redis = RedisServer::start();
    let servers: Vec<Server> = (0..3).map(|_| serve_on(&redis, &[])).collect();
    // Every algorithm whose limit is an exact count over the run.
    let limits = [
        json!({"algorithm": "gcra", "rate": "37/hour"}),
        json!({"algorithm": "gcra", "rate": "10/hour", "burst": 25}),
        json!({"algorithm": "token_bucket", "rate": "41/hour"}),
        json!({"algorithm": "sliding_window_log", "rate": "29/hour"}),
        json!({"algorithm": "fixed_window", "rate": "33/day"}),
        json!({"algorithm": "concurrency", "rate": "17/s"}),
    ];
    // (A day's fixed window turns over at midnight UTC; a round takes well
    // under a second.)
    let rounds = limits.iter().cycle().take(3 * limits.len()).enumerate();
    for (round, limit) in rounds {
        let expected = limit["burst"].as_u64().unwrap_or_else(|| {
            limit["rate"]
                .as_str()
                .unwrap()
                .split('/')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        });
        let key = format!("hot{round}");
        // 50 clients, each sending 3 requests, spread over the instances.
        let admitted: u64 = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..50)
                .map(|client| {
                    let server = &servers[client % servers.len()];
                    let (key, limit) = (&key, limit);
                    scope.spawn(move || {
                        (0..3)
                            .filter(|_| check(server, key, limit).0 == 200)
                            .count() as u64
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, expected, "{limit}");
    }
}

/// Requests until `done` says the answer is what it waits for; every answer
/// must come within `bound`.
fn until(
    server: &Server,
    key: &str,
    limit: &Value,
    bound: Duration,
    done: impl Fn(u16, &Value) -> bool,
) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let started = Instant::now();
        let (status, body) = check(server, key, limit);
        assert!(
            started.elapsed() < bound,
            "an answer took {:?}",
            started.elapsed()
        );
        if done(status, &body) {
            return (status, body);
        }
        assert!(
            Instant::now() < deadline,
            "never got there; last {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn degraded(body: &Value) -> bool {
    body["degraded"] == json!(true)
}

/// Kills Redis under a running instance, checks the policy's answers and
/// readiness, restarts Redis and waits for decisions to come from it again.
fn outage(policy: &str, while_down: impl Fn(&Server, &Value)) {
    let mut redis = RedisServer::start();
    let server = serve_on(&redis, &["--on-store-error", policy]);
    let limit = json!({"algorithm": "gcra", "rate": "3/hour"});
    assert_eq!(check(&server, "k", &limit).0, 200);
    redis.kill();
    let bound = NO_HANG;
    let started = Instant::now();
    check(&server, "k", &limit);
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());
    while_down(&server, &limit);
    let errors = server.metric("tollgate_store_errors_total");
    assert!(errors >= 1.0, "{errors}");
    redis.restart();
    // The first answer from Redis again: not degraded, and Redis (restarted
    // empty) counts from zero.
    let (status, body) = until(&server, "fresh", &limit, bound, |s, b| {
        s == 200 && !degraded(b)
    });
    assert_eq!(status, 200);
    assert_eq!(body["remaining"], json!(2));
    let ready = server.get("/readyz").json::<Value>().unwrap();
    assert_eq!(ready["status"], json!("ready"));
}

#[test]
fn fail_closed_answers_503_while_redis_is_down() {
    outage("fail_closed", |server, limit| {
        let (status, body) = check(server, "k", limit);
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["code"], json!("store_unavailable"));
        assert_eq!(server.get("/readyz").status().as_u16(), 503);
    });
}

#[test]
fn fail_open_admits_and_marks_the_answer_degraded() {
    outage("fail_open", |server, limit| {
        for _ in 0..10 {
            let response = server.post("/v1/check", &json!({"key": "k", "limit": limit}));
            assert_eq!(response.status().as_u16(), 200);
            assert_eq!(response.headers()["x-ratelimit-degraded"], "1");
            assert!(degraded(&response.json::<Value>().unwrap()));
        }
        let ready = server.get("/readyz");
        assert_eq!(ready.status().as_u16(), 200);
        assert_eq!(ready.json::<Value>().unwrap()["status"], json!("degraded"));
    });
}

#[test]
fn local_counts_in_memory_while_redis_is_down() {
    outage("local", |server, limit| {
        for _ in 0..3 {
            let (status, body) = check(server, "local", limit);
            assert_eq!(status, 200, "{body}");
            assert!(degraded(&body));
        }
        let (status, body) = check(server, "local", limit);
        assert_eq!(status, 429, "the local store enforces the limit: {body}");
        assert!(degraded(&body));
    });
}

/// The Envoy gRPC API follows the same policy: `UNAVAILABLE` under
/// `fail_closed`, an `OK` answer under `fail_open`.
#[test]
fn grpc_follows_the_store_error_policy() {
    use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use tollgate_server::proto::envoy::service::ratelimit::v3::RateLimitRequest;

    let mut redis = RedisServer::start();
    let rules = tempfile::tempdir().unwrap();
    let path = rules.path().join("rules.yaml");
    support::write(
        &path,
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 3\n",
    );
    let path = path.to_str().unwrap();
    let closed = serve_on(&redis, &["--rules", path]);
    let open = serve_on(&redis, &["--rules", path, "--on-store-error", "fail_open"]);
    let request = || RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: "u".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut closed_client = RateLimitServiceClient::connect(closed.grpc.clone())
            .await
            .unwrap();
        let mut open_client = RateLimitServiceClient::connect(open.grpc.clone())
            .await
            .unwrap();
        let answer = closed_client
            .should_rate_limit(request())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.overall_code, Code::Ok as i32);
        redis.kill();
        let started = Instant::now();
        let status = closed_client
            .should_rate_limit(request())
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(started.elapsed() < NO_HANG, "{:?}", started.elapsed());
        let answer = open_client
            .should_rate_limit(request())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.overall_code, Code::Ok as i32);
    });
}

/// Where the load was when a request started or ended: Redis up, being
/// killed, down, being restarted, back.
const UP: u8 = 0;
const KILLING: u8 = 1;
const DOWN: u8 = 2;
const RESTARTING: u8 = 3;
const BACK: u8 = 4;

/// One answer seen by a load thread.
struct Answer {
    started_in: u8,
    ended_in: u8,
    status: u16,
    degraded: bool,
    code: Option<String>,
    took: Duration,
}

/// Polls `ready` (a condition on the load so far, not a fixed pause) until
/// it holds, failing after 30 s.
fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Redis dies in the middle of a concurrent load on three instances, one
/// per policy, and comes back: every request gets an answer within the
/// bound (requests in flight at the kill included), the answers while it
/// is down are the policy's, every failure is counted, and decisions come
/// from Redis again after the restart without restarting tollgate.
#[test]
fn redis_killed_under_load_every_policy_answers_in_time_and_recovers() {
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
    use std::sync::Mutex;

    const THREADS_PER_SERVER: usize = 5;
    let bound = NO_HANG;
    let mut redis = RedisServer::start();
    let policies = ["fail_closed", "fail_open", "local"];
    let servers: Vec<Server> = policies
        .iter()
        .map(|policy| serve_on(&redis, &["--on-store-error", policy]))
        .collect();
    // High enough that Redis never rejects: a rejection would be cached
    // locally and answered without Redis, hiding the outage.
    let limit = json!({"algorithm": "gcra", "rate": "1000000/s"});
    let phase = AtomicU8::new(UP);
    let stop = AtomicBool::new(false);
    let answers: Vec<Mutex<Vec<Answer>>> = servers.iter().map(|_| Mutex::default()).collect();
    // Per server: answers that started and ended in DOWN, and answers from
    // Redis (not degraded) that started in BACK.
    let down: Vec<AtomicU64> = servers.iter().map(|_| AtomicU64::new(0)).collect();
    let recovered: Vec<AtomicU64> = servers.iter().map(|_| AtomicU64::new(0)).collect();
    let up: Vec<AtomicU64> = servers.iter().map(|_| AtomicU64::new(0)).collect();

    std::thread::scope(|scope| {
        for (i, server) in servers.iter().enumerate() {
            for thread in 0..THREADS_PER_SERVER {
                let (phase, stop, limit) = (&phase, &stop, &limit);
                let (answers, down, recovered, up) = (&answers[i], &down[i], &recovered[i], &up[i]);
                scope.spawn(move || {
                    let mut n = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let key = format!("load{thread}-{}", n % 7);
                        n += 1;
                        let started_in = phase.load(Ordering::SeqCst);
                        let started = Instant::now();
                        let response =
                            server.post("/v1/check", &json!({"key": key, "limit": limit}));
                        let took = started.elapsed();
                        let ended_in = phase.load(Ordering::SeqCst);
                        let status = response.status().as_u16();
                        let body: Value = response.json().unwrap();
                        let answer = Answer {
                            started_in,
                            ended_in,
                            status,
                            degraded: degraded(&body),
                            code: body["error"]["code"].as_str().map(str::to_owned),
                            took,
                        };
                        match (started_in, ended_in) {
                            (UP, UP) => up.fetch_add(1, Ordering::SeqCst),
                            (DOWN, DOWN) => down.fetch_add(1, Ordering::SeqCst),
                            (BACK, BACK) if status == 200 && !answer.degraded => {
                                recovered.fetch_add(1, Ordering::SeqCst)
                            }
                            _ => 0,
                        };
                        answers.lock().unwrap().push(answer);
                    }
                });
            }
        }
        let all_reach =
            |counts: &[AtomicU64], n: u64| counts.iter().all(|c| c.load(Ordering::SeqCst) >= n);
        wait_until("load on Redis", || all_reach(&up, 50));
        phase.store(KILLING, Ordering::SeqCst);
        redis.kill();
        phase.store(DOWN, Ordering::SeqCst);
        wait_until("load while Redis is down", || all_reach(&down, 50));
        phase.store(RESTARTING, Ordering::SeqCst);
        redis.restart();
        phase.store(BACK, Ordering::SeqCst);
        wait_until("decisions from Redis again", || all_reach(&recovered, 20));
        stop.store(true, Ordering::SeqCst);
    });

    for ((policy, server), answers) in policies.iter().zip(&servers).zip(answers) {
        let answers = answers.into_inner().unwrap();
        let slowest = answers.iter().map(|a| a.took).max().unwrap();
        assert!(slowest < bound, "{policy}: an answer took {slowest:?}");
        let mut while_down = 0;
        for a in &answers {
            let from_redis = a.status == 200 && !a.degraded;
            let policy_answer = match *policy {
                "fail_closed" => a.status == 503 && a.code.as_deref() == Some("store_unavailable"),
                _ => a.status == 200 && a.degraded,
            };
            match (a.started_in, a.ended_in) {
                (UP, UP) => assert!(
                    from_redis,
                    "{policy}: {} {:?} after {:?} before the kill",
                    a.status, a.code, a.took
                ),
                (DOWN, DOWN) => {
                    while_down += 1;
                    assert!(policy_answer, "{policy}: {} while down", a.status);
                }
                // In flight at the kill or the restart, or while
                // reconnecting: either kind of answer, nothing else.
                _ => assert!(
                    from_redis || policy_answer,
                    "{policy}: {} {:?} around a transition",
                    a.status,
                    a.code
                ),
            }
        }
        let errors = server.metric("tollgate_store_errors_total");
        assert!(
            errors >= f64::from(while_down),
            "{policy}: {errors} store errors counted for {while_down} failed calls"
        );
        let ready = server.get("/readyz").json::<Value>().unwrap();
        assert_eq!(ready["status"], json!("ready"), "{policy}");
    }
}
