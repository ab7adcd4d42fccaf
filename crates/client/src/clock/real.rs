//! Real time, read cheaply: [`RealClock`], the waiters' default.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tollgate_core::time::{duration_to_nanos, Clock};

use super::tokio_clock::tokio_deadline;
use super::WaitClock;

/// Wall-clock time that never goes backwards, read from the CPU's
/// time-stamp counter.
///
/// "Now" comes from [quanta](https://docs.rs/quanta), calibrated against
/// the operating system's monotonic clock and anchored to the system time
/// when the clock is made: reading it is several times cheaper than
/// `Instant::now()` on virtual machines, and a waiter reads it on every
/// call (governor's default clock is the same). The first `RealClock` in a
/// process waits for quanta's one-off calibration, a busy loop of at most
/// 200 ms. Where the CPU has no usable counter, quanta falls back to the
/// monotonic clock.
///
/// Asynchronous sleeps use tokio's timer (they must run inside a tokio
/// runtime with time enabled); blocking sleeps use
/// [`std::thread::sleep`]. Either way a sleep ends only once this clock has
/// reached the deadline. This clock does not follow `tokio::time::pause`;
/// use [`TokioClock`](super::TokioClock) for that.
#[derive(Debug, Clone)]
pub struct RealClock {
    clock: quanta::Clock,
    /// The counter's raw reading at `epoch_at_start`.
    start: u64,
    /// Nanoseconds per 2^[`SCALE_SHIFT`] counter ticks, from quanta's
    /// calibration.
    nanos_per_scaled_ticks: u64,
    epoch_at_start: u64,
}

/// The fixed point of [`RealClock::nanos_per_scaled_ticks`]. With 2^48
/// ticks the factor keeps at least 45 significant bits for counters up to
/// 5 GHz, so its rounding drifts by less than a microsecond a day; and a
/// constant shift is one instruction, where quanta's own scaling shifts by
/// a variable amount.
const SCALE_SHIFT: u32 = 48;

impl RealClock {
    /// A clock anchored at the current system time.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let nanos_per_scaled_ticks = clock.delta_as_nanos(0, 1 << SCALE_SHIFT);
        let start = clock.raw();
        let epoch_at_start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, duration_to_nanos);
        RealClock {
            clock,
            start,
            nanos_per_scaled_ticks,
            epoch_at_start,
        }
    }

    /// `ticks` of the counter in nanoseconds.
    #[inline]
    fn ticks_as_nanos(&self, ticks: u64) -> u64 {
        // 2^64 ticks times a factor below 2^64 fits 128 bits; the result
        // fits 64 bits for as long as the sum in `now` does.
        ((u128::from(ticks) * u128::from(self.nanos_per_scaled_ticks)) >> SCALE_SHIFT) as u64
    }

    fn until(&self, deadline: u64) -> Duration {
        Duration::from_nanos(deadline.saturating_sub(self.now()))
    }
}

impl Default for RealClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for RealClock {
    #[inline]
    fn now(&self) -> u64 {
        // Raw counter ticks scaled straight to nanoseconds: no `Duration`
        // on the way. A counter read on another core may be a little
        // behind `start`: that is no time at all, as with quanta.
        let ticks = self.clock.raw().saturating_sub(self.start);
        // The sum cannot overflow before the year 2500.
        self.epoch_at_start.wrapping_add(self.ticks_as_nanos(ticks))
    }
}

impl WaitClock for RealClock {
    type Sleep = RealSleep;

    fn sleep_until(&self, deadline: u64) -> RealSleep {
        RealSleep {
            timer: Box::pin(tokio::time::sleep_until(tokio_deadline(
                self.until(deadline),
            ))),
            clock: self.clone(),
            deadline,
        }
    }

    fn sleep_blocking_until(&self, deadline: u64) {
        // `thread::sleep` may end early on some platforms; sleep again until
        // this clock agrees.
        loop {
            let left = self.until(deadline);
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left);
        }
    }
}

/// The future of [`RealClock::sleep_until`]: tokio's timer, set again
/// should it fire before this clock reaches the deadline (the two clocks are
/// calibrated against each other, not identical).
#[derive(Debug)]
pub struct RealSleep {
    timer: Pin<Box<tokio::time::Sleep>>,
    clock: RealClock,
    deadline: u64,
}

impl Future for RealSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let left = self.clock.until(self.deadline);
            if left.is_zero() {
                return Poll::Ready(());
            }
            self.timer.as_mut().reset(tokio_deadline(left));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wall_time_and_never_goes_backwards() {
        let clock = RealClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
        let wall = duration_to_nanos(SystemTime::now().duration_since(UNIX_EPOCH).unwrap());
        assert!(wall.abs_diff(b) < 5_000_000_000);
    }

    #[test]
    fn scales_ticks_as_quanta_does() {
        let clock = RealClock::new();
        for ticks in [
            0,
            1,
            1_000,
            1 << 20,
            1_000_000_000,
            1 << 40,
            1 << 50,
            1 << 56,
        ] {
            let ours = clock.ticks_as_nanos(ticks);
            let quanta = clock.clock.delta_as_nanos(0, ticks);
            // Both round down, from factors of different precision: at most
            // a nanosecond apart, or one part in a billion.
            assert!(
                ours.abs_diff(quanta) <= (quanta / 1_000_000_000).max(1),
                "{ticks} ticks: {ours} ns here, {quanta} ns by quanta"
            );
        }
    }

    #[test]
    fn past_deadlines_need_no_sleep() {
        let clock = RealClock::new();
        clock.sleep_blocking_until(0);
        clock.sleep_blocking_until(clock.now());
    }

    #[tokio::test]
    async fn an_async_sleep_on_a_past_deadline_ends_at_once() {
        let clock = RealClock::new();
        clock.sleep_until(clock.now()).await;
        clock.sleep_until(0).await;
    }
}
