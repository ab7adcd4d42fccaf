//! A small hyper upstream for the gateway's tests, run in the test process
//! on a free loopback port. Its routes (by path prefix):
//!
//! - `/echo…`: answers JSON with the method, target, headers and body it
//!   received; `?status=N` picks the status. Its answer carries hop-by-hop
//!   fields (`Connection: x-resp-hop`, `X-Resp-Hop`, `Keep-Alive`,
//!   `Proxy-Authenticate`) that a proxy must remove, and `X-Upstream: yes`.
//! - `/download?bytes=N`: N bytes in 64 KiB chunks, made as they are sent.
//! - `/upload`: reads the body frame by frame and answers `{"bytes": N}`;
//!   reports [`Event::FirstChunk`] when the first data frame arrives.
//! - `/hold`: sends a first chunk (`first;`), reports
//!   [`Event::FirstSent`], and sends the rest (`rest`) only after
//!   [`Upstream::release`].
//! - `/wait`: reports [`Event::Arrived`] and answers `done` only after
//!   [`Upstream::release`].
//! - `/slow`: never answers.
//! - `/truncate`: promises 1000 bytes, sends 100, and breaks the connection
//!   after [`Upstream::release`] (so the test sees the head first).
//! - `/ws`: a WebSocket echo server.
//! - `/tokens…?used=N[&status=S]`: answers `tokens` with
//!   `x-tokens-used: N` (no such header without `used`, the value as given
//!   otherwise).
//! - `/tokens…?stream=1&used=N`: a chunked body (`tok`, then `ens` after
//!   [`Upstream::release`]) ending with the trailer `x-tokens-used: N`,
//!   declared in `Trailer` (sent when the request says `TE: trailers`);
//!   reports [`Event::FirstSent`] after the first chunk.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Mutex};
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

/// How long a test waits for an event before failing.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// Size of the chunks `/download` sends and tests upload.
pub(crate) const CHUNK: usize = 64 * 1024;

/// What the upstream tells the test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// `/upload` received its first data frame, of this many bytes.
    FirstChunk(usize),
    /// `/hold` sent its first chunk.
    FirstSent,
    /// `/wait` received its request.
    Arrived,
}

/// A running upstream; stops with the test's runtime.
pub(crate) struct Upstream {
    /// Its address.
    pub(crate) address: SocketAddr,
    connections: Arc<AtomicUsize>,
    events: Mutex<mpsc::UnboundedReceiver<Event>>,
    release: watch::Sender<bool>,
}

#[derive(Clone)]
struct Shared {
    events: mpsc::UnboundedSender<Event>,
    released: watch::Receiver<bool>,
}

impl Upstream {
    /// Starts the upstream on `127.0.0.1:0`.
    pub(crate) async fn start() -> Upstream {
        Upstream::start_with(None).await
    }

    /// Starts the upstream on `127.0.0.1:0` behind TLS, with the
    /// certificate chain and key of these PEM files.
    pub(crate) async fn start_tls(cert: &Path, key: &Path) -> Upstream {
        let chain = CertificateDer::pem_file_iter(cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        Upstream::start_with(Some(TlsAcceptor::from(Arc::new(config)))).await
    }

    async fn start_with(tls: Option<TlsAcceptor>) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let (events_tx, events) = mpsc::unbounded_channel();
        let (release, released) = watch::channel(false);
        let shared = Shared {
            events: events_tx,
            released,
        };
        let counted = Arc::clone(&connections);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                let shared = shared.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| route(shared.clone(), request));
                    let builder = auto::Builder::new(TokioExecutor::new());
                    let _ = match tls {
                        Some(tls) => {
                            let Ok(stream) = tls.accept(stream).await else {
                                return;
                            };
                            builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                                .await
                        }
                        None => {
                            builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                                .await
                        }
                    };
                });
            }
        });
        Upstream {
            address,
            connections,
            events: Mutex::new(events),
            release,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// `https://localhost:PORT`, for a TLS upstream.
    pub(crate) fn https_url(&self) -> String {
        format!("https://localhost:{}", self.address.port())
    }

    /// Connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The next event, or a test failure after [`PATIENCE`].
    pub(crate) async fn next_event(&self) -> Event {
        let mut events = self.events.lock().await;
        tokio::time::timeout(PATIENCE, events.recv())
            .await
            .expect("the upstream reported nothing in time")
            .expect("the upstream stopped")
    }

    /// Lets every held answer (`/hold`, `/wait`, `/truncate`) go on.
    pub(crate) fn release(&self) {
        let _ = self.release.send(true);
    }
}

