//! Shaping: how long an admitted `leaky_bucket` request is held before it
//! goes on — nginx `limit_req` semantics.
//!
//! A `leaky_bucket` decision carries `delay`, the time to drain the queue
//! ahead of the request (its position × P/N). Without options the request
//! is held that long (nginx without `nodelay`); with `nodelay` it is never
//! held (the queue still fills, and a full queue still rejects); with
//! `delay: N` the first N queued requests go at once and later ones are held
//! `delay − N × P/N` (nginx `delay=N`). Rejection happens only when the
//! queue is full, which is the algorithm's own behaviour.

use std::time::Duration;

use tollgate_core::time::duration_to_nanos;
use tollgate_core::Limit;
use tollgate_rules::Route;

/// A route's shaping options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shaping {
    /// Never hold admitted requests.
    pub nodelay: bool,
    /// The first `delay` queued requests are not held.
    pub delay: u64,
}

impl Shaping {
    /// `route`'s shaping options.
    pub(crate) fn of(route: &Route) -> Shaping {
        Shaping {
            nodelay: route.nodelay,
            delay: route.delay,
        }
    }

    /// How long to hold a request that `limit` admitted with `delay`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_core::{AlgorithmName, Limit, Rate};
    /// use tollgate_tower::Shaping;
    ///
    /// // 10/s: one request drains every 100 ms.
    /// let limit = Limit::new(AlgorithmName::LeakyBucket, Rate::per_second(10).unwrap());
    /// let queued_fifth = Duration::from_millis(500);
    /// assert_eq!(Shaping::default().hold(queued_fifth, &limit), queued_fifth);
    /// assert_eq!(Shaping { nodelay: true, delay: 0 }.hold(queued_fifth, &limit), Duration::ZERO);
    /// let first_three_free = Shaping { nodelay: false, delay: 3 };
    /// assert_eq!(first_three_free.hold(queued_fifth, &limit), Duration::from_millis(200));
    /// assert_eq!(first_three_free.hold(Duration::from_millis(300), &limit), Duration::ZERO);
    /// ```
    pub fn hold(&self, delay: Duration, limit: &Limit) -> Duration {
        if self.nodelay || delay.is_zero() {
            return Duration::ZERO;
        }
        if self.delay == 0 {
            return delay;
        }
        // N × P/n, exactly: the queue drains one request per P/n.
        let free = u128::from(self.delay) * u128::from(limit.rate.period_nanos())
            / u128::from(limit.rate.limit().max(1));
        let held = u128::from(duration_to_nanos(delay)).saturating_sub(free);
        Duration::from_nanos(u64::try_from(held).unwrap_or(u64::MAX))
    }
}
