//! Exact integer arithmetic shared by the bucket algorithms.
//!
//! A rate of `n` per `p` ns refills `n/p` tokens per nanosecond, which is
//! rarely a whole number. Measuring tokens in units of `1/p` token makes the
//! refill exactly `n` units per nanosecond and one token exactly `p` units,
//! so every comparison is exact in `u128`. Both are first divided by their
//! greatest common divisor, which changes no decision and keeps the numbers
//! small enough for a 64-bit token count in most configurations.

use super::divisor::Divisor;
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
    /// Capacity in units (`burst × p`), kept rather than multiplied out on
    /// every decision.
    capacity: u128,
    /// Dividing by `n` and by `p`, the two divisions of a decision.
    per_n: Divisor,
    per_p: Divisor,
}

impl BucketMath {
    #[inline]
    pub(crate) fn new(rate: Rate, burst: u64) -> Self {
        let (n, p) = (rate.limit(), rate.period_nanos());
        let common = gcd(n, p);
        let (n, p) = (n / common, p / common);
        BucketMath {
            n,
            p,
            burst,
            capacity: u128::from(burst) * u128::from(p),
            per_n: Divisor::new(n),
            per_p: Divisor::new(p),
        }
    }

    /// Units in `tokens` tokens.
    #[inline]
    pub(crate) fn units(&self, tokens: u64) -> u128 {
        u128::from(tokens) * u128::from(self.p)
    }

    /// The capacity in units.
    #[inline]
    pub(crate) fn capacity(&self) -> u128 {
        self.capacity
    }

    /// Units refilled (or drained) in `ns` nanoseconds.
    #[inline]
    pub(crate) fn refill(&self, ns: u64) -> u128 {
        u128::from(ns) * u128::from(self.n)
    }

    /// The capacity in units when it fits in 64 bits.
    #[inline]
    pub(crate) fn capacity64(&self) -> Option<u64> {
        u64::try_from(self.capacity).ok()
    }

    /// [`whole_tokens`](Self::whole_tokens) of a 64-bit count.
    #[inline]
    pub(crate) fn whole_tokens64(&self, units: u64) -> u64 {
        self.per_p.floor(units)
    }

    /// [`nanos_for`](Self::nanos_for) of a 64-bit count.
    #[inline]
    pub(crate) fn nanos_for64(&self, units: u64) -> u64 {
        self.per_n.ceil(units)
    }

    /// Whole tokens in `units`.
    #[inline]
    pub(crate) fn whole_tokens(&self, units: u128) -> u64 {
        match u64::try_from(units) {
            Ok(units) => self.per_p.floor(units),
            Err(_) => div_floor(units, self.p),
        }
    }

    /// Whole tokens needed to make up `units`, rounded up: the usage a
    /// bucket missing `units` of its capacity reports.
    #[inline]
    pub(crate) fn tokens_for(&self, units: u128) -> u64 {
        div_ceil(units, self.p)
    }

    /// Nanoseconds needed to refill `units`, rounded up.
    #[inline]
    pub(crate) fn nanos_for(&self, units: u128) -> u64 {
        match u64::try_from(units) {
            Ok(units) => self.per_n.ceil(units),
            Err(_) => div_ceil(units, self.n),
        }
    }
}

/// The most units of debt (or of queue) a recorded usage may leave: far
/// beyond any capacity (`MAX_LIMIT × period` is below 2^100), and far enough
/// from the end of `u128` that adding a cost, a refill or a drain to it
/// never overflows.
pub(crate) const MOST_UNITS: u128 = u128::MAX >> 2;

/// The greatest common divisor (both arguments are non-zero).
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `a / b` rounded down, saturating at `u64::MAX`.
///
/// A 128-bit division costs several times a 64-bit one, and on the hot path
/// the dividend almost always fits in 64 bits.
#[inline]
pub(crate) fn div_floor(a: u128, b: u64) -> u64 {
    match u64::try_from(a) {
        Ok(a) => a / b,
        Err(_) => u64::try_from(a / u128::from(b)).unwrap_or(u64::MAX),
    }
}

/// `a / b` rounded up, saturating at `u64::MAX`.
#[inline]
pub(crate) fn div_ceil(a: u128, b: u64) -> u64 {
    match u64::try_from(a) {
        Ok(a) => a.div_ceil(b),
        Err(_) => u64::try_from(a.div_ceil(u128::from(b))).unwrap_or(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_reduced_by_the_common_divisor() {
        let math = BucketMath::new(Rate::per_second(10).unwrap(), 20);
        assert_eq!((math.n, math.p), (1, 100_000_000));
        let math = BucketMath::new(Rate::per_second(3).unwrap(), 3);
        assert_eq!((math.n, math.p), (3, 1_000_000_000));
    }

    #[test]
    fn divisions_agree_with_128_bit_arithmetic_on_both_paths() {
        let big = u128::from(u64::MAX) * 3 + 7;
        for (a, b) in [
            (0u128, 1u64),
            (10, 3),
            (9, 3),
            (u128::from(u64::MAX), 2),
            (big, 5),
            (big, 1),
        ] {
            let floor = u64::try_from(a / u128::from(b)).unwrap_or(u64::MAX);
            let ceil = u64::try_from(a.div_ceil(u128::from(b))).unwrap_or(u64::MAX);
            assert_eq!(div_floor(a, b), floor, "{a} / {b}");
            assert_eq!(div_ceil(a, b), ceil, "{a} / {b}");
        }
    }
}
