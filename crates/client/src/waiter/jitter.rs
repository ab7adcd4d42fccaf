//! Jitter: an optional, bounded, random extra wait.
//!
//! Several programs pacing themselves against the same API tend to wake at
//! the same instants (the top of each interval, the same emission slots).
//! Jitter spreads them: a call that has to wait for its permits waits an extra
//! random delay between zero and the bound, and its permits are counted when
//! it is released, so the limit still holds for the instants callers actually
//! go. A call whose permits are free when it reaches the front of the line
//! gets no jitter: it is not part of a herd.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use tollgate_core::time::duration_to_nanos;

/// A bound on the extra random wait added to calls that must wait; no jitter
/// by default.
///
/// ```
/// use std::time::Duration;
/// use tollgate_client::waiter::Jitter;
///
/// let jitter = Jitter::up_to(Duration::from_millis(20)).with_seed(7);
/// assert_eq!(jitter.max(), Duration::from_millis(20));
/// assert_eq!(Jitter::default(), Jitter::NONE);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Jitter {
    max_ns: u64,
    seed: Option<u64>,
}

impl Jitter {
    /// No jitter.
    pub const NONE: Jitter = Jitter {
        max_ns: 0,
        seed: None,
    };

    /// An extra wait drawn uniformly from zero to `max` (inclusive, in whole
    /// nanoseconds), seeded differently in each process.
    pub fn up_to(max: Duration) -> Jitter {
        Jitter {
            max_ns: duration_to_nanos(max),
            seed: None,
        }
    }

    /// The same bound with a fixed seed, so the sequence of extra waits
    /// repeats from run to run (for tests and simulations).
    pub fn with_seed(self, seed: u64) -> Jitter {
        Jitter {
            seed: Some(seed),
            ..self
        }
    }

    /// The largest extra wait.
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max_ns)
    }
}

/// Draws the extra waits: xorshift64*, a few lines of arithmetic rather than
/// a dependency on `rand`, because jitter needs spread, not unpredictability,
/// and a seeded test must see the same draws on every platform.
#[derive(Debug, Clone)]
pub(crate) struct JitterSource {
    max_ns: u64,
    state: u64,
}

impl JitterSource {
    pub(crate) fn new(jitter: Jitter) -> Self {
        let seed = jitter.seed.unwrap_or_else(|| {
            // std's hasher keys are random per process: a seed without a
            // dependency.
            let mut hasher = RandomState::new().build_hasher();
            hasher.write_u64(0x6a69_7474_6572);
            hasher.finish()
        });
        JitterSource {
            max_ns: jitter.max_ns,
            // xorshift never leaves zero; any other start will do.
            state: if seed == 0 {
                0x9e37_79b9_7f4a_7c15
            } else {
                seed
            },
        }
    }

    /// Whether there is any jitter to draw.
    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        self.max_ns > 0
    }

    /// The next extra wait, in `0..=max` nanoseconds.
    pub(crate) fn draw(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        let random = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        match self.max_ns.checked_add(1) {
            // Multiply-shift maps 64 random bits onto `0..=max` evenly enough
            // for jitter, without a division.
            Some(span) => ((u128::from(random) * u128::from(span)) >> 64) as u64,
            None => random,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_within_the_bound_and_spread_over_it() {
        let mut source = JitterSource::new(Jitter::up_to(Duration::from_nanos(99)).with_seed(1));
        let draws: Vec<u64> = (0..10_000).map(|_| source.draw()).collect();
        assert!(draws.iter().all(|&d| d <= 99));
        for tenth in 0..10 {
            let count = draws.iter().filter(|&&d| d / 10 == tenth).count();
            assert!((800..1_200).contains(&count), "tenth {tenth}: {count}");
        }
    }

    #[test]
    fn a_seed_repeats_its_sequence() {
        let jitter = Jitter::up_to(Duration::from_secs(1)).with_seed(42);
        let a: Vec<u64> = (0..5)
            .scan(JitterSource::new(jitter), |s, _| Some(s.draw()))
            .collect();
        let b: Vec<u64> = (0..5)
            .scan(JitterSource::new(jitter), |s, _| Some(s.draw()))
            .collect();
        assert_eq!(a, b);
        assert!(a.windows(2).any(|w| w[0] != w[1]));
    }

    #[test]
    fn zero_seed_and_full_range_work() {
        let mut source = JitterSource::new(Jitter::up_to(Duration::MAX).with_seed(0));
        assert_ne!(source.draw(), source.draw());
        assert!(!JitterSource::new(Jitter::NONE).is_active());
    }
}
