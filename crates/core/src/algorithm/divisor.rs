//! Division by a limit's fixed numbers (its period, its rate, a window's
//! step) without a hardware division on every decision.
//!
//! A 64-bit `div` takes 10 to 40 cycles depending on the processor; a
//! decision needs one or two (whole tokens remaining, nanoseconds until
//! reset), which was about a sixth of a keyed check's time on one hot key
//! (docs/benchmarks.md). The divisors never change after a limit is built,
//! so each is reduced once to a multiplier (`strength_reduce`), and dividing
//! is then two multiplications and a shift.

use strength_reduce::StrengthReducedU64;

/// A non-zero divisor with its reciprocal precomputed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Divisor {
    reduced: StrengthReducedU64,
}

impl Divisor {
    /// Dividing by `d`; a `d` of 0 is taken as 1 (limits are validated
    /// before they get here, so it never is).
    pub(crate) fn new(d: u64) -> Self {
        Divisor {
            reduced: StrengthReducedU64::new(d.max(1)),
        }
    }

    /// The divisor.
    #[inline]
    pub(crate) fn get(&self) -> u64 {
        self.reduced.get()
    }

    /// `a / d`, rounded down.
    #[inline]
    pub(crate) fn floor(&self, a: u64) -> u64 {
        a / self.reduced
    }

    /// `a / d`, rounded up.
    #[inline]
    pub(crate) fn ceil(&self, a: u64) -> u64 {
        let (quotient, remainder) = StrengthReducedU64::div_rem(a, self.reduced);
        quotient + u64::from(remainder != 0)
    }

    /// `(a / d, a % d)`.
    #[inline]
    pub(crate) fn div_rem(&self, a: u64) -> (u64, u64) {
        StrengthReducedU64::div_rem(a, self.reduced)
    }
}

impl PartialEq for Divisor {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for Divisor {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(a: u64, d: u64) {
        let divisor = Divisor::new(d);
        assert_eq!(divisor.floor(a), a / d, "{a} / {d}");
        assert_eq!(divisor.ceil(a), a.div_ceil(d), "{a} / {d} rounded up");
        assert_eq!(divisor.div_rem(a), (a / d, a % d), "{a} divmod {d}");
    }

    #[test]
    fn edges() {
        for d in [
            1,
            2,
            3,
            7,
            10,
            100,
            1 << 32,
            (1 << 32) + 1,
            u64::MAX - 1,
            u64::MAX,
        ] {
            for a in [0, 1, d - 1, d, d.saturating_add(1), u64::MAX - 1, u64::MAX] {
                check(a, d);
            }
        }
        assert_eq!(Divisor::new(0).get(), 1);
    }

    proptest! {
        #[test]
        fn divides_as_the_hardware_does(a: u64, d in 1u64..) {
            check(a, d);
        }

        #[test]
        fn divides_small_divisors_as_the_hardware_does(a: u64, d in 1u64..100_000) {
            check(a, d);
        }
    }
}
