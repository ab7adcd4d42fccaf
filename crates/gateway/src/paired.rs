//! [`PairedUpstream`]: a client connection's own keep-alive connection to
//! the upstream, driven by [`PairDriver`] in the client connection's task.
//!
//! Why: through the shared pool (hyper-util's client), a request goes to
//! the task that owns a pooled connection and its answer comes back to the
//! client's task, two task switches and two channels each way; on one
//! core that was a third of the gateway's own time per request. Paired, a
//! client connection's requests are written to, and their answers read
//! from, an upstream connection polled in the same task, as nginx keeps
//! one upstream connection busy with one client's requests at a time. The
//! pool remains for what the pair cannot take at that moment: a request
//! while the pair is busy (HTTP/2 clients send several at once) or still
//! connecting, and upgrades.
//!
//! The pair is made on the connection's first request and lives as long
//! as the client connection, or until the upstream closes it (then the
//! next request makes a new one).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use http::{Request, Response, Uri};
use hyper::body::{Body, Incoming};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use parking_lot::Mutex;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tollgate_listener::BodyTimeout;
use tower::ServiceExt;

use crate::error::{self, ProxyError};
use crate::upstream::Upstream;

/// The errors a request body may fail with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connection's future, boxed so that the slot can hold any transport.
type Driving = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The shared state of a pair: the sender requests go through, and a
/// connection future waiting for the driver to take it.
struct Pairing<B> {
    sender: Option<SendRequest<B>>,
    /// A new connection, for the driver to poll from now on.
    handed_over: Option<Driving>,
    /// The driver's waker, woken when a connection is handed over.
    driver: Option<Waker>,
    /// A connection is being made; other requests use the pool meanwhile.
    connecting: bool,
    /// The upstream timeout's timer, kept across the client connection's
    /// requests (see [`UpstreamTimer`]); `None` before the first request
    /// and while a request holds it.
    timer: Option<Pin<Box<Sleep>>>,
}

/// A pair's shared state, and whether its driver has something to look
/// at in it.
struct Shared<B> {
    pairing: Mutex<Pairing<B>>,
    /// Set, under the lock, when a connection is handed over (and the
    /// driver's waker taken to wake it): the driver locks the pairing only
    /// then, or when its task's waker changed, not each time its task is
    /// polled (several times per request, for the client's side as much
    /// as for the upstream's).
    attention: AtomicBool,
}

/// A client connection's upstream connection, put into each of its
/// requests' extensions by the gateway's listener; cheap to clone.
pub struct PairedUpstream<B = Incoming> {
    shared: Arc<Shared<B>>,
}

impl<B> Clone for PairedUpstream<B> {
    fn clone(&self) -> Self {
        PairedUpstream {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<B> PairedUpstream<B> {
    fn lock(&self) -> parking_lot::MutexGuard<'_, Pairing<B>> {
        self.shared.pairing.lock()
    }
}

/// Polls a pair's upstream connection, in the client connection's task;
/// never completes (the client connection's end ends the task).
pub(crate) struct PairDriver<B = Incoming> {
    shared: Arc<Shared<B>>,
    running: Option<Driving>,
    /// The waker last left in the pairing for a hand-over to wake.
    registered: Option<Waker>,
}

/// An empty pair and its driver.
pub(crate) fn pair<B>() -> (PairedUpstream<B>, PairDriver<B>) {
    let shared = Arc::new(Shared {
        pairing: Mutex::new(Pairing {
            sender: None,
            handed_over: None,
            driver: None,
            connecting: false,
            timer: None,
        }),
        attention: AtomicBool::new(false),
    });
    (
        PairedUpstream {
            shared: Arc::clone(&shared),
        },
        PairDriver {
            shared,
            running: None,
            registered: None,
        },
    )
}

impl<B> Future for PairDriver<B> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        loop {
            if let Some(running) = this.running.as_mut() {
                if running.as_mut().poll(cx).is_ready() {
                    // The upstream closed it: the sender says so, and the
                    // next request makes a new one.
                    this.running = None;
                }
            }
            // Nothing handed over, and the pairing holds this task's
            // waker: nothing to look at.
            if !this.shared.attention.load(Ordering::Acquire)
                && this
                    .registered
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
            {
                return Poll::Pending;
            }
            let mut pairing = this.shared.pairing.lock();
            this.shared.attention.store(false, Ordering::Relaxed);
            if let Some(next) = pairing.handed_over.take() {
                drop(pairing);
                // A new connection replaces one the upstream closed.
                this.running = Some(next);
                continue;
            }
            if !pairing
                .driver
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                pairing.driver = Some(cx.waker().clone());
            }
            this.registered = pairing.driver.clone();
            return Poll::Pending;
        }
    }
}

