//! `tollgate serve --sync async` end to end: three real tollgate processes
//! on one real `redis-server` (with tollgate's module) hand a limit off
//! through Redis — each decides locally and syncs in the background — and
//! the answers and metrics say so; and rules (and inline limits) that say
//! their own `sync` mode are decided that way whatever the process runs.
//! Requests carry one trusted `at_ms`, so no window boundary can fall in
//! the middle; the tests wait for the usage to reach Redis (read there),
//! never for a time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
#[path = "support/sync.rs"]
mod sync;

use std::process::Command;
use std::time::Instant;

use serde_json::{json, Value};
use support::{Server, PATIENCE};
use sync::{at_ms_now, bulk_strings, reaches, Mode};
use tollgate_testkit::RedisServer;

fn serve_async(redis: &RedisServer) -> Server {
    sync::serve(redis, Mode::Async("20ms"))
}

/// The count of the fixed-window state of the one key in Redis whose name
/// holds `part`; `None` while there is none.
fn held_in(redis: &RedisServer, part: &str) -> Option<u64> {
    let keys = redis.command("KEYS tollgate:*").unwrap_or_default();
    let key = bulk_strings(&keys).into_iter().find(|k| k.contains(part))?;
    let values = redis.command(&format!("HVALS {key}")).unwrap_or_default();
    bulk_strings(&values)
        .first()
        .and_then(|value| value.split(' ').nth(1))
        .and_then(|n| n.parse::<u64>().ok())
}

/// Waits until `done` holds (the bound only fails the test).
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "{what}");
        std::thread::yield_now();
    }
}

/// Admits up to `most` requests; how many were admitted.
fn admit(server: &Server, body: &Value, most: u64) -> u64 {
    (0..most)
        .filter(|_| {
            let (status, answer) = server.call("/v1/check", body);
            assert_eq!(answer["sync"], "async", "{answer}");
            status == 200
        })
        .count() as u64
}

#[test]
fn three_instances_hand_a_limit_off_through_redis() {
    let redis = RedisServer::start_with_module();
    let [a, b, c] = [(); 3].map(|()| serve_async(&redis));
    let at_ms = sync::at_ms_now();
    let body = json!({
        "key": "handed",
        "limit": {"algorithm": "fixed_window", "rate": "10/hour"},
        "at_ms": at_ms,
    });
    assert_eq!(admit(&a, &body, 4), 4);
    reaches(&redis, 4);
    assert_eq!(admit(&b, &body, 3), 3);
    reaches(&redis, 7);
    // The third never saw the key: it reads it on first use.
    assert_eq!(admit(&c, &body, 10), 3);
    let (status, answer) = c.call("/v1/check", &body);
    assert_eq!(status, 429, "{answer}");
    assert!(a.metric("tollgate_sync_lag_seconds") < 3600.0);
    // A concurrency limit stays exact: no "sync" mark.
    let lease = json!({
        "key": "leased",
        "limit": {"algorithm": "concurrency", "rate": "1/s"},
    });
    let (status, answer) = a.call("/v1/check", &lease);
    assert_eq!(status, 200, "{answer}");
    assert!(answer.get("sync").is_none(), "{answer}");
    assert_eq!(b.call("/v1/check", &lease).0, 429);
}

/// Two rules that say their own mode, whatever the process's `--sync`.
const MIXED_RULES: &str = "domain: mix
descriptors:
  - key: billing
    rate_limit: {unit: hour, requests_per_unit: 10, sync: exact}
  - key: browsing
    rate_limit: {unit: hour, requests_per_unit: 10, sync: async}
";

