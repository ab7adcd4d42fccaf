//! Time as a parameter.
//!
//! Every algorithm takes `now` as nanoseconds since the Unix epoch; nothing in
//! this crate reads a clock on its own. Adapters (stores, servers) hold a
//! [`Clock`] and pass its reading in, and tests use a [`ManualClock`] so that
//! every decision is exact and repeatable.
//!
//! ```
//! use tollgate_core::time::{Clock, ManualClock, NANOS_PER_SEC};
//!
//! let clock = ManualClock::new(5 * NANOS_PER_SEC);
//! clock.advance(std::time::Duration::from_millis(250));
//! assert_eq!(clock.now(), 5_250_000_000);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Nanoseconds in one millisecond.
pub const NANOS_PER_MS: u64 = 1_000_000;
/// Nanoseconds in one second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// A source of "now", in nanoseconds since the Unix epoch.
pub trait Clock: Send + Sync {
    /// The current time in nanoseconds since the Unix epoch.
    fn now(&self) -> u64;
}

/// Wall-clock time that never goes backwards.
///
/// It reads the system time once, at construction, and advances it with a
/// monotonic [`Instant`] afterwards, so a step of the system clock (NTP, a
/// manual change) cannot move a limiter's time backwards.
#[derive(Debug, Clone)]
pub struct SystemClock {
    epoch_at_start: u64,
    start: Instant,
}

impl SystemClock {
    /// A clock anchored at the current system time.
    pub fn new() -> Self {
        let epoch_at_start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, duration_to_nanos);
        SystemClock {
            epoch_at_start,
            start: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> u64 {
        self.epoch_at_start
            .saturating_add(duration_to_nanos(self.start.elapsed()))
    }
}

/// A clock that moves only when told to; for tests and trace replay.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock reading `now` nanoseconds since the epoch.
    pub fn new(now: u64) -> Self {
        ManualClock {
            now: AtomicU64::new(now),
        }
    }

    /// Moves the clock to `now`.
    pub fn set(&self, now: u64) {
        self.now.store(now, Ordering::SeqCst);
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(duration_to_nanos(by), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years).
pub fn duration_to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Rounds a nanosecond count up to whole milliseconds.
pub fn nanos_to_ms_ceil(nanos: u64) -> u64 {
    nanos.div_ceil(NANOS_PER_MS)
}

/// Rounds a duration up to whole seconds (what `Retry-After` and
/// `X-RateLimit-Reset` carry).
pub fn duration_to_secs_ceil(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_monotonic_and_near_wall_time() {
        let clock = SystemClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
        let wall = duration_to_nanos(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        );
        assert!(wall.abs_diff(b) < 5 * NANOS_PER_SEC);
    }

    #[test]
    fn rounding_is_upward() {
        assert_eq!(nanos_to_ms_ceil(0), 0);
        assert_eq!(nanos_to_ms_ceil(1), 1);
        assert_eq!(nanos_to_ms_ceil(NANOS_PER_MS), 1);
        assert_eq!(nanos_to_ms_ceil(NANOS_PER_MS + 1), 2);
        assert_eq!(duration_to_secs_ceil(Duration::from_millis(1000)), 1);
        assert_eq!(duration_to_secs_ceil(Duration::from_millis(1001)), 2);
        assert_eq!(duration_to_secs_ceil(Duration::ZERO), 0);
    }
}