type Answer = Response<TestBody>;

async fn route(shared: Shared, request: Request<Incoming>) -> Result<Answer, Infallible> {
    let path = request.uri().path().to_owned();
    let answer = if path.starts_with("/echo") {
        echo(request).await
    } else if path == "/download" {
        download(&request)
    } else if path == "/upload" {
        upload(&shared, request).await
    } else if path == "/hold" {
        hold(&shared)
    } else if path == "/wait" {
        shared.events.send(Event::Arrived).unwrap();
        let mut released = shared.released.clone();
        let _ = released.wait_for(|&r| r).await;
        Response::new(TestBody::full("done"))
    } else if path == "/slow" {
        std::future::pending::<()>().await;
        unreachable!()
    } else if path == "/truncate" {
        truncate(&shared)
    } else if path == "/ws" {
        websocket(request)
    } else if path.starts_with("/tokens") {
        if query_param(&request, "stream").is_some() {
            tokens_stream(&shared, &request)
        } else {
            tokens(&request)
        }
    } else {
        let mut answer = Response::new(TestBody::full("no such route"));
        *answer.status_mut() = StatusCode::NOT_FOUND;
        answer
    };
    Ok(answer)
}

async fn echo(request: Request<Incoming>) -> Answer {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut headers = Map::new();
    for name in parts.headers.keys() {
        let values: Vec<Value> = parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| Value::from(String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        headers.insert(name.as_str().to_owned(), Value::Array(values));
    }
    let status = parts
        .uri
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("status=")))
        .and_then(|s| s.parse::<u16>().ok())
        .unwrap_or(200);
    let seen = json!({
        "method": parts.method.as_str(),
        "target": parts.uri.to_string(),
        "version": format!("{:?}", parts.version),
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    });
    let mut answer = Response::new(TestBody::full(seen.to_string()));
    *answer.status_mut() = StatusCode::from_u16(status).unwrap();
    let headers = answer.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("x-upstream", HeaderValue::from_static("yes"));
    headers.insert("connection", HeaderValue::from_static("x-resp-hop"));
    headers.insert("x-resp-hop", HeaderValue::from_static("1"));
    headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
    headers.insert("proxy-authenticate", HeaderValue::from_static("Basic"));
    answer
}

fn download(request: &Request<Incoming>) -> Answer {
    let bytes = request
        .uri()
        .query()
        .and_then(|q| q.strip_prefix("bytes="))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    Response::new(TestBody::repeat(bytes))
}

async fn upload(shared: &Shared, request: Request<Incoming>) -> Answer {
    let mut body = request.into_body();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            break;
        };
        if let Some(data) = frame.data_ref() {
            if total == 0 && !data.is_empty() {
                shared.events.send(Event::FirstChunk(data.len())).unwrap();
            }
            total += data.len();
        }
    }
    Response::new(TestBody::full(json!({ "bytes": total }).to_string()))
}

fn hold(shared: &Shared) -> Answer {
    let (body, sender) = TestBody::channel();
    let shared = shared.clone();
    tokio::spawn(async move {
        sender
            .send(Ok(Bytes::from_static(b"first;")))
            .await
            .unwrap();
        shared.events.send(Event::FirstSent).unwrap();
        let mut released = shared.released.clone();
        let _ = released.wait_for(|&r| r).await;
        let _ = sender.send(Ok(Bytes::from_static(b"rest"))).await;
    });
    Response::new(body)
}

/// The value of `name` in the query of `request`.
fn query_param(request: &Request<Incoming>, name: &str) -> Option<String> {
    request.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    })
}

fn tokens(request: &Request<Incoming>) -> Answer {
    let mut answer = Response::new(TestBody::full("tokens"));
    if let Some(used) = query_param(request, "used") {
        answer
            .headers_mut()
            .insert("x-tokens-used", used.parse().unwrap());
    }
    if let Some(status) = query_param(request, "status") {
        *answer.status_mut() = StatusCode::from_u16(status.parse().unwrap()).unwrap();
    }
    answer
}

fn tokens_stream(shared: &Shared, request: &Request<Incoming>) -> Answer {
    let used = query_param(request, "used").unwrap_or_default();
    let (body, sender) = TestBody::frames();
    let shared = shared.clone();
    tokio::spawn(async move {
        sender
            .send(Frame::data(Bytes::from_static(b"tok")))
            .await
            .unwrap();
        shared.events.send(Event::FirstSent).unwrap();
        let mut released = shared.released.clone();
        let _ = released.wait_for(|&r| r).await;
        let _ = sender.send(Frame::data(Bytes::from_static(b"ens"))).await;
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-tokens-used", used.parse().unwrap());
        let _ = sender.send(Frame::trailers(trailers)).await;
    });
    let mut answer = Response::new(body);
    answer
        .headers_mut()
        .insert("trailer", HeaderValue::from_static("x-tokens-used"));
    answer
}

