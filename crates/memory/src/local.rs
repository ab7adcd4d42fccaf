//! [`LocalStore`]: the memory store and a clock, behind the core's
//! [`Store`] trait, so a server can decide through it exactly as it would
//! through a remote store.
//!
//! Every operation runs to completion on the calling thread (the locks are
//! held for nanoseconds, never across an `.await`); the returned futures are
//! ready at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use tollgate_core::algorithm::Settled;
use tollgate_core::time::{Clock, SystemClock};
use tollgate_core::{Decision, LimitKey, Moment, MultiReservation, Store, StoreError};

use crate::limiter::Limiter;
use crate::store::MemoryStore;

/// A [`MemoryStore`] with the clock that answers [`Moment::Now`].
///
/// ```
/// use tollgate_core::time::ManualClock;
/// use tollgate_core::{AlgorithmName, Limit, LimitKey, Moment, Rate, Store};
/// use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
/// use std::sync::Arc;
///
/// let clock = Arc::new(ManualClock::new(0));
/// let store = LocalStore::new(MemoryStore::new(MemoryConfig::default()), clock.clone());
/// let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_second(1).unwrap());
/// let request = [LimitKey { limit: &limit, key: b"alice" }];
/// let decide = |at| futures_lite_block_on(store.check(&request, at, 1));
/// # fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let waker = std::task::Waker::noop();
/// #     let mut cx = std::task::Context::from_waker(&waker);
/// #     let mut f = std::pin::pin!(f);
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
/// assert!(decide(Moment::Now).unwrap()[0].allowed);
/// assert!(!decide(Moment::Now).unwrap()[0].allowed);
/// assert!(decide(Moment::At(1_000_000_000)).unwrap()[0].allowed);
/// ```
#[derive(Clone)]
pub struct LocalStore {
    store: MemoryStore,
    clock: Arc<dyn Clock>,
    /// The latest explicit [`Moment::At`] seen (0 before any).
    latest_at: Arc<AtomicU64>,
}

impl LocalStore {
    /// `store`, reading `clock` for [`Moment::Now`].
    pub fn new(store: MemoryStore, clock: Arc<dyn Clock>) -> LocalStore {
        LocalStore {
            store,
            clock,
            latest_at: Arc::new(AtomicU64::new(0)),
        }
    }

    /// `store` on the system clock.
    pub fn system(store: MemoryStore) -> LocalStore {
        LocalStore::new(store, Arc::new(SystemClock::new()))
    }

    /// The memory store underneath (for snapshots, sweeping and metrics).
    pub fn memory(&self) -> &MemoryStore {
        &self.store
    }

    /// The time up to which expired states may be swept: the clock's now,
    /// or, once callers have sent explicit times (replays, trusted client
    /// time), no later than the latest of those — a state that expired by
    /// the wall clock may still be live at the times callers send.
    pub fn sweep_horizon(&self) -> u64 {
        let now = self.clock.now();
        match self.latest_at.load(Ordering::Relaxed) {
            0 => now,
            latest => latest.min(now),
        }
    }

    fn instant(&self, at: Moment) -> u64 {
        match at {
            Moment::Now => self.clock.now(),
            Moment::At(t) => {
                self.latest_at.fetch_max(t, Ordering::Relaxed);
                t
            }
        }
    }

