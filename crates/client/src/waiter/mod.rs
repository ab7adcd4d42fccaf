//! In-process waiters: make calls wait, asynchronously or by blocking, until
//! a rate limit allows them.
//!
//! Two waiters, each a pacing rule, a line of waiting calls and a
//! [`WaitClock`] (time to read and sleep on; [`RealClock`] unless told
//! otherwise):
//!
//! - [`RingWaiter`]: exactly `N` per interval, the ring of timestamps of
//!   Shopify's `limiter` gem, optionally with a balanced start.
//! - [`GcraWaiter`]: `N` per `P` evenly, with bursts up to `burst`, by the
//!   core's GCRA.
//!
//! Each offers `until_ready()` and `until_n_ready(n)` to `.await`, and
//! `wait()` and `wait_n(n)` to block a thread.
//!
//! # Guarantees
//!
//! - **Exact pacing.** Permits are counted at the instant a call is released
//!   (never before the schedule allows it), so the rule holds for the
//!   instants callers actually go, whatever the timer's lateness.
//! - **First come, first served.** Calls go in the order they arrive (a
//!   future arrives when first polled). A call for several permits is not
//!   overtaken by later calls for fewer, even when those would fit sooner.
//! - **Cheap when nothing waits.** A call whose permits are free and that
//!   finds nobody waiting takes them with a clock reading and one atomic
//!   compare-and-swap, without a lock, as governor's `until_ready` does. A
//!   ring of 128 permits or more gives threads on different cores lanes of
//!   their own, so they do not contend (see `docs/client.md` and
//!   `docs/benchmarks.md`).
//! - **Cancellation-safe.** A waiting call has booked nothing: only the call
//!   at the front of the line computes its instant, and its permits are
//!   recorded when it goes. Dropping an `until_ready()` future (a timeout, a
//!   `select!`) takes it out of the line and the next call moves up.
//! - **No eternal waits.** Asking for more permits than can ever be granted
//!   together is a [`TooManyPermits`] error.
//! - **Optional jitter.** [`Jitter`] adds a bounded random extra wait to calls
//!   that have to wait, and counts their permits when they are released.
//!
//! # Example
//!
//! ```
//! use tollgate_client::waiter::GcraWaiter;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let waiter = GcraWaiter::new("100/s".parse()?)?;
//! for _ in 0..10 {
//!     waiter.until_ready().await;
//!     // call the API
//! }
//! # Ok(())
//! # }
//! ```
//!
//! This module owns in-process pacing; it knows nothing of HTTP or of the
//! tollgate service.

mod engine;
mod error;
mod gcra;
mod jitter;
mod line;
mod ring;
mod schedule;

use std::future::Future;

use tollgate_core::Rate;

pub use error::{TooManyPermits, WaiterError};
pub use jitter::Jitter;
pub use ring::MAX_RING;

use crate::clock::{RealClock, WaitClock};
use engine::Engine;
use gcra::GcraSchedule;
use ring::RingSchedule;

/// Exactly `N` per interval: Shopify's ring of timestamps.
///
/// A call may go once the oldest of the last `N` permits is one interval
/// old, so no span `(t − P, t]` ever holds more than `N` permits and each
/// call goes at the earliest instant that keeps it so. Unbalanced (the
/// default), the first `N` may go at once. [Balanced](Self::balanced), the
/// `i`-th of the first `N` (from 0) may go at `s + ⌊i·P/N⌋`, `s` being the
/// first call's arrival; after that the ring rule alone applies (a waiter
/// left idle for a whole interval may burst again). It holds one 8-byte slot
/// per permit of `N`, at most [`MAX_RING`].
///
/// ```
/// use tollgate_client::clock::{Clock, ManualClock};
/// use tollgate_client::waiter::RingWaiter;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Exact instants without real sleeping: the clock jumps to each wake-up.
/// let clock = ManualClock::auto_advancing(0);
/// let waiter = RingWaiter::new("2/s".parse()?)?.with_clock(clock.clone());
/// let mut at_ms = Vec::new();
/// for _ in 0..5 {
///     waiter.until_ready().await;
///     at_ms.push(clock.now() / 1_000_000);
/// }
/// assert_eq!(at_ms, [0, 0, 1000, 1000, 2000]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RingWaiter<C = RealClock> {
    engine: Engine<RingSchedule, C>,
}

