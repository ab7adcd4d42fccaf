//! Exact integer arithmetic shared by the bucket algorithms.
//!
//! A rate of `n` per `p` ns refills `n/p` tokens per nanosecond, which is
//! rarely a whole number. Measuring tokens in units of `1/p` token makes the
//! refill exactly `n` units per nanosecond and one token exactly `p` units,
//! so every comparison is exact in `u128`.

use crate::rate::Rate;

/// A bucket's rate and capacity in scaled units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BucketMath {
    /// Requests per period (`n`): units refilled per nanosecond.
    pub(crate) n: u64,
    /// The period in nanoseconds (`p`): units in one token.
    pub(crate) p: u64,
    /// Capacity in tokens.
    pub(crate) burst: u64,
}

impl BucketMath {
    pub(crate) fn new(rate: Rate, burst: u64) -> Self {
        BucketMath {
            n: rate.limit(),
            p: rate.period_nanos(),
            burst,
        }
    }

    /// Units in `tokens` tokens.
    pub(crate) fn units(&self, tokens: u64) -> u128 {
        u128::from(tokens) * u128::from(self.p)
    }

    /// The capacity in units.
    pub(crate) fn capacity(&self) -> u128 {
        self.units(self.burst)
    }

    /// Units refilled (or drained) in `ns` nanoseconds.
    pub(crate) fn refill(&self, ns: u64) -> u128 {
        u128::from(ns) * u128::from(self.n)
    }

    /// Whole tokens in `units`.
    pub(crate) fn whole_tokens(&self, units: u128) -> u64 {
        u64::try_from(units / u128::from(self.p)).unwrap_or(u64::MAX)
    }

    /// Nanoseconds needed to refill `units`, rounded up.
    pub(crate) fn nanos_for(&self, units: u128) -> u64 {
        u64::try_from(units.div_ceil(u128::from(self.n))).unwrap_or(u64::MAX)
    }
}
