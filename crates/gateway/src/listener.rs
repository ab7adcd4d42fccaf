//! [`run`]: the gateway's accept loop, `tollgate_listener::serve` with the
//! gateway's own per-connection state. Each connection is served with
//! HTTP/1.1 (keep-alive, upgrades) or HTTP/2 (prior knowledge, as on any
//! cleartext port), whichever the client speaks, and each of its requests
//! carries the connection's [`PeerAddr`] and its own upstream connection
//! ([`PairedUpstream`]), which the connection's task drives.
//!
//! What a client may hold, and for how long, is the listener's
//! [`ConnectionSettings`]: a cap on open connections, bounded head, body
//! and idle times. Other limits on what a client may send before its
//! request reaches the service are hyper's defaults, which bound memory
//! per connection: for HTTP/1, at most 100 header fields and a read
//! buffer of about 400 KiB (a longer head is refused with `431`); for
//! HTTP/2, a header list of 16 KiB and 200 concurrent streams.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::{Body, Incoming};
use tokio::net::TcpListener;
use tollgate_listener::{ConnectionObserver, ConnectionSettings, Protocols, TimedBody};
use tollgate_tower::RateLimitService;

use crate::paired::{self, PairedUpstream};
use crate::proxy::Proxy;

/// The errors a service or a body may fail with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of the requests the gateway serves: the client's, under the
/// body read timeout.
pub type RequestBody = TimedBody<Incoming>;

/// A service the listener makes for each client connection from the one
/// it was given: told the connection's address and handed its upstream
/// connection once, rather than through each request's extensions (an
/// allocation and two insertions per request).
pub trait PerConnection: Sized {
    /// The service for the connection from `peer`, whose upstream
    /// connection is `pair`.
    fn for_connection(&self, peer: SocketAddr, pair: &PairedUpstream<RequestBody>) -> Self;
}

impl PerConnection for Proxy<RequestBody> {
    fn for_connection(&self, peer: SocketAddr, pair: &PairedUpstream<RequestBody>) -> Self {
        Proxy::for_connection(self, peer, pair)
    }
}

impl<S: PerConnection, St> PerConnection for RateLimitService<S, St> {
    /// The limits around the inner service made for the connection, with
    /// the connection's address as the requests' peer.
    fn for_connection(&self, peer: SocketAddr, pair: &PairedUpstream<RequestBody>) -> Self {
        self.with_inner(self.get_ref().for_connection(peer, pair))
            .with_peer(peer)
    }
}

/// Serves `service` on `listener` under `settings` until `shutdown`
/// completes; then stops accepting, lets every open connection finish the
/// requests it has started (idle keep-alive connections are closed), and
/// returns. Connections are reported to `observer`.
///
/// `service` is typically a [`Proxy`], with the rate-limiting layer
/// around it: made for each connection ([`PerConnection`]). The listener and the signal are
/// passed in, so a test binds `127.0.0.1:0`, spawns this and talks to it
/// over a real socket.
pub async fn run<S, B>(
    listener: TcpListener,
    service: S,
    settings: ConnectionSettings,
    observer: Arc<dyn ConnectionObserver>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    S: tower::Service<Request<RequestBody>, Response = Response<B>>
        + PerConnection
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    tollgate_listener::serve(
        listener,
        settings,
        Protocols::Http1And2,
        observer,
        move |peer| {
            // The client connection and its upstream connection, in one
            // task; the client's end ends both.
            let (pair, driver) = paired::pair::<RequestBody>();
            (service.for_connection(peer, &pair), driver)
        },
        shutdown,
    )
    .await
}