/// The upstream timeout of one request, on the client connection's timer
/// when no other request of the connection holds it: a timer of its own per
/// request was a registration and a removal in the runtime's timer wheel
/// (two locks), where moving a kept timer's deadline later is an atomic
/// update. The timer goes back to the connection when the request ends.
pub(crate) struct UpstreamTimer<B> {
    timer: Option<Pin<Box<Sleep>>>,
    /// The connection the timer goes back to.
    owner: Option<PairedUpstream<B>>,
}

impl<B> UpstreamTimer<B> {
    /// A timer that fires at `deadline`: `pair`'s when it is free, else
    /// one of the request's own.
    pub(crate) fn new(pair: Option<&PairedUpstream<B>>, deadline: Instant) -> UpstreamTimer<B> {
        let kept = pair.and_then(|p| Some((p.lock().timer.take()?, p)));
        match kept {
            Some((mut timer, pair)) => {
                timer.as_mut().reset(deadline);
                UpstreamTimer {
                    timer: Some(timer),
                    owner: Some(pair.clone()),
                }
            }
            // The connection's first request makes the timer it keeps (and
            // a request while another holds it one that may replace it).
            None => UpstreamTimer {
                timer: Some(Box::pin(tokio::time::sleep_until(deadline))),
                owner: pair.cloned(),
            },
        }
    }

    /// `future`'s output, or `None` when the deadline passes first.
    ///
    /// The timer is polled only when it has fired or the task's waker is
    /// not the one it holds, not each time `future` is: the request's
    /// future is polled a few times per request (sent, answered), and a
    /// timer's poll costs more than the check.
    pub(crate) fn within<F: Future>(&mut self, future: F) -> Within<'_, F> {
        Within {
            future,
            timer: self.timer.as_mut(),
            held: None,
        }
    }
}

pin_project! {
    /// The future of [`UpstreamTimer::within`]. Written out rather than
    /// as an `async fn`: that kept `future` twice in its state (the
    /// argument, and the pinned copy it polls), and the proxy's answer
    /// future, which holds this one, is copied whole into its box on
    /// every request.
    pub(crate) struct Within<'a, F> {
        #[pin]
        future: F,
        timer: Option<&'a mut Pin<Box<Sleep>>>,
        // The waker the timer was last polled with, and so will wake.
        held: Option<Waker>,
    }
}

impl<F: Future> Future for Within<'_, F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Some(output));
        }
        let Some(timer) = this.timer.as_mut() else {
            return Poll::Pending;
        };
        if this.held.as_ref().is_some_and(|w| w.will_wake(cx.waker())) && !timer.is_elapsed() {
            return Poll::Pending;
        }
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        *this.held = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl<B> Drop for UpstreamTimer<B> {
    fn drop(&mut self) {
        if let (Some(owner), Some(timer)) = (&self.owner, self.timer.take()) {
            let mut pairing = owner.lock();
            if pairing.timer.is_none() {
                pairing.timer = Some(timer);
            }
        }
    }
}

/// What the pair did with a request.
pub(crate) enum Sent<B> {
    /// The upstream's answer, or why it failed.
    Answered(Result<Response<Incoming>, ProxyError>),
    /// The pair could not take it now: the request, for the pool.
    Declined(Request<B>),
}

/// What the pair does with a request, decided as the request comes (see
/// [`PairedUpstream::try_send`]).
pub(crate) enum Attempt<F, B> {
    /// Written to the pair's connection: the answer to come.
    Sending(F),
    /// The pair is busy or being made: the request, for the pool.
    /// Boxed, as in `Connect`: both are rare, and the common case's state
    /// stays a few words, which the answer's future is made of.
    Declined(Box<Request<B>>),
    /// The pair has no connection: this request makes it
    /// ([`PairedUpstream::connect_and_send`]).
    Connect(Box<Request<B>>),
}

/// The answer to a request written to the pair's connection.
pub(crate) type Answer<B> =
    Result<Response<Incoming>, hyper::client::conn::TrySendError<Request<B>>>;

