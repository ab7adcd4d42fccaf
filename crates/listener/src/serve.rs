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

use crate::activity::{ActiveIo, Activity, HeadClock};
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
    // The head's timeout is the listener's own, on the connection's idle
    // timer (see `drive`): hyper's makes a timer for every request.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
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
        let activity = Arc::new(Activity::new(protocols != Protocols::Http2));
        let io = TokioIo::new(ActiveIo::new(stream, Arc::clone(&activity), open));
        let (service, companion) = connect(peer);
        let body_read_timeout = settings.body_read_timeout;
        let service = Served {
            service: std::cell::RefCell::new(service),
            body_read_timeout,
            activity: Arc::clone(&activity),
        };
        let connection = builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        let stopping = stopping.clone();
        let timeouts = Timeouts {
            idle: settings.idle_timeout,
            head: settings.header_read_timeout,
        };
        tokio::spawn(async move {
            // In a fixed order: each wake-up polls both anyway, and a
            // random order costs a random number per wake-up.
            tokio::select! {
                biased;
                served = drive(connection, &activity, timeouts, stopping) => {
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

/// The timeouts [`drive`] enforces.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    /// No byte moved either way for this long: shut down.
    idle: Duration,
    /// An HTTP/1 connection waited this long for a request head (from its
    /// start or the end of its last answer): closed.
    head: Duration,
}

/// Serves `connection` until it ends; shuts it down gracefully when no
/// byte has moved for the idle timeout, or when `stopping` turns true;
/// drops it when, shut down gracefully, it still moves no byte for
/// another idle timeout (a client that never finished an HTTP/2
/// handshake, or never reads its answer); and drops it when, speaking
/// HTTP/1, it waited the head timeout for a request head (a client that
/// sends nothing, or its head a byte at a time, or nothing after an
/// answer).
///
/// The connection's task is woken several times per request (the client's
/// bytes, the upstream's, hyper's own channels), and each wake-up polls
/// this future. The timer and the shutdown signal are polled only
/// when they may have something to say — the timer has fired, the signal
/// has changed, or the task's waker is not the one they hold — rather than
/// on every wake-up: a `select!` over the three polled all of them each
/// time, which cost about 2,000 instructions per proxied request (the
/// timer's state and the signal's lock; docs/benchmarks.md, "Gateway").
///
/// One timer serves both deadlines, the idle one and the head's, and is
/// never moved as they move later: when it fires, the deadlines are read
/// again, and it is set to the nearer one if neither has passed.
async fn drive<C>(
    connection: C,
    activity: &Activity,
    timeouts: Timeouts,
    stopping: watch::Receiver<bool>,
) -> Result<(), BoxError>
where
    C: GracefulConnection<Error = BoxError>,
{
    let idle_timeout = timeouts.idle;
    let mut connection = pin!(connection);
    // Read without waiting: whether the signal changed since the
    // connection started (or its sender is gone).
    let signal = stopping.clone();
    let mut stopping = stopping;
    // An error: the server is gone; stop as well.
    let mut stopped = pin!(async move {
        let _ = stopping.wait_for(|&s| s).await;
    });
    // When the timer is next due at `now`, with the idle deadline `idle`:
    // then, or when a head is due if sooner; while a request is being
    // answered, no later than a head timeout from now, the soonest a head
    // can be due once its answer ends.
    let due = |idle: Instant, now: Instant| match activity.head_clock(timeouts.head) {
        HeadClock::Untimed => idle,
        HeadClock::Answering => idle.min(now + timeouts.head),
        HeadClock::Due(head) => idle.min(head),
    };
    let started = Instant::now();
    let mut timer = pin!(tokio::time::sleep_until(due(
        activity.last() + idle_timeout,
        started
    )));
    // The waker the signal and the timer were last polled with, and so
    // will wake.
    let mut stop_waker: Option<Waker> = None;
    let mut timer_waker: Option<Waker> = None;
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
                timer
                    .as_mut()
                    .reset(activity.last().max(now) + idle_timeout);
                timer_waker = None;
                continue;
            }
            stop_waker = Some(cx.waker().clone());
        }
        if holds(timer_waker.as_ref(), cx) && !timer.is_elapsed() {
            return Poll::Pending;
        }
        if timer.as_mut().poll(cx).is_pending() {
            timer_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let quiet_since = match closing {
            Some(since) => activity.last().max(since),
            None => activity.last(),
        };
        let now = Instant::now();
        // A timer that fired holds no waker: polled again below.
        timer_waker = None;
        if matches!(activity.head_clock(timeouts.head), HeadClock::Due(head) if head <= now) {
            tracing::debug!(
                "closing a connection that sent no request head within {:?}",
                timeouts.head
            );
            return Poll::Ready(Ok(()));
        }
        let idle = quiet_since + idle_timeout;
        if idle > now {
            timer.as_mut().reset(due(idle, now));
            continue;
        }
        if closing.is_some() {
            tracing::debug!("dropping a connection that stayed idle after a shutdown");
            return Poll::Ready(Ok(()));
        }
        tracing::debug!("closing a connection idle for {idle_timeout:?}");
        connection.as_mut().graceful_shutdown();
        closing = Some(now);
        timer.as_mut().reset(due(now + idle_timeout, now));
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
            // An answer that takes longer than the head timeout of the
            // tests, not the idle one.
            if request.uri().path() == "/slow" {
                tokio::time::sleep(Duration::from_secs(15)).await;
            }
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

    /// Keeps paused time from leaping while the runtime waits for a
    /// socket: tokio advances a paused clock to the next timer whenever
    /// it has nothing to run, and with a connection's deadline next, a
    /// round trip over loopback could take that long. With a timer every
    /// 100 ms, no leap is longer.
    fn tick_steadily() {
        tokio::spawn(async {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }

    /// Settings with a head timeout of 10 s, shorter than the idle
    /// timeout (20 s), so that what closes a connection tells which.
    fn head_settings() -> ConnectionSettings {
        ConnectionSettings {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(20),
            ..ConnectionSettings::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_sent_a_byte_at_a_time_is_cut_off() {
        tick_steadily();
        let address = start(head_settings(), Arc::default()).await;
        let stream = TcpStream::connect(address).await.unwrap();
        let (mut read, mut write) = stream.into_split();
        let started = tokio::time::Instant::now();
        // A byte every 2 s: the idle timeout never passes.
        tokio::spawn(async move {
            write.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
            for _ in 0..1000 {
                tokio::time::sleep(Duration::from_secs(2)).await;
                if write.write_all(b"X").await.is_err() {
                    return;
                }
            }
        });
        let mut answer = Vec::new();
        let _ = read.read_to_end(&mut answer).await;
        let took = started.elapsed();
        assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
        assert!(took >= Duration::from_secs(10), "{took:?}");
        assert!(took < Duration::from_secs(20), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_head_is_due_a_head_timeout_after_an_answer() {
        tick_steadily();
        let address = start(head_settings(), Arc::default()).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        // The first answer comes long after the head timeout: a request
        // being answered is not timed.
        let slow = exchange(
            &mut stream,
            b"POST /slow HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nab",
        )
        .await;
        assert!(slow.ends_with("\r\n\r\n2"), "{slow}");
        // The next head is due 10 s after that answer: with nothing sent,
        // the connection is closed then, before the idle timeout would
        // have closed it.
        let waiting = tokio::time::Instant::now();
        assert!(until_closed(&mut stream).await.is_empty());
        let took = waiting.elapsed();
        assert!(took >= Duration::from_secs(10), "{took:?}");
        assert!(took < Duration::from_secs(20), "{took:?}");
    }

    /// In real time: paused time leaps ahead while an HTTP/2 exchange
    /// waits on its sockets. The pause between the requests is the time
    /// under test, past the head timeout; a slow machine only makes it
    /// longer, and the idle timeout is far beyond it.
    #[tokio::test]
    async fn http2_connections_are_not_timed_between_requests() {
        let settings = ConnectionSettings {
            header_read_timeout: Duration::from_millis(500),
            idle_timeout: Duration::from_secs(600),
            ..ConnectionSettings::default()
        };
        let address = start(settings, Arc::default()).await;
        let stream = TcpStream::connect(address).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        for pause in [0, 1500] {
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let request = Request::post("http://t/")
                .body(Full::new(Bytes::from_static(b"abc")))
                .unwrap();
            let answer = sender.send_request(request).await.unwrap();
            assert_eq!(answer.status(), 200);
            let body = answer.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"3");
        }
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
