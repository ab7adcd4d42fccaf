//! Hot reload of rules files through the real `tollgate serve`: in-place
//! writes, editors' write-and-rename, a Kubernetes ConfigMap's `..data`
//! swap, broken files, counters across reloads and `POST /v1/rules/reload`.
//!
//! Every wait polls the server (a reload metric or a decision) until a
//! generous deadline; nothing sleeps "to let things settle".

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{write, Server};

/// A minute-window start (a whole day, in fact), so fixed windows count
/// from zero at this instant.
const T: u64 = 1_699_920_000_000;

const OK_RELOADS: &str = r#"tollgate_rules_reloads_total{result="ok"}"#;
const FAILED_RELOADS: &str = r#"tollgate_rules_reloads_total{result="failed"}"#;

/// Domain `api` with a fixed-window limit per minute on `user` (rule A)
/// and one on `path` (rule B).
fn rules(user_per_minute: u64, path_per_minute: u64) -> String {
    format!(
        "domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: {user_per_minute}
  - key: path
    rate_limit:
      unit: minute
      requests_per_unit: {path_per_minute}
"
    )
}

/// Starts a server on the rules at `path`, trusting `at_ms`.
fn serve(path: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--trust-client-time", "--rules", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// `/v1/check` of descriptor `(key, value)` in domain `api` at `T`.
fn check_cost(server: &Server, key: &str, cost: u64) -> (u16, Value) {
    server.call(
        "/v1/check",
        &json!({
            "domain": "api",
            "descriptors": [{"entries": [{"key": key, "value": "42"}]}],
            "cost": cost,
            "at_ms": T,
        }),
    )
}

fn check(server: &Server, key: &str) -> (u16, Value) {
    check_cost(server, key, 1)
}

/// The limit now in force for `key`, read without counting (cost 0).
fn limit_of(server: &Server, key: &str) -> u64 {
    let (status, body) = check_cost(server, key, 0);
    assert_eq!(status, 200, "{body}");
    body["limit"].as_u64().unwrap()
}

/// Polls `condition` every 50 ms until it holds, failing after 30 s.
fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `sample` reaches `at_least`.
fn wait_for_metric(server: &Server, sample: &str, at_least: f64) {
    wait_until(&format!("{sample} >= {at_least}"), || {
        server.metric(sample) >= at_least
    });
}

/// Admits `n` requests for `key`, then checks the next is rejected.
fn exhaust(server: &Server, key: &str, n: u64) {
    for i in 0..n {
        let (status, body) = check(server, key);
        assert_eq!(status, 200, "request {i}: {body}");
    }
    let (status, body) = check(server, key);
    assert_eq!(status, 429, "request {n} should be over the limit: {body}");
}

#[test]
fn an_in_place_write_changes_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    write(&file, &rules(2, 10));
    let server = serve(&file, &[]);
    exhaust(&server, "user", 2);

    write(&file, &rules(4, 10));
    wait_for_metric(&server, OK_RELOADS, 1.0);
    assert_eq!(limit_of(&server, "user"), 4);
    // The changed rule counts afresh: four admissions, then a rejection.
    exhaust(&server, "user", 4);
    assert_eq!(server.metric(FAILED_RELOADS), 0.0);
}

#[test]
fn an_editor_rename_over_the_file_changes_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    write(&file, &rules(2, 10));
    let server = serve(&file, &[]);
    assert_eq!(limit_of(&server, "user"), 2);

    let temp = dir.path().join(".rules.yaml.swp");
    write(&temp, &rules(7, 10));
    std::fs::rename(&temp, &file).unwrap();
    wait_until("the new limit", || limit_of(&server, "user") == 7);
    assert!(server.metric(OK_RELOADS) >= 1.0);
}

