//! Stand-in stores and a poller for tests of code that sits above a
//! [`Store`]: [`DownStore`] fails every call as an unreachable store would,
//! and [`ready`] runs a future that a store completes without waiting.

use std::future::Future;
use std::time::Duration;

use tollgate_core::{Decision, LimitKey, Moment, MultiReservation, Store, StoreError};

/// A store that cannot be reached: every call answers
/// [`StoreError::Unavailable`] with the reason it was made with.
#[derive(Debug, Clone)]
pub struct DownStore {
    reason: String,
}

impl DownStore {
    /// A store down for `reason` (what its errors say).
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }

    fn down<T>(&self) -> Result<T, StoreError> {
        Err(StoreError::Unavailable(self.reason.clone()))
    }
}

impl Store for DownStore {
    async fn check(
        &self,
        _: &[LimitKey<'_>],
        _: Moment,
        _: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        self.down()
    }

    async fn reserve(
        &self,
        _: &[LimitKey<'_>],
        _: Moment,
        _: u64,
        _: Option<Duration>,
    ) -> Result<MultiReservation, StoreError> {
        self.down()
    }

    async fn next_available(&self, _: LimitKey<'_>, _: Moment, _: u64) -> Result<u64, StoreError> {
        self.down()
    }

    async fn record(&self, _: LimitKey<'_>, _: Moment, _: u64) -> Result<u64, StoreError> {
        self.down()
    }

    async fn release(&self, _: LimitKey<'_>, _: u64) -> Result<bool, StoreError> {
        self.down()
    }

    async fn reset(&self, _: &[u8]) -> Result<usize, StoreError> {
        self.down()
    }

    async fn now(&self) -> Result<u64, StoreError> {
        self.down()
    }
}

/// The output of a future that completes on its first poll, as the memory
/// store's do; panics when it would wait (a test of such a store has gone
/// wrong).
pub fn ready<F: Future>(future: F) -> F::Output {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("the future waits: it was expected to be ready at once"),
    }
}
