//! [`run`]: the gateway's accept loop. Each connection is served with
//! HTTP/1.1 (keep-alive, upgrades) or HTTP/2 (prior knowledge, as on any
//! cleartext port), whichever the client speaks, and each of its requests
//! carries the connection's [`PeerAddr`] and its own upstream connection
//! ([`PairedUpstream`]), which the connection's task drives.
//!
//! Limits on what a client may send before its request reaches the
//! service are hyper's defaults, which bound memory per connection: for
//! HTTP/1, at most 100 header fields and a read buffer of about 400 KiB
//! (a longer head is refused with `431`), read within 30 s; for HTTP/2, a
//! header list of 16 KiB and 200 concurrent streams.

use std::future::Future;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tollgate_tower::PeerAddr;
use tower::ServiceBuilder;

use crate::paired::{self, PairedUpstream};

/// The errors a service or a body may fail with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long to pause accepting after an accept error (out of file
/// descriptors, most likely), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `service` on `listener` until `shutdown` completes; then stops
/// accepting, lets every open connection finish the requests it has
/// started (idle keep-alive connections are closed), and returns.
///
/// `service` is typically a [`Proxy`](super::Proxy), with layers around it:
/// it is cloned for each connection. The listener and the signal are
/// passed in, so a test binds `127.0.0.1:0`, spawns this and talks to it
/// over a real socket.
pub async fn run<S, B>(
    listener: TcpListener,
    service: S,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // With a timer, hyper's default limit on reading an HTTP/1 request
    // head (30 s) applies, so a client that never finishes its head does
    // not hold a connection forever. Writes are flattened into one buffer
    // (a body is copied into it, up to hyper's 400 KiB limit per
    // connection): one `write` per answer measured faster than hyper's
    // default vectored writes (docs/benchmarks.md, "Gateway").
    builder.http1().timer(TokioTimer::new()).writev(false);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        // Small answers are not held back to fill a packet.
        let _ = stream.set_nodelay(true);
        let (pair, driver) = paired::pair::<Incoming>();
        let service = ServiceBuilder::new()
            .map_request(move |mut request: Request<Incoming>| {
                let extensions = request.extensions_mut();
                extensions.insert(PeerAddr(peer));
                extensions.insert::<PairedUpstream>(pair.clone());
                request
            })
            .service(service.clone());
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // The client connection and its upstream connection, in one
            // task; the client's end ends both.
            tokio::select! {
                served = connection => {
                    if let Err(error) = served {
                        tracing::debug!(%peer, %error, "connection ended with an error");
                    }
                }
                () = driver => {}
            }
        });
    }
    drop(listener);
    tracing::info!(
        connections = graceful.count(),
        "stopped accepting; finishing the requests in flight"
    );
    graceful.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::Full;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_finishes_its_request_head_is_disconnected() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let service = tower::service_fn(|_: Request<Incoming>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        });
        tokio::spawn(run(listener, service, std::future::pending()));
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: slow\r\n")
            .await
            .unwrap();
        let started = tokio::time::Instant::now();
        let mut answer = Vec::new();
        let ended =
            tokio::time::timeout(Duration::from_secs(3600), stream.read_to_end(&mut answer)).await;
        assert!(ended.is_ok(), "the connection was still open after an hour");
        assert!(started.elapsed() >= Duration::from_secs(30));
        assert!(!answer.starts_with(b"HTTP/1.1 200"));
    }
}
