//! `tollgate gateway`'s settings through the real binary: flags over
//! `TOLLGATE_*` environment variables over the config file, and exit
//! status 64 with a one-line message for settings that cannot be used.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/upstream.rs"]
mod upstream;

use http::StatusCode;

use gateway::{client, gateway_output, get, Gateway};
use upstream::Upstream;

/// A URL where nothing listens.
fn dead_upstream() -> String {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    url
}

/// The status of a request through `gw`: 200 when it reached the live
/// upstream, 502 when it went to the dead one.
async fn status(gw: &Gateway) -> StatusCode {
    client()
        .request(get(&gw.url("/echo")))
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_win_over_the_environment_which_wins_over_the_file() {
    let live = Upstream::start().await;
    let dead = dead_upstream();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");

    std::fs::write(&file, format!("upstream = \"{}\"\n", live.url())).unwrap();
    let config = file.to_str().unwrap();
    let from_file = Gateway::start(&["--config", config]);
    assert_eq!(status(&from_file).await, StatusCode::OK);

    std::fs::write(&file, format!("upstream = \"{dead}\"\n")).unwrap();
    let env_over_file =
        Gateway::start_with_env(&["--config", config], &[("TOLLGATE_UPSTREAM", &live.url())]);
    assert_eq!(status(&env_over_file).await, StatusCode::OK);

    let flag_over_env = Gateway::start_with_env(
        &["--upstream", &live.url()],
        &[("TOLLGATE_UPSTREAM", &dead), ("TOLLGATE_CONFIG", config)],
    );
    assert_eq!(status(&flag_over_env).await, StatusCode::OK);

    let env_only = Gateway::start_with_env(&[], &[("TOLLGATE_UPSTREAM", &dead)]);
    assert_eq!(status(&env_only).await, StatusCode::BAD_GATEWAY);
}

#[test]
fn settings_that_cannot_be_used_exit_64_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let unknown_key = dir.path().join("unknown.toml");
    std::fs::write(
        &unknown_key,
        "upstream = \"http://127.0.0.1:1\"\nlisten_on = 1\n",
    )
    .unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(rules.join("api.yaml"), "domain: api\n").unwrap();
    std::fs::write(rules.join("web.yaml"), "domain: web\n").unwrap();
    let bad_rules = dir.path().join("bad.yaml");
    std::fs::write(
        &bad_rules,
        "domain: api\ndescriptors:\n  - key: user\n    colour: red\n",
    )
    .unwrap();
    let missing_ca = dir.path().join("missing-ca.pem");
    let cases: [(&[&str], &str); 10] = [
        (&["--upstream", "not a url"], "not a url"),
        (
            &["--upstream", "ws://example.com"],
            "only http:// and https://",
        ),
        (
            &[
                "--upstream",
                "http://127.0.0.1:1",
                "--upstream-tls-ca",
                "/ca.pem",
            ],
            "needs an https:// upstream",
        ),
        (
            &[
                "--upstream",
                "https://127.0.0.1:1",
                "--upstream-tls-ca",
                missing_ca.to_str().unwrap(),
            ],
            "missing-ca.pem",
        ),
        (&["--upstream", "ftp://example.com"], "ftp://example.com"),
        (&[], "no upstream"),
        (
            &[
                "--upstream",
                "http://127.0.0.1:1",
                "--upstream-timeout",
                "later",
            ],
            "later",
        ),
        (&["--config", unknown_key.to_str().unwrap()], "listen_on"),
        (
            &[
                "--upstream",
                "http://127.0.0.1:1",
                "--rules",
                rules.to_str().unwrap(),
            ],
            "--domain",
        ),
        (
            &[
                "--upstream",
                "http://127.0.0.1:1",
                "--rules",
                bad_rules.to_str().unwrap(),
            ],
            "colour",
        ),
    ];
    for (args, part) in cases {
        let output = gateway_output(args, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(part), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?} started");
    }
}