#[cfg(unix)]
#[test]
fn a_configmap_data_swap_changes_the_limit() {
    use std::os::unix::fs::symlink;

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("..2026_a")).unwrap();
    write(&root.join("..2026_a/rules.yaml"), &rules(2, 10));
    symlink("..2026_a", root.join("..data")).unwrap();
    symlink("..data/rules.yaml", root.join("rules.yaml")).unwrap();
    let server = serve(root, &[]);
    assert_eq!(limit_of(&server, "user"), 2);

    // What the kubelet does: a new timestamped directory, a new link to it,
    // renamed over `..data` in one step.
    std::fs::create_dir(root.join("..2026_b")).unwrap();
    write(&root.join("..2026_b/rules.yaml"), &rules(9, 10));
    symlink("..2026_b", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(root.join("..2026_a")).unwrap();

    wait_until("the swapped-in limit", || limit_of(&server, "user") == 9);
    assert_eq!(server.metric(FAILED_RELOADS), 0.0);
}

#[test]
fn a_broken_file_keeps_the_previous_rules_until_it_is_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    write(&file, &rules(3, 10));
    let server = serve(&file, &[]);
    let (status, first) = check(&server, "user");
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["remaining"], 2);

    // A YAML syntax error.
    write(&file, "domain: api\ndescriptors:\n  - key: [user\n");
    wait_for_metric(&server, FAILED_RELOADS, 1.0);
    let (status, body) = check(&server, "user");
    assert_eq!(
        (status, &body["limit"], &body["remaining"]),
        (200, &json!(3), &json!(1))
    );

    // An unknown field.
    write(
        &file,
        &rules(50, 10).replace("unit: minute", "unit: minute\n      colour: red"),
    );
    wait_for_metric(&server, FAILED_RELOADS, 2.0);
    let (status, body) = check(&server, "user");
    assert_eq!(
        (status, &body["limit"], &body["remaining"]),
        (200, &json!(3), &json!(0))
    );
    let (status, body) = check(&server, "user");
    assert_eq!(status, 429, "the old limit still rejects: {body}");
    assert_eq!(server.metric(OK_RELOADS), 0.0);

    write(&file, &rules(5, 10));
    wait_for_metric(&server, OK_RELOADS, 1.0);
    assert_eq!(limit_of(&server, "user"), 5);
}

#[test]
fn unchanged_rules_keep_their_counters_and_changed_ones_start_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    write(&file, &rules(5, 5));
    let server = serve(&file, &[]);
    for _ in 0..3 {
        assert_eq!(check(&server, "user").0, 200);
        assert_eq!(check(&server, "path").0, 200);
    }

    // Only rule B (`path`) changes, and it moves in the file.
    let reordered = "domain: api
descriptors:
  - key: path
    rate_limit:
      unit: minute
      requests_per_unit: 6
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 5
";
    write(&file, reordered);
    wait_for_metric(&server, OK_RELOADS, 1.0);

    let (_, a) = check_cost(&server, "user", 0);
    assert_eq!(
        (&a["limit"], &a["remaining"]),
        (&json!(5), &json!(2)),
        "{a}"
    );
    let (_, b) = check_cost(&server, "path", 0);
    assert_eq!(
        (&b["limit"], &b["remaining"]),
        (&json!(6), &json!(6)),
        "{b}"
    );
    exhaust(&server, "user", 2);
}

#[test]
fn the_reload_route_needs_the_token_and_names_the_broken_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    write(&file, &rules(2, 10));
    let server = serve(&file, &["--admin-token", "s3cret"]);
    let reload = |token: Option<&str>| {
        let mut request = server
            .client()
            .post(format!("{}/v1/rules/reload", server.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().unwrap();
        (
            response.status().as_u16(),
            response.json::<Value>().unwrap(),
        )
    };

    let (status, body) = reload(None);
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    assert_eq!(reload(Some("wrong")).0, 401);

    // Once the route answers 200, the new rules are in force: no waiting.
    write(&file, &rules(8, 10));
    let (status, body) = reload(Some("s3cret"));
    assert_eq!((status, &body), (200, &json!({"reloaded": true})));
    assert_eq!(limit_of(&server, "user"), 8);

    write(
        &file,
        "domain: api\ndescriptors:\n  - key: user\n    valeu: x\n",
    );
    let (status, body) = reload(Some("s3cret"));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_rules");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("rules.yaml:4:"), "{message}");
    assert!(message.contains("valeu"), "{message}");
    assert_eq!(limit_of(&server, "user"), 8, "the previous rules stay");
    assert!(server.metric(FAILED_RELOADS) >= 1.0);
}
