//! `tollgate serve` and slow or idle clients, over real sockets that
//! stall: the HTTP port closes a connection whose request head does not
//! end, answers `408 body_timeout` to a body that stops coming, closes
//! idle connections, and holds at most `--max-connections` (a connection
//! over the cap is closed and counted, those open are still served); the
//! gRPC port closes idle connections and holds its cap too.
//!
//! Timeouts are set short and each test waits for the server to act, up
//! to the raw client's 30 s patience; none asserts how soon. A body's
//! timeout is 200 ms (its clock starts only once the head is in); a head
//! timeout is 1 s, where nothing must get through; an idle timeout 5 s,
//! since a request that must get through first has to arrive within it of
//! the connection being accepted, and a test thread may be paused between
//! connecting and sending on a busy machine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/raw.rs"]
mod raw;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use hyper_util::rt::{TokioExecutor, TokioIo};
use raw::Raw;
use serde_json::Value;
use support::Server;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const CHECK: &str = r#"{"key":"k","limit":{"algorithm":"gcra","rate":"10/s"}}"#;

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

#[test]
fn a_request_head_that_never_ends_is_cut_off() {
    let server = Server::start(&["--header-read-timeout", "1s"]);
    let mut slow = Raw::connect(server.address());
    slow.send(b"POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Ty");
    let received = slow.until_closed();
    assert!(
        !received.starts_with(b"HTTP/1.1 2"),
        "{:?}",
        String::from_utf8_lossy(&received)
    );
    // Others are served.
    let mut other = Raw::connect(server.address());
    assert_eq!(other.request("POST", "/v1/check", Some(CHECK)).status, 200);
}

#[test]
fn a_body_that_stops_coming_answers_408_with_the_json_error_and_closes() {
    let server = Server::start(&["--body-read-timeout", "200ms"]);
    let mut slow = Raw::connect(server.address());
    let half = &CHECK[..CHECK.len() / 2];
    slow.send(
        format!(
            "POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{half}",
            CHECK.len()
        )
        .as_bytes(),
    );
    let answer = slow.answer();
    assert_eq!(answer.status, 408, "{answer:?}");
    assert_eq!(answer.header("connection"), Some("close"));
    let body: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["error"]["code"], "body_timeout");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("200 ms"),
        "{body}"
    );
    assert!(slow.until_closed().is_empty());
    // Nothing was decided.
    assert_eq!(
        server.metric("tollgate_requests_total{domain=\"\",rule=\"inline\"}"),
        0.0
    );
}

#[test]
fn idle_connections_are_closed() {
    let server = Server::start(&["--idle-timeout", "5s"]);
    // Silent from the start.
    let mut silent = Raw::connect(server.address());
    assert!(silent.until_closed().is_empty());
    // Idle after an answer on a keep-alive connection.
    let mut used = Raw::connect(server.address());
    assert_eq!(used.request("GET", "/healthz", None).status, 200);
    assert!(used.until_closed().is_empty());
}

