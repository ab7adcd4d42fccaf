//! `tollgate serve --redis-engine`: on a Redis with tollgate's module the
//! default (`auto`) decides with it, and `/readyz` and the metric say so; on
//! one without it, `auto` runs the script, and `module` refuses to start
//! with an error that says why.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;

use serde_json::{json, Value};
use support::Server;
use tollgate_testkit::RedisServer;

fn ready(server: &Server) -> Value {
    server.get("/readyz").json::<Value>().unwrap()
}

fn metrics(server: &Server) -> String {
    server.get("/metrics").text().unwrap()
}

#[test]
fn auto_decides_with_the_module_and_says_so() {
    let redis = RedisServer::start_with_module();
    let url = redis.url();
    let server = Server::start(&["--store", &url]);
    let limit = json!({"algorithm": "gcra", "rate": "1/hour"});
    let request = json!({"key": "k", "limit": limit});
    assert_eq!(server.call("/v1/check", &request).0, 200);
    assert_eq!(server.call("/v1/check", &request).0, 429);
    let stats = redis.command("INFO commandstats").unwrap();
    assert!(stats.contains("cmdstat_tollgate.decide2:"), "{stats}");
    assert!(!stats.contains("cmdstat_evalsha:"), "{stats}");
    let ready = ready(&server);
    assert_eq!(ready["engine"], "module", "{ready}");
    let text = metrics(&server);
    assert!(
        text.contains("tollgate_redis_engine{engine=\"module\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("tollgate_redis_engine{engine=\"lua\"} 0"),
        "{text}"
    );
}

#[test]
fn without_the_module_auto_runs_the_script_and_module_refuses_to_start() {
    let redis = RedisServer::start();
    let url = redis.url();
    let server = Server::start_with_env(&["--store", &url], &[("TOLLGATE_REDIS_ENGINE", "auto")]);
    let request = json!({"key": "k", "limit": {"algorithm": "fixed_window", "rate": "1/hour"}});
    assert_eq!(server.call("/v1/check", &request).0, 200);
    assert_eq!(server.call("/v1/check", &request).0, 429);
    assert_eq!(ready(&server)["engine"], "lua");
    assert!(metrics(&server).contains("tollgate_redis_engine{engine=\"lua\"} 1"));

    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .args(["--store", &url, "--redis-engine", "module"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("TOLLGATE.DECIDE") && stderr.contains("not loaded"),
        "{stderr}"
    );
}
