//! The baseline of `scripts/bench-http`: tollgate's HTTP stack with nothing
//! behind it.
//!
//! Same stack as `tollgate serve`: axum 0.8 on hyper 1 over HTTP/1.1,
//! `tollgate_listener::serve` (the connection cap and timeouts) with a
//! graceful shutdown, on a default tokio multi-thread
//! runtime (one worker per CPU it may run on). One route, `POST /v1/check`,
//! reads the request body whole (as tollgate's body extractor does, under a
//! size limit) and answers `200` with a fixed body and fixed headers of the
//! same count and size as tollgate's answer to an admitted inline `gcra`
//! check: `content-type`, the five rate-limit headers, `content-length` and
//! `date`, 290 bytes of head and 102 of body.
//!
//! It is the ceiling for tollgate on this machine because it does everything
//! tollgate's `/v1/check` does on the wire (accept, parse the request, read
//! the body, write an answer of the same size) and nothing else: no JSON
//! decoding, no validation, no store, no clock, no metrics, no header
//! formatting. Whatever tollgate answers less than this is the cost of the
//! decision itself.
//!
//! ```text
//! bare_http [ADDRESS]     # default 127.0.0.1:0; prints `bare_http: listening on http://ADDR`
//! ```

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use tokio::net::TcpListener;
use tollgate_listener::{ConnectionSettings, Protocols, Unobserved};

/// The `tollgate` binary's allocator, so the two servers differ only by the
/// decision behind the answer.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What tollgate answers to an admitted check of `{"algorithm":"gcra",
/// "rate":"1000000/s"}`, byte for byte.
const BODY: &str = r#"{"allowed":true,"limit":1000000,"remaining":999999,"retry_after_ms":0,"reset_after_ms":1,"delay_ms":0}"#;

/// tollgate's default `max_body_bytes`.
const MAX_BODY_BYTES: usize = 64 * 1024;

const HEADERS: [(HeaderName, HeaderValue); 6] = [
    (CONTENT_TYPE, HeaderValue::from_static("application/json")),
    (
        HeaderName::from_static("ratelimit-policy"),
        HeaderValue::from_static(r#""gcra_1000000_per_s";q=1000000;w=1"#),
    ),
    (
        HeaderName::from_static("ratelimit"),
        HeaderValue::from_static(r#""gcra_1000000_per_s";r=999999;t=1"#),
    ),
    (
        HeaderName::from_static("x-ratelimit-limit"),
        HeaderValue::from_static("1000000"),
    ),
    (
        HeaderName::from_static("x-ratelimit-remaining"),
        HeaderValue::from_static("999999"),
    ),
    (
        HeaderName::from_static("x-ratelimit-reset"),
        HeaderValue::from_static("1"),
    ),
];

async fn check(request: Request) -> Response {
    match to_bytes(request.into_body(), MAX_BODY_BYTES).await {
        Ok(_) => (StatusCode::OK, HEADERS, Body::from(BODY)).into_response(),
        Err(_) => StatusCode::PAYLOAD_TOO_LARGE.into_response(),
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let address: SocketAddr = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("127.0.0.1:0")
        .parse()?;
    // The same runtime as `tollgate serve`.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("bare_http")
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(address).await?;
        println!("bare_http: listening on http://{}", listener.local_addr()?);
        let router = Router::new().route("/v1/check", post(check));
        tollgate_listener::serve(
            listener,
            ConnectionSettings::default(),
            Protocols::Http1And2,
            Arc::new(Unobserved),
            move |_| (router.clone(), std::future::pending()),
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
        )
        .await?;
        Ok(())
    })
}
