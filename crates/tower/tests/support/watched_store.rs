//! [`WatchedStore`]: the memory store with what the layer asks of it made
//! visible to the test, for the tests that wait for a lease's release or
//! count how often the layer asks to settle or for the time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tollgate_core::algorithm::Settled;
use tollgate_core::{Decision, LimitKey, Moment, MultiReservation, Store, StoreError};
use tollgate_memory::LocalStore;

/// The memory store that does not settle (`settle` answers unsupported,
/// as the trait's default does, and `settles` says so), telling the test
/// about every release and counting settles and clock reads.
pub struct WatchedStore {
    inner: LocalStore,
    released: Option<mpsc::UnboundedSender<u64>>,
    /// How often the layer asked to settle.
    pub settles: Arc<AtomicUsize>,
    /// How often the layer asked for the time.
    pub clock_reads: Arc<AtomicUsize>,
    /// What `answers_at_once` says.
    at_once: bool,
    /// Whether each check yields to the runtime once before it answers.
    yields: bool,
}

impl WatchedStore {
    /// `inner`, watched.
    pub fn new(inner: LocalStore) -> WatchedStore {
        WatchedStore {
            inner,
            released: None,
            settles: Arc::default(),
            clock_reads: Arc::default(),
            at_once: true,
            yields: false,
        }
    }

    /// Says it answers at once when `at_once` (as the memory store does,
    /// the default), else that it answers later, as a remote store does:
    /// the layer then takes its boxed path.
    pub fn answering_at_once(mut self, at_once: bool) -> WatchedStore {
        self.at_once = at_once;
        self
    }

    /// Each check yields to the runtime once before it answers, as a
    /// remote store's would.
    pub fn yielding(mut self) -> WatchedStore {
        self.yields = true;
        self
    }

    /// Sends each released lease on `released`, after the release.
    pub fn sending_releases(mut self, released: mpsc::UnboundedSender<u64>) -> WatchedStore {
        self.released = Some(released);
        self
    }
}

impl Store for WatchedStore {
    async fn check(
        &self,
        r: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        if self.yields {
            tokio::task::yield_now().await;
        }
        self.inner.check(r, at, cost).await
    }
    async fn reserve(
        &self,
        r: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<MultiReservation, StoreError> {
        self.inner.reserve(r, at, cost, max_wait).await
    }
    async fn next_available(
        &self,
        r: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        self.inner.next_available(r, at, cost).await
    }
    async fn record(&self, r: LimitKey<'_>, at: Moment, cost: u64) -> Result<u64, StoreError> {
        self.inner.record(r, at, cost).await
    }
    async fn settle(
        &self,
        _r: LimitKey<'_>,
        _admitted_at: u64,
        _at: Moment,
        _estimate: u64,
        _actual: u64,
    ) -> Result<Settled, StoreError> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        Err(StoreError::Unsupported("settle"))
    }
    async fn release(&self, r: LimitKey<'_>, lease: u64) -> Result<bool, StoreError> {
        let released = self.inner.release(r, lease).await;
        if let Some(tell) = &self.released {
            let _ = tell.send(lease);
        }
        released
    }
    async fn reset(&self, key: &[u8]) -> Result<usize, StoreError> {
        self.inner.reset(key).await
    }
    async fn now(&self) -> Result<u64, StoreError> {
        self.clock_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.now().await
    }
    fn answers_at_once(&self) -> bool {
        self.at_once
    }
}
