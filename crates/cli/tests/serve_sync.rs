//! `tollgate serve --sync async` end to end: three real tollgate processes
//! on one real `redis-server` (with tollgate's module) hand a limit off
//! through Redis — each decides locally and syncs in the background — and
//! the answers and metrics say so. Requests carry one trusted `at_ms`, so
//! no window boundary can fall in the middle; the test waits for the
//! usage to reach Redis (read there), never for a time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
#[path = "support/sync.rs"]
mod sync;

use std::process::Command;

use serde_json::{json, Value};
use support::Server;
use sync::{reaches, Mode};
use tollgate_testkit::RedisServer;

fn serve_async(redis: &RedisServer) -> Server {
    sync::serve(redis, Mode::Async("20ms"))
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
