//! [`Debt`]: how much a key's state holds against it at an instant, the
//! measure by which a bounded store chooses what to forget.
//!
//! A store that forgets a state hands its key a fresh one. Forgetting a state
//! that admits as much as a fresh one changes no decision; forgetting one
//! that is refusing requests frees its key. Every algorithm's debt is read
//! off its own decision for cost 0 at that instant (its `remaining`, the
//! unit-cost requests it would still admit), against what a fresh state
//! admits (its `limit`), so the same definition holds for all eight and
//! follows them wherever their semantics go.

use std::cmp::Ordering;

/// What a state holds against its key at one instant (see
/// [`Algorithm::debt`](super::Algorithm::debt)).
///
/// Ordered by how much forgetting the state would change: every state that
/// is not refusing comes before every refusing one, then the smaller debt
/// first. The least of a set is the one to forget first.
///
/// ```
/// use tollgate_core::algorithm::{Algorithm, Debt, FixedWindow};
/// use tollgate_core::Rate;
///
/// let window = FixedWindow::new(Rate::per_second(2).unwrap());
/// let mut state = window.new_state();
/// assert_eq!(window.debt(&state, 0), Debt::NONE);
/// window.check(&mut state, 0, 1).unwrap();
/// assert_eq!(window.debt(&state, 0), Debt { units: 1, refusing: false });
/// window.check(&mut state, 0, 1).unwrap();
/// let throttled = window.debt(&state, 0);
/// assert!(throttled.refusing);
/// assert!(throttled > Debt { units: u64::MAX, refusing: false });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Debt {
    /// Unit-cost requests a fresh state would admit right now that this one
    /// would refuse: 0 for a state as good as fresh.
    pub units: u64,
    /// A request of cost 1 would be refused right now although a fresh
    /// state would admit it: forgetting this state lets its key through.
    pub refusing: bool,
}

impl Debt {
    /// The debt of a fresh state: nothing held, nothing refused.
    pub const NONE: Debt = Debt {
        units: 0,
        refusing: false,
    };

    /// The debt of a state that has `remaining` unit-cost requests left at
    /// an instant when a fresh one would have `limit`.
    #[inline]
    pub fn from_remaining(limit: u64, remaining: u64) -> Debt {
        Debt {
            units: limit.saturating_sub(remaining),
            refusing: limit > 0 && remaining == 0,
        }
    }

    /// The debt as one integer with the same order: refusing states above
    /// every other, then by units (saturated below the refusing bit).
    #[inline]
    pub const fn rank(self) -> u64 {
        const REFUSING: u64 = 1 << 63;
        let units = if self.units < REFUSING {
            self.units
        } else {
            REFUSING - 1
        };
        if self.refusing {
            REFUSING | units
        } else {
            units
        }
    }
}

impl Ord for Debt {
    fn cmp(&self, other: &Debt) -> Ordering {
        (self.refusing, self.units).cmp(&(other.refusing, other.units))
    }
}

