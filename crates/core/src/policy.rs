//! The quota a limit announces to clients (`RateLimit-Policy: …;q=Q;w=W`,
//! SPEC §7): `Q` requests every `W` seconds, chosen so that a client that
//! follows it — `Q` requests every `W` seconds, spread evenly or all at once
//! at the start of each `W` — is never refused by that limit alone.
//!
//! This module owns only that arithmetic; the headers are written by the
//! adapters (`tollgate-tower`'s `headers`), which all take it from here.
//!
//! Per algorithm (`N` per `P`, bucket capacity `burst`):
//!
//! | algorithm | `Q` | `W` (seconds, rounded up, at least 1) |
//! |---|---|---|
//! | `token_bucket`, `gcra`, `leaky_bucket` | `burst` | `burst × P / N`, the time to refill (or drain) a whole burst |
//! | `fixed_window`, `sliding_window_log` | `N` | `P` |
//! | `sliding_window_counter` | `N` | `2 × P`: the previous window's count still weighs on the current one, so `N` at the start of every `P` is refused from the second window on |
//! | `stepped_window` | `N` | `P + step`: a step counts while any part of it lies in the window, so a request is still counted up to one step after `P` |
//! | `concurrency` | `N` | `lease_ttl`: a lease a client does not release is held that long |
//!
//! On calendar windows `P` is the unit's longest window
//! ([`CalendarUnit::longest_secs`](crate::calendar::CalendarUnit::longest_secs)):
//! `N` every 31 days and 2 hours never has two batches in one month.

use crate::algorithm::default_step;
use crate::limit::{AlgorithmName, Limit, DEFAULT_LEASE_TTL};
use crate::time::{duration_to_nanos, NANOS_PER_SEC};

/// `quota` requests every `window_secs` seconds: what `RateLimit-Policy`
/// says of a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuotaPolicy {
    /// `q`: requests a client may send in every window.
    pub quota: u64,
    /// `w`: the window, in whole seconds, at least 1.
    pub window_secs: u64,
}

impl Limit {
    /// The quota a client can follow without ever being refused by this
    /// limit alone (see the [module](crate::policy) for the rule).
    ///
    /// ```
    /// use tollgate_core::{AlgorithmName, Limit};
    /// use tollgate_core::policy::QuotaPolicy;
    ///
    /// // Burst 20 refilled at 10/s: 20 every 2 s, not 20 every second.
    /// let bucket = Limit::new(AlgorithmName::TokenBucket, "10/s".parse().unwrap()).with_burst(20);
    /// assert_eq!(bucket.policy(), QuotaPolicy { quota: 20, window_secs: 2 });
    /// ```
    pub fn policy(&self) -> QuotaPolicy {
        let n = self.rate.limit();
        // A calendar's windows are as long as its unit's longest.
        let p = match self.calendar {
            Some(calendar) => {
                u128::from(calendar.unit().longest_secs()) * u128::from(NANOS_PER_SEC)
            }
            None => u128::from(self.rate.period_nanos()),
        };
        let (quota, window_ns) = match self.algorithm {
            AlgorithmName::TokenBucket | AlgorithmName::Gcra | AlgorithmName::LeakyBucket => {
                let burst = self.burst.unwrap_or(n);
                (burst, (u128::from(burst) * p).div_ceil(u128::from(n)))
            }
            AlgorithmName::FixedWindow | AlgorithmName::SlidingWindowLog => (n, p),
            AlgorithmName::SlidingWindowCounter => (n, 2 * p),
            AlgorithmName::SteppedWindow => {
                let step = self
                    .step
                    .unwrap_or_else(|| default_step(self.rate.period()));
                (n, p + u128::from(duration_to_nanos(step)))
            }
            AlgorithmName::Concurrency => (
                n,
                u128::from(duration_to_nanos(
                    self.lease_ttl.unwrap_or(DEFAULT_LEASE_TTL),
                )),
            ),
        };
        let window_secs = window_ns.div_ceil(u128::from(NANOS_PER_SEC)).max(1);
        QuotaPolicy {
            quota,
            window_secs: u64::try_from(window_secs).unwrap_or(u64::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn policy(limit: Limit) -> (u64, u64) {
        let p = limit.policy();
        (p.quota, p.window_secs)
    }

    fn limit(algorithm: AlgorithmName, rate: &str) -> Limit {
        Limit::new(algorithm, rate.parse().unwrap())
    }

    #[test]
    fn buckets_announce_their_burst_over_the_time_to_refill_it() {
        for a in [
            AlgorithmName::TokenBucket,
            AlgorithmName::Gcra,
            AlgorithmName::LeakyBucket,
        ] {
            assert_eq!(policy(limit(a, "10/s").with_burst(20)), (20, 2), "{a}");
            assert_eq!(policy(limit(a, "10/s")), (10, 1), "{a}");
            // 7 tokens at 3/s take 2.33 s to refill: rounded up.
            assert_eq!(policy(limit(a, "3/s").with_burst(7)), (7, 3), "{a}");
            // A burst smaller than N refills in under a second: at least 1.
            assert_eq!(policy(limit(a, "100/s").with_burst(5)), (5, 1), "{a}");
        }
    }

    #[test]
    fn windows_announce_n_over_their_period_rounded_up() {
        use AlgorithmName::*;
        assert_eq!(policy(limit(FixedWindow, "5/100ms")), (5, 1));
        assert_eq!(policy(limit(FixedWindow, "10/1500ms")), (10, 2));
        assert_eq!(policy(limit(SlidingWindowLog, "1000/d")), (1000, 86_400));
        assert_eq!(policy(limit(SlidingWindowCounter, "7/min")), (7, 120));
        // 10 per 4 s in steps of 1 s; the default step of a minute is 100 ms.
        let stepped = limit(SteppedWindow, "10/4s").with_step(Duration::from_secs(1));
        assert_eq!(policy(stepped), (10, 5));
        assert_eq!(policy(limit(SteppedWindow, "100/min")), (100, 61));
        assert_eq!(policy(limit(Concurrency, "3/s")), (3, 60));
        let short = limit(Concurrency, "3/s").with_lease_ttl(Duration::from_millis(1500));
        assert_eq!(policy(short), (3, 2));
    }
}
