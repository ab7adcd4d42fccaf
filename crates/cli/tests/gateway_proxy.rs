//! `tollgate gateway` as a reverse proxy, end to end: a real upstream (a
//! small hyper server in this process), the real binary, real HTTP.
//! Forwarding, headers both ways, keep-alive, HTTP/2, WebSocket, upstream
//! failures and graceful shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/upstream.rs"]
mod upstream;

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use http::{Request, StatusCode, Version};
use http_body_util::BodyExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tollgate_testkit::TestCertificates;

use gateway::{client, get, http1_connection, http2_connection, text, Gateway};
use upstream::{Event, TestBody, Upstream, PATIENCE};

/// The upstream's view of a request it echoed.
fn seen(body: &str) -> Value {
    serde_json::from_str(body).unwrap()
}

/// The values the upstream saw for header `name`.
fn header<'a>(seen: &'a Value, name: &str) -> Vec<&'a str> {
    seen["headers"][name]
        .as_array()
        .map(|values| values.iter().map(|v| v.as_str().unwrap()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_target_body_status_and_headers_round_trip() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url()]);
    let request = Request::put(gw.url("/echo/a%20b/c?x=1&y=%2F&status=201"))
        .header("host", "api.example.com")
        .header("content-type", "text/plain")
        .header("x-custom", "one")
        .header("x-custom", "two")
        .header("x-forwarded-for", "203.0.113.9")
        .header("x-forwarded-proto", "https")
        // Hop-by-hop: `Connection` and what it names, and the fixed list.
        .header("connection", "x-foo")
        .header("x-foo", "must not pass")
        .header("keep-alive", "timeout=5")
        .header("proxy-authorization", "Basic Zm9vOmJhcg==")
        .header("te", "trailers")
        .body(TestBody::full("hello upstream"))
        .unwrap();
    let response = client().request(request).await.unwrap();

    assert_eq!(response.status(), StatusCode::CREATED);
    let headers = response.headers().clone();
    assert_eq!(headers["x-upstream"], "yes");
    assert_eq!(headers["content-type"], "application/json");
    for hop in ["x-resp-hop", "keep-alive", "proxy-authenticate"] {
        assert!(!headers.contains_key(hop), "{hop} came back: {headers:?}");
    }
    if let Some(connection) = headers.get("connection") {
        assert_ne!(connection, "x-resp-hop");
    }

    let seen = seen(&text(response).await);
    assert_eq!(seen["method"], "PUT");
    assert_eq!(seen["target"], "/echo/a%20b/c?x=1&y=%2F&status=201");
    assert_eq!(seen["body"], "hello upstream");
    assert_eq!(seen["version"], "HTTP/1.1");
    assert_eq!(header(&seen, "x-custom"), ["one", "two"]);
    assert_eq!(header(&seen, "content-type"), ["text/plain"]);
    for hop in [
        "connection",
        "x-foo",
        "keep-alive",
        "proxy-authorization",
        "te",
    ] {
        assert!(header(&seen, hop).is_empty(), "{hop} went upstream: {seen}");
    }
    assert_eq!(header(&seen, "host"), ["api.example.com"]);
    assert_eq!(header(&seen, "x-forwarded-host"), ["api.example.com"]);
    assert_eq!(header(&seen, "x-forwarded-proto"), ["http"]);
    assert_eq!(header(&seen, "x-forwarded-for"), ["203.0.113.9, 127.0.0.1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_base_path_prefixes_every_path() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &format!("{}/echo/base/", upstream.url())]);
    let response = client()
        .request(get(&gw.url("/v1/users?page=2")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let seen = seen(&text(response).await);
    assert_eq!(seen["target"], "/echo/base/v1/users?page=2");
    // Without a Host of its own the client's is the gateway's address.
    assert_eq!(header(&seen, "host"), [gw.address.as_str()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_serves_many_requests_on_one_connection_each_side() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url()]);
    let mut connection = http1_connection(&gw.address).await;
    const REQUESTS: usize = 20;
    for i in 0..REQUESTS {
        connection
            .ready()
            .await
            .expect("the gateway kept the connection open");
        let request = Request::post(format!("/echo/{i}"))
            .header("host", "keep.example")
            .body(TestBody::full(format!("request {i}")))
            .unwrap();
        let response = connection.send_request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_ne!(
            response.headers().get("connection").map(|v| v.as_bytes()),
            Some(&b"close"[..])
        );
        let seen = seen(&text(response).await);
        assert_eq!(seen["body"], format!("request {i}"));
    }
    // The client connection's upstream connection served them all.
    assert_eq!(upstream.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_connection_keeps_its_own_upstream_connection() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url()]);
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(http1_connection(&gw.address).await);
    }
    // Requests taking turns over the three client connections, one at a
    // time: a shared pool would answer them all on one upstream
    // connection; each client connection has its own.
    for round in 0..5 {
        for (c, connection) in clients.iter_mut().enumerate() {
            connection.ready().await.unwrap();
            let request = Request::get(format!("/echo/{c}/{round}"))
                .body(TestBody::empty())
                .unwrap();
            let response = connection.send_request(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let seen = seen(&text(response).await);
            assert_eq!(seen["target"], format!("/echo/{c}/{round}"));
        }
    }
    assert_eq!(upstream.connections(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_with_prior_knowledge_is_served() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url()]);
    let connection = http2_connection(&gw.address).await;
    // Several streams at once on the one connection.
    let requests = (0..5).map(|i| {
        let mut connection = connection.clone();
        async move {
            let request = Request::post(format!("http://h2.example:8443/echo/{i}?q={i}"))
                .body(TestBody::full(format!("stream {i}")))
                .unwrap();
            let response = connection.send_request(request).await.unwrap();
            assert_eq!(response.version(), Version::HTTP_2);
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(response.headers()["x-upstream"], "yes");
            assert!(!response.headers().contains_key("keep-alive"));
            let seen = seen(&text(response).await);
            assert_eq!(seen["target"], format!("/echo/{i}?q={i}"));
            assert_eq!(seen["body"], format!("stream {i}"));
            assert_eq!(seen["version"], "HTTP/1.1");
            assert_eq!(header(&seen, "host"), ["h2.example:8443"]);
            assert_eq!(header(&seen, "x-forwarded-host"), ["h2.example:8443"]);
        }
    });
    futures_util::future::join_all(requests).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_pass_through() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url()]);
    let (mut socket, response) = tokio::time::timeout(
        PATIENCE,
        tokio_tungstenite::connect_async(format!("ws://{}/ws", gw.address)),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    for i in 0..10 {
        let message = if i % 2 == 0 {
            Message::text(format!("message {i}"))
        } else {
            Message::binary(vec![i as u8; 70_000])
        };
        socket.send(message.clone()).await.unwrap();
        let echoed = tokio::time::timeout(PATIENCE, socket.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(echoed, message);
    }
    socket.close(None).await.unwrap();
    // The gateway goes on serving plain requests.
    let response = client().request(get(&gw.url("/echo"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstreams_are_verified_against_the_ca_given() {
    let (trusted, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let trusted = TestCertificates::generate(trusted.path());
    let other = TestCertificates::generate(other.path());
    let upstream = Upstream::start_tls(&trusted.server_cert, &trusted.server_key).await;

    let gw = Gateway::start(&[
        "--upstream",
        &format!("{}/echo", upstream.https_url()),
        "--upstream-tls-ca",
        trusted.ca.to_str().unwrap(),
    ]);
    let response = client().request(get(&gw.url("/tls?x=1"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let seen = seen(&text(response).await);
    assert_eq!(seen["target"], "/echo/tls?x=1");
    assert_eq!(header(&seen, "host"), [gw.address.as_str()]);

    // A certificate from a CA the gateway does not trust is a 502.
    let distrusting = Gateway::start(&[
        "--upstream",
        &upstream.https_url(),
        "--upstream-tls-ca",
        other.ca.to_str().unwrap(),
    ]);
    let response = client()
        .request(get(&distrusting.url("/echo")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let problem: Value = serde_json::from_str(&text(response).await).unwrap();
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains(&upstream.https_url()), "{detail}");
    assert!(detail.to_lowercase().contains("certificate"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_is_down_is_a_502_problem() {
    // A port nobody listens on: bound, then closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let gw = Gateway::start(&["--upstream", &dead]);
    let response = client().request(get(&gw.url("/anything"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let problem: Value = serde_json::from_str(&text(response).await).unwrap();
    assert_eq!(problem["type"], "about:blank");
    assert_eq!(problem["title"], "Bad Gateway");
    assert_eq!(problem["status"], 502);
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains(&dead), "{detail}");
    assert!(detail.to_lowercase().contains("refused"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_slower_than_the_timeout_is_a_504_and_the_gateway_goes_on() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url(), "--upstream-timeout", "300ms"]);
    let response = client().request(get(&gw.url("/slow"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let problem: Value = serde_json::from_str(&text(response).await).unwrap();
    assert_eq!(problem["status"], 504);
    assert_eq!(
        problem["detail"],
        format!(
            "the upstream {} did not answer within 300ms",
            upstream.url()
        )
    );
    let response = client().request(get(&gw.url("/echo"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_of_a_connection_gets_the_whole_upstream_timeout() {
    // A connection's requests share one timer, set again for each: a
    // timer left running, or fired, by an earlier request must neither
    // cut a later one short nor time out one that is answered.
    let upstream = Upstream::start().await;
    let timeout = Duration::from_millis(300);
    let gw = Gateway::start(&["--upstream", &upstream.url(), "--upstream-timeout", "300ms"]);
    let mut connection = http1_connection(&gw.address).await;
    for round in 0..2 {
        for path in ["/echo", "/slow", "/echo"] {
            connection
                .ready()
                .await
                .expect("the gateway kept the connection open");
            let started = Instant::now();
            let response = connection.send_request(get(path)).await.unwrap();
            if path == "/slow" {
                assert_eq!(
                    response.status(),
                    StatusCode::GATEWAY_TIMEOUT,
                    "round {round}"
                );
                assert!(started.elapsed() >= timeout, "round {round}: cut short");
            } else {
                assert_eq!(response.status(), StatusCode::OK, "round {round} {path}");
            }
            text(response).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_closing_mid_body_truncates_the_answer_and_the_gateway_goes_on() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url()]);
    let response = client().request(get(&gw.url("/truncate"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-length"], "1000");
    // The head has arrived; only now does the upstream break (had it broken
    // before the gateway flushed the head, the client would see a closed
    // connection instead of a short body).
    upstream.release();
    let body = tokio::time::timeout(PATIENCE, response.into_body().collect())
        .await
        .expect("the broken body ended in time");
    assert!(
        body.is_err(),
        "a 1000-byte promise with 100 bytes is an error"
    );
    let response = client().request(get(&gw.url("/echo"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_requests_are_refused() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url()]);
    let mut connection = http1_connection(&gw.address).await;
    let request = Request::connect("example.com:443")
        .body(TestBody::empty())
        .unwrap();
    let response = connection.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(upstream.connections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_port_answers_health_readiness_and_metrics() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url(), "--admin", "127.0.0.1:0"]);
    let admin = gw.admin.clone().unwrap();
    for (path, expected) in [
        ("/healthz", "ok"),
        ("/readyz", "ready"),
        ("/metrics", "tollgate_memory_store_used_bytes"),
    ] {
        let response = client()
            .request(get(&format!("http://{admin}{path}")))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let body = text(response).await;
        assert!(body.contains(expected), "{path}: {body}");
    }
    // On the main port the same path is the upstream's.
    let response = client().request(get(&gw.url("/healthz"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(text(response).await, "no such route");
}

#[test]
fn a_sigterm_as_soon_as_the_address_is_announced_stops_gracefully() {
    // The signal handlers are in place before the address is printed: a
    // signal sent at once is caught (a clean exit, "stopped" logged), never
    // the default action that ends the process where it stands.
    let gw = Gateway::start(&["--upstream", "http://127.0.0.1:9"]);
    gw.send_term();
    gw.wait_for_log("stopped accepting");
    assert!(gw.wait().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_the_request_in_flight() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url()]);
    let in_flight = tokio::spawn(client().request(get(&gw.url("/wait"))));
    assert_eq!(upstream.next_event().await, Event::Arrived);
    gw.send_term();
    gw.wait_for_log("stopped accepting");
    assert!(
        std::net::TcpStream::connect(&gw.address).is_err(),
        "the gateway still accepts after SIGTERM"
    );
    upstream.release();
    let response = tokio::time::timeout(PATIENCE, in_flight)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(text(response).await, "done");
    assert!(gw.wait().success());
}