#[test]
fn connections_over_the_cap_are_closed_counted_and_the_open_ones_served() {
    let server = Server::start(&["--max-connections", "3"]);
    // Three idle but valid connections, each known to be served.
    let mut open: Vec<Raw> = (0..3)
        .map(|_| {
            let mut raw = Raw::connect(server.address());
            assert_eq!(raw.request("GET", "/healthz", None).status, 200);
            raw
        })
        .collect();
    // The fourth is closed without an answer.
    let mut over = Raw::connect(server.address());
    over.send(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(over.until_closed().is_empty());
    // The open ones are still served: /healthz, and /metrics counting
    // the refusal.
    assert_eq!(open[0].request("GET", "/healthz", None).status, 200);
    let metrics = open[1].request("GET", "/metrics", None).body;
    assert_eq!(
        metric(
            &metrics,
            "tollgate_connections_rejected_total{listener=\"http\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(&metrics, "tollgate_connections_open{listener=\"http\"}"),
        3.0
    );
    // A closed connection makes room, once the server has seen it end.
    drop(open.pop());
    let deadline = std::time::Instant::now() + raw::PATIENCE;
    loop {
        let metrics = open[0].request("GET", "/metrics", None).body;
        if metric(&metrics, "tollgate_connections_open{listener=\"http\"}") == 2.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the closed connection's place was never freed"
        );
    }
    let mut next = Raw::connect(server.address());
    assert_eq!(next.request("GET", "/healthz", None).status, 200);
}

/// A runtime for the gRPC clients.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A health check on a new gRPC connection to `url`; the connection is
/// kept in the client returned.
async fn health(url: &str) -> Result<HealthClient<tonic::transport::Channel>, String> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let mut client = HealthClient::new(channel);
    client
        .check(HealthCheckRequest::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(client)
}

#[test]
fn grpc_connections_over_the_cap_are_closed_counted_and_the_open_ones_served() {
    let server = Server::start(&["--max-connections", "2"]);
    let runtime = runtime();
    runtime.block_on(async {
        let mut first = health(&server.grpc).await.unwrap();
        let _second = health(&server.grpc).await.unwrap();
        assert!(health(&server.grpc).await.is_err());
        // The open connections are still served.
        first.check(HealthCheckRequest::default()).await.unwrap();
    });
    let mut http = Raw::connect(server.address());
    let metrics = http.request("GET", "/metrics", None).body;
    assert!(
        metric(
            &metrics,
            "tollgate_connections_rejected_total{listener=\"grpc\"}"
        ) >= 1.0,
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "tollgate_connections_open{listener=\"grpc\"}"),
        2.0
    );
    assert_eq!(
        metric(
            &metrics,
            "tollgate_connections_rejected_total{listener=\"http\"}"
        ),
        0.0
    );
}

#[test]
fn idle_grpc_connections_are_closed() {
    let server = Server::start(&["--idle-timeout", "5s"]);
    // Silent from the start: not even the HTTP/2 preface.
    let address = server.grpc.trim_start_matches("http://").to_owned();
    let mut silent = Raw::connect(&address);
    assert!(silent.until_closed().is_empty());
    // After a call, an HTTP/2 connection that goes quiet ends.
    let runtime = runtime();
    runtime.block_on(async {
        let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http2::handshake::<
            _,
            _,
            http_body_util::Empty<bytes::Bytes>,
        >(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
        let connection = tokio::spawn(connection);
        // Any answer will do (a gRPC call needs a body it is not given).
        let request = http::Request::post(format!("{}/grpc.health.v1.Health/Check", server.grpc))
            .header("content-type", "application/grpc")
            .body(http_body_util::Empty::new())
            .unwrap();
        let answer = sender.send_request(request).await.unwrap();
        assert_eq!(answer.status(), 200);
        drop(answer);
        let ended = tokio::time::timeout(raw::PATIENCE, connection).await;
        assert!(
            ended.is_ok(),
            "the connection was still open after {:?}",
            raw::PATIENCE
        );
    });
}

#[test]
fn a_grpc_call_whose_body_stops_coming_fails() {
    let server = Server::start(&["--body-read-timeout", "200ms"]);
    let address = server.grpc.trim_start_matches("http://").to_owned();
    let runtime = runtime();
    runtime.block_on(async {
        let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http2::handshake::<
            _,
            _,
            upstream::TestBody,
        >(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
        tokio::spawn(connection);
        let (body, frames) = upstream::TestBody::channel();
        let request = http::Request::post(format!(
            "{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            server.grpc
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .unwrap();
        // A gRPC message that promises 100 bytes and sends 3, then nothing
        // (the sender is kept, so the stream stays open).
        frames
            .send(Ok(bytes::Bytes::from_static(&[0, 0, 0, 0, 100, 1, 2, 3])))
            .await
            .unwrap();
        let answer = tokio::time::timeout(raw::PATIENCE, sender.send_request(request))
            .await
            .expect("no answer to a call whose body stopped coming")
            .unwrap();
        let status = match answer.headers().get("grpc-status") {
            Some(status) => status.to_str().unwrap().to_owned(),
            None => {
                use http_body_util::BodyExt;
                let collected = tokio::time::timeout(raw::PATIENCE, answer.into_body().collect())
                    .await
                    .unwrap()
                    .unwrap();
                let trailers = collected.trailers().cloned().unwrap_or_default();
                trailers["grpc-status"].to_str().unwrap().to_owned()
            }
        };
        assert_ne!(status, "0");
        drop(frames);
    });
}
