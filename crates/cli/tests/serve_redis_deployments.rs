//! `tollgate serve` on the other ways a deployment reaches Redis, end to
//! end: real tollgate processes on a TLS-only `redis-server` (`rediss://`
//! with `--redis-tls-ca`, and mutual TLS with a client certificate) and on a
//! unix-socket one (`unix:///…`), each started by the test with
//! certificates it generates; the TLS settings through flags, the
//! environment and the config file; and TLS settings that keep
//! `tollgate serve` from starting.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Command, Stdio};
use std::sync::mpsc;

use serde_json::{json, Value};
use support::Server;
use tollgate_testkit::{ClientCerts, RedisServer, TestCertificates};

fn check(server: &Server, key: &str, limit: &Value) -> (u16, Value) {
    server.call("/v1/check", &json!({"key": key, "limit": limit}))
}

/// Two requests admitted by `first`, the third refused by `second`: the
/// counts live in Redis, not in either process.
fn counts_are_shared(first: &Server, second: &Server) {
    let limit = json!({"algorithm": "gcra", "rate": "2/hour"});
    for _ in 0..2 {
        let (status, body) = check(first, "shared", &limit);
        assert_eq!(status, 200, "{body}");
        assert!(body.get("degraded").is_none(), "{body}");
    }
    let (status, body) = check(second, "shared", &limit);
    assert_eq!(status, 429, "{body}");
    assert!(body.get("degraded").is_none(), "{body}");
    let ready = second.get("/readyz").json::<Value>().unwrap();
    assert_eq!(ready["status"], json!("ready"), "{ready}");
}

fn path(file: &std::path::Path) -> &str {
    file.to_str().unwrap()
}

#[test]
fn rediss_with_a_private_ca_decides_through_redis() {
    let redis = RedisServer::start_tls(ClientCerts::NotRequested);
    let (url, certs) = (redis.url(), redis.certificates().unwrap());
    let first = Server::start(&["--store", &url, "--redis-tls-ca", path(&certs.ca)]);
    // The same settings from the environment.
    let second = Server::start_with_env(
        &[],
        &[
            ("TOLLGATE_STORE", &url),
            ("TOLLGATE_REDIS_TLS_CA", path(&certs.ca)),
        ],
    );
    counts_are_shared(&first, &second);
    assert!(redis.command("DBSIZE").is_some_and(|r| r.starts_with(":1")));
}

#[test]
fn mutual_tls_with_a_client_certificate_from_flags_or_the_config_file() {
    let redis = RedisServer::start_tls(ClientCerts::Required);
    let (url, certs) = (redis.url(), redis.certificates().unwrap());
    let first = Server::start(&[
        "--store",
        &url,
        "--redis-tls-ca",
        path(&certs.ca),
        "--redis-tls-cert",
        path(&certs.client_cert),
        "--redis-tls-key",
        path(&certs.client_key),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tollgate.toml");
    support::write(
        &config,
        &format!(
            "store = {url:?}\nredis_tls_ca = {:?}\nredis_tls_cert = {:?}\nredis_tls_key = {:?}\n",
            path(&certs.ca),
            path(&certs.client_cert),
            path(&certs.client_key)
        ),
    );
    let second = Server::start(&["--config", path(&config)]);
    counts_are_shared(&first, &second);
}

#[test]
fn a_unix_socket_store_decides_through_redis() {
    let redis = RedisServer::start_unix();
    let url = redis.url();
    assert!(url.starts_with("unix:///"), "{url}");
    let first = Server::start(&["--store", &url]);
    let second = Server::start(&["--store", &url]);
    counts_are_shared(&first, &second);
    assert!(redis.command("DBSIZE").is_some_and(|r| r.starts_with(":1")));
}

/// Runs `tollgate serve ARGS…`, which must exit non-zero without serving;
/// its stderr.
fn refuses_to_start(args: &[&str]) -> String {
    let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("serve")
        .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tollgate serve");
    let id = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(output) = rx.recv_timeout(support::PATIENCE) else {
        let _ = Command::new("kill")
            .args(["-KILL", &id.to_string()])
            .status();
        panic!("tollgate serve {args:?} kept running");
    };
    let output = output.unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    assert!(!output.status.success(), "{args:?} started: {stderr}");
    assert!(
        !stdout.contains("listening"),
        "{args:?} served before failing: {stdout}"
    );
    stderr
}

#[test]
fn bad_tls_settings_stop_serve_at_startup_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCertificates::generate(dir.path());
    // Nothing listens there: the settings are refused before connecting.
    let tls = "rediss://127.0.0.1:1";

    let stderr = refuses_to_start(&["--store", tls, "--redis-tls-cert", path(&certs.client_cert)]);
    assert!(stderr.contains("without its private key"), "{stderr}");
    assert!(stderr.contains(path(&certs.client_cert)), "{stderr}");

    let stderr = refuses_to_start(&["--store", tls, "--redis-tls-key", path(&certs.client_key)]);
    assert!(stderr.contains("without its certificate"), "{stderr}");

    let missing = dir.path().join("missing-ca.pem");
    let stderr = refuses_to_start(&["--store", tls, "--redis-tls-ca", path(&missing)]);
    assert!(stderr.contains(path(&missing)), "{stderr}");
    assert_eq!(stderr.matches("No such file").count(), 1, "{stderr}");

    let stderr = refuses_to_start(&[
        "--store",
        "redis://127.0.0.1:1",
        "--redis-tls-ca",
        path(&certs.ca),
    ]);
    assert!(stderr.contains("not a TLS URL"), "{stderr}");

    let stderr = refuses_to_start(&["--redis-tls-ca", path(&certs.ca)]);
    assert!(
        stderr.contains("redis_tls_ca") && stderr.contains("memory"),
        "{stderr}"
    );
}
