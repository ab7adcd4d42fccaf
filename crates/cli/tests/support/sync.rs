//! What the tests of `tollgate serve --sync` share: instances on one real
//! `redis-server`, in async or exact mode, and the count a fixed window
//! holds in Redis, read there (not from an instance's metrics, which a
//! batch that left before the last admission could satisfy).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tollgate_testkit::RedisServer;

use crate::support::{Server, PATIENCE};

/// How instances share the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `--sync async --sync-interval INTERVAL`.
    Async(&'static str),
    /// Every decision in Redis (the default).
    Exact,
}

/// `tollgate serve` on `redis` in `mode`, trusting the requests' `at_ms`.
pub(crate) fn serve(redis: &RedisServer, mode: Mode) -> Server {
    let url = redis.url();
    let mut args = vec!["--store", url.as_str(), "--trust-client-time"];
    if let Mode::Async(interval) = mode {
        args.extend(["--sync", "async", "--sync-interval", interval]);
    }
    Server::start(&args)
}

/// Milliseconds since the Unix epoch now: one `at_ms` for a whole test,
/// so that no window boundary can fall in the middle of it.
pub(crate) fn at_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The bulk strings of a raw RESP reply (an array of them, or one).
pub(crate) fn bulk_strings(reply: &str) -> Vec<&str> {
    reply
        .split("\r\n")
        .filter(|line| !line.is_empty() && !line.starts_with(['*', '$']))
        .collect()
}

/// The count of the one fixed-window state Redis holds (None when it
/// holds none or cannot be asked).
pub(crate) fn held(redis: &RedisServer) -> Option<u64> {
    let keys = redis.command("KEYS tollgate:*")?;
    let key = *bulk_strings(&keys).first()?;
    let values = redis.command(&format!("HVALS {key}"))?;
    // A fixed window's value: `window count`.
    bulk_strings(&values)
        .first()
        .and_then(|value| value.split(' ').nth(1))
        .and_then(|n| n.parse::<u64>().ok())
}

/// Waits until Redis holds `count` in the one fixed-window state it has:
/// the usage the instances admitted has reached it.
pub(crate) fn reaches(redis: &RedisServer, count: u64) {
    let start = Instant::now();
    loop {
        let held = held(redis);
        if held == Some(count) {
            return;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "Redis holds {held:?}, not {count}"
        );
        std::thread::yield_now();
    }
}