impl PartialOrd for Debt {
    fn partial_cmp(&self, other: &Debt) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    //! The debt of each algorithm on worked examples; the property tests in
    //! `tests/debt.rs` hold every algorithm to the definition on random
    //! traces.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::algorithm::{
        Algorithm, Concurrency, FixedWindow, Gcra, LeakyBucket, SlidingWindowCounter,
        SlidingWindowLog, SteppedWindow, TokenBucket,
    };
    use crate::time::NANOS_PER_SEC;
    use crate::Rate;
    use std::time::Duration;

    const S: u64 = NANOS_PER_SEC;

    fn per_10s(n: u64) -> Rate {
        Rate::new(n, Duration::from_secs(10)).unwrap()
    }

    /// Checks `times` unit requests at `at`, then returns the debt at `then`.
    fn debt_after<A: Algorithm>(alg: &A, times: u64, at: u64, then: u64) -> Debt {
        let mut state = alg.new_state();
        for _ in 0..times {
            alg.check(&mut state, at, 1).unwrap();
        }
        alg.debt(&state, then)
    }

    fn owes(units: u64) -> Debt {
        Debt {
            units,
            refusing: false,
        }
    }

    fn refusing(units: u64) -> Debt {
        Debt {
            units,
            refusing: true,
        }
    }

    #[test]
    fn ranks_order_as_debts_do() {
        let debts = [
            Debt::NONE,
            owes(1),
            owes(u64::MAX - 1),
            owes(u64::MAX),
            refusing(0),
            refusing(5),
            refusing(u64::MAX),
        ];
        for pair in debts.windows(2) {
            assert!(pair[0] <= pair[1]);
            assert!(pair[0].rank() <= pair[1].rank(), "{pair:?}");
        }
        assert_eq!(Debt::from_remaining(0, 0), Debt::NONE);
        assert_eq!(Debt::from_remaining(5, 0), refusing(5));
    }

    #[test]
    fn fixed_window_owes_its_count_until_the_window_ends() {
        let alg = FixedWindow::new(per_10s(5));
        assert_eq!(debt_after(&alg, 0, S, S), Debt::NONE);
        assert_eq!(debt_after(&alg, 3, S, 2 * S), owes(3));
        assert_eq!(debt_after(&alg, 5, S, 9 * S), refusing(5));
        assert_eq!(debt_after(&alg, 5, S, 10 * S), Debt::NONE);
    }

    #[test]
    fn sliding_log_owes_what_is_still_inside_the_window() {
        let alg = SlidingWindowLog::new(per_10s(5));
        assert_eq!(debt_after(&alg, 5, S, 5 * S), refusing(5));
        assert_eq!(debt_after(&alg, 2, S, 10 * S), owes(2));
        assert_eq!(debt_after(&alg, 5, S, 11 * S), Debt::NONE);
    }

    #[test]
    fn sliding_counter_owes_the_weighted_count() {
        let alg = SlidingWindowCounter::new(per_10s(10));
        assert_eq!(debt_after(&alg, 10, 0, 5 * S), refusing(10));
        // Half-way into the next window, half of the last one still weighs.
        assert_eq!(debt_after(&alg, 10, 0, 15 * S), owes(5));
        assert_eq!(debt_after(&alg, 10, 0, 20 * S), Debt::NONE);
    }

    #[test]
    fn stepped_window_owes_the_steps_inside_the_window() {
        let alg = SteppedWindow::new(per_10s(4), Some(Duration::from_secs(1))).unwrap();
        assert_eq!(debt_after(&alg, 4, 0, 9 * S), refusing(4));
        assert_eq!(debt_after(&alg, 3, 0, 9 * S), owes(3));
        assert_eq!(debt_after(&alg, 4, 0, 11 * S), Debt::NONE);
    }

    #[test]
    fn token_bucket_owes_the_tokens_not_yet_refilled() {
        // 1 token a second, 4 at most.
        let alg = TokenBucket::new(per_10s(10), 4).unwrap();
        assert_eq!(debt_after(&alg, 4, 0, 0), refusing(4));
        assert_eq!(debt_after(&alg, 4, 0, S), owes(3));
        assert_eq!(debt_after(&alg, 4, 0, 4 * S), Debt::NONE);
    }

    #[test]
    fn gcra_owes_the_burst_not_yet_recovered() {
        let alg = Gcra::new(per_10s(10), 4).unwrap();
        assert_eq!(debt_after(&alg, 4, 0, 0), refusing(4));
        assert_eq!(debt_after(&alg, 4, 0, 2 * S), owes(2));
        assert_eq!(debt_after(&alg, 4, 0, 4 * S), Debt::NONE);
    }

    #[test]
    fn leaky_bucket_owes_its_queue() {
        let alg = LeakyBucket::new(per_10s(10), 4).unwrap();
        assert_eq!(debt_after(&alg, 4, 0, 0), refusing(4));
        assert_eq!(debt_after(&alg, 4, 0, 3 * S), owes(1));
        assert_eq!(debt_after(&alg, 4, 0, 4 * S), Debt::NONE);
    }

    #[test]
    fn concurrency_owes_its_leases_in_flight() {
        let alg = Concurrency::new(3, Duration::from_secs(10)).unwrap();
        let mut state = alg.new_state();
        let lease = alg.check(&mut state, 0, 1).unwrap().lease.unwrap();
        alg.check(&mut state, 0, 2).unwrap();
        assert_eq!(alg.debt(&state, S), refusing(3));
        assert!(alg.release(&mut state, lease));
        assert_eq!(alg.debt(&state, S), owes(2));
        // Leases not released expire with their TTL.
        assert_eq!(alg.debt(&state, 10 * S), Debt::NONE);
    }
}
