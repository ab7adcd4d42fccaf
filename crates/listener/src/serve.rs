//! [`serve`]: the accept loop, with the cap on open connections, the
//! timeouts of [`ConnectionSettings`] and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulConnection;
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::activity::{ActiveIo, Activity};
use crate::body::TimedBody;
use crate::observer::ConnectionObserver;
use crate::service::Served;
use crate::settings::ConnectionSettings;
use crate::BoxError;

/// How long to pause accepting after an accept error (out of file
/// descriptors, most likely), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The protocols a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocols {
    /// HTTP/1.1 (keep-alive, upgrades) or HTTP/2 with prior knowledge,
    /// whichever the client speaks.
    Http1And2,
    /// HTTP/2 only (gRPC).
    Http2,
}

/// Serves connections accepted on `listener` until `shutdown` completes;
/// then stops accepting, lets every open connection finish the requests it
/// has started (idle ones are closed), and returns.
///
/// For each connection, `connect(peer)` gives the service that answers its
/// requests (a `tower::Service`, cloned per request by hyper) and a
/// companion future run alongside it in the connection's task, whichever
/// ends first ending both (the gateway drives the connection's own
/// upstream connection there; `std::future::pending()` when there is
/// none). Request bodies reach the service as [`TimedBody`]s.
///
/// At `settings.max_connections` open connections, a new one is closed as
/// it is accepted and `observer` told; the open ones are served on.
pub async fn serve<C, S, B, D>(
    listener: TcpListener,
    settings: ConnectionSettings,
    protocols: Protocols,
    observer: Arc<dyn ConnectionObserver>,
    mut connect: C,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    C: FnMut(SocketAddr) -> (S, D),
    S: tower::Service<Request<TimedBody<Incoming>>, Response = Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    D: Future<Output = ()> + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Writes are flattened into one buffer (a body is copied into it, up
    // to hyper's 400 KiB limit per connection): one `write` per answer
    // measured faster than hyper's default vectored writes
    // (docs/benchmarks.md, "Gateway").
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .writev(false);
    builder.http2().timer(TokioTimer::new());
    if protocols == Protocols::Http2 {
        builder = builder.http2_only();
    }
    let permits = Arc::new(Semaphore::new(settings.max_connections));
    // `true` once shutting down; the connections' tasks hold receivers, so
    // the sender learns when the last one has ended.
    let (stop, stopping) = watch::channel(false);
    let mut shutdown = pin!(shutdown);
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
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            observer.refused();
            tracing::debug!(%peer, "connection closed: the listener is at its cap");
            drop(stream);
            continue;
        };
        let open = Open::new(permit, Arc::clone(&observer));
        // Small answers are not held back to fill a packet.
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(ActiveIo::new(stream, Arc::clone(&activity), open));
        let (service, companion) = connect(peer);
        let body_read_timeout = settings.body_read_timeout;
        let service = Served {
            service,
            body_read_timeout,
        };
        let connection = builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        let stopping = stopping.clone();
        let idle_timeout = settings.idle_timeout;
        tokio::spawn(async move {
            tokio::select! {
                served = drive(connection, &activity, idle_timeout, stopping) => {
                    if let Err(error) = served {
                        tracing::debug!(%peer, %error, "connection ended with an error");
                    }
                }
                () = companion => {}
            }
        });
    }
    drop(listener);
    let _ = stop.send(true);
    drop(stopping);
    tracing::info!(
        connections = stop.receiver_count(),
        "stopped accepting; finishing the requests in flight"
    );
    stop.closed().await;
    Ok(())
}

