//! The interface between servers and keyed stores: [`Store`].
//!
//! A server never holds per-key state itself; it names the limits and keys a
//! request touches ([`LimitKey`]) and asks a store to decide. The interface is
//! shaped so that both an in-process map (which evaluates the algorithm under
//! its own locks) and a remote store (which runs the algorithm as a
//! server-side script and reads the remote clock) can implement it: every
//! operation is one atomic call over all the limits involved, returns a
//! future, and takes a [`Moment`] rather than a reading of the caller's clock.
//!
//! This module owns the trait and its value types; it does not own any
//! store. `tollgate-memory` provides the in-process one.

use std::future::Future;
use std::time::Duration;

use crate::algorithm::Settled;
use crate::decision::Decision;
use crate::limit::{Limit, LimitError};

/// When a decision is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// The store's own clock (the remote server's time for a remote store).
    Now,
    /// An explicit instant, in nanoseconds since the Unix epoch: replays,
    /// tests, and clients trusted to send their own time.
    At(u64),
}

/// One limit applied to one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitKey<'a> {
    /// The limit.
    pub limit: &'a Limit,
    /// The key it counts under (any bytes).
    pub key: &'a [u8],
}

/// The outcome of [`Store::reserve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiReservation {
    /// How long the caller must wait before making the call; when nothing
    /// was booked, the wait it would have needed.
    pub wait: Duration,
    /// Whether the slot was booked in every limit (nothing is booked in any
    /// otherwise).
    pub booked: bool,
    /// Zero when booked; otherwise how much later a reservation would fit
    /// within `max_wait`.
    pub retry_after: Duration,
    /// Each request's limit as of now, after the booking, in request order;
    /// `allowed` is `booked`.
    pub decisions: Vec<Decision>,
}

/// Why a store could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The request is invalid for one of its limits (nothing was counted).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The store could not be reached or failed to answer.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store did not answer within the configured time.
    #[error("store did not answer within {0:?}")]
    Timeout(Duration),
    /// The store does not implement this operation (yet); the operation's
    /// name. Nothing was changed.
    #[error("this store does not support {0}")]
    Unsupported(&'static str),
}

impl StoreError {
    /// Whether the error is the store's fault rather than the request's.
    pub fn is_outage(&self) -> bool {
        !matches!(self, StoreError::Limit(_) | StoreError::Unsupported(_))
    }
}

/// Whether a store can serve decisions now (for readiness probes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreStatus {
    /// Decisions come from the store.
    Ready,
    /// The store is unreachable, and a failure policy answers instead
    /// (admitting, or counting in this process only); the reason.
    Degraded(String),
    /// The store is unreachable and requests fail; the reason.
    Unavailable(String),
}