/// How the pair's connections are made: in the clear for an `http://`
/// upstream, through TLS for an `https://` one.
#[derive(Clone)]
pub(crate) struct Connector {
    /// In the clear; used directly for an `http://` upstream, so that its
    /// reads and writes do not go through the TLS wrapper's dispatch.
    pub(crate) plain: HttpConnector,
    /// For an `https://` upstream.
    pub(crate) tls: HttpsConnector<HttpConnector>,
}

impl<B> PairedUpstream<B>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    /// Writes `request` (its target in origin form, as a connection of
    /// our own writes it) to the pair's connection when it is free, now,
    /// rather than when a future is first polled: the request goes
    /// straight into the connection's queue instead of being moved
    /// through the futures of each step first.
    pub(crate) fn try_send(
        &self,
        request: Request<B>,
    ) -> Attempt<Pin<Box<impl Future<Output = Answer<B>> + Send + 'static>>, B> {
        let mut pairing = self.lock();
        if pairing.sender.as_ref().is_some_and(SendRequest::is_closed) {
            pairing.sender = None;
        }
        let connecting = pairing.connecting;
        match pairing.sender.as_mut() {
            // Boxed at once: hyper's future holds the request until it is
            // answered (to hand it back if the connection closed), a few
            // hundred bytes that the steps of the answer's future would
            // otherwise move from one to the next.
            Some(sender) if sender.is_ready() => {
                Attempt::Sending(Box::pin(sender.try_send_request(request)))
            }
            Some(_) => Attempt::Declined(Box::new(request)),
            None if connecting => Attempt::Declined(Box::new(request)),
            None => {
                pairing.connecting = true;
                Attempt::Connect(Box::new(request))
            }
        }
    }

    /// Makes the pair's connection and sends `request` on it (after
    /// [`Attempt::Connect`]).
    pub(crate) async fn connect_and_send(
        &self,
        request: Request<B>,
        connector: &Connector,
        upstream: &Upstream,
    ) -> Sent<B> {
        let made = self.connect(connector, upstream).await;
        let sending = {
            let mut pairing = self.lock();
            pairing.connecting = false;
            let (mut sender, connection) = match made {
                Ok(made) => made,
                Err(error) => return Sent::Answered(Err(error)),
            };
            pairing.handed_over = Some(connection);
            self.shared.attention.store(true, Ordering::Release);
            if let Some(driver) = pairing.driver.take() {
                driver.wake();
            }
            let sending = sender.try_send_request(request);
            pairing.sender = Some(sender);
            sending
        };
        answered(sending.await, upstream)
    }

    async fn connect(
        &self,
        connector: &Connector,
        upstream: &Upstream,
    ) -> Result<(SendRequest<B>, Driving), ProxyError> {
        let failed = |cause: String| ProxyError::Connect {
            upstream: upstream.to_string(),
            cause,
        };
        let uri: Uri = upstream.origin().clone();
        if upstream.is_https() {
            let io = connector
                .tls
                .clone()
                .oneshot(uri)
                .await
                .map_err(|e| failed(error::causes(&*e)))?;
            handshake(io).await.map_err(|e| failed(error::causes(&e)))
        } else {
            let io = connector
                .plain
                .clone()
                .oneshot(uri)
                .await
                .map_err(|e| failed(error::causes(&e)))?;
            handshake(io).await.map_err(|e| failed(error::causes(&e)))
        }
    }
}

/// An HTTP/1.1 client connection over `io`: its sender, and the
/// connection's future for the driver.
async fn handshake<B, I>(io: I) -> Result<(SendRequest<B>, Driving), hyper::Error>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    // Flattened writes, as on the client side (see the listener).
    let (sender, connection) = http1::Builder::new().writev(false).handshake(io).await?;
    let driving: Driving = Box::pin(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "an upstream connection ended");
        }
    });
    Ok((sender, driving))
}

/// What became of a request sent on the pair.
pub(crate) fn answered<B>(sent: Answer<B>, upstream: &Upstream) -> Sent<B> {
    match sent {
        Ok(response) => Sent::Answered(Ok(response)),
        Err(mut error) => match error.take_message() {
            // Not sent: the connection closed meanwhile; the pool takes it.
            Some(request) => Sent::Declined(request),
            None => Sent::Answered(Err(match BodyTimeout::find(error.error()) {
                Some(timeout) => ProxyError::BodyTimeout {
                    timeout: timeout.timeout,
                },
                None => ProxyError::Upstream {
                    upstream: upstream.to_string(),
                    cause: error::causes(error.error()),
                },
            })),
        },
    }
}
