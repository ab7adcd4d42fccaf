//! What the runtime-override tests share, on `serve` and on the gateway's
//! admin port alike: the admin token, an override's JSON, and calls of
//! `/v1/overrides/api` with the token.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::PATIENCE;

/// The admin token the tests start their processes with.
pub(crate) const TOKEN: &str = "t0ken";

/// One HTTP client for every call of a test binary.
pub(crate) fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| Client::builder().timeout(PATIENCE).build().unwrap())
}

/// An override of the descriptor `key` = `value`: `per_hour` requests an
/// hour in an hour-long sliding log (no window boundary falls inside a
/// test).
pub(crate) fn override_of(key: &str, value: &str, per_hour: u64) -> Value {
    json!({
        "entries": [{"key": key, "value": value}],
        "rate_limit": {"unit": "hour", "requests_per_unit": per_hour, "algorithm": "sliding_window_log"}
    })
}

/// `METHOD base/v1/overrides/api` with the token: status and body.
pub(crate) fn send(base: &str, method: Method, body: Option<&Value>) -> (u16, Value) {
    let mut request = client()
        .request(method, format!("{base}/v1/overrides/api"))
        .bearer_auth(TOKEN);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

/// Until `done` holds for the listing at `base` (a change made elsewhere
/// arriving), at most [`PATIENCE`].
pub(crate) fn until_listed(base: &str, done: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let (status, page) = send(base, Method::GET, None);
        assert_eq!(status, 200, "{page}");
        if done(&page) {
            return page;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the change never arrived: {page}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
