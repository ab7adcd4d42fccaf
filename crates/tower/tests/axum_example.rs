//! The axum example's app over a real socket: axum's ConnectInfo gives the
//! layer the client address (the `axum` feature), the fifth request in a
//! minute passes and the sixth is a 429 with a problem body.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/axum.rs"]
#[allow(dead_code)]
mod example;

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Sends one HTTP/1.1 request and reads the whole answer.
async fn send(addr: SocketAddr, method: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: app\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

#[tokio::test]
async fn the_example_limits_by_client_address() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = example::app().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    for i in 0..5 {
        let answer = send(addr, "GET", "/api/hello").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "request {i}: {answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("ratelimit: \"per_client\";r="),
            "{answer}"
        );
        assert!(answer.ends_with("hello\n"), "{answer}");
    }
    let answer = send(addr, "GET", "/api/hello").await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(answer.contains("\"policy\":\"per_client\""), "{answer}");

    let login = send(addr, "POST", "/login").await;
    assert!(login.starts_with("HTTP/1.1 200"), "{login}");
    let again = send(addr, "POST", "/login").await;
    assert!(again.starts_with("HTTP/1.1 429"), "{again}");
    assert!(
        again.to_ascii_lowercase().contains("retry-after: 10"),
        "{again}"
    );
}
