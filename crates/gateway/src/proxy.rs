//! [`Proxy`]: the `tower::Service` that forwards a request to the upstream
//! and answers with the upstream's response.
//!
//! A request is rewritten onto the upstream ([`Upstream::target`]), loses
//! its hop-by-hop fields ([`hop_by_hop`](super::hop_by_hop)), gains the
//! forwarding fields ([`forwarded`](super::forwarded)) and is sent on a
//! pooled keep-alive connection; the response loses its hop-by-hop fields
//! and comes back. Neither body is buffered: the client's body is the
//! upstream request's body, and the upstream's body the answer's.
//!
//! The proxy never fails as a service: a failure is answered
//! ([`ProxyError`]), so a layer around it sees only responses.

use std::convert::Infallible;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, Version};
use hyper::body::{Body, Incoming};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;
use tollgate_tower::{PeerAddr, TrailersWanted};

use crate::body::ProxyBody;
use crate::error::ProxyError;
use crate::forwarded;
use crate::hop_by_hop::{self, Upgrade};
use crate::paired::{PairedUpstream, Sent, UpstreamTimer};
use crate::tls::{self, UpstreamTlsError};
use crate::upgrade;
use crate::upstream::Upstream;

/// How long an idle upstream connection is kept for reuse.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How the proxy speaks to its upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySettings {
    /// Answer `504` when the upstream has not sent its answer's headers
    /// within this long of the request (connecting and the TLS handshake
    /// included). A body that is already streaming is not timed.
    pub timeout: Duration,
    /// For an `https://` upstream, the PEM file of the CA certificates to
    /// trust instead of the system's.
    pub tls_ca: Option<PathBuf>,
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings {
            timeout: Duration::from_secs(30),
            tls_ca: None,
        }
    }
}

/// The errors a request body may fail with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The future of [`Proxy::call`].
pub type ProxyFuture =
    Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

/// A reverse proxy to one [`Upstream`], as a `tower::Service` over
/// requests with body `B` (hyper's [`Incoming`] when serving).
///
/// Cheap to clone: clones share the connection pool. The peer address is
/// read from the request's [`PeerAddr`] extension (the gateway's listener
/// puts it there) for `X-Forwarded-For`.
///
/// ```
/// use tollgate_gateway::{Proxy, ProxySettings};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let upstream = "http://127.0.0.1:9000".parse().unwrap();
/// let proxy: Proxy = Proxy::new(upstream, ProxySettings::default()).unwrap();
/// assert_eq!(proxy.upstream().to_string(), "http://127.0.0.1:9000");
/// # }
/// ```
pub struct Proxy<B = Incoming> {
    /// One pointer: a layer around the proxy clones it for every request.
    inner: Arc<ProxyInner<B>>,
}

struct ProxyInner<B> {
    client: Client<HttpsConnector<HttpConnector>, B>,
    /// The pool's connector, for the connections of client connections'
    /// pairs.
    connector: HttpsConnector<HttpConnector>,
    upstream: Upstream,
    timeout: Duration,
}