    /// Each request's limiter; a request names a few limits at most, kept
    /// on the stack.
    fn limiters(&self, requests: &[LimitKey<'_>]) -> Result<SmallVec<[Limiter; 4]>, StoreError> {
        requests
            .iter()
            .map(|r| self.store.limiter(r.limit).map_err(StoreError::from))
            .collect()
    }

    fn check_now(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        let now = self.instant(at);
        if let [one] = requests {
            let decision = self.store.limiter(one.limit)?.check(one.key, now, cost)?;
            return Ok(vec![decision]);
        }
        let limiters = self.limiters(requests)?;
        let pairs: SmallVec<[(&Limiter, &[u8]); 4]> = limiters
            .iter()
            .zip(requests)
            .map(|(l, r)| (l, r.key))
            .collect();
        Ok(self.store.check_all(&pairs, now, cost)?)
    }

    fn reserve_now(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<MultiReservation, StoreError> {
        let now = self.instant(at);
        let limiters = self.limiters(requests)?;
        let pairs: SmallVec<[(&Limiter, &[u8]); 4]> = limiters
            .iter()
            .zip(requests)
            .map(|(l, r)| (l, r.key))
            .collect();
        Ok(self.store.reserve_all(&pairs, now, cost, max_wait)?)
    }
}

impl Store for LocalStore {
    async fn check(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        self.check_now(requests, at, cost)
    }

    async fn check_one(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<Decision, StoreError> {
        let now = self.instant(at);
        Ok(self
            .store
            .limiter(request.limit)?
            .check(request.key, now, cost)?)
    }

    async fn reserve(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<MultiReservation, StoreError> {
        self.reserve_now(requests, at, cost, max_wait)
    }

    async fn next_available(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        let limiter = self.store.limiter(request.limit)?;
        Ok(limiter.next_available(request.key, self.instant(at), cost)?)
    }

    async fn record(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        let limiter = self.store.limiter(request.limit)?;
        Ok(limiter.record(request.key, self.instant(at), cost)?)
    }

    async fn settle(
        &self,
        request: LimitKey<'_>,
        admitted_at: u64,
        at: Moment,
        estimate: u64,
        actual: u64,
    ) -> Result<Settled, StoreError> {
        let limiter = self.store.limiter(request.limit)?;
        let now = self.instant(at);
        Ok(limiter.settle(request.key, admitted_at, now, estimate, actual)?)
    }

    fn settles(&self) -> bool {
        true
    }

    /// Every operation decides under the tables' own locks: nothing awaits.
    fn answers_at_once(&self) -> bool {
        true
    }

    async fn release(&self, request: LimitKey<'_>, lease: u64) -> Result<bool, StoreError> {
        Ok(self
            .store
            .limiter(request.limit)?
            .release(request.key, lease))
    }

    async fn reset(&self, key: &[u8]) -> Result<usize, StoreError> {
        Ok(self.store.reset(key))
    }

    async fn now(&self) -> Result<u64, StoreError> {
        Ok(self.clock.now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::time::ManualClock;
    use tollgate_core::{AlgorithmName, Limit, Rate};
    use tollgate_testkit::ready;

    #[test]
    fn one_limit_alone_is_decided_as_in_a_list_of_one() {
        let limit = Limit::new(AlgorithmName::Gcra, Rate::per_second(3).unwrap());
        let request = LimitKey {
            limit: &limit,
            key: b"k",
        };
        let store = || {
            LocalStore::new(
                MemoryStore::new(Default::default()),
                Arc::new(ManualClock::new(0)),
            )
        };
        let (listed, single) = (store(), store());
        for (at, cost) in [
            (0, 1),
            (0, 2),
            (0, 1),
            (0, 0),
            (400_000_000, 1),
            (400_000_000, 9),
        ] {
            let as_list = ready(listed.check(&[request], Moment::At(at), cost));
            let alone = ready(single.check_one(request, Moment::At(at), cost));
            assert_eq!(alone, as_list.map(|d| d[0]), "at {at} cost {cost}");
        }
    }

    #[test]
    fn sweeping_never_passes_the_times_callers_send() {
        let clock = Arc::new(ManualClock::new(1_000));
        let store = LocalStore::new(MemoryStore::new(Default::default()), clock.clone());
        assert_eq!(store.sweep_horizon(), 1_000);
        let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_second(1).unwrap());
        let request = [LimitKey {
            limit: &limit,
            key: b"k",
        }];
        ready(store.check(&request, Moment::At(400), 1)).unwrap();
        assert_eq!(store.sweep_horizon(), 400);
        // A state counted at a replayed time survives a sweep at the horizon.
        store.memory().sweep(store.sweep_horizon(), usize::MAX);
        assert!(!ready(store.check(&request, Moment::At(400), 1)).unwrap()[0].allowed);
        ready(store.check(&request, Moment::At(5_000), 0)).unwrap();
        assert_eq!(store.sweep_horizon(), 1_000, "never past the clock");
    }
}
