//! In-process waiters: make calls wait, asynchronously or by blocking, until
//! a rate limit allows them.
//!
//! A [`Waiter`] pairs a [`Schedule`] (the pacing rule) with a
//! [`WaitClock`] (time to read and sleep on) and a line of waiting calls:
//!
//! - [`RingWaiter`]: exactly `N` per interval, the ring of timestamps of
//!   Shopify's `limiter` gem, optionally with a balanced start (see
//!   [`RingSchedule`]).
//! - [`GcraWaiter`]: `N` per `P` evenly, with bursts up to `burst`, by the
//!   core's GCRA (see [`GcraSchedule`]).
//!
//! Each offers [`until_ready`](Waiter::until_ready) and
//! [`until_n_ready`](Waiter::until_n_ready) to `.await`, and
//! [`wait`](Waiter::wait) and [`wait_n`](Waiter::wait_n) to block a thread.
//!
//! # Guarantees
//!
//! - **Exact pacing.** Permits are counted at the instant a call is released
//!   (never before the schedule allows it), so the rule holds for the
//!   instants callers actually go, whatever the timer's lateness.
//! - **First come, first served.** Calls go in the order they arrive (a
//!   future arrives when first polled). A call for several permits is not
//!   overtaken by later calls for fewer, even when those would fit sooner.
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

mod error;
mod gcra;
mod jitter;
mod line;
mod ring;
mod schedule;

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};
use std::thread::Thread;

use parking_lot::Mutex;
use tollgate_core::Rate;

pub use error::{TooManyPermits, WaiterError};
pub use gcra::GcraSchedule;
pub use jitter::Jitter;
pub use ring::{RingSchedule, MAX_RING};
pub use schedule::Schedule;

use crate::clock::{TokioClock, WaitClock};
use jitter::JitterSource;
use line::{Arrival, Line, Step, Turn};

/// Makes calls wait until `S` allows them, reading and sleeping on `C`.
///
/// Share it between tasks or threads by reference or in an [`Arc`]. See the
/// [module docs](self) for its guarantees.
#[derive(Debug)]
pub struct Waiter<S, C = TokioClock> {
    line: Mutex<Line<S>>,
    clock: C,
    capacity: u64,
}

/// Exactly `N` per interval: Shopify's ring of timestamps.
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
pub type RingWaiter<C = TokioClock> = Waiter<RingSchedule, C>;

/// `N` per `P` evenly with bursts: the core's GCRA.
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
pub type GcraWaiter<C = TokioClock> = Waiter<GcraSchedule, C>;

impl RingWaiter {
    /// At most `rate.limit()` calls in any span of `rate.period()`, the first
    /// `N` at once; on real time.
    pub fn new(rate: Rate) -> Result<Self, WaiterError> {
        Ok(Waiter::from_schedule(
            RingSchedule::new(rate)?,
            TokioClock::new(),
        ))
    }

    /// Like [`new`](Self::new), with the first `N` calls spread evenly over
    /// the first interval.
    pub fn balanced(rate: Rate) -> Result<Self, WaiterError> {
        Ok(Waiter::from_schedule(
            RingSchedule::balanced(rate)?,
            TokioClock::new(),
        ))
    }
}

impl GcraWaiter {
    /// `rate`, with bursts of up to `rate.limit()`; on real time.
    pub fn new(rate: Rate) -> Result<Self, WaiterError> {
        Ok(Waiter::from_schedule(
            GcraSchedule::new(rate)?,
            TokioClock::new(),
        ))
    }

    /// `rate`, with bursts of up to `burst` (at least 1); on real time.
    pub fn with_burst(rate: Rate, burst: u64) -> Result<Self, WaiterError> {
        Ok(Waiter::from_schedule(
            GcraSchedule::with_burst(rate, burst)?,
            TokioClock::new(),
        ))
    }
}

impl<S: Schedule, C: WaitClock> Waiter<S, C> {
    /// A waiter applying `schedule` on `clock`, without jitter.
    pub fn from_schedule(schedule: S, clock: C) -> Self {
        Waiter {
            capacity: schedule.capacity(),
            line: Mutex::new(Line::new(schedule, JitterSource::new(Jitter::NONE))),
            clock,
        }
    }

    /// The same waiter on another clock (a [`ManualClock`] in tests).
    ///
    /// [`ManualClock`]: crate::clock::ManualClock
    pub fn with_clock<D: WaitClock>(self, clock: D) -> Waiter<S, D> {
        Waiter {
            line: self.line,
            clock,
            capacity: self.capacity,
        }
    }

