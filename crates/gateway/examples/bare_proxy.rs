//! The floor of the gateway benchmark: the least a reverse proxy on hyper
//! can do per request, with nothing of tollgate in it.
//!
//! Each client connection gets its own HTTP/1.1 keep-alive connection to
//! the upstream, polled in the client connection's task (as
//! `tollgate gateway` pairs them); each request goes to it unchanged and
//! its answer comes back unchanged: no rate limiting, no header rewriting
//! (not even the hop-by-hop fields a real proxy must remove), no timers, no
//! logging. The same hyper and the `tollgate` binary's allocator, set up as
//! fast as measured here (docs/benchmarks.md, "Gateway"): tokio's
//! current-thread runtime (the multi-thread one, sized to the benchmark's
//! one CPU, measured a median 0.88 of nginx's throughput where this
//! measured 0.89) and writes flattened into one buffer (hyper's default
//! vectored writes measured 0.90 where flattened ones measured 0.96; the
//! gateway flattens too).
//!
//! `scripts/bench-gateway` measures it beside `tollgate gateway` and nginx:
//! what this proxy reaches is what any proxy built on hyper's connections
//! can reach on the machine; the gateway's figure below it is the cost of
//! rate limiting and of proxying properly.
//!
//! ```text
//! bare_proxy --upstream ADDRESS [--listen ADDRESS]
//!     # default 127.0.0.1:0; prints `bare proxy: listening on http://ADDR`
//! ```

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::{self as client_http1, SendRequest};
use hyper::server::conn::http1 as server_http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

/// The `tollgate` binary's allocator, as in the upstream.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type BoxError = Box<dyn Error + Send + Sync>;
type AnswerBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// A pass-through HTTP/1.1 proxy to one upstream.
#[derive(Debug, Parser)]
struct Args {
    /// The upstream's address (`HOST:PORT`).
    #[arg(long)]
    upstream: SocketAddr,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
}

/// Sends `request` on the connection's own upstream connection.
async fn forward(
    sender: Arc<Mutex<SendRequest<Incoming>>>,
    request: Request<Incoming>,
) -> Result<Response<AnswerBody>, BoxError> {
    // HTTP/1: the client connection sends its next request only after this
    // one's answer, so the lock is never contended.
    let sending = {
        let mut sender = sender.lock().await;
        sender.ready().await?;
        sender.send_request(request)
    };
    match sending.await {
        Ok(answer) => Ok(answer.map(BodyExt::boxed_unsync)),
        Err(_) => {
            let mut answer = Response::new(Empty::new().map_err(|n| match n {}).boxed_unsync());
            *answer.status_mut() = StatusCode::BAD_GATEWAY;
            Ok(answer)
        }
    }
}

/// Serves one client connection, with its upstream connection in the same
/// task.
async fn proxy_connection(client: TcpStream, upstream: SocketAddr) -> Result<(), BoxError> {
    let upstream = TcpStream::connect(upstream).await?;
    upstream.set_nodelay(true)?;
    let (sender, upstream_connection) = client_http1::Builder::new()
        .writev(false)
        .handshake(TokioIo::new(upstream))
        .await?;
    let sender = Arc::new(Mutex::new(sender));
    let client_connection = server_http1::Builder::new().writev(false).serve_connection(
        TokioIo::new(client),
        service_fn(move |request| forward(Arc::clone(&sender), request)),
    );
    tokio::select! {
        served = client_connection => served?,
        ended = upstream_connection => ended?,
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(args.listen).await?;
        println!("bare proxy: listening on http://{}", listener.local_addr()?);
        loop {
            let (client, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(_) => continue,
                },
                _ = tokio::signal::ctrl_c() => return Ok(()),
            };
            let _ = client.set_nodelay(true);
            tokio::spawn(proxy_connection(client, args.upstream));
        }
    })
}