impl<B> Clone for Proxy<B> {
    fn clone(&self) -> Self {
        Proxy {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<B> Proxy<B>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    /// A proxy to `upstream`. Call it within a tokio runtime: the pool
    /// runs its connections on it. Fails only when an `https://`
    /// upstream's CA certificates cannot be loaded.
    pub fn new(upstream: Upstream, settings: ProxySettings) -> Result<Proxy<B>, UpstreamTlsError> {
        let tls = if upstream.is_https() {
            tls::client_config(settings.tls_ca.as_deref())?
        } else {
            tls::unused_config()?
        };
        let mut http = HttpConnector::new();
        // Small answers are not held back to fill a packet.
        http.set_nodelay(true);
        // https:// targets go to the TLS wrapper below.
        http.enforce_http(false);
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            // The idle timeout needs a timer to be enforced.
            .pool_timer(TokioTimer::new())
            // Flattened writes, as on the client side (see the listener).
            .http1_writev(false)
            .build(connector.clone());
        Ok(Proxy {
            inner: Arc::new(ProxyInner {
                client,
                connector,
                upstream,
                timeout: settings.timeout,
            }),
        })
    }

    /// The upstream.
    pub fn upstream(&self) -> &Upstream {
        &self.inner.upstream
    }

    /// Forwards `request`, answering any failure.
    async fn forward(self, request: Request<B>) -> Response<ProxyBody> {
        match self.exchange(request).await {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(%error, "request answered by the gateway");
                error.into_response()
            }
        }
    }

    async fn exchange(self, mut request: Request<B>) -> Result<Response<ProxyBody>, ProxyError> {
        if request.method() == Method::CONNECT {
            return Err(ProxyError::ConnectMethod);
        }
        let upgrading =
            request.version() == Version::HTTP_11 && hop_by_hop::asks_upgrade(request.headers());
        let client_upgrade = upgrading.then(|| hyper::upgrade::on(&mut request));
        let (mut parts, body) = request.into_parts();
        let peer = parts.extensions.get::<PeerAddr>().map(|p| p.0.ip());
        let host = forwarded::client_host(&parts);
        let upgrade = if upgrading {
            Upgrade::Keep
        } else {
            Upgrade::Remove
        };
        hop_by_hop::strip(&mut parts.headers, upgrade);
        if !upgrading && parts.extensions.get::<TrailersWanted>().is_some() {
            // The rate-limiting layer reads a trailer of the answer, which
            // an HTTP/1.1 upstream sends only when asked.
            hop_by_hop::ask_trailers(&mut parts.headers);
        }
        forwarded::add(&mut parts.headers, peer, host);
        parts.uri = self.inner.upstream.target(&parts.uri)?;
        // The upstream is spoken to in HTTP/1.1 whatever the client spoke.
        parts.version = Version::HTTP_11;
        // The client connection's own upstream connection, when it has
        // one (the gateway's listener gives each); upgrades take the pool,
        // which hands their connection over.
        let pair = parts
            .extensions
            .remove::<PairedUpstream<B>>()
            .filter(|_| !upgrading);
        // Extensions belong to this hop (the server's upgrade handle among
        // them); none are meant for the upstream client.
        parts.extensions.clear();
        let request = Request::from_parts(parts, body);
        let inner = &*self.inner;
        let mut timer = UpstreamTimer::new(pair.as_ref(), Instant::now() + inner.timeout);
        let response = match timer.within(self.send(pair, request)).await {
            Some(answer) => answer?,
            None => {
                return Err(ProxyError::Timeout {
                    upstream: inner.upstream.to_string(),
                    timeout: inner.timeout,
                })
            }
        };
        if let Some(client_upgrade) = client_upgrade {
            return Ok(upgrade::answer(response, client_upgrade));
        }
        let (mut parts, body) = response.into_parts();
        hop_by_hop::strip(&mut parts.headers, Upgrade::Remove);
        // The client hears the gateway's HTTP version, not the upstream's:
        // an HTTP/1.0 upstream must not turn the client's keep-alive
        // connection into a one-shot one.
        parts.version = Version::HTTP_11;
        Ok(Response::from_parts(parts, ProxyBody::upstream(body)))
    }
}

impl<B> Proxy<B>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    /// Sends `request` on `pair` when it takes it, on the pool otherwise.
    async fn send(
        &self,
        pair: Option<PairedUpstream<B>>,
        request: Request<B>,
    ) -> Result<Response<Incoming>, ProxyError> {
        let inner = &*self.inner;
        let request = match pair {
            Some(pair) => match pair.send(request, &inner.connector, &inner.upstream).await {
                Sent::Answered(answer) => return answer,
                Sent::Declined(request) => request,
            },
            None => request,
        };
        // Boxed: the pool's future is large, and this path is the rare one
        // (tests, upgrades, a busy pair); the common one's state stays
        // small, which is copied as the request moves through the layers.
        Box::pin(inner.client.request(request))
            .await
            .map_err(|error| ProxyError::from_client(&inner.upstream, &error))
    }
}

impl<B> tower::Service<Request<B>> for Proxy<B>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = ProxyFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The pool opens connections on demand; there is nothing to wait
        // for before taking a request.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> ProxyFuture {
        let proxy = self.clone();
        Box::pin(async move { Ok(proxy.forward(request).await) })
    }
}