    /// The same waiter, adding `jitter` to calls that have to wait.
    pub fn with_jitter(self, jitter: Jitter) -> Self {
        self.line.lock().set_jitter(JitterSource::new(jitter));
        self
    }

    /// The clock the waiter reads and sleeps on.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The most permits one call may ask for.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// How many calls are waiting in line right now.
    pub fn waiting(&self) -> usize {
        self.line.lock().waiting()
    }

    /// Resolves when one permit is granted. Cancellation-safe: dropping the
    /// future gives up its place in line and takes nothing.
    pub async fn until_ready(&self) {
        self.acquire(1).await;
    }

    /// Resolves when `n` permits are granted together (at once when `n` is
    /// 0); an error, at once, when `n` is more than
    /// [`capacity`](Self::capacity). Cancellation-safe like
    /// [`until_ready`](Self::until_ready).
    pub async fn until_n_ready(&self, n: u64) -> Result<(), TooManyPermits> {
        self.validate(n)?;
        if n > 0 {
            self.acquire(n).await;
        }
        Ok(())
    }

    /// Blocks the thread until one permit is granted.
    pub fn wait(&self) {
        self.acquire_blocking(1);
    }

    /// Blocks the thread until `n` permits are granted together (returns at
    /// once when `n` is 0); an error, at once, when `n` is more than
    /// [`capacity`](Self::capacity).
    pub fn wait_n(&self, n: u64) -> Result<(), TooManyPermits> {
        self.validate(n)?;
        if n > 0 {
            self.acquire_blocking(n);
        }
        Ok(())
    }

    fn validate(&self, n: u64) -> Result<(), TooManyPermits> {
        if n > self.capacity {
            return Err(TooManyPermits {
                requested: n,
                capacity: self.capacity,
            });
        }
        Ok(())
    }

    #[inline]
    fn arrive(&self, n: u64) -> Option<Place<'_, S>> {
        let now = self.clock.now();
        let arrival = self.line.lock().arrive(now, n);
        match arrival {
            Arrival::Granted => None,
            Arrival::Queued(ticket) => Some(Place {
                line: &self.line,
                ticket,
                permits: n,
                granted: false,
            }),
        }
    }

    async fn acquire(&self, n: u64) {
        if let Some(place) = self.arrive(n) {
            self.wait_in_line(place).await;
        }
    }

    async fn wait_in_line(&self, mut place: Place<'_, S>) {
        loop {
            let turn = poll_fn(|cx| {
                let step = place.poll_turn(self.clock.now(), cx.waker());
                wake(step.wake);
                step.turn
            })
            .await;
            match turn {
                Turn::Granted => {
                    place.granted = true;
                    return;
                }
                Turn::SleepUntil(deadline) => self.clock.sleep_until(deadline).await,
            }
        }
    }

    fn acquire_blocking(&self, n: u64) {
        let Some(mut place) = self.arrive(n) else {
            return;
        };
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        loop {
            let step = place.poll_turn(self.clock.now(), &waker);
            wake(step.wake);
            match step.turn {
                Poll::Ready(Turn::Granted) => {
                    place.granted = true;
                    return;
                }
                Poll::Ready(Turn::SleepUntil(deadline)) => {
                    self.clock.sleep_blocking_until(deadline)
                }
                // Woken (unparked) when the call reaches the front; a
                // spurious wake-up just asks again.
                Poll::Pending => std::thread::park(),
            }
        }
    }
}

/// A call's place in line; dropping it before the call is granted leaves
/// the line, waking the next call when this one was at the front.
struct Place<'a, S: Schedule> {
    line: &'a Mutex<Line<S>>,
    ticket: u64,
    permits: u64,
    granted: bool,
}

impl<S: Schedule> Place<'_, S> {
    fn poll_turn(&self, now: u64, waker: &Waker) -> Step {
        self.line
            .lock()
            .poll_turn(self.ticket, self.permits, now, waker)
    }
}

impl<S: Schedule> Drop for Place<'_, S> {
    fn drop(&mut self) {
        if !self.granted {
            let next = self.line.lock().leave(self.ticket);
            wake(next);
        }
    }
}

/// Wakes a call outside the line's lock.
fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

/// Wakes a thread blocked in [`Waiter::wait_n`].
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}
