//! Reserve, then settle, through `tollgate serve --store redis://…` on a
//! real `redis-server` with tollgate's module, on each engine
//! (`--redis-engine lua` and `module`): a check with `"settle": true`
//! hands out a ticket, `POST /v1/settle` refunds the difference into the
//! key's state in Redis (which a second instance then sees), or charges it
//! into debt, after which checks are refused with a `Retry-After` that
//! says when it is paid back. Periods of an hour keep every verdict clear
//! of the real clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::Server;
use tollgate_testkit::RedisServer;

fn serve(redis: &RedisServer, engine: &str) -> Server {
    let url = redis.url();
    Server::start(&["--store", &url, "--redis-engine", engine])
}

/// A check of `target` with an estimated cost and `"settle": true`: the
/// answer and its ticket.
fn reserve(server: &Server, target: &Value, estimate: u64) -> (u16, Value, String) {
    let mut body = target.clone();
    body["cost"] = json!(estimate);
    body["settle"] = json!(true);
    let (status, answer) = server.call("/v1/check", &body);
    let ticket = answer["ticket"].as_str().unwrap_or_default().to_owned();
    (status, answer, ticket)
}

fn remaining(server: &Server, target: &Value) -> u64 {
    let mut body = target.clone();
    body["cost"] = json!(0);
    let (status, answer) = server.call("/v1/check", &body);
    assert_eq!(status, 200, "{answer}");
    answer["remaining"].as_u64().unwrap()
}

#[test]
fn settle_refunds_and_charges_into_debt_on_both_engines() {
    let redis = RedisServer::start_with_module();
    for engine in ["lua", "module"] {
        let server = serve(&redis, engine);
        let ready: Value = server.get("/readyz").json().unwrap();
        assert_eq!(ready["engine"], engine, "{ready}");

        // A refund: 80 estimated, 30 used.
        let log = json!({"key": format!("tenant-{engine}"),
            "limit": {"algorithm": "sliding_window_log", "rate": "100/hour"}});
        let (status, answer, ticket) = reserve(&server, &log, 80);
        assert_eq!(status, 200, "{engine}: {answer}");
        assert_eq!(ticket.len(), 32, "{engine}: {answer}");
        assert_eq!(remaining(&server, &log), 20, "{engine}");
        let (status, settled) = server.call("/v1/settle", &json!({"ticket": ticket, "cost": 30}));
        assert_eq!(status, 200, "{engine}: {settled}");
        assert_eq!(
            settled,
            json!({"estimate": 80, "cost": 30, "settled": [
                {"name": "sliding_window_log_100_per_h", "outcome": "refunded"}
            ]}),
            "{engine}"
        );
        assert_eq!(remaining(&server, &log), 70, "{engine}");
        // The refund is in Redis: another instance sees it.
        let other = serve(&redis, engine);
        assert_eq!(remaining(&other, &log), 70, "{engine}");
        drop(other);

        // A charge into debt: 1 token every 6 minutes, 10 at most; 5
        // estimated, 25 used.
        let bucket = json!({"key": format!("debtor-{engine}"),
            "limit": {"algorithm": "token_bucket", "rate": "10/hour"}});
        let (status, answer, ticket) = reserve(&server, &bucket, 5);
        assert_eq!(status, 200, "{engine}: {answer}");
        let (status, settled) = server.call("/v1/settle", &json!({"ticket": ticket, "cost": 25}));
        assert_eq!(status, 200, "{engine}: {settled}");
        assert_eq!(settled["settled"][0]["outcome"], "charged", "{engine}");
        // 25 taken from a full bucket of 10: 15 owed, and one more token to
        // admit a request: 16 × 360 s, less the moments since the check.
        let response = server.post("/v1/check", &bucket);
        assert_eq!(response.status().as_u16(), 429, "{engine}");
        let retry: u64 = response
            .headers()
            .get("retry-after")
            .expect("a Retry-After header")
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            (5_700..=5_760).contains(&retry),
            "{engine}: Retry-After {retry}"
        );
        let refused: Value = response.json().unwrap();
        let retry_ms = refused["retry_after_ms"].as_u64().unwrap();
        assert!(
            (5_700_000..=5_760_000).contains(&retry_ms),
            "{engine}: {refused}"
        );
        assert_eq!(remaining(&server, &bucket), 0, "{engine}");

        // Settling twice is refused and changes nothing.
        let (status, again) = server.call("/v1/settle", &json!({"ticket": ticket, "cost": 0}));
        assert_eq!(status, 409, "{engine}: {again}");
        assert_eq!(again["error"]["code"], "ticket_settled");
    }
}