fn truncate(shared: &Shared) -> Answer {
    let (body, sender) = TestBody::channel();
    let mut released = shared.released.clone();
    tokio::spawn(async move {
        sender.send(Ok(Bytes::from(vec![b'x'; 100]))).await.unwrap();
        let _ = released.wait_for(|&r| r).await;
        let _ = sender
            .send(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "broken on purpose",
            )))
            .await;
    });
    let mut answer = Response::new(body);
    answer
        .headers_mut()
        .insert("content-length", HeaderValue::from_static("1000"));
    answer
}

fn websocket(mut request: Request<Incoming>) -> Answer {
    let Some(key) = request.headers().get("sec-websocket-key") else {
        let mut answer = Response::new(TestBody::full("not a WebSocket request"));
        *answer.status_mut() = StatusCode::BAD_REQUEST;
        return answer;
    };
    let accept = derive_accept_key(key.as_bytes());
    let upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else {
            return;
        };
        let mut socket =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        while let Some(Ok(message)) = socket.next().await {
            if message.is_close() {
                break;
            }
            let echoed = message.is_text() || message.is_binary();
            if echoed && socket.send(message).await.is_err() {
                break;
            }
        }
    });
    let mut answer = Response::new(TestBody::empty());
    *answer.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = answer.headers_mut();
    headers.insert("upgrade", HeaderValue::from_static("websocket"));
    headers.insert("connection", HeaderValue::from_static("upgrade"));
    headers.insert("sec-websocket-accept", accept.parse().unwrap());
    answer
}

/// The bodies of the tests, both ways: a fixed text, bytes made as they are
/// sent, or chunks fed through a channel.
pub(crate) struct TestBody {
    kind: Kind,
}

enum Kind {
    Full(Option<Bytes>),
    Repeat { left: u64, chunk: Bytes },
    Channel(mpsc::Receiver<io::Result<Bytes>>),
    Frames(mpsc::Receiver<Frame<Bytes>>),
}

impl TestBody {
    /// `text` in one frame.
    pub(crate) fn full(text: impl Into<Bytes>) -> TestBody {
        TestBody {
            kind: Kind::Full(Some(text.into())),
        }
    }

    /// No body.
    pub(crate) fn empty() -> TestBody {
        TestBody {
            kind: Kind::Full(None),
        }
    }

    /// `bytes` bytes in [`CHUNK`]-sized frames, one buffer reused for all.
    pub(crate) fn repeat(bytes: u64) -> TestBody {
        TestBody {
            kind: Kind::Repeat {
                left: bytes,
                chunk: Bytes::from(vec![b'.'; CHUNK]),
            },
        }
    }

    /// A body whose frames, data and trailers, are sent on the returned
    /// channel.
    pub(crate) fn frames() -> (TestBody, mpsc::Sender<Frame<Bytes>>) {
        let (sender, receiver) = mpsc::channel(1);
        (
            TestBody {
                kind: Kind::Frames(receiver),
            },
            sender,
        )
    }

    /// A body whose frames are sent on the returned channel; an `Err` breaks
    /// it off.
    pub(crate) fn channel() -> (TestBody, mpsc::Sender<io::Result<Bytes>>) {
        let (sender, receiver) = mpsc::channel(1);
        (
            TestBody {
                kind: Kind::Channel(receiver),
            },
            sender,
        )
    }
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<io::Result<Frame<Bytes>>>> {
        match &mut self.kind {
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Repeat { left, chunk } => {
                if *left == 0 {
                    return Poll::Ready(None);
                }
                let n = (*left).min(chunk.len() as u64) as usize;
                *left -= n as u64;
                Poll::Ready(Some(Ok(Frame::data(chunk.slice(..n)))))
            }
            Kind::Channel(receiver) => receiver
                .poll_recv(cx)
                .map(|item| item.map(|chunk| chunk.map(Frame::data))),
            Kind::Frames(receiver) => receiver.poll_recv(cx).map(|item| item.map(Ok)),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(bytes) => bytes.is_none(),
            Kind::Repeat { left, .. } => *left == 0,
            Kind::Channel(_) | Kind::Frames(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Repeat { left, .. } => SizeHint::with_exact(*left),
            Kind::Channel(_) | Kind::Frames(_) => SizeHint::default(),
        }
    }
}
