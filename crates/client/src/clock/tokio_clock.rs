//! Real time through tokio: [`TokioClock`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::{Instant, Sleep};
use tollgate_core::time::{duration_to_nanos, Clock};

use super::WaitClock;

/// How far ahead a deadline that tokio cannot represent is put: far enough
/// never to matter, near enough for tokio's timer to accept.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 86_400);

/// Wall-clock time that never goes backwards, read from tokio's clock.
///
/// It reads the system time once, at construction, and advances it with
/// [`tokio::time::Instant`] afterwards: a step of the system clock cannot move
/// a waiter's time backwards, and when a runtime's clock is paused
/// (`tokio::time::pause`, `#[tokio::test(start_paused = true)]`) the waiter
/// follows it, so a program's tests need no real sleeps either.
///
/// Asynchronous sleeps use tokio's timer (whole milliseconds: a sleep ends up
/// to a millisecond late, never early); blocking sleeps use
/// [`std::thread::sleep`].
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    epoch_at_start: u64,
    start: Instant,
}

impl TokioClock {
    /// A clock anchored at the current system time.
    pub fn new() -> Self {
        let epoch_at_start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, duration_to_nanos);
        TokioClock {
            epoch_at_start,
            start: Instant::now(),
        }
    }

    /// The tokio instant of `deadline`.
    fn instant(&self, deadline: u64) -> Instant {
        let offset = Duration::from_nanos(deadline.saturating_sub(self.epoch_at_start));
        self.start
            .checked_add(offset)
            .unwrap_or_else(|| tokio_deadline(FAR_FUTURE))
    }
}

/// The tokio instant `wait` from now, or far away when tokio cannot
/// represent it.
pub(super) fn tokio_deadline(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .or_else(|| now.checked_add(FAR_FUTURE))
        .unwrap_or(now)
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    #[inline]
    fn now(&self) -> u64 {
        let elapsed = Instant::now().saturating_duration_since(self.start);
        self.epoch_at_start
            .saturating_add(duration_to_nanos(elapsed))
    }
}

impl WaitClock for TokioClock {
    type Sleep = Sleep;

    fn sleep_until(&self, deadline: u64) -> Sleep {
        tokio::time::sleep_until(self.instant(deadline))
    }

    fn sleep_blocking_until(&self, deadline: u64) {
        // `thread::sleep` may end early on some platforms; sleep again until
        // the clock agrees.
        loop {
            let now = self.now();
            if now >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_nanos(deadline - now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wall_time_and_never_goes_backwards() {
        let clock = TokioClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
        let wall = duration_to_nanos(SystemTime::now().duration_since(UNIX_EPOCH).unwrap());
        assert!(wall.abs_diff(b) < 5_000_000_000);
    }

    #[test]
    fn blocking_sleep_on_a_past_deadline_returns_at_once() {
        let clock = TokioClock::new();
        clock.sleep_blocking_until(0);
        clock.sleep_blocking_until(clock.now());
    }

    #[test]
    fn unrepresentable_deadlines_are_far_away_not_a_panic() {
        let clock = TokioClock::new();
        assert!(clock.instant(u64::MAX) > Instant::now() + Duration::from_secs(86_400));
        assert!(clock.instant(0) <= Instant::now());
    }

    #[tokio::test(start_paused = true)]
    async fn follows_tokios_paused_clock() {
        let clock = TokioClock::new();
        let start = clock.now();
        clock.sleep_until(start + 250_000_000).await;
        assert_eq!(clock.now() - start, 250_000_000);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(clock.now() - start, 2_250_000_000);
    }
}
