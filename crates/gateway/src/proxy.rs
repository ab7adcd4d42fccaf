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
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, Version};
use hyper::body::{Body, Incoming};
use hyper::upgrade::OnUpgrade;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;
use tollgate_tower::{PeerAddr, TrailersWanted};

use crate::body::ProxyBody;
use crate::error::ProxyError;
use crate::forwarded::{self, ForwardedPeer};
use crate::hop_by_hop::{self, Upgrade};
use crate::paired::{answered, Answer, Attempt, Connector, PairedUpstream, Sent, UpstreamTimer};
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
/// Cheap to clone: clones share the connection pool. The peer address for
/// `X-Forwarded-For` is the client connection's, when the proxy was made
/// for one ([`Proxy::for_connection`], as the gateway's listener does),
/// else the request's [`PeerAddr`] extension.
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
    /// Shared by every clone: a layer around the proxy clones it for every
    /// request.
    inner: Arc<ProxyInner<B>>,
    /// The client connection this proxy serves, when it was made for one
    /// ([`Proxy::for_connection`]).
    /// Shared by the clones made for the connection's requests.
    connection: Option<Arc<ClientConnection<B>>>,
}

struct ProxyInner<B> {
    client: Client<HttpsConnector<HttpConnector>, B>,
    /// How the pairs' connections are made.
    connector: Connector,
    upstream: Upstream,
    timeout: Duration,
}

/// A client connection's address and its own upstream connection.
struct ClientConnection<B> {
    peer: ForwardedPeer,
    pair: PairedUpstream<B>,
}

impl<B> Clone for Proxy<B> {
    fn clone(&self) -> Self {
        Proxy {
            inner: Arc::clone(&self.inner),
            connection: self.connection.clone(),
        }
    }
}

/// A request rewritten for the upstream and handed to its connection (or
/// about to be), with what its answer needs.
struct Started<F, B> {
    attempt: Attempt<F, B>,
    /// The pair the request went to, if it did.
    pair: Option<PairedUpstream<B>>,
    /// The client's side of a protocol upgrade.
    client_upgrade: Option<OnUpgrade>,
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
            .wrap_connector(http.clone());
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
                connector: Connector {
                    plain: http,
                    tls: connector,
                },
                upstream,
                timeout: settings.timeout,
            }),
            connection: None,
        })
    }

    /// This proxy for one client connection: `peer` is the connection's
    /// address (for `X-Forwarded-For`, instead of a [`PeerAddr`] per
    /// request), and `pair` its own upstream connection, which its
    /// requests use when it is free.
    pub fn for_connection(&self, peer: SocketAddr, pair: &PairedUpstream<B>) -> Proxy<B> {
        Proxy {
            inner: Arc::clone(&self.inner),
            connection: Some(Arc::new(ClientConnection {
                peer: ForwardedPeer::new(peer.ip()),
                pair: pair.clone(),
            })),
        }
    }

    /// The upstream.
    pub fn upstream(&self) -> &Upstream {
        &self.inner.upstream
    }

    /// Rewrites `request` for the upstream and hands it to the client
    /// connection's upstream connection when that is free; or why it
    /// cannot be forwarded. Done as the request comes, not in the
    /// answer's future (see [`PairedUpstream::try_send`]).
    fn start(
        &self,
        mut request: Request<B>,
    ) -> Result<Started<impl Future<Output = Answer<B>> + Send + 'static, B>, ProxyError> {
        if request.method() == Method::CONNECT {
            return Err(ProxyError::ConnectMethod);
        }
        let upgrading =
            request.version() == Version::HTTP_11 && hop_by_hop::asks_upgrade(request.headers());
        let client_upgrade = upgrading.then(|| hyper::upgrade::on(&mut request));
        // Rewritten in place: taking the request apart and putting it
        // back together moves it twice.
        let extension_peer;
        let peer = match &self.connection {
            Some(connection) => Some(&connection.peer),
            None => {
                extension_peer = request
                    .extensions()
                    .get::<PeerAddr>()
                    .map(|p| ForwardedPeer::new(p.0.ip()));
                extension_peer.as_ref()
            }
        };
        let host = forwarded::client_host(request.headers(), request.uri());
        let upgrade = if upgrading {
            Upgrade::Keep
        } else {
            Upgrade::Remove
        };
        let trailers_wanted = request.extensions().get::<TrailersWanted>().is_some();
        let headers = request.headers_mut();
        hop_by_hop::strip(headers, upgrade);
        if !upgrading && trailers_wanted {
            // The rate-limiting layer reads a trailer of the answer, which
            // an HTTP/1.1 upstream sends only when asked.
            hop_by_hop::ask_trailers(headers);
        }
        forwarded::add(headers, peer, host);
        // The origin form, as a connection of our own writes it; the pool
        // gets the absolute form (see `send`).
        *request.uri_mut() = self.inner.upstream.origin_form(request.uri())?;
        // The upstream is spoken to in HTTP/1.1 whatever the client spoke.
        *request.version_mut() = Version::HTTP_11;
        // Extensions belong to this hop (the server's upgrade handle among
        // them); none are meant for the upstream client.
        request.extensions_mut().clear();
        // The client connection's own upstream connection, when it has
        // one; upgrades take the pool, which hands their connection over.
        let pair = self
            .connection
            .as_ref()
            .filter(|_| !upgrading)
            .map(|c| c.pair.clone());
        let attempt = match &pair {
            Some(pair) => pair.try_send(request),
            None => Attempt::Declined(Box::new(request)),
        };
        Ok(Started {
            attempt,
            pair,
            client_upgrade,
        })
    }
}

