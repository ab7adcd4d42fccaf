//! `tollgate gateway` and slow or idle clients, over real sockets that
//! stall: a request head that does not end closes the connection, a body
//! that stops coming answers `408` (problem details) instead of holding
//! the upstream, idle connections close, and at most `--max-connections`
//! are open on each port (one over the cap is closed and counted; those
//! open are still served, `/healthz` on the admin port among them).
//!
//! Timeouts are set short and each test waits for the gateway to act, up
//! to the raw client's 30 s patience; none asserts how soon. A body's
//! timeout is 200 ms (its clock starts only once the head is in); a head
//! timeout is 1 s, where nothing must get through; an idle timeout 5 s,
//! since a request that must get through first has to arrive within it of
//! the connection being accepted, and a test thread may be paused between
//! connecting and sending on a busy machine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/raw.rs"]
mod raw;
#[path = "support/upstream.rs"]
mod upstream;

use gateway::Gateway;
use raw::Raw;
use serde_json::Value;
use upstream::Upstream;

/// The value of `sample` in a `/metrics` text, 0 when absent.
fn metric(text: &str, sample: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == sample).then(|| value.parse().unwrap())
        })
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_never_ends_is_cut_off() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url(), "--header-read-timeout", "1s"]);
    let mut slow = Raw::connect(&gw.address);
    slow.send(b"GET /echo HTTP/1.1\r\nHost: t\r\nAccept: te");
    let received = slow.until_closed();
    assert!(
        !received.starts_with(b"HTTP/1.1 2"),
        "{:?}",
        String::from_utf8_lossy(&received)
    );
    let mut other = Raw::connect(&gw.address);
    assert_eq!(other.request("GET", "/echo", None).status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_coming_answers_408_and_closes() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&[
        "--upstream",
        &upstream.url(),
        "--body-read-timeout",
        "200ms",
    ]);
    let mut slow = Raw::connect(&gw.address);
    slow.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nhalf of it");
    let answer = slow.answer();
    assert_eq!(answer.status, 408, "{answer:?}");
    assert_eq!(
        answer.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(answer.header("connection"), Some("close"));
    let problem: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(problem["status"], 408);
    assert_eq!(
        problem["detail"],
        "the request body stopped coming: nothing arrived for 200ms"
    );
    assert!(slow.until_closed().is_empty());
    // The gateway goes on serving.
    let mut other = Raw::connect(&gw.address);
    assert_eq!(other.request("GET", "/echo", None).status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url(), "--idle-timeout", "5s"]);
    let mut silent = Raw::connect(&gw.address);
    assert!(silent.until_closed().is_empty());
    let mut used = Raw::connect(&gw.address);
    assert_eq!(used.request("GET", "/echo", None).status, 200);
    assert!(used.until_closed().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_closed_counted_and_the_open_ones_served() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&[
        "--upstream",
        &upstream.url(),
        "--max-connections",
        "2",
        "--admin",
        "127.0.0.1:0",
    ]);
    let admin = gw.admin.clone().unwrap();
    let mut open: Vec<Raw> = (0..2)
        .map(|_| {
            let mut raw = Raw::connect(&gw.address);
            assert_eq!(raw.request("GET", "/echo", None).status, 200);
            raw
        })
        .collect();
    let mut over = Raw::connect(&gw.address);
    over.send(b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(over.until_closed().is_empty());
    for raw in &mut open {
        assert_eq!(raw.request("GET", "/echo", None).status, 200);
    }
    // The admin port has its own cap: two open connections, a third
    // closed, /healthz still answered on an open one.
    let mut on_admin: Vec<Raw> = (0..2)
        .map(|_| {
            let mut raw = Raw::connect(&admin);
            assert_eq!(raw.request("GET", "/healthz", None).status, 200);
            raw
        })
        .collect();
    let mut over_admin = Raw::connect(&admin);
    over_admin.send(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(over_admin.until_closed().is_empty());
    assert_eq!(on_admin[0].request("GET", "/healthz", None).status, 200);
    let metrics = on_admin[1].request("GET", "/metrics", None).body;
    for (sample, value) in [
        (
            "tollgate_connections_rejected_total{listener=\"gateway\"}",
            1.0,
        ),
        ("tollgate_connections_open{listener=\"gateway\"}", 2.0),
        (
            "tollgate_connections_rejected_total{listener=\"admin\"}",
            1.0,
        ),
        ("tollgate_connections_open{listener=\"admin\"}", 2.0),
    ] {
        assert_eq!(metric(&metrics, sample), value, "{sample}\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_connection_keeps_its_place_under_the_cap() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    let upstream = Upstream::start().await;
    let gw = Gateway::start(&[
        "--upstream",
        &upstream.url(),
        "--max-connections",
        "1",
        "--admin",
        "127.0.0.1:0",
    ]);
    let (mut socket, _) = tokio::time::timeout(
        raw::PATIENCE,
        tokio_tungstenite::connect_async(format!("ws://{}/ws", gw.address)),
    )
    .await
    .unwrap()
    .unwrap();
    socket.send(Message::text("hello")).await.unwrap();
    let echoed = tokio::time::timeout(raw::PATIENCE, socket.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(echoed, Message::text("hello"));
    // The WebSocket, handed over by the HTTP connection, still holds the
    // only place.
    let mut over = Raw::connect(&gw.address);
    over.send(b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(over.until_closed().is_empty());
    let mut admin = Raw::connect(gw.admin.as_deref().unwrap());
    let metrics = admin.request("GET", "/metrics", None).body;
    assert_eq!(
        metric(&metrics, "tollgate_connections_open{listener=\"gateway\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &metrics,
            "tollgate_connections_rejected_total{listener=\"gateway\"}"
        ),
        1.0
    );
    socket.send(Message::text("still here")).await.unwrap();
    let echoed = tokio::time::timeout(raw::PATIENCE, socket.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(echoed, Message::text("still here"));
}