/// Serves `connection` until it ends; shuts it down gracefully when no
/// byte has moved for `idle_timeout`, or when `stopping` turns true; and
/// drops it when, shut down gracefully, it still moves no byte for another
/// `idle_timeout` (a client that never finished an HTTP/2 handshake, or
/// never reads its answer).
///
/// The connection's task is woken several times per request (the client's
/// bytes, the upstream's, hyper's own channels), and each wake-up polls
/// this future. The idle timer and the shutdown signal are polled only
/// when they may have something to say — the timer has fired, the signal
/// has changed, or the task's waker is not the one they hold — rather than
/// on every wake-up: a `select!` over the three polled all of them each
/// time, which cost about 2,000 instructions per proxied request (the
/// timer's state and the signal's lock; docs/benchmarks.md, "Gateway").
async fn drive<C>(
    connection: C,
    activity: &Activity,
    idle_timeout: Duration,
    stopping: watch::Receiver<bool>,
) -> Result<(), BoxError>
where
    C: GracefulConnection<Error = BoxError>,
{
    let mut connection = pin!(connection);
    // Read without waiting: whether the signal changed since the
    // connection started (or its sender is gone).
    let signal = stopping.clone();
    let mut stopping = stopping;
    // An error: the server is gone; stop as well.
    let mut stopped = pin!(async move {
        let _ = stopping.wait_for(|&s| s).await;
    });
    let mut idle = pin!(tokio::time::sleep_until(activity.last() + idle_timeout));
    // The waker the signal and the timer were last polled with, and so
    // will wake.
    let mut stop_waker: Option<Waker> = None;
    let mut idle_waker: Option<Waker> = None;
    // Since when the connection is being shut down gracefully.
    let mut closing: Option<Instant> = None;
    std::future::poll_fn(move |cx| loop {
        if let Poll::Ready(served) = connection.as_mut().poll(cx) {
            return Poll::Ready(served);
        }
        if closing.is_none()
            && (!holds(stop_waker.as_ref(), cx) || signal.has_changed().unwrap_or(true))
        {
            if stopped.as_mut().poll(cx).is_ready() {
                connection.as_mut().graceful_shutdown();
                let now = Instant::now();
                closing = Some(now);
                idle.as_mut().reset(activity.last().max(now) + idle_timeout);
                idle_waker = None;
                continue;
            }
            stop_waker = Some(cx.waker().clone());
        }
        if holds(idle_waker.as_ref(), cx) && !idle.is_elapsed() {
            return Poll::Pending;
        }
        if idle.as_mut().poll(cx).is_pending() {
            idle_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let quiet_since = match closing {
            Some(since) => activity.last().max(since),
            None => activity.last(),
        };
        let now = Instant::now();
        // A timer that fired holds no waker: polled again below.
        idle_waker = None;
        if quiet_since + idle_timeout > now {
            idle.as_mut().reset(quiet_since + idle_timeout);
            continue;
        }
        if closing.is_some() {
            tracing::debug!("dropping a connection that stayed idle after a shutdown");
            return Poll::Ready(Ok(()));
        }
        tracing::debug!("closing a connection idle for {idle_timeout:?}");
        connection.as_mut().graceful_shutdown();
        closing = Some(now);
        idle.as_mut().reset(now + idle_timeout);
    })
    .await
}

/// Whether what was polled last with `held` wakes this task's waker.
fn holds(held: Option<&Waker>, cx: &Context<'_>) -> bool {
    held.is_some_and(|w| w.will_wake(cx.waker()))
}

/// An open connection's place under the cap, held by its stream: the
/// permit, and the observer told when the stream is dropped.
struct Open {
    _permit: OwnedSemaphorePermit,
    observer: Arc<dyn ConnectionObserver>,
}

impl Open {
    fn new(permit: OwnedSemaphorePermit, observer: Arc<dyn ConnectionObserver>) -> Open {
        observer.opened();
        Open {
            _permit: permit,
            observer,
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.observer.closed();
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::BodyTimeout;

    /// Counts what the listener reports.
    #[derive(Default)]
    struct Counts {
        open: AtomicUsize,
        refused: AtomicUsize,
    }

    impl ConnectionObserver for Counts {
        fn opened(&self) {
            self.open.fetch_add(1, Ordering::SeqCst);
        }
        fn closed(&self) {
            self.open.fetch_sub(1, Ordering::SeqCst);
        }
        fn refused(&self) {
            self.refused.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A listener under `settings` whose service reads the whole body and
    /// answers `200 <length>`, or `408` when the body timed out.
    async fn start(settings: ConnectionSettings, counts: Arc<Counts>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let service = tower::service_fn(|request: Request<TimedBody<Incoming>>| async {
            let answer = match request.into_body().collect().await {
                Ok(body) => {
                    Response::new(Full::new(Bytes::from(body.to_bytes().len().to_string())))
                }
                Err(error) => {
                    assert!(BodyTimeout::find(&*error).is_some(), "{error}");
                    let mut answer = Response::new(Full::new(Bytes::from_static(b"timeout")));
                    *answer.status_mut() = http::StatusCode::REQUEST_TIMEOUT;
                    answer
                }
            };
            Ok::<_, Infallible>(answer)
        });
        tokio::spawn(serve(
            listener,
            settings,
            Protocols::Http1And2,
            counts,
            move |_| (service, std::future::pending()),
            std::future::pending(),
        ));
        address
    }

    /// Everything the server sends until it closes the connection.
    async fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
        let mut answer = Vec::new();
        let ended =
            tokio::time::timeout(Duration::from_secs(3600), stream.read_to_end(&mut answer)).await;
        assert!(ended.is_ok(), "the connection was still open after an hour");
        answer
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_finishes_its_request_head_is_disconnected() {
        let address = start(ConnectionSettings::default(), Arc::default()).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: slow\r\n")
            .await
            .unwrap();
        let started = tokio::time::Instant::now();
        let answer = until_closed(&mut stream).await;
        assert!(started.elapsed() >= crate::DEFAULT_HEADER_READ_TIMEOUT);
        assert!(!answer.starts_with(b"HTTP/1.1 200"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_coming_is_timed_out() {
        let settings = ConnectionSettings {
            body_read_timeout: Duration::from_secs(5),
            ..ConnectionSettings::default()
        };
        let address = start(settings, Arc::default()).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"POST / HTTP/1.1\r\nHost: slow\r\nContent-Length: 10\r\n\r\nhalf")
            .await
            .unwrap();
        let answer = String::from_utf8(until_closed(&mut stream).await).unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_are_closed_and_busy_ones_are_not() {
        let settings = ConnectionSettings {
            idle_timeout: Duration::from_secs(5),
            ..ConnectionSettings::default()
        };
        let counts = Arc::new(Counts::default());
        let address = start(settings, Arc::clone(&counts)).await;
        // Silent from the start.
        let mut silent = TcpStream::connect(address).await.unwrap();
        assert!(until_closed(&mut silent).await.is_empty());
        // Idle after an answer.
        let mut used = TcpStream::connect(address).await.unwrap();
        used.write_all(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc")
            .await
            .unwrap();
        let answer = String::from_utf8(until_closed(&mut used).await).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("\r\n\r\n3"), "{answer}");
        // A body sent slowly, each part within the idle timeout, is read
        // whole however long it takes.
        let mut slow = TcpStream::connect(address).await.unwrap();
        slow.write_all(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\n\r\n")
            .await
            .unwrap();
        for part in [b"ab", b"cd", b"ef"] {
            tokio::time::sleep(Duration::from_secs(4)).await;
            slow.write_all(part).await.unwrap();
        }
        let answer = String::from_utf8(until_closed(&mut slow).await).unwrap();
        assert!(answer.ends_with("\r\n\r\n6"), "{answer}");
    }

    /// Sends `request` and reads one answer (head and `Content-Length`
    /// body).
    async fn exchange(stream: &mut TcpStream, request: &[u8]) -> String {
        stream.write_all(request).await.unwrap();
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        while !answer.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).await.unwrap();
            answer.push(byte[0]);
        }
        let head = String::from_utf8(answer).unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).await.unwrap();
        head + std::str::from_utf8(&body).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_closes_idle_keep_alive_connections_and_returns() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let service = tower::service_fn(|_: Request<TimedBody<Incoming>>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(serve(
            listener,
            ConnectionSettings::default(),
            Protocols::Http1And2,
            Arc::new(Counts::default()),
            move |_| (service, std::future::pending()),
            async move {
                let _ = stopped.await;
            },
        ));
        // Served once, then idle on a keep-alive connection whose task has
        // been woken (and its timers and signal polled) several times.
        let mut stream = TcpStream::connect(address).await.unwrap();
        for _ in 0..3 {
            let answer = exchange(&mut stream, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
        let started = tokio::time::Instant::now();
        stop.send(()).unwrap();
        assert!(until_closed(&mut stream).await.is_empty());
        // By the shutdown, not by the idle timeout.
        assert!(started.elapsed() < crate::DEFAULT_IDLE_TIMEOUT);
        let returned = tokio::time::timeout(Duration::from_secs(10), served).await;
        assert!(matches!(returned, Ok(Ok(Ok(())))), "{returned:?}");
    }

    #[tokio::test]
    async fn connections_over_the_cap_are_closed_and_counted_and_open_ones_served() {
        let settings = ConnectionSettings {
            max_connections: 2,
            ..ConnectionSettings::default()
        };
        let counts = Arc::new(Counts::default());
        let address = start(settings, Arc::clone(&counts)).await;
        let request = b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx";
        let mut open = Vec::new();
        for _ in 0..2 {
            let mut stream = TcpStream::connect(address).await.unwrap();
            let answer = exchange(&mut stream, request).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            open.push(stream);
        }
        let mut over = TcpStream::connect(address).await.unwrap();
        let _ = over.write_all(request).await;
        let mut answer = Vec::new();
        // Closed without an answer (a reset is as good as an end).
        let _ = over.read_to_end(&mut answer).await;
        assert!(answer.is_empty());
        assert_eq!(counts.refused.load(Ordering::SeqCst), 1);
        assert_eq!(counts.open.load(Ordering::SeqCst), 2);
        // The open connections are still served.
        for stream in &mut open {
            let answer = exchange(stream, request).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
    }
}
