//! Clocks a waiter reads and sleeps on.
//!
//! A waiter needs two things from time: "now", to decide whether permits are
//! free, and a way to sleep until an instant, both asynchronously (for
//! `until_ready().await`) and by blocking the thread (for `wait()`).
//! [`WaitClock`] is that pair, built on the core's
//! [`Clock`](tollgate_core::time::Clock) so instants are the same
//! nanoseconds-since-the-epoch the core's algorithms take.
//!
//! - [`RealClock`], the waiters' default: real time read cheaply from the
//!   CPU's time-stamp counter (quanta), slept on with tokio's timer or the
//!   thread.
//! - [`TokioClock`]: real time read from tokio's clock and slept on with
//!   tokio's timer. It follows `tokio::time::pause`, so a program's own tests
//!   can run a waiter on tokio's paused clock; each reading costs a system
//!   clock call.
//! - [`ManualClock`]: time that moves only when a test moves it (or, when
//!   auto-advancing, jumps to whatever a sleeper waits for). Sleepers, async
//!   or blocking, wake exactly at their deadline.
//!
//! Why a trait of our own rather than tokio's paused time alone: tokio's
//! timer works in whole milliseconds, so on a paused runtime a waiter due at
//! 333,333,334 ns would wake at 334 ms, and a test could not check that each
//! grant lands on the exact instant the algorithm computed. And a blocking
//! `wait()` cannot sleep on tokio's paused clock at all. With [`ManualClock`]
//! both paths are exact to the nanosecond and no test sleeps for real.
//!
//! This module owns time for the client crate; it does not decide anything.

mod manual;
mod real;
mod tokio_clock;

use std::future::Future;

pub use manual::{ManualClock, ManualSleep};
pub use real::{RealClock, RealSleep};
pub use tokio_clock::TokioClock;
pub use tollgate_core::time::Clock;

/// A clock a waiter can sleep on: "now" from [`Clock`], plus sleeping until
/// an instant, asynchronously or by blocking the thread.
///
/// Instants are nanoseconds since the Unix epoch, as everywhere in tollgate.
pub trait WaitClock: Clock {
    /// The future [`sleep_until`](Self::sleep_until) returns.
    type Sleep: Future<Output = ()> + Send;

    /// A future that completes once [`now`](Clock::now) has reached
    /// `deadline` (at once when it already has).
    fn sleep_until(&self, deadline: u64) -> Self::Sleep;

    /// Blocks the calling thread until [`now`](Clock::now) has reached
    /// `deadline`.
    fn sleep_blocking_until(&self, deadline: u64);
}
