//! The upstream of the gateway benchmark: a hyper server that answers
//! every request with the same small body, as cheaply as hyper can.
//!
//! Same stack as `tollgate gateway`'s listener: hyper 1 with hyper-util's
//! HTTP/1.1-or-HTTP/2 connections, on a default tokio multi-thread runtime
//! and the `tollgate` binary's allocator. Each request's body is read and
//! dropped frame by frame (so uploads can be sent through the gateway), and
//! the answer is `200` with `content-type: text/plain` and a fixed body of
//! `--body-bytes` bytes (13 by default: `hello, world\n`).
//!
//! Measured directly, it is the ceiling of the gateway on this machine;
//! measured through `tollgate gateway`, the difference is the proxy's cost.
//!
//! ```text
//! upstream [--listen ADDRESS] [--body-bytes N]
//!     # default 127.0.0.1:0; prints `upstream: listening on http://ADDR`
//! ```

use std::convert::Infallible;
use std::error::Error;
use std::net::SocketAddr;

use bytes::Bytes;
use clap::Parser;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

/// The `tollgate` binary's allocator, so that the upstream costs what the
/// gateway would if it did nothing.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A fixed-answer HTTP server.
#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Size of the answer's body; 13 gives `hello, world\n`.
    #[arg(long, default_value_t = 13)]
    body_bytes: usize,
}

async fn answer(
    request: Request<Incoming>,
    body: Bytes,
) -> Result<Response<Full<Bytes>>, Infallible> {
    // Drain the request body without keeping it.
    let mut incoming = request.into_body();
    while let Some(Ok(_)) = incoming.frame().await {}
    let mut response = Response::new(Full::new(body));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(response)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    let body = if args.body_bytes == 13 {
        Bytes::from_static(b"hello, world\n")
    } else {
        Bytes::from(vec![b'x'; args.body_bytes])
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("upstream")
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(args.listen).await?;
        println!("upstream: listening on http://{}", listener.local_addr()?);
        let builder = auto::Builder::new(TokioExecutor::new());
        loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(_) => continue,
                },
                _ = tokio::signal::ctrl_c() => return Ok(()),
            };
            let _ = stream.set_nodelay(true);
            let body = body.clone();
            let connection = builder
                .serve_connection(
                    TokioIo::new(stream),
                    service_fn(move |request| answer(request, body.clone())),
                )
                .into_owned();
            tokio::spawn(async move {
                let _ = connection.await;
            });
        }
    })
}