/// The answer to a started request, or to one that could not start.
async fn finish<F, B>(
    inner: Arc<ProxyInner<B>>,
    started: Result<Started<F, B>, ProxyError>,
) -> Result<Response<ProxyBody>, Infallible>
where
    F: Future<Output = Answer<B>>,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    let answered = match started {
        Ok(started) => exchange(&inner, started).await,
        Err(error) => Err(error),
    };
    Ok(match answered {
        Ok(response) => response,
        Err(error) => {
            tracing::warn!(%error, "request answered by the gateway");
            error.into_response()
        }
    })
}

async fn exchange<F, B>(
    inner: &ProxyInner<B>,
    started: Started<F, B>,
) -> Result<Response<ProxyBody>, ProxyError>
where
    F: Future<Output = Answer<B>>,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    let Started {
        attempt,
        pair,
        client_upgrade,
    } = started;
    let mut timer = UpstreamTimer::new(pair.as_ref(), Instant::now() + inner.timeout);
    let response = match timer.within(send(inner, attempt, pair.as_ref())).await {
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

/// The upstream's answer to a request the pair took, or the pool's to one
/// it declined.
async fn send<F, B>(
    inner: &ProxyInner<B>,
    attempt: Attempt<F, B>,
    pair: Option<&PairedUpstream<B>>,
) -> Result<Response<Incoming>, ProxyError>
where
    F: Future<Output = Answer<B>>,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    let sent = match (attempt, pair) {
        (Attempt::Sending(answer), _) => answered(answer.await, &inner.upstream),
        (Attempt::Connect(request), Some(pair)) => {
            // Boxed: connecting is once per client connection, and its
            // future is large.
            Box::pin(pair.connect_and_send(*request, &inner.connector, &inner.upstream)).await
        }
        (Attempt::Declined(request) | Attempt::Connect(request), _) => Sent::Declined(*request),
    };
    let request = match sent {
        Sent::Answered(answer) => return answer,
        Sent::Declined(request) => request,
    };
    // Boxed: the pool's path holds the request and the pool's future,
    // several times the common path's state, and every answer future would
    // carry that room (it is copied whole into its box per request); this
    // path is the rare one (tests, upgrades, a busy pair).
    Box::pin(through_pool(inner, request)).await
}

/// The pool's answer to a request the pair declined.
async fn through_pool<B>(
    inner: &ProxyInner<B>,
    mut request: Request<B>,
) -> Result<Response<Incoming>, ProxyError>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    // The pool writes the target in origin form itself, from the
    // absolute form it routes by.
    *request.uri_mut() = inner.upstream.absolute(request.uri())?;
    inner
        .client
        .request(request)
        .await
        .map_err(|error| ProxyError::from_client(&inner.upstream, &error))
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
        let started = self.start(request);
        Box::pin(finish(Arc::clone(&self.inner), started))
    }
}