/// `N` per `P` evenly, with bursts of up to `burst`: the core's GCRA (the
/// decisions of its `gcra` and `token_bucket` algorithms).
///
/// ```
/// use tollgate_client::clock::{Clock, ManualClock};
/// use tollgate_client::waiter::GcraWaiter;
///
/// let clock = ManualClock::auto_advancing(0);
/// let waiter = GcraWaiter::with_burst("4/s".parse()?, 2)?.with_clock(clock.clone());
/// let mut at_ms = Vec::new();
/// for _ in 0..5 {
///     waiter.wait(); // blocks the thread
///     at_ms.push(clock.now() / 1_000_000);
/// }
/// assert_eq!(at_ms, [0, 0, 250, 500, 750]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct GcraWaiter<C = RealClock> {
    engine: Engine<GcraSchedule, C>,
}

impl RingWaiter {
    /// At most `rate.limit()` calls in any span of `rate.period()`, the first
    /// `N` at once; on real time.
    pub fn new(rate: Rate) -> Result<Self, WaiterError> {
        let engine = Engine::new(RingSchedule::new(rate, false)?, RealClock::new());
        Ok(RingWaiter { engine })
    }

    /// Like [`new`](Self::new), with the first `N` calls spread evenly over
    /// the first interval.
    pub fn balanced(rate: Rate) -> Result<Self, WaiterError> {
        let engine = Engine::new(RingSchedule::new(rate, true)?, RealClock::new());
        Ok(RingWaiter { engine })
    }
}

impl<C: WaitClock> RingWaiter<C> {
    /// Whether the first `N` calls are spread over the first interval.
    pub fn is_balanced(&self) -> bool {
        self.engine.schedule().is_balanced()
    }
}

impl GcraWaiter {
    /// `rate`, with bursts of up to `rate.limit()`; on real time.
    pub fn new(rate: Rate) -> Result<Self, WaiterError> {
        Self::with_burst(rate, rate.limit())
    }

    /// `rate`, with bursts of up to `burst` (at least 1); on real time.
    pub fn with_burst(rate: Rate, burst: u64) -> Result<Self, WaiterError> {
        let engine = Engine::new(GcraSchedule::new(rate, burst)?, RealClock::new());
        Ok(GcraWaiter { engine })
    }
}

/// The methods both waiters share.
macro_rules! waiter_methods {
    ($waiter:ident) => {
        impl<C: WaitClock> $waiter<C> {
            /// The same waiter on another clock (a
            /// [`ManualClock`](crate::clock::ManualClock) in tests, a
            /// [`TokioClock`](crate::clock::TokioClock) to follow tokio's
            /// paused time).
            pub fn with_clock<D: WaitClock>(self, clock: D) -> $waiter<D> {
                $waiter {
                    engine: self.engine.with_clock(clock),
                }
            }

            /// The same waiter, adding `jitter` to calls that have to wait.
            pub fn with_jitter(mut self, jitter: Jitter) -> Self {
                self.engine.set_jitter(jitter);
                self
            }

            /// Resolves when one permit is granted. Cancellation-safe:
            /// dropping the future gives up its place in line and takes
            /// nothing.
            pub fn until_ready(&self) -> impl Future<Output = ()> + Send + '_ {
                self.engine.until_ready()
            }

            /// Resolves when `n` permits are granted together (at once when
            /// `n` is 0); an error, at once, when `n` is more than
            /// [`capacity`](Self::capacity). Cancellation-safe like
            /// [`until_ready`](Self::until_ready).
            pub fn until_n_ready(
                &self,
                n: u64,
            ) -> impl Future<Output = Result<(), TooManyPermits>> + Send + '_ {
                self.engine.until_n_ready(n)
            }

            /// Blocks the thread until one permit is granted.
            pub fn wait(&self) {
                // One permit is always within capacity.
                let _ = self.engine.wait_n(1);
            }

            /// Blocks the thread until `n` permits are granted together
            /// (returns at once when `n` is 0); an error, at once, when `n`
            /// is more than [`capacity`](Self::capacity).
            pub fn wait_n(&self, n: u64) -> Result<(), TooManyPermits> {
                self.engine.wait_n(n)
            }

            /// The most permits one call may ask for: `N` for a ring, the
            /// burst for GCRA.
            pub fn capacity(&self) -> u64 {
                self.engine.capacity()
            }

            /// How many calls are waiting in line right now.
            pub fn waiting(&self) -> usize {
                self.engine.waiting()
            }

            /// The clock the waiter reads and sleeps on.
            pub fn clock(&self) -> &C {
                self.engine.clock()
            }
        }
    };
}

waiter_methods!(RingWaiter);
waiter_methods!(GcraWaiter);
