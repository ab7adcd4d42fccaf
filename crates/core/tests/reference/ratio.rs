//! Exact fractions, so the bucket models never round.

use std::cmp::Ordering;

/// `num / den` in lowest terms, `den > 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ratio {
    num: i128,
    den: i128,
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

impl Ratio {
    pub(crate) fn new(num: i128, den: i128) -> Ratio {
        assert!(den > 0, "denominator must be positive");
        let g = gcd(num, den).max(1);
        Ratio {
            num: num / g,
            den: den / g,
        }
    }

    pub(crate) fn int(n: u64) -> Ratio {
        Ratio::new(i128::from(n), 1)
    }

    pub(crate) fn zero() -> Ratio {
        Ratio::int(0)
    }

    pub(crate) fn add(self, o: Ratio) -> Ratio {
        Ratio::new(self.num * o.den + o.num * self.den, self.den * o.den)
    }

    pub(crate) fn sub(self, o: Ratio) -> Ratio {
        Ratio::new(self.num * o.den - o.num * self.den, self.den * o.den)
    }

    /// `self × a / b` for positive integers.
    pub(crate) fn scale(self, a: u64, b: u64) -> Ratio {
        Ratio::new(self.num * i128::from(a), self.den * i128::from(b))
    }

    /// The smallest integer not below `self`.
    pub(crate) fn ceil(self) -> i128 {
        -((-self.num).div_euclid(self.den))
    }

    /// The largest integer not above `self`.
    pub(crate) fn floor(self) -> i128 {
        self.num.div_euclid(self.den)
    }

    /// `ceil(self)` as a wait in nanoseconds: zero when not positive.
    pub(crate) fn ceil_nanos(self) -> u64 {
        u64::try_from(self.ceil().max(0)).expect("wait fits in u64")
    }
}

impl PartialOrd for Ratio {
    fn partial_cmp(&self, o: &Ratio) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Ratio {
    fn cmp(&self, o: &Ratio) -> Ordering {
        (self.num * o.den).cmp(&(o.num * self.den))
    }
}
