//! The memory cap under a flood of new keys, through `tollgate serve`'s HTTP
//! API (issue: a key flood must not free a throttled key): for every
//! algorithm, a key throttled before the flood is still throttled after it,
//! although the flood made the store evict thousands of states.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::Server;

/// An hour boundary (fixed windows start here), in ms since the epoch.
const T0: u64 = 472_222 * 3_600_000;
/// New keys per algorithm: three times what a table holds at this cap on
/// the largest default shard count (every table keeps its guaranteed 14
/// keys a shard, 256 shards at most, and the cap allows no more), so its
/// shards evict over and over.
const FLOOD: u64 = 3 * 14 * 256;
/// Clients sending the flood at once.
const FLOODERS: u64 = 4;

fn check(server: &Server, key: &str, limit: &Value, at_ms: u64) -> (u16, Value) {
    server.call(
        "/v1/check",
        &json!({"key": key, "limit": limit, "cost": 1, "at_ms": at_ms}),
    )
}

#[test]
fn a_key_flood_does_not_free_a_throttled_key_for_any_algorithm() {
    let server = Server::start(&["--trust-client-time", "--memory-max-bytes", "65536"]);
    let algorithms = [
        "token_bucket",
        "gcra",
        "leaky_bucket",
        "fixed_window",
        "sliding_window_log",
        "sliding_window_counter",
        "stepped_window",
        "concurrency",
    ];
    for algorithm in algorithms {
        let limit = json!({"algorithm": algorithm, "rate": "5/h"});
        let victim = format!("victim-{algorithm}");
        for i in 0..5 {
            let (status, body) = check(&server, &victim, &limit, T0 + i);
            assert_eq!(status, 200, "{algorithm}: {body}");
        }
        let (status, body) = check(&server, &victim, &limit, T0 + 5);
        assert_eq!(status, 429, "{algorithm}: {body}");
        // The flood: one request per new key, within a second (inside every
        // window and a concurrency lease's lifetime), all admitted.
        std::thread::scope(|s| {
            for flooder in 0..FLOODERS {
                let (server, limit) = (&server, &limit);
                s.spawn(move || {
                    for i in (flooder..FLOOD).step_by(FLOODERS as usize) {
                        let key = format!("flood-{i}");
                        let (status, body) = check(server, &key, limit, T0 + 10 + i / 16);
                        assert_eq!(status, 200, "{algorithm}: flood key {i}: {body}");
                    }
                });
            }
        });
        let (status, body) = check(&server, &victim, &limit, T0 + 1_000);
        assert_eq!(
            status, 429,
            "{algorithm}: the flood freed the victim: {body}"
        );
        assert_eq!(body["remaining"], 0, "{algorithm}: {body}");
    }
}