#[test]
fn a_rule_says_its_own_sync_mode_whatever_the_process_runs() {
    let redis = RedisServer::start_with_module();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    support::write(&rules, MIXED_RULES);
    let (url, rules) = (redis.url(), rules.to_str().unwrap().to_owned());
    let start = |mode, interval| {
        Server::start(&[
            "--store",
            url.as_str(),
            "--rules",
            rules.as_str(),
            "--sync",
            mode,
            "--sync-interval",
            interval,
            "--trust-client-time",
        ])
    };
    // `a` runs async; `b` exact, with an interval no test waits for: what
    // `b` decides locally stays in `b` until it stops.
    let a = start("async", "20ms");
    let b = start("exact", "1h");
    let at_ms = at_ms_now();
    let request = |key: &str| {
        json!({
            "domain": "mix",
            "descriptors": [{"entries": [{"key": key, "value": "u1"}]}],
            "at_ms": at_ms,
        })
    };

    // `sync: exact`, in the async process too: every request from either
    // instance is decided in Redis, which holds each admission at once,
    // and the two together admit exactly the limit.
    let billing = request("billing");
    let mut admitted = 0;
    for i in 0..16 {
        let server = if i % 2 == 0 { &a } else { &b };
        let (status, answer) = server.call("/v1/check", &billing);
        assert!(answer.get("sync").is_none(), "{answer}");
        assert!(answer["statuses"][0].get("sync").is_none(), "{answer}");
        if status == 200 {
            admitted += 1;
            assert_eq!(held_in(&redis, "billing"), Some(admitted));
        } else {
            assert_eq!(status, 429, "{answer}");
        }
    }
    assert_eq!(admitted, 10);

    // `sync: async`, in the exact process: decided from `b`'s local copy,
    // and not in Redis while `b`'s next batch is an hour away.
    let browsing = request("browsing");
    for _ in 0..3 {
        let (status, answer) = b.call("/v1/check", &browsing);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["sync"], "async", "{answer}");
        assert_eq!(answer["statuses"][0]["sync"], "async", "{answer}");
    }
    assert_eq!(held_in(&redis, "browsing"), None);
    // An inline limit says its own mode too.
    let inline = |sync: &str| {
        json!({
            "key": format!("inline-{sync}"),
            "limit": {"algorithm": "gcra", "rate": "5/hour", "sync": sync},
            "at_ms": at_ms,
        })
    };
    let (status, answer) = b.call("/v1/check", &inline("async"));
    assert_eq!((status, answer["sync"].as_str()), (200, Some("async")));
    let (status, answer) = a.call("/v1/check", &inline("exact"));
    assert_eq!(status, 200, "{answer}");
    assert!(answer.get("sync").is_none(), "{answer}");
    let leases = json!({
        "key": "leased",
        "limit": {"algorithm": "concurrency", "rate": "1/s", "sync": "async"},
    });
    let (status, answer) = a.call("/v1/check", &leases);
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_limit", "{answer}");

    // `b`'s last batch, on stop, takes its usage to Redis.
    assert!(b.stop().success());
    assert_eq!(held_in(&redis, "browsing"), Some(3));
    // `a` never saw the key: it reads it on first use and admits the rest,
    // locally, then syncs it.
    let rest = (0..10)
        .filter(|_| {
            let (status, answer) = a.call("/v1/check", &browsing);
            assert_eq!(answer["sync"], "async", "{answer}");
            status == 200
        })
        .count();
    assert_eq!(rest, 7);
    wait_for("a's batches bring Redis to 10", || {
        held_in(&redis, "browsing") == Some(10)
    });
    wait_for("a's metrics count its batches", || {
        a.metric("tollgate_sync_batches_total") >= 1.0
    });
}

#[test]
fn async_sync_needs_a_shared_store_and_a_known_mode() {
    for (args, part) in [
        (&["--sync", "async"][..], "shared store"),
        (
            &["--store", "redis://127.0.0.1:1", "--sync", "eventually"][..],
            "eventually",
        ),
        (
            &[
                "--store",
                "redis://127.0.0.1:1",
                "--sync",
                "async",
                "--sync-interval",
                "soon",
            ][..],
            "sync_interval",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("serve")
            .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} started");
        assert!(stderr.contains(part), "{args:?}: {stderr}");
    }
}