/// A keyed store of limiter state: the operations a server needs, each
/// atomic over all the limits it names.
pub trait Store: Send + Sync + 'static {
    /// Several limits in one all-or-nothing check: admitted only if every
    /// limit admits `cost`; then counted in all; a rejection counts nothing
    /// anywhere. One decision per request, in order. `cost` 0 is a peek.
    fn check(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send;

    /// One limit's check: what [`check`](Store::check) decides for
    /// `request` alone. The default asks `check`; a store that can decide
    /// one limit without building a list of decisions (the memory store)
    /// answers it directly, saving an allocation per request.
    fn check_one(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        async move {
            let decisions = self.check(&[request], at, cost).await?;
            Ok(decisions.first().copied().unwrap_or_default())
        }
    }

    /// Books the earliest instant at which every limit admits `cost`, unless
    /// the wait would exceed `max_wait` (no bound when `None`); then nothing
    /// is booked anywhere.
    fn reserve(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> impl Future<Output = Result<MultiReservation, StoreError>> + Send;

    /// The earliest instant (ns since the epoch) at or after `at` at which
    /// `cost` would be admitted, without counting anything.
    fn next_available(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Counts `cost` at `at` even when over the limit (a call already made,
    /// or usage merged from elsewhere) and returns the usage the key holds
    /// now ([`Algorithm::record`](crate::Algorithm::record)): the count in
    /// the window for the windows, the whole tokens missing from a full
    /// bucket for `token_bucket`, `gcra` and `leaky_bucket` (above the burst
    /// while in debt). Usage at or above the limit refuses requests until
    /// it has left. Every algorithm but `concurrency`, which answers
    /// [`LimitError::Option`] (option `record`): leases cannot be merged.
    /// A store may support fewer (the Redis store's Lua engine).
    fn record(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Settles a request admitted at `admitted_at` (ns since the epoch)
    /// with cost `estimate` whose actual cost is `actual`, at `at`: charges
    /// the difference (possibly into debt) or refunds it
    /// ([`Algorithm::settle`](crate::Algorithm::settle)); one atomic step
    /// on the key. `concurrency` answers [`LimitError::Option`] (option
    /// `settle`). The default answers [`StoreError::Unsupported`] and
    /// changes nothing: a store settles only once it implements it.
    fn settle(
        &self,
        request: LimitKey<'_>,
        admitted_at: u64,
        at: Moment,
        estimate: u64,
        actual: u64,
    ) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        let _ = (request, admitted_at, at, estimate, actual);
        async { Err(StoreError::Unsupported("settle")) }
    }

    /// Whether this store implements [`settle`](Store::settle): `false`
    /// by default, as the default `settle` answers
    /// [`StoreError::Unsupported`]. A server asks before it counts a
    /// request that is to be settled, so that nothing is counted that
    /// could never be settled.
    fn settles(&self) -> bool {
        false
    }

    /// Ends a `concurrency` lease; `true` when the key held it.
    fn release(
        &self,
        request: LimitKey<'_>,
        lease: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Forgets `key` under every limit (an administrative reset); returns
    /// how many limits held it.
    fn reset(&self, key: &[u8]) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// The store's current time, in nanoseconds since the Unix epoch.
    fn now(&self) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// The engine deciding in this store, for stores that have several
    /// (the Redis store: `module` or `lua`), as last found; `None` for the
    /// others. For readiness reports and metrics.
    fn engine(&self) -> Option<&'static str> {
        None
    }

    /// Whether every future this store returns is ready the first time it
    /// is polled: an in-process store, which decides under its own locks
    /// and never waits on I/O. A caller may then poll a decision once,
    /// without a task, and have its answer at once (the middleware
    /// decides while the request comes in, and its response future holds
    /// only the answer). `false` by default; a store that says `true` and
    /// then returns a pending future is a bug the caller reports as an
    /// outage.
    fn answers_at_once(&self) -> bool {
        false
    }

    /// Whether the store can serve decisions now: ready when it can tell
    /// the time.
    fn status(&self) -> impl Future<Output = StoreStatus> + Send {
        async {
            match self.now().await {
                Ok(_) => StoreStatus::Ready,
                Err(e) => StoreStatus::Unavailable(e.to_string()),
            }
        }
    }
}

/// A shared store is a store, so one store can serve a middleware layer and
/// a readiness probe at once.
impl<S: Store> Store for std::sync::Arc<S> {
    fn check(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        (**self).check(requests, at, cost)
    }

    fn check_one(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        (**self).check_one(request, at, cost)
    }

    fn reserve(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> impl Future<Output = Result<MultiReservation, StoreError>> + Send {
        (**self).reserve(requests, at, cost, max_wait)
    }

    fn next_available(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        (**self).next_available(request, at, cost)
    }

    fn record(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        (**self).record(request, at, cost)
    }

    fn settle(
        &self,
        request: LimitKey<'_>,
        admitted_at: u64,
        at: Moment,
        estimate: u64,
        actual: u64,
    ) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        (**self).settle(request, admitted_at, at, estimate, actual)
    }

    fn settles(&self) -> bool {
        (**self).settles()
    }

    fn release(
        &self,
        request: LimitKey<'_>,
        lease: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).release(request, lease)
    }

    fn reset(&self, key: &[u8]) -> impl Future<Output = Result<usize, StoreError>> + Send {
        (**self).reset(key)
    }

    fn now(&self) -> impl Future<Output = Result<u64, StoreError>> + Send {
        (**self).now()
    }

    fn engine(&self) -> Option<&'static str> {
        (**self).engine()
    }

    fn answers_at_once(&self) -> bool {
        (**self).answers_at_once()
    }

    fn status(&self) -> impl Future<Output = StoreStatus> + Send {
        (**self).status()
    }
}
